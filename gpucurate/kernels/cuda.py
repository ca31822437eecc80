"""CUDA kernels (numba.cuda) of the hash-based stages, bit-identical to the CPU kernels.

The hash functions are the CPU ones' source compiled as device functions (``hashing.
define_hash_functions``). Each host function here has the signature of its CPU counterpart and takes
and returns NumPy arrays, so the stages do not know which backend runs; inside, the text buffers are
copied to the device, one thread handles one unit of work (a text, a word, a shingle, a (text,
permutation) cell, a pair), and the results are copied back. Boundary bookkeeping that is one
vectorized NumPy expression (where words start, which shingle belongs to which text) stays on the host.

With ``NUMBA_ENABLE_CUDASIM=1`` numba runs these kernels in its CUDA simulator on the CPU: that is how
CI checks them element by element against the CPU kernels, on small inputs.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from . import gates as cpu_gates
from . import minhash as cpu_minhash
from . import pairs as cpu_pairs
from .gates import NGRAM_SEED
from .hashing import EXACT_SEED, M2, U64, define_hash_functions, padded_words
from .minhash import EMPTY_SIG, WORD, shingle_counts, unit_bounds

fmix64, _mix, _load, hash_bytes, minhash_value, band_seed, fold = define_hash_functions(
    cuda.jit(device=True, inline=True))

THREADS = 128


def _blocks(n: int) -> int:
    return max(1, (n + THREADS - 1) // THREADS)


def _dev(values: np.ndarray):
    """A device copy of ``values``; an empty array becomes one unused zero (no zero-size buffers)."""
    return cuda.to_device(values if len(values) else np.zeros(1, values.dtype))


# --- kernels --------------------------------------------------------------------------------------

@cuda.jit
def _range_hash_kernel(words, starts, ends, seed, out):
    """out[i] = hash_bytes(words, starts[i], ends[i], seed): texts, words or code points."""
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = hash_bytes(words, starts[i], ends[i], seed)


@cuda.jit
def _fold_kernel(unit_hash, first_unit, length, seeds, out):
    """out[s] = fmix64(fold of unit_hash[first_unit[s] : first_unit[s] + length[s]] into seeds[s]):
    shingle hashes (one seed for all) and contamination n-gram hashes (the seed holds the length)."""
    s = cuda.grid(1)
    if s < out.shape[0]:
        h = seeds[s]
        for t in range(first_unit[s], first_unit[s] + length[s]):
            h = fold(h, unit_hash[t])
        out[s] = fmix64(h)


@cuda.jit
def _minhash_kernel(sh_offsets, sh_hash, perm_a, perm_b, sigs):
    """sigs[d, i] = min over text d's shingle hashes h of minhash_value(a_i, b_i, h)."""
    cell = cuda.grid(1)
    n_perm = perm_a.shape[0]
    if cell < sigs.shape[0] * n_perm:
        d = cell // n_perm
        i = cell - d * n_perm
        best = EMPTY_SIG
        a = perm_a[i]
        b = perm_b[i]
        for r in range(sh_offsets[d], sh_offsets[d + 1]):
            v = minhash_value(a, b, sh_hash[r])
            if v < best:
                best = v
        sigs[d, i] = best


@cuda.jit
def _band_kernel(sigs, bands, rows, seed, out):
    cell = cuda.grid(1)
    if cell < sigs.shape[0] * bands:
        d = cell // bands
        j = cell - d * bands
        h = band_seed(seed, j)
        for r in range(j * rows, (j + 1) * rows):
            h = fold(h, sigs[d, r])
        out[d, j] = fmix64(h)


@cuda.jit
def _jaccard_kernel(offsets, values, pi, pj, out):
    """Exact Jaccard of two sorted distinct sets: merge count of the intersection."""
    t = cuda.grid(1)
    if t < out.shape[0]:
        a0, a1 = offsets[pi[t]], offsets[pi[t] + 1]
        b0, b1 = offsets[pj[t]], offsets[pj[t] + 1]
        inter = 0
        while a0 < a1 and b0 < b1:
            x, y = values[a0], values[b0]
            if x == y:
                inter += 1
                a0 += 1
                b0 += 1
            elif x < y:
                a0 += 1
            else:
                b0 += 1
        union = (offsets[pi[t] + 1] - offsets[pi[t]]) + (offsets[pj[t] + 1] - offsets[pj[t]]) - inter
        out[t] = inter / union if union > 0 else 0.0


@cuda.jit
def _lookup_kernel(hashes, table, out):
    """out[i] = index of the first table entry equal to hashes[i], or -1 (binary search)."""
    i = cuda.grid(1)
    if i < hashes.shape[0]:
        h = hashes[i]
        lo = 0
        hi = table.shape[0]
        while lo < hi:
            mid = (lo + hi) >> 1
            if table[mid] < h:
                lo = mid + 1
            else:
                hi = mid
        out[i] = lo if lo < table.shape[0] and table[lo] == h else -1


# --- host side: the CPU kernels' signatures ---------------------------------------------------------

def _range_hashes(words_dev, starts: np.ndarray, ends: np.ndarray, seed) -> np.ndarray:
    out = cuda.device_array(len(starts), dtype=np.uint64)
    if len(starts):
        _range_hash_kernel[_blocks(len(starts)), THREADS](words_dev, cuda.to_device(starts.astype(np.int64)),
                                                          cuda.to_device(ends.astype(np.int64)), U64(seed), out)
    return out


def text_hashes(offsets: np.ndarray, words: np.ndarray) -> np.ndarray:
    """``uint64[n]`` hash of each text's bytes (``minhash.text_hashes``)."""
    return _range_hashes(cuda.to_device(words), offsets[:-1], offsets[1:], EXACT_SEED).copy_to_host()


def _unit_spans(offsets: np.ndarray, data: np.ndarray, mode: int):
    """Byte ranges of every unit (word or code point) of every non-empty text, in order, the first unit
    of each text, its unit count, and ``unit_bounds``' cursor."""
    bounds, cursor = unit_bounds(offsets, data, mode)
    n = len(offsets) - 1
    lengths = np.diff(offsets)
    bounds = np.append(bounds, 0)  # one spare entry: np.where below evaluates both branches
    if mode == WORD:
        units = np.where(lengths > 0, np.diff(cursor) + 1, 0)
        # a text's words: from its start to its first space, between spaces, from its last space to its end
        starts = np.empty(units.sum(), np.int64)
        ends = np.empty(units.sum(), np.int64)
        first = np.concatenate(([0], np.cumsum(units)))
        doc = np.repeat(np.arange(n), units)
        k = np.arange(units.sum()) - first[doc]  # index of the word within its text
        space_idx = cursor[doc] + k  # the space ending this word, if any
        last = k == units[doc] - 1
        starts[:] = np.where(k == 0, offsets[doc], bounds[np.maximum(space_idx - 1, 0)] + 1)
        ends[:] = np.where(last, offsets[doc + 1], bounds[space_idx])
    else:
        units = np.diff(cursor)
        first = np.concatenate(([0], np.cumsum(units)))
        doc = np.repeat(np.arange(n), units)
        starts = bounds[:-1].astype(np.int64)
        nxt = bounds[1:]
        is_last = np.arange(len(starts)) == first[doc + 1] - 1
        ends = np.where(is_last, offsets[doc + 1], nxt).astype(np.int64)
    return starts, ends, first, units, cursor


def signatures(offsets: np.ndarray, data: np.ndarray, mode: int, k: int, seed: np.uint64, perm_a: np.ndarray,
               perm_b: np.ndarray, batch_bytes: int = 1 << 26, threads: int = 1):
    """MinHash signatures and distinct shingle sets (``minhash.signatures``; the sets are sorted here,
    first-seen order on the CPU: Jaccard and MinHash do not depend on the order)."""
    n = len(offsets) - 1
    P = len(perm_a)
    if n == 0:
        return np.empty((0, P), np.uint32), np.zeros(1, np.int64), np.empty(0, np.uint64)
    offsets = offsets - offsets[0]
    data = data[:offsets[-1]]
    words_dev = cuda.to_device(padded_words(data))
    starts, ends, first_unit, units, cursor = _unit_spans(offsets, data, mode)
    unit_hash = _range_hashes(words_dev, starts, ends, seed)
    # shingle s of text d starts at unit u; it has min(k, units - u) units
    counts = shingle_counts(offsets, cursor, mode, k)
    sh_offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    doc = np.repeat(np.arange(n), counts)
    u = np.arange(sh_offsets[-1]) - sh_offsets[doc]
    sh_first = (first_unit[doc] + u).astype(np.int64)
    sh_len = np.minimum(k, units[doc] - u).astype(np.int64)
    sh_hash = cuda.device_array(len(sh_first), dtype=np.uint64)
    if len(sh_first):
        seeds = np.full(len(sh_first), U64(seed) ^ M2, dtype=np.uint64)
        _fold_kernel[_blocks(len(sh_first)), THREADS](unit_hash, cuda.to_device(sh_first), cuda.to_device(sh_len),
                                                      cuda.to_device(seeds), sh_hash)
    sigs = cuda.device_array((n, P), dtype=np.uint32)
    _minhash_kernel[_blocks(n * P), THREADS](cuda.to_device(sh_offsets), sh_hash, cuda.to_device(perm_a),
                                             cuda.to_device(perm_b), sigs)
    # distinct shingles of each text, sorted (for verification)
    hashes = sh_hash.copy_to_host()
    order = np.lexsort((hashes, doc))
    hashes, doc = hashes[order], doc[order]
    keep = np.ones(len(hashes), bool)
    keep[1:] = (hashes[1:] != hashes[:-1]) | (doc[1:] != doc[:-1])
    csr_offsets = np.concatenate(([0], np.cumsum(np.bincount(doc[keep], minlength=n)))).astype(np.int64)
    return sigs.copy_to_host(), csr_offsets, hashes[keep]


def band_keys(sigs: np.ndarray, bands: int, rows: int, seed) -> np.ndarray:
    out = cuda.device_array((len(sigs), bands), dtype=np.uint64)
    if len(sigs):
        _band_kernel[_blocks(len(sigs) * bands), THREADS](cuda.to_device(np.ascontiguousarray(sigs)), bands, rows,
                                                          U64(seed), out)
    return out.copy_to_host()


def set_signatures(offsets: np.ndarray, values: np.ndarray, perm_a: np.ndarray, perm_b: np.ndarray,
                   threads: int = 1) -> np.ndarray:
    n = len(offsets) - 1
    sigs = cuda.device_array((n, len(perm_a)), dtype=np.uint32)
    if n:
        _minhash_kernel[_blocks(n * len(perm_a)), THREADS](cuda.to_device(offsets.astype(np.int64)), _dev(values),
                                                           cuda.to_device(perm_a), cuda.to_device(perm_b), sigs)
    return sigs.copy_to_host()


def sorted_sets(offsets: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` with each set sorted (the GPU Jaccard merges sorted sets)."""
    doc = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    return values[np.lexsort((values, doc))]


def jaccard_pairs(offsets: np.ndarray, values: np.ndarray, pi: np.ndarray, pj: np.ndarray) -> np.ndarray:
    """Exact Jaccard of each pair (``pairs.jaccard_pairs``), on the device."""
    out = cuda.device_array(len(pi), dtype=np.float64)
    if len(pi):
        vals = sorted_sets(offsets, values)
        _jaccard_kernel[_blocks(len(pi)), THREADS](cuda.to_device(offsets.astype(np.int64)),
                                                   _dev(vals),
                                                   cuda.to_device(pi.astype(np.int64)),
                                                   cuda.to_device(pj.astype(np.int64)), out)
    return out.copy_to_host()


def ngram_hashes(offsets: np.ndarray, data: np.ndarray, words: np.ndarray, n: int):
    """Word n-gram hashes of normalized texts (``gates.ngram_hashes``)."""
    starts, ends, first_unit, units, _ = _unit_spans(offsets, data, WORD)
    word_hash = _range_hashes(cuda.to_device(words), starts, ends, NGRAM_SEED)
    m = np.where(units >= n, n, units)  # a text shorter than n is one n-gram of all its words
    grams = np.where(units > 0, units - m + 1, 0)
    g_off = np.concatenate(([0], np.cumsum(grams)))
    doc = np.repeat(np.arange(len(units)), grams)
    first = (first_unit[doc] + np.arange(g_off[-1]) - g_off[doc]).astype(np.int64)
    length = m[doc].astype(np.int64)
    out = cuda.device_array(len(first), dtype=np.uint64)
    if len(first):
        _ngram_fold(word_hash, first, length, out)
    return doc.astype(np.int64), out.copy_to_host(), length


def _ngram_fold(word_hash, first: np.ndarray, length: np.ndarray, out) -> None:
    """n-gram hash ``fmix64(fold(seed + m, word hashes))``: the fold kernel with a per-gram seed."""
    seeds = (U64(NGRAM_SEED) + length.astype(np.uint64))
    _fold_kernel[_blocks(len(first)), THREADS](word_hash, cuda.to_device(first), cuda.to_device(length),
                                               cuda.to_device(seeds), out)


def ngram_matches(offsets: np.ndarray, data: np.ndarray, words: np.ndarray, lengths: np.ndarray,
                  table: np.ndarray):
    """Word m-grams (m in ``lengths``) found in the sorted ``table`` (``gates.ngram_matches``, same order)."""
    starts, ends, first_unit, units, _ = _unit_spans(offsets, data, WORD)
    word_hash = _range_hashes(cuda.to_device(words), starts, ends, NGRAM_SEED)
    found = []
    for li, m in enumerate(lengths.tolist()):
        grams = np.maximum(units - m + 1, 0)
        g_off = np.concatenate(([0], np.cumsum(grams)))
        doc = np.repeat(np.arange(len(units)), grams)
        pos = np.arange(g_off[-1]) - g_off[doc]
        first = (first_unit[doc] + pos).astype(np.int64)
        hashes = cuda.device_array(len(first), dtype=np.uint64)
        if len(first):
            _ngram_fold(word_hash, first, np.full(len(first), m, np.int64), hashes)
        where = lookup(hashes.copy_to_host(), table)
        hit = where >= 0
        found.append((doc[hit], np.full(hit.sum(), li), pos[hit], where[hit], starts[first[hit]],
                      ends[first[hit] + m - 1]))
    doc, li, pos, where, s, e = (np.concatenate([f[k] for f in found]) for k in range(6))
    order = np.lexsort((pos, li, doc))  # the CPU kernel's order: text, then length, then position
    return (doc[order].astype(np.int64), where[order].astype(np.int64), s[order].astype(np.int64),
            e[order].astype(np.int64))


def lookup(hashes: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Index of the first equal entry of the sorted ``table`` for each hash, or -1 (contamination)."""
    out = cuda.device_array(len(hashes), dtype=np.int64)
    if len(hashes) and len(table):
        _lookup_kernel[_blocks(len(hashes)), THREADS](cuda.to_device(hashes), cuda.to_device(table), out)
        return out.copy_to_host()
    return np.full(len(hashes), -1, np.int64)


# the pair bookkeeping (bucketing, components), quality statistics and paragraph spans stay on the CPU
candidate_pairs = cpu_pairs.candidate_pairs
components = cpu_pairs.components
signature_agreement = cpu_pairs.signature_agreement
quality_stats = cpu_gates.quality_stats
simhash64 = cpu_minhash.simhash64
simhash_band_keys = cpu_minhash.simhash_band_keys
hamming_similarity = cpu_minhash.hamming_similarity
paragraph_spans = cpu_gates.paragraph_spans
