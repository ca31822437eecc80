"""Input discovery, partition planning and partition loading.

A partition is a contiguous slice of one input file: a byte range of plain JSON Lines (cut at line
ends), a whole compressed JSON Lines file, or a run of Parquet row groups. Every record gets a global
order key ``_ord = file_index << 40 | record_index`` (record index: 0-based line of JSON Lines, row of
Parquet), so input order, generated ids and "first" canonicals do not depend on how files are split.

Defined behaviour (documented in README, tested):
* blank lines in JSON Lines are not records; an empty file contributes no records (listed in
  summary.json); inputs with no records at all are an error;
* a missing or null text is an empty text (annotated, never a duplicate); a non-string text is an error;
* a missing or null id, or an unparseable timestamp, is an error for that row (``input.id_field: null``
  generates ``<file>:<line or row>`` ids; a null timestamp sorts last for ``earliest``);
* columns other than text/id/timestamp pass through untouched, each file with its own schema;
* bad files and rows raise ``InputError`` naming file/row/field; with ``input.on_error: skip`` they
  are skipped and listed in summary.json.
"""

from __future__ import annotations

import bz2
import glob as globlib
import gzip
import io
import json
import os
from dataclasses import dataclass, field
from typing import Optional

import fsspec
import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson
import pyarrow.parquet as pq

from ..config import InputConfig
from ..errors import InputError
from ..failpoints import failpoint
from ..kernels.text import nonblank_lines

ROW_BITS = 40
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
PARQUET_SUFFIXES = (".parquet", ".pq")
COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bz2"}


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
    raise InputError("cannot tell the format from the file name (expected .jsonl[.gz|.zst] or .parquet; "
                     "or set input.format)", path)


def _is_data_file(name: str) -> bool:
    base, _ = _split_compression(name)
    return base.endswith(JSONL_SUFFIXES + PARQUET_SUFFIXES)


def expand_inputs(inputs: list[str], on_error: str = "error", skipped: list | None = None) -> list[str]:
    """Files named by paths, globs and directories (recursively), in the given order; each glob or
    directory sorted by name. Duplicated files are read once."""
    files: list[str] = []
    for item in inputs:
        item = str(item)
        fs, path = fsspec.core.url_to_fs(item)
        local = "://" not in item
        if any(c in item for c in "*?["):
            found = sorted(globlib.glob(item, recursive=True)) if local else sorted(fs.glob(path))
            found = [f for f in found if not fs.isdir(f)]
        elif fs.isdir(path):
            found = sorted(f for f in fs.find(path) if _is_data_file(f))
        elif fs.exists(path):
            found = [item if local else path]
        else:
            found = []
        if not found:
            err = InputError("no such file or directory (or the glob matched nothing)", item)
            if on_error == "skip" and skipped is not None:
                skipped.append({"path": item, "row": None, "reason": str(err)})
                continue
            raise err
        if not local:
            protocol = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol
            found = [f if "://" in f else f"{protocol}://{f}" for f in found]
        files.extend(found)
    seen = set()
    return [f for f in files if not (f in seen or seen.add(f))]


def _relative_names(files: list[str]) -> list[str]:
    local = [f for f in files if "://" not in f]
    root = os.path.commonpath([os.path.dirname(os.path.abspath(f)) for f in local]) if local else ""
    return [os.path.relpath(os.path.abspath(f), root) if "://" not in f else f for f in files]


# ----------------------------------------------------------------------------------------------
# Planning


def _plan_jsonl_plain(fs, path, size, target) -> list[tuple[int, int, int]]:
    """Byte ranges of about ``target`` bytes cut after a newline, with the line index each starts at."""
    ranges = []
    start, line, pos, lines_seen = 0, 0, 0, 0
    next_cut = target
    with fs.open(path, "rb") as fh:
        while True:
            chunk = fh.read(16 << 20)
            if not chunk:
                break
            cstart = pos
            while next_cut < cstart + len(chunk):
                nl = chunk.find(b"\n", next_cut - cstart)
                if nl < 0:
                    next_cut = cstart + len(chunk)  # keep looking in the next chunk
                    break
                cut = cstart + nl + 1
                ranges.append((start, cut, line))
                line = lines_seen + chunk.count(b"\n", 0, nl + 1)
                start = cut
                next_cut = cut + target
            lines_seen += chunk.count(b"\n")
            pos += len(chunk)
    if start < size or not ranges:
        ranges.append((start, size, line))
    return ranges


def _plan_parquet(meta, cfg: InputConfig, first_index: int, common: dict) -> list[PartitionSpec]:
    """Row groups together up to ``input.partition_rows`` rows or ``input.partition_bytes`` of text (the
    text column's uncompressed size); a row group larger than that is read in row slices."""
    text_col = next((k for k in range(meta.num_columns) if meta.schema.column(k).path == cfg.text_field), None)
    specs: list[PartitionSpec] = []

    def add(**kw):
        specs.append(PartitionSpec(first_index + len(specs), **kw, **common))
    group, rows, nbytes, first = [], 0, 0, 0  # row groups gathered so far, their rows and text bytes

    def flush():
        nonlocal group, rows, nbytes, first
        if group:
            add(row_groups=tuple(group), first_row=first)
            first += rows
            group, rows, nbytes = [], 0, 0
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        size = rg.column(text_col).total_uncompressed_size if text_col is not None else rg.total_byte_size
        pieces = max(-(-size // cfg.partition_bytes), -(-rg.num_rows // cfg.partition_rows))
        if pieces > 1:  # a row group larger than a partition: slices of it
            flush()
            cuts = np.linspace(0, rg.num_rows, pieces + 1).astype(np.int64)
            for a, b in zip(cuts[:-1], cuts[1:]):
                if b > a:
                    add(row_groups=(g,), first_row=first + int(a), row_slice=(int(a), int(b)))
            first += rg.num_rows
            continue
        if rows + rg.num_rows > cfg.partition_rows or nbytes + size > cfg.partition_bytes:
            flush()
        group.append(g)
        rows += rg.num_rows
        nbytes += size
    flush()
    return specs


def plan_partitions(inputs: list[str], cfg: InputConfig, report: dict) -> list[PartitionSpec]:
    """Expand inputs and cut them into partitions. ``report`` collects ``skipped`` and ``empty_files``."""
    skipped = report.setdefault("skipped", [])
    empty = report.setdefault("empty_files", [])
    files = expand_inputs(inputs, cfg.on_error, skipped)
    rels = _relative_names(files)
    specs: list[PartitionSpec] = []
    for file_index, (path, rel) in enumerate(zip(files, rels)):
        try:
            fmt, comp = detect_format(path, cfg.format)
            fs, fpath = fsspec.core.url_to_fs(path)
            size = fs.size(fpath)
            if size == 0:
                empty.append(path)
                continue
            common = dict(path=path, rel=rel, file_index=file_index, fmt=fmt, compression=comp)
            if fmt == "parquet":
                try:
                    with fs.open(fpath, "rb") as fh:
                        meta = pq.ParquetFile(fh).metadata
                except Exception as exc:  # pyarrow raises several types for damaged files
                    raise InputError(f"not a readable Parquet file ({_first_line(exc)})", path) from None
                _check_parquet_fields(path, meta.schema.to_arrow_schema(), cfg)
                if meta.num_rows == 0:
                    empty.append(path)
                    continue
                specs.extend(_plan_parquet(meta, cfg, len(specs), common))
            elif comp is None:
                for start, end, line in _plan_jsonl_plain(fs, fpath, size, cfg.partition_bytes):
                    specs.append(PartitionSpec(len(specs), byte_start=start, byte_end=end, first_line=line, **common))
            else:
                specs.append(PartitionSpec(len(specs), **common))
        except InputError as err:
            if cfg.on_error != "skip":
                raise
            skipped.append({"path": path, "row": None, "reason": str(err)})
        except OSError as exc:
            err = InputError(f"cannot read file ({_first_line(exc)})", path)
            if cfg.on_error != "skip":
                raise err from None
            skipped.append({"path": path, "row": None, "reason": str(err)})
    if not specs:
        raise InputError("no records found in the input (all files empty or skipped)")
    return specs


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


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


# ----------------------------------------------------------------------------------------------
# Loading


def _read_bytes(spec: PartitionSpec) -> bytes:
    fs, fpath = fsspec.core.url_to_fs(spec.path)
    with fs.open(fpath, "rb") as fh:
        if spec.compression is None:
            fh.seek(spec.byte_start)
            return fh.read(spec.byte_end - spec.byte_start)
        raw = fh.read()
    try:
        if spec.compression == "gzip":
            return gzip.decompress(raw)
        if spec.compression == "bz2":
            return bz2.decompress(raw)
        import zstandard
        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw)) as reader:
            return reader.read()
    except Exception as exc:
        raise InputError(f"cannot decompress {spec.compression} data ({_first_line(exc)})", spec.path) from None


def _line_starts(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Start offset and line index of every non-blank line."""
    return nonblank_lines(np.frombuffer(data, dtype=np.uint8))


def _load_jsonl(spec: PartitionSpec, cfg: InputConfig) -> LoadedPartition:
    data = _read_bytes(spec)
    starts, lines = _line_starts(data)
    lines = lines + spec.first_line
    if len(starts) == 0:
        return LoadedPartition(pa.table({}), np.empty(0, np.int64))
    try:  # fast path: Arrow's multi-threaded parser
        read_options = pajson.ReadOptions(block_size=1 << 26)
        table = pajson.read_json(io.BytesIO(data), read_options=read_options)
        kept_as_text = pa.schema([pa.field(f.name, _timestamps_as_text(f.type)) for f in table.schema])
        if kept_as_text != table.schema:  # Arrow turned ISO-8601 strings into timestamps: keep the text
            parse = pajson.ParseOptions(explicit_schema=kept_as_text)
            table = pajson.read_json(io.BytesIO(data), read_options=read_options, parse_options=parse)
        if table.num_rows == len(starts) and _fast_path_ok(table, cfg):
            table.validate(full=True)  # Arrow's JSON reader does not check UTF-8; this raises on bad bytes
            return LoadedPartition(table, lines)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        pass
    return _load_jsonl_slow(spec, cfg, data, starts, lines)


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
    """The Arrow parse is used as is only when text is a string column (the slow path gives precise
    per-row errors and keeps mixed-type columns)."""
    if cfg.text_field not in table.column_names:
        return False
    t = table.schema.field(cfg.text_field).type
    return is_text_type(t)


def _load_jsonl_slow(spec, cfg: InputConfig, data: bytes, starts, lines) -> LoadedPartition:
    records, kept_lines, skipped = [], [], []
    replaced = 0
    ends = np.append(starts[1:], len(data))
    for s, e, line in zip(starts.tolist(), ends.tolist(), lines.tolist()):
        raw = data[s:e]
        try:
            try:
                rec = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError as uexc:
                    if cfg.encoding_errors != "replace":
                        raise InputError(f"invalid UTF-8 at byte {uexc.start} of the line "
                                         "(set input.encoding_errors=replace to substitute U+FFFD)",
                                         spec.path, line + 1) from None
                    rec = json.loads(raw.decode("utf-8", errors="replace"))
                    replaced += 1
                else:
                    raise InputError(f"invalid JSON ({exc})", spec.path, line + 1) from None
            if not isinstance(rec, dict):
                raise InputError(f"expected a JSON object, got {type(rec).__name__}", spec.path, line + 1)
            text = rec.get(cfg.text_field)
            if text is not None and not isinstance(text, str):
                raise InputError(f"expected a string, got {type(text).__name__}", spec.path, line + 1,
                                 field=cfg.text_field)
        except (InputError, ValueError) as err:
            if not isinstance(err, InputError):
                err = InputError(f"invalid JSON ({_first_line(err)})", spec.path, line + 1)
            if cfg.on_error != "skip":
                raise err from None
            skipped.append({"path": spec.path, "row": line + 1, "reason": str(err)})
            continue
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
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            # mixed types in one column: keep each value as its JSON text
            columns[name] = pa.array([v if v is None or isinstance(v, str) else json.dumps(v, ensure_ascii=False)
                                      for v in values], type=pa.string())
    return pa.table(columns) if columns else pa.table({"__empty__": pa.nulls(len(records))}).drop(["__empty__"])


def _load_parquet(spec: PartitionSpec, cfg: InputConfig) -> LoadedPartition:
    fs, fpath = fsspec.core.url_to_fs(spec.path)
    try:
        with fs.open(fpath, "rb") as fh:
            table = pq.ParquetFile(fh).read_row_groups(list(spec.row_groups))
        if spec.row_slice is not None:
            table = table.slice(spec.row_slice[0], spec.row_slice[1] - spec.row_slice[0])
    except Exception as exc:
        raise InputError(f"cannot read Parquet row groups {list(spec.row_groups)} ({_first_line(exc)})",
                         spec.path) from None
    return LoadedPartition(table, np.arange(spec.first_row, spec.first_row + table.num_rows, dtype=np.int64))


def load_partition(spec: PartitionSpec, cfg: InputConfig) -> LoadedPartition:
    """Read one partition with all its columns and check the configured fields.

    Rows with a null id or an unparseable timestamp are errors (or skipped with ``on_error: skip``);
    timestamps are parsed here (``LoadedPartition.timestamps``). The same spec and config always give
    the same rows, so the writer can re-read a partition and line it up with the annotations computed
    from the first read.
    """
    part = _load_parquet(spec, cfg) if spec.fmt == "parquet" else _load_jsonl(spec, cfg)
    table = part.table
    if table.num_rows == 0:
        return part
    if cfg.text_field not in table.column_names:
        raise InputError("text field not found in any record of this part of the file", spec.path,
                         field=cfg.text_field)
    for role, name in (("id", cfg.id_field), ("timestamp", cfg.timestamp_field)):
        if name is not None and name not in table.column_names:
            raise InputError(f"{role} field not found in any record of this part of the file", spec.path,
                             field=name)
    # bad rows: (mask, field, message of row i)
    checks = []
    if cfg.id_field is not None:
        nulls = table.column(cfg.id_field).is_null().to_numpy(zero_copy_only=False)
        checks.append((nulls, cfg.id_field, lambda i: "id is missing or null"))
    if cfg.timestamp_field is not None:
        part.timestamps, unparsed, raw = timestamps_of(spec.path, table.column(cfg.timestamp_field), cfg)
        checks.append((unparsed, cfg.timestamp_field, lambda i: f"cannot parse timestamp {raw[i]!r}"))
    drop = np.zeros(table.num_rows, dtype=bool)
    for mask, field_name, message in checks:
        for i in np.flatnonzero(mask):
            err = InputError(message(i), spec.path, _display_row(spec, part.records[i]), field=field_name)
            if cfg.on_error != "skip":
                raise err
            part.skipped.append({"path": spec.path, "row": err.row, "reason": str(err)})
        drop |= mask
    if drop.any():
        part.table = table.filter(pa.array(~drop))
        part.records = part.records[~drop]
        if part.timestamps is not None:
            part.timestamps = part.timestamps[~drop]
    return part


def _display_row(spec: PartitionSpec, record: int) -> int:
    """1-based line for JSON Lines, 0-based row for Parquet (as in error messages)."""
    return int(record) + 1 if spec.fmt == "jsonl" else int(record)


def order_keys(spec: PartitionSpec, records: np.ndarray) -> np.ndarray:
    return (np.int64(spec.file_index) << np.int64(ROW_BITS)) | records.astype(np.int64)


def ids_of(spec: PartitionSpec, part: LoadedPartition, cfg: InputConfig) -> pd.Series:
    """The document ids of a loaded partition: the user's (int64 or str) or generated ``rel:row``."""
    if cfg.id_field is None:
        return pd.Series([f"{spec.rel}:{_display_row(spec, r)}" for r in part.records], dtype=object)
    col = part.table.column(cfg.id_field)
    if pa.types.is_integer(col.type):
        values = col.to_numpy()
        if values.dtype != np.uint64 or not len(values) or values.max() <= np.iinfo(np.int64).max:
            return pd.Series(values.astype(np.int64))
        return pd.Series(values.astype(str), dtype=object)  # beyond int64: keep them exact as text
    if is_text_type(col.type):
        return pd.Series(col.to_pylist(), dtype=object)
    return pd.Series([v if isinstance(v, str) else json.dumps(v) for v in col.to_pylist()], dtype=object)


def id_columns(ids: pd.Series) -> dict:
    """The ``_id``, ``_id_int``, ``_id_is_int`` columns of the narrow frame (no object columns: Dask
    would turn them into strings)."""
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


def load_narrow(spec: PartitionSpec, cfg: InputConfig) -> pd.DataFrame:
    """One partition as the stages see it: order key, id, timestamp, text byte length and text.

    ``attrs`` carries ``skipped`` rows and the ``replaced_utf8`` count for the summary.
    """
    failpoint(f"read-partition-{spec.index}")
    part = load_partition(spec, cfg)
    n = part.table.num_rows
    if n == 0:
        df = NARROW_META.copy()
    else:
        text = part.table.column(cfg.text_field).combine_chunks()
        text = pc.fill_null(text.cast(pa.large_string()), "")
        ts = part.timestamps if part.timestamps is not None else np.zeros(n, np.int64)
        df = pd.DataFrame({
            "_ord": order_keys(spec, part.records),
            **id_columns(ids_of(spec, part, cfg)),
            "_ts": ts,
            "_nbytes": pc.binary_length(text).to_numpy().astype(np.int64),
            "_text": pd.arrays.ArrowExtensionArray(text),
        })
    df.attrs = {"skipped": part.skipped, "replaced_utf8": part.replaced_utf8, "partition": spec.index}
    return df


def read_documents(specs: list[PartitionSpec], cfg: InputConfig):
    """Dask DataFrame of the narrow partitions, one per spec, in input order."""
    import dask.dataframe as dd
    return dd.from_map(load_narrow, specs, cfg=cfg, meta=NARROW_META, enforce_metadata=False,
                       label="read")
