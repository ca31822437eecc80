"""The fuzzy stage's LSH and verification as Dask collections, for corpora whose band keys and shingle sets
do not fit in one process.

Sketches stay on the workers. Band entries ``(bucket key, row)`` go by the engine's exchange to bucket
``key % P`` (array pieces: on a cluster one P2P shuffle of whole pieces, not a row per entry), each bucket
walks its buckets with the same kernel as the driver path (all pairs up to ``fuzzy.max_bucket_size``
members, anchors beyond), the pairs go by a second exchange to the partition of their ``i``, which drops
the repeats, and each pair is verified there, ``j``'s shingle set sent once to each partition that needs
it (``scored_pairs``: two shuffles of frames). Connected components then run either on the driver over
the gathered edge list, or on Dask (``stages.components``) when the edge list is larger than
``fuzzy.driver_max_pairs`` (``fuzzy.components``). The candidate pairs, scores and therefore the
annotations equal the driver path's either way (tested).
"""

from __future__ import annotations

import logging
import time

import numpy as np
import pandas as pd
import pyarrow as pa

from ..engine.executor import Executor
from ..engine.shuffle import by_bucket, exchange, owner_of
from ..engine.tasks import delayed, to_dask, value
from ..kernels.pairs import distinct_pairs, index_of
from .sketches import FuzzyParams, signature_partition

log = logging.getLogger("gpucurate")

#: a pair of table rows packed in one uint64: ``i << SHIFT32 | j``
LOW32 = np.uint64(0xFFFFFFFF)
SHIFT32 = np.uint64(32)

#: candidate pairs a partition of the sorted edges and of the components (each round costs per partition)
EDGES_PER_PARTITION = 500_000
_LIST = pd.ArrowDtype(pa.list_(pa.uint64()))
SETS_META = pd.DataFrame({"row": pd.Series([], dtype=np.int64), "shingles": pd.Series([], dtype=_LIST)})
_REQUESTS_META = pd.DataFrame({k: pd.Series([], dtype=np.int64) for k in ("j", "pi", "pj")})
_SENT_META = pd.DataFrame({"j": pd.Series([], dtype=np.int64), "pi": pd.Series([], dtype=np.int64),
                           "shingles": pd.Series([], dtype=pd.ArrowDtype(pa.large_binary()))})
SCORED_META = pd.DataFrame({"i": pd.Series([], dtype=np.int64), "j": pd.Series([], dtype=np.int64),
                            "score": pd.Series([], dtype=np.float64)})


def sketch_apart(part: pd.DataFrame, mask, first_row: int, params: FuzzyParams, backend) -> tuple[dict, dict]:
    """The partition's participants (``rows``: table rows, ascending), as two values kept apart: the band
    entries' inputs ``{"rows", "keys"}`` (uint64[m', bands], only the participants with shingles: an empty set
    shares no bucket, as on the driver path), and the shingle sets ``{"rows", "offsets", "values"}`` (CSR,
    int64[m + 1] and uint64), which the verification loads again and again without the keys."""
    mask = np.asarray(mask, bool)
    keys, offsets, values, _ = signature_partition(part, mask, params, backend)
    rows = first_row + np.flatnonzero(mask).astype(np.int64)
    has = np.diff(offsets) > 0
    return {"rows": rows[has], "keys": keys[has]}, {"rows": rows, "offsets": offsets, "values": values}


def band_split(bands: dict, n_buckets: int) -> tuple:
    """The band entries ``(key, row)``, one piece per bucket ``key % n_buckets``."""
    flat = bands["keys"].reshape(-1)
    rows = np.repeat(bands["rows"], bands["keys"].shape[1])
    return by_bucket((flat % np.uint64(n_buckets)).astype(np.int64), n_buckets, flat, rows)


def pairs_by_partition(pieces: list, n_parts: int, max_bucket: int, anchors: int, part_offsets: np.ndarray,
                       bucket_pairs) -> tuple:
    """One bucket's candidate pairs, packed ``i << 32 | j``, one piece per partition of ``i``."""
    keys = np.concatenate([p[0] for p in pieces]) if pieces else np.empty(0, np.uint64)
    rows = np.concatenate([p[1] for p in pieces]) if pieces else np.empty(0, np.int64)
    # rows ascend already (each piece in row order, the pieces in partition order): a stable sort by key
    order = np.argsort(keys, kind="stable")
    packed = bucket_pairs(keys[order], rows[order], max_bucket, anchors) if len(keys) else np.empty(0, np.uint64)
    return by_bucket(owner_of(part_offsets, (packed >> SHIFT32).astype(np.int64)), n_parts, packed)


def distinct_rows(pieces: list, first_row: int, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct pairs ``(i int64[e], j int64[e])`` of one partition of ``i`` (table rows ``first_row ..
    first_row + n_rows - 1``) from its pieces ``(packed,)`` of ``pairs_by_partition``, sorted by ``(i, j)``."""
    packed = distinct_pairs(np.concatenate([p[0] for p in pieces]), first_row, n_rows) if pieces \
        else np.empty(0, np.uint64)
    return (packed >> SHIFT32).astype(np.int64), (packed & LOW32).astype(np.int64)


def _pairs_of(pieces: list, first_row: int, n_rows: int) -> pd.DataFrame:
    i, j = distinct_rows(pieces, first_row, n_rows)
    return pd.DataFrame({"i": i, "j": j})


def _sets_frame(sets: dict) -> pd.DataFrame:
    """A partition's shingle sets (``sketch_apart``'s CSR) as the frame the verification's shuffles carry."""
    shingles = pa.ListArray.from_arrays(pa.array(sets["offsets"].astype(np.int32)),
                                        pa.array(sets["values"], pa.uint64()))
    return pd.DataFrame({"row": sets["rows"], "shingles": pd.arrays.ArrowExtensionArray(shingles)})


def _requests(pairs: pd.DataFrame, offsets: np.ndarray, q: int) -> pd.DataFrame:
    """Each distinct ``j`` of partition ``q``'s pairs held by another partition, with ``q`` and the partition
    that holds ``j``'s set (a set held here is not sent)."""
    j = np.unique(pairs["j"].to_numpy(np.int64))
    j = j[(j < offsets[q]) | (j >= offsets[q + 1])]
    return pd.DataFrame({"j": j, "pi": np.full(len(j), q, np.int64), "pj": owner_of(offsets, j)})


def _check_part(index: pd.Index, q: int) -> None:
    if len(index) and not (index.to_numpy() == q).all():  # a bug, not bad input
        raise RuntimeError(f"pairs of partition {q} were shuffled to another partition")


def by_partition(frame, column: str, nparts: int):
    """``frame`` shuffled so that partition ``q`` holds its rows whose ``column`` is ``q`` (the index)."""
    return frame.set_index(column, divisions=tuple(range(nparts + 1)))


def _partitions(frame) -> list:
    return list(frame.to_delayed())


def _positions(sets: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """Index in ``sets`` (rows ascending) of each of ``rows``."""
    return np.searchsorted(sets["row"].to_numpy(np.int64), rows)


def _lists(column) -> pa.ListArray:
    return pa.chunked_array(column.array._pa_array, type=pa.list_(pa.uint64())).combine_chunks()


def _list_csr(sets: pa.ListArray) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets, values)`` of uint64 list values, offsets from 0."""
    offsets = np.asarray(sets.offsets, dtype=np.int64)
    values = np.asarray(sets.values.to_numpy(zero_copy_only=False), dtype=np.uint64)[offsets[0]:offsets[-1]]
    return offsets - offsets[0], values


def _as_binary(sets: pa.ListArray) -> pa.LargeBinaryArray:
    """Each uint64 set as one binary value of its 8-byte hashes: distributed's P2P shuffle carries binary
    columns but not list columns."""
    offsets, values = _list_csr(sets)
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(sets), [
        None, pa.py_buffer((offsets * 8).tobytes()), pa.py_buffer(values.tobytes())])


def _binary_csr(column) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets, values)`` of a binary column written by ``_as_binary``, offsets from 0."""
    arr = pa.chunked_array(column.array._pa_array, type=pa.large_binary()).combine_chunks()
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64, count=len(arr) + 1, offset=8 * arr.offset)
    n = int(offsets[-1] - offsets[0]) // 8
    values = np.frombuffer(arr.buffers()[2], dtype=np.uint64, count=n, offset=int(offsets[0])) if n \
        else np.empty(0, np.uint64)
    return (offsets - offsets[0]) // 8, values


def _send_sets(requests: pd.DataFrame, sets: pd.DataFrame, q: int) -> pd.DataFrame:
    """Requests ``(j, pi)`` whose ``j`` is in partition ``q`` (each distinct): the shingle set of each ``j``
    for partition ``pi``."""
    _check_part(requests.index, q)
    j = requests["j"].to_numpy(np.int64)
    shingles = _lists(sets["shingles"]).take(pa.array(_positions(sets, j)))
    return pd.DataFrame({"j": j, "pi": requests["pi"].to_numpy(np.int64),
                         "shingles": pd.arrays.ArrowExtensionArray(_as_binary(shingles))})


def _verify(pairs: pd.DataFrame, received: pd.DataFrame, sets: pd.DataFrame, q: int, jaccard_pairs) -> pd.DataFrame:
    """Exact Jaccard of the pairs ``(i, j)`` whose ``i`` is in partition ``q``, in their order: ``i``'s set
    from this partition's ``sets``, ``j``'s from them too or from the sets ``received``."""
    _check_part(received.index, q)
    if len(pairs) == 0:
        return SCORED_META.copy()
    own_offsets, own_values = _list_csr(_lists(sets["shingles"]))
    got_offsets, got_values = _binary_csr(received["shingles"])
    offsets = np.concatenate([own_offsets, own_offsets[-1] + got_offsets[1:]])
    values = np.concatenate([own_values, got_values])
    i, j = pairs["i"].to_numpy(np.int64), pairs["j"].to_numpy(np.int64)
    own_rows = sets["row"].to_numpy(np.int64)
    a = _positions(sets, i)
    here = (j >= own_rows[0]) & (j <= own_rows[-1])  # the rows of partition q with a set: all its participants
    b = np.where(here, _positions(sets, j), len(sets) + index_of(received["j"].to_numpy(np.int64), j))
    return pd.DataFrame({"i": i, "j": j, "score": jaccard_pairs(offsets, values, a, b)})


def scored_pairs(sets, offsets: np.ndarray, pairs: list, jaccard_pairs):
    """Dask DataFrame ``(i, j, score)``: the exact Jaccard of the pairs of table rows ``pairs[q]`` (a delayed
    frame ``(i, j)`` whose ``i`` are in partition ``q``), partition ``q`` in the order of ``pairs[q]``.

    ``sets`` partition ``q`` holds the shingle sets of table rows ``offsets[q]:offsets[q + 1]`` (ascending)
    and never moves. Each partition ``q`` asks the partition of each distinct ``j`` of its pairs for ``j``'s
    set, which is sent (as binary: P2P shuffles carry it) once to each partition that asked; there each
    pair is scored. So a set travels at most once to each partition that needs it, and the pairs stay put.
    """
    import dask.dataframe as dd
    nparts = sets.npartitions
    converted: dict = {}  # the pairs' tasks are shared by the requests and the verification
    requests = dd.from_delayed(to_dask([delayed(_requests)(p, offsets, q) for q, p in enumerate(pairs)], converted),
                               meta=_REQUESTS_META, verify_meta=False)
    by_j = by_partition(requests, "pj", nparts)
    sent = dd.from_delayed(to_dask([delayed(_send_sets)(r, s, q) for q, (r, s) in
                                    enumerate(zip(by_j.to_delayed(), sets.to_delayed()))]), meta=_SENT_META,
                           verify_meta=False)
    received = by_partition(sent, "pi", nparts)
    return dd.from_delayed(to_dask([delayed(_verify)(p, r, s, q, jaccard_pairs) for q, (p, r, s) in
                                    enumerate(zip(pairs, received.to_delayed(), sets.to_delayed()))], converted),
                           meta=SCORED_META, verify_meta=False)


def distributed_candidates(ddf, part_offsets: np.ndarray, participants: list, params: FuzzyParams, backend, cfg,
                           executor: Executor):
    """Candidate pairs and their scores computed by Dask from the rows selected by ``participants`` (per
    partition, a (delayed) bool mask); returns ``(scored, n_pairs, sets, steps)``: ``scored`` the persisted
    Dask DataFrame ``(i, j, score)`` of table rows (``i < j``; partition ``q`` holds the pairs whose ``i`` is
    in table partition ``q``, sorted by ``(i, j)``), ``sets`` the ``HostSets`` of the persisted
    shingle sets (for the members' similarity to their canonical)."""
    import dask.dataframe as dd
    steps = {}
    t0 = time.perf_counter()
    offs = part_offsets
    made = [delayed(sketch_apart, nout=2)(part, participants[p], int(offs[p]), params, backend)
            for p, part in enumerate(ddf.to_delayed())]
    # a partition's two values next to each other: the graph's order takes both before the next sketch; the
    # sets kept only as the frame the verification's shuffles carry
    kept = executor.persist_tasks([v for m in made for v in (m[0], delayed(_sets_frame)(m[1]))], "fuzzy: minhash")
    sets = executor.persist(dd.from_delayed(to_dask(kept[1::2]), meta=SETS_META, verify_meta=False),
                            "fuzzy: shingle sets")
    steps["minhash"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    nparts = max(1, ddf.npartitions)
    # the band entries and then the pairs by the engine's exchanges of array pieces (a P2P shuffle of
    # whole pieces on a cluster), not by shuffles of a row per entry
    bands = exchange(executor, band_split, [(b,) for b in kept[0::2]], nparts, desc="fuzzy: band entries")
    by_i = exchange(executor, pairs_by_partition, [(b,) for b in bands], nparts, cfg.max_bucket_size,
                    cfg.bucket_anchors, offs, backend.pairs.bucket_pairs, desc="fuzzy: candidate pairs (dask)")
    pairs = executor.persist_tasks([delayed(_pairs_of)(pieces, int(offs[q]), int(offs[q + 1] - offs[q]))
                                    for q, pieces in enumerate(by_i)], "fuzzy: candidate pairs (dask)")
    del bands, by_i, kept  # on a cluster, the band keys' futures go once the pairs are made
    n_pairs = int(sum(executor.compute([delayed(len)(p) for p in pairs], "fuzzy: count pairs")))
    steps["lsh"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    scored = executor.persist(scored_pairs(sets, offs, pairs, backend.pairs.jaccard_pairs),
                              "fuzzy: verify (dask)")
    steps["verify"] = time.perf_counter() - t0
    return scored, n_pairs, HostSets(sets, backend.pairs.jaccard_pairs), steps


class HostSets:
    """Scores of given pairs of table rows against the shingle sets of the host path (``sets``: a persisted
    Dask DataFrame whose partition ``p`` holds the rows of table partition ``p``); the counterpart of
    ``device.distributed.DeviceSets``."""

    def __init__(self, sets, jaccard_pairs):
        self.sets, self.jaccard_pairs = sets, jaccard_pairs

    def scored(self, table, executor: Executor, pairs: list) -> list:
        """Per partition ``q``, a delayed frame ``(i, j, score)`` of the pairs in ``pairs[q]`` (a delayed
        frame ``(i, j)`` whose ``i`` are in partition ``q``)."""
        return scored_pairs(self.sets, table.part_offsets, pairs, self.jaccard_pairs).to_delayed()

    def pair_scores(self, table, executor: Executor, pi: np.ndarray, pj: np.ndarray) -> np.ndarray:
        return pair_scores(self.sets, table.part_offsets, pi, pj, self.jaccard_pairs, executor)


def gather_edges(scored, executor: Executor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The scored pairs on the driver, sorted by ``(i, j)`` (each partition is, in row order)."""
    parts = executor.compute(scored.to_delayed(), "fuzzy: gather edges")
    edges = pd.concat(parts, ignore_index=True) if parts else SCORED_META.copy()
    return edges["i"].to_numpy(), edges["j"].to_numpy(), edges["score"].to_numpy()


def _select_rows(sets: pd.DataFrame, rows: np.ndarray) -> pd.DataFrame:
    return sets[np.isin(sets["row"].to_numpy(), rows)]


def pair_scores(sets, offsets: np.ndarray, pi: np.ndarray, pj: np.ndarray, jaccard_pairs,
                executor: Executor) -> np.ndarray:
    """Scores of the given pairs of table rows (a member and its canonical), by ``scored_pairs`` over only
    the shingle sets these pairs need (``sets`` partition ``p`` holds rows ``offsets[p]:offsets[p + 1]``)."""
    import dask.dataframe as dd
    if len(pi) == 0:
        return np.empty(0, np.float64)
    needed = np.unique(np.concatenate([pi, pj]).astype(np.int64))
    cuts = np.searchsorted(needed, offsets)
    few = dd.from_delayed(to_dask([delayed(_select_rows)(part, needed[cuts[p]:cuts[p + 1]])
                                   for p, part in enumerate(sets.to_delayed())]), meta=SETS_META, verify_meta=False)
    pi, pj = pi.astype(np.int64), pj.astype(np.int64)
    pairs = [value(pd.DataFrame({"i": i, "j": j}))
             for i, j in by_bucket(owner_of(offsets, pi), len(offsets) - 1, pi, pj)]
    scored = pd.concat(executor.compute(scored_pairs(few, offsets, pairs, jaccard_pairs).to_delayed(),
                                        "fuzzy: similarity to canonicals (dask)"), ignore_index=True)
    return aligned_scores(scored, pi, pj)


def aligned_scores(scored: pd.DataFrame, pi: np.ndarray, pj: np.ndarray) -> np.ndarray:
    """The ``score`` of each pair ``(pi[k], pj[k])`` in a frame ``(i, j, score)`` that holds every one."""
    frame = pd.DataFrame({"i": pi.astype(np.int64), "j": pj.astype(np.int64)})
    at = pd.MultiIndex.from_frame(scored[["i", "j"]]).get_indexer(pd.MultiIndex.from_frame(frame))
    return scored["score"].to_numpy()[at]
