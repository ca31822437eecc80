"""CPU kernels for LSH candidate pairs, their verification and connected components.

Documents are rows ``0..n-1`` of the global document table (input order); shingle sets are in the
CSR layout written by ``minhash.shingle_minhash`` (distinct hashes of a document, in any order).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .hashing import U64


@njit(nogil=True, cache=True)
def _bucket_bounds(keys):
    """For each position of the sorted ``keys``, the start and end of its run of equal keys."""
    m = keys.shape[0]
    start = np.empty(m, dtype=np.int64)
    end = np.empty(m, dtype=np.int64)
    a = 0
    while a < m:
        b = a + 1
        while b < m and keys[b] == keys[a]:
            b += 1
        for q in range(a, b):
            start[q] = a
            end[q] = b
        a = b
    return start, end


@njit(nogil=True, cache=True)
def _neighbours(doc, bands, where, start, end, docs, max_bucket, anchors, scratch):
    """Distinct partners ``j > doc`` of one document over all its buckets, sorted, in ``scratch``;
    returns their count."""
    c = 0
    for band in range(bands):
        p = where[doc * bands + band]
        a, b = start[p], end[p]
        if b - a <= max_bucket:
            for q in range(p + 1, b):
                scratch[c] = docs[q]
                c += 1
        elif p - a < anchors:  # an anchor of a large bucket pairs with every later member
            for q in range(p + 1, b):
                scratch[c] = docs[q]
                c += 1
        elif p + 1 < b:  # any other member only with its successor
            scratch[c] = docs[p + 1]
            c += 1
    if c > 1:
        seg = scratch[:c]
        seg.sort()
        w = 1
        for r in range(1, c):
            if seg[r] != seg[w - 1]:
                seg[w] = seg[r]
                w += 1
        c = w
    return c


@njit(nogil=True, cache=True)
def candidate_pairs(keys, docs, where, n_docs, bands, max_bucket, anchors):
    """Distinct LSH candidate pairs, sorted by ``(i, j)`` with ``i < j``.

    Parameters
    ----------
    keys : uint64[n_docs * bands] -- band keys sorted ascending (band index is part of the key hash).
    docs : int64[...] -- the document of each sorted key; ascending within a bucket (stable sort of the
        document-major key array).
    where : int64[n_docs * bands] -- sorted position of the key of (document d, band j) at ``d * bands + j``.
    max_bucket, anchors : buckets up to ``max_bucket`` members give all their pairs; in a larger one the
        first ``anchors`` members pair with everyone and the others only with their successor.

    Pairs are collected per document (its partners in all its buckets, de-duplicated locally), so no
    global sort of the (bands times larger) raw pair list is needed.

    Returns
    -------
    pi, pj : int64[p]
    """
    start, end = _bucket_bounds(keys)
    cap = 16
    for d in range(n_docs):
        need = 0
        for band in range(bands):
            p = where[d * bands + band]
            need += end[p] - p - 1
        cap = max(cap, need)
    scratch = np.empty(cap, dtype=np.int64)
    total = 0
    for d in range(n_docs):
        total += _neighbours(d, bands, where, start, end, docs, max_bucket, anchors, scratch)
    pi = np.empty(total, dtype=np.int64)
    pj = np.empty(total, dtype=np.int64)
    w = 0
    for d in range(n_docs):
        c = _neighbours(d, bands, where, start, end, docs, max_bucket, anchors, scratch)
        for r in range(c):
            pi[w] = d
            pj[w] = scratch[r]
            w += 1
    return pi, pj


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
