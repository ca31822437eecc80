"""MinHash sketches of a partition: the LSH shape (``optimal_bands_rows``), the stage's parameters
(``FuzzyParams``), and per partition the band keys, shingle sets (CSR) and signatures of the selected
rows (``signature_partition``), collected as ``Sketches``. The fuzzy stage (``stages.fuzzy``), its
exchanges (``stages.fuzzy_lsh``, ``stages.fuzzy_exchange``), ingest, rethreshold and RAG chunk dedup all build on
these."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from ..engine.backend import Backend
from ..engine.clock import task_clock
from ..engine.threads import concatenate, thread_map
from .normalize import arrow_buffers


@lru_cache(maxsize=64)
def optimal_bands_rows(threshold: float, num_perm: int, fp_weight: float = 0.5,
                       fn_weight: float = 0.5) -> tuple[int, int]:
    """LSH ``(bands, rows)`` with ``bands * rows <= num_perm`` minimizing the weighted areas of false
    positives (Jaccard below ``threshold`` that collide) and false negatives (above it that do not)
    under the collision probability ``1 - (1 - s**rows)**bands``. Ties go to fewer bands."""
    s_lo = np.linspace(0.0, threshold, 1001)
    s_hi = np.linspace(threshold, 1.0, 1001)
    best, best_err = (1, 1), np.inf
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            fp = np.trapezoid(1.0 - (1.0 - s_lo ** r) ** b, s_lo)
            fn = np.trapezoid((1.0 - s_hi ** r) ** b, s_hi)
            err = fp_weight * fp + fn_weight * fn
            if err < best_err - 1e-15:
                best, best_err = (b, r), err
    return best


@dataclass
class FuzzyParams:
    mode: int
    k: int
    seed: np.uint64
    perm_a: np.ndarray
    perm_b: np.ndarray
    bands: int
    rows: int
    keep_signatures: bool
    threads: int = 1  # threads inside one partition task (local runs with fewer partitions than cores)
    #: False for SimHash: its band keys come from the SimHash bits (``finish_sketches``), and its
    #: ``bands * rows`` (64 bits) may exceed the permutations
    minhash_bands: bool = True


def signature_partition(df: pd.DataFrame, mask: np.ndarray, params: FuzzyParams, backend: Backend):
    """Band keys, shingle sets (CSR) and optionally signatures of the rows of ``df`` selected by ``mask``.

    Returns ``(band_keys uint64[m, bands], csr_offsets int64[m + 1], csr_values uint64[..],
    signatures uint32[m, P] or None)``.
    """
    k = backend.minhash
    if not mask.any():
        return (np.empty((0, params.bands), np.uint64), np.zeros(1, np.int64), np.empty(0, np.uint64),
                np.empty((0, len(params.perm_a)), np.uint32) if params.keep_signatures else None)
    offsets, data = arrow_buffers(df["_text"].array._pa_array)
    rows = None if mask.all() else np.flatnonzero(mask).astype(np.int64)
    # signatures that only make band keys need only the permutations the bands use
    used = len(params.perm_a) if params.keep_signatures or not params.minhash_bands else params.bands * params.rows
    with task_clock("fuzzy: minhash"):
        sigs, csr_offsets, csr_values = k.signatures(offsets, data, params.mode, params.k, params.seed,
                                                     params.perm_a[:used], params.perm_b[:used],
                                                     threads=params.threads, rows=rows)
    keys = k.band_keys(sigs, params.bands, params.rows, params.seed) if params.minhash_bands else \
        np.zeros((len(sigs), params.bands), np.uint64)
    return keys, csr_offsets, csr_values, (sigs if params.keep_signatures else None)


def remove_hashes(offsets: np.ndarray, values: np.ndarray, common: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The CSR shingle sets ``(offsets, values)`` without the hashes in ``common`` (sorted uint64)."""
    pos = np.minimum(np.searchsorted(common, values), max(len(common) - 1, 0))
    drop = common[pos] == values if len(common) else np.zeros(len(values), bool)
    kept_before = np.concatenate(([0], np.cumsum(~drop)))
    return kept_before[offsets].astype(np.int64), values[~drop]


@dataclass
class Sketches:
    """What the fuzzy stage keeps per participant (index ``i`` = the i-th participant)."""
    keys: np.ndarray  # uint64[m, bands] LSH bucket keys
    csr_offsets: np.ndarray  # int64[m + 1] shingle sets (after boilerplate removal)
    csr_values: np.ndarray  # uint64[...]
    sigs: np.ndarray | None = None  # uint32[m, P] MinHash signatures (without verification)
    simhashes: np.ndarray | None = None  # uint64[m] (fuzzy.method simhash)
    boilerplate: np.ndarray | None = None  # sorted uint64 boilerplate hashes removed
    boilerplate_stats: dict | None = None


@dataclass
class HostSketch:
    """A partition's sketches made in the read pass (``sketch_distinct``), kept in its state until the fuzzy
    stage takes its participants' (``gather_sketches``): one sketch per distinct text among the rows that may
    take part, ``index[r]`` the sketch of row ``r`` (-1: the row cannot take part)."""
    index: np.ndarray  # int64[rows]
    keys: np.ndarray  # uint64[s, bands]
    csr_offsets: np.ndarray  # int64[s + 1]
    csr_values: np.ndarray  # uint64[...]
    sigs: np.ndarray | None  # uint32[s, P] when the stage keeps signatures

    @property
    def nbytes(self) -> int:
        """What it holds (``engine.spill.nbytes_of`` counts kept values by it)."""
        return sum(int(a.nbytes) for a in (self.index, self.keys, self.csr_offsets, self.csr_values, self.sigs)
                   if a is not None)


def gather_sketches(parts: list[HostSketch], masks: list[np.ndarray], threads: int = 1) -> Sketches:
    """The ``Sketches`` of the rows of ``masks[p]`` of every partition's ``HostSketch``, in row order (each row
    must have a sketch): the selected sets are copied once, straight into one CSR, on ``threads`` threads."""
    from ..kernels.minhash import take_sets_into
    which = [np.ascontiguousarray(h.index[m], np.int64) for h, m in zip(parts, masks)]
    if any((w < 0).any() for w in which):
        raise RuntimeError("a fuzzy participant has no sketch from the read pass")  # a bug, not bad input
    lengths = np.concatenate([np.diff(h.csr_offsets)[w] for h, w in zip(parts, which)] or [np.empty(0, np.int64)])
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    firsts = np.cumsum([0] + [len(w) for w in which])
    values = np.empty(int(offsets[-1]), np.uint64)
    thread_map(lambda p: take_sets_into(parts[p].csr_offsets, parts[p].csr_values, which[p], values,
                                        offsets[firsts[p]]), list(range(len(parts))), threads)
    keys = np.concatenate([h.keys[w] for h, w in zip(parts, which)]) if parts else np.empty((0, 0), np.uint64)
    sigs = np.concatenate([h.sigs[w] for h, w in zip(parts, which)]) \
        if parts and parts[0].sigs is not None else None
    return Sketches(keys, offsets, values, sigs)


def sketch_distinct(df: pd.DataFrame, eligible: np.ndarray, hashes: np.ndarray, params: FuzzyParams,
                    backend: Backend) -> HostSketch:
    """The ``HostSketch`` of a normalized partition: ``signature_partition`` of the first row of each distinct
    text (``hashes``) among the ``eligible`` rows; identical texts have identical shingle sets."""
    rows = np.flatnonzero(eligible)
    _, first, inverse = np.unique(hashes[rows], return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # distinct texts in row order
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    index = np.full(len(df), -1, np.int64)
    index[rows] = rank[inverse.reshape(-1)]
    mask = np.zeros(len(df), bool)
    mask[rows[first[order]]] = True
    keys, offsets, values, sigs = signature_partition(df, mask, params, backend)
    return HostSketch(index, keys, offsets, values, sigs)


def concat_csr(parts, threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """One CSR of the partitions' ``(_, offsets, values, ...)``, the values copied on ``threads`` threads."""
    lengths = np.concatenate([np.diff(p[1]) for p in parts])
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets, concatenate([p[2] for p in parts], threads)
