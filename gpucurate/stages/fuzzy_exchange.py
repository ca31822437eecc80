"""The fuzzy stage's LSH and verification as the engine's bucketed exchanges, for a run on local threads whose
shingle sets would not fit its memory budget (``run.memory_limit``): no step holds the corpus' sketches.

1. each partition's participants are sketched once; its band keys and shingle sets are kept where the
   engine keeps a partition's state (``Executor.persist_tasks``: in memory within the budget, else on disk);
2. the band entries ``(key, row)`` go to bucket ``key % P``; each bucket sorts its entries by
   ``(key, row)`` and emits its pairs by ``pairs.bucket_pairs``' rule, packed ``i << 32 | j``, to the
   partition of ``j``;
3. there the repeats are dropped and ``j``'s set is sent once to each partition holding an ``i`` of its
   pairs, with those pairs;
4. there each pair is scored against ``i``'s set (exact Jaccard), one frame ``(i, j, score)`` a partition;
5. the components, canonicals and members' similarities follow by exchanges too
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
from ..engine.shuffle import by_bucket, exchange, owner_of
from ..engine.tasks import delayed
from ..kernels.pairs import take_sets
from .fuzzy_dask import SCORED_META
from .sketches import FuzzyParams, signature_partition

_LOW = np.uint64(0xFFFFFFFF)
_SHIFT = np.uint64(32)


def _sketch(part: pd.DataFrame, mask, first_row: int, params: FuzzyParams, backend) -> dict:
    """The partition's participants: ``rows`` (table rows, ascending), band ``keys`` uint64[m, bands] and
    their shingle sets as CSR ``offsets`` int64[m + 1], ``values`` uint64."""
    mask = np.asarray(mask, bool)
    keys, offsets, values, _ = signature_partition(part, mask, params, backend)
    return {"rows": first_row + np.flatnonzero(mask).astype(np.int64), "keys": keys, "offsets": offsets,
            "values": values}


def _band_split(sk: dict, n_buckets: int) -> tuple:
    """The band entries ``(key, row)`` of the participants with shingles (an empty set shares no bucket,
    as on the driver path), one piece per bucket ``key % n_buckets``."""
    has = np.diff(sk["offsets"]) > 0
    keys = sk["keys"][has]
    flat = keys.reshape(-1)
    rows = np.repeat(sk["rows"][has], keys.shape[1])
    return by_bucket((flat % np.uint64(n_buckets)).astype(np.int64), n_buckets, flat, rows)


def _bucket_pairs(pieces: list, n_parts: int, max_bucket: int, anchors: int, part_offsets: np.ndarray,
                  bucket_pairs) -> tuple:
    """One bucket's candidate pairs, packed ``i << 32 | j``, one piece per partition of ``j`` (which drops
    the repeats: a pair found under several keys)."""
    keys = np.concatenate([p[0] for p in pieces]) if pieces else np.empty(0, np.uint64)
    rows = np.concatenate([p[1] for p in pieces]) if pieces else np.empty(0, np.int64)
    # rows ascend already (each piece in row order, the pieces in partition order): a stable sort by key
    order = np.argsort(keys, kind="stable")
    packed = bucket_pairs(keys[order], rows[order], max_bucket, anchors) if len(keys) else np.empty(0, np.uint64)
    return by_bucket(owner_of(part_offsets, (packed & _LOW).astype(np.int64)), n_parts, packed)


def _pairs_split(pairs: pd.DataFrame, n_parts: int, part_offsets: np.ndarray) -> tuple:
    """Given pairs of table rows ``(i, j)``, packed, one piece per partition of ``j``."""
    i, j = pairs["i"].to_numpy(np.int64), pairs["j"].to_numpy(np.int64)
    packed = (i.astype(np.uint64) << _SHIFT) | j.astype(np.uint64)
    return by_bucket(owner_of(part_offsets, j), n_parts, packed)


def _send_sets(pieces: list, sk: dict, n_parts: int, part_offsets: np.ndarray) -> list:
    """At the partition of ``j``: its distinct pairs, and the set of each ``j`` once per partition of the
    ``i``'s it pairs with; one piece ``(i, j, sent_j, set lengths, set values)`` per partition of ``i``."""
    packed = np.unique(np.concatenate([p[0] for p in pieces])) if pieces else np.empty(0, np.uint64)
    i, j = (packed >> _SHIFT).astype(np.int64), (packed & _LOW).astype(np.int64)
    dest = owner_of(part_offsets, i)
    sent = np.unique((dest.astype(np.uint64) << _SHIFT) | j.astype(np.uint64))  # (dest, j) once, in order
    sent_dest, sent_j = (sent >> _SHIFT).astype(np.int64), (sent & _LOW).astype(np.int64)
    idx = np.searchsorted(sk["rows"], sent_j)
    lengths = sk["offsets"][idx + 1] - sk["offsets"][idx]
    values = take_sets(sk["offsets"], sk["values"], idx)
    # ``sent`` ascends by destination: each destination's sets are one slice (copied: a kept piece is
    # counted, and spilled, on its own)
    cut = np.searchsorted(sent_dest, np.arange(n_parts + 1))
    value_cut = np.concatenate(([0], np.cumsum(lengths)))[cut]
    pairs = by_bucket(dest, n_parts, i, j)
    return [(*pairs[q], sent_j[cut[q]:cut[q + 1]], lengths[cut[q]:cut[q + 1]],
             values[value_cut[q]:value_cut[q + 1]].copy()) for q in range(n_parts)]


def _verify(pieces: list, sk: dict, jaccard_pairs) -> pd.DataFrame:
    """The exact Jaccard of the pairs whose ``i`` is in this partition (``j``'s sets received), a frame
    ``(i, j, score)`` sorted by ``(i, j)``."""
    i, j, sent_j, lengths = (np.concatenate([p[k] for p in pieces]) for k in range(4))
    own = len(sk["rows"])
    # one CSR: this partition's sets, then the received ones (sent_j ascending: the pieces in row order)
    offsets = np.concatenate([sk["offsets"], sk["offsets"][-1] + np.cumsum(lengths)]).astype(np.int64)
    scores = jaccard_pairs(offsets, np.concatenate([sk["values"]] + [p[4] for p in pieces]),
                           np.searchsorted(sk["rows"], i).astype(np.int64),
                           (own + np.searchsorted(sent_j, j)).astype(np.int64))
    order = np.lexsort((j, i))
    return pd.DataFrame({"i": i[order], "j": j[order], "score": scores[order]})


def estimated_sketch_bytes(text_bytes: int, shingle: str) -> int:
    """What the sketches of ``text_bytes`` of text hold: about one 8-byte hash a word (word shingles, a word
    and its space about 6 bytes) or a character (character shingles), and the band keys."""
    return int(text_bytes * (1.5 if shingle == "word" else 8))


class KeptSets:
    """Scores of given pairs of table rows against the kept sketches' sets (the counterpart of
    ``fuzzy_dask.HostSets`` for ``FuzzyDedup._canonicals``)."""

    def __init__(self, sketches: list, jaccard_pairs):
        self.sketches, self.jaccard_pairs = sketches, jaccard_pairs

    def scored(self, table, executor: Executor, pairs: list, desc: str = "fuzzy: similarity to canonicals") -> list:
        """Per partition ``q``, a kept frame ``(i, j, score)`` of the pairs in ``pairs[q]`` (a (delayed) frame
        ``(i, j)`` of table rows whose ``i`` are in partition ``q``), sorted by ``(i, j)``."""
        to_owner = exchange(executor, _pairs_split, [(f,) for f in pairs], table.npartitions, table.part_offsets,
                            desc=f"{desc}: pairs to their sets")
        return self.scored_packed(table, executor, to_owner, desc)

    def scored_packed(self, table, executor: Executor, to_owner: list, desc: str, measure=None):
        """``scored`` of the packed pairs ``i << 32 | j`` in ``to_owner`` (per partition of ``j``, its
        pieces); with ``measure``, ``(scored, measure of each frame)`` (``Executor.persist_tasks``)."""
        n_parts, offs = table.npartitions, table.part_offsets
        to_verifier = exchange(executor, _send_sets, [(to_owner[q], self.sketches[q]) for q in range(n_parts)],
                               n_parts, offs, desc=f"{desc}: send sets")
        return executor.persist_tasks([delayed(_verify)(to_verifier[r], self.sketches[r], self.jaccard_pairs)
                                       for r in range(n_parts)], desc, measure)


def exchange_candidates(ddf, table, participants: list, params: FuzzyParams, backend, cfg, executor: Executor):
    """The scored candidate pairs of the participants (per partition a (delayed) bool mask of its rows):
    ``(scored, n_pairs, sets)`` like ``fuzzy_dask.distributed_candidates``, ``scored`` a ``Partitions`` of
    frames ``(i, j, score)`` by partition of ``i``, ``sets`` the ``KeptSets`` that scores other pairs."""
    n_parts, offs = table.npartitions, table.part_offsets
    sketches = executor.persist_tasks([delayed(_sketch)(part, participants[p], int(offs[p]), params, backend)
                                       for p, part in enumerate(ddf.to_delayed())], "fuzzy: minhash")
    bands = exchange(executor, _band_split, [(s,) for s in sketches], n_parts, desc="fuzzy: band entries")
    to_owner = exchange(executor, _bucket_pairs, [(b,) for b in bands], n_parts, cfg.max_bucket_size,
                        cfg.bucket_anchors, offs, backend.pairs.bucket_pairs, desc="fuzzy: candidate pairs")
    del bands  # their pieces go as soon as their bucket task has run
    sets = KeptSets(sketches, backend.pairs.jaccard_pairs)
    scored, lengths = sets.scored_packed(table, executor, to_owner, "fuzzy: verify", measure=len)
    n_pairs = int(sum(lengths))
    return Partitions(scored, SCORED_META), n_pairs, sets
