"""The scalar hash functions of gpucurate, defined once for every backend.

All arithmetic is on unsigned 64-bit integers modulo 2**64, little-endian, so the same bytes give the
same hash on any machine and on the GPU. ``define_hash_functions`` holds their one source: the CPU
kernels use it compiled with ``numba.njit``, the CUDA kernels compiled as CUDA device functions.

Definitions (the contract; ``reference_hash_bytes`` is the plain-Python version used by tests):

* ``hash_bytes(b, seed)``: ``h = seed + len(b) * M1``; for each full 8-byte little-endian word ``w``:
  ``k = w * M2; k ^= k >> 29; h = (h ^ k) * M3; h ^= h >> 32``; the 1..7 trailing bytes form one more
  little-endian word mixed the same way; the result is ``fmix64(h)``.
* ``fmix64(x)``: the SplitMix64 finalizer.
* MinHash of a shingle hash ``h`` under permutation ``i``: ``(a_i * h + b_i) >> 32`` (a 32-bit value), with
  ``a_i`` (odd) and ``b_i`` drawn from the SplitMix64 stream of ``seed`` (``permutations``).
* ``fold(h, v)``: ``h = (h ^ v) * M3; h ^= h >> 29``.
* Shingle hash: each unit (word or code point) is hashed with ``hash_bytes(unit, seed)``; a shingle's
  hash is ``fmix64`` of its unit hashes folded, in order, into ``seed ^ M2``.
* LSH band key of band ``j``: ``fmix64`` of the band's ``rows`` 32-bit values folded into
  ``fmix64(seed + (j + 1) * M1)``.
"""

from __future__ import annotations

import numpy as np

from .jit import njit

U64 = np.uint64
M1 = U64(0x9E3779B97F4A7C15)
M2 = U64(0xBF58476D1CE4E5B9)
M3 = U64(0x94D049BB133111EB)
MASK64 = (1 << 64) - 1

#: seed of the exact-stage text hash; shingles use the fuzzy seed so signatures change with it
EXACT_SEED = U64(0x5EED0001)


def define_hash_functions(jit):
    """The scalar hash functions compiled with ``jit``: ``numba.njit(inline="always")`` for the CPU
    kernels (below), ``numba.cuda.jit(device=True)`` for the CUDA kernels (``kernels.cuda``). One
    source, so both backends compute the same bits.

    Returns ``(fmix64, mix_word, load_le64, hash_bytes, minhash_value, band_seed, fold)``.
    """

    @jit
    def fmix64(x):
        x ^= x >> U64(30)
        x *= M2
        x ^= x >> U64(27)
        x *= M3
        x ^= x >> U64(31)
        return x

    @jit
    def mix_word(h, w):
        k = w * M2
        k ^= k >> U64(29)
        h = (h ^ k) * M3
        h ^= h >> U64(32)
        return h

    @jit
    def load_le64(words, i):
        """The 8 bytes at byte offset ``i`` as a little-endian uint64, from ``words`` (uint64 view of the
        byte buffer, padded with at least one zero word) with two aligned loads."""
        q = i >> 3
        r = U64((i & 7) * 8)
        return (words[q] >> r) | ((words[q + 1] << U64(1)) << (U64(63) - r))

    @jit
    def hash_bytes(words, start, end, seed):
        """64-bit hash of bytes ``[start, end)`` of a padded uint64 word buffer (module docstring)."""
        h = seed + U64(end - start) * M1
        i = start
        while i + 8 <= end:
            h = mix_word(h, load_le64(words, i))
            i += 8
        if i < end:
            h = mix_word(h, load_le64(words, i) & ((U64(1) << U64((end - i) * 8)) - U64(1)))
        return fmix64(h)

    @jit
    def minhash_value(a, b, h):
        return np.uint32((a * h + b) >> U64(32))

    @jit
    def band_seed(seed, band):
        return fmix64(seed + U64(band + 1) * M1)

    @jit
    def fold(h, v):
        """Fold a 32- or 64-bit value into a running hash (band keys, shingles of unit hashes)."""
        h = (h ^ U64(v)) * M3
        h ^= h >> U64(29)
        return h

    return fmix64, mix_word, load_le64, hash_bytes, minhash_value, band_seed, fold


fmix64, _mix_word, load_le64, hash_bytes, minhash_value, band_seed, fold = define_hash_functions(
    njit(inline="always", nogil=True))


@njit(inline="always", nogil=True)
def pack_short(values, start, n):
    """``(k0, k1, fits)``: ``values[start:start + n]`` (n <= 16, each below 256: bytes, Latin-1 code points)
    a byte each, little-endian, in two uint64 words, an exact key of a short string; ``fits`` is False when
    a value is 256 or more."""
    k0 = U64(0)
    k1 = U64(0)
    for q in range(n):
        c = values[start + q]
        if c > 255:
            return k0, k1, False
        if q < 8:
            k0 |= U64(c) << U64(8 * q)
        else:
            k1 |= U64(c) << U64(8 * (q - 8))
    return k0, k1, True


def padded_words(data: np.ndarray) -> np.ndarray:
    """Copy a uint8 buffer into a uint64 array with at least one trailing zero word (for
    ``load_le64``); ``.view(np.uint8)`` of the result gives the bytes back. Little-endian hosts only."""
    words = np.zeros(len(data) // 8 + 2, dtype=np.uint64)
    words.view(np.uint8)[:len(data)] = data
    return words


@njit(nogil=True, cache=True, aot=("u8, i8",))
def splitmix64_stream(seed, n):
    out = np.empty(n, dtype=np.uint64)
    state = U64(seed)
    for i in range(n):
        state += M1
        out[i] = fmix64(state)
    return out


def permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """MinHash permutation parameters ``(a, b)``, each ``uint64[num_perm]``; ``a`` is odd."""
    stream = splitmix64_stream(np.uint64(seed & MASK64), 2 * num_perm)
    return stream[0::2] | np.uint64(1), stream[1::2].copy()


# ---------------------------------------------------------------------------------------------
# Plain-Python reference versions: the executable specification used by tests and by peers'
# adapters in the benchmarks. They must agree with the compiled code bit for bit.

def reference_fmix64(x: int) -> int:
    x ^= x >> 30
    x = (x * int(M2)) & MASK64
    x ^= x >> 27
    x = (x * int(M3)) & MASK64
    x ^= x >> 31
    return x


def _reference_mix(h: int, w: int) -> int:
    k = (w * int(M2)) & MASK64
    k ^= k >> 29
    h = ((h ^ k) * int(M3)) & MASK64
    return h ^ (h >> 32)


def reference_hash_bytes(data: bytes, seed: int) -> int:
    h = (seed + len(data) * int(M1)) & MASK64
    full = len(data) - len(data) % 8
    for i in range(0, full, 8):
        h = _reference_mix(h, int.from_bytes(data[i:i + 8], "little"))
    if full < len(data):
        h = _reference_mix(h, int.from_bytes(data[full:], "little"))
    return reference_fmix64(h)


def reference_fold(h: int, v: int) -> int:
    h = ((h ^ v) * int(M3)) & MASK64
    return h ^ (h >> 29)


def reference_minhash(shingle_hashes: list[int], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    sig = np.full(len(a), 0xFFFFFFFF, dtype=np.uint32)
    for h in shingle_hashes:
        for i in range(len(a)):
            v = (((int(a[i]) * h) + int(b[i])) & MASK64) >> 32
            sig[i] = min(sig[i], v)
    return sig


def reference_band_keys(sig: np.ndarray, bands: int, rows: int, seed: int) -> np.ndarray:
    out = np.empty(bands, dtype=np.uint64)
    for j in range(bands):
        h = reference_fmix64((seed + (j + 1) * int(M1)) & MASK64)
        for v in sig[j * rows:(j + 1) * rows]:
            h = reference_fold(h, int(v))
        out[j] = reference_fmix64(h)
    return out
