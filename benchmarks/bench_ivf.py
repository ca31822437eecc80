"""Semantic pairs an ingest state's IVF cells lose against the exhaustive search.

Corpus: the first sentence of every pair of MRPC (``--corpus mrpc``, train + test) or PAN
(``--corpus pan``, ``pairs_test.tsv``) as the stored batch, the second sentences as the new batch. Both
batches are ingested twice with the semantic stage on (exact + fuzzy as usual): once with the exhaustive
search (``vector_index.IVF_MIN`` out of reach), once with the state searching through cells from the first
batch on (``IVF_MIN`` = 1: the first batch fits the centroids, the second batch is compared with its
``PROBES`` nearest cells). The cosine pairs found (the state's ``vector_edges``) are compared at
``--thresholds``; a pair of the exhaustive search that the cells miss is lost.

    python benchmarks/bench_ivf.py --corpus mrpc --thresholds 0.92 0.85 0.8
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED_DATA, print_table, write_json  # noqa: E402

from gpucurate.workflows import vector_index  # noqa: E402
from gpucurate.workflows.ingest import ingest  # noqa: E402
from gpucurate.workflows.state import State  # noqa: E402


def sentence_pairs(corpus: str) -> tuple[list[str], list[str]]:
    if corpus == "mrpc":
        files, first, second = [SHARED_DATA / "mrpc" / f"msr-para-{s}.tsv" for s in ("train", "test")], 3, 4
    else:
        files, first, second = [SHARED_DATA / "pan_paraphrase" / "pairs_test.tsv"], 1, 2
    a, b = [], []
    for path in files:
        if not path.is_file():
            raise SystemExit(f"benchmark data not found: {path}")
        with open(path, encoding="utf-8-sig", newline="") as fh:
            rows = list(csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
        a += [r[first] for r in rows if len(r) > second]
        b += [r[second] for r in rows if len(r) > second]
    return a, b


def edges(state_dir: Path) -> dict:
    """{(a, b): cosine} of the state's semantic edges, by the documents' texts' first rows."""
    state = State(state_dir)
    index = state.index("vector_edges")
    out = {}
    for run in index.runs:
        keys = np.fromfile(run.file("keys"), np.uint64)
        values = np.fromfile(run.file("values"), index.dtype)
        for a, b, s in zip(keys.tolist(), values["other"].tolist(), values["score"].tolist()):
            if a < b:
                out[(a, b)] = s
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", choices=["mrpc", "pan"], default="mrpc")
    ap.add_argument("--thresholds", type=float, nargs="+", default=[0.92, 0.85, 0.8])
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    first, second = sentence_pairs(args.corpus)
    low = min(args.thresholds)
    overrides = {"run.progress": False, "semantic.enabled": True, "semantic.threshold": low,
                 "semantic.min_chars": 1}
    found = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        files = []
        for name, texts in (("stored", first), ("new", second)):
            path = tmp / f"{name}.jsonl"
            path.write_text("".join(json.dumps({"id": f"{name}{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
            files.append(str(path))
        for mode, ivf_min in (("exhaustive", 10**12), ("cells", 1)):
            vector_index.IVF_MIN = ivf_min
            for f in files:
                ingest([f], tmp / mode, overrides=overrides)
            found[mode] = edges(tmp / mode)
            state = State(tmp / mode)
            found[mode + "_cells"] = 0 if state.centroids() is None else len(state.centroids())
    rows = []
    for t in sorted(args.thresholds, reverse=True):
        exact = {p for p, s in found["exhaustive"].items() if s >= t}
        cells = {p for p, s in found["cells"].items() if s >= t}
        lost = len(exact - cells)
        rows.append({"threshold": t, "pairs_exhaustive": len(exact), "pairs_cells": len(cells), "lost": lost,
                     "lost_fraction": round(lost / max(1, len(exact)), 4), "extra": len(cells - exact)})
    title = (f"{args.corpus}: {len(first):,} stored + {len(second):,} new sentences, {found['cells_cells']} cells, "
             f"{vector_index.PROBES} probed")
    print_table(rows, list(rows[0]), title)
    write_json({"corpus": args.corpus, "cells": found["cells_cells"], "probes": vector_index.PROBES, "rows": rows},
               args.out or f"benchmarks/results/ivf-{args.corpus}.json")


if __name__ == "__main__":
    main()
