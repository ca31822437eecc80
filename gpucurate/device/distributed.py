"""The fuzzy stage's LSH and verification where the sketches are: on the GPUs of a Dask cluster (one worker
per GPU), or in one process with ``fuzzy.lsh=dask``. The device counterpart of ``stages.fuzzy_exchange``.

Each partition's sketches stay where its text pass left them (the state's ``sketch``: on the device of
the worker that holds the state). Three exchanges (``engine.shuffle.exchange``) move device arrays between
the partition tasks, never through this process:

1. the participants' band entries ``(key, row)``, by ``key % P``; each bucket task sorts its entries by
   ``(key, row)`` and emits the bucket pairs (``pairs.bucket_pairs``' rule), packed ``i << 32 | j``;
2. the pairs, to the partition of ``j``, which drops the repeats and sends ``j``'s shingle set once to
   each partition that holds an ``i`` of its pairs, with those pairs;
3. there each pair is scored against ``i``'s set (exact Jaccard).

Only the scored pairs ``(i, j, score)`` come back to the host, as one pandas frame per partition of ``i``
(what the host path's ``KeptSets`` gives), so components and canonicals run as on the host path.
The sketches and pieces are ``arrays.Spillable``s: on each device they stay within ``run.device_memory``,
and one sent to another worker goes through host memory (its pickle holds host arrays), counted in the
ledger; device-to-device sends over UCX are not used.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..engine.shuffle import by_bucket, exchange
from ..engine.tasks import delayed, to_dask, value
from ..stages.fuzzy_lsh import SCORED_META, aligned_scores
from . import glue
from .arrays import Spillable


def _band_split(state: dict, first_row: int, mask, n_buckets: int, resident) -> tuple:
    """The band entries ``(key, row)`` of the partition's participants (``mask``: bool over its rows) with
    shingles, one piece per bucket ``key % n_buckets``."""
    dev, xp = resident.dev, resident.dev.xp
    with dev.lock, dev.step("fuzzy: lsh"):
        sk = state["sketch"].get()
        has = (sk.set_offsets[1:] - sk.set_offsets[:-1]) > 0  # a set left empty shares no bucket (host path too)
        local = dev.nonzero(dev.to_device(np.asarray(mask, bool)) & has)
        bands = sk.keys.shape[1]
        keys = xp.reshape(xp.take(sk.keys, local, axis=0), (-1,))
        rows = xp.take(local, xp.arange(keys.shape[0], dtype=xp.int64) // bands) + first_row
        return _kept(dev, glue.by_bucket(dev, xp.astype(keys % n_buckets, xp.int64), n_buckets, keys, rows))


def _bucket_pairs(pieces: list, n_parts: int, resident, max_bucket: int, anchors: int,
                  part_offsets: np.ndarray) -> tuple:
    """One bucket's distinct candidate pairs (packed), one piece per partition of ``j``."""
    dev, xp = resident.dev, resident.dev.xp
    with dev.lock, dev.step("fuzzy: lsh"):
        pieces = [p.get() for p in pieces]
        keys, rows = xp.concat([p[0] for p in pieces]), xp.concat([p[1] for p in pieces])
        # rows ascend already (each piece in row order, the pieces in partition order): a stable sort by key
        order = xp.argsort(keys, stable=True)
        packed = glue.unique_pairs(dev, glue.bucket_pairs(dev, xp.take(keys, order), xp.take(rows, order),
                                                         max_bucket, anchors))
        _, j = glue.unpack_pairs(dev, packed)
        return _kept(dev, glue.by_bucket(dev, glue.owners(dev, dev.to_device(part_offsets), j), n_parts, packed))


def _pairs_split(pairs: pd.DataFrame, n_parts: int, resident, part_offsets: np.ndarray) -> tuple:
    """Given pairs of table rows ``(i, j)`` (a host frame; 8 bytes a pair go up), one piece per partition
    of ``j``."""
    dev = resident.dev
    i, j = pairs["i"].to_numpy(np.int64), pairs["j"].to_numpy(np.int64)
    with dev.lock, dev.step("fuzzy: pairs up"):
        packed = dev.to_device((i.astype(np.uint64) << np.uint64(32)) | j.astype(np.uint64))
        _, j_dev = glue.unpack_pairs(dev, packed)
        return _kept(dev, glue.by_bucket(dev, glue.owners(dev, dev.to_device(part_offsets), j_dev), n_parts, packed))


def _send_sets(pieces: list, state: dict, first_row: int, n_parts: int, resident, part_offsets: np.ndarray) -> tuple:
    """At the partition of ``j``: its distinct pairs, and the set of each ``j`` once per partition of the
    ``i``'s it pairs with; one piece ``(i, j, sent_j, set lengths, set values)`` per partition of ``i``."""
    dev, xp = resident.dev, resident.dev.xp
    with dev.lock, dev.step("fuzzy: verify"):
        i, j = glue.unpack_pairs(dev, glue.unique_pairs(dev, xp.concat([p.get()[0] for p in pieces])))
        sk = state["sketch"].get()
        dest = glue.owners(dev, dev.to_device(part_offsets), i)
        order = glue.lexsort_order(xp, dest, j)
        dest_sorted, j_sorted = xp.take(dest, order), xp.take(j, order)
        once = glue.run_starts(xp, j_sorted) | glue.run_starts(xp, dest_sorted)
        sent_j, sent_dest = dev.compress(once, j_sorted, dest_sorted)
        offsets, values = glue.take_sets(dev, sk.set_offsets, sk.set_values, sent_j - first_row)
        value_dest = xp.take(sent_dest, glue.segment_ids(xp, offsets, values.shape[0]))
        pairs, sets, set_values = glue.by_buckets(dev, n_parts, (dest, i, j),
                                                  (sent_dest, sent_j, offsets[1:] - offsets[:-1]),
                                                  (value_dest, values))
        return _kept(dev, [(*p, *s, *v) for p, s, v in zip(pairs, sets, set_values)])


def _verify(pieces: list, state: dict, first_row: int, resident) -> pd.DataFrame:
    """The exact Jaccard of the pairs whose ``i`` is in this partition (``j``'s sets received), as a host
    frame ``(i, j, score)`` sorted by ``(i, j)``."""
    dev, xp = resident.dev, resident.dev.xp
    with dev.lock, dev.step("fuzzy: verify"):
        pieces = [p.get() for p in pieces]
        i, j, sent_j, lengths, values = (xp.concat([p[k] for p in pieces]) for k in range(5))
        sk = state["sketch"].get()
        own = sk.set_offsets.shape[0] - 1
        # one CSR: this partition's sets, then the received ones (sent_j ascending: owners in row order)
        offsets = xp.concat([sk.set_offsets, sk.set_offsets[-1] + xp.cumulative_sum(lengths)])
        scores = glue.jaccard(dev, offsets, xp.concat([sk.set_values, values]), i - first_row,
                              own + xp.searchsorted(sent_j, j))
        order = glue.lexsort_order(xp, i, j)
        with dev.step("fuzzy: scored pairs"):
            return pd.DataFrame({"i": dev.to_host(xp.take(i, order)), "j": dev.to_host(xp.take(j, order)),
                                 "score": dev.to_host(xp.take(scores, order))})


def _kept(dev, pieces) -> tuple:
    """An exchange's pieces as ``Spillable``s: held until their bucket task runs, they may go to host memory
    meanwhile (``run.device_memory``). Each is copied out of the split's arrays, so that spilling it frees
    its bytes (a slice would keep the whole array alive)."""
    xp = dev.xp
    return tuple(Spillable(dev, tuple(xp.asarray(a, copy=True) for a in piece)) for piece in pieces)


def _scored(table, to_owner: list, resident, executor, desc: str) -> list:
    """Persisted per-partition frames ``(i, j, score)`` of the pairs whose ``i`` is there, from the pairs'
    pieces at the partitions of their ``j`` (``to_owner[q]``)."""
    offs, n_parts = table.part_offsets, table.npartitions
    state_rows = table.state_rows()
    to_verifier = exchange(executor, _send_sets, [(to_owner[q], s, first) for q, (s, first) in enumerate(state_rows)],
                           n_parts, resident, offs, desc=f"{desc}: send sets")
    return executor.persist_tasks([delayed(_verify)(to_verifier[r], s, first, resident)
                                   for r, (s, first) in enumerate(state_rows)], desc)


def device_candidates(table, participants: list, resident, cfg, executor):
    """The scored candidate pairs of the participants (per partition a (delayed) bool mask of its rows):
    ``(scored, n_pairs, sets)`` like ``fuzzy_exchange.exchange_candidates``: ``scored`` a Dask DataFrame
    ``(i, j, score)`` of table rows (``i < j``), ``sets`` the ``DeviceSets`` that scores other pairs."""
    import dask.dataframe as dd
    n_parts, offs = table.npartitions, table.part_offsets
    inputs = [(s, first, participants[p]) for p, (s, first) in enumerate(table.state_rows())]
    bands = exchange(executor, _band_split, inputs, n_parts, resident, desc="fuzzy: band entries (device)")
    to_owner = exchange(executor, _bucket_pairs, [(b,) for b in bands], n_parts, resident, cfg.max_bucket_size,
                        cfg.bucket_anchors, offs, desc="fuzzy: candidate pairs (device)")
    del bands  # in one process: the pieces themselves, freed as soon as they are used
    scored = _scored(table, to_owner, resident, executor, "fuzzy: verify (device)")
    del to_owner
    n_pairs = int(sum(executor.compute([delayed(len)(f) for f in scored], "fuzzy: count pairs")))
    return dd.from_delayed(to_dask(scored), meta=SCORED_META, verify_meta=False), n_pairs, DeviceSets(resident)


class DeviceSets:
    """Scores of given pairs of table rows against the shingle sets on the devices (the states' sketches);
    the counterpart of ``fuzzy_exchange.KeptSets``."""

    def __init__(self, resident):
        self.resident = resident

    def scored(self, table, executor, pairs: list) -> list:
        """Per partition ``q``, a delayed frame ``(i, j, score)`` of the pairs in ``pairs[q]`` (a delayed
        frame ``(i, j)`` whose ``i`` are in partition ``q``)."""
        to_owner = exchange(executor, _pairs_split, [(f,) for f in pairs], table.npartitions, self.resident,
                            table.part_offsets, desc="fuzzy: pairs to their sets")
        return _scored(table, to_owner, self.resident, executor, "fuzzy: similarity to canonicals (device)")

    def pair_scores(self, table, executor, pi: np.ndarray, pj: np.ndarray) -> np.ndarray:
        """float64 score of each pair ``(pi[k], pj[k])`` of table rows, in their order."""
        if len(pi) == 0:
            return np.empty(0, np.float64)
        owner = np.searchsorted(table.part_offsets[1:], pi, side="right")
        frames = [value(pd.DataFrame({"i": i, "j": j}))
                  for i, j in by_bucket(owner, table.npartitions, pi.astype(np.int64), pj.astype(np.int64))]
        scored = executor.compute(self.scored(table, executor, frames), "fuzzy: similarity to canonicals (device)")
        return aligned_scores(pd.concat(scored, ignore_index=True), pi, pj)
