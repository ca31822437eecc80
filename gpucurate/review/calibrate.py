"""Threshold calibration from labelled pairs: a threshold is a policy chosen from human labels.

``calibrate(pairs_file, method, ...)`` computes each pair's similarity with the pipeline's own
normalization and shingling (``jaccard``: exact Jaccard of the shingle sets; ``minhash``: the MinHash
estimate with the configured permutations; ``simhash``: 1 - Hamming distance / 64 of 64-bit SimHashes
of the shingle hashes; ``cosine``: the semantic stage's encoder), sweeps thresholds, and reports
precision, recall and F1 per threshold, the best-F1 threshold, and the lowest threshold whose precision
reaches ``min_precision`` (the false-merge budget). For the MinHash methods it adds the LSH bands x rows
the pipeline would use at the chosen threshold and their S-curve. Outputs: a table on stdout,
``calibration.csv``, ``calibration.json`` and ``calibration.png``.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from ..config import Config
from ..errors import ConfigError, InputError

METHODS = ("jaccard", "minhash", "simhash", "cosine")
#: column names of the labelled-pair files in ../shared/data (``--preset``)
PRESETS = {"mrpc": ("#1 String", "#2 String", "Quality"), "pan": ("sentence1", "sentence2", "label")}


def load_pairs(path: str | Path, text_a: str, text_b: str, label: str) -> pd.DataFrame:
    """``DataFrame[a, b, label]`` from CSV, TSV (quotes taken literally, a BOM is fine) or Parquet."""
    path = Path(path)
    if not path.is_file():
        raise InputError("pairs file not found", str(path))
    if path.suffix == ".parquet":
        frame = pd.read_parquet(path)
    else:
        delimiter = "\t" if path.suffix in (".tsv", ".tab") else ","
        with open(path, encoding="utf-8-sig", newline="") as fh:
            quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
            rows = list(csv.reader(fh, delimiter=delimiter, quoting=quoting))
        if not rows:
            raise InputError("pairs file is empty", str(path))
        header, body = rows[0], rows[1:]
        for r, row in enumerate(body, 2):
            if len(row) != len(header):
                raise InputError(f"expected {len(header)} fields, found {len(row)}", str(path), r)
        frame = pd.DataFrame(body, columns=header)
    for col in (text_a, text_b, label):
        if col not in frame.columns:
            raise InputError(f"missing column (columns: {', '.join(map(str, frame.columns))})", str(path),
                             field=col)
    labels = pd.to_numeric(frame[label], errors="coerce")
    bad = labels.isna() | ~labels.isin([0, 1])
    if bad.any():
        r = int(np.flatnonzero(bad.to_numpy())[0])
        raise InputError(f"label must be 0 or 1, got {frame[label].iloc[r]!r}", str(path), r + 2, field=label)
    check_labels(labels.to_numpy(), str(path))
    return pd.DataFrame({"a": frame[text_a].fillna("").astype(str), "b": frame[text_b].fillna("").astype(str),
                         "label": labels.astype(int)})


def check_labels(labels: np.ndarray, source: str | None = None) -> None:
    """``InputError`` unless there is at least one pair of each label: with no pairs, or with one class
    only, precision or recall is undefined and every threshold would score a perfect F1."""
    positives = int((labels == 1).sum())
    if len(labels) == 0:
        raise InputError("no labelled pairs to calibrate on", source)
    if positives == 0 or positives == len(labels):
        raise InputError(f"all {len(labels)} labelled pair(s) have label {int(labels[0])}; calibration needs "
                         "pairs of both labels (1 = duplicate, 0 = not) to measure precision and recall", source)


def _shingle_sets(texts: list[str], cfg: Config):
    from ..kernels.hashing import permutations
    from ..kernels.minhash import MODES, signatures
    from ..stages.normalize import arrow_buffers, normalize
    offsets, data = arrow_buffers(normalize(pa.array(texts, pa.large_string()), cfg.normalize))
    a, b = permutations(cfg.fuzzy.num_perm, cfg.fuzzy.seed)
    seed = np.uint64(cfg.fuzzy.seed & ((1 << 64) - 1))
    return signatures(offsets, data, MODES[cfg.fuzzy.shingle], cfg.fuzzy.ngram, seed, a, b)


def similarities(a: list[str], b: list[str], method: str, cfg: Config) -> np.ndarray:
    """float64[n]: the similarity of each pair ``(a[i], b[i])`` under ``method``."""
    if method not in METHODS:
        raise ConfigError(f"--method must be one of {', '.join(METHODS)}; got {method!r}")
    n = len(a)
    if method == "cosine":
        from ..stages.encoders import make_encoder
        x = make_encoder(cfg.semantic, cfg.semantic.device or "cpu").encode(list(a) + list(b))
        return np.sum(x[:n] * x[n:], axis=1).astype(np.float64)
    from ..kernels import minhash, pairs
    sigs, offsets, values = _shingle_sets(list(a) + list(b), cfg)
    pi, pj = np.arange(n, dtype=np.int64), np.arange(n, 2 * n, dtype=np.int64)
    if method == "jaccard":
        return pairs.jaccard_pairs(offsets, values, pi, pj)
    if method == "minhash":
        return pairs.signature_agreement(sigs, pi, pj).astype(np.float64)
    return minhash.hamming_similarity(minhash.simhash64(offsets, values), pi, pj)  # as fuzzy.method=simhash


def sweep(scores: np.ndarray, labels: np.ndarray, thresholds: np.ndarray) -> pd.DataFrame:
    """Precision, recall and F1 of ``score >= t`` against ``labels`` for each threshold ``t``.
    Precision is 1.0 when nothing is predicted (nothing merged wrongly)."""
    rows = []
    positives = int(labels.sum())
    for t in thresholds:
        pred = scores >= t - 1e-12
        tp = int((pred & (labels == 1)).sum())
        p = tp / int(pred.sum()) if pred.any() else 1.0
        r = tp / positives if positives else 1.0
        rows.append({"threshold": round(float(t), 4), "predicted": int(pred.sum()), "true_positives": tp,
                     "precision": p, "recall": r, "f1": 2 * p * r / (p + r) if p + r > 0 else 0.0})
    return pd.DataFrame(rows)


@dataclass
class Calibration:
    method: str
    pairs: int
    positives: int
    table: pd.DataFrame
    best_f1: dict
    min_precision: float
    lowest_at_precision: dict | None
    lsh: dict | None

    def to_dict(self) -> dict:
        return {"method": self.method, "pairs": self.pairs, "positives": self.positives, "best_f1": self.best_f1,
                "min_precision": self.min_precision, "lowest_threshold_at_min_precision": self.lowest_at_precision,
                "lsh": self.lsh, "sweep": self.table.to_dict(orient="records")}


def lsh_for(threshold: float, cfg: Config) -> dict:
    """The bands x rows the fuzzy stage would choose at ``threshold`` and their S-curve."""
    from ..stages.fuzzy import FuzzyDedup
    from ..engine.backend import select
    fz = FuzzyDedup(type(cfg.fuzzy)(**{**cfg.fuzzy.__dict__, "threshold": threshold}), "first", select("cpu"))
    b, r = fz.bands, fz.rows_per_band
    curve = {f"{s:.2f}": round(1 - (1 - s ** r) ** b, 4) for s in np.round(np.arange(0.1, 1.0001, 0.05), 2)}
    return {"threshold": threshold, "bands": b, "rows": r, "candidate_probability": curve}


def calibrate(pairs: pd.DataFrame, method: str, cfg: Config, thresholds: np.ndarray,
              min_precision: float, source: str | None = None) -> Calibration:
    """Sweep ``thresholds`` over the labelled ``pairs``. Fewer than one pair of each label is an
    ``InputError`` (naming ``source``): precision and recall mean nothing then, and every threshold
    would look perfect."""
    labels = pairs["label"].to_numpy()
    check_labels(labels, source)
    scores = similarities(pairs["a"].tolist(), pairs["b"].tolist(), method, cfg)
    table = sweep(scores, labels, thresholds)
    best = table.loc[table.f1.idxmax()].to_dict()  # ties: the lowest threshold
    ok = table[table.precision >= min_precision]
    lowest = ok.iloc[0].to_dict() if len(ok) else None
    chosen = lowest["threshold"] if lowest else best["threshold"]
    lsh = lsh_for(float(chosen), cfg) if method in ("jaccard", "minhash") and 0 < chosen <= 1 else None
    return Calibration(method, len(pairs), int(labels.sum()), table, best, min_precision, lowest, lsh)


def write_outputs(cal: Calibration, out_dir: str | Path) -> list[Path]:
    """``calibration.csv``, ``calibration.json`` and ``calibration.png`` (precision/recall/F1 curves)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "calibration.csv", out / "calibration.json", out / "calibration.png"]
    cal.table.to_csv(paths[0], index=False)
    paths[1].write_text(json.dumps(cal.to_dict(), indent=2) + "\n")
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for col in ("precision", "recall", "f1"):
        ax.plot(cal.table.threshold, cal.table[col], label=col)
    ax.axvline(cal.best_f1["threshold"], color="grey", ls="--", lw=1, label=f"best F1 {cal.best_f1['threshold']:.2f}")
    if cal.lowest_at_precision:
        ax.axvline(cal.lowest_at_precision["threshold"], color="red", ls=":", lw=1,
                   label=f"precision >= {cal.min_precision:g} from {cal.lowest_at_precision['threshold']:.2f}")
    ax.set_xlabel(f"{cal.method} threshold")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"{cal.method}: {cal.pairs:,} labelled pairs ({cal.positives:,} positive)")
    ax.legend(loc="lower left", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(paths[2])
    plt.close(fig)
    return paths


def parse_thresholds(text: str) -> np.ndarray:
    """``start:stop:step`` (inclusive) or a comma list."""
    try:
        if ":" in text:
            start, stop, step = (float(x) for x in text.split(":"))
            if step <= 0 or stop < start:
                raise ValueError
            return np.round(np.arange(start, stop + step / 2, step), 6)
        return np.array(sorted(float(x) for x in text.split(",")))
    except ValueError:
        raise ConfigError(f"--thresholds must be start:stop:step or a comma list, got {text!r}") from None
