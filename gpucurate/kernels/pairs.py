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
    """Candidate pairs from LSH buckets.

    Parameters
    ----------
    keys : uint64[m] -- bucket keys sorted ascending; docs : int64[m] -- the document of each key,
        ascending within a bucket.
    max_bucket : buckets up to this size give all their pairs; a larger bucket pairs each member with
        its first ``anchors`` members and with its successor (m * (anchors + 1) pairs, not m**2 / 2).

    Returns
    -------
    pairs : uint64[p] -- ``i << 32 | j`` with ``i < j``, possibly repeated (several bands).
    """
    m = keys.shape[0]
    total = 0
    start = 0
    while start < m:
        end = start + 1
        while end < m and keys[end] == keys[start]:
            end += 1
        size = end - start
        if size <= max_bucket:
            total += size * (size - 1) // 2
        else:
            total += (size - 1) * (anchors + 1)
        start = end
    out = np.empty(total, dtype=np.uint64)
    w = 0
    start = 0
    while start < m:
        end = start + 1
        while end < m and keys[end] == keys[start]:
            end += 1
        size = end - start
        if size <= max_bucket:
            for x in range(start, end):
                for y in range(x + 1, end):
                    if docs[x] != docs[y]:
                        out[w] = (U64(docs[x]) << U64(32)) | U64(docs[y])
                        w += 1
        else:
            for y in range(start + 1, end):
                lim = min(start + anchors, y)
                for x in range(start, lim):
                    out[w] = (U64(docs[x]) << U64(32)) | U64(docs[y])
                    w += 1
                if y - 1 >= lim:
                    out[w] = (U64(docs[y - 1]) << U64(32)) | U64(docs[y])
                    w += 1
        start = end
    return out[:w]


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
    table = np.zeros(_table_size(max_count), dtype=np.uint64)
    current = -1
    mask = U64(0)
    has_zero = False
    for t in range(p):
        a = pi[t]
        if a != current:
            if current >= 0:  # clear the previous document's slots
                for r in range(offsets[current], offsets[current + 1]):
                    x = values[r]
                    if x != 0:
                        slot = np.int64(x & mask)
                        while table[slot] != 0:
                            table[slot] = 0
                            slot = (slot + 1) & mask
            current = a
            mask = U64(_table_size(offsets[a + 1] - offsets[a]) - 1)
            has_zero = False
            for r in range(offsets[a], offsets[a + 1]):
                x = values[r]
                if x == 0:
                    has_zero = True
                    continue
                slot = np.int64(x & mask)
                while table[slot] != 0:
                    slot = (slot + 1) & mask
                table[slot] = x
        b = pj[t]
        inter = 0
        for r in range(offsets[b], offsets[b + 1]):
            x = values[r]
            if x == 0:
                inter += 1 if has_zero else 0
                continue
            slot = np.int64(x & mask)
            while True:
                cur = table[slot]
                if cur == 0:
                    break
                if cur == x:
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
