"""Exact stage: documents whose normalized texts are byte-identical (same 64-bit hash) form a group."""

from __future__ import annotations

from dataclasses import dataclass

import dask
import numpy as np
import pandas as pd

from ..engine.backend import Backend
from ..config import Config
from ..engine.executor import Executor
from .table import DocTable, canonicals
from .normalize import arrow_buffers
from ..kernels.hashing import padded_words
from ..kernels.text import word_and_char_counts


def text_hash_partition(df: pd.DataFrame, backend: Backend, index: int = 0):
    """uint64[rows] hash of each normalized text, bool[rows] whether it is empty, and int64[rows] its
    words and code points."""
    if len(df) == 0:
        return np.empty(0, np.uint64), np.empty(0, bool), np.empty(0, np.int64), np.empty(0, np.int64)
    offsets, data = arrow_buffers(df["_text"].array._pa_array)
    words, chars = word_and_char_counts(offsets, data)
    return backend.minhash.text_hashes(offsets, padded_words(data)), np.diff(offsets) == 0, words, chars


def resident_partition(df: pd.DataFrame, resident, index: int):
    """``text_hash_partition`` on the device, keeping the partition's sketches there (``ResidentCorpus``)."""
    offsets, data = arrow_buffers(df["_text"].array._pa_array) if len(df) else (np.zeros(1, np.int64),
                                                                                   np.empty(0, np.uint8))
    hashes, words, chars = resident.text_pass(index, offsets, data)
    return hashes, np.diff(offsets) == 0, words, chars


@dataclass
class ExactResult:
    hashes: np.ndarray  # uint64[n]
    empty: np.ndarray  # bool[n]: empty normalized text (never grouped)
    canon: np.ndarray  # int64[n]: row of the document's exact canonical (itself when unique)
    words: np.ndarray  # int64[n]: words of the normalized text
    chars: np.ndarray  # int64[n]: code points of the normalized text

    @property
    def duplicates(self) -> int:
        return int((self.canon != np.arange(len(self.canon))).sum())


class ExactDedup:
    """``run(ddf, table, executor, eligible) -> ExactResult``: group identical normalized texts among the
    ``eligible`` rows (bool[n], default all); the canonical of a group is chosen by ``canonical.policy``.
    Empty texts are never duplicates."""

    name = "exact"

    def __init__(self, cfg: Config, backend: Backend):
        self.cfg, self.backend = cfg, backend

    def run(self, ddf, table: DocTable, executor: Executor, eligible: np.ndarray | None = None,
            resident=None) -> ExactResult:
        """``resident``: a ``device.resident.ResidentCorpus`` (GPU backend in one process): each partition's
        text goes up once, its hashes come back and its fuzzy sketches stay on the device."""
        task = text_hash_partition if resident is None else resident_partition
        arg = self.backend if resident is None else resident
        parts = executor.compute([dask.delayed(task)(p, arg, i) for i, p in enumerate(ddf.to_delayed())],
                                 "exact: hash")
        hashes, empty, words, chars = (np.concatenate([p[k] for p in parts]) for k in range(4))
        eligible = np.ones(table.n, bool) if eligible is None else eligible
        canon = exact_canonicals(hashes, empty, eligible, table.policy_key(self.cfg.canonical.policy),
                                 self.cfg.exact.enabled)
        return ExactResult(hashes, empty, canon, words, chars)


def exact_canonicals(hashes: np.ndarray, empty: np.ndarray, eligible: np.ndarray, key: np.ndarray,
                     enabled: bool = True) -> np.ndarray:
    """int64[n] row of each document's exact canonical: rows with equal ``hashes`` among the non-empty
    ``eligible`` ones form a group whose canonical has the smallest ``key`` (then row); others are their own."""
    canon = np.arange(len(hashes), dtype=np.int64)
    if enabled:
        rows = np.flatnonzero(~empty & eligible)
        canon[rows] = canonicals(hashes[rows], rows, key[rows])
    return canon
