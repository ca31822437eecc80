"""``run_index.parquet``: the per-document results of a finished run that the global steps need again.

Rethresholding (``gpucurate.rethreshold``) and seeding an incremental state read it instead of
re-reading and re-hashing the texts. One row per input document, in input order:

========================  ========  ==============================================================
column                    type      meaning
========================  ========  ==============================================================
doc_id                    id        the document's id (int64 or string, as in the annotations)
ord                       int64     input order key (file index and record)
timestamp                 int64     ns since the epoch; int64 max when unknown
nbytes                    int64     UTF-8 bytes of the original text
text_hash                 uint64    hash of the normalized text (the exact-dedup key)
empty                     bool      the normalized text is empty
exact_canon               int64     row of the document's exact canonical
quality_rule              int16     index into ``stages.quality.RULES`` of the failed rule, -1
quality_value             float64   the failing statistic
fuzzy_participant         bool      took part in the fuzzy stage
semantic_participant      bool      was embedded and compared by the semantic stage
semantic_cluster          int64     its k-means cluster (-1 when not embedded)
semantic_centroid_cos     float32   cosine to the nearest centroid (NaN when not embedded)
contaminated              bool      the contamination gate matched it
contamination_drop        bool      the contamination gate drops it
contamination_reason      string    the gate's drop reason
========================  ========  ==============================================================

The file metadata (key ``gpucurate``) holds the partition offsets, the quality limits, the thresholds
the stored edges were collected at, and the fuzzy stage's boilerplate shingle hashes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import ConfigError
from ..stages.contamination import ContaminationResult
from ..stages.exact import ExactResult
from ..stages.quality import QualityResult
from ..stages.table import DocTable

RUN_INDEX = "run_index.parquet"
_META_KEY = b"gpucurate"


def write_run_index(result, out_dir: Path, executor, collected_at: dict) -> Path:
    """Write ``run_index.parquet`` for a ``run.DedupResult``, one row group per partition computed where the
    partition's state is; ``collected_at`` holds the score thresholds (``fuzzy``, ``semantic``) the stored
    edges were collected at."""
    table, fuzzy = result.table, result.fuzzy
    meta = {
        "part_offsets": table.part_offsets.tolist(),
        "quality_limits": result.quality_limits,
        "contamination": result.contamination is not None,
        "collected_at": collected_at,
        "fuzzy": None if fuzzy is None else {
            "score_kind": fuzzy.score_kind, "bands": fuzzy.bands, "rows": fuzzy.rows_per_band,
            "boilerplate_hashes": fuzzy.boilerplate_hashes.tolist() if fuzzy.boilerplate_hashes is not None
            else None},
        "semantic": None if result.semantic is None else {"model": result.semantic.model},
    }
    path = Path(out_dir) / RUN_INDEX
    writer = None
    try:
        for part in executor.iter_compute(table.map(_run_index_part), "write run index"):
            if writer is None:
                schema = part.schema.with_metadata({_META_KEY: json.dumps(meta).encode()})
                writer = pq.ParquetWriter(path, schema)
            if part.num_rows or table.n == 0:
                writer.write_table(part.cast(writer.schema))
    finally:
        if writer is not None:
            writer.close()
    return path


def _run_index_part(state: dict, first_row: int) -> pa.Table:
    """One partition's rows of the run index, from its state (``stages.table.DocParts``)."""
    from ..stages.table import id_array
    m = len(state["ord"])

    def column(name, default, dtype=None):
        return state[name] if name in state else np.full(m, default, dtype)
    columns = {
        "doc_id": id_array(state["id"]), "ord": state["ord"], "timestamp": state["ts"], "nbytes": state["nbytes"],
        "text_hash": pa.array(state["hash"], pa.uint64()), "empty": state["empty"],
        "exact_canon": state["exact_canon"],
        "quality_rule": pa.array(column("qrule", -1, np.int16), pa.int16()),
        "quality_value": column("qvalue", 0.0, np.float64),
        "fuzzy_participant": column("fuzzy_participant", False, bool),
        "semantic_participant": column("semantic_participant", False, bool),
        "semantic_cluster": column("semantic_cluster", -1, np.int64),
        "semantic_centroid_cos": pa.array(column("semantic_cos", np.nan, np.float32), pa.float32()),
        "contaminated": column("contaminated", False, bool),
        "contamination_drop": column("contamination_drop", False, bool),
        "contamination_reason": pa.array(column("contamination_reason", None, object), pa.string()),
    }
    if "lang" in state:  # the quality gate identified languages
        columns.update(lang=pa.array(state["lang"], pa.int16()), lang_score=pa.array(state["lang_score"], pa.float32()))
    return pa.table({k: v if isinstance(v, pa.Array) else pa.array(v) for k, v in columns.items()})


@dataclass
class RunIndex:
    table: DocTable
    exact: ExactResult  # words/chars are not stored (zeros)
    quality: QualityResult | None
    contamination: ContaminationResult | None  # label/stripped are not stored (None): they stay in the records
    fuzzy_participant: np.ndarray  # bool[n]
    semantic_participant: np.ndarray  # bool[n]
    semantic_cluster: np.ndarray  # int64[n]
    semantic_centroid_cos: np.ndarray  # float32[n]
    meta: dict


def load_run_index(run_dir: str | Path) -> RunIndex:
    """Read ``run_index.parquet`` of a finished run; a missing one is a ConfigError naming the run."""
    path = Path(run_dir) / RUN_INDEX
    if not path.is_file():
        raise ConfigError(f"{run_dir}: no {RUN_INDEX} (not a finished gpucurate run, or one written by an older "
                          "version: run it again)")
    t = pq.read_table(path)
    meta = json.loads(t.schema.metadata[_META_KEY])
    col = {name: t.column(name).to_numpy() for name in t.column_names if name not in ("doc_id", "contamination_reason")}
    ids = t.column("doc_id")
    ids = ids.to_numpy() if pa.types.is_integer(ids.type) else np.array(ids.to_pylist(), dtype=object)
    n = len(ids)
    table = DocTable(col["ord"], ids, col["timestamp"], col["nbytes"], np.asarray(meta["part_offsets"], np.int64))
    exact = ExactResult(col["text_hash"], col["empty"], col["exact_canon"], np.zeros(n, np.int64),
                        np.zeros(n, np.int64))
    quality = QualityResult(col["quality_rule"], col["quality_value"], meta["quality_limits"], col.get("lang"),
                            col.get("lang_score")) if meta["quality_limits"] is not None else None
    contamination = None
    if meta["contamination"]:
        reason = np.array(t.column("contamination_reason").to_pylist(), dtype=object)
        contamination = ContaminationResult(col["contaminated"], np.full(n, None, object), np.full(n, None, object),
                                            col["contamination_drop"], reason, {}, {})
    return RunIndex(table, exact, quality, contamination, col["fuzzy_participant"], col["semantic_participant"],
                    col["semantic_cluster"], col["semantic_centroid_cos"], meta)
