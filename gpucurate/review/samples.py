"""Pairs for people to label: drawn from a finished run's edges, stratified around each threshold.

``sample_pairs(run_dir, n)`` reads ``edges.parquet`` and the annotated records, and draws pairs from
equal-width similarity bins spanning ``threshold - spread .. threshold + spread`` for each method
(Jaccard/MinHash/SimHash edges of the fuzzy stage, cosine edges of the semantic stage), the same
number from each bin where it has enough, with a fixed seed. The output has both texts side by side,
a compact word diff and an empty ``label`` column: label it 1 (same document) or 0, then run
``python -m gpucurate calibrate --pairs review.csv --method ...``.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import InputError
from ..io.readback import RunRecords
from ..io.writer import read_run_json, read_run_table

DIFF_CHARS = 400


def word_diff(a: str, b: str, limit: int = DIFF_CHARS) -> str:
    """Words only in ``a`` as ``[-...-]``, only in ``b`` as ``{+...+}``; common runs elided to ``…``."""
    wa, wb = a.split(), b.split()
    out = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=wa, b=wb, autojunk=False).get_opcodes():
        if op == "equal":
            out.append("…")
        if op in ("delete", "replace"):
            out.append("[-" + " ".join(wa[i1:i2]) + "-]")
        if op in ("insert", "replace"):
            out.append("{+" + " ".join(wb[j1:j2]) + "+}")
    text = " ".join(out)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def edge_thresholds(cfg: dict) -> dict:
    """The threshold each ``edges.parquet`` method was cut at, from a run's config."""
    return {"jaccard": cfg["fuzzy"]["threshold"], "minhash": cfg["fuzzy"]["threshold"],
            "simhash": 1 - cfg["fuzzy"]["simhash_max_distance"] / 64, "cosine": cfg["semantic"]["threshold"]}


def texts_of(run: Path, doc_ids: set, command: str) -> dict:
    """doc_id -> original text of the given documents of a finished run (``command`` is named in errors): the
    texts are read only from the part files that hold one of them, back from the inputs when the run wrote
    annotations only (``io.readback``)."""
    if not doc_ids:
        return {}
    cfg = read_run_json(run / "summary.json")["config"]
    records = RunRecords(run, cfg, command)
    doc_id, text_field = records.prefix + "doc_id", cfg["input"]["text_field"]
    texts = {}
    for f in records.files:
        ids = read_run_table(f, columns=[doc_id]).column(doc_id)
        if pc.any(pc.is_in(ids, value_set=pa.array(list(doc_ids)).cast(ids.type))).as_py():
            texts.update(texts_by_id(ids, records.table(f, [text_field]).column(text_field), doc_ids))
    return texts


def texts_by_id(ids, texts, wanted: set) -> dict:
    """doc_id -> text (null: "") of the rows of Arrow columns ``ids`` and ``texts`` whose id is in ``wanted``;
    filtered in Arrow, so only the few wanted texts become Python strings."""
    rows = pc.is_in(ids, value_set=pa.array(list(wanted)).cast(ids.type))
    return dict(zip(ids.filter(rows).to_pylist(), (x or "" for x in texts.filter(rows).to_pylist())))


def sample_pairs(run_dir: str | Path, n: int = 300, seed: int = 0, bins: int = 8, spread: float = 0.15) -> pd.DataFrame:
    """``DataFrame[method, score, id_a, id_b, text_a, text_b, diff, label]`` of about ``n`` pairs."""
    run = Path(run_dir)
    if not (run / "edges.parquet").is_file() or not (run / "summary.json").is_file():
        raise InputError("not a finished gpucurate run (no edges.parquet or summary.json)", str(run))
    cfg = json.loads((run / "summary.json").read_text())["config"]
    edges = pq.read_table(run / "edges.parquet").to_pandas()
    if edges.empty:
        raise InputError("the run has no candidate pairs to sample", str(run))
    thresholds = edge_thresholds(cfg)
    rng = np.random.default_rng(seed)
    methods = sorted(edges.method.unique())
    picked = []
    for method in methods:
        e = edges[edges.method == method]
        t = thresholds[method]
        cuts = np.linspace(max(e.score.min(), t - spread), min(1.0, t + spread), bins + 1)
        which = np.clip(np.searchsorted(cuts, e.score.to_numpy(), side="right") - 1, 0, bins - 1)
        per_bin = max(1, n // (len(methods) * bins))
        for b in range(bins):
            rows = np.flatnonzero(which == b)
            if len(rows):
                picked.append(e.iloc[np.sort(rng.choice(rows, min(per_bin, len(rows)), replace=False))])
    sample = pd.concat(picked).head(n).reset_index(drop=True)
    texts = texts_of(run, set(sample.id_a) | set(sample.id_b), "sample-pairs")
    sample["text_a"] = [texts[i] for i in sample.id_a]
    sample["text_b"] = [texts[i] for i in sample.id_b]
    sample["diff"] = [word_diff(a, b) for a, b in zip(sample.text_a, sample.text_b)]
    sample["label"] = ""
    return sample[["method", "score", "id_a", "id_b", "text_a", "text_b", "diff", "label"]]
