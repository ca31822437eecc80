"""Exact ground truth and clustering metrics for evaluating near-duplicate detection.

The MinHash/LSH pipeline is approximate; this module gives the exact answer it is measured against.

* ``exact_similar_pairs``: every document pair whose exact Jaccard similarity of shingle sets reaches a
  threshold, by an exact all-pairs set-similarity join (prefix, length and positional filtering as in
  AllPairs/PPJoin, plus a bitmap filter before the final merge), numba-compiled and multithreaded.
  ``brute_force_pairs`` is the plain O(n^2) version used to prove it exact.
* ``jaccard_of_pairs``: exact Jaccard of given pairs.
* ``connected_components``: union-find labels of an edge list.
* ``cluster_metrics``: a predicted clustering scored against ground-truth edges.

Input sets use a CSR layout: document ``d`` has the shingle hashes ``values[offsets[d]:offsets[d+1]]``,
sorted ascending and unique, as uint64. Empty sets never pair with anything.

Threshold rule: a pair qualifies iff ``inter / union >= threshold`` evaluated in float64 (``inter``,
``union`` as exact integers). Every filter below is derived from that same rule with integer searches,
so the fast join and the brute force agree bit for bit, including pairs exactly at the boundary
(4/5 at 0.8). Reported Jaccard values are ``inter / union`` in float64.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import ConfigError
from ..kernels.hashing import fmix64
from ..kernels.jit import njit
from ..kernels.pairs import components

__all__ = [
    "exact_similar_pairs",
    "brute_force_pairs",
    "jaccard_of_pairs",
    "connected_components",
    "cluster_metrics",
]


class EvaluateArgumentError(ConfigError, ValueError):
    """An argument of an evaluation function is invalid (also a ``ValueError``)."""


# token keys below this fit int32 and are sorted packed with their row; tests lower it to cover the
# int64 path (over 2**31 shingle occurrences)
_PACK_LIMIT = np.iinfo(np.int32).max


# ----------------------------------------------------------------------------------------------------
# threshold arithmetic: all exact with respect to the float64 rule ``inter / union >= t``
# ----------------------------------------------------------------------------------------------------


@njit(nogil=True, cache=True)
def _min_frac(s, t):
    """Smallest ``k`` in ``[1, s]`` with ``k / s >= t`` in float64 (``s >= 1``, ``0 < t <= 1``).

    Used both as the smallest partner size of a set of size ``s`` (size filter) and as the smallest
    overlap any qualifying pair involving it can have (probe prefix), since ``inter <= |small|`` and
    ``union >= |large|``, and float division is monotone.
    """
    k = int(np.ceil(t * s))  # a guess, corrected to the exact float rule below
    if k < 1:
        k = 1
    if k > s:
        k = s
    while k > 1 and (k - 1) / s >= t:
        k -= 1
    while k < s and k / s < t:
        k += 1
    return k


@njit(nogil=True, cache=True)
def _min_overlap(sa, sb, t):
    """Smallest overlap ``o`` with ``o / (sa + sb - o) >= t`` in float64; ``min(sa, sb) + 1`` if none."""
    m = min(sa, sb)
    total = sa + sb
    o = int(np.ceil(t * total / (1.0 + t)))  # real-valued bound, corrected below
    if o < 0:
        o = 0
    if o > m + 1:
        o = m + 1
    # o / (total - o) is non-decreasing in o (float division is monotone), so a local search is exact
    while o > 0 and (o - 1) / (total - (o - 1)) >= t:
        o -= 1
    while o <= m and o / (total - o) < t:
        o += 1
    return o


# ----------------------------------------------------------------------------------------------------
# small numba helpers
# ----------------------------------------------------------------------------------------------------


@njit(nogil=True, cache=True)
def _first_unsorted_doc(offsets, values):
    """Index of the first document whose values are not strictly increasing, or -1."""
    for d in range(offsets.shape[0] - 1):
        for k in range(offsets[d] + 1, offsets[d + 1]):
            if values[k] <= values[k - 1]:
                return d
    return -1


@njit(nogil=True, cache=True)
def _merge_count_bounded(a, a0, a1, b, b0, b1, need):
    """``|a[a0:a1] & b[b0:b1]|`` for two sorted, unique runs; stops early (returning a count ``< need``)
    once ``need`` is out of reach (``need=0``: the exact count)."""
    c = 0
    while a0 < a1 and b0 < b1:
        if c + min(a1 - a0, b1 - b0) < need:
            return c
        va = a[a0]
        vb = b[b0]
        if va == vb:
            c += 1
            a0 += 1
            b0 += 1
        elif va < vb:
            a0 += 1
        else:
            b0 += 1
    return c


@njit(inline="always", nogil=True)
def _popcount(x):
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return np.int64((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


@njit(nogil=True, cache=True)
def _repeated_tokens(sorted_values):
    """Distinct values occurring at least twice in a sorted array, and their counts."""
    n = sorted_values.shape[0]
    m = 0
    for k in range(1, n):  # count runs of length >= 2 (at their second element)
        if sorted_values[k] == sorted_values[k - 1]:
            if k == 1 or sorted_values[k - 1] != sorted_values[k - 2]:
                m += 1
    keys = np.empty(m, np.uint64)
    counts = np.zeros(m, np.int64)
    r = -1
    for k in range(1, n):
        if sorted_values[k] == sorted_values[k - 1]:
            if k == 1 or sorted_values[k - 1] != sorted_values[k - 2]:
                r += 1
                keys[r] = sorted_values[k]
                counts[r] = 1
            counts[r] += 1
    return keys, counts


@njit(nogil=True, cache=True)
def _build_table(rep_keys, rep_rank):
    """Open-addressing table value -> rank + 1 (0 = empty); rows are (key, rank + 1) for one cache line."""
    m = rep_keys.shape[0]
    bits = 4
    while (1 << bits) < 2 * m:  # load factor <= 1/2 keeps misses (the common case) short
        bits += 1
    mask = (1 << bits) - 1
    table = np.zeros((1 << bits, 2), np.uint64)
    shift = np.uint64(64 - bits)
    for r in range(m):
        s = np.int64(fmix64(rep_keys[r]) >> shift)
        while table[s, 1] != 0:
            s = (s + 1) & mask
        table[s, 0] = rep_keys[r]
        table[s, 1] = np.uint64(rep_rank[r] + 1)
    return table, bits


@njit(nogil=True, cache=True)
def _gather_range(lo, hi, order, offsets, values, table, bits, off, toks, bitmaps, pack):
    """Fill rows ``[lo, hi)`` (processing order) of ``toks`` (CSR ``off``) and ``bitmaps``.

    Tokens become integer keys ordering them by global rarity: a value seen once gets its own
    occurrence index (unique, and it sorts first; singletons can never be shared, so their relative
    order is irrelevant); a repeated value gets ``len(values) + rank``, ranked by count. Rows are
    left unsorted; with ``pack`` (keys < 2**32, ``toks`` uint64) each entry is ``row << 32 | key``
    so that one global sort orders every row. The bitmap holds one hashed bit per token.
    """
    n_vals = values.shape[0]
    shift = np.uint64(64 - bits)
    mask = (1 << bits) - 1
    bit_mask = np.uint64(bitmaps.shape[1] * 64 - 1)  # the word count is a power of two
    for p in range(lo, hi):
        d = order[p]
        s = off[p]
        for k in range(offsets[d], offsets[d + 1]):
            v = values[k]
            h = fmix64(v)
            slot = np.int64(h >> shift)
            key = k
            while table[slot, 1] != 0:
                if table[slot, 0] == v:
                    key = n_vals + np.int64(table[slot, 1]) - 1
                    break
                slot = (slot + 1) & mask
            if pack:
                toks[s + k - offsets[d]] = (np.uint64(p) << np.uint64(32)) | np.uint64(key)
            else:
                toks[s + k - offsets[d]] = key
            b = h & bit_mask  # low bits: independent of the table slot (high bits)
            bitmaps[p, b >> np.uint64(6)] |= np.uint64(1) << (b & np.uint64(63))


@njit(nogil=True, cache=True)
def _unpack_keys(packed):
    out = np.empty(packed.shape[0], np.int32)
    for k in range(packed.shape[0]):
        out[k] = np.int32(packed[k] & np.uint64(0xFFFFFFFF))
    return out


@njit(nogil=True, cache=True)
def _sort_rows(lo, hi, off, toks):
    for p in range(lo, hi):
        toks[off[p]:off[p + 1]].sort()


@njit(nogil=True, cache=True)
def _build_index(toks, off, first_rep, n_rep, t):
    """Inverted lists over each set's index prefix, entries in processing (= size) order.

    Processing sets by ascending size means a set is only ever compared with larger-or-equal later
    sets, so its required overlap is at least ``_min_overlap(s, s)`` and the shorter index prefix
    ``s - _min_overlap(s, s) + 1`` suffices (the AllPairs/PPJoin "mid-prefix"). Only repeated tokens
    (keys ``first_rep + rank``) are indexed: a token held by one set can never produce a candidate.
    Entries carry (set, position in set, set size) so the probe loop reads them sequentially.
    """
    n = off.shape[0] - 1
    post_off = np.zeros(n_rep + 1, np.int64)
    for p in range(n):
        s = off[p + 1] - off[p]
        plen = s - _min_overlap(s, s, t) + 1
        for k in range(off[p], off[p] + plen):
            r = toks[k] - first_rep
            if r >= 0:
                post_off[r + 1] += 1
    for r in range(n_rep):
        post_off[r + 1] += post_off[r]
    fill = post_off[:-1].copy()
    post_doc = np.empty(post_off[n_rep], np.int32)
    post_pos = np.empty(post_off[n_rep], np.int32)
    post_size = np.empty(post_off[n_rep], np.int32)
    for p in range(n):
        s = off[p + 1] - off[p]
        plen = s - _min_overlap(s, s, t) + 1
        for k in range(off[p], off[p] + plen):
            r = toks[k] - first_rep
            if r >= 0:
                e = fill[r]
                post_doc[e] = p
                post_pos[e] = k - off[p]
                post_size[e] = s
                fill[r] = e + 1
    return post_off, post_doc, post_pos, post_size


@njit(nogil=True, cache=True)
def _probe_range(lo, hi, toks, off, bitmaps, first_rep, post_off, post_doc, post_pos, post_size,
                 doc_ids, t, cnt, last, touched, need_of_size):
    """Join sets at processing positions ``[lo, hi)`` against all earlier (smaller or equal) sets.

    Per-thread scratch: ``cnt`` (n,) int32 shared-prefix count per candidate, -1 once pruned; it must
    be all zero on entry and is left so (kept apart from ``last`` so the hot random reads stay in
    cache). ``last`` (n, 2) int32: last matched positions in the probe set and the candidate.
    ``touched`` (n,) and ``need_of_size`` (max size + 1,). Returns ``(i, j, jaccard)`` with
    ``i < j`` as original ids, unsorted.
    """
    cap = 1024
    out_i = np.empty(cap, np.int64)
    out_j = np.empty(cap, np.int64)
    out_s = np.empty(cap, np.float64)
    m = 0
    n_words = bitmaps.shape[1]
    for p in range(lo, hi):
        base = off[p]
        sy = off[p + 1] - base
        min_size = _min_frac(sy, t)  # smallest partner size, and smallest possible overlap
        plen = sy - min_size + 1  # probe prefix
        for sx in range(min_size, sy + 1):  # required overlap depends only on the partner's size
            need_of_size[sx] = _min_overlap(sx, sy, t)
        nt = 0
        max_size = sy
        for i in range(plen):
            # A first match at probe position i can only reach the overlap needed with partners of
            # size <= max_size. Later matches of bigger partners may be skipped too: they form a
            # suffix of the shared tokens, which the verification merge counts anyway.
            while max_size >= min_size and need_of_size[max_size] > sy - i:
                max_size -= 1
            if max_size < min_size:
                break
            tk = toks[base + i] - first_rep
            if tk < 0:  # a token no other set holds
                continue
            a = post_off[tk]
            b = post_off[tk + 1]
            # length filter: sizes along a list are non-decreasing, binary-search the feasible run
            while a < b:
                mid = (a + b) >> 1
                if post_size[mid] < min_size:
                    a = mid + 1
                else:
                    b = mid
            e = a
            b = post_off[tk + 1]
            while e < b:
                mid = (e + b) >> 1
                if post_size[mid] <= max_size:
                    e = mid + 1
                else:
                    b = mid
            for k in range(a, e):
                x = post_doc[k]
                if x >= p:  # only sets processed before p are "in the index"
                    break
                c = cnt[x]
                if c < 0:  # already pruned for this probe
                    continue
                sx = post_size[k]
                j = post_pos[k]
                # positional filter: the overlap can grow by at most the shorter remaining suffix
                if c + 1 + min(sy - i - 1, sx - j - 1) >= need_of_size[sx]:
                    if c == 0:
                        touched[nt] = x
                        nt += 1
                    cnt[x] = c + 1
                    last[x, 0] = i
                    last[x, 1] = j
                elif c > 0:
                    cnt[x] = -1
                # (c == 0 and failing needs no mark: later matches sit further right, so fail too)
        for q in range(nt):
            x = touched[q]
            c = cnt[x]
            cnt[x] = 0
            if c <= 0:
                continue
            sx = off[x + 1] - off[x]
            need = need_of_size[sx]
            # bitmap filter: every bit set in only one bitmap needs a token outside the overlap
            ham = 0
            for w in range(n_words):
                ham += _popcount(bitmaps[x, w] ^ bitmaps[p, w])
            if sx + sy - ham < 2 * need:
                continue
            # every shared token up to the last matched one is counted; resume the merge after it
            ov = c + _merge_count_bounded(toks, off[x] + last[x, 1] + 1, off[x + 1],
                                          toks, base + last[x, 0] + 1, off[p + 1], need - c)
            if ov >= need:  # same as ov / union >= t, by construction of _min_overlap
                if m == cap:
                    cap *= 2
                    out_i = _grow(out_i, cap)
                    out_j = _grow(out_j, cap)
                    out_s = _grow(out_s, cap)
                di = doc_ids[x]
                dj = doc_ids[p]
                out_i[m] = min(di, dj)
                out_j[m] = max(di, dj)
                out_s[m] = ov / (sx + sy - ov)
                m += 1
    return out_i[:m].copy(), out_j[:m].copy(), out_s[:m].copy()


@njit(nogil=True, cache=True)
def _grow(a, cap):
    b = np.empty(cap, a.dtype)
    for k in range(a.shape[0]):  # a plain loop compiles far faster than slice assignment
        b[k] = a[k]
    return b


@njit(nogil=True, cache=True)
def _brute_force(offsets, values, t):
    n = offsets.shape[0] - 1
    cap = 1024
    out_i = np.empty(cap, np.int64)
    out_j = np.empty(cap, np.int64)
    out_s = np.empty(cap, np.float64)
    m = 0
    for i in range(n):
        si = offsets[i + 1] - offsets[i]
        if si == 0:
            continue
        for j in range(i + 1, n):
            sj = offsets[j + 1] - offsets[j]
            if sj == 0:
                continue
            inter = _merge_count_bounded(values, offsets[i], offsets[i + 1], values, offsets[j], offsets[j + 1], 0)
            jac = inter / (si + sj - inter)
            if jac >= t:
                if m == cap:
                    cap *= 2
                    out_i = _grow(out_i, cap)
                    out_j = _grow(out_j, cap)
                    out_s = _grow(out_s, cap)
                out_i[m] = i
                out_j[m] = j
                out_s[m] = jac
                m += 1
    return out_i[:m].copy(), out_j[:m].copy(), out_s[:m].copy()


@njit(nogil=True, cache=True)
def _jaccard_pairs(offsets, values, pi, pj):
    out = np.empty(pi.shape[0], np.float64)
    for k in range(pi.shape[0]):
        a = pi[k]
        b = pj[k]
        sa = offsets[a + 1] - offsets[a]
        sb = offsets[b + 1] - offsets[b]
        inter = _merge_count_bounded(values, offsets[a], offsets[a + 1], values, offsets[b], offsets[b + 1], 0)
        union = sa + sb - inter
        out[k] = inter / union if union > 0 else 0.0
    return out


# ----------------------------------------------------------------------------------------------------
# public API
# ----------------------------------------------------------------------------------------------------


def _check_threshold(threshold):
    t = float(threshold)
    if not (0.0 < t <= 1.0):
        raise EvaluateArgumentError(f"threshold must be in (0, 1], got {threshold!r}")
    return t


def _check_csr(offsets, values, need_sorted=True):
    offsets = np.ascontiguousarray(offsets)
    values = np.ascontiguousarray(values)
    if offsets.ndim != 1 or offsets.shape[0] < 1 or not np.issubdtype(offsets.dtype, np.integer):
        raise EvaluateArgumentError("offsets must be a 1-D integer array of length n_docs + 1")
    if values.ndim != 1 or not (np.issubdtype(values.dtype, np.integer) or values.size == 0):
        raise EvaluateArgumentError("values must be a 1-D integer (uint64) array")
    offsets = offsets.astype(np.int64, copy=False)
    if values.dtype != np.uint64:
        if values.size and np.issubdtype(values.dtype, np.signedinteger) and values.min() < 0:
            raise EvaluateArgumentError("values must be non-negative (uint64 shingle hashes)")
        values = values.astype(np.uint64)
    if offsets[0] != 0 or offsets[-1] != values.shape[0] or np.any(np.diff(offsets) < 0):
        raise EvaluateArgumentError(
            "offsets must start at 0, be non-decreasing and end at len(values)")
    if need_sorted:
        bad = _first_unsorted_doc(offsets, values)
        if bad >= 0:
            raise EvaluateArgumentError(f"document {bad}: values must be sorted ascending and unique")
    return offsets, values


def _empty_result():
    return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float64)


def _sort_pairs(i, j, s):
    order = np.lexsort((j, i))
    return i[order], j[order], s[order]


def _default_jobs():
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def exact_similar_pairs(offsets, values, threshold, *, n_jobs=None):
    """All document pairs whose exact Jaccard similarity is at least ``threshold``.

    An exact all-pairs set-similarity join: tokens are ordered by global rarity, sets are processed by
    ascending size, only prefixes are indexed and probed (prefix filter), partners outside the
    feasible size range are skipped (length filter), candidates whose overlap can no longer reach the
    bound are dropped (positional filter, then a bound from hashed-token bitmaps), and survivors are
    verified by an exact sorted merge. Every filter only drops pairs that provably fail, so the result
    is identical to ``brute_force_pairs``. Working memory peaks near 25 bytes per shingle occurrence.

    Parameters
    ----------
    offsets : ndarray of shape (n_docs + 1,), int64
        CSR offsets; document ``d`` is ``values[offsets[d]:offsets[d + 1]]``.
    values : ndarray of shape (offsets[-1],), uint64
        Shingle hashes, sorted ascending and unique within each document.
    threshold : float
        Minimum Jaccard similarity, in ``(0, 1]``. A pair qualifies iff ``inter / union >= threshold``
        in float64.
    n_jobs : int or None, default=None
        Worker threads for the join; ``None`` uses every CPU available to the process.

    Returns
    -------
    i : ndarray of shape (n_pairs,), int64
        First document of each pair.
    j : ndarray of shape (n_pairs,), int64
        Second document of each pair, ``i < j``; pairs are sorted by ``(i, j)``.
    jaccard : ndarray of shape (n_pairs,), float64
        Exact Jaccard similarity ``inter / union`` of each pair.
    """
    t = _check_threshold(threshold)
    offsets, values = _check_csr(offsets, values)
    n_jobs = _default_jobs() if n_jobs is None else max(1, int(n_jobs))
    sizes = np.diff(offsets)
    order = np.argsort(sizes, kind="stable")
    order = order[sizes[order] > 0]  # empty sets never pair
    if order.shape[0] < 2:
        return _empty_result()

    n = order.shape[0]
    n_vals = values.shape[0]

    # Global rarity order. Sorting then hashing only the repeated values is several times faster
    # than np.unique(return_inverse=True) on tens of millions of hashes.
    rep_keys, rep_counts = _repeated_tokens(np.sort(values))
    rep_rank = np.empty(rep_keys.shape[0], np.int64)
    rep_rank[np.argsort(rep_counts, kind="stable")] = np.arange(rep_keys.shape[0])
    table, bits = _build_table(rep_keys, rep_rank)
    # one vectorised sort of (row << 32 | key) is several times faster than 10^5 small row sorts
    pack = n_vals + rep_keys.shape[0] < _PACK_LIMIT

    off = np.zeros(n + 1, np.int64)
    np.cumsum(sizes[order], out=off[1:])
    toks = np.empty(n_vals, np.uint64 if pack else np.int64)
    # about 4 bits per token keeps random pairs' bitmaps far apart (a tight overlap bound)
    n_words = 1
    while n_words < 16 and n_words * 64 < 4 * n_vals / n:
        n_words *= 2
    bitmaps = np.zeros((n, n_words), np.uint64)
    _run_chunks(lambda lo, hi: _gather_range(lo, hi, order, offsets, values, table, bits, off, toks,
                                             bitmaps, pack), n, n_jobs)
    if pack:
        toks.sort()
        toks = _unpack_keys(toks)
    else:
        _run_chunks(lambda lo, hi: _sort_rows(lo, hi, off, toks), n, n_jobs)
    post_off, post_doc, post_pos, post_size = _build_index(toks, off, n_vals, rep_keys.shape[0], t)
    doc_ids = order.astype(np.int64)
    max_size = int(sizes.max())
    local = threading.local()

    def probe(lo, hi):
        if not hasattr(local, "cnt"):  # per-thread scratch, reused across chunks
            local.cnt = np.zeros(n, np.int32)
            local.last = np.empty((n, 2), np.int32)
            local.touched = np.empty(n, np.int32)
            local.need = np.empty(max_size + 1, np.int64)
        return _probe_range(lo, hi, toks, off, bitmaps, n_vals, post_off, post_doc, post_pos,
                            post_size, doc_ids, t, local.cnt, local.last, local.touched, local.need)

    parts = _run_chunks(probe, n, n_jobs)
    i = np.concatenate([r[0] for r in parts])
    j = np.concatenate([r[1] for r in parts])
    s = np.concatenate([r[2] for r in parts])
    return _sort_pairs(i, j, s)


def _run_chunks(fn, n, n_jobs):
    """``[fn(lo, hi) for each chunk of range(n)]``, on ``n_jobs`` threads (numba kernels drop the GIL).

    Many small chunks balance the load: in size order, later rows are costlier.
    """
    if n_jobs == 1:
        return [fn(0, n)]
    n_chunks = min(n, 32 * n_jobs)
    edges = np.linspace(0, n, n_chunks + 1).astype(np.int64)
    chunks = [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a]
    with ThreadPoolExecutor(max_workers=n_jobs) as ex:
        return list(ex.map(lambda c: fn(*c), chunks))


def brute_force_pairs(offsets, values, threshold):
    """All pairs with Jaccard ``>= threshold`` by comparing every pair (O(n_docs^2) merges).

    The reference for ``exact_similar_pairs``; only for small inputs (tests, spot checks).

    Parameters
    ----------
    offsets : ndarray of shape (n_docs + 1,), int64
        CSR offsets.
    values : ndarray of shape (offsets[-1],), uint64
        Shingle hashes, sorted ascending and unique within each document.
    threshold : float
        Minimum Jaccard similarity, in ``(0, 1]``.

    Returns
    -------
    i, j : ndarray of shape (n_pairs,), int64
        Pairs with ``i < j``, sorted by ``(i, j)``.
    jaccard : ndarray of shape (n_pairs,), float64
        ``inter / union`` of each pair.
    """
    t = _check_threshold(threshold)
    offsets, values = _check_csr(offsets, values)
    return _brute_force(offsets, values, t)


def jaccard_of_pairs(offsets, values, i, j):
    """Exact Jaccard similarity of the given document pairs.

    Parameters
    ----------
    offsets : ndarray of shape (n_docs + 1,), int64
        CSR offsets.
    values : ndarray of shape (offsets[-1],), uint64
        Shingle hashes, sorted ascending and unique within each document.
    i, j : array-like of shape (n_pairs,), int
        Document indices of each pair, in ``[0, n_docs)``.

    Returns
    -------
    jaccard : ndarray of shape (n_pairs,), float64
        ``|A & B| / |A | B|``; 0.0 when both sets are empty.
    """
    offsets, values = _check_csr(offsets, values)
    i = np.ascontiguousarray(i, dtype=np.int64).ravel()
    j = np.ascontiguousarray(j, dtype=np.int64).ravel()
    n = offsets.shape[0] - 1
    if i.shape != j.shape:
        raise EvaluateArgumentError("i and j must have the same length")
    if i.size and (min(i.min(), j.min()) < 0 or max(i.max(), j.max()) >= n):
        raise EvaluateArgumentError(f"pair indices must be in [0, {n})")
    return _jaccard_pairs(offsets, values, i, j)


def connected_components(n, i, j):
    """Connected components of an undirected graph given as an edge list.

    Parameters
    ----------
    n : int
        Number of nodes.
    i, j : array-like of shape (n_edges,), int
        Edge endpoints, in ``[0, n)``.

    Returns
    -------
    labels : ndarray of shape (n,), int64
        Component label of each node: the smallest node index in its component (isolated nodes are
        their own label).
    """
    n = int(n)
    if n < 0:
        raise EvaluateArgumentError("n must be non-negative")
    i = np.ascontiguousarray(i, dtype=np.int64).ravel()
    j = np.ascontiguousarray(j, dtype=np.int64).ravel()
    if i.shape != j.shape:
        raise EvaluateArgumentError("i and j must have the same length")
    if i.size and (min(i.min(), j.min()) < 0 or max(i.max(), j.max()) >= n):
        raise EvaluateArgumentError(f"edge endpoints must be in [0, {n})")
    return components(n, i, j)


def _pairs(counts):
    counts = counts.astype(np.int64)
    return int(np.sum(counts * (counts - 1) // 2))


def cluster_metrics(pred_labels, true_i, true_j, n):
    """Score a predicted clustering against ground-truth similar pairs.

    True clusters are the connected components of the true edges (pairs with exact Jaccard
    ``>= threshold``, e.g. from ``exact_similar_pairs``). Pair metrics count unordered co-clustered
    document pairs, computed from the contingency table of (predicted cluster, true component) sizes
    without enumerating pairs.

    Parameters
    ----------
    pred_labels : array-like of shape (n,), int
        Predicted cluster label of each document; any integer values (singletons have a label too).
    true_i, true_j : array-like of shape (n_true_edges,), int
        Ground-truth edges.
    n : int
        Number of documents.

    Returns
    -------
    metrics : dict
        - ``n_docs``: ``n``.
        - ``true_edges``: number of true edges; ``edge_recall``: fraction of them whose two ends share
          a predicted cluster (1.0 when there are none).
        - ``pair_precision``, ``pair_recall``, ``pair_f1``: over co-clustered pairs. Precision is 1.0
          when no pair is predicted and recall is 1.0 when no pair is true (nothing to get wrong /
          to find); F1 is their harmonic mean (0.0 if both are 0).
        - ``pred_pairs``, ``true_pairs``, ``true_positive_pairs``: the pair counts behind them.
        - ``false_merges``: predicted clusters containing documents of two or more true components;
          ``false_merge_pairs``: predicted co-clustered pairs not co-clustered in the truth.
        - ``missed_merges``: true components split over two or more predicted clusters;
          ``missed_merge_pairs``: true co-clustered pairs not co-clustered in the prediction.
        - ``pred_clusters``, ``true_clusters``: clusters of size >= 2.
    """
    n = int(n)
    pred_labels = np.asarray(pred_labels).ravel()
    if pred_labels.shape[0] != n:
        raise EvaluateArgumentError(f"pred_labels has {pred_labels.shape[0]} entries, expected n={n}")
    true_i = np.ascontiguousarray(true_i, dtype=np.int64).ravel()
    true_j = np.ascontiguousarray(true_j, dtype=np.int64).ravel()
    true_labels = connected_components(n, true_i, true_j)
    _, pred = np.unique(pred_labels, return_inverse=True)
    pred = pred.astype(np.int64).ravel()

    pred_sizes = np.bincount(pred, minlength=1)
    true_sizes = np.bincount(true_labels, minlength=1)
    # contingency cells (pred cluster, true component) with their sizes
    cells, cell_sizes = np.unique(pred * max(n, 1) + true_labels, return_counts=True)
    cell_pred = cells // max(n, 1)
    cell_true = cells % max(n, 1)

    tp = _pairs(cell_sizes)
    pred_pairs = _pairs(pred_sizes)
    true_pairs = _pairs(true_sizes)
    precision = tp / pred_pairs if pred_pairs else 1.0
    recall = tp / true_pairs if true_pairs else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0

    n_edges = int(true_i.shape[0])
    edge_recall = float(np.mean(pred[true_i] == pred[true_j])) if n_edges else 1.0

    return {
        "n_docs": n,
        "true_edges": n_edges,
        "edge_recall": edge_recall,
        "pair_precision": float(precision),
        "pair_recall": float(recall),
        "pair_f1": float(f1),
        "pred_pairs": pred_pairs,
        "true_pairs": true_pairs,
        "true_positive_pairs": tp,
        # a cluster touching 2+ true components joined documents the truth keeps apart
        "false_merges": int(np.sum(np.bincount(cell_pred, minlength=1) >= 2)),
        "false_merge_pairs": pred_pairs - tp,
        "missed_merges": int(np.sum(np.bincount(cell_true, minlength=1) >= 2)),
        "missed_merge_pairs": true_pairs - tp,
        "pred_clusters": int(np.sum(pred_sizes >= 2)),
        "true_clusters": int(np.sum(true_sizes >= 2)),
    }
