"""Input discovery, partition planning and partition loading.

A partition is a contiguous slice of one input file: a byte range of plain JSON Lines (cut at line
ends), a whole compressed JSON Lines file, or a run of Parquet row groups; or a group of consecutive
whole small files of one format (``PartitionSpec.members``). Every record gets a global order key
``_ord = file_index << 40 | record_index`` (record index: 0-based line of JSON Lines, row of Parquet),
so input order, generated ids and "first" canonicals do not depend on how files are split or grouped.

Defined behaviour (documented in docs/reliability.md, tested):
* blank lines in JSON Lines are not records; an empty file contributes no records (listed in
  summary.json); inputs with no records at all are an error;
* a missing or null text is an empty text (annotated, never a duplicate); a non-string text is an error;
* a missing or null id, or an unparseable timestamp, is an error for that row (``input.id_field: null``
  generates ``<file>:<line or row>`` ids; a null timestamp sorts last for ``earliest``);
* ids are integers (exact, any size) or strings; a float, bool or nested id is an error for that row
  (Parquet: for the file); the run writes every id in one type (``table.unify_ids``, ``run_id_column``);
* columns other than text/id/timestamp pass through untouched, each file with its own schema;
* bad files and rows raise ``InputError`` naming file/row/field; with ``input.on_error: skip`` they
  are skipped and listed in summary.json;
* a compressed file that does not end (cut short, even at a block boundary) is "truncated"; a file
  whose size, mtime or CRC differ from planning time is "changed while the run was reading it" (never
  skipped); directories follow symlinked folders, ignore hidden and ``_`` names and give hive columns.
"""

from __future__ import annotations

import bz2
import dataclasses
import functools
import glob as globlib
import gzip
import io
import json
import logging
import lzma
import os
import re
import threading
import zlib
from dataclasses import dataclass, field
from urllib.parse import unquote
from typing import Optional

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson
import pyarrow.parquet as pq

from ..config import InputConfig
from ..errors import ConfigError, InputError
from ..engine.clock import task_clock
from ..engine.failpoints import failpoint
from ..kernels.text import nonblank_lines

ROW_BITS = 40
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
PARQUET_SUFFIXES = (".parquet", ".pq")
COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bz2", ".xz": "xz"}
#: plain JSON Lines files smaller than this are not split to keep the executor's threads busy
MIN_SPLIT_BYTES = 4 << 20
#: small files are grouped into partitions of about ``input.partition_bytes``; a compressed file counts as
#: this many times its size on disk (a guess at the text it holds)
COMPRESSED_EXPANSION = 4
#: bytes at each end of a file whose checksum is the content check of compressed and Parquet files
EDGE_BYTES = 64 * 1024
log = logging.getLogger("gpucurate")


@dataclass(frozen=True)
class PartitionSpec:
    """One partition of the input. ``index`` numbers the partitions (and output part files)."""

    index: int
    path: str
    rel: str
    file_index: int
    fmt: str
    compression: Optional[str] = None
    byte_start: int = 0
    byte_end: int = -1
    first_line: int = 0
    row_groups: tuple = ()
    first_row: int = 0
    #: rows ``(start, stop)`` of the row groups read (a row group larger than the partition size is split)
    row_slice: Optional[tuple] = None
    #: hive partition columns ``((key, value), ...)`` from ``key=value`` folders under an input directory
    hive: tuple = ()
    #: ``(size, mtime)`` of the file when the run planned it, and a CRC-32 of the planned byte range (plain
    #: JSON Lines), the whole file (compressed) or its first and last 64 KiB (Parquet): load_partition
    #: checks both, so a file edited between the read and the write pass is an error, not mixed data
    stamp: Optional[tuple] = None
    digest: Optional[int] = None
    #: a group of whole small files (single-file specs, same format), read and written as one partition;
    #: its path, rel and file_index are its first member's
    members: tuple = ()
    #: the parts of this partition read and processed one by one, when a running task's share of
    #: ``run.memory_limit`` holds less than the whole (``processing_partitions``); it is still written as one
    #: part file, from one read. Not part of ``to_dict``: the output does not depend on the budget
    pieces: tuple = ()

    def parts(self) -> tuple:
        """The single-file specs this partition reads: its members, or itself."""
        return self.members or (self,)

    @property
    def paths(self) -> tuple:
        return tuple(m.path for m in self.parts())

    def to_dict(self) -> dict:
        """The spec as plain JSON values (``from_dict`` makes it again)."""
        d = dataclasses.asdict(dataclasses.replace(self, pieces=()))
        del d["pieces"]
        return d | {"members": [m.to_dict() for m in self.members]}

    @classmethod
    def from_dict(cls, d: dict) -> "PartitionSpec":
        def pair(v):
            return tuple(v) if v is not None else None
        return cls(**d | {"row_groups": tuple(d["row_groups"]), "row_slice": pair(d["row_slice"]),
                          "hive": tuple(map(tuple, d["hive"])), "stamp": pair(d["stamp"]),
                          "members": tuple(cls.from_dict(m) for m in d["members"])})

    def rooted(self, cwd: str) -> "PartitionSpec":
        """The spec with its relative local paths taken from ``cwd`` (the directory the run was started in)."""
        path = self.path if "://" in self.path else os.path.join(cwd, os.path.expanduser(self.path))
        return dataclasses.replace(self, path=path, members=tuple(m.rooted(cwd) for m in self.members))


@dataclass
class LoadedPartition:
    table: pa.Table
    records: np.ndarray  # int64 record index within the file of each row
    skipped: list = field(default_factory=list)
    replaced_utf8: int = 0
    timestamps: Optional[np.ndarray] = None  # int64 ns, when input.timestamp_field is set


# ----------------------------------------------------------------------------------------------
# Discovery


def _split_compression(name: str) -> tuple[str, Optional[str]]:
    lower = name.lower()
    for suffix, comp in COMPRESSIONS.items():
        if lower.endswith(suffix):
            return lower[: -len(suffix)], comp
    return lower, None


def detect_format(path: str, configured: str) -> tuple[str, Optional[str]]:
    base, comp = _split_compression(path)
    if base.endswith(PARQUET_SUFFIXES):
        return "parquet", None
    if base.endswith(JSONL_SUFFIXES):
        return "jsonl", comp
    if configured != "auto":
        return configured, comp
    raise InputError("cannot tell the format from the file name (expected .jsonl/.json/.ndjson[.gz|.bz2|.xz|.zst] "
                     "or .parquet; "
                     "or set input.format)", path)


def _is_data_file(name: str) -> bool:
    base, _ = _split_compression(name)
    return base.endswith(JSONL_SUFFIXES + PARQUET_SUFFIXES)


def _ignored_name(name: str) -> bool:
    """Hidden and ``_``-prefixed files and folders (``_SUCCESS``, ``.x.jsonl``, ``_temporary/``) are not
    data, as in Spark, Arrow and Hive."""
    return name.startswith((".", "_"))


def _walk_local(root: str, ignored: list) -> list[str]:
    """Data files under a local directory, following symlinked folders (each real folder visited once,
    so a link loop or a second link to a folder adds nothing)."""
    found: list[str] = []
    visited: set[str] = set()

    def walk(folder: str) -> None:
        real = os.path.realpath(folder)
        if real in visited:
            ignored.append({"path": folder, "reason": f"folder already read (a link to {real})"})
            return
        visited.add(real)
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            raise InputError(f"cannot list directory ({_first_line(exc)})", folder) from None
        for entry in entries:
            if _ignored_name(entry.name):
                ignored.append({"path": entry.path, "reason": "hidden or _-prefixed"})
            elif entry.is_dir(follow_symlinks=True):
                walk(entry.path)
            elif _is_data_file(entry.name):
                found.append(entry.path)
            else:
                ignored.append({"path": entry.path, "reason": "not a .jsonl/.json/.ndjson/.parquet file"})
    walk(root)
    return sorted(found)


def _walk_remote(fs, root: str, ignored: list) -> list[str]:
    found = []
    for f in sorted(fs.find(root)):
        parts = os.path.relpath(f, root).split("/") if f != root else []
        if any(_ignored_name(p) for p in parts):
            ignored.append({"path": f, "reason": "hidden or _-prefixed"})
        elif _is_data_file(f):
            found.append(f)
        else:
            ignored.append({"path": f, "reason": "not a .jsonl/.json/.ndjson/.parquet file"})
    return found


def hive_columns(root: str, path: str) -> tuple:
    """``((key, value), ...)`` of the ``key=value`` folders between ``root`` and ``path`` (values
    URL-decoded as Hive and Spark write them; ``__HIVE_DEFAULT_PARTITION__`` is null)."""
    rel = os.path.relpath(os.path.dirname(path), root).replace(os.sep, "/")
    pairs: dict[str, Optional[str]] = {}
    for segment in rel.split("/"):
        key, eq, value = segment.partition("=")
        if eq and key:
            value = unquote(value)
            pairs[unquote(key)] = None if value == "__HIVE_DEFAULT_PARTITION__" else value
    return tuple(pairs.items())


def expand_inputs(inputs: list[str], on_error: str = "error", skipped: list | None = None) -> list[str]:
    """Files named by paths, globs and directories (recursively), in the given order; each glob or
    directory sorted by name. Duplicated files are read once."""
    return [path for path, _ in _expand_inputs(inputs, on_error, skipped, [])]


def _expand_inputs(inputs: list[str], on_error: str, skipped: list | None, ignored: list) -> list[tuple]:
    """``(file, hive columns)`` of the inputs. Directories are walked recursively, following symlinked
    folders; hidden and ``_``-prefixed names under them are ignored (listed in ``ignored``), and
    ``key=value`` folders become hive columns. A local file reached twice (same real path) is read once."""
    files: list[tuple] = []
    for item in inputs:
        item = str(item)
        fs, path = _url_to_fs(item)
        local = "://" not in item
        if any(c in item for c in "*?["):
            found = sorted(globlib.glob(item, recursive=True)) if local else sorted(fs.glob(path))
            found = [f for f in found if not fs.isdir(f)]
        elif fs.isdir(path):
            found = _walk_local(item, ignored) if local else _walk_remote(fs, path, ignored)
        elif fs.exists(path):
            found = [item if local else path]
        else:
            found = []
        root = (item if local else path) if fs.isdir(path) else None
        if not found:
            err = InputError("no such file or directory (or the glob matched nothing)", item)
            if on_error == "skip" and skipped is not None:
                skipped.append({"path": item, "row": None, "reason": str(err)})
                continue
            raise err
        hives = [hive_columns(root, f) if root is not None else () for f in found]
        if not local:
            protocol = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol
            found = [f if "://" in f else f"{protocol}://{f}" for f in found]
        files.extend(zip(found, hives))
    seen = set()
    out = []
    for f, hive in files:
        key = f if "://" in f else os.path.realpath(f)
        if key not in seen:
            seen.add(key)
            out.append((f, hive))
    return out


def _relative_names(files: list[str]) -> list[str]:
    local = [f for f in files if "://" not in f]
    root = os.path.commonpath([os.path.dirname(os.path.abspath(f)) for f in local]) if local else ""
    return [os.path.relpath(os.path.abspath(f), root) if "://" not in f else f for f in files]


# ----------------------------------------------------------------------------------------------
# Planning


def _gf2_times(matrix: list, vec: int) -> int:
    out = 0
    for row in matrix:
        if not vec:
            break
        if vec & 1:
            out ^= row
        vec >>= 1
    return out


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """The CRC-32 of ``a + b`` from ``crc32(a)``, ``crc32(b)`` and ``len(b)`` (zlib's ``crc32_combine``, which
    Python's zlib module does not offer): the operator that appends ``len2`` zero bytes, by squaring."""
    if len2 <= 0:
        return crc1
    odd = [0xEDB88320] + [1 << k for k in range(31)]  # the operator of one zero bit
    even = [_gf2_times(odd, row) for row in odd]  # two zero bits
    odd = [_gf2_times(even, row) for row in even]  # four zero bits
    while True:
        even = [_gf2_times(odd, row) for row in odd]  # the first pass: one zero byte
        if len2 & 1:
            crc1 = _gf2_times(even, crc1)
        len2 >>= 1
        if not len2:
            break
        odd = [_gf2_times(even, row) for row in even]
        if len2 & 1:
            crc1 = _gf2_times(odd, crc1)
        len2 >>= 1
        if not len2:
            break
    return crc1 ^ crc2


def _plan_jsonl_plain(fs, path, size, target, piece=None) -> list[tuple[int, list]]:
    """Byte ranges of about ``target`` bytes cut after a newline, each as ``(crc, pieces)``: the CRC-32 of
    its bytes and its pieces of about ``piece`` bytes, cut after a newline too (one piece without
    ``piece``), each ``(start, end, line, crc)``: its bytes, the line index it starts at and its CRC-32.
    The ranges do not depend on ``piece``."""
    piece = piece if piece and piece < target else target
    ranges, pieces = [], []
    start, line, pos, lines_seen = 0, 0, 0, 0
    crc = 0  # of the piece's bytes so far
    range_cut = target  # the range's cut is after the first newline from here
    next_cut = min(piece, target)
    # one buffer, read into again and again; no larger than the file (a 16 MB buffer zeroed per small
    # file made planning 5,000 one-line files take seconds)
    chunk = bytearray(max(1, min(16 << 20, size + 1)))
    with fs.open(path, "rb") as fh:
        while True:
            size_read = fh.readinto(chunk)
            if not size_read:
                break
            view = memoryview(chunk)[:size_read]
            cstart = pos
            done = 0  # bytes of this chunk already in a CRC
            while next_cut < cstart + size_read:
                nl = chunk.find(b"\n", next_cut - cstart, size_read)
                if nl < 0:
                    next_cut = cstart + size_read  # keep looking in the next chunk
                    break
                cut = cstart + nl + 1
                pieces.append((start, cut, line, zlib.crc32(view[done:nl + 1], crc)))
                crc, done = 0, nl + 1
                line = lines_seen + chunk.count(b"\n", 0, nl + 1)
                start = cut
                if cut > range_cut:  # no newline between the piece's cut and the range's: the range ends too
                    ranges.append(pieces)
                    pieces = []
                    range_cut = cut + target
                next_cut = min(cut + piece, range_cut)
            crc = zlib.crc32(view[done:], crc)
            lines_seen += chunk.count(b"\n", 0, size_read)
            pos += size_read
    if start < size or not (ranges or pieces):
        pieces.append((start, size, line, crc))
    if pieces:
        ranges.append(pieces)
    return [(functools.reduce(lambda c, p: crc32_combine(c, p[3], p[1] - p[0]), pieces[1:], pieces[0][3]), pieces)
            for pieces in ranges]


def _even_piece(size: int, target: int, parallelism: int) -> int:
    """Bytes per piece that cut ``size`` into equal pieces of at most ``target``, as many as a multiple of
    ``parallelism`` (files under ``MIN_SPLIT_BYTES`` stay whole: their start-up costs more than a split saves)."""
    pieces = -(-size // target)
    if size >= MIN_SPLIT_BYTES and pieces % parallelism:
        pieces += parallelism - pieces % parallelism
    return max(1, -(-size // pieces))


class _LocalFiles:
    """What the reader asks of an fsspec filesystem, for local paths: these need no fsspec (its import,
    with asyncio's, is 0.04 s of every run's start-up)."""

    protocol = "file"
    open = staticmethod(open)
    isdir = staticmethod(os.path.isdir)
    exists = staticmethod(os.path.exists)
    size = staticmethod(os.path.getsize)


def _url_to_fs(path: str) -> tuple:
    """``(filesystem, path)``: fsspec's for a URL (``scheme://...``), ``_LocalFiles`` for a local path
    (with ``~`` expanded, as fsspec does)."""
    if "://" not in path:
        return _LocalFiles, os.path.expanduser(path)
    import fsspec
    return fsspec.core.url_to_fs(path)


def _stamp(fs, path) -> tuple:
    """``(size, modification time)`` of a file (ns for local files; what the store reports otherwise)."""
    if fs is _LocalFiles:
        st = os.stat(path)
        return (st.st_size, st.st_mtime_ns)
    info = fs.info(path)
    return (info.get("size"), str(info.get("mtime") or info.get("LastModified") or info.get("last_modified")
                                  or info.get("ETag") or info.get("etag") or ""))


def _edge_crc(fh, size: int) -> int:
    """CRC-32 of the first and last ``EDGE_BYTES`` of an open file (of all of it when small)."""
    fh.seek(0)
    if size <= 2 * EDGE_BYTES:
        return zlib.crc32(fh.read())
    crc = zlib.crc32(fh.read(EDGE_BYTES))
    fh.seek(size - EDGE_BYTES)
    return zlib.crc32(fh.read(EDGE_BYTES), crc)


def _starts_with_bracket(fs, path) -> bool:
    """Whether a file's first non-blank byte is ``[`` (a ``.json`` file holding one JSON array)."""
    with fs.open(path, "rb") as fh:
        head = fh.read(4096)
    return re.match(rb"(?:\xef\xbb\xbf)?[ \t\r\n]*\[", head) is not None


def _is_json_name(path: str) -> bool:
    return _split_compression(path)[0].endswith(".json")


def _plan_parquet(meta, cfg: InputConfig, first_index: int, common: dict, parallelism: int = 1,
                  piece: int | None = None) -> list[PartitionSpec]:
    """Row ranges of about ``input.partition_rows`` rows or ``input.partition_bytes`` of text (the text column's
    uncompressed size), as many as a multiple of ``parallelism`` (as ``_even_piece`` cuts JSON Lines; files
    under ``MIN_SPLIT_BYTES`` excepted), each of about the same text bytes (bytes taken as even within a row
    group). A range is the row groups it touches and a row slice of them; a cut moves to a row group's
    boundary when that is within a tenth of a range's size, so that ranges seldom share a row group.
    A range of more than ``piece`` bytes has ``pieces``: row ranges of about the same bytes within it."""
    text_col = next((k for k in range(meta.num_columns) if meta.schema.column(k).path == cfg.text_field), None)
    groups = [meta.row_group(g) for g in range(meta.num_row_groups)]
    rows = np.array([rg.num_rows for rg in groups], dtype=np.int64)
    nbytes = np.array([rg.column(text_col).total_uncompressed_size if text_col is not None else rg.total_byte_size
                       for rg in groups], dtype=np.float64)
    row_at = np.concatenate([[0], np.cumsum(rows)])  # first row of each row group, then the total
    bytes_at = np.concatenate([[0.0], np.cumsum(nbytes)])
    total_rows, total_bytes = int(row_at[-1]), float(bytes_at[-1])
    pieces = max(1, -(-int(total_bytes) // cfg.partition_bytes), -(-total_rows // cfg.partition_rows))
    if total_bytes >= MIN_SPLIT_BYTES and pieces % parallelism:
        pieces += parallelism - pieces % parallelism
    pieces = min(pieces, max(1, total_rows))

    def row_of(target: float) -> int:  # the row at ``target`` bytes
        g = min(int(np.searchsorted(bytes_at, target, side="right")) - 1, len(groups) - 1)
        within = (target - bytes_at[g]) / nbytes[g] if nbytes[g] > 0 else 0.0
        return int(row_at[g] + round(within * rows[g]))

    def spec_of(a: int, b: int, index: int, **more) -> PartitionSpec:
        g0 = int(np.searchsorted(row_at, a, side="right")) - 1
        g1 = int(np.searchsorted(row_at, b, side="left"))  # one past the last row group touched
        whole = a == row_at[g0] and b == row_at[g1]
        return PartitionSpec(index, row_groups=tuple(range(g0, g1)), first_row=a,
                             row_slice=None if whole else (a - int(row_at[g0]), b - int(row_at[g0])), **common, **more)

    cuts = [0]
    for k in range(1, pieces):
        target = total_bytes * k / pieces
        row = row_of(target)
        nearest = row_at[int(np.argmin(np.abs(row_at - row)))]
        if abs(bytes_at[np.searchsorted(row_at, nearest)] - target) <= total_bytes / pieces / 10:
            row = int(nearest)
        if row > cuts[-1]:
            cuts.append(row)
    if cuts[-1] < total_rows:
        cuts.append(total_rows)
    specs: list[PartitionSpec] = []
    for a, b in zip(cuts[:-1], cuts[1:]):
        lo = float(np.interp(a, row_at, bytes_at))
        hi = float(np.interp(b, row_at, bytes_at))
        k = min(b - a, -(-int(hi - lo) // piece)) if piece else 1
        inner = [a] + sorted({min(b - 1, max(a + 1, row_of(lo + (hi - lo) * j / k))) for j in range(1, k)}) + [b] \
            if k > 1 else []
        specs.append(spec_of(a, b, first_index + len(specs),
                             pieces=tuple(spec_of(x, y, 0) for x, y in zip(inner[:-1], inner[1:]))))
    return specs


def plan_partitions(inputs: list[str], cfg: InputConfig, report: dict, reserved=(),
                    parallelism: int = 1, piece_bytes: int | None = None) -> list[PartitionSpec]:
    """Expand inputs and cut them into partitions. ``report`` collects ``skipped``, ``empty_files`` and
    ``ignored_files`` (hidden, ``_``-prefixed and non-data files under input directories).

    Large files are cut into partitions of about ``input.partition_bytes``; runs of whole small files of
    one format are grouped into partitions of about that size (one task and one output part each).
    A plain JSON Lines file is cut into equal pieces whose number is a multiple of ``parallelism`` (the
    executor's threads): three pieces on two threads would take two rounds of the largest.

    ``piece_bytes``: a partition of a plain JSON Lines file or of a Parquet file larger than this gets
    ``pieces`` of about this size, which the run reads and processes one by one (``processing_partitions``).
    The partitions themselves, the output's part files, do not depend on it."""
    skipped = report.setdefault("skipped", [])
    empty = report.setdefault("empty_files", [])
    ignored = report.setdefault("ignored_files", [])
    found = _expand_inputs(inputs, cfg.on_error, skipped, ignored)
    if ignored:
        log.info("ignored %d file(s) and folder(s) under the input directories (hidden, _-prefixed or not "
                 "data; listed in summary.json as ignored_files): %s%s", len(ignored),
                 ", ".join(i["path"] for i in ignored[:5]), ", ..." if len(ignored) > 5 else "")
    files = [f for f, _ in found]
    rels = _relative_names(files)
    # per file: (its specs, whether it is one whole file that may share a partition, weight, parquet rows)
    planned: list[tuple] = []
    for file_index, ((path, hive), rel) in enumerate(zip(found, rels)):
        try:
            fmt, comp = detect_format(path, cfg.format)
            fs, fpath = _url_to_fs(path)
            stamp = _stamp(fs, fpath)
            size = stamp[0] if stamp[0] is not None else fs.size(fpath)
            if size == 0:
                empty.append(path)
                continue
            common = dict(path=path, rel=rel, file_index=file_index, fmt=fmt, compression=comp, hive=hive,
                          stamp=stamp)
            if fmt == "parquet":
                try:
                    with fs.open(fpath, "rb") as fh:
                        meta = pq.ParquetFile(fh).metadata
                        common["digest"] = _edge_crc(fh, size)
                except Exception as exc:  # pyarrow raises several types for damaged files
                    raise InputError(f"not a readable Parquet file ({_first_line(exc)})", path) from None
                _check_parquet_fields(path, meta.schema.to_arrow_schema(), cfg)
                check_annotation_clash(path, meta.schema.to_arrow_schema().names, reserved)
                if meta.num_rows == 0:
                    empty.append(path)
                    continue
                specs = _plan_parquet(meta, cfg, 0, common, parallelism, piece_bytes)
                whole = len(specs) == 1 and specs[0].row_slice is None
                nbytes = sum(meta.row_group(g).total_byte_size for g in range(meta.num_row_groups))
                planned.append((specs, whole, nbytes, meta.num_rows))
            elif comp is None:
                array = _is_json_name(path) and _starts_with_bracket(fs, fpath)  # read whole
                target = size + 1 if array else _even_piece(size, cfg.partition_bytes, parallelism)

                def range_spec(start, end, line, crc, **more) -> PartitionSpec:
                    return PartitionSpec(0, byte_start=start, byte_end=end, first_line=line,
                                         **dict(common, digest=crc), **more)
                specs = [range_spec(pieces[0][0], pieces[-1][1], pieces[0][2], crc,
                                    pieces=tuple(range_spec(*p) for p in pieces) if len(pieces) > 1 else ())
                         for crc, pieces in _plan_jsonl_plain(fs, fpath, size, target, None if array else piece_bytes)]
                planned.append((specs, len(specs) == 1, size, 0))
            else:
                with fs.open(fpath, "rb") as fh:
                    crc = zlib.crc32(fh.read())
                planned.append(([PartitionSpec(0, **common, digest=crc)], True, size * COMPRESSED_EXPANSION, 0))
        except InputError as err:
            if cfg.on_error != "skip":
                raise
            skipped.append({"path": path, "row": None, "reason": str(err)})
        except OSError as exc:
            err = InputError(f"cannot read file ({_first_line(exc)})", path)
            if cfg.on_error != "skip":
                raise err from None
            skipped.append({"path": path, "row": None, "reason": str(err)})
    specs = _group_small_files(planned, cfg, piece_bytes)
    if not specs:
        raise InputError("no records found in the input (all files empty or skipped)")
    return specs


def _group_small_files(planned: list[tuple], cfg: InputConfig, piece_bytes: int | None = None) -> list[PartitionSpec]:
    """The partitions in input order, numbered: consecutive whole files of one format share a partition
    while their weights (bytes; compressed files ``COMPRESSED_EXPANSION`` times theirs) stay within
    ``input.partition_bytes`` (and their Parquet rows within ``input.partition_rows``). A group heavier
    than ``piece_bytes`` has ``pieces``: runs of its files within that weight (a file more alone)."""
    out: list[PartitionSpec] = []
    group: list[tuple] = []  # (whole file's spec, weight)
    weight = rows = 0

    def grouped(files: list) -> PartitionSpec:
        if len(files) == 1:
            return files[0]
        first = files[0]
        return PartitionSpec(0, path=first.path, rel=first.rel, file_index=first.file_index, fmt=first.fmt,
                             members=tuple(dataclasses.replace(f, pieces=()) for f in files))

    def flush():
        nonlocal weight, rows
        if len(group) == 1:
            out.append(group[0][0])
        elif group:
            runs, run, run_weight = [], [], 0
            for spec, w in group:
                if run and piece_bytes and run_weight + w > piece_bytes:
                    runs.append(run)
                    run, run_weight = [], 0
                run.append(spec)
                run_weight += w
            runs.append(run)
            pieces = tuple(p for g in map(grouped, runs) for p in (g.pieces or (g,)))  # a large file's own too
            out.append(dataclasses.replace(grouped([spec for spec, _ in group]),
                                           pieces=pieces if len(pieces) > 1 else ()))
        group.clear()
        weight = rows = 0
    for specs, whole, w, r in planned:
        if not whole or w > cfg.partition_bytes or r > cfg.partition_rows:
            flush()
            out.extend(specs)
            continue
        if group and (specs[0].fmt != group[0][0].fmt or weight + w > cfg.partition_bytes
                      or rows + r > cfg.partition_rows):
            flush()
        group.append((specs[0], w))
        weight += w
        rows += r
    flush()
    return [dataclasses.replace(s, index=i) for i, s in enumerate(out)]


def processing_partitions(specs: list[PartitionSpec]) -> tuple[list[PartitionSpec], list[tuple[int, int]]]:
    """The partitions a run reads and processes: each partition's ``pieces``, or the partition itself,
    numbered in input order; and for each partition (part file) of ``specs`` the range ``(start, stop)`` of
    them it is made of."""
    out: list[PartitionSpec] = []
    ranges = []
    for spec in specs:
        start = len(out)
        out.extend(dataclasses.replace(p, index=start + k) for k, p in enumerate(spec.pieces or (spec,)))
        ranges.append((start, len(out)))
    return out, ranges


def is_text_type(t: pa.DataType) -> bool:
    """String-like Arrow types gpucurate reads as text (all cast to large_string)."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)
            or pa.types.is_null(t))


def _check_parquet_fields(path: str, schema: pa.Schema, cfg: InputConfig) -> None:
    names = set(schema.names)
    for role, name in (("text", cfg.text_field), ("id", cfg.id_field), ("timestamp", cfg.timestamp_field)):
        if name is not None and name not in names:
            raise InputError(f"{role} column not found (columns: {', '.join(schema.names)})", path, field=name)
    t = schema.field(cfg.text_field).type
    if not is_text_type(t):
        raise InputError(f"text column has type {t}, expected string", path, field=cfg.text_field)
    if cfg.id_field is not None:
        check_id_type(path, schema.field(cfg.id_field).type, cfg.id_field)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


# ----------------------------------------------------------------------------------------------
# Loading


class ChangedInputError(InputError):
    """A file changed after the run planned it: never skipped (the passes would disagree)."""


def _check_unchanged(spec: PartitionSpec, fs, fpath, crc: Optional[int] = None) -> None:
    """Raise when the file's size/mtime (or the CRC of what was read) differ from planning time."""
    if spec.stamp is not None and _stamp(fs, fpath) != spec.stamp:
        what = "size or modification time"
    elif crc is not None and spec.digest is not None and crc != spec.digest:
        what = "content"
    else:
        return
    raise ChangedInputError(f"changed while the run was reading it (its {what} differs from when the run "
                            "started); rerun when nothing writes to the input", spec.path)


def _read_bytes(spec: PartitionSpec) -> bytes:
    fs, fpath = _url_to_fs(spec.path)
    _check_unchanged(spec, fs, fpath)
    with fs.open(fpath, "rb") as fh:
        if spec.compression is None:
            fh.seek(spec.byte_start)
            data = fh.read(spec.byte_end - spec.byte_start)
            _check_unchanged(spec, fs, fpath, zlib.crc32(data))
            return data
        raw = fh.read()
    _check_unchanged(spec, fs, fpath, zlib.crc32(raw))
    return decompress(raw, spec.compression, spec.path)


_TRUNCATED = ("ended before the end-of-stream marker", "end of stream", "unexpected end")


def decompress(raw: bytes, compression: str, path: str) -> bytes:
    """All the frames/members/streams of a compressed file; one that does not end is an error saying
    the file is truncated (data cut at a block boundary decodes cleanly up to the cut)."""
    try:
        if compression == "zstd":
            return _zstd_frames(raw, path)
        if compression == "gzip":
            return gzip.decompress(raw)
        if compression == "bz2":
            return bz2.decompress(raw)
        if compression == "xz":
            return lzma.decompress(raw)
    except InputError:
        raise
    except Exception as exc:
        if isinstance(exc, EOFError) or any(t in str(exc).lower() for t in _TRUNCATED):
            raise InputError(f"truncated {compression} file: the compressed data ends before its end-of-stream "
                             "marker (the file was cut short)", path) from None
        raise InputError(f"cannot decompress {compression} data ({_first_line(exc)})", path) from None
    raise InputError(f"unknown compression {compression!r}", path)


def _zstd_frames(raw: bytes, path: str) -> bytes:
    import zstandard
    out = []
    while raw:
        obj = zstandard.ZstdDecompressor().decompressobj()
        out.append(obj.decompress(raw))
        if not obj.eof:
            raise InputError("truncated zstd file: its last frame does not end (the file was cut short)", path)
        raw = obj.unused_data
    return b"".join(out)


def _line_starts(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Start offset and line index of every non-blank line."""
    return nonblank_lines(np.frombuffer(data, dtype=np.uint8))


def _skipped_file(spec: PartitionSpec, cfg: InputConfig, err: InputError) -> LoadedPartition:
    """A file-level error found while loading: raised, or with ``on_error: skip`` an empty partition
    listing the file (the same in the read and the write pass). A changed file is never skipped."""
    if cfg.on_error != "skip" or isinstance(err, ChangedInputError):
        raise err
    return LoadedPartition(pa.table({}), np.empty(0, np.int64),
                           [{"path": spec.path, "row": None, "reason": str(err)}])


_OBJECT_START = re.compile(rb"[ \t\r\x0b\x0c]*\{")


def _all_lines_are_objects(data: bytes, starts: np.ndarray) -> bool:
    """Whether every non-blank line starts with ``{`` (Arrow reads a ``null`` line as a row of nulls)."""
    buf = np.frombuffer(data, dtype=np.uint8)
    return all(_OBJECT_START.match(data, int(starts[i])) is not None
               for i in np.flatnonzero(buf[starts] != ord("{")))


def _load_jsonl(spec: PartitionSpec, cfg: InputConfig) -> LoadedPartition:
    try:
        data = _read_bytes(spec)
    except InputError as err:
        return _skipped_file(spec, cfg, err)
    if spec.byte_start == 0 and _is_json_name(spec.path) and re.match(rb"(?:\xef\xbb\xbf)?\s*\[", data):
        try:
            return _load_json_array(spec, cfg, data)
        except InputError as err:
            if err.row is not None:
                raise
            return _skipped_file(spec, cfg, err)
    starts, lines = _line_starts(data)
    lines = lines + spec.first_line
    if len(starts) == 0:
        return LoadedPartition(pa.table({}), np.empty(0, np.int64))
    if not _all_lines_are_objects(data, starts):  # precise errors: "expected a JSON object, got null"
        return _load_jsonl_slow(spec, cfg, data, starts, lines)
    table = _arrow_parse(data, len(starts), cfg)
    if table is not None:
        return LoadedPartition(table, lines)
    return _load_jsonl_slow(spec, cfg, data, starts, lines)


def _arrow_parse(data: bytes, n_lines: int, cfg: InputConfig) -> Optional[pa.Table]:
    """The fast path: Arrow's multi-threaded parser, or None where the slow path must decide."""
    try:
        read_options = pajson.ReadOptions(block_size=min(1 << 26, max(1 << 16, len(data))))
        table = pajson.read_json(io.BytesIO(data), read_options=read_options)
        kept_as_text = pa.schema([pa.field(f.name, _timestamps_as_text(f.type)) for f in table.schema])
        if kept_as_text != table.schema:  # Arrow turned ISO-8601 strings into timestamps: keep the text
            parse = pajson.ParseOptions(explicit_schema=kept_as_text)
            table = pajson.read_json(io.BytesIO(data), read_options=read_options, parse_options=parse)
        if table.num_rows == n_lines and _fast_path_ok(table, cfg):
            table.validate(full=True)  # Arrow's JSON reader does not check UTF-8; this raises on bad bytes
            return table
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        pass
    return None


def _timestamps_as_text(t: pa.DataType) -> pa.DataType:
    """``t`` with every (nested) timestamp or date type replaced by string."""
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return pa.string()
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _timestamps_as_text(f.type)) for f in t])
    if pa.types.is_list(t):
        return pa.list_(_timestamps_as_text(t.value_type))
    return t


def _fast_path_ok(table: pa.Table, cfg: InputConfig) -> bool:
    """The Arrow parse is used as is only when text is a string column and the id column (if any) an
    integer or string one (the slow path gives precise per-row errors, keeps mixed-type columns, and
    reads integer ids beyond int64, which Arrow turns into doubles, exactly)."""
    if cfg.text_field not in table.column_names:
        return False
    if cfg.id_field is not None and cfg.id_field in table.column_names:
        t = table.schema.field(cfg.id_field).type
        if not (pa.types.is_integer(t) or is_text_type(t)):
            return False
    t = table.schema.field(cfg.text_field).type
    return is_text_type(t)


_SURROGATE = re.compile("[\ud800-\udfff]")
_JSON_TYPES = {type(None): "null", bool: "boolean", int: "number", float: "number", str: "string",
               list: "array", dict: "object"}


def _json_type(value) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _has_surrogates(value) -> bool:
    if isinstance(value, str):
        return _SURROGATE.search(value) is not None
    if isinstance(value, dict):
        return any(_has_surrogates(k) or _has_surrogates(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_surrogates(v) for v in value)
    return False


def _replace_surrogates(value):
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_replace_surrogates(k): _replace_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_surrogates(v) for v in value]
    return value


def _parse_json(raw: bytes, cfg: InputConfig, path: str, row, what: str = "line") -> tuple:
    """``(value, replaced)`` of one JSON text. Invalid UTF-8 and lone surrogate escapes (``"\\ud800"``:
    not Unicode) are errors, or with ``input.encoding_errors: replace`` become U+FFFD (``replaced``)."""
    try:
        return orjson.loads(raw), False
    except orjson.JSONDecodeError as exc:
        error = exc
    replaced = False
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as uexc:
        if cfg.encoding_errors != "replace":
            raise InputError(f"invalid UTF-8 at byte {uexc.start} of the {what} "
                             "(set input.encoding_errors=replace to substitute U+FFFD)", path, row) from None
        text, replaced = raw.decode("utf-8", errors="replace"), True
    hint = (" (a .json file holds JSON Lines, one object a line, or one JSON array of objects)"
            if _is_json_name(path) else "")
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InputError(f"invalid JSON ({_first_line(exc if replaced else error)}){hint}", path, row) from None
    if _has_surrogates(value):
        if cfg.encoding_errors != "replace":
            raise InputError("a string holds a lone UTF-16 surrogate escape (like \"\\ud800\"), which is not "
                             "Unicode (set input.encoding_errors=replace to substitute U+FFFD)", path, row)
        return _replace_surrogates(value), True
    if not replaced:  # Python's parser takes what orjson rejects (NaN, Infinity): keep orjson's verdict
        raise InputError(f"invalid JSON ({error}){hint}", path, row)
    return value, replaced


def _check_record(rec, cfg: InputConfig, path: str, row: int, what: str = "") -> None:
    if not isinstance(rec, dict):
        raise InputError(f"{what}expected a JSON object, got {_json_type(rec)}", path, row)
    text = rec.get(cfg.text_field)
    if text is not None and not isinstance(text, str):
        raise InputError(f"expected a string, got {_json_type(text)}", path, row, field=cfg.text_field)


def _load_json_array(spec, cfg: InputConfig, data: bytes) -> LoadedPartition:
    """A ``.json`` file holding one JSON array of objects, read whole; element ``k`` (1-based) stands
    where line ``k`` does in JSON Lines (messages, generated ids)."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    value, replaced = _parse_json(data, cfg, spec.path, None, "file")
    if not isinstance(value, list):
        raise InputError(f"expected one JSON array of objects, got a JSON {_json_type(value)}", spec.path)
    records, kept, skipped = [], [], []
    exact = None  # the array read again by the standard library, which keeps integers beyond 64 bits
    for k, rec in enumerate(value):
        try:
            _check_record(rec, cfg, spec.path, k + 1, f"element {k + 1} of the JSON array: ")
            if cfg.id_field is not None and cfg.id_field in rec:
                v = rec[cfg.id_field]
                if isinstance(v, float):
                    exact = json.loads(data.decode("utf-8", errors="replace")) if exact is None else exact
                    v = exact[k].get(cfg.id_field)
                rec[cfg.id_field] = json_id(v, json.dumps({cfg.id_field: v}).encode(), cfg.id_field,
                                            spec.path, k + 1)
        except InputError as err:
            if cfg.on_error != "skip":
                raise
            skipped.append({"path": spec.path, "row": k + 1, "reason": str(err)})
            continue
        records.append(rec)
        kept.append(k)
    replaced_rows = sum("\ufffd" in json.dumps(r, ensure_ascii=False) for r in records) if replaced else 0
    return LoadedPartition(_records_to_table(records), np.asarray(kept, dtype=np.int64), skipped, replaced_rows)


def _load_jsonl_slow(spec, cfg: InputConfig, data: bytes, starts, lines) -> LoadedPartition:
    records, kept_lines, skipped = [], [], []
    replaced = 0
    ends = np.append(starts[1:], len(data))
    for s, e, line in zip(starts.tolist(), ends.tolist(), lines.tolist()):
        raw = data[s:e]
        try:
            rec, bad_text = _parse_json(raw, cfg, spec.path, line + 1)
            _check_record(rec, cfg, spec.path, line + 1)
            if cfg.id_field is not None and cfg.id_field in rec:
                rec[cfg.id_field] = json_id(rec[cfg.id_field], raw, cfg.id_field, spec.path, line + 1)
        except (InputError, ValueError) as err:
            if not isinstance(err, InputError):
                err = InputError(f"invalid JSON ({_first_line(err)})", spec.path, line + 1)
            if cfg.on_error != "skip":
                raise err from None
            skipped.append({"path": spec.path, "row": line + 1, "reason": str(err)})
            continue
        replaced += bad_text
        records.append(rec)
        kept_lines.append(line)
    return LoadedPartition(_records_to_table(records), np.asarray(kept_lines, dtype=np.int64), skipped, replaced)


def _records_to_table(records: list[dict]) -> pa.Table:
    names: dict[str, None] = {}
    for rec in records:
        for k in rec:
            names.setdefault(k, None)
    columns = {}
    for name in names:
        values = [rec.get(name) for rec in records]
        try:
            columns[name] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):  # (integers beyond 64 bits overflow)
            # mixed types in one column: keep each value as its JSON text
            columns[name] = pa.array([v if v is None or isinstance(v, str) else json.dumps(v, ensure_ascii=False)
                                      for v in values], type=pa.string())
    return pa.table(columns) if columns else pa.table({"__empty__": pa.nulls(len(records))}).drop(["__empty__"])


def _load_parquet(spec: PartitionSpec, cfg: InputConfig) -> LoadedPartition:
    fs, fpath = _url_to_fs(spec.path)
    _check_unchanged(spec, fs, fpath)
    try:
        with fs.open(fpath, "rb") as fh:
            crc = _edge_crc(fh, spec.stamp[0]) if spec.stamp is not None and spec.digest is not None else None
            table = pq.ParquetFile(fh).read_row_groups(list(spec.row_groups))
        if spec.row_slice is not None:
            table = table.slice(spec.row_slice[0], spec.row_slice[1] - spec.row_slice[0])
    except Exception as exc:
        raise InputError(f"cannot read Parquet row groups {list(spec.row_groups)} ({_first_line(exc)})",
                         spec.path) from None
    _check_unchanged(spec, fs, fpath, crc)
    return LoadedPartition(table, np.arange(spec.first_row, spec.first_row + table.num_rows, dtype=np.int64))


def load_partition(spec: PartitionSpec, cfg: InputConfig) -> LoadedPartition:
    """Read one partition with all its columns and check the configured fields.

    Rows with a null id or an unparseable timestamp are errors (or skipped with ``on_error: skip``);
    timestamps are parsed here (``LoadedPartition.timestamps``). The same spec and config always give
    the same rows, so the writer can re-read a partition and line it up with the annotations computed
    from the first read. Each read checks the file is as the run planned it (size, mtime, CRC).

    A group of small files reads each one and joins their tables (a column whose types differ between
    the files is kept as JSON text); its ``records`` are then order keys (``order_keys`` passes them on).
    Hive partition columns of the path are added to every record as string columns (a column of the
    file itself of the same name wins).
    """
    if spec.members:
        return _load_group(spec, cfg)
    part = _load_parquet(spec, cfg) if spec.fmt == "parquet" else _load_jsonl(spec, cfg)
    table = part.table
    if table.num_rows == 0:
        return part
    for key, value in spec.hive:
        if key not in table.column_names:
            table = table.append_column(key, pa.array([value] * table.num_rows, pa.string()))
    part.table = table
    if cfg.text_field not in table.column_names:
        raise InputError("text field not found in any record of this part of the file", spec.path,
                         field=cfg.text_field)
    for role, name in (("id", cfg.id_field), ("timestamp", cfg.timestamp_field)):
        if name is not None and name not in table.column_names:
            raise InputError(f"{role} field not found in any record of this part of the file", spec.path,
                             field=name)
    return _drop_bad_rows(part, cfg, spec.path, lambda i: (spec.path, _display_row(spec, part.records[i])))


def _drop_bad_rows(part: LoadedPartition, cfg: InputConfig, path: str, where) -> LoadedPartition:
    """Null ids and unparseable timestamps: errors naming ``where(row) -> (file, line or row)``, or
    dropped rows listed in ``part.skipped`` with ``on_error: skip``; parses ``part.timestamps``."""
    table = part.table
    # bad rows: (mask, field, message of row i)
    checks = []
    if cfg.id_field is not None:
        nulls = table.column(cfg.id_field).is_null().to_numpy(zero_copy_only=False)
        checks.append((nulls, cfg.id_field, lambda i: "id is missing or null"))
    if cfg.timestamp_field is not None:
        part.timestamps, unparsed, raw = timestamps_of(path, table.column(cfg.timestamp_field), cfg)
        checks.append((unparsed, cfg.timestamp_field, lambda i: f"cannot parse timestamp {raw[i]!r}"))
    drop = np.zeros(table.num_rows, dtype=bool)
    for mask, field_name, message in checks:
        for i in np.flatnonzero(mask):
            file, row = where(i)
            err = InputError(message(i), file, row, field=field_name)
            if cfg.on_error != "skip":
                raise err
            part.skipped.append({"path": file, "row": err.row, "reason": str(err)})
        drop |= mask
    if drop.any():
        part.table = table.filter(pa.array(~drop))
        part.records = part.records[~drop]
        if part.timestamps is not None:
            part.timestamps = part.timestamps[~drop]
    return part


def _load_group(spec: PartitionSpec, cfg: InputConfig, parts=None) -> LoadedPartition:
    """A group of small files: read in one parse where that gives what reading each file would, else
    file by file (``parts``, when given, collects each file's ``(spec, LoadedPartition)``)."""
    if spec.fmt == "jsonl":
        part = _load_group_jsonl(spec, cfg)
        if part is not None:
            return part
    each = [(m, load_partition(m, cfg)) for m in spec.members]
    if parts is not None:
        parts.extend(each)
    full = [(m, p) for m, p in each if p.table.num_rows]
    skipped = [s for _, p in each for s in p.skipped]
    replaced = sum(p.replaced_utf8 for _, p in each)
    if not full:
        return LoadedPartition(pa.table({}), np.empty(0, np.int64), skipped, replaced)
    keys = np.concatenate([order_keys(m, p.records) for m, p in full])
    ts = np.concatenate([p.timestamps for _, p in full]) if cfg.timestamp_field is not None else None
    return LoadedPartition(concat_tables([p.table for _, p in full]), keys, skipped, replaced, ts)


def _load_group_jsonl(spec: PartitionSpec, cfg: InputConfig) -> Optional[LoadedPartition]:
    """Small JSON Lines files joined and parsed by Arrow at once (per-call overhead dominates small
    files). None (read them one by one) when any file is not plain well-formed JSON Lines with the
    configured fields, or the files' columns do not parse as one table: the file-by-file read then
    gives the precise per-file errors and types. Rows are as file-by-file: the same order keys, the
    same null-id/timestamp checks naming each file and line."""
    datas, keys, skipped = [], [], []
    names = [b'"' + name.encode() + b'"' for name in (cfg.text_field, cfg.id_field, cfg.timestamp_field)
             if name is not None]
    for m in spec.members:
        try:
            data = _read_bytes(m)
        except ChangedInputError:
            raise
        except InputError:
            return None
        if _is_json_name(m.path) and re.match(rb"(?:\xef\xbb\xbf)?\s*\[", data):
            return None
        starts, lines = _line_starts(data)
        if not len(starts):
            continue
        if not _all_lines_are_objects(data, starts) or not all(n in data for n in names):
            return None
        keys.append(order_keys(m, lines))
        datas.append(data if data.endswith(b"\n") else data + b"\n")
    if not datas:
        return LoadedPartition(pa.table({}), np.empty(0, np.int64), skipped)
    keys = np.concatenate(keys)
    table = _arrow_parse(b"".join(datas), len(keys), cfg)
    if table is None:
        return None
    by_file = {m.file_index: m for m in spec.members}
    file_of = (keys >> ROW_BITS).astype(np.int64)
    if any(m.hive for m in spec.members):
        hive_keys = list(dict.fromkeys(k for m in spec.members for k, _ in m.hive))
        if any(k in table.column_names for k in hive_keys):
            return None  # a file's own column wins over the path's: file by file
        for k in hive_keys:
            values = {f: dict(m.hive).get(k) for f, m in by_file.items()}
            table = table.append_column(k, pa.array([values[f] for f in file_of.tolist()], pa.string()))
    part = LoadedPartition(table, keys, skipped)

    def where(i):
        m = by_file[int(file_of[i])]
        return m.path, int(keys[i] & ((1 << ROW_BITS) - 1)) + 1
    try:
        return _drop_bad_rows(part, cfg, spec.path, where)
    except InputError as err:
        if err.row is None:  # a column type error (timestamps): file by file names the file
            return None
        raise


def concat_tables(tables: list[pa.Table]) -> pa.Table:
    """Tables of several files as one: missing columns are null, types are widened where Arrow can
    (int -> double, string -> large_string, ...), and a column whose types cannot be joined is kept as
    JSON text (as a column with mixed types inside one JSON Lines file is)."""
    if len(tables) == 1:
        return tables[0]
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        pass
    types: dict[str, list] = {}
    for t in tables:
        for f in t.schema:
            types.setdefault(f.name, []).append(f.type)
    mixed = set()
    for name, ts in types.items():
        try:
            pa.unify_schemas([pa.schema([pa.field(name, t)]) for t in ts], promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            mixed.add(name)
    fixed = []
    for t in tables:
        for name in mixed & set(t.column_names):
            values = [v if v is None or isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str)
                      for v in t.column(name).to_pylist()]
            t = t.set_column(t.schema.get_field_index(name), name, pa.array(values, pa.string()))
        fixed.append(t)
    return pa.concat_tables(fixed, promote_options="permissive")


def _display_row(spec: PartitionSpec, record: int) -> int:
    """1-based line for JSON Lines, 0-based row for Parquet (as in error messages)."""
    return int(record) + 1 if spec.fmt == "jsonl" else int(record)


def order_keys(spec: PartitionSpec, records: np.ndarray) -> np.ndarray:
    """``file_index << 40 | record`` of each row (a group's loaded records already are order keys)."""
    if spec.members:
        return records.astype(np.int64)
    return (np.int64(spec.file_index) << np.int64(ROW_BITS)) | records.astype(np.int64)


def check_annotation_clash(path: str, columns, reserved) -> None:
    """A ``ConfigError`` naming the input columns whose names are among ``reserved`` (the names the run
    writes its annotation columns under): checked at planning (Parquet schemas), in the read pass (every
    JSON Lines partition) and before each part file is written. Never skipped by ``on_error: skip``."""
    reserved = set(reserved)
    clash = [c for c in columns if c in reserved]
    if clash:
        raise ConfigError(f"{path}: input column(s) {', '.join(clash)} have the names of gpucurate's annotation "
                          "columns; set output.annotation_prefix (e.g. --set output.annotation_prefix=gc_ writes "
                          f"gc_{clash[0]}, gc_doc_id, ...) or rename them")


#: the error for an id that is neither an integer nor a string
ID_TYPES = "ids must be integers or strings"


def check_id_type(path: str, t: pa.DataType, name: str) -> None:
    """An id column must hold integers or strings: a float (even 1.0: ids are kept exact), bool,
    decimal or nested id is an ``InputError``."""
    if not (pa.types.is_integer(t) or is_text_type(t)):
        raise InputError(f"{ID_TYPES}; the id column has type {t}", path, field=name)


def json_id(value, raw: bytes, name: str, path: str, line: int):
    """A JSON Lines id as the reader keeps it: an int (exact, any size), a str, or None (missing/null,
    reported later). orjson reads integers beyond 64 bits as floats, so a float is read again from the
    line's text with the standard library, which keeps integers exact; a real float (``1.5``, ``1.0``,
    ``1e3``), a bool, an object or an array is an ``InputError``."""
    if isinstance(value, float):
        value = json.loads(raw).get(name)
    if value is None or isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    shown = json.dumps(value, ensure_ascii=False)
    raise InputError(f"{ID_TYPES}, got {shown[:60] + ('...' if len(shown) > 60 else '')}", path, line, field=name)


def ids_of(spec: PartitionSpec, part: LoadedPartition, cfg: InputConfig) -> pd.Series:
    """The document ids of a loaded partition: the user's (int64, or str when the column holds strings or
    integers beyond int64, each as its exact decimal text) or generated ``rel:row``."""
    if cfg.id_field is None:
        return pd.Series([f"{spec.rel}:{_display_row(spec, r)}" for r in part.records], dtype=object)
    col = part.table.column(cfg.id_field)
    check_id_type(spec.path, col.type, cfg.id_field)
    if pa.types.is_integer(col.type):
        values = col.to_numpy()
        if values.dtype != np.uint64 or not len(values) or values.max() <= np.iinfo(np.int64).max:
            return pd.Series(values.astype(np.int64))
        return pd.Series(values.astype(str), dtype=object)  # beyond int64: keep them exact as text
    return pd.Series(col.to_pylist(), dtype=object)


def run_id_column(spec: PartitionSpec, part: LoadedPartition, cfg: InputConfig, integer: bool) -> pa.Array:
    """The user's id column as every part file of a run holds it, whatever the file's own type:
    ``int64`` when every id of the run is an integer in int64 range (``integer``), else ``string``
    with each integer as its exact decimal text (the same text as ``doc_id``)."""
    ids = ids_of(spec, part, cfg)
    if integer:
        return pa.array(ids.to_numpy(dtype=np.int64), pa.int64())
    return pa.array(ids.astype(str).to_numpy(dtype=object), pa.string())


def id_columns(ids: pd.Series) -> dict:
    """The ``_id``, ``_id_int``, ``_id_is_int`` columns of the narrow frame (no object columns: Dask
    would turn them into strings). Float, bool and complex ids (a DataFrame handed to ``gpucurate.dedup``)
    are an ``InputError``: ids are kept exact."""
    if ids.dtype.kind in "fbc":
        raise InputError(f"{ID_TYPES}; the id column has dtype {ids.dtype}")
    is_int = ids.dtype.kind == "i"
    text = pa.array(ids.astype(str).to_numpy(dtype=object), type=pa.large_string())
    return {"_id": pd.arrays.ArrowExtensionArray(text),
            "_id_int": ids.to_numpy(dtype=np.int64) if is_int else np.zeros(len(ids), np.int64),
            "_id_is_int": np.full(len(ids), is_int)}


def timestamps_of(path: str, col: pa.ChunkedArray, cfg: InputConfig) -> tuple:
    """``(int64 ns since the epoch (UTC), bool mask of unparseable values, raw values)``; null and
    unparseable values read as int64 max (they sort last)."""
    t = col.type
    latest = np.iinfo(np.int64).max
    unparsed = np.zeros(len(col), dtype=bool)
    raw = None
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        ts = pd.to_datetime(pd.Series(col.to_pandas()), utc=True)
    elif pa.types.is_integer(t) or pa.types.is_floating(t):
        ts = pd.to_datetime(pd.Series(col.to_numpy(zero_copy_only=False)), unit="s", utc=True)
    elif is_text_type(t):
        raw = col.to_pylist()
        ts = pd.to_datetime(pd.Series(raw, dtype=object), utc=True, errors="coerce", format="mixed")
        unparsed = (ts.isna() & pd.Series(raw, dtype=object).notna()).to_numpy()
    else:
        raise InputError(f"timestamp column has type {t}, expected a timestamp, string or number",
                         path, field=cfg.timestamp_field)
    out = ts.astype("datetime64[ns, UTC]").to_numpy(dtype="datetime64[ns]").astype(np.int64, copy=True)
    out[ts.isna().to_numpy()] = latest
    return out, unparsed, raw


# ----------------------------------------------------------------------------------------------
# The narrow Dask DataFrame the stages work on

NARROW_META = pd.DataFrame({
    "_ord": pd.Series([], dtype=np.int64),
    "_id": pd.Series([], dtype=pd.ArrowDtype(pa.large_string())),
    "_id_int": pd.Series([], dtype=np.int64),  # the id when every id of the partition is an integer
    "_id_is_int": pd.Series([], dtype=bool),
    "_ts": pd.Series([], dtype=np.int64),
    "_nbytes": pd.Series([], dtype=np.int64),
    "_text": pd.Series([], dtype=pd.ArrowDtype(pa.large_string())),
})


class ParsedCache:
    """Partitions as ``load_partition`` gave them to the read pass, kept for the write pass of a run on
    this process's threads, which then does not read and parse them again (on JSON Lines that was half
    of the write step). At most ``budget`` bytes of Arrow data are kept in memory; the others go to
    ``overflow(part) -> task`` (``SpillStore.keep_on_disk``: writing and mapping a parse back costs a fifth
    of parsing it again), or are read again without one. ``columns``: keep only these columns of each
    parse (None: all of them)."""

    def __init__(self, budget: int, columns: tuple | None = None, overflow=None):
        self.budget, self.columns, self.overflow = budget, columns, overflow
        self._parts: dict = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def put(self, spec: PartitionSpec, part: LoadedPartition) -> None:
        if self.columns is not None:
            part = dataclasses.replace(part, table=part.table.select(list(self.columns)))
        with self._lock:
            self._pop(spec)
            fits = self._bytes + part.table.nbytes <= self.budget
            if fits:
                self._parts[spec.index] = part
                self._bytes += part.table.nbytes
        if not fits and self.overflow is not None:
            task = self.overflow(part)
            with self._lock:
                self._parts[spec.index] = task

    def take(self, spec: PartitionSpec) -> Optional[LoadedPartition]:
        """The partition's parse, given out once (None when it was not kept)."""
        with self._lock:
            part = self._pop(spec)
        return part() if part is not None and not isinstance(part, LoadedPartition) else part  # overflowed

    def take_joined(self, spec: PartitionSpec, pieces: list[PartitionSpec]) -> Optional[LoadedPartition]:
        """Partition ``spec``'s parse from those of the ``pieces`` it was read in, given out once: None when
        one was not kept, or when their columns' types differ (a whole parse may type such a column
        otherwise, e.g. one that is null in a piece, or integer in one and fractional in another)."""
        parts = [self.take(p) for p in pieces]
        if len(parts) == 1 or any(p is None for p in parts):
            return parts[0] if len(parts) == 1 else None
        if any(p.table.schema != parts[0].table.schema for p in parts[1:]):
            return None
        # a group's parse numbers its rows by order key (``order_keys``), a file's by record
        records = [order_keys(piece, p.records) if spec.members else p.records for piece, p in zip(pieces, parts)]
        timestamps = [p.timestamps for p in parts]
        return LoadedPartition(pa.concat_tables([p.table for p in parts]), np.concatenate(records),
                               [row for p in parts for row in p.skipped], sum(p.replaced_utf8 for p in parts),
                               None if timestamps[0] is None else np.concatenate(timestamps))

    def _pop(self, spec: PartitionSpec):
        part = self._parts.pop(spec.index, None)
        if isinstance(part, LoadedPartition):
            self._bytes -= part.table.nbytes
        return part


def load_narrow(spec: PartitionSpec, cfg: InputConfig, reserved=(),
                cache: Optional[ParsedCache] = None) -> pd.DataFrame:
    """One partition as the stages see it: order key, id, timestamp, text byte length and text.

    ``attrs`` carries ``skipped`` rows and the ``replaced_utf8`` count for the summary. With ``cache``,
    the whole parse (``load_partition``'s) is kept there for the write pass.
    """
    failpoint(f"read-partition-{spec.index}")
    with task_clock("parse"):
        return _load_narrow(spec, cfg, reserved, cache)


def _load_narrow(spec: PartitionSpec, cfg: InputConfig, reserved, cache: Optional[ParsedCache]) -> pd.DataFrame:
    pieces, skipped, replaced = [], [], 0
    parts: list = []
    if spec.members:
        group = _load_group(spec, cfg, parts)
        if not parts:  # the group's files read in one parse
            for m in spec.members if _clashes(group.table.column_names, reserved) else ():
                check_annotation_clash(m.path, load_partition(m, cfg).table.column_names, reserved)
            skipped, replaced = group.skipped, group.replaced_utf8
            if group.table.num_rows:
                pieces.append(_narrow_piece(group, group.records, _group_ids(spec, group, cfg), cfg))
    else:
        group = load_partition(spec, cfg)
        parts = [(spec, group)]
    if cache is not None:
        cache.put(spec, group)
    for member, part in parts:  # file by file: ids and messages are each file's own
        check_annotation_clash(member.path, part.table.column_names, reserved)
        skipped += part.skipped
        replaced += part.replaced_utf8
        if part.table.num_rows:
            pieces.append(_narrow_piece(part, order_keys(member, part.records), ids_of(member, part, cfg), cfg))
    if not pieces:
        df = NARROW_META.copy()
    elif len(pieces) == 1:
        df = pd.DataFrame(pieces[0])
    else:
        df = pd.DataFrame({name: _concat_column([p[name] for p in pieces]) for name in pieces[0]})
    df.attrs = {"skipped": skipped, "replaced_utf8": replaced, "partition": spec.index}
    return df


def _clashes(columns, reserved) -> bool:
    reserved = set(reserved)
    return any(c in reserved for c in columns)


def _narrow_piece(part: LoadedPartition, ords: np.ndarray, ids: pd.Series, cfg: InputConfig) -> dict:
    n = part.table.num_rows
    text = part.table.column(cfg.text_field).combine_chunks()
    text = pc.fill_null(text.cast(pa.large_string()), "")
    ts = part.timestamps if part.timestamps is not None else np.zeros(n, np.int64)
    return {
        "_ord": ords,
        **id_columns(ids),
        "_ts": ts,
        "_nbytes": pc.binary_length(text).to_numpy().astype(np.int64),
        "_text": pd.arrays.ArrowExtensionArray(text),
    }


def _group_ids(spec: PartitionSpec, group: LoadedPartition, cfg: InputConfig) -> pd.Series:
    """The ids of a group read in one parse: the id column's, or each file's generated ones."""
    if cfg.id_field is not None:
        return ids_of(spec.members[0], group, cfg)
    by_file = {m.file_index: m for m in spec.members}
    file_of = group.records >> ROW_BITS
    cuts = [0, *(np.flatnonzero(np.diff(file_of)) + 1).tolist(), len(file_of)]
    ids = [ids_of(by_file[int(file_of[a])], LoadedPartition(pa.table({}), group.records[a:b] & ((1 << ROW_BITS) - 1)),
                  cfg).to_numpy(dtype=object) for a, b in zip(cuts[:-1], cuts[1:])]
    return pd.Series(np.concatenate(ids), dtype=object)


def _concat_column(values: list):
    """One narrow-frame column from the pieces of a group's files."""
    if all(isinstance(v, np.ndarray) for v in values):
        return np.concatenate(values)
    if all(isinstance(v, pd.arrays.ArrowExtensionArray) for v in values):
        return pd.arrays.ArrowExtensionArray(pa.chunked_array([pa.array(v) for v in values]).combine_chunks())
    return pd.concat([pd.Series(v) for v in values], ignore_index=True).array


def read_documents(specs: list[PartitionSpec], cfg: InputConfig, reserved=(), local: bool = False,
                   cache: Optional[ParsedCache] = None):
    """The narrow partitions, one per spec, in input order: a Dask DataFrame, or with ``local`` (a run on
    this process's threads) a ``partitions.Partitions``, which needs no ``dask.dataframe``; there the
    parses are kept in ``cache`` when one is given."""
    if local:
        from ..engine.partitions import Partitions
        return Partitions.from_map(load_narrow, specs, NARROW_META, cfg=cfg, reserved=tuple(reserved), cache=cache)
    import dask.dataframe as dd
    return dd.from_map(load_narrow, specs, cfg=cfg, reserved=tuple(reserved), meta=NARROW_META,
                       enforce_metadata=False, label="read")
