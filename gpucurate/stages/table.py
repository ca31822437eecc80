"""The document table: one row per input document, in input order; rows of partition ``p`` are
``part_offsets[p]:part_offsets[p + 1]``.

``DocParts`` is a run's table, kept where the partitions are: each partition's per-document columns (order
key, id, timestamp, length, and the columns the stages add) are a dict of arrays in a task result on the
worker that read it; this process holds the partition offsets and counts. ``DocTable`` is the same table as
arrays in this process, for the workflows that keep a collection in memory (ingest, rethreshold).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa

from ..errors import InputError
from ..engine.executor import Executor
from ..engine.shuffle import by_bucket, exchange, owner_of, to_owners
from ..engine.tasks import delayed


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
        parts = executor.compute([delayed(_table_part)(p) for p in ddf.to_delayed()], "collect ids")
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


def split_rows(values: np.ndarray, part_offsets: np.ndarray) -> list:
    """A per-row array of the whole table cut into one piece per partition."""
    return [values[part_offsets[p]:part_offsets[p + 1]] for p in range(len(part_offsets) - 1)]


def id_array(ids: np.ndarray) -> pa.Array:
    """The Arrow column of table ids (``int64`` or ``string``, as ``ids``' dtype; an Arrow column as it is)."""
    if isinstance(ids, pa.Array):
        return ids
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


#: the columns of a ``DocParts`` state that the reader provides
STATE_COLUMNS = ("ord", "id", "ts", "nbytes")


class DocParts:
    """A run's document table, one state per partition where the partition lives.

    ``states[p]`` is a (delayed) dict of per-document arrays of partition ``p``: ``ord`` int64, ``id`` (int64
    when every id of the run is an integer, else object str), ``ts`` int64 ns (int64 max when unknown),
    ``nbytes`` int64, and the columns the stages add (``update``). This process holds ``part_offsets``
    (int64[P + 1]) and run-wide counts, nothing per document.
    """

    def __init__(self, states: list, part_offsets: np.ndarray, int_ids: bool, skipped: list | None = None,
                 replaced_utf8: int = 0, renamed_ids: int = 0, text_bytes: int = 0):
        self.states, self.part_offsets, self.int_ids = states, part_offsets, int_ids
        self.skipped, self.replaced_utf8, self.renamed_ids = skipped or [], replaced_utf8, renamed_ids
        self.text_bytes = text_bytes

    @property
    def n(self) -> int:
        return int(self.part_offsets[-1])

    @property
    def npartitions(self) -> int:
        return len(self.states)

    def first_rows(self) -> list[int]:
        return [int(o) for o in self.part_offsets[:-1]]

    def state_rows(self) -> list[tuple]:
        """``(state, first_row)`` of every partition: the inputs of an exchange over the states."""
        return list(zip(self.states, self.first_rows()))

    def update(self, executor: Executor, fn, desc: str, *per_part, **kwargs) -> "DocParts":
        """A table whose state ``p`` is ``fn(states[p], first_row, *(x[p] for x in per_part), **kwargs)`` (a dict
        of new or replaced columns, merged into the state), computed and kept where the state is."""
        tasks = self.map(_update_state, *per_part, columns_of=fn, **kwargs)
        return self.with_states(executor.persist_tasks(tasks, desc))

    def scatter(self, executor: Executor, desc: str, stage: str, rows: np.ndarray, canon: np.ndarray,
                similarity: np.ndarray) -> "DocParts":
        """A stage's canonicals held in this process (``canon`` and ``similarity`` of the sorted table ``rows``
        that took part) sent to the partitions: each gets ``<stage>_canon`` (int64 row; its own for the rows
        that took no part), ``<stage>_sim`` (float64; 1.0) and ``<stage>_participant``."""
        pieces = list(to_owners(rows, (canon, similarity), self.part_offsets))
        return self.update(executor, _stage_columns, desc, pieces, stage=stage)

    def without(self, executor: Executor, desc: str, *names: str) -> "DocParts":
        """A table whose states lack the columns ``names`` (their memory, e.g. device sketches, is freed)."""
        return self.with_states(executor.persist_tasks([delayed(_without)(s, names) for s in self.states], desc))

    def joined(self, executor: Executor, ranges: list[tuple[int, int]], desc: str) -> "DocParts":
        """The table whose partition ``k`` joins the partitions ``ranges[k] = (start, stop)`` (consecutive, all
        of them): their per-document columns concatenated where they are kept. The partitions' reports that
        ``collect`` and the counts read are not kept."""
        if all(stop - start == 1 for start, stop in ranges):
            return self
        states = executor.persist_tasks([delayed(_joined_states)(self.states[a:b]) for a, b in ranges], desc)
        offsets = self.part_offsets[[a for a, _ in ranges] + [ranges[-1][1]]]
        return DocParts(states, offsets, self.int_ids, self.skipped, self.replaced_utf8, self.renamed_ids,
                        self.text_bytes)

    def with_states(self, states: list) -> "DocParts":
        return DocParts(states, self.part_offsets, self.int_ids, self.skipped, self.replaced_utf8, self.renamed_ids,
                        self.text_bytes)

    def map(self, fn, *per_part, **kwargs) -> list:
        """Delayed ``fn(states[p], first_row, *(x[p] for x in per_part), **kwargs)`` for every partition."""
        return [delayed(fn)(s, first, *(x[p] for x in per_part), **kwargs)
                for p, (s, first) in enumerate(self.state_rows())]

    def columns(self, *names: str) -> list:
        """Delayed per-partition tuples of the named columns (what a row lookup's owners hold)."""
        return [delayed(_get_many)(s, names) for s in self.states]

    def column(self, name: str) -> list:
        """Delayed per-partition arrays of one column."""
        return [delayed(_get)(s, name) for s in self.states]

    def gather(self, executor: Executor, name: str) -> np.ndarray:
        """One column of the whole table in this process: for the steps that still work on arrays here."""
        parts = executor.compute(self.column(name), f"gather {name}")
        return np.concatenate(parts) if parts else np.empty(0)

    def to_table(self, executor: Executor) -> DocTable:
        """The table as arrays in this process (ingest keeps its collection in memory)."""
        parts = executor.compute(self.columns(*STATE_COLUMNS), "collect table")
        cols = [np.concatenate([p[k] for p in parts]) if parts else np.empty(0, np.int64) for k in range(4)]
        if not parts:
            cols[1] = np.empty(0, object)
        return DocTable(cols[0], cols[1], cols[2], cols[3], self.part_offsets, list(self.skipped), self.replaced_utf8,
                        self.renamed_ids, int_ids=self.int_ids)

    @classmethod
    def collect(cls, ddf, executor: Executor, on_duplicate_id: str = "error", describe=None) -> "DocParts":
        """The table of a read (narrow, ``io.reader.NARROW_META``) Dask DataFrame: ids of one type for the
        run, checked unique by an exchange on the id."""
        states = executor.persist_tasks([delayed(_state_of)(p) for p in ddf.to_delayed()], "collect ids")
        meta = executor.compute([delayed(_state_meta)(s) for s in states], "check order")
        sizes = np.array([m["rows"] for m in meta], dtype=np.int64)
        offsets = np.zeros(len(meta) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        bounds = [(m["first"], m["last"]) for m in meta if m["rows"]]
        if any(not m["ordered"] for m in meta) or any(a[1] >= b[0] for a, b in zip(bounds, bounds[1:])):
            raise RuntimeError("partitions are not in input order")  # a bug, not bad input
        int_ids = bool(bounds) and all(m["int_ids"] for m in meta if m["rows"])
        table = cls(states, offsets, int_ids, _in_input_order([s for m in meta for s in m["skipped"]]),
                    sum(m["replaced_utf8"] for m in meta), text_bytes=int(sum(m["nbytes"] for m in meta)))
        if not int_ids and any(m["int_ids"] for m in meta):
            table = table.update(executor, _ids_as_text, "unify ids")
        return table.check_unique_ids(executor, on_duplicate_id, describe)

    #: ids per bucket of the duplicate-id exchange
    ids_per_bucket = 500_000

    def check_unique_ids(self, executor: Executor, policy: str, describe) -> "DocParts":
        """Duplicate ids found by an exchange on the id's hash: ``policy`` ``error`` raises an InputError naming
        the first repeat, ``suffix`` renames the k-th repeat of an id to ``"<id>#dup<k>"`` (every id becomes a
        string). This process holds the repeats only."""
        n_buckets = max(1, -(-self.n // self.ids_per_bucket))
        inputs = self.state_rows()
        found = executor.compute([delayed(_repeated_ids)(pieces) for pieces in
                                  exchange(executor, _ids_by_hash, inputs, n_buckets, desc="check ids")], "check ids")
        rows, firsts, repeat, ids = (np.concatenate([f[k] for f in found]) for k in range(4))
        if not len(rows):
            return self
        order = np.argsort(rows, kind="stable")
        rows, firsts, repeat, ids = rows[order], firsts[order], repeat[order], ids[order]
        if policy == "error":
            r, first = int(rows[0]), int(firsts[0])
            where = ""
            if describe:
                ords = self.values_at(executor, "ord", np.array([first, r]))
                where = f" ({describe(ords[0])} and {describe(ords[1])})"
            shown = ids[0].item() if isinstance(ids[0], np.generic) else ids[0]  # 1, not np.int64(1)
            raise InputError(f"duplicate id {shown!r}{where}; ids must be unique "
                             "(set input.on_duplicate_id=suffix to rename repeats)")
        renamed = self._suffixes(executor, ids, repeat)
        table = self.update(executor, _rename_ids, "rename repeated ids",
                            list(to_owners(rows, (renamed,), self.part_offsets)))
        table.renamed_ids = len(rows)
        return table

    def _suffixes(self, executor: Executor, ids: np.ndarray, repeat: np.ndarray) -> np.ndarray:
        """``"<id>#dup<k>"`` for each repeat (in row order), ``k`` its repeat number, raised past every name
        already taken: any id of the run (asked of the partitions) or an earlier repeat's new name."""
        exists: dict[str, bool] = {}
        while True:
            names, taken, unknown = [], set(), []
            for value, k in zip(ids, repeat):
                k = int(k)
                candidate = f"{value}#dup{k}"
                while candidate in taken or exists.get(candidate, False):
                    k += 1
                    candidate = f"{value}#dup{k}"
                if candidate not in exists:
                    unknown.append(candidate)
                taken.add(candidate)
                names.append(candidate)
            if not unknown:
                return np.array(names, dtype=object)
            asked = frozenset(unknown)
            hits = executor.compute([delayed(_ids_among)(s, asked) for s in self.states], "check new ids")
            found = set().union(*hits) if hits else set()
            exists.update({name: name in found for name in unknown})

    def values_at(self, executor: Executor, name: str, rows: np.ndarray) -> np.ndarray:
        """One column's values at global ``rows`` (any order), asked of the partitions that hold them."""
        rows = np.asarray(rows, np.int64)
        owner = owner_of(self.part_offsets, rows)
        # grouped by partition, not sorted by row: a stable sort of small integers is NumPy's radix sort
        order = np.argsort(owner.astype(np.int16 if self.npartitions < 1 << 15 else np.int64), kind="stable")
        cuts = np.searchsorted(owner[order], np.arange(self.npartitions + 1))
        owners = [q for q in range(self.npartitions) if cuts[q + 1] > cuts[q]]
        got = executor.compute([delayed(_take)(self.states[q], name, rows[order[cuts[q]:cuts[q + 1]]]
                                               - self.part_offsets[q]) for q in owners], f"look up {name}")
        if not got:
            return np.empty(0, object if name == "id" else np.int64)
        values = np.concatenate(got)
        out = np.empty_like(values)
        out[order] = values
        return out


class RowKeys:
    """What the fuzzy and semantic stages still read of a run's table in this process: the partition offsets,
    and the canonical policy's key (gathered when first asked for, 8 bytes a document)."""

    def __init__(self, table: DocParts, executor: Executor):
        self.table, self.executor = table, executor
        self.part_offsets, self.n = table.part_offsets, table.n
        self._keys: dict[str, np.ndarray] = {}

    def policy_key(self, policy: str) -> np.ndarray:
        if policy == "first":
            return np.zeros(self.n, dtype=np.int64)
        if policy not in self._keys:
            parts = self.executor.compute(self.table.map(_policy_key, policy=policy), f"gather {policy} keys")
            self._keys[policy] = np.concatenate(parts) if parts else np.empty(0, np.int64)
        return self._keys[policy]


def _policy_key(state: dict, first_row: int, policy: str) -> np.ndarray:
    return state_policy_key(state, policy)


def state_policy_key(state: dict, policy: str) -> np.ndarray:
    """int64 sort key of the canonical policy for a state's rows (smaller wins; ties go to input order)."""
    if policy == "first":
        return np.zeros(len(state["ord"]), dtype=np.int64)
    if policy == "earliest":
        return state["ts"]
    if policy == "longest":
        return -state["nbytes"]
    raise ValueError(policy)


def own_rows_with(first_row: int, m: int, pieces, *fills) -> list:
    """Columns of a partition of ``m`` rows from ``first_row``: each row's own row number (a canonical
    column where every row is its own), then one column per ``fills`` value; each piece ``(rows, *values)``
    sets its rows' values in those columns, in order."""
    columns = [first_row + np.arange(m, dtype=np.int64)] + [np.full(m, fill) for fill in fills]
    for rows, *values in pieces:
        for column, value in zip(columns, values):
            column[rows - first_row] = value
    return columns


def _stage_columns(state: dict, first_row: int, piece: tuple, *, stage: str) -> dict:
    m = len(state["ord"])
    canon, similarity, participant = own_rows_with(first_row, m, [(*piece, True)], 1.0, False)
    return {f"{stage}_canon": canon, f"{stage}_sim": similarity, f"{stage}_participant": participant}


def _update_state(state: dict, first_row: int, *args, columns_of, **kwargs) -> dict:
    return {**state, **columns_of(state, first_row, *args, **kwargs)}


def _in_input_order(skipped: list) -> list:
    """Skipped rows by file (in the order they come) and row: a partition lists its unparseable rows before
    those with a null id, so the order would otherwise follow the partitions (and the budget's pieces)."""
    files = {path: k for k, path in enumerate(dict.fromkeys(s["path"] for s in skipped))}
    return sorted(skipped, key=lambda s: (files[s["path"]], -1 if s["row"] is None else s["row"]))


def _joined_states(states: list) -> dict:
    out = {}
    for name, first in states[0].items():
        values = [s[name] for s in states]
        if isinstance(first, np.ndarray):
            out[name] = np.concatenate(values)
        elif isinstance(first, pa.Table):  # a column all null in one piece takes the type of the others'
            out[name] = pa.concat_tables(values, promote_options="permissive").combine_chunks()
        elif not isinstance(first, (dict, tuple, list)):  # the partitions' reports, read before
            raise TypeError(f"cannot join state column {name!r} of type {type(first).__name__}")
    return out


def _without(state: dict, names: tuple) -> dict:
    return {k: v for k, v in state.items() if k not in names}


def _get(state: dict, name: str):
    return state[name]


def _get_many(state: dict, names) -> tuple:
    return tuple(state[k] for k in names)


def _take(state: dict, name: str, rows):
    return state[name][rows]


def _state_of(df: pd.DataFrame) -> dict:
    all_int = bool(df["_id_is_int"].all())  # an empty partition's are int64: it takes the run's type when unified
    ids = df["_id_int"].to_numpy(np.int64) if all_int else df["_id"].to_numpy(dtype=object)
    return {"ord": df["_ord"].to_numpy(), "id": ids, "ts": df["_ts"].to_numpy(), "nbytes": df["_nbytes"].to_numpy(),
            "attrs": {"skipped": list(df.attrs.get("skipped", [])), "replaced_utf8": df.attrs.get("replaced_utf8", 0)}}


def _state_meta(state: dict) -> dict:
    ords = state["ord"]
    return {"rows": len(ords), "first": int(ords[0]) if len(ords) else 0, "last": int(ords[-1]) if len(ords) else 0,
            "ordered": bool(np.all(np.diff(ords) > 0)), "int_ids": state["id"].dtype.kind == "i",
            "nbytes": int(state["nbytes"].sum()), **state["attrs"]}


def _ids_as_text(state: dict, first_row: int) -> dict:
    ids = state["id"]
    return {"id": ids.astype(str).astype(object) if ids.dtype.kind == "i" else ids}


def _id_buckets(ids: np.ndarray, n_buckets: int) -> np.ndarray:
    if ids.dtype.kind == "i":
        return (ids.view(np.uint64) % np.uint64(n_buckets)).astype(np.int64)
    return (pd.util.hash_array(ids.astype(object)) % np.uint64(n_buckets)).astype(np.int64)


def _ids_by_hash(state: dict, first_row: int, n_buckets: int) -> tuple:
    ids = state["id"]
    rows = first_row + np.arange(len(ids), dtype=np.int64)
    bucket = _id_buckets(ids, n_buckets) if n_buckets > 1 else np.zeros(len(ids), np.int64)
    return by_bucket(bucket, n_buckets, ids, rows)


def _repeated_ids(pieces: list) -> tuple:
    """``(rows, first rows, repeat numbers, ids)`` of the repeats among one bucket's ids (pieces in row order)."""
    ids = pd.Series(np.concatenate([p[0] for p in pieces]) if pieces else np.empty(0, object))
    rows = np.concatenate([p[1] for p in pieces]) if pieces else np.empty(0, np.int64)
    dup = ids.duplicated(keep="first").to_numpy()
    if not dup.any():
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64), ids.to_numpy()[:0]
    grouped = ids.groupby(ids, sort=False)
    first = pd.Series(rows).groupby(ids, sort=False).transform("first").to_numpy()
    return rows[dup], first[dup], grouped.cumcount().to_numpy()[dup], ids.to_numpy()[dup]


def _ids_among(state: dict, names: frozenset) -> set:
    return {x for x in map(str, state["id"]) if x in names}


def _rename_ids(state: dict, first_row: int, renames: tuple) -> dict:
    rows, names = renames
    ids = np.array([str(x) for x in state["id"]], dtype=object)
    ids[rows - first_row] = names
    return {"id": ids}
