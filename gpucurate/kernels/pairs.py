"""CPU kernels for LSH candidate pairs, their verification and connected components.

Documents are rows ``0..n-1`` of the global document table (input order); shingle sets are in the
CSR layout written by ``minhash.shingle_minhash`` (distinct hashes of a document, in any order).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .hashing import U64


@njit(nogil=True, cache=True)
def bucket_pairs(keys, docs, max_bucket, anchors):
    """Candidate pairs from LSH buckets, walked in key order (sequential memory access).

    Parameters
    ----------
    keys : uint64[m] -- band keys sorted ascending (the band index is part of each key's hash).
    docs : int64[m] -- the document of each key, in any order within a bucket. Large buckets are
        sorted in place by document, so the anchors below are the same whatever the sort left.
    max_bucket, anchors : buckets up to ``max_bucket`` members give all their pairs; in a larger one
        the first ``anchors`` members (by document) pair with every later member and the others only
        with their successor, which bounds the pairs of a bucket by ``m * (anchors + 1)``.

    Returns
    -------
    uint64[p] -- ``i << 32 | j`` with ``i < j``; a pair found in several bands appears several times
    (``unique_pairs`` removes the repeats).
    """
    m = keys.shape[0]
    total = 0
    a = 0
    while a < m:
        b = a + 1
        while b < m and keys[b] == keys[a]:
            b += 1
        size = b - a
        total += size * (size - 1) // 2 if size <= max_bucket else (size - 1) * (anchors + 1)
        a = b
    out = np.empty(total, dtype=np.uint64)
    w = 0
    a = 0
    while a < m:
        b = a + 1
        while b < m and keys[b] == keys[a]:
            b += 1
        if b - a <= max_bucket:
            for x in range(a, b):
                for y in range(x + 1, b):
                    i, j = min(docs[x], docs[y]), max(docs[x], docs[y])
                    if i != j:
                        out[w] = (U64(i) << U64(32)) | U64(j)
                        w += 1
        else:
            docs[a:b].sort()
            for y in range(a + 1, b):
                lim = min(a + anchors, y)
                for x in range(a, lim):
                    out[w] = (U64(docs[x]) << U64(32)) | U64(docs[y])
                    w += 1
                if y - 1 >= lim:
                    out[w] = (U64(docs[y - 1]) << U64(32)) | U64(docs[y])
                    w += 1
        a = b
    return out[:w]


def unique_pairs(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct pairs of ``bucket_pairs``, sorted by ``(i, j)``: ``(pi, pj)`` int64 arrays.

    ``np.sort`` + a mask, which is many times faster than ``np.unique`` on tens of millions of keys."""
    if len(packed) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    s = np.sort(packed)
    keep = np.empty(len(s), dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    s = s[keep]
    return (s >> np.uint64(32)).astype(np.int64), (s & np.uint64(0xFFFFFFFF)).astype(np.int64)


def pack_pairs(i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """uint64 key ``min << 32 | max`` of each pair (the layout of ``bucket_pairs``), order-independent."""
    lo, hi = np.minimum(i, j).astype(np.uint64), np.maximum(i, j).astype(np.uint64)
    return (lo << np.uint64(32)) | hi


def index_of(values: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """int64 position of each of ``keys`` in ``values`` (any order, distinct), -1 where absent."""
    out = np.full(len(keys), -1, np.int64)
    if len(values) == 0 or len(keys) == 0:
        return out
    order = np.argsort(values, kind="stable")
    pos = np.minimum(np.searchsorted(values[order], keys), len(values) - 1)
    hit = values[order][pos] == keys
    out[hit] = order[pos[hit]]
    return out


def candidate_pairs(band_keys: np.ndarray, max_bucket: int, anchors: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct LSH candidate pairs of documents ``0..n-1`` given their ``uint64[n, bands]`` band keys;
    sorted by ``(i, j)`` with ``i < j``. Deterministic: the result does not depend on sort stability."""
    n, bands = band_keys.shape
    flat = band_keys.ravel()
    order = np.argsort(flat)
    return unique_pairs(bucket_pairs(flat[order], order // bands, max_bucket, anchors))


@njit(nogil=True, cache=True)
def _table_size(count):
    size = 16
    while size < 2 * count:
        size *= 2
    return size


@njit(nogil=True, cache=True)
def jaccard_pairs(offsets, values, pi, pj):
    """Exact Jaccard ``|A & B| / |A | B|`` of each pair; float64[p]. Pairs sorted by ``pi`` reuse the
    hash table built for ``A``. Empty sets give 0."""
    p = pi.shape[0]
    out = np.zeros(p, dtype=np.float64)
    max_count = 1
    for d in range(offsets.shape[0] - 1):
        max_count = max(max_count, offsets[d + 1] - offsets[d])
    size = _table_size(max_count)
    # open addressing; a slot belongs to the current A when its stamp is A's, so no clearing between A's
    table = np.empty(size, dtype=np.uint64)
    stamp = np.zeros(size, dtype=np.int64)
    current = -1
    mask = U64(0)
    owner = 0
    for t in range(p):
        a = pi[t]
        if a != current:
            current = a
            mask = U64(_table_size(offsets[a + 1] - offsets[a]) - 1)
            for r in range(offsets[a], offsets[a + 1]):
                x = values[r]
                slot = np.int64(x & mask)
                while stamp[slot] == t + 1:
                    slot = (slot + 1) & mask
                stamp[slot] = t + 1
                table[slot] = x
            owner = t + 1
        b = pj[t]
        inter = 0
        for r in range(offsets[b], offsets[b + 1]):
            x = values[r]
            slot = np.int64(x & mask)
            while stamp[slot] == owner:
                if table[slot] == x:
                    inter += 1
                    break
                slot = (slot + 1) & mask
        union = (offsets[a + 1] - offsets[a]) + (offsets[b + 1] - offsets[b]) - inter
        out[t] = inter / union if union > 0 else 0.0
    return out


@njit(nogil=True, cache=True)
def signature_agreement(sigs, pi, pj):
    """MinHash Jaccard estimate: fraction of equal signature positions; float64[p]."""
    p = pi.shape[0]
    P = sigs.shape[1]
    out = np.empty(p, dtype=np.float64)
    for t in range(p):
        eq = 0
        for r in range(P):
            if sigs[pi[t], r] == sigs[pj[t], r]:
                eq += 1
        out[t] = eq / P
    return out


@njit(nogil=True, cache=True)
def _find(parent, x):
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


@njit(nogil=True, cache=True)
def components(n, pi, pj):
    """Connected components of the graph with edges ``(pi[t], pj[t])``: int64[n] label of each node,
    the smallest node index of its component (so labels do not depend on edge order)."""
    parent = np.arange(n)
    for t in range(pi.shape[0]):
        a = _find(parent, pi[t])
        b = _find(parent, pj[t])
        if a < b:
            parent[b] = a
        elif b < a:
            parent[a] = b
    for x in range(n):
        parent[x] = _find(parent, x)
    return parent
