"""The GPU backend's kernels behind the CPU kernels' host signatures (NumPy in, NumPy out).

``backend.select`` binds a ``DeviceArrays`` here; ``Backend.minhash``, ``.pairs`` and ``.gates`` of the
GPU backend are this module. The device-resident run (``device.resident``) does not come through
here; these serve the paths that hand host arrays between steps: the Dask LSH (``fuzzy.lsh=dask``),
the boilerplate and SimHash variants of the fuzzy stage, the paragraph and contamination gates, the
substrings stage's window keys and buckets,
rethreshold and ingest. Each call uploads its inputs, runs the shared glue and downloads its result,
all counted in the ledger. What has no device version yet (quality statistics, paragraph spans,
SimHash) is the CPU kernel.
"""

from __future__ import annotations

import numpy as np

from ..kernels import gates as cpu_gates
from ..kernels import minhash as cpu_minhash
from ..kernels import pairs as cpu_pairs
from ..kernels.gates import NGRAM_SEED
from ..kernels.hashing import U64
from ..kernels.minhash import WORD
from . import arrays, glue
from .arrays import DeviceArrays

_BOUND: DeviceArrays | None = None


def bind(dev: DeviceArrays) -> None:
    """Use ``dev`` in this process (``backend.select``, or a Backend unpickled on a Dask worker); a worker
    that has neither probes its own device on first use."""
    global _BOUND
    _BOUND = dev


class _Device:
    """``DEV.x`` is the bound ``DeviceArrays``' ``x``, bound on first use in a worker process."""

    def __getattr__(self, name):
        global _BOUND
        if _BOUND is None:  # the arrays a task unpickled on this worker (``process_arrays``), else its own device
            _BOUND = next(iter(arrays._PROCESS_ARRAYS.values()), None) or arrays.probe_device()
        return getattr(_BOUND, name)


DEV = _Device()


def text_hashes(offsets: np.ndarray, words: np.ndarray) -> np.ndarray:
    """``uint64[n]`` hash of each text's bytes (``minhash.text_hashes``; ``words`` padded)."""
    with DEV.lock, DEV.step("text hashes"):
        out = glue.DeviceTexts(DEV.to_device(offsets.astype(np.int64)), DEV.to_device(words), 0)
        return DEV.to_host(glue.text_hashes(DEV, out))


def signatures(offsets, data, mode, k, seed, perm_a, perm_b, batch_bytes=None, threads=1, rows=None):
    """``(sigs, csr_offsets, csr_values)`` of ``minhash.signatures``; each set sorted (the CPU's is in
    first-seen order: Jaccard and MinHash do not depend on the order)."""
    from types import SimpleNamespace
    if rows is not None:  # the selected texts go up, packed on the host
        offsets, words = cpu_minhash.gather_texts(offsets, data, rows)
        data = words.view(np.uint8)[:offsets[-1]]
    params = SimpleNamespace(mode=mode, k=k, seed=seed, bands=1, rows=1, keep_signatures=True)
    with DEV.lock, DEV.step("fuzzy: sketch"):
        t = glue.upload_texts(DEV, offsets, data)
        units = glue.text_units(DEV, t, mode != WORD)
        sk = glue.sketch(DEV, t, units, params, DEV.to_device(perm_a), DEV.to_device(perm_b))
        return DEV.to_host(sk.sigs), DEV.to_host(sk.set_offsets), DEV.to_host(sk.set_values)


def band_keys(sigs: np.ndarray, bands: int, rows: int, seed) -> np.ndarray:
    with DEV.lock, DEV.step("fuzzy: band keys"):
        return DEV.to_host(glue.band_keys(DEV, DEV.to_device(sigs), bands, rows, seed))


def set_signatures(offsets, values, perm_a, perm_b, threads=1) -> np.ndarray:
    with DEV.lock, DEV.step("fuzzy: signatures"):
        return DEV.to_host(glue.minhash_signatures(DEV, DEV.to_device(offsets.astype(np.int64)),
                                                   DEV.to_device(values), DEV.to_device(perm_a),
                                                   DEV.to_device(perm_b)))


def _sorted_sets(offsets, values):
    """The sets on the device, each sorted (the merge in ``jaccard_sorted`` needs it)."""
    xp = DEV.xp
    off, val = DEV.to_device(offsets.astype(np.int64)), DEV.to_device(values)
    owner = glue.segment_ids(xp, off, val.shape[0])
    return off, xp.take(val, glue.lexsort_order(xp, owner, val))


def jaccard_pairs(offsets, values, pi, pj) -> np.ndarray:
    """Exact Jaccard of each pair (``pairs.jaccard_pairs``)."""
    with DEV.lock, DEV.step("fuzzy: verify"):
        off, val = _sorted_sets(offsets, values)
        return DEV.to_host(glue.jaccard(DEV, off, val, DEV.to_device(pi.astype(np.int64)),
                                        DEV.to_device(pj.astype(np.int64))))


def signature_agreement(sigs, pi, pj) -> np.ndarray:
    with DEV.lock, DEV.step("fuzzy: verify"):
        return DEV.to_host(glue.signature_agreement(DEV, DEV.to_device(sigs), DEV.to_device(pi.astype(np.int64)),
                                                    DEV.to_device(pj.astype(np.int64))))


def candidate_pairs(band_keys_: np.ndarray, max_bucket: int, anchors: int, threads: int = 1):
    """``pairs.candidate_pairs`` on the device (``threads`` is the CPU kernel's and unused here)."""
    with DEV.lock, DEV.step("fuzzy: lsh"):
        pi, pj = glue.candidate_pairs(DEV, DEV.to_device(band_keys_), max_bucket, anchors)
        return DEV.to_host(pi), DEV.to_host(pj)


def components(n, pi, pj) -> np.ndarray:
    with DEV.lock, DEV.step("fuzzy: components"):
        return DEV.to_host(glue.components(DEV, int(n), DEV.to_device(np.asarray(pi, np.int64)),
                                           DEV.to_device(np.asarray(pj, np.int64))))


# --- contamination n-grams: word hashes and folds on the device, span bookkeeping on the host -------------

def _word_spans(offsets: np.ndarray, data: np.ndarray):
    """Byte ranges of every word of every non-empty text (host), the first word of each text, its count."""
    bounds, cursor = cpu_minhash.unit_bounds(offsets, data, WORD)
    lengths = np.diff(offsets)
    units = np.where(lengths > 0, np.diff(cursor) + 1, 0)
    first = np.concatenate(([0], np.cumsum(units)))
    doc = np.repeat(np.arange(len(units)), units)
    k = np.arange(units.sum()) - first[doc]
    space_idx = cursor[doc] + k
    padded = np.append(bounds, 0)  # one spare entry: np.where evaluates both branches
    starts = np.where(k == 0, offsets[doc], padded[np.maximum(space_idx - 1, 0)] + 1).astype(np.int64)
    ends = np.where(k == units[doc] - 1, offsets[doc + 1], padded[space_idx]).astype(np.int64)
    return starts, ends, first[:-1], units


def _word_hashes(offsets, data):
    t = glue.upload_texts(DEV, offsets, data)
    units = glue.text_units(DEV, t, False)
    unit_hash, _ = glue.unit_hashes(DEV, t, units.spaces, units.space_cursor, WORD, NGRAM_SEED)
    return unit_hash


def _fold(word_hash, first: np.ndarray, length: np.ndarray) -> np.ndarray:
    """n-gram hashes ``fmix64(fold(NGRAM_SEED + m, word hashes))`` of the runs ``first, length``."""
    out = DEV.empty(len(first), DEV.xp.uint64)
    seeds = U64(NGRAM_SEED) + length.astype(np.uint64)
    DEV.launch("fold_runs", len(first), word_hash, DEV.to_device(first.astype(np.int64)),
               DEV.to_device(length.astype(np.int64)), DEV.to_device(seeds), out)
    return DEV.to_host(out)


def ngram_hashes(offsets, data, words, n: int):
    """Word n-gram hashes of normalized texts (``gates.ngram_hashes``)."""
    starts, ends, first_unit, units = _word_spans(offsets, data)
    m = np.where(units >= n, n, units)  # a text shorter than n is one n-gram of all its words
    grams = np.where(units > 0, units - m + 1, 0)
    g_off = np.concatenate(([0], np.cumsum(grams)))
    doc = np.repeat(np.arange(len(units)), grams)
    first = (first_unit[doc] + np.arange(g_off[-1]) - g_off[doc]).astype(np.int64)
    length = m[doc].astype(np.int64)
    with DEV.lock, DEV.step("contamination"):
        hashes = _fold(_word_hashes(offsets, data), first, length)
    return doc.astype(np.int64), hashes, length


def lookup(hashes: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Index of the first equal entry of the sorted ``table`` for each hash, or -1."""
    if not len(hashes) or not len(table):
        return np.full(len(hashes), -1, np.int64)
    with DEV.lock, DEV.step("contamination"):
        out = DEV.empty(len(hashes), DEV.xp.int64)
        DEV.launch("sorted_lookup", len(hashes), DEV.to_device(hashes), DEV.to_device(table), out)
        return DEV.to_host(out)


def ngram_matches(offsets, data, words, lengths, table):
    """Word m-grams (m in ``lengths``) found in the sorted ``table`` (``gates.ngram_matches``, same order)."""
    starts, ends, first_unit, units = _word_spans(offsets, data)
    found = []
    with DEV.lock, DEV.step("contamination"):
        word_hash = _word_hashes(offsets, data)
        for li, m in enumerate(lengths.tolist()):
            grams = np.maximum(units - m + 1, 0)
            g_off = np.concatenate(([0], np.cumsum(grams)))
            doc = np.repeat(np.arange(len(units)), grams)
            pos = np.arange(g_off[-1]) - g_off[doc]
            first = (first_unit[doc] + pos).astype(np.int64)
            where = lookup(_fold(word_hash, first, np.full(len(first), m, np.int64)), table)
            hit = where >= 0
            found.append((doc[hit], np.full(hit.sum(), li), pos[hit], where[hit], starts[first[hit]],
                          ends[first[hit] + m - 1]))
    doc, li, pos, where, s, e = (np.concatenate([f[k] for f in found]) for k in range(6))
    order = np.lexsort((pos, li, doc))  # the CPU kernel's order: text, then length, then position
    return (doc[order].astype(np.int64), where[order].astype(np.int64), s[order].astype(np.int64),
            e[order].astype(np.int64))


# no device version yet: the CPU kernels
bucket_pairs = cpu_pairs.bucket_pairs
quality_stats = cpu_gates.quality_stats
paragraph_spans = cpu_gates.paragraph_spans
simhash64 = cpu_minhash.simhash64
simhash_band_keys = cpu_minhash.simhash_band_keys
hamming_similarity = cpu_minhash.hamming_similarity


def window_hashes(a, b, cursor, win_cursor, k):
    """``(hi, lo)`` window keys (``substrings.window_hashes``)."""
    with DEV.lock, DEV.step("substrings: window keys"):
        hi, lo = glue.window_keys(DEV, DEV.to_device(a), DEV.to_device(b), DEV.to_device(cursor),
                                  DEV.to_device(win_cursor), int(k))
        return DEV.to_host(hi), DEV.to_host(lo)


def repeated_windows(hi, lo):
    """``(index, removable, count, distinct)`` of one bucket (``substrings.repeated_windows``)."""
    with DEV.lock, DEV.step("substrings: repeated windows"):
        index, removable, count, distinct = glue.repeated_windows(DEV, DEV.to_device(hi), DEV.to_device(lo))
        return DEV.to_host(index), DEV.to_host(removable), DEV.to_host(count), int(distinct)
