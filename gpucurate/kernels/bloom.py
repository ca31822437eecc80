"""Blocked Bloom filters of uint64 keys: a key's bits lie in one 512-bit block (eight words, one cache line),
so a lookup reads 64 bytes of the filter per key. Six bits per key; with 10 bits of filter per key about
1% of absent keys pass."""

from __future__ import annotations

import numpy as np

from .hashing import U64
from .jit import njit

BLOCK_WORDS = 8
_HASHES = 6
_A = U64(0x9E3779B97F4A7C15)
_B = U64(0xBF58476D1CE4E5B9)


@njit(nogil=True, cache=True)
def _mix(key):
    h = key * _A
    h ^= h >> U64(31)
    h *= _B
    h ^= h >> U64(29)
    return h


@njit(nogil=True, cache=True)
def _block(h, n_blocks):
    return np.int64(((h >> U64(32)) * U64(n_blocks)) >> U64(32))


@njit(nogil=True, cache=True, aot=("u8[:], u8[:], i8",))
def bloom_add(words, keys, n_blocks):
    """Set the bits of ``keys`` in the filter ``words`` (uint64[n_blocks * 8]), in place."""
    for t in range(keys.shape[0]):
        h = _mix(keys[t])
        base = _block(h, n_blocks) * BLOCK_WORDS
        g = h * _A
        for i in range(_HASHES):
            p = (g >> U64(9 * i + 10)) & U64(511)
            words[base + np.int64(p >> U64(6))] |= U64(1) << (p & U64(63))


@njit(nogil=True, cache=True, aot=("u8[:], i8",))
def bloom_blocks(keys, n_blocks):
    """int64[k]: the block of each key."""
    out = np.empty(keys.shape[0], np.int64)
    for t in range(keys.shape[0]):
        out[t] = _block(_mix(keys[t]), n_blocks)
    return out


@njit(nogil=True, cache=True, aot=("u8[:], i8[:], u8[:]",))
def bloom_check(words, at, keys):
    """bool[k]: whether each key may be in the filter, given ``words`` (blocks read, concatenated) and ``at``
    (int64[k], the position of each key's block among them)."""
    out = np.ones(keys.shape[0], np.bool_)
    for t in range(keys.shape[0]):
        h = _mix(keys[t])
        base = at[t] * BLOCK_WORDS
        g = h * _A
        for i in range(_HASHES):
            p = (g >> U64(9 * i + 10)) & U64(511)
            if not (words[base + np.int64(p >> U64(6))] >> (p & U64(63))) & U64(1):
                out[t] = False
                break
    return out
