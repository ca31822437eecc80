"""``export dataset``: the cleaned training set of a finished run.

Only the kept documents (annotation ``keep``), with the user's own columns (every column of a part file
but the annotation columns), the text column (``input.text_field``) after every removal stage: the byte
ranges of ``removed_spans`` cut out (``stages.cuts.cut_texts``). One output file per part file of the run
(``part-00000.parquet`` or ``part-00000.jsonl[.gz|.zst]``), read a record batch of about ``BATCH_BYTES``
at a time, so memory does not grow with the run. A run that wrote annotations only (``output.columns:
annotations``) has its inputs read back, a partition at a time (``io.readback``). The directory is
written aside and put in place only when complete, with ``export_summary.json`` and the ``_SUCCESS``
marker, like a run's output (``io.writer.StagedOutput``).
"""

from __future__ import annotations

import base64
import functools
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .._version import __version__
from ..config import OutputConfig, annotation_names, choices
from ..engine.failpoints import failpoint
from ..engine.progress import Reporter, stage as progress_stage, step as progress_step
from ..errors import ArgumentError, InputError, OutputError
from ..io.reader import COMPRESSIONS, detect_format
from ..io.readback import RunRecords
from ..io.writer import ANNOTATIONS_DIR, MARKER, Layout, StagedOutput, read_run_json, require_complete, write_json
from ..stages.cuts import cut_texts, edited
from ..stages.patterns import redaction_token

log = logging.getLogger("gpucurate")

SUMMARY = "export_summary.json"
FORMATS = ("parquet", "jsonl", "same")
#: Parquet compressions: those of a run's output (``output.compression``)
PARQUET_COMPRESSIONS = choices(OutputConfig, "compression")


def _jsonl_suffixes() -> dict:
    """JSON Lines compressions (the codecs Arrow's output streams write) -> file name suffix, the first one the
    reader knows for the codec (``.zst``, not ``.zstd``)."""
    suffixes = {"none": ".jsonl"}
    for suffix, codec in COMPRESSIONS.items():
        if codec in ("gzip", "zstd"):
            suffixes.setdefault(codec, ".jsonl" + suffix)
    return suffixes


JSONL_SUFFIXES = _jsonl_suffixes()
#: the default compression of each format
DEFAULT_COMPRESSION = {"parquet": OutputConfig.compression, "jsonl": "none"}
#: the column ``--weight`` adds
WEIGHT = "weight"
#: decoded bytes of a part file read at once (a record batch; a row larger than this comes alone): the export's
#: working set. 32 MiB raised the peak RSS of a JSON Lines export of 45 MB parts from 286 to 508 MiB (2 MiB: 242)
BATCH_BYTES = 8 << 20
#: what an export directory holds: only such a directory is replaced with ``overwrite``
EXPORT_LAYOUT = Layout(items=("part-*.parquet", "part-*.jsonl*", SUMMARY), folders=(), overwrite="--overwrite")


@dataclass(frozen=True)
class Request:
    """What to write: ``fmt`` parquet|jsonl, ``compression`` one of that format's, ``original_text`` the name of
    a column for the original text (or None), ``weight`` add the ``weight`` annotation."""

    fmt: str
    compression: str
    original_text: str | None
    weight: bool


@dataclass(frozen=True)
class Part:
    """One part file of the run and how to export it: ``user`` its input columns in order, ``read`` the
    columns read (``user`` and the annotations needed), ``schema`` of the output."""

    path: Path
    user: tuple
    read: tuple
    schema: pa.Schema


@dataclass
class Counts:
    """Documents and UTF-8 text bytes before (all documents) and after (kept, cut) the export."""

    documents_in: int = 0
    documents_out: int = 0
    text_bytes_in: int = 0
    text_bytes_out: int = 0

    def add(self, other: "Counts") -> None:
        for key, value in vars(other).items():
            setattr(self, key, getattr(self, key) + value)


def export_dataset(run_dir: str | os.PathLike, output: str | os.PathLike, fmt: str = "parquet",
                   compression: str | None = None, original_text: str | None = None, weight: bool = False,
                   overwrite: bool = False, progress: bool = True) -> dict:
    """Write the kept documents of a finished run, with their text after every removal stage, as a dataset.

    Parameters
    ----------
    run_dir : output directory of a finished run (it must hold ``_SUCCESS``; otherwise an OutputError, exit 1).
    output : the dataset directory: one file per part file of the run and ``export_summary.json``; written
        aside and put in place complete (``io.writer.StagedOutput``).
    fmt : ``parquet`` (default), ``jsonl``, or ``same``: the format the run read (JSON Lines or Parquet).
    compression : Parquet: zstd (default), snappy, gzip, none; JSON Lines: none (default, ``.jsonl``), gzip
        (``.jsonl.gz``), zstd (``.jsonl.zst``).
    original_text : also write the original text, in a column of this name (default: not written); a name
        the input already has is an ArgumentError (exit 2).
    weight : also write the ``weight`` annotation (soft dedup) as a column ``weight`` (default False); an
        input column of that name is an ArgumentError.
    overwrite : replace an existing export directory (default False: a non-empty ``output`` is an error).
    progress : show progress on stderr (``engine.progress``).

    Returns the export summary (``export_summary.json``): documents and text bytes in and out, the files
    written, format, compression, seconds, and the run's ``summary.json`` as ``source_run``.
    """
    start = time.perf_counter()
    run = require_complete(run_dir, "export dataset")
    marker = (run / MARKER).read_bytes()
    summary = read_run_json(run / "summary.json")
    if "config" not in summary:
        raise OutputError("summary.json has no config: not the output directory of a run", run / "summary.json")
    request = resolve_request(summary, fmt, compression, original_text, weight)
    records = RunRecords(run, summary["config"], "export dataset")
    if not records.files:
        raise OutputError("no part files (the run directory is incomplete)", run / ANNOTATIONS_DIR)
    with StagedOutput(output, overwrite, "export", layout=EXPORT_LAYOUT) as staged:
        counts, files = _export_parts(records, summary, request, staged.path, progress)
        if (run / MARKER).read_bytes() != marker:  # rethreshold in place or a new run replaced it meanwhile
            raise OutputError("the run directory was replaced while it was being exported; export it again", run)
        result = _summary(run, output, request, counts, files, time.perf_counter() - start, summary)
        write_json(result, staged.path / SUMMARY)
        staged.commit()
    return result


def resolve_request(summary: dict, fmt: str, compression: str | None, original_text: str | None,
                    weight: bool) -> Request:
    """The ``Request`` of the arguments: ``same`` resolved to the run's input format, the format's default
    compression filled in; an unknown format or compression is an ArgumentError (exit 2)."""
    if fmt not in FORMATS:
        raise ArgumentError(f"format must be one of {', '.join(FORMATS)}; got {fmt!r}")
    fmt = input_format(summary) if fmt == "same" else fmt
    allowed = PARQUET_COMPRESSIONS if fmt == "parquet" else tuple(JSONL_SUFFIXES)
    compression = compression or DEFAULT_COMPRESSION[fmt]
    if compression not in allowed:
        raise ArgumentError(f"compression {compression!r} is not one of {fmt}'s: {', '.join(allowed)}")
    if original_text is not None and (not original_text or (weight and original_text == WEIGHT)):
        raise ArgumentError(f"original text column {original_text!r}: needs a name other than '' and {WEIGHT}")
    return Request(fmt, compression, original_text, weight)


def input_format(summary: dict) -> str:
    """The format the run read, ``jsonl`` or ``parquet``: ``input_formats`` of its summary (runs record it),
    else ``input.format`` of its config, else the names of its inputs; a run of both formats, or one whose
    format cannot be told, is an ArgumentError (exit 2) asking for an explicit format."""
    formats = set(summary.get("input_formats") or ())
    if not formats:
        configured = summary["config"].get("input", {}).get("format", "auto")
        formats = {configured} if configured != "auto" else _formats_of_names(summary.get("inputs", []))
    if not formats:
        raise ArgumentError(f"cannot tell the format the run read from its inputs ({', '.join(summary.get('inputs', []))})"
                            ": say which format to write (--format jsonl or parquet)")
    if len(formats) > 1:
        raise ArgumentError(f"the run read {' and '.join(sorted(formats))}: say which format to write (--format "
                            "jsonl or parquet)")
    return formats.pop()


def _formats_of_names(inputs: list[str]) -> set:
    """The formats the file names (or globs) ``inputs`` say; empty when one says none (a directory)."""
    try:
        return {detect_format(name, "auto")[0] for name in inputs}
    except InputError:
        return set()


def plan_part(path: Path, schema: pa.Schema, prefix: str, text_field: str, request: Request) -> Part:
    """The ``Part`` of one part file of the run from its ``schema`` (``RunRecords.schema``): its input columns
    clashing with the requested ones are an ArgumentError, a missing text or annotation column an OutputError."""
    reserved = set(annotation_names(prefix))
    user = tuple(name for name in schema.names if name not in reserved)
    if text_field not in user:
        raise OutputError(f"no text column {text_field!r} (the run's input.text_field)", path)
    for name, option in ((request.original_text, "--original-text"), (WEIGHT if request.weight else None, "--weight")):
        if name is not None and name in user:
            raise ArgumentError(f"{option}: the input already has a column named {name!r}"
                                + ("; choose another name" if option == "--original-text" else ""))
    fields = [schema.field(name).remove_metadata() for name in user]
    if request.original_text is not None:
        fields.append(pa.field(request.original_text, schema.field(text_field).type))
    if request.weight:
        fields.append(schema.field(prefix + WEIGHT).with_name(WEIGHT))
    needed = [prefix + name for name in ("keep", "removed_spans", "contamination_spans")] + \
        ([prefix + WEIGHT] if request.weight else [])
    missing = [name for name in needed if name not in schema.names]
    if missing:
        raise OutputError(f"no annotation column {', '.join(missing)} (an older gpucurate wrote the run; run it "
                          "again)", path)
    return Part(path, user, user + tuple(needed), pa.schema(fields))


def _export_parts(records: RunRecords, summary: dict, request: Request, out: Path,
                  progress: bool) -> tuple[Counts, list[str]]:
    """Export every part file into ``out``, with a progress stage; returns the total counts and the names written."""
    total, files = Counts(), []
    prefix, text_field = records.prefix, summary["config"]["input"]["text_field"]
    with Reporter(progress).active(), progress_stage("export") as stage:
        stage.documents = summary.get("documents_in")
        with progress_step(len(records.files), "write parts", "file", progress) as bar:
            for path in records.files:
                part = plan_part(path, records.schema(path), prefix, text_field, request)
                name = path.name.removesuffix(".parquet") + _suffix(request)
                total.add(export_part(records, part, prefix, text_field, request, out / name))
                files.append(name)
                failpoint("export-part-written")
                bar.update()
    return total, files


def _suffix(request: Request) -> str:
    return ".parquet" if request.fmt == "parquet" else JSONL_SUFFIXES[request.compression]


def export_part(records: RunRecords, part: Part, prefix: str, text_field: str, request: Request,
                path: Path) -> Counts:
    """One part file's kept documents into the file ``path``, a record batch at a time; returns its counts."""
    counts = Counts()
    with _PartWriter(path, part.schema, request) as write:
        for batch in records.batches(part.path, list(part.read), BATCH_BYTES):
            table, batch_counts = clean_batch(batch, part, prefix, text_field, request)
            write(table)
            counts.add(batch_counts)
    return counts


def clean_batch(batch: pa.RecordBatch, part: Part, prefix: str, text_field: str,
                request: Request) -> tuple[pa.Table, Counts]:
    """The kept rows of ``batch`` (``part.read`` columns) as ``part.schema``: the user's columns with the
    final text, then the original text and the weight when requested; and their counts."""
    kept = batch.filter(pc.fill_null(batch.column(prefix + "keep"), False))
    original = kept.column(text_field)
    text = final_texts(original, kept.column(prefix + "removed_spans"), kept.column(prefix + "contamination_spans"))
    columns = [text if name == text_field else kept.column(name) for name in part.user]
    if request.original_text is not None:
        columns.append(original)
    if request.weight:
        columns.append(kept.column(prefix + WEIGHT))
    counts = Counts(documents_in=batch.num_rows, documents_out=kept.num_rows,
                    text_bytes_in=_utf8_bytes(batch.column(text_field)), text_bytes_out=_utf8_bytes(text))
    return pa.Table.from_arrays(columns, schema=part.schema), counts


def final_texts(texts: pa.Array, removed_spans: pa.Array, contamination_spans: pa.Array | None = None) -> pa.Array:
    """The texts after every removal stage (contamination strip, paragraphs, substrings) and the gate's
    redactions: ``texts`` (``string[n]``) without the byte ranges of ``removed_spans`` (``list<int64>[n]``,
    null for none), each match of a ``redact`` rule in ``contamination_spans`` (``SPANS_TYPE[n]``) replaced
    by its ``<NAME>``; in the type of ``texts``."""
    out = cut_texts(texts, removed_spans, unchanged_null=False).cast(texts.type)
    if contamination_spans is None or contamination_spans.null_count == len(contamination_spans):
        return out
    spans = contamination_spans.to_pylist()
    redact = [k for k, s in enumerate(spans) if s and any(m["action"] == "redact" for m in s)]
    if not redact:
        return out
    # the few documents with a redaction: their cuts and tokens applied together to the original text
    cuts, originals = removed_spans.take(redact).to_pylist(), texts.take(redact).to_pylist()
    edited_texts = [edited(t, c or [], [(m["start"], m["end"], redaction_token(m["rule"]))
                                        for m in spans[k] if m["action"] == "redact"])
                    for k, t, c in zip(redact, originals, cuts)]
    mask = np.zeros(len(texts), bool)
    mask[redact] = True
    return pc.replace_with_mask(out, pa.array(mask), pa.array(edited_texts, texts.type))


def _utf8_bytes(texts: pa.Array) -> int:
    return int(pc.sum(pc.binary_length(texts)).as_py() or 0)


class _PartWriter:
    """``with _PartWriter(path, schema, request) as write: write(table)``: a Parquet or JSON Lines file of
    tables of ``schema``, complete (with a footer) even when nothing is written."""

    def __init__(self, path: Path, schema: pa.Schema, request: Request):
        self.path, self.schema, self.request = path, schema, request
        self.sink = None

    def __enter__(self):
        if self.request.fmt == "parquet":
            compression = None if self.request.compression == "none" else self.request.compression
            self.sink = pq.ParquetWriter(self.path, self.schema, compression=compression)
            return self._write_parquet
        codec = None if self.request.compression == "none" else self.request.compression
        self.sink = pa.CompressedOutputStream(str(self.path), codec) if codec else pa.OSFile(str(self.path), "wb")
        return self._write_jsonl

    def _write_parquet(self, table: pa.Table) -> None:
        if table.num_rows:
            self.sink.write_table(table)

    def _write_jsonl(self, table: pa.Table) -> None:
        self.sink.write(json_lines(table))

    def __exit__(self, *exc) -> bool:
        self.sink.close()
        return False


def json_lines(table: pa.Table) -> bytes:
    """``table`` as JSON Lines (UTF-8, one object per row, keys in column order): nested lists and structs
    as JSON arrays and objects, nulls and NaN as null, timestamps and dates as ISO 8601 strings, binary as
    base64, decimals as strings."""
    return b"".join(map(_dumps, table.to_pylist()))


def _json_value(value):
    """What orjson does not write itself: pandas Timestamps (nanosecond timestamps), bytes, decimals, durations."""
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return str(value)


_dumps = functools.partial(orjson.dumps, default=_json_value,
                           option=orjson.OPT_APPEND_NEWLINE | orjson.OPT_NON_STR_KEYS)


def _summary(run: Path, output, request: Request, counts: Counts, files: list[str], seconds: float,
             source: dict) -> dict:
    """``export_summary.json``."""
    return {
        "gpucurate_version": __version__,
        "run": os.path.abspath(run),
        "output": os.path.abspath(output),
        "format": request.fmt,
        "compression": request.compression,
        "original_text": request.original_text,
        "weight": request.weight,
        "documents_in": counts.documents_in,
        "documents_out": counts.documents_out,
        "text_bytes_in": counts.text_bytes_in,
        "text_bytes_out": counts.text_bytes_out,
        "files_written": len(files),
        "files": files,
        "seconds": round(seconds, 4),
        "source_run": source,
    }
