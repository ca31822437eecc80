"""The fuzzy stage's LSH and verification as the engine's bucketed exchanges between partition tasks: on a
Dask cluster, and on local threads whose shingle sets would not fit the memory budget (``run.memory_limit``).
No step holds the corpus' sketches, and nothing per document comes to the driver.

1. each partition is sketched once (in one process by the read pass, each distinct text of the rows that
   may take part: ``exact.HostSketching``; on a cluster its participants, on the worker that holds it); its
   band keys and its shingle sets are kept apart from its state (``ApartSketches``; in one process in memory
   within the budget, else on disk, written once);
2. the band entries ``(key, row)`` go to bucket ``key % B`` (``lsh_buckets``); each bucket sorts its entries
   by key in radix bins and emits its pairs by ``pairs.bucket_pairs``' rule, packed ``i << 32 | j``, to the
   partition of ``i``, which keeps them without repeats;
3. verification (``KeptSets``): in one process a task per block of consecutive partitions (as many as half
   of what a task may hold: ``Executor.task_bytes``) scores its pairs (exact Jaccard) against its own sets
   and those of each partition holding a ``j``, loaded once and let go (``spill.Loader``); on a cluster a
   task per pair of blocks. No set is copied per pair into an exchange (a crawl's scattered copies sent a
   set to every partition of its copies: 2.25 GB written at x40, 0.4 GB/s here); one frame
   ``(i, j, score)`` a partition;
4. the components, canonicals and members' similarities follow by exchanges too
   (``components.exchange_components``, ``FuzzyDedup._canonicals``).

The pieces between the steps are kept by the engine too (``engine.shuffle.exchange``), so past the budget
they wait on disk. The candidate pairs and scores are the driver path's (``FuzzyDedup.run``), so the
components, canonicals and output are byte-identical. The CPU counterpart of ``device.distributed``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..engine.executor import Executor
from ..engine.partitions import Partitions
from ..engine.shuffle import by_bucket, exchange, owner_of
from ..engine.spill import Loader
from ..engine.tasks import delayed, value
from ..kernels.minhash import grown, take_sets_into
from ..kernels.pairs import distinct_pairs
from .fuzzy_lsh import SCORED_META, SHIFT32, aligned_scores, band_split, distinct_rows, pairs_by_partition



def _packed(pairs: pd.DataFrame) -> tuple:
    """Pairs of table rows ``(i, j)`` as an exchange's piece: ``(i << 32 | j,)``."""
    i, j = pairs["i"].to_numpy(np.int64).astype(np.uint64), pairs["j"].to_numpy(np.int64).astype(np.uint64)
    return ((i << SHIFT32) | j,)


def _distinct(pieces: list, first_row: int, n_rows: int) -> tuple:
    """A partition's distinct candidate pairs, packed, from its pieces (``(packed,)`` each): one piece."""
    return (distinct_pairs(np.concatenate([p[0] for p in pieces] + [np.empty(0, np.uint64)]), first_row, n_rows),)


def _n_pairs(piece: tuple) -> int:
    return len(piece[0])


def _block_pairs(pieces: list, part_offsets: np.ndarray, first: int) -> tuple:
    """The distinct pairs ``(i, j, r)`` of a block of partitions ``first .. first + k - 1`` (``r``: the block's
    partition of ``i``), sorted by ``(i, j)``; ``pieces[r]``: partition ``first + r``'s pieces of packed pairs
    (``(packed,)``, as ``by_bucket`` makes them)."""
    bounds = part_offsets[first:first + len(pieces) + 1]
    out = [distinct_rows(pieces[r], int(bounds[r]), int(bounds[r + 1] - bounds[r])) for r in range(len(pieces))]
    return (np.concatenate([o[0] for o in out] + [np.empty(0, np.int64)]),
            np.concatenate([o[1] for o in out] + [np.empty(0, np.int64)]),
            np.repeat(np.arange(len(out)), [len(o[0]) for o in out]))


def _score_into(scores: np.ndarray, pairs: tuple, owner_j: np.ndarray, own: list, parts: range, sets_of,
                part_offsets: np.ndarray, first: int, jaccard_between, gather_bytes: int) -> None:
    """Score the pairs ``(i, j, r)`` of a block of partitions ``first ..`` (``_block_pairs``; ``own[r]``: the
    sets of its partition ``r``, ``fuzzy_lsh.kept_apart``'s) whose ``j`` is held by one of ``parts``, into
    ``scores``; ``sets_of(p)`` gives partition ``p``'s sets.

    The pairs go in chunks of about ``gather_bytes`` of sets: the chunk's ``j`` sets are copied out of each
    partition that holds some, one partition after another, into one buffer that every chunk reuses (a fresh
    one per chunk was faulted in anew each time: a third of the stage's time on a templated corpus), then
    the chunk is scored in ``(i, j)`` order, so that each ``i``'s set is hashed once for all its pairs. Scored
    partition by partition, a crawl's scattered copies hashed it again for each partition of its ``j`` (1.5
    times the work)."""
    i, j, owner_i = pairs
    at_all = np.flatnonzero((owner_j >= parts.start) & (owner_j < parts.stop))  # in (r, i, j) order
    if not len(at_all):
        return
    set_bytes = sum(o["values"].nbytes for o in own) // max(1, sum(len(o["offsets"]) - 1 for o in own))
    step = max(1, gather_bytes // max(1, set_bytes))
    buffer = np.empty(0, np.uint64)
    for c in range(0, len(at_all), step):
        at = at_all[c:c + step]
        holder = owner_j[at]
        by_holder = np.argsort(holder, kind="stable")
        cuts = np.searchsorted(holder[by_holder], np.arange(parts.start, parts.stop + 1))
        gathered = np.empty(len(at), np.int64)  # each pair's set in the gathered CSR (in holder order)
        offsets = np.zeros(len(at) + 1, np.int64)
        end = 0
        for p in np.flatnonzero(np.diff(cuts)) + parts.start:
            first_at, stop_at = cuts[p - parts.start] - cuts[0], cuts[p - parts.start + 1] - cuts[0]
            sel = by_holder[first_at:stop_at]
            other = sets_of(p)
            idx = other["index"][j[at[sel]] - part_offsets[p]]
            np.cumsum(other["offsets"][idx + 1] - other["offsets"][idx], out=offsets[first_at + 1:stop_at + 1])
            offsets[first_at + 1:stop_at + 1] += end
            if offsets[stop_at] > len(buffer):  # grown seldom: the chunks are sized by the sets' mean bytes
                buffer = grown(buffer, end, int(offsets[stop_at]))
            end = take_sets_into(other["offsets"], other["values"], idx, buffer, end)
            gathered[sel] = np.arange(first_at, stop_at)
            del other
        values = buffer[:end]
        by_r = np.searchsorted(owner_i[at], np.arange(len(own) + 1))
        for r in np.flatnonzero(np.diff(by_r)):
            part = slice(by_r[r], by_r[r + 1])
            sel = at[part]
            scores[sel] = jaccard_between(own[r]["offsets"], own[r]["values"], offsets, values,
                                          own[r]["index"][i[sel] - part_offsets[first + r]], gathered[part])


def _score_in_place(scores: np.ndarray, pairs: tuple, owner_j: np.ndarray, own: list, others: list, start: int,
                    part_offsets: np.ndarray, first: int, jaccard_between) -> None:
    """``_score_into`` where the other partitions' sets are all in memory (``others``, partitions ``start ..``; a
    cluster task's arguments): each partition's pairs are scored against its sets where they are, with no
    copy (on the cluster, gathering them cost more than hashing an ``i`` again per partition of its ``j``)."""
    i, j, owner_i = pairs
    parts = range(start, start + len(others))
    at_all = np.flatnonzero((owner_j >= parts.start) & (owner_j < parts.stop))
    at_all = at_all[np.lexsort((owner_i[at_all], owner_j[at_all]))]  # by (partition of j, partition of i)
    cuts = np.searchsorted(owner_j[at_all], np.arange(parts.start, parts.stop + 1))
    for p in np.flatnonzero(np.diff(cuts)) + parts.start:
        at = at_all[cuts[p - parts.start]:cuts[p - parts.start + 1]]
        other = others[p - start]
        b = other["index"][j[at] - part_offsets[p]]
        by_r = np.searchsorted(owner_i[at], np.arange(len(own) + 1))  # ``at`` ascends by the partition of i too
        for r in np.flatnonzero(np.diff(by_r)):
            sel = at[by_r[r]:by_r[r + 1]]
            scores[sel] = jaccard_between(own[r]["offsets"], own[r]["values"], other["offsets"], other["values"],
                                          own[r]["index"][i[sel] - part_offsets[first + r]], b[by_r[r]:by_r[r + 1]])


def _frames(pairs: tuple, scores: np.ndarray, k: int) -> tuple:
    """One frame ``(i, j, score)`` per partition of a block's pairs (``_block_pairs``)."""
    i, j, owner_i = pairs
    bounds = np.searchsorted(owner_i, np.arange(k + 1))
    return tuple(pd.DataFrame({"i": i[bounds[r]:bounds[r + 1]], "j": j[bounds[r]:bounds[r + 1]],
                               "score": scores[bounds[r]:bounds[r + 1]]}) for r in range(k))


def _verify_block(pieces: list, own: list, loaders: list, part_offsets: np.ndarray, first: int,
                  jaccard_between, gather_bytes: int) -> tuple:
    """The exact Jaccard of the distinct pairs whose ``i`` is in partitions ``first .. first + k - 1``: one frame
    ``(i, j, score)`` sorted by ``(i, j)`` per partition. ``pieces[r]``: partition ``first + r``'s pieces of
    packed pairs; ``own[r]``: its sets. The sets of each other partition that holds a ``j`` are loaded once
    (``loaders``: a ``spill.Loader`` per partition) and let go, the sets of the pairs they meet gathered
    (``_score_into``): the block holds its own sets, one other partition's and what it gathered."""
    k = len(own)
    pairs = _block_pairs(pieces, part_offsets, first)
    scores = np.zeros(len(pairs[0]), np.float64)
    _score_into(scores, pairs, owner_of(part_offsets, pairs[1]), own, range(len(part_offsets) - 1),
                lambda p: own[p - first] if first <= p < first + k else loaders[p](), part_offsets, first,
                jaccard_between, gather_bytes)
    return _frames(pairs, scores, k)


def _score_block(pairs: tuple, own: list, others: list, part_offsets: np.ndarray, first: int, start: int,
                 jaccard_between) -> np.ndarray:
    """The scores of the pairs (``_block_pairs``) of the block from partition ``first`` whose ``j`` is held by
    partitions ``start .. start + len(others) - 1`` (``others``: their sets), in the pairs' order."""
    owner_j = owner_of(part_offsets, pairs[1])
    scores = np.zeros(len(owner_j), np.float64)
    _score_in_place(scores, pairs, owner_j, own, others, start, part_offsets, first, jaccard_between)
    return scores[(owner_j >= start) & (owner_j < start + len(others))]


def _assembled(pairs: tuple, scores: list, blocks: list, part_offsets: np.ndarray, k: int) -> tuple:
    """``_frames`` of a block's pairs from the scores ``_score_block`` gave against each block of ``blocks``."""
    owner_j = owner_of(part_offsets, pairs[1])
    out = np.zeros(len(owner_j), np.float64)
    for (start, stop), got in zip(blocks, scores):
        out[(owner_j >= start) & (owner_j < stop)] = got
    return _frames(pairs, out, k)


def verify_blocks(nbytes: list, block_bytes: int) -> list[tuple[int, int]]:
    """Runs ``(first, stop)`` of consecutive partitions whose sets (``nbytes`` each) hold at most ``block_bytes``
    together (at least one partition each): one verification task each."""
    blocks, first, held = [], 0, 0
    for p, size in enumerate(nbytes):
        if p > first and held + size > block_bytes:
            blocks.append((first, p))
            first, held = p, 0
        held += size
    if len(nbytes):
        blocks.append((first, len(nbytes)))
    return blocks


def lsh_buckets(band_bytes: int, n_parts: int, executor: Executor) -> int:
    """Buckets of the band entries for ``band_bytes`` of band keys: as few as fit a task's share (a bucket's
    entries, two words a key, and its pairs) and keep every thread busy. Each bucket takes a piece from each
    partition and gives one to each: at one a partition, 64 partitions made 8,192 pieces and spent as long
    on them as on the pairs. On a cluster every piece of a small exchange is a task, and a large one is a
    P2P shuffle."""
    by_memory = -(-6 * band_bytes // max(1, executor.task_bytes))
    return max(1, min(n_parts, max(by_memory, 2 * executor.workers)))


class KeptSets:
    """Scores of given pairs of table rows against the kept shingle sets of each partition (the counterpart of
    ``device.distributed.DeviceSets``, for ``FuzzyDedup._canonicals``); ``nbytes[p]``: what partition ``p``'s hold."""

    def __init__(self, sets: list, nbytes: list, jaccard_between):
        self.sets, self.nbytes, self.jaccard_between = sets, nbytes, jaccard_between

    def scored(self, table, executor: Executor, pairs: list, desc: str = "fuzzy: similarity to canonicals") -> list:
        """Per partition ``q``, a kept frame ``(i, j, score)`` of the distinct pairs in ``pairs[q]`` (a (delayed)
        frame ``(i, j)`` of table rows whose ``i`` are in partition ``q``), sorted by ``(i, j)``."""
        return self.scored_packed(table, executor, [[delayed(_packed)(f)] for f in pairs], desc)

    def scored_packed(self, table, executor: Executor, by_i: list, desc: str, measure=None):
        """``scored`` of the packed pairs ``i << 32 | j`` in ``by_i`` (per partition of ``i``, its pieces); with
        ``measure``, ``(scored, measure of each frame)`` (``Executor.persist_tasks``).

        In one process a task verifies a block of partitions whose sets fit in half of what a task may hold
        (``Executor.task_bytes``), streaming the other partitions' sets through. On a cluster a task's
        arguments are all fetched before it starts, so a task scores one block's pairs against the sets of
        one block (each block a quarter of what a task may hold), and a last task per block puts its scores
        together: each block's sets travel once to each block that needs them, and no set is copied per pair."""
        offs = table.part_offsets
        jaccard_between = self.jaccard_between
        if executor.client is None:
            loaders = [Loader(s) for s in self.sets]
            tasks = []
            for first, stop in verify_blocks(self.nbytes, executor.task_bytes // 2):
                tasks += list(delayed(_verify_block, nout=stop - first)(by_i[first:stop], self.sets[first:stop],
                                                                        loaders, offs, first, jaccard_between,
                                                                        executor.task_bytes // 8))
            return executor.persist_tasks(tasks, desc, measure)
        blocks = verify_blocks(self.nbytes, executor.task_bytes // 4)
        tasks = []
        for first, stop in blocks:
            pairs = delayed(_block_pairs)(by_i[first:stop], offs, first)
            own = self.sets[first:stop]
            scores = [delayed(_score_block)(pairs, own, self.sets[start:end], offs, first, start, jaccard_between)
                      for start, end in blocks]
            tasks += list(delayed(_assembled, nout=stop - first)(pairs, scores, blocks, offs, stop - first))
        return executor.persist_tasks(tasks, desc, measure)

    def pair_scores(self, table, executor: Executor, pi: np.ndarray, pj: np.ndarray) -> np.ndarray:
        """float64 score of each pair ``(pi[k], pj[k])`` of table rows, in their order."""
        if len(pi) == 0:
            return np.empty(0, np.float64)
        pi, pj = pi.astype(np.int64), pj.astype(np.int64)
        by_i = [[value(((i.astype(np.uint64) << SHIFT32) | j.astype(np.uint64),))]
                for i, j in by_bucket(owner_of(table.part_offsets, pi), table.npartitions, pi, pj)]
        scored = executor.compute(self.scored_packed(table, executor, by_i, "fuzzy: similarity to canonicals"),
                                  "fuzzy: similarity to canonicals")
        return aligned_scores(pd.concat(scored, ignore_index=True), pi, pj)


def exchange_candidates(table, participants: list, backend, cfg, executor: Executor, made: "ApartSketches"):
    """The scored candidate pairs of the participants (per partition a (delayed) bool mask of its rows):
    ``(scored, n_pairs, sets)``, ``scored`` a ``Partitions`` of frames ``(i, j, score)`` by partition of ``i``,
    ``sets`` the ``KeptSets`` that scores other pairs. ``made``: the read pass's sketches."""
    n_parts, offs = table.npartitions, table.part_offsets
    n_buckets = lsh_buckets(sum(made.bands_nbytes), n_parts, executor)
    bands = exchange(executor, band_split, [(b, participants[p], int(offs[p])) for p, b in enumerate(made.bands)],
                     n_buckets, desc="fuzzy: band entries")
    by_i = exchange(executor, pairs_by_partition, [(b,) for b in bands], n_parts, cfg.max_bucket_size,
                    cfg.bucket_anchors, offs, backend.pairs.entry_pairs, desc="fuzzy: candidate pairs")
    pairs, lengths = executor.persist_tasks([delayed(_distinct)(pieces, int(offs[q]), int(offs[q + 1] - offs[q]))
                                             for q, pieces in enumerate(by_i)], "fuzzy: candidate pairs",
                                            measure=_n_pairs)
    # the band keys and the pieces go once the pairs are kept (on a cluster, a lazy task holds its inputs'
    # keys, not their futures: they had to stay until now)
    sets = KeptSets(made.sets, made.sets_nbytes, backend.pairs.jaccard_between)
    made.bands = None
    del bands, by_i
    scored = sets.scored_packed(table, executor, [[p] for p in pairs], "fuzzy: verify")
    n_pairs = int(sum(lengths))
    return Partitions(scored, SCORED_META), n_pairs, sets


@dataclass
class ApartSketches:
    """Each partition's sketches kept apart from its state (``fuzzy_lsh.kept_apart``): (delayed) ``bands`` and
    ``sets`` per partition, and what each holds."""
    bands: list
    sets: list
    bands_nbytes: list
    sets_nbytes: list
