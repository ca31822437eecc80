"""CPU array kernels over Arrow string buffers (int64 offsets + UTF-8 bytes).

No Python runs per document or per shingle: each function is one compiled loop over a partition.
Shingles (the contract, mirrored by ``gpucurate.stages.normalize.reference_shingles``):

* word mode: the normalized text is split on single spaces (normalization collapses whitespace);
  a shingle is ``k`` consecutive words joined by one space; a text of 1..k-1 words is one shingle.
* char mode: a shingle is ``n`` consecutive Unicode code points; a shorter text is one shingle.
* an empty text has no shingles (its signature is all ``0xFFFFFFFF`` and it never joins a cluster).

Shingle hashes are defined in ``hashing`` (units hashed, then folded).
"""

from __future__ import annotations

import numpy as np

from ..engine.threads import thread_map
from .hashing import EXACT_SEED, M2, U64, band_seed, fmix64, fold, hash_bytes, load_le64, minhash_value
from .jit import njit
from .text import spaceless_texts

WORD, CHAR = 0, 1
#: word shingles, or character shingles for a text mostly in scripts without spaces (``text.spaceless_texts``)
AUTO = 2
#: ``fuzzy.shingle`` -> mode
MODES = {"word": WORD, "char": CHAR, "auto": AUTO}
EMPTY_SIG = np.uint32(0xFFFFFFFF)
SPACES, LOW7 = U64(0x2020202020202020), U64(0x7F7F7F7F7F7F7F7F)
BYTE_INDEX = U64(0x0001020304050607)  # (1 << 8k) * BYTE_INDEX has k in its top byte


@njit(nogil=True, cache=True, aot=("i8[:], u8[:]",))
def text_hashes(offsets, words):
    """``uint64[n]`` hash of each text's bytes (the exact-dedup key)."""
    n = offsets.shape[0] - 1
    out = np.empty(n, dtype=np.uint64)
    for d in range(n):
        out[d] = hash_bytes(words, offsets[d], offsets[d + 1], EXACT_SEED)
    return out


def unit_bounds(offsets: np.ndarray, data: np.ndarray, mode: int) -> tuple[np.ndarray, np.ndarray]:
    """Unit boundaries of every text, found for the whole buffer at once (vectorized).

    Returns ``(bounds, cursor)``: in word mode ``bounds`` holds the byte offsets of the spaces, in
    char mode the offsets where code points start; text ``d`` owns ``bounds[cursor[d]:cursor[d + 1]]``.
    """
    bounds = np.flatnonzero(data == 32) if mode == WORD else np.flatnonzero((data & 0xC0) != 0x80)
    return bounds, np.searchsorted(bounds, offsets).astype(np.int64)


def shingle_counts(offsets: np.ndarray, cursor: np.ndarray, mode: int, k: int) -> np.ndarray:
    """``int64[n]`` number of shingles of each text (0 for an empty text)."""
    units = np.diff(cursor) + (1 if mode == WORD else 0)
    units[np.diff(offsets) == 0] = 0
    return np.where(units > k, units - k + 1, np.minimum(units, 1)).astype(np.int64)


@njit(nogil=True, cache=True)
def _minhash_into(values, start, end, perm_a, perm_b, sigs, d):
    """``sigs[d, i] = min over values[start:end] of minhash_value(a_i, b_i, h)``, for ``i < sigs.shape[1]``
    (indices, not a slice and a row: a view made per text costs its reference counting).

    The permutation loop is branch-free (``min``, not ``if``), so that it vectorizes, and takes four hashes
    at a time, so that the signature is loaded and stored a quarter as often: 2.5x the speed of one hash at a
    time with a branch on AVX2."""
    P = sigs.shape[1]
    for i in range(P):
        sigs[d, i] = EMPTY_SIG
    q = start
    while q + 4 <= end:
        h0, h1, h2, h3 = values[q], values[q + 1], values[q + 2], values[q + 3]
        for i in range(P):
            a, b = perm_a[i], perm_b[i]
            v = min(min(minhash_value(a, b, h0), minhash_value(a, b, h1)),
                    min(minhash_value(a, b, h2), minhash_value(a, b, h3)))
            sigs[d, i] = min(sigs[d, i], v)
        q += 4
    while q < end:
        h = values[q]
        for i in range(P):
            sigs[d, i] = min(sigs[d, i], minhash_value(perm_a[i], perm_b[i], h))
        q += 1


@njit(nogil=True, cache=True)
def _scan_units(words, data, start, end, mode, seed, unit_hash):
    """Hash every unit of the non-empty text ``data[start:end]`` into ``unit_hash`` (at least ``end - start
    + 1`` long); return the count. Word mode: the runs between single spaces; char mode: the code points
    (from each byte that does not continue a UTF-8 sequence to the next). The same units as ``unit_bounds``."""
    c = 0
    if mode == WORD:
        # eight bytes at a time: the spaces' high bits from an exact zero-byte test of the bytes XOR 0x20,
        # the first one's byte index by a multiply (a branch per byte mispredicts at every space)
        w0 = i = start
        while i < end:
            x = load_le64(words, i) ^ SPACES
            z = ~(((x & LOW7) + LOW7) | x | LOW7)
            if z == 0:
                i += 8
                continue
            j = i + np.int64((((z & (~z + U64(1))) >> U64(7)) * BYTE_INDEX) >> U64(56))
            if j >= end:
                break
            unit_hash[c] = hash_bytes(words, w0, j, seed)
            w0 = i = j + 1
            c += 1
        unit_hash[c] = hash_bytes(words, w0, end, seed)
        return c + 1
    u0 = start
    for i in range(start + 1, end):
        if (data[i] & 0xC0) != 0x80:
            unit_hash[c] = hash_bytes(words, u0, i, seed)
            u0 = i
            c += 1
    unit_hash[c] = hash_bytes(words, u0, end, seed)
    return c + 1


@njit(nogil=True, cache=True, aot=("i8[:], u8[:], u1[:], i8, i8, u8, u8[:], u8[:], u4[:,:]",))
def shingle_minhash(offsets, words, data, mode, k, seed, perm_a, perm_b, sigs):
    """MinHash signatures and distinct shingle hashes of every text.

    Parameters
    ----------
    offsets, words : int64[n + 1], uint64[m // 8 + 2] -- Arrow string buffers of the normalized
        texts, the bytes as ``hashing.padded_words``; data : uint8[m] -- the same bytes (``words.view``).
    mode, k : WORD or CHAR, shingle length in units.
    seed : uint64 -- shingle hash seed.
    perm_a, perm_b : uint64[P] -- permutations (``hashing.permutations``).
    sigs : uint32[n, P] -- written: the MinHash signatures (all ``EMPTY_SIG`` for an empty text); a slice of
        the caller's output, so that batches need no concatenation.
    (``signatures`` does all of this; this is the compiled core. Units are found by scanning each text's
    bytes here, so that no array of unit bounds is made for the batch.)

    Returns
    -------
    uniq_counts : int64[n] -- distinct shingles of each text.
    values : uint64[uniq_counts.sum()] -- the distinct shingles of text 0, then of text 1, ... (each in
        first-seen order): a CSR array with offsets ``cumsum(uniq_counts)`` (a view of a buffer grown as
        needed, so no second pass compacts it).
    """
    n = offsets.shape[0] - 1
    longest = 1
    for d in range(n):
        longest = max(longest, offsets[d + 1] - offsets[d])
    unit_hash = np.empty(longest + 1, dtype=np.uint64)  # a text has at most a unit a byte
    shingle = np.empty(longest + 1, dtype=np.uint64)
    values = np.empty(max(16, (offsets[n] - offsets[0]) // 4), dtype=np.uint64)
    uniq_counts = np.zeros(n, dtype=np.int64)
    # distinct shingles: open addressing; a slot holds a hash of text d when its stamp is d + 1, so the
    # table needs no clearing between texts (written out here because a helper call is slower)
    table = np.empty(1024, dtype=np.uint64)
    stamp = np.zeros(1024, dtype=np.int64)
    shingle_seed = seed ^ M2
    base = 0  # where text d's distinct shingles start: the sum of the earlier texts' counts
    for d in range(n):
        s, e = offsets[d], offsets[d + 1]
        if e <= s:
            sigs[d, :] = EMPTY_SIG
            continue
        units = _scan_units(words, data, s, e, mode, seed, unit_hash)
        nsh = units - k + 1 if units > k else 1
        size = 16
        while size < 2 * nsh:
            size *= 2
        if size > table.shape[0]:  # a longer text than any before: a larger table, from stamp 0
            table = np.empty(size, dtype=np.uint64)
            stamp = np.zeros(size, dtype=np.int64)
        if base + nsh > values.shape[0]:
            grown = np.empty(max(2 * values.shape[0], base + nsh), dtype=np.uint64)
            grown[:base] = values[:base]
            values = grown
        mask = U64(size - 1)
        # the shingles' hashes first, in a loop without branches when every window is full (the usual
        # case), so that the folds of consecutive shingles overlap; then their distinct values
        if units >= k:
            for u in range(nsh):
                h = shingle_seed
                for t in range(k):
                    h = fold(h, unit_hash[u + t])
                shingle[u] = fmix64(h)
        else:
            h = shingle_seed
            for t in range(units):
                h = fold(h, unit_hash[t])
            shingle[0] = fmix64(h)
        w = 0
        for u in range(nsh):
            h = shingle[u]
            slot = np.int64(h & mask)
            while stamp[slot] == d + 1 and table[slot] != h:
                slot = (slot + 1) & mask
            if stamp[slot] == d + 1:
                continue
            stamp[slot] = d + 1
            table[slot] = h
            values[base + w] = h
            w += 1
        _minhash_into(values, base, base + w, perm_a, perm_b, sigs, d)
        uniq_counts[d] = w
        base += w
    return uniq_counts, values[:base]


def grown(buffer: np.ndarray, kept: int, needed: int) -> np.ndarray:
    """A buffer of at least ``needed`` values (and half as many again) with ``buffer[:kept]`` at its start."""
    out = np.empty(needed + needed // 2, buffer.dtype)
    out[:kept] = buffer[:kept]
    return out


@njit(nogil=True, cache=True, aot=("i8[:], u8[:], i8[:], u8[:], i8",))
def take_sets_into(offsets, values, rows, out, start):
    """Copy the sets ``rows`` (int64[k]) of a CSR ``(offsets int64[n + 1], values uint64[..])``, in that order,
    into ``out`` from ``start``; return where they end."""
    pos = start
    for t in range(rows.shape[0]):
        a, b = offsets[rows[t]], offsets[rows[t] + 1]
        out[pos:pos + b - a] = values[a:b]
        pos += b - a
    return pos


@njit(nogil=True, cache=True, aot=("i8[:], u1[:], i8[:], u1[:]",))
def gather_texts_into(offsets, data, rows, out):
    """The texts ``rows`` (int64[k]) of Arrow string buffers packed together into ``out`` (uint8, long
    enough); returns their offsets int64[k + 1]."""
    k = rows.shape[0]
    out_offsets = np.empty(k + 1, dtype=np.int64)
    out_offsets[0] = 0
    for t in range(k):
        out_offsets[t + 1] = out_offsets[t] + offsets[rows[t] + 1] - offsets[rows[t]]
    for t in range(k):
        start = offsets[rows[t]]
        out[out_offsets[t]:out_offsets[t + 1]] = data[start:start + out_offsets[t + 1] - out_offsets[t]]
    return out_offsets


def gather_texts(offsets: np.ndarray, data: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The texts ``rows`` (int64[k]) of Arrow string buffers packed together: ``(offsets int64[k + 1],
    their bytes as hashing.padded_words)``."""
    words = np.zeros(int((offsets[rows + 1] - offsets[rows]).sum()) // 8 + 2, dtype=np.uint64)
    return gather_texts_into(offsets, data, rows, words.view(np.uint8)), words


def signatures(offsets: np.ndarray, data: np.ndarray, mode: int, k: int, seed: np.uint64, perm_a: np.ndarray,
               perm_b: np.ndarray, batch_bytes: int = 1 << 22, threads: int = 1,
               rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """MinHash signatures and distinct shingle sets of normalized texts (Arrow buffers), of all of them or
    of ``rows`` (int64, in that order).

    Texts are processed in batches of about ``batch_bytes`` of text so that the working set stays in
    cache whatever the partition size (this alone is worth ~25% at 50k-document partitions); with
    ``rows``, each batch's texts are gathered on their own (no copy of the selected texts as a whole). With
    ``threads > 1`` the batches run on that many threads (for inputs with fewer partitions than cores).

    Returns ``(sigs uint32[n, P], csr_offsets int64[n + 1], csr_values uint64[...])``; text ``d``'s
    distinct shingle hashes are ``csr_values[csr_offsets[d]:csr_offsets[d + 1]]`` (first-seen order).
    Mode AUTO: each text in its own mode (``char_texts``).
    """
    if mode == AUTO:
        return _mixed_signatures(offsets, data, k, seed, perm_a, perm_b, batch_bytes, threads, rows)
    if rows is None:
        sizes_at = offsets  # cumulative bytes of the texts to sketch
    else:
        sizes_at = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(offsets[rows + 1] - offsets[rows], out=sizes_at[1:])
    n = len(sizes_at) - 1
    cuts = [0]
    while cuts[-1] < n:
        target = sizes_at[cuts[-1]] + batch_bytes
        cuts.append(max(cuts[-1] + 1, min(n, int(np.searchsorted(sizes_at, target, side="right")) - 1)))

    sigs = np.empty((n, len(perm_a)), np.uint32)
    # one buffer for the batches' bytes when they run one after another (a fresh one a batch costs its
    # pages' faults each time)
    spans = np.diff(np.asarray(sizes_at)[cuts])
    scratch = np.empty(int(spans.max()) // 8 + 2 if len(spans) else 2, np.uint64) if threads <= 1 else None

    def batch(bounds_pair):
        lo, hi = bounds_pair
        words = scratch if scratch is not None else np.empty((sizes_at[hi] - sizes_at[lo]) // 8 + 2, np.uint64)
        if rows is None:
            start, stop = offsets[lo], offsets[hi]
            batch_offsets = offsets[lo:hi + 1] - start
            words.view(np.uint8)[:stop - start] = data[start:stop]
        else:
            batch_offsets = gather_texts_into(offsets, data, rows[lo:hi], words.view(np.uint8))
        words.view(np.uint8)[batch_offsets[-1]:batch_offsets[-1] + 16] = 0  # as padded_words: zeros past the end
        return shingle_minhash(batch_offsets, words, words.view(np.uint8), mode, k, seed, perm_a, perm_b,
                               sigs[lo:hi])

    bounds = list(zip(cuts[:-1], cuts[1:]))
    csr_offsets = np.zeros(n + 1, dtype=np.int64)
    if not bounds:
        return sigs, csr_offsets, np.empty(0, np.uint64)
    if threads > 1:
        results = thread_map(batch, bounds, threads)
        np.cumsum(np.concatenate([r[0] for r in results]), out=csr_offsets[1:])
        return sigs, csr_offsets, np.concatenate([r[1] for r in results])
    # one after another, each batch's sets go straight into the partition's: the batches' buffers (twice
    # their text's bytes each) are not all held until a concatenation copies them once more
    values = np.empty(int(sizes_at[-1] - sizes_at[0]) // 4 + 16, np.uint64)
    end = 0
    for lo, hi in bounds:
        counts, got = batch((lo, hi))
        np.cumsum(counts, out=csr_offsets[lo + 1:hi + 1])
        csr_offsets[lo + 1:hi + 1] += end
        if end + len(got) > len(values):
            values = grown(values, end, end + len(got))
        values[end:end + len(got)] = got
        end += len(got)
    values.resize(end, refcheck=False)  # shrunk in place (realloc): no copy, and no unused tail kept
    return sigs, csr_offsets, values


def char_texts(offsets: np.ndarray, data: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """bool[n] (or of ``rows``): the texts that mode AUTO shingles by characters (``text.spaceless_texts``)."""
    flags = spaceless_texts(offsets, data)
    return flags if rows is None else flags[rows]


def _mixed_signatures(offsets, data, k, seed, perm_a, perm_b, batch_bytes, threads, rows):
    """``signatures`` with each text in its own mode: the word texts and the character texts each sketched
    as ``rows``, their sets then put back in the texts' order."""
    chosen = np.arange(len(offsets) - 1, dtype=np.int64) if rows is None else np.asarray(rows, np.int64)
    char = char_texts(offsets, data, chosen)
    if char.all() or not char.any():  # one script kind (most partitions): no sets to put back in order
        return signatures(offsets, data, CHAR if len(char) and char[0] else WORD, k, seed, perm_a, perm_b,
                          batch_bytes, threads, rows)
    parts = [signatures(offsets, data, m, k, seed, perm_a, perm_b, batch_bytes, threads, chosen[sel])
             for m, sel in ((WORD, ~char), (CHAR, char))]
    sigs = np.empty((len(chosen), len(perm_a)), np.uint32)
    sigs[~char], sigs[char] = parts[0][0], parts[1][0]
    # both CSRs as one (the word texts' sets, then the character texts'), taken in the texts' order
    both_offsets = np.concatenate([parts[0][1], parts[1][1][1:] + parts[0][1][-1]])
    both_values = np.concatenate([parts[0][2], parts[1][2]])
    at = np.empty(len(chosen), np.int64)
    at[~char] = np.arange(int((~char).sum()))
    at[char] = np.arange(int(char.sum())) + int((~char).sum())
    csr_offsets = np.zeros(len(chosen) + 1, np.int64)
    np.cumsum(np.diff(both_offsets)[at], out=csr_offsets[1:])
    values = np.empty(len(both_values), np.uint64)
    take_sets_into(both_offsets, both_values, at, values, 0)
    return sigs, csr_offsets, values


@njit(nogil=True, cache=True)
def _set_minhash(offsets, values, perm_a, perm_b):
    n = offsets.shape[0] - 1
    sigs = np.empty((n, perm_a.shape[0]), dtype=np.uint32)
    for d in range(n):
        _minhash_into(values, offsets[d], offsets[d + 1], perm_a, perm_b, sigs, d)
    return sigs


def set_signatures(offsets: np.ndarray, values: np.ndarray, perm_a: np.ndarray, perm_b: np.ndarray,
                   threads: int = 1) -> np.ndarray:
    """``uint32[n, P]`` MinHash signatures of shingle-hash sets given as CSR (``values[offsets[d]:offsets[d +
    1]]``), e.g. after boilerplate shingles were removed; an empty set gives all ``EMPTY_SIG``."""
    n = len(offsets) - 1
    cuts = np.linspace(0, n, max(1, min(threads * 4, n)) + 1).astype(np.int64)

    def one(c):
        lo, hi = c
        return _set_minhash(offsets[lo:hi + 1] - offsets[lo], values[offsets[lo]:offsets[hi]], perm_a, perm_b)

    parts = thread_map(one, list(zip(cuts[:-1], cuts[1:])), threads)
    return np.concatenate(parts) if parts else np.empty((0, len(perm_a)), np.uint32)


@njit(nogil=True, cache=True, aot=("u4[:,:], i8, i8, u8",))
def band_keys(sigs, bands, rows, seed):
    """``uint64[n, bands]`` LSH bucket key of each band of each signature."""
    n = sigs.shape[0]
    out = np.empty((n, bands), dtype=np.uint64)
    seeds = np.empty(bands, dtype=np.uint64)
    for j in range(bands):
        seeds[j] = band_seed(seed, j)
    for d in range(n):  # a signature at a time: one pass over them (a band at a time made a pass per band)
        for j in range(bands):
            h = seeds[j]
            for r in range(j * rows, (j + 1) * rows):
                h = fold(h, sigs[d, r])
            out[d, j] = fmix64(h)
    return out


@njit(nogil=True, cache=True)
def simhash64(offsets, values):
    """``uint64[n]`` 64-bit SimHash of each set of shingle hashes (weight 1 each): bit ``b`` is set when
    more of the set's hashes have bit ``b`` set than not. An empty set gives 0."""
    n = offsets.shape[0] - 1
    out = np.zeros(n, dtype=np.uint64)
    counts = np.zeros(64, dtype=np.int64)
    for d in range(n):
        counts[:] = 0
        for r in range(offsets[d], offsets[d + 1]):
            h = values[r]
            for b in range(64):
                if (h >> U64(b)) & U64(1):
                    counts[b] += 1
                else:
                    counts[b] -= 1
        x = U64(0)
        for b in range(64):
            if counts[b] > 0:
                x |= U64(1) << U64(b)
        out[d] = x
    return out


@njit(nogil=True, cache=True)
def simhash_band_keys(sims, bands, seed):
    """``uint64[n, bands]``: the 64 bits cut into ``bands`` runs (the last takes the remainder), each run
    hashed with its band's seed. Two SimHashes within Hamming distance ``bands - 1`` share a run."""
    n = sims.shape[0]
    out = np.empty((n, bands), dtype=np.uint64)
    width = 64 // bands
    for j in range(bands):
        lo = j * width
        w = 64 - lo if j == bands - 1 else width
        mask = U64(0xFFFFFFFFFFFFFFFF) if w == 64 else (U64(1) << U64(w)) - U64(1)
        h0 = band_seed(seed, j)
        for d in range(n):
            out[d, j] = fmix64(fold(h0, (sims[d] >> U64(lo)) & mask))
    return out


@njit(nogil=True, cache=True)
def hamming_similarity(sims, pi, pj):
    """``float64[p]``: 1 - Hamming distance / 64 of each pair's SimHashes."""
    out = np.empty(pi.shape[0], dtype=np.float64)
    for t in range(pi.shape[0]):
        x = sims[pi[t]] ^ sims[pj[t]]
        c = 0
        while x:
            x &= x - U64(1)
            c += 1
        out[t] = 1.0 - c / 64.0
    return out
