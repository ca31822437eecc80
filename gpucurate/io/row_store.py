"""Rows on disk by number: what the ingest state keeps per document and per fuzzy item, read by row.

Each batch appends a range of rows (``first .. first + count - 1``) as its own immutable files:

    NAME.rows                 fixed-width records, one per row (raw, native byte order)
    NAME.offsets, NAME.values a list per row (CSR): int64[count + 1] offsets into the values

A read of some rows reads only their records (neighbouring ones in one read) from the files that hold
them, so what it costs grows with the rows asked, not with the collection.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .sorted_runs import aranges, read_ranges


@dataclass(frozen=True)
class RowFile:
    """Rows ``first .. first + count - 1`` in the files ``path.*``."""
    path: Path
    first: int
    count: int

    def file(self, suffix: str) -> Path:
        return self.path.with_name(f"{self.path.name}.{suffix}")


def _write(path: Path, array: np.ndarray) -> None:
    with open(path, "wb") as fh:
        fh.write(np.ascontiguousarray(array).tobytes())
        fh.flush()
        os.fsync(fh.fileno())


def write_rows(path: Path, first: int, records: np.ndarray) -> RowFile:
    """The records of rows ``first ..`` as ``path.rows``."""
    f = RowFile(Path(path), first, len(records))
    _write(f.file("rows"), records)
    return f


def write_lists(path: Path, first: int, offsets: np.ndarray, values: np.ndarray) -> RowFile:
    """Row ``first + i``'s list ``values[offsets[i]:offsets[i + 1]]`` as ``path.offsets`` and ``path.values``."""
    f = RowFile(Path(path), first, len(offsets) - 1)
    _write(f.file("offsets"), np.asarray(offsets, np.int64) - offsets[0])
    _write(f.file("values"), values[offsets[0]:offsets[-1]])
    return f


def _by_file(files: list[RowFile], rows: np.ndarray):
    """Per file holding some of ``rows`` (int64[k], any order): ``(file, positions in rows, local rows)``,
    local rows ascending."""
    rows = np.asarray(rows, np.int64)
    if not len(rows):
        return
    firsts = np.array([f.first for f in files], np.int64)
    ends = firsts + np.array([f.count for f in files], np.int64)
    which = np.searchsorted(firsts, rows, "right") - 1
    if len(rows) and ((which < 0) | (rows >= ends[np.maximum(which, 0)])).any():
        bad = int(rows[(which < 0) | (rows >= ends[np.maximum(which, 0)])][0])
        raise RuntimeError(f"row {bad} is in no file of the store")  # a bug, not bad input
    order = np.lexsort((rows, which))
    cuts = np.flatnonzero(np.r_[True, which[order][1:] != which[order][:-1], True])
    for a, b in zip(cuts[:-1], cuts[1:]):
        at = order[a:b]
        f = files[int(which[at[0]])]
        yield f, at, rows[at] - f.first


def read_rows(files: list[RowFile], dtype, rows: np.ndarray) -> np.ndarray:
    """The records of ``rows`` (int64[k], any order, repeats allowed), in that order."""
    dtype = np.dtype(dtype)
    out = np.empty(len(rows), dtype)
    for f, at, local in _by_file(files, rows):
        distinct, inverse = np.unique(local, return_inverse=True)
        out[at] = read_ranges(f.file("rows"), dtype, distinct, distinct + 1)[inverse]
    return out


def read_lists(files: list[RowFile], dtype, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The lists of ``rows`` (int64[k], any order) in that order, as ``(offsets int64[k + 1], values)``."""
    dtype = np.dtype(dtype)
    rows = np.asarray(rows, np.int64)
    lengths = np.zeros(len(rows), np.int64)
    starts = np.zeros(len(rows), np.int64)
    pieces = []
    for f, at, local in _by_file(files, rows):
        distinct, inverse = np.unique(local, return_inverse=True)
        bounds = read_ranges(f.file("offsets"), np.dtype(np.int64), distinct, distinct + 2)
        lo, hi = bounds[0::2], bounds[1::2]
        values = read_ranges(f.file("values"), dtype, lo, hi)
        base = np.r_[0, np.cumsum(hi - lo)[:-1]]
        lengths[at] = (hi - lo)[inverse]
        starts[at] = base[inverse] + sum(len(p) for p in pieces)
        pieces.append(values)
    offsets = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    held = np.concatenate(pieces) if pieces else np.empty(0, dtype)
    return offsets, held[aranges(starts, lengths)]
