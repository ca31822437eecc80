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


def write_run_index(result, out_dir: Path, collected_at: dict) -> Path:
    """Write ``run_index.parquet`` for a ``pipeline.DedupResult``; ``collected_at`` holds the score
    thresholds (``fuzzy``, ``semantic``) the stored edges were collected at."""
    from ..stages.table import id_array
    table, exact, n = result.table, result.exact, result.table.n
    quality_rule = result.quality.rule if result.quality is not None else np.full(n, -1, np.int16)
    quality_value = result.quality.value if result.quality is not None else np.zeros(n)
    fuzzy_participant = np.zeros(n, bool)
    if result.fuzzy is not None:
        fuzzy_participant[result.fuzzy.rows] = True
    semantic_participant = np.zeros(n, bool)
    cluster = np.full(n, -1, np.int64)
    centroid_cos = np.full(n, np.nan, np.float32)
    if result.semantic is not None:
        semantic_participant[result.semantic.rows] = True
        cluster[result.semantic.rows] = result.semantic.cluster
        centroid_cos[result.semantic.rows] = result.semantic.centroid_cos
    c = result.contamination
    columns = {
        "doc_id": id_array(table.ids), "ord": table.ords, "timestamp": table.timestamps, "nbytes": table.nbytes,
        "text_hash": pa.array(exact.hashes, pa.uint64()), "empty": exact.empty, "exact_canon": exact.canon,
        "quality_rule": pa.array(quality_rule, pa.int16()), "quality_value": quality_value,
        "fuzzy_participant": fuzzy_participant, "semantic_participant": semantic_participant,
        "semantic_cluster": cluster, "semantic_centroid_cos": centroid_cos,
        "contaminated": c.contaminated if c is not None else np.zeros(n, bool),
        "contamination_drop": c.drop if c is not None else np.zeros(n, bool),
        "contamination_reason": pa.array(c.drop_reason if c is not None else np.full(n, None, object), pa.string()),
    }
    fuzzy = result.fuzzy
    meta = {
        "part_offsets": table.part_offsets.tolist(),
        "quality_limits": result.quality.limits if result.quality is not None else None,
        "contamination": c is not None,
        "collected_at": collected_at,
        "fuzzy": None if fuzzy is None else {
            "score_kind": fuzzy.score_kind, "bands": fuzzy.bands, "rows": fuzzy.rows_per_band,
            "boilerplate_hashes": fuzzy.boilerplate_hashes.tolist() if fuzzy.boilerplate_hashes is not None
            else None},
        "semantic": None if result.semantic is None else {"model": result.semantic.model},
    }
    t = pa.table({k: v if isinstance(v, pa.Array) else pa.array(v) for k, v in columns.items()})
    path = Path(out_dir) / RUN_INDEX
    pq.write_table(t.replace_schema_metadata({_META_KEY: json.dumps(meta).encode()}), path)
    return path


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
    quality = QualityResult(col["quality_rule"], col["quality_value"], meta["quality_limits"]) \
        if meta["quality_limits"] is not None else None
    contamination = None
    if meta["contamination"]:
        reason = np.array(t.column("contamination_reason").to_pylist(), dtype=object)
        contamination = ContaminationResult(col["contaminated"], np.full(n, None, object), np.full(n, None, object),
                                            col["contamination_drop"], reason, {}, {})
    return RunIndex(table, exact, quality, contamination, col["fuzzy_participant"], col["semantic_participant"],
                    col["semantic_cluster"], col["semantic_centroid_cos"], meta)
