"""Exact stage: documents whose normalized texts are byte-identical (same 64-bit hash) form a group."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..engine.backend import Backend
from ..config import Config
from ..engine.executor import Executor
from ..engine.shuffle import by_bucket, exchange, to_owners
from ..engine.clock import task_clock
from ..engine.partitions import Carried
from ..engine.tasks import delayed
from .table import DocParts, canonicals, own_rows_with, state_policy_key
from .normalize import arrow_buffers
from .sketches import sketch_distinct
from ..kernels.hashing import padded_words
from ..kernels.text import word_and_char_counts


def text_hash_partition(df: pd.DataFrame, backend: Backend, index: int = 0):
    """uint64[rows] hash of each normalized text, bool[rows] whether it is empty, and int64[rows] its
    words and code points."""
    if len(df) == 0:
        return np.empty(0, np.uint64), np.empty(0, bool), np.empty(0, np.int64), np.empty(0, np.int64)
    with task_clock("exact: hash"):
        offsets, data = arrow_buffers(df["_text"].array._pa_array)
        words, chars = word_and_char_counts(offsets, data)
        return backend.minhash.text_hashes(offsets, padded_words(data)), np.diff(offsets) == 0, words, chars


@dataclass(frozen=True)
class HostSketching:
    """The fuzzy stage's sketches made in the exact stage's text pass on the CPU (``sketches.sketch_distinct``):
    its parameters, and which rows may take part besides non-empty ones that passed the quality rules
    (``min_length`` words, or code points with ``chars``)."""
    params: object  # sketches.FuzzyParams
    min_length: int
    chars: bool


def host_text_pass(df: pd.DataFrame, arg: tuple, index: int = 0):
    """``text_hash_partition``, and with a ``HostSketching`` the sketches of the rows that may take part in the
    fuzzy stage (``arg``: ``(backend, HostSketching or None)``)."""
    backend, sketching = arg
    hashes, empty, words, chars = text_hash_partition(df, backend, index)
    if sketching is None:
        return hashes, empty, words, chars, None
    eligible = ~empty & ((chars if sketching.chars else words) >= sketching.min_length)
    if "_qrule" in df:
        eligible &= df["_qrule"].to_numpy() < 0
    return hashes, empty, words, chars, sketch_distinct(df, eligible, hashes, sketching.params, backend)


def _text_pass(df: pd.DataFrame, task, arg) -> pd.DataFrame:
    """``df`` with the stage's per-partition results in ``attrs["text_pass"]``, for ``_hashed`` to take."""
    out = df.copy(deep=False)
    out.attrs = dict(df.attrs)
    out.attrs["text_pass"] = Carried(zip(("hash", "empty", "words", "chars", "sketch"),
                                         task(df, arg, df.attrs.get("partition", 0))))
    return out


def resident_partition(df: pd.DataFrame, resident, index: int):
    """``text_hash_partition`` on the device (``ResidentCorpus.text_pass``), and the partition's sketches,
    which stay on the device (None without fuzzy params)."""
    offsets, data = arrow_buffers(df["_text"].array._pa_array) if len(df) else (np.zeros(1, np.int64),
                                                                                   np.empty(0, np.uint8))
    hashes, words, chars, sketch = resident.text_pass(offsets, data)
    return hashes, np.diff(offsets) == 0, words, chars, sketch


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
    """``run(ddf, table, executor) -> (table, duplicates)``: group identical normalized texts among the rows
    that passed the quality rules (state column ``qrule`` < 0 when present); the canonical of a group is
    chosen by ``canonical.policy``. Empty texts are never duplicates.

    Adds to each partition's state (``DocParts``): ``hash`` uint64, ``empty`` bool, ``words`` and ``chars``
    int64 of the normalized text, and ``exact_canon`` int64 (the table row of the document's exact
    canonical, its own when unique). The groups are formed by an exchange on the hash, so no hash passes
    through this process.
    """

    name = "exact"
    #: documents per bucket of the exchange by hash (24 bytes each)
    rows_per_bucket = 4_000_000

    def __init__(self, cfg: Config, backend: Backend):
        self.cfg, self.backend = cfg, backend

    def text_pass(self, ddf, resident=None, sketching: HostSketching | None = None):
        """The stage's per-partition work as one more task of each partition's read chain (read, gates,
        normalize, then this): the texts' hashes and counts, and the fuzzy stage's sketches, on the device
        with ``resident`` (a ``device.resident.ResidentCorpus``) or on the CPU with ``sketching``; ``run``
        takes them from there instead of passing over the texts again."""
        task, arg = self._task(resident, sketching)
        return ddf.map_partitions(_text_pass, task, arg, meta=ddf._meta)

    def _task(self, resident, sketching=None) -> tuple:
        if resident is not None:
            return resident_partition, resident
        return host_text_pass, (self.backend, sketching)

    def run(self, ddf, table: DocParts, executor: Executor, resident=None) -> tuple[DocParts, int]:
        """``resident``: a ``device.resident.ResidentCorpus`` (GPU backend): each partition's text goes up
        once, its hashes come back and its fuzzy sketches stay on the device, as the state's ``sketch``.
        When ``text_pass`` was in the read chain, its results are taken from the partitions."""
        task, arg = self._task(resident)
        n_parts = table.npartitions
        table = table.update(executor, _hashed, "exact: hash", ddf.to_delayed(), list(range(n_parts)), task=task,
                             arg=arg)
        if self.cfg.exact.enabled and table.n:
            n_buckets = max(1, -(-table.n // self.rows_per_bucket))
            pieces = exchange(executor, _by_hash, table.state_rows(), n_buckets, self.cfg.canonical.policy,
                              desc="exact: split")
            groups = executor.persist_tasks([delayed(_group_bucket)(p, table.part_offsets) for p in pieces],
                                            "exact: group")
            table = table.update(executor, _with_canonicals, "exact: group", [[g[p] for g in groups]
                                                                              for p in range(n_parts)])
        else:
            table = table.update(executor, _own_canonicals, "exact: group")
        duplicates = sum(executor.compute(table.map(_duplicates), "exact: count"))
        return table, int(duplicates)


def _hashed(state: dict, first_row: int, df: pd.DataFrame, index: int, *, task, arg) -> dict:
    carried = df.attrs.get("text_pass")
    if carried:  # made in the read chain; handed over, so that the partition keeps no second reference
        columns = {k: carried.pop(k) for k in list(carried)}
    else:
        columns = dict(zip(("hash", "empty", "words", "chars", "sketch"), task(df, arg, index)))
    sketch = columns.pop("sketch", None)
    if sketch is not None:  # the device's sketches stay there; the read pass took the CPU's apart already
        columns["sketch"] = sketch
    return columns


def _by_hash(state: dict, first_row: int, n_buckets: int, policy: str) -> tuple:
    """``(hash, policy key, row)`` of the partition's non-empty rows that passed the quality rules, one piece
    per bucket (``hash % n_buckets``)."""
    use = ~state["empty"]
    if "qrule" in state:
        use &= state["qrule"] < 0
    local = np.flatnonzero(use)
    hashes, key = state["hash"][local], state_policy_key(state, policy)[local]
    rows = first_row + local.astype(np.int64)
    bucket = (hashes % np.uint64(n_buckets)).astype(np.int64)
    return by_bucket(bucket, n_buckets, hashes, key, rows)


def _group_bucket(pieces: list, part_offsets: np.ndarray) -> tuple:
    """The duplicates among one bucket's rows, ``(rows, canonical rows)``, one piece per partition."""
    hashes, key, rows = (np.concatenate([p[k] for p in pieces]) for k in range(3))
    canon = canonicals(hashes, rows, key)
    dup = np.flatnonzero(canon != rows)
    order = dup[np.argsort(rows[dup], kind="stable")]
    return to_owners(rows[order], (canon[order],), part_offsets)


def _with_canonicals(state: dict, first_row: int, pieces: list) -> dict:
    return {"exact_canon": own_rows_with(first_row, len(state["hash"]), pieces)[0]}


def _own_canonicals(state: dict, first_row: int) -> dict:
    return {"exact_canon": first_row + np.arange(len(state["hash"]), dtype=np.int64)}


def _duplicates(state: dict, first_row: int) -> int:
    return int((state["exact_canon"] != first_row + np.arange(len(state["hash"]))).sum())


def exact_result(table: DocParts, executor: Executor) -> ExactResult:
    """The exact stage's columns of ``table`` as arrays in this process (ingest keeps its collection there)."""
    return ExactResult(*(table.gather(executor, k) for k in ("hash", "empty", "exact_canon", "words", "chars")))


def exact_canonicals(hashes: np.ndarray, empty: np.ndarray, eligible: np.ndarray, key: np.ndarray,
                     enabled: bool = True) -> np.ndarray:
    """int64[n] row of each document's exact canonical: rows with equal ``hashes`` among the non-empty
    ``eligible`` ones form a group whose canonical has the smallest ``key`` (then row); others are their own."""
    canon = np.arange(len(hashes), dtype=np.int64)
    if enabled:
        rows = np.flatnonzero(~empty & eligible)
        canon[rows] = canonicals(hashes[rows], rows, key[rows])
    return canon
