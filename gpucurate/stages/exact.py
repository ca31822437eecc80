"""Exact stage: documents whose normalized texts are byte-identical (same 64-bit hash) form a group."""

from __future__ import annotations

from dataclasses import dataclass

import dask
import numpy as np
import pandas as pd

from ..backend import Backend
from ..config import Config
from ..executor import Executor
from ..table import DocTable, canonicals
from ..text import arrow_buffers
from ..kernels.hashing import padded_words


def text_hash_partition(df: pd.DataFrame, backend: Backend) -> np.ndarray:
    """uint64[rows] hash of each normalized text, and whether it is empty."""
    if len(df) == 0:
        return np.empty(0, np.uint64), np.empty(0, bool)
    offsets, data = arrow_buffers(df["_text"].array._pa_array)
    return backend.minhash.text_hashes(offsets, padded_words(data)), np.diff(offsets) == 0


@dataclass
class ExactResult:
    hashes: np.ndarray  # uint64[n]
    empty: np.ndarray  # bool[n]: empty normalized text (never grouped)
    canon: np.ndarray  # int64[n]: row of the document's exact canonical (itself when unique)

    @property
    def duplicates(self) -> int:
        return int((self.canon != np.arange(len(self.canon))).sum())


class ExactDedup:
    """``run(ddf, table, executor) -> ExactResult``: group identical normalized texts; the canonical of a
    group is chosen by ``canonical.policy``. Empty texts are never duplicates."""

    name = "exact"

    def __init__(self, cfg: Config, backend: Backend):
        self.cfg, self.backend = cfg, backend

    def run(self, ddf, table: DocTable, executor: Executor) -> ExactResult:
        parts = executor.compute([dask.delayed(text_hash_partition)(p, self.backend) for p in ddf.to_delayed()],
                                 "exact: hash")
        hashes = np.concatenate([p[0] for p in parts])
        empty = np.concatenate([p[1] for p in parts])
        canon = np.arange(table.n, dtype=np.int64)
        if self.cfg.exact.enabled:
            rows = np.flatnonzero(~empty)
            canon[rows] = canonicals(hashes[rows], rows, table.policy_key(self.cfg.canonical.policy)[rows])
        return ExactResult(hashes, empty, canon)
