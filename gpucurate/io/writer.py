"""The output directory: annotated records, alias and edge tables, summary.json."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..config import Config
from ..errors import ConfigError, InputError
from .reader import PartitionSpec, load_partition, order_keys

ANNOTATIONS_DIR = "annotations"
#: annotation column of byte ranges that write_partition turns into ``paragraph_text``
PARAGRAPH_CUTS = "_paragraph_cuts"
OUTPUT_ITEMS = (ANNOTATIONS_DIR, "aliases.parquet", "edges.parquet", "summary.json", "embeddings",
                "contamination_report.json", "report.html", "run_index.parquet")


def prepare_output(path: str | Path, overwrite: bool) -> Path:
    """Create the output directory; a non-empty one is an error unless ``overwrite``."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out}: output exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise ConfigError(f"{out}: output directory is not empty (set output.overwrite=true to replace it)")
        for item in OUTPUT_ITEMS:
            target = out / item
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
    (out / ANNOTATIONS_DIR).mkdir(parents=True, exist_ok=True)
    return out


def _compression(cfg: Config):
    return None if cfg.output.compression == "none" else cfg.output.compression


def write_partition(spec: PartitionSpec, cfg: Config, annotations: pa.Table, ords: np.ndarray, out_dir: str) -> str:
    """Re-read a partition with all its columns, append the annotation columns, write one Parquet file."""
    part = load_partition(spec, cfg.input)
    table = part.table
    if table.num_rows != annotations.num_rows or not np.array_equal(order_keys(spec, part.records), ords):
        raise InputError("the file changed while it was being processed (rows differ between reads)", spec.path)
    clash = [c for c in annotations.column_names if c in table.column_names]
    if clash:
        raise InputError(f"input column(s) {', '.join(clash)} clash with gpucurate's annotation columns; "
                         "rename them first", spec.path)
    for name in annotations.column_names:
        column = annotations.column(name)
        if name == PARAGRAPH_CUTS:  # byte ranges to remove -> the text after paragraph dedup
            from ..stages.paragraphs import apply_cuts
            name = "paragraph_text"
            column = pa.nulls(len(column), pa.string()) if column.null_count == len(column) else apply_cuts(
                table.column(cfg.input.text_field).combine_chunks(), column.combine_chunks())
        table = table.append_column(name, column)
    path = os.path.join(out_dir, ANNOTATIONS_DIR, f"part-{spec.index:05d}.parquet")
    pq.write_table(table, path, compression=_compression(cfg))
    return path


def write_table(table: pa.Table, path: Path, cfg: Config) -> None:
    pq.write_table(table, path, compression=_compression(cfg))


def write_batches(batches, path: Path, cfg: Config) -> None:
    """One Parquet file from an iterable of Arrow tables of one schema (empty ones add no row group)."""
    writer = None
    try:
        for batch in batches:
            if writer is None:
                writer = pq.ParquetWriter(path, batch.schema, compression=_compression(cfg))
            if batch.num_rows:
                writer.write_table(batch)
    finally:
        if writer is not None:
            writer.close()


def write_json(data: dict, path: Path) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)
