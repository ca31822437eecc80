"""The driver-side document table: one row per input document, in input order.

Partitions hold texts; this table holds what the global steps (grouping, clustering, annotation)
need per document: order key, id, timestamp, length, and the group columns the stages add. Rows of
partition ``p`` are ``part_offsets[p]:part_offsets[p + 1]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import dask
import numpy as np
import pandas as pd
import pyarrow as pa

from ..errors import InputError
from ..engine.executor import Executor


def _table_part(df: pd.DataFrame) -> tuple:
    all_int = bool(df["_id_is_int"].all())
    ids = df["_id_int"].to_numpy() if all_int and len(df) else df["_id"].to_numpy(dtype=object)
    return (df["_ord"].to_numpy(), ids, df["_ts"].to_numpy(), df["_nbytes"].to_numpy(), df.attrs)


@dataclass
class DocTable:
    ords: np.ndarray  # int64[n]
    ids: np.ndarray  # int64[n] or object[n] of str
    timestamps: np.ndarray  # int64[n] ns; int64 max when unknown
    nbytes: np.ndarray  # int64[n] UTF-8 length of the original text
    part_offsets: np.ndarray  # int64[n_parts + 1]
    skipped: list = field(default_factory=list)
    replaced_utf8: int = 0
    renamed_ids: int = 0
    #: every user id of the run is an integer in int64 range (decided before ``on_duplicate_id: suffix``
    #: renames repeats to strings); None: as ``ids``' dtype says
    int_ids: bool | None = None

    @property
    def n(self) -> int:
        return len(self.ords)

    @classmethod
    def collect(cls, ddf, executor: Executor, on_duplicate_id: str = "error", describe=None) -> "DocTable":
        parts = executor.compute([dask.delayed(_table_part)(p) for p in ddf.to_delayed()], "collect ids")
        sizes = np.array([len(p[0]) for p in parts], dtype=np.int64)
        offsets = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        ords = np.concatenate([p[0] for p in parts]) if parts else np.empty(0, np.int64)
        if len(ords) and np.any(np.diff(ords) <= 0):
            raise RuntimeError("partitions are not in input order")  # a bug, not bad input
        ids = unify_ids([p[1] for p in parts if len(p[0])])
        table = cls(ords, ids, np.concatenate([p[2] for p in parts]), np.concatenate([p[3] for p in parts]),
                    offsets, int_ids=ids.dtype.kind == "i")
        for p in parts:
            table.skipped.extend(p[4].get("skipped", []))
            table.replaced_utf8 += p[4].get("replaced_utf8", 0)
        table._check_unique_ids(on_duplicate_id, describe)
        return table

    def _check_unique_ids(self, policy: str, describe) -> None:
        ids = pd.Series(self.ids)
        dup = ids.duplicated(keep="first").to_numpy()
        if not dup.any():
            return
        if policy == "error":
            r = int(np.flatnonzero(dup)[0])
            first = int(np.flatnonzero((ids == ids.iloc[r]).to_numpy())[0])
            where = (f" ({describe(self.ords[first])} and {describe(self.ords[r])})" if describe else "")
            shown = self.ids[r].item() if isinstance(self.ids[r], np.generic) else self.ids[r]  # 1, not np.int64(1)
            raise InputError(f"duplicate id {shown!r}{where}; ids must be unique "
                             "(set input.on_duplicate_id=suffix to rename repeats)")
        # suffix: the k-th repeat of an id becomes "<id>#dup<k>"
        counts = ids.groupby(ids, sort=False).cumcount().to_numpy()
        new = self.ids.astype(object).copy()
        taken = set(map(str, new))
        for r in np.flatnonzero(dup):
            k = int(counts[r])
            candidate = f"{new[r]}#dup{k}"
            while candidate in taken:
                k += 1
                candidate = f"{new[r]}#dup{k}"
            taken.add(candidate)
            new[r] = candidate
        self.ids = np.array([str(x) for x in new], dtype=object)
        self.renamed_ids = int(dup.sum())

    def policy_key(self, policy: str) -> np.ndarray:
        """int64[n] sort key of the canonical policy (smaller wins; ties go to input order)."""
        if policy == "first":
            return np.zeros(self.n, dtype=np.int64)
        if policy == "earliest":
            return self.timestamps
        if policy == "longest":
            return -self.nbytes
        raise ValueError(policy)


def id_array(ids: np.ndarray) -> pa.Array:
    """The Arrow column of table ids (``int64`` or ``string``, as ``ids``' dtype)."""
    return pa.array(ids, type=pa.int64()) if ids.dtype.kind == "i" else pa.array(ids, type=pa.string())


def unify_ids(parts: list[np.ndarray]) -> np.ndarray:
    """One id array of one type for the whole run from the partitions' id arrays (int64 or object str):
    int64 when every partition's ids are integers, else strings, each integer as its exact decimal text
    (so an integer id and a string id with the same text are the same id)."""
    if not parts:
        return np.empty(0, object)
    if all(a.dtype.kind == "i" for a in parts):
        return np.concatenate(parts).astype(np.int64)
    return np.concatenate([a.astype(str).astype(object) if a.dtype.kind == "i" else a.astype(object) for a in parts])


def canonicals(labels: np.ndarray, rows: np.ndarray, key: np.ndarray) -> np.ndarray:
    """For each element, the row of its group's canonical.

    Parameters
    ----------
    labels : int[m] group label of each element; rows : int64[m] table row of each element (unique);
    key : int64[m] policy key (smaller wins), ties broken by row.

    Returns
    -------
    int64[m] canonical row for each element.
    """
    if len(labels) == 0:
        return np.empty(0, dtype=np.int64)
    order = np.lexsort((rows, key, labels))
    sorted_labels = labels[order]
    starts = np.flatnonzero(np.r_[True, sorted_labels[1:] != sorted_labels[:-1]])
    group_of_sorted = np.cumsum(np.r_[True, sorted_labels[1:] != sorted_labels[:-1]]) - 1
    canon_sorted = rows[order][starts][group_of_sorted]
    out = np.empty(len(labels), dtype=np.int64)
    out[order] = canon_sorted
    return out
