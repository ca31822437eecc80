"""The fuzzy stage's LSH and verification as the engine's bucketed exchanges, for a run on local threads whose
shingle sets would not fit its memory budget (``run.memory_limit``): no step holds the corpus' sketches.

1. each partition's participants are sketched once; its band keys and its shingle sets are kept apart where
   the engine keeps a partition's state (``Executor.persist_tasks``: in memory within the budget, else on
   disk, written once);
2. the band entries ``(key, row)`` go to bucket ``key % P``; each bucket sorts its entries by
   ``(key, row)`` and emits its pairs by ``pairs.bucket_pairs``' rule, packed ``i << 32 | j``, to the
   partition of ``i``;
3. a task per block of consecutive partitions (as many as half of what a task may hold:
   ``Executor.task_bytes``) drops the repeats and scores its pairs (exact Jaccard) against its own sets and
   those of each partition holding a ``j``, loaded once and let go (``spill.Loader``): no set is copied
   into an exchange, so nothing but the sets themselves is ever written to disk (a crawl's scattered
   copies sent a set to every partition of its copies: 2.25 GB written at x40, 0.4 GB/s here); one frame
   ``(i, j, score)`` a partition;
4. the components, canonicals and members' similarities follow by exchanges too
   (``components.exchange_components``, ``FuzzyDedup._canonicals``): nothing per document comes to the driver.

The pieces between the steps are kept by the engine too (``engine.shuffle.exchange``), so past the budget
they wait on disk. The candidate pairs and scores are the driver path's (``FuzzyDedup.run``), so the
components, canonicals and output are byte-identical. The CPU counterpart of ``device.distributed``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..engine.executor import Executor
from ..engine.partitions import Partitions
from ..engine.shuffle import exchange, owner_of
from ..engine.spill import Loader, nbytes_of
from ..engine.tasks import delayed
from .fuzzy_dask import SCORED_META, SHIFT32, band_split, distinct_rows, pairs_by_partition, sketch_apart
from .sketches import FuzzyParams



def _packed(pairs: pd.DataFrame) -> tuple:
    """Pairs of table rows ``(i, j)`` as an exchange's piece: ``(i << 32 | j,)``."""
    i, j = pairs["i"].to_numpy(np.int64).astype(np.uint64), pairs["j"].to_numpy(np.int64).astype(np.uint64)
    return ((i << SHIFT32) | j,)


def _verify_block(pieces: list, own: list, loaders: list, part_offsets: np.ndarray, first: int,
                  jaccard_between) -> tuple:
    """The exact Jaccard of the distinct pairs whose ``i`` is in partitions ``first .. first + k - 1``: one frame
    ``(i, j, score)`` sorted by ``(i, j)`` per partition. ``pieces[r]``: partition ``first + r``'s pieces of
    packed pairs (``(packed,)``, as ``by_bucket`` makes them); ``own[r]``: its sets. The sets of each other
    partition that holds a ``j`` are loaded once (``loaders``: a ``spill.Loader`` per partition), the pairs
    they meet scored and let go: the block holds its own sets and one other partition's at a time."""
    k = len(own)
    out = []
    for r in range(k):
        first_row, n_rows = int(part_offsets[first + r]), int(part_offsets[first + r + 1] - part_offsets[first + r])
        out.append(distinct_rows(pieces[r], first_row, n_rows))
    i = np.concatenate([o[0] for o in out])
    j = np.concatenate([o[1] for o in out])
    scores = np.zeros(len(i), np.float64)
    owner_i = np.repeat(np.arange(k), [len(o[0]) for o in out])
    owner_j = owner_of(part_offsets, j)
    # the pairs in blocks of (partition of j, partition of i), each in (i, j) order
    order = np.lexsort((owner_i, owner_j))
    cuts = np.searchsorted(owner_j[order], np.arange(len(part_offsets)))
    for p in range(len(part_offsets) - 1):
        at = order[cuts[p]:cuts[p + 1]]
        if not len(at):
            continue
        other = own[p - first] if first <= p < first + k else loaders[p]()
        b = np.searchsorted(other["rows"], j[at])
        by_r = np.searchsorted(owner_i[at], np.arange(k + 1))  # ``at`` ascends by the partition of i too
        for r in np.flatnonzero(np.diff(by_r)):
            sel = at[by_r[r]:by_r[r + 1]]
            scores[sel] = jaccard_between(own[r]["offsets"], own[r]["values"], other["offsets"], other["values"],
                                          np.searchsorted(own[r]["rows"], i[sel]), b[by_r[r]:by_r[r + 1]])
        del other
    bounds = np.cumsum([0] + [len(o[0]) for o in out])
    return tuple(pd.DataFrame({"i": i[bounds[r]:bounds[r + 1]], "j": j[bounds[r]:bounds[r + 1]],
                               "score": scores[bounds[r]:bounds[r + 1]]}) for r in range(k))


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


def estimated_sketch_bytes(text_bytes: int, shingle: str) -> int:
    """What the sketches of ``text_bytes`` of text hold: about one 8-byte hash a word (word shingles, a word
    and its space about 6 bytes) or a character (character shingles), and the band keys."""
    return int(text_bytes * (1.5 if shingle == "word" else 8))


class KeptSets:
    """Scores of given pairs of table rows against the kept shingle sets of each partition (the counterpart of
    ``fuzzy_dask.HostSets`` for ``FuzzyDedup._canonicals``); ``nbytes[p]``: what partition ``p``'s hold."""

    def __init__(self, sets: list, nbytes: list, jaccard_between):
        self.sets, self.nbytes, self.jaccard_between = sets, nbytes, jaccard_between

    def scored(self, table, executor: Executor, pairs: list, desc: str = "fuzzy: similarity to canonicals") -> list:
        """Per partition ``q``, a kept frame ``(i, j, score)`` of the distinct pairs in ``pairs[q]`` (a (delayed)
        frame ``(i, j)`` of table rows whose ``i`` are in partition ``q``), sorted by ``(i, j)``."""
        return self.scored_packed(table, executor, [[delayed(_packed)(f)] for f in pairs], desc)

    def scored_packed(self, table, executor: Executor, by_i: list, desc: str, measure=None):
        """``scored`` of the packed pairs ``i << 32 | j`` in ``by_i`` (per partition of ``i``, its pieces); with
        ``measure``, ``(scored, measure of each frame)`` (``Executor.persist_tasks``). A task verifies a block
        of partitions whose sets fit in half of what a task may hold (``Executor.task_bytes``), streaming the
        other partitions' sets through."""
        loaders = [Loader(s) for s in self.sets]
        tasks = []
        for first, stop in verify_blocks(self.nbytes, executor.task_bytes // 2):
            block = delayed(_verify_block, nout=stop - first)(by_i[first:stop], self.sets[first:stop], loaders,
                                                              table.part_offsets, first, self.jaccard_between)
            tasks += list(block)
        return executor.persist_tasks(tasks, desc, measure)


def exchange_candidates(ddf, table, participants: list, params: FuzzyParams, backend, cfg, executor: Executor):
    """The scored candidate pairs of the participants (per partition a (delayed) bool mask of its rows):
    ``(scored, n_pairs, sets)`` like ``fuzzy_dask.distributed_candidates``, ``scored`` a ``Partitions`` of
    frames ``(i, j, score)`` by partition of ``i``, ``sets`` the ``KeptSets`` that scores other pairs."""
    n_parts, offs = table.npartitions, table.part_offsets
    made = [delayed(sketch_apart, nout=2)(part, participants[p], int(offs[p]), params, backend)
            for p, part in enumerate(ddf.to_delayed())]
    # a partition's two values next to each other: the graph's order takes both before the next sketch
    kept, nbytes = executor.persist_tasks([m[k] for m in made for k in (0, 1)], "fuzzy: minhash", measure=nbytes_of)
    bands = exchange(executor, band_split, [(b,) for b in kept[0::2]], n_parts, desc="fuzzy: band entries")
    by_i = exchange(executor, pairs_by_partition, [(b,) for b in bands], n_parts, cfg.max_bucket_size,
                    cfg.bucket_anchors, offs, backend.pairs.bucket_pairs, desc="fuzzy: candidate pairs")
    del bands  # their pieces go as soon as their bucket task has run
    sets = KeptSets(kept[1::2], nbytes[1::2], backend.pairs.jaccard_between)
    del kept  # the band keys go with it
    scored, lengths = sets.scored_packed(table, executor, by_i, "fuzzy: verify", measure=len)
    n_pairs = int(sum(lengths))
    return Partitions(scored, SCORED_META), n_pairs, sets
