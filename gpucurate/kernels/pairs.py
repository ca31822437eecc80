"""CPU kernels for LSH candidate pairs, their verification and connected components.

Documents are rows ``0..n-1`` of the global document table (input order); shingle sets are in the
CSR layout written by ``minhash.shingle_minhash`` (distinct hashes of a document, in any order).
"""

from __future__ import annotations

import numpy as np

from ..engine.threads import thread_map
from .hashing import U64
from .jit import njit


@njit(nogil=True, cache=True)
def _pairs_of_buckets(keys, max_bucket, anchors):
    """How many pairs ``_emit_bucket_pairs`` writes for ``keys`` (equal keys adjacent)."""
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
    return total


@njit(nogil=True, cache=True)
def _emit_bucket_pairs(keys, docs, max_bucket, anchors, out, w):
    """Write the pairs of ``bucket_pairs``' rule into ``out`` from ``out[w]`` on; return the new end."""
    m = keys.shape[0]
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
    return w


@njit(nogil=True, cache=True)
def bucket_pairs(keys, docs, max_bucket, anchors):
    """Candidate pairs from LSH buckets, walked in key order (sequential memory access).

    Parameters
    ----------
    keys : uint64[m] -- band keys with equal keys adjacent (e.g. sorted).
    docs : int64[m] -- the document of each key, in any order within a bucket. Large buckets are
        sorted in place by document, so the anchors below are the same whatever the sort left.
    max_bucket, anchors : buckets up to ``max_bucket`` members give all their pairs; in a larger one
        the first ``anchors`` members (by document) pair with every later member and the others only
        with their successor, which bounds the pairs of a bucket by ``m * (anchors + 1)``.

    Returns
    -------
    uint64[p] -- ``i << 32 | j`` with ``i < j``; a pair found in several bands appears several times
    (``band_pairs`` and ``candidate_pairs`` remove the repeats).
    """
    out = np.empty(_pairs_of_buckets(keys, max_bucket, anchors), dtype=np.uint64)
    return out[:_emit_bucket_pairs(keys, docs, max_bucket, anchors, out, 0)]


#: odd 64-bit multiplier (Fibonacci hashing): spreads keys over the radix bins even when they are not
#: uniform hashes, and maps equal keys to one bin
_SPREAD = U64(0x9E3779B97F4A7C15)


@njit(nogil=True, cache=True, aot=("i8, i8",))
def _radix_bits(count, per_bin):
    """Bits of a radix split of ``count`` entries into bins of about ``per_bin`` (at least 1 bit)."""
    bits = 1
    while (1 << bits) * per_bin < count and bits < 24:
        bits += 1
    return bits


@njit(nogil=True, cache=True)
def _bin_starts(keys, bits):
    """int64[2**bits + 1]: where each radix bin of ``keys`` (the top ``bits`` bits of the spread key) starts."""
    shift = U64(64 - bits)
    start = np.zeros((1 << bits) + 1, np.int64)
    for x in range(keys.shape[0]):
        start[np.int64((keys[x] * _SPREAD) >> shift) + 1] += 1
    for b in range(1 << bits):
        start[b + 1] += start[b]
    return start


@njit(nogil=True, cache=True, aot=("u8[:], i8, i8",))
def split_by_key(flat, bands, bits):
    """Band entries ``(key, document)`` of ``flat`` (``uint64[n * bands]``, row-major ``[n, bands]``)
    bucketed by the top ``bits`` bits of their spread key: ``(keys uint64[m], docs int64[m], start
    int64[2**bits + 1])``, bin ``b`` being ``start[b]:start[b + 1]``, documents ascending within a bin. Equal
    keys land in one bin whatever their band."""
    m = flat.shape[0]
    shift = U64(64 - bits)
    start = _bin_starts(flat, bits)
    fill = start[:-1].copy()
    keys = np.empty(m, np.uint64)
    docs = np.empty(m, np.int64)
    x = 0
    for d in range(m // bands):
        for _ in range(bands):
            key = flat[x]
            b = np.int64((key * _SPREAD) >> shift)
            keys[fill[b]] = key
            docs[fill[b]] = d
            fill[b] += 1
            x += 1
    return keys, docs, start


@njit(nogil=True, cache=True, aot=("u8[:], i8[:], i8",))
def split_entries(keys, docs, bits):
    """``split_by_key`` of band entries given as ``(keys uint64[m], docs int64[m])`` (documents in the order
    they stay in within a bin)."""
    m = keys.shape[0]
    shift = U64(64 - bits)
    start = _bin_starts(keys, bits)
    fill = start[:-1].copy()
    out_keys = np.empty(m, np.uint64)
    out_docs = np.empty(m, np.int64)
    for x in range(m):
        b = np.int64((keys[x] * _SPREAD) >> shift)
        out_keys[fill[b]] = keys[x]
        out_docs[fill[b]] = docs[x]
        fill[b] += 1
    return out_keys, out_docs, start


def entry_pairs(keys: np.ndarray, docs: np.ndarray, max_bucket: int, anchors: int) -> np.ndarray:
    """``bucket_pairs`` of band entries ``(keys uint64[m], docs int64[m])`` in any order, sorted and without
    repeats (``uint64``, ``i << 32 | j``): the driver path's radix bins (``candidate_pairs``), in linear work
    where a sort of the entries by key was ``O(m log m)``."""
    if not len(keys):
        return np.empty(0, np.uint64)
    bits = _radix_bits(len(keys), 1 << 16)
    keys, docs, start = split_entries(np.ascontiguousarray(keys, np.uint64), np.ascontiguousarray(docs, np.int64),
                                      bits)
    return bin_pairs(keys, docs, start, bits, 0, 1 << bits, max_bucket, anchors)


@njit(nogil=True, cache=True, aot=("u8[:], i8[:], i8[:], i8, i8, i8, i8, i8",))
def bin_pairs(keys, docs, start, bits, bin_lo, bin_hi, max_bucket, anchors):
    """``bucket_pairs`` of the bins ``bin_lo..bin_hi-1`` of ``split_by_key``, sorted and without repeats
    (``uint64[p]``, ``i << 32 | j``).

    Each bin (tens of thousands of entries, which stay in cache) is grouped by key with a counting sort on
    the next bits of the spread key, then an insertion sort within each small group; documents stay
    ascending within a bucket. Linear work, where one sort of all ``n * bands`` entries is ``O(m log m)``
    over main memory.
    """
    widest = 1
    for b in range(bin_lo, bin_hi):
        widest = max(widest, start[b + 1] - start[b])
    fine = _radix_bits(widest, 16)
    shift = U64(64 - fine)
    n_fine = 1 << fine
    fine_start = np.empty(n_fine + 1, np.int64)
    fill = np.empty(n_fine, np.int64)
    bin_keys = np.empty(widest, np.uint64)
    bin_docs = np.empty(widest, np.int64)
    out = np.empty(max(16, start[bin_hi] - start[bin_lo]), np.uint64)
    w = 0
    for b in range(bin_lo, bin_hi):
        lo, size = start[b], start[b + 1] - start[b]
        fine_start[:] = 0
        for x in range(lo, lo + size):
            fine_start[np.int64(((keys[x] * _SPREAD) << U64(bits)) >> shift) + 1] += 1
        for f in range(n_fine):
            fine_start[f + 1] += fine_start[f]
        fill[:] = fine_start[:n_fine]
        for x in range(lo, lo + size):
            f = np.int64(((keys[x] * _SPREAD) << U64(bits)) >> shift)
            bin_keys[fill[f]] = keys[x]
            bin_docs[fill[f]] = docs[x]
            fill[f] += 1
        for f in range(n_fine):
            g0, g1 = fine_start[f], fine_start[f + 1]
            if g1 - g0 > 64:  # many equal keys: a stable sort, not a quadratic one
                order = np.argsort(bin_keys[g0:g1], kind="mergesort")
                bin_keys[g0:g1] = bin_keys[g0:g1][order]
                bin_docs[g0:g1] = bin_docs[g0:g1][order]
                continue
            for y in range(g0 + 1, g1):
                key, doc = bin_keys[y], bin_docs[y]
                z = y - 1
                while z >= g0 and bin_keys[z] > key:
                    bin_keys[z + 1] = bin_keys[z]
                    bin_docs[z + 1] = bin_docs[z]
                    z -= 1
                bin_keys[z + 1] = key
                bin_docs[z + 1] = doc
        need = w + _pairs_of_buckets(bin_keys[:size], max_bucket, anchors)
        if need > out.shape[0]:
            grown = np.empty(max(need, 2 * out.shape[0]), np.uint64)
            grown[:w] = out[:w]
            out = grown
        w = _emit_bucket_pairs(bin_keys[:size], bin_docs[:size], max_bucket, anchors, out, w)
    return _sorted_distinct(out[:w])


@njit(nogil=True, cache=True)
def _sorted_distinct(packed):
    packed = np.sort(packed)
    w = 0
    for t in range(packed.shape[0]):
        if t == 0 or packed[t] != packed[w - 1]:
            packed[w] = packed[t]
            w += 1
    return packed[:w]


@njit(nogil=True, cache=True, aot=("u8[:], u8[:]",))
def _merge_distinct(a, b):
    """The distinct values of two sorted, distinct ``uint64`` arrays, sorted."""
    out = np.empty(a.shape[0] + b.shape[0], np.uint64)
    x = y = w = 0
    while x < a.shape[0] or y < b.shape[0]:
        if y == b.shape[0] or (x < a.shape[0] and a[x] <= b[y]):
            v = a[x]
            x += 1
        else:
            v = b[y]
            y += 1
        if w == 0 or out[w - 1] != v:
            out[w] = v
            w += 1
    return out[:w]


@njit(nogil=True, cache=True, aot=("i8[:], i8[:], i8[:], i8[:], i8[:], i8, i8",))
def new_bucket_pairs(old_offsets, old_items, old_counts, new_offsets, new_items, max_bucket, anchors):
    """The pairs of ``bucket_pairs``' rule that involve a new member, for buckets that held ``old_counts``
    members before new ones (with larger ids) joined: ``uint64[p]`` ``i << 32 | j`` with ``i < j``, a pair
    found in several buckets repeated.

    Bucket ``g`` has old members ``old_items[old_offsets[g]:old_offsets[g + 1]]`` (ascending): all of them
    when the bucket stays within ``max_bucket``, else at least its first ``anchors`` followed by its last
    one; and new members ``new_items[new_offsets[g]:new_offsets[g + 1]]`` (ascending). In a bucket of at
    most ``max_bucket`` members a new one pairs with every earlier member; in a larger one with the first
    ``anchors`` members and its predecessor, as ``bucket_pairs`` pairs the whole bucket.
    """
    total = 0
    for g in range(old_counts.shape[0]):
        k = new_offsets[g + 1] - new_offsets[g]
        size = old_counts[g] + k
        if size <= max_bucket:
            total += k * old_counts[g] + k * (k - 1) // 2
        else:
            total += k * (anchors + 1)
    out = np.empty(total, np.uint64)
    w = 0
    for g in range(old_counts.shape[0]):
        o0, o1 = old_offsets[g], old_offsets[g + 1]
        n0, n1 = new_offsets[g], new_offsets[g + 1]
        n_old = old_counts[g]
        if n_old + (n1 - n0) <= max_bucket:
            for t in range(n0, n1):
                y = new_items[t]
                for x in range(o0, o1):
                    out[w] = (U64(old_items[x]) << U64(32)) | U64(y)
                    w += 1
                for x in range(n0, t):
                    out[w] = (U64(new_items[x]) << U64(32)) | U64(y)
                    w += 1
            continue
        for t in range(n0, n1):
            y = new_items[t]
            p = n_old + t - n0  # y's position in the bucket
            lim = min(anchors, p)
            for q in range(lim):  # the first members: old ones (the head read), then new ones
                x = old_items[o0 + q] if q < n_old else new_items[n0 + q - n_old]
                out[w] = (U64(x) << U64(32)) | U64(y)
                w += 1
            if p - 1 >= lim:
                x = old_items[o1 - 1] if t == n0 else new_items[t - 1]
                out[w] = (U64(x) << U64(32)) | U64(y)
                w += 1
    return out[:w]


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


def candidate_pairs(band_keys: np.ndarray, max_bucket: int, anchors: int,
                    threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Distinct LSH candidate pairs of documents ``0..n-1`` given their ``uint64[n, bands]`` band keys (a
    bucket is one key value, whatever its band); sorted by ``(i, j)`` with ``i < j``. Deterministic: the
    result does not depend on sort stability or on ``threads`` (the key bins are split between them)."""
    flat = np.ascontiguousarray(band_keys).ravel()
    bits = _radix_bits(len(flat), 1 << 16)
    keys, docs, start = split_by_key(flat, band_keys.shape[1], bits)
    # bins cut into runs of about equal entries, a few per thread so that one slow bin does not hold the rest
    runs = max(1, min(4 * threads, 1 << bits))
    cuts = np.unique(np.searchsorted(start, np.linspace(0, len(flat), runs + 1), side="right") - 1)
    cuts[-1] = 1 << bits
    parts = thread_map(lambda c: bin_pairs(keys, docs, start, bits, c[0], c[1], max_bucket, anchors),
                       [(a, b) for a, b in zip(cuts[:-1], cuts[1:]) if b > a], threads)
    packed = parts[0] if parts else np.empty(0, np.uint64)
    for more in parts[1:]:  # runs of bins hold distinct keys, not distinct pairs: merge away the repeats
        packed = _merge_distinct(packed, more)
    return (packed >> np.uint64(32)).astype(np.int64), (packed & np.uint64(0xFFFFFFFF)).astype(np.int64)


@njit(nogil=True, cache=True, aot=("i8[:], i8",))
def bucket_order(bucket, n_buckets):
    """``(order int64[n], cuts int64[n_buckets + 1])``: the rows of each bucket (``bucket`` int64[n], values in
    ``0..n_buckets-1``) in their order, bucket ``b``'s at ``order[cuts[b]:cuts[b + 1]]``: a stable argsort by
    bucket in two passes (a counting sort), for an exchange's split."""
    cuts = np.zeros(n_buckets + 1, dtype=np.int64)
    for t in range(bucket.shape[0]):
        if bucket[t] < 0 or bucket[t] >= n_buckets:
            raise ValueError("a bucket out of range")
        cuts[bucket[t] + 1] += 1
    for b in range(n_buckets):
        cuts[b + 1] += cuts[b]
    at = cuts[:-1].copy()
    order = np.empty(bucket.shape[0], dtype=np.int64)
    for t in range(bucket.shape[0]):
        b = bucket[t]
        order[at[b]] = t
        at[b] += 1
    return order, cuts


@njit(nogil=True, cache=True, aot=("u8[:], i8, i8",))
def distinct_pairs(packed, first_row, n_rows):
    """The distinct pairs of ``packed`` (uint64 ``i << 32 | j``, repeats allowed, every ``i`` in
    ``first_row .. first_row + n_rows - 1``), sorted: a counting sort by ``i``, then each row's few ``j``
    sorted on their own (a candidate pair comes once per band it shares; ``np.unique`` sorted them all as
    64-bit keys, half of the out-of-core verification's time on a templated corpus)."""
    low = U64(0xFFFFFFFF)
    cuts = np.zeros(n_rows + 1, dtype=np.int64)
    for t in range(packed.shape[0]):
        r = np.int64(packed[t] >> U64(32)) - first_row
        if r < 0 or r >= n_rows:
            raise ValueError("a pair's first row out of range")
        cuts[r + 1] += 1
    for r in range(n_rows):
        cuts[r + 1] += cuts[r]
    at = cuts[:-1].copy()
    by_row = np.empty(packed.shape[0], dtype=np.uint64)
    for t in range(packed.shape[0]):
        r = np.int64(packed[t] >> U64(32)) - first_row
        by_row[at[r]] = packed[t] & low
        at[r] += 1
    out = np.empty(packed.shape[0], dtype=np.uint64)
    w = 0
    for r in range(n_rows):
        js = np.sort(by_row[cuts[r]:cuts[r + 1]])
        high = U64(first_row + r) << U64(32)
        for k in range(js.shape[0]):
            if k == 0 or js[k] != js[k - 1]:
                out[w] = high | js[k]
                w += 1
    return out[:w].copy()


@njit(nogil=True, cache=True, aot=("i8[:], u8[:], i8[:]",))
def take_sets(offsets, values, idx):
    """The values of the CSR sets ``idx`` (int64[k]) of ``(offsets int64[n + 1], values uint64)``, concatenated
    in that order (no temporaries the size of the output)."""
    total = 0
    for t in range(idx.shape[0]):
        total += offsets[idx[t] + 1] - offsets[idx[t]]
    out = np.empty(total, dtype=np.uint64)
    w = 0
    for t in range(idx.shape[0]):
        start, stop = offsets[idx[t]], offsets[idx[t] + 1]
        out[w:w + stop - start] = values[start:stop]
        w += stop - start
    return out


@njit(nogil=True, cache=True)
def _table_size(count):
    size = 16
    while size < 2 * count:
        size *= 2
    return size


@njit(nogil=True, cache=True, aot=("i8[:], u8[:], i8[:], i8[:]",))
def jaccard_pairs(offsets, values, pi, pj):
    """Exact Jaccard ``|A & B| / |A | B|`` of each pair of sets of one CSR ``(offsets, values)``; float64[p].
    Pairs sorted by ``pi`` reuse the hash table built for ``A``. Empty sets give 0."""
    return jaccard_between(offsets, values, offsets, values, pi, pj)


@njit(nogil=True, cache=True, aot=("i8[:], u8[:], i8[:], u8[:], i8[:], i8[:]",))
def jaccard_between(a_offsets, a_values, b_offsets, b_values, pi, pj):
    """``jaccard_pairs`` of sets ``pi`` of the CSR ``(a_offsets, a_values)`` and sets ``pj`` of the CSR
    ``(b_offsets, b_values)``: two partitions' sets scored where they are, without one CSR of both."""
    p = pi.shape[0]
    out = np.zeros(p, dtype=np.float64)
    max_count = 1
    for t in range(p):
        max_count = max(max_count, a_offsets[pi[t] + 1] - a_offsets[pi[t]])
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
            mask = U64(_table_size(a_offsets[a + 1] - a_offsets[a]) - 1)
            for r in range(a_offsets[a], a_offsets[a + 1]):
                x = a_values[r]
                slot = np.int64(x & mask)
                while stamp[slot] == t + 1:
                    slot = (slot + 1) & mask
                stamp[slot] = t + 1
                table[slot] = x
            owner = t + 1
        b = pj[t]
        inter = 0
        for r in range(b_offsets[b], b_offsets[b + 1]):
            x = b_values[r]
            slot = np.int64(x & mask)
            while stamp[slot] == owner:
                if table[slot] == x:
                    inter += 1
                    break
                slot = (slot + 1) & mask
        union = (a_offsets[a + 1] - a_offsets[a]) + (b_offsets[b + 1] - b_offsets[b]) - inter
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


@njit(nogil=True, cache=True, aot=("i8, i8[:], i8[:]",))
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
