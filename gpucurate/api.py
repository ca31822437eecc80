"""Dask DataFrame in, Dask DataFrame out: the stages for notebook users.

>>> ddf = gpucurate.read("data/*.jsonl.gz")           # narrow frame: _ord, _id, _ts, _nbytes, _text
>>> annotated = gpucurate.dedup(ddf, overrides={"fuzzy.threshold": 0.85})
>>> annotated[annotated.keep].compute()

``dedup`` (exact, fuzzy, semantic), ``exact_dedup``, ``fuzzy_dedup`` and ``semantic_dedup`` also take any
Dask DataFrame with the configured text and id columns (``input.text_field``, ``input.id_field``); their
result is that frame with the annotation columns added (``gpucurate.config.ANNOTATION_COLUMNS``). The global steps
(grouping, clustering) run when the function is called; attaching the columns is lazy.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from .engine.backend import select
from .config import Config, InputConfig, resolve_config
from .errors import InputError
from .engine.executor import Executor
from .stages.cuts import output_annotations
from .io.reader import NARROW_META, ROW_BITS, id_columns, plan_partitions, read_documents, timestamps_of
from .workflows.run import Timer, deduplicate


def read(inputs, config: Config | str | None = None, overrides=None):
    """Narrow Dask DataFrame of the input files, one partition per input partition."""
    cfg = resolve_config(config, overrides)
    if isinstance(inputs, str):
        inputs = [inputs]
    return read_documents(plan_partitions([str(i) for i in inputs], cfg.input, {}), cfg.input)


def _to_narrow(df: pd.DataFrame, cfg: InputConfig, partition_info=None) -> pd.DataFrame:
    p = partition_info["number"] if partition_info else 0
    n = len(df)
    text = pa.array(df[cfg.text_field], type=pa.large_string(), from_pandas=True)
    text = pc.fill_null(text, "")
    ids = df[cfg.id_field].reset_index(drop=True) if cfg.id_field else pd.Series([f"{p}:{r}" for r in range(n)])
    ts = np.zeros(n, np.int64)
    if cfg.timestamp_field:
        where = f"partition {p}"
        ts, unparsed, raw = timestamps_of(where, pa.chunked_array([pa.array(df[cfg.timestamp_field],
                                                                             from_pandas=True)]), cfg)
        if unparsed.any():
            i = int(np.flatnonzero(unparsed)[0])
            raise InputError(f"cannot parse timestamp {raw[i]!r}", where, i, field=cfg.timestamp_field)
    return pd.DataFrame({
        "_ord": (np.int64(p) << np.int64(ROW_BITS)) | np.arange(n, dtype=np.int64),
        **id_columns(ids),
        "_ts": ts,
        "_nbytes": pc.binary_length(text).to_numpy().astype(np.int64),
        "_text": pd.arrays.ArrowExtensionArray(text),
    })


def _attach(df: pd.DataFrame, parts: list, text_field: str, partition_info=None) -> pd.DataFrame:
    ann = parts[partition_info["number"] if partition_info else 0]
    out = df.copy(deep=False)
    for col, values in zip(*output_annotations(ann, pa.array(df[text_field], type=pa.string(), from_pandas=True))):
        out[col] = values.to_pandas().to_numpy()
    return out


def dedup(ddf, config: Config | str | None = None, overrides=None):
    """Exact, fuzzy and (when enabled) semantic deduplication of a Dask DataFrame; returns it with the
    annotation columns."""
    cfg = resolve_config(config, overrides)
    narrow = ddf
    if "_ord" not in ddf.columns:
        narrow = ddf.map_partitions(_to_narrow, cfg.input, meta=NARROW_META)
    with Executor(cfg.run.scheduler, cfg.run.workers, cfg.run.progress, memory_limit=cfg.run.memory_limit,
                  spill_dir=cfg.run.spill_dir,
                  partition_bytes=cfg.input.partition_bytes) as executor:
        result = deduplicate(narrow, cfg, executor, select(cfg.run.backend), Timer())
        parts = executor.compute(result.table.column("annotations"), "collect annotations")
    text_col = "_text" if "_ord" in ddf.columns else cfg.input.text_field
    meta = _attach(ddf._meta, [parts[0].slice(0, 0)], text_col)
    return ddf.map_partitions(_attach, parts, text_col, meta=meta)


def exact_dedup(ddf, config: Config | str | None = None, overrides=None):
    """Exact stage only (fuzzy and semantic disabled)."""
    cfg = resolve_config(config, overrides)
    cfg.fuzzy.enabled = cfg.semantic.enabled = False
    return dedup(ddf, cfg)


def fuzzy_dedup(ddf, config: Config | str | None = None, overrides=None):
    """Fuzzy stage only (exact and semantic disabled: identical texts are found as Jaccard 1.0 pairs)."""
    cfg = resolve_config(config, overrides)
    cfg.exact.enabled = cfg.semantic.enabled = False
    return dedup(ddf, cfg)


def semantic_dedup(ddf, config: Config | str | None = None, overrides=None):
    """Exact then semantic stages (fuzzy disabled); needs the semantic extra."""
    cfg = resolve_config(config, overrides)
    cfg.fuzzy.enabled, cfg.semantic.enabled = False, True
    return dedup(ddf, cfg)
