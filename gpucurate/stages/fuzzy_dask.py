"""The fuzzy stage's LSH and verification as Dask collections, for corpora whose band keys and shingle sets
do not fit in one process.

Sketches stay on the workers. Band entries ``(bucket key, row)`` are shuffled by key, each output
partition walks its buckets with the same kernel as the driver path (all pairs up to
``fuzzy.max_bucket_size`` members, anchors beyond), pairs are shuffled again to drop repeats, and each
pair is verified after two joins with the shingle sets (as Arrow list columns). Only the scored pairs come
back to the driver, where connected components run on the edge list (its size is logged). The candidate
pairs, scores and therefore the annotations equal the driver path's (tested).
"""

from __future__ import annotations

import logging
import time

import dask
import numpy as np
import pandas as pd
import pyarrow as pa

from ..executor import Executor
from ..kernels.pairs import bucket_pairs
from .fuzzy import FuzzyParams, signature_partition

log = logging.getLogger("gpucurate")

_LIST = pd.ArrowDtype(pa.list_(pa.uint64()))
#: candidate pairs per partition of the verification joins (each row carries both shingle sets)
JOIN_PAIRS_PER_PARTITION = 20_000
BANDS_META = pd.DataFrame({"key": pd.Series([], dtype=np.uint64), "row": pd.Series([], dtype=np.int64)})
SETS_META = pd.DataFrame({"row": pd.Series([], dtype=np.int64), "shingles": pd.Series([], dtype=_LIST)})
PAIRS_META = pd.DataFrame({"pair": pd.Series([], dtype=np.uint64)})
SCORED_META = pd.DataFrame({"i": pd.Series([], dtype=np.int64), "j": pd.Series([], dtype=np.int64),
                            "score": pd.Series([], dtype=np.float64)})


def sketch_frames(part: pd.DataFrame, mask: np.ndarray, first_row: int, params: FuzzyParams, backend):
    """Band entries and shingle sets of one partition's participants (table rows ``first_row + local``)."""
    keys, offsets, values, _ = signature_partition(part, mask, params, backend)
    rows = first_row + np.flatnonzero(mask).astype(np.int64)
    # documents with no shingle have no bucket to share (as on the driver path)
    has = np.diff(offsets) > 0
    bands = pd.DataFrame({"key": keys[has].reshape(-1),
                          "row": np.repeat(rows[has], keys.shape[1]).astype(np.int64)})
    shingles = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values, pa.uint64()))
    sets = pd.DataFrame({"row": rows, "shingles": pd.arrays.ArrowExtensionArray(shingles)})
    return bands, sets


def _bucket_pairs(df: pd.DataFrame, max_bucket: int, anchors: int) -> pd.DataFrame:
    if len(df) == 0:
        return PAIRS_META.copy()
    order = np.lexsort((df["row"].to_numpy(), df["key"].to_numpy()))
    keys = df["key"].to_numpy()[order]
    rows = df["row"].to_numpy()[order].copy()
    return pd.DataFrame({"pair": bucket_pairs(keys, rows, max_bucket, anchors)})


def _unique_pairs(df: pd.DataFrame) -> pd.DataFrame:
    pairs = np.unique(df["pair"].to_numpy())
    return pd.DataFrame({"i": (pairs >> np.uint64(32)).astype(np.int64),
                         "j": (pairs & np.uint64(0xFFFFFFFF)).astype(np.int64)})


def _jaccard(df: pd.DataFrame, jaccard_pairs) -> pd.DataFrame:
    """Exact Jaccard of each joined pair (``shingles_i``, ``shingles_j`` list columns)."""
    n = len(df)
    if n == 0:
        return SCORED_META.copy()
    a = pa.chunked_array(df["shingles_i"].array._pa_array).combine_chunks()
    b = pa.chunked_array(df["shingles_j"].array._pa_array).combine_chunks()
    both = pa.concat_arrays([a, b])
    offsets = np.asarray(both.offsets, dtype=np.int64)
    values = np.asarray(both.values.to_numpy(zero_copy_only=False), dtype=np.uint64)
    local = np.arange(n, dtype=np.int64)
    score = jaccard_pairs(offsets - offsets[0], values[offsets[0]:], local, local + n)
    return pd.DataFrame({"i": df["i"].to_numpy(np.int64), "j": df["j"].to_numpy(np.int64), "score": score})


def scored_pairs(sets, pairs, jaccard_pairs, npartitions: int):
    """Dask DataFrame ``(i, j, score)``: each pair joined with both shingle sets, then verified."""
    left = sets.rename(columns={"row": "i", "shingles": "shingles_i"})
    right = sets.rename(columns={"row": "j", "shingles": "shingles_j"})
    # task-based shuffles: distributed's P2P shuffle cannot carry Arrow list columns back to pandas
    joined = pairs.merge(left, on="i", how="inner", npartitions=npartitions, shuffle_method="tasks")
    joined = joined.merge(right, on="j", how="inner", npartitions=npartitions, shuffle_method="tasks")
    return joined.map_partitions(_jaccard, jaccard_pairs, meta=SCORED_META)


def distributed_candidates(ddf, table, participants: np.ndarray, params: FuzzyParams, backend, cfg,
                           executor: Executor):
    """Candidate pairs and their scores computed by Dask; returns ``(pi, pj, scores, sets, steps)`` with
    pairs as table rows sorted by ``(i, j)`` and ``sets`` the persisted shingle-set collection (for the
    members' similarity to their canonical)."""
    import dask.dataframe as dd
    steps = {}
    t0 = time.perf_counter()
    offs = table.part_offsets
    frames = [dask.delayed(sketch_frames, nout=2)(part, participants[offs[p]:offs[p + 1]], int(offs[p]), params,
                                                  backend)
              for p, part in enumerate(ddf.to_delayed())]
    bands = dd.from_delayed([f[0] for f in frames], meta=BANDS_META, verify_meta=False)
    sets = dd.from_delayed([f[1] for f in frames], meta=SETS_META, verify_meta=False)
    sets = executor.persist(sets, "fuzzy: minhash")
    nparts = max(1, ddf.npartitions)
    pairs = bands.shuffle("key", npartitions=nparts).map_partitions(
        _bucket_pairs, cfg.max_bucket_size, cfg.bucket_anchors, meta=PAIRS_META)
    pairs = pairs.shuffle("pair", npartitions=nparts).map_partitions(
        _unique_pairs, meta=pd.DataFrame({"i": pd.Series([], dtype=np.int64), "j": pd.Series([], dtype=np.int64)}))
    # the joins carry two shingle sets per pair: size their partitions by the number of pairs
    pairs = executor.persist(pairs, "fuzzy: candidate pairs (dask)")
    n_pairs = int(sum(executor.compute([dask.delayed(len)(p) for p in pairs.to_delayed()], "fuzzy: count pairs")))
    join_parts = max(nparts, n_pairs // JOIN_PAIRS_PER_PARTITION + 1)
    scored = scored_pairs(sets, pairs, backend.pairs.jaccard_pairs, join_parts)
    parts = executor.compute(scored.to_delayed(), "fuzzy: lsh + verify (dask)")
    steps["lsh+verify"] = time.perf_counter() - t0
    edges = pd.concat(parts, ignore_index=True) if parts else SCORED_META.copy()
    order = np.lexsort((edges["j"].to_numpy(), edges["i"].to_numpy()))
    pi, pj = edges["i"].to_numpy()[order], edges["j"].to_numpy()[order]
    scores = edges["score"].to_numpy()[order]
    log.info("fuzzy: %d candidate pairs verified on Dask; components run on the edge list (%.1f MB) here",
             len(pi), (pi.nbytes + pj.nbytes + scores.nbytes) / 1e6)
    return pi, pj, scores, sets, steps


def pair_scores(sets, pi: np.ndarray, pj: np.ndarray, jaccard_pairs, executor: Executor) -> np.ndarray:
    """Scores of the given pairs of table rows (a member and its canonical), by the same joins."""
    import dask.dataframe as dd
    if len(pi) == 0:
        return np.empty(0, np.float64)
    frame = pd.DataFrame({"i": pi.astype(np.int64), "j": pj.astype(np.int64)})
    pairs = dd.from_pandas(frame, npartitions=max(1, min(sets.npartitions, len(frame) // 10_000 + 1)))
    scored = pd.concat(executor.compute(scored_pairs(sets, pairs, jaccard_pairs, sets.npartitions).to_delayed(),
                                        "fuzzy: similarity to canonicals (dask)"), ignore_index=True)
    at = pd.MultiIndex.from_frame(scored[["i", "j"]]).get_indexer(pd.MultiIndex.from_frame(frame))
    return scored["score"].to_numpy()[at]
