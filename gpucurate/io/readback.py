"""The records of a finished run's part files with the input's columns, whatever ``output.columns`` it wrote.

An ``output.columns: all`` part file holds them; an ``annotations`` one holds where each record is in the
input (``input_file``, ``input_row``) and its partition (``writer.INPUT_SPEC_KEY``), so the commands that
need the texts (``export dataset``, ``rethreshold``, ``report``, ``sample-pairs``, ``ingest --from-run`` and
the pgvector export) read that partition of the input again and line its rows up with the annotations: the
table is the one ``all`` would have written. A file changed since the run (size, modification time, the
CRC of what was read, or its rows) is refused with one line naming it (``InputError``, exit 1).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from ..config import Config, flatten, load_config, run_annotation_prefix
from ..errors import InputError, OutputError
from .reader import ChangedInputError, PartitionSpec, load_partition, order_keys
from .writer import (ANNOTATIONS_DIR, INPUT_SPEC_KEY, LOCATION_COLUMNS, input_columns, input_locations, integer_ids,
                     iter_run_table, read_run_metadata, read_run_table)


class RunRecords:
    """The part files of the finished run ``run`` (its ``summary.json`` ``config``) as tables of the input's
    columns and the annotation columns, for ``command`` (named in errors). One read-back partition is held
    at a time: asking for the schema and then the batches of a part file reads its input once."""

    def __init__(self, run: Path, summary_config: dict, command: str):
        self.run, self.command = Path(run), command
        self.files = sorted((self.run / ANNOTATIONS_DIR).glob("part-*.parquet"))
        self.prefix = run_annotation_prefix(summary_config)
        self.read_back = (summary_config.get("output") or {}).get("columns", "all") != "all"
        self.cfg: Config | None = load_config(None, flatten(summary_config)) if self.read_back else None
        self._held: tuple[Path, pa.Table] | None = None

    def schema(self, path: Path) -> pa.Schema:
        """The part file's schema as ``all`` writes it (the annotation columns after the input's)."""
        if not self.read_back:
            return read_run_metadata(path).schema.to_arrow_schema()
        return self._full(path).schema

    def table(self, path: Path, columns: list[str] | None = None) -> pa.Table:
        """The part file's ``columns`` (default all)."""
        if not self.read_back:
            return read_run_table(path, columns)
        table = self._full(path)
        return table.select(columns) if columns is not None else table

    def batches(self, path: Path, columns: list[str], batch_bytes: int):
        """The part file's ``columns`` a record batch of about ``batch_bytes`` decoded at a time."""
        if not self.read_back:
            meta = read_run_metadata(path)
            decoded = sum(meta.row_group(g).total_byte_size for g in range(meta.num_row_groups))
            yield from iter_run_table(path, columns, _rows_per_batch(meta.num_rows, decoded, batch_bytes))
            return
        table = self.table(path, columns)
        yield from table.to_batches(max_chunksize=_rows_per_batch(table.num_rows, table.nbytes, batch_bytes))

    def _full(self, path: Path) -> pa.Table:
        if self._held is None or self._held[0] != path:
            self._held = None  # the previous partition is let go before the next is read
            self._held = (path, self._read_back(path))
        return self._held[1]

    def _read_back(self, path: Path) -> pa.Table:
        """The input columns of the part file's partition, read again and checked against its locations,
        with its annotation columns appended."""
        annotations = read_run_table(path)
        encoded = (annotations.schema.metadata or {}).get(INPUT_SPEC_KEY)
        if encoded is None:
            raise OutputError(f"no input location in its metadata (an older gpucurate wrote the run); {self.command} "
                              "needs the texts: run it again", path)
        stored = json.loads(encoded)
        spec = PartitionSpec.from_dict(stored["spec"])
        local = spec.rooted(stored["cwd"])
        advice = (f"{self.command} reads the texts of the output.columns=annotations run {self.run} back from its "
                  "inputs; run it again")
        try:
            part = load_partition(local, self.cfg.input)
        except FileNotFoundError as exc:
            raise InputError(f"missing: {advice}", exc.filename or local.path) from None
        except ChangedInputError as exc:  # which file: a group's member
            raise InputError(f"changed since the run read it (its size, modification time or content differ): "
                             f"{advice}", exc.path) from None
        except InputError as exc:
            raise InputError(f"{exc.reason}; {advice}", exc.path or local.path, exc.row) from None
        files, rows = input_locations(spec, order_keys(local, part.records))
        if not (files.equals(annotations.column(0).combine_chunks())
                and rows.equals(annotations.column(1).combine_chunks())):
            raise InputError(f"its records differ from those the run annotated: {advice}", local.path)
        table = input_columns(local, self.cfg, part, integer_ids(annotations.schema, self.prefix + "doc_id"))
        for i in range(len(LOCATION_COLUMNS), annotations.num_columns):
            table = table.append_column(annotations.schema.field(i), annotations.column(i))
        return table


def _rows_per_batch(rows: int, decoded: int, batch_bytes: int) -> int:
    """Rows per record batch so that one holds about ``batch_bytes`` decoded (at least one row)."""
    if rows == 0:
        return 1
    return max(1, min(rows, batch_bytes * rows // max(decoded, 1)))
