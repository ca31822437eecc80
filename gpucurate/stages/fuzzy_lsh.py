"""The pieces of the fuzzy stage's LSH that run as the engine's exchanges between partition tasks, on a
cluster or in one process (``fuzzy_exchange``, which verifies the pairs; ``device.distributed`` on GPUs).

Band entries ``(bucket key, row)`` go to bucket ``key % P`` (``band_split``; on a cluster one P2P shuffle of
whole pieces past ``engine.shuffle.TASK_PIECES_MAX``, not a row per entry), each bucket walks its buckets
with the same kernel as the driver path (``pairs_by_partition``: all pairs up to ``fuzzy.max_bucket_size``
members, anchors beyond), and the pairs go to the partition of their ``i``, which drops the repeats
(``distinct_rows``). The candidate pairs, scores and therefore the annotations equal the driver path's
(tested).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..engine.executor import Executor
from ..engine.shuffle import by_bucket, owner_of
from ..kernels.pairs import distinct_pairs
from .sketches import HostSketch

#: a pair of table rows packed in one uint64: ``i << SHIFT32 | j``
LOW32 = np.uint64(0xFFFFFFFF)
SHIFT32 = np.uint64(32)

#: candidate pairs a partition of the sorted edges and of the components (each round costs per partition)
EDGES_PER_PARTITION = 500_000
SCORED_META = pd.DataFrame({"i": pd.Series([], dtype=np.int64), "j": pd.Series([], dtype=np.int64),
                            "score": pd.Series([], dtype=np.float64)})


def kept_apart(sketch: HostSketch) -> tuple[dict, dict]:
    """A partition's sketches as two values kept apart: the band entries' inputs ``{"index", "keys", "has"}``
    and the shingle sets ``{"index", "offsets", "values"}`` (CSR), which the verification loads again and
    again without the keys. ``index[r]``: the sketch of the partition's row ``r`` (-1: none; rows with one
    text share one), ``has[s]``: whether sketch ``s``'s set has shingles (an empty set shares no bucket, as
    on the driver path)."""
    return ({"index": sketch.index, "keys": sketch.keys, "has": np.diff(sketch.csr_offsets) > 0, "sigs": sketch.sigs},
            {"index": sketch.index, "offsets": sketch.csr_offsets, "values": sketch.csr_values})


def joined(bands: dict, sets: dict) -> HostSketch:
    """The ``HostSketch`` of ``kept_apart``'s two values (for the driver path)."""
    return HostSketch(bands["index"], bands["keys"], sets["offsets"], sets["values"], bands["sigs"])


def band_split(bands: dict, mask, first_row: int, n_buckets: int) -> tuple:
    """The band entries ``(key, row)`` of the partition's rows in ``mask`` (its participants, ``kept_apart``'s
    ``bands``), one piece per bucket ``key % n_buckets``."""
    local = np.flatnonzero(np.asarray(mask, bool) & (bands["index"] >= 0))
    which = bands["index"][local]
    with_shingles = bands["has"][which]
    keys = bands["keys"][which[with_shingles]]
    flat = keys.reshape(-1)
    rows = np.repeat(first_row + local[with_shingles].astype(np.int64), keys.shape[1])
    return by_bucket((flat % np.uint64(n_buckets)).astype(np.int64), n_buckets, flat, rows)


def pairs_by_partition(pieces: list, n_parts: int, max_bucket: int, anchors: int, part_offsets: np.ndarray,
                       entry_pairs) -> tuple:
    """One bucket's distinct candidate pairs, packed ``i << 32 | j`` (``pairs.entry_pairs``), one piece per
    partition of ``i``."""
    keys = np.concatenate([p[0] for p in pieces]) if pieces else np.empty(0, np.uint64)
    rows = np.concatenate([p[1] for p in pieces]) if pieces else np.empty(0, np.int64)
    packed = entry_pairs(keys, rows, max_bucket, anchors)
    return by_bucket(owner_of(part_offsets, (packed >> SHIFT32).astype(np.int64)), n_parts, packed)


def distinct_rows(pieces: list, first_row: int, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct pairs ``(i int64[e], j int64[e])`` of one partition of ``i`` (table rows ``first_row ..
    first_row + n_rows - 1``) from its pieces ``(packed,)`` of ``pairs_by_partition``, sorted by ``(i, j)``."""
    packed = distinct_pairs(np.concatenate([p[0] for p in pieces]), first_row, n_rows) if pieces \
        else np.empty(0, np.uint64)
    return (packed >> SHIFT32).astype(np.int64), (packed & LOW32).astype(np.int64)


def gather_edges(scored, executor: Executor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The scored pairs on the driver, sorted by ``(i, j)`` (each partition is, in row order)."""
    parts = executor.compute(scored.to_delayed(), "fuzzy: gather edges")
    edges = pd.concat(parts, ignore_index=True) if parts else SCORED_META.copy()
    return edges["i"].to_numpy(), edges["j"].to_numpy(), edges["score"].to_numpy()


def aligned_scores(scored: pd.DataFrame, pi: np.ndarray, pj: np.ndarray) -> np.ndarray:
    """The ``score`` of each pair ``(pi[k], pj[k])`` in a frame ``(i, j, score)`` that holds every one."""
    frame = pd.DataFrame({"i": pi.astype(np.int64), "j": pj.astype(np.int64)})
    at = pd.MultiIndex.from_frame(scored[["i", "j"]]).get_indexer(pd.MultiIndex.from_frame(frame))
    return scored["score"].to_numpy()[at]
