"""Boilerplate-aware near-duplicate detection on a templated archive with ground truth.

The archive (``gpucurate.generators.archive.generate_archive``): letters and offers in English and Russian from six
companies, each carrying its company's letterhead, a ~300-word legal footer and a signature; true
near-copies change only names, amounts, dates and ids; every other document shares only the template.
Reported against the labels, per run: pair precision/recall, false merges (predicted clusters holding
documents of different true clusters) and missed merges:

* MinHash + LSH + verification (gpucurate) with ``fuzzy.boilerplate`` off and on, at several thresholds;
* SimHash (``fuzzy.method: simhash``: 64-bit over the same shingle hashes, Hamming distance <= k), on all
  shingles and on the shingles left after boilerplate removal.

    python benchmarks/bench_boilerplate.py [--docs 3000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import print_table, write_json  # noqa: E402

import gpucurate  # noqa: E402
from gpucurate.generators.archive import generate_archive  # noqa: E402
from gpucurate.review.evaluate import cluster_metrics  # noqa: E402


def metrics(labels: np.ndarray, truth: np.ndarray) -> dict:
    n = len(truth)
    _, t = np.unique(truth, return_inverse=True)
    first = np.full(t.max() + 1, -1)
    ti, tj = [], []
    for d, c in enumerate(t):
        if first[c] < 0:
            first[c] = d
        else:
            ti.append(first[c])
            tj.append(d)
    m = cluster_metrics(labels, np.array(ti, np.int64), np.array(tj, np.int64), n)
    return {k: m[k] for k in ("pair_precision", "pair_recall", "false_merges", "false_merge_pairs",
                              "missed_merges", "pred_clusters", "true_clusters")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--thresholds", default="0.3,0.4,0.5,0.7,0.8")
    ap.add_argument("--max-df", type=float, default=0.01)
    ap.add_argument("--ngram", type=int, default=5, help="words per shingle")
    ap.add_argument("--json", default="benchmarks/results/boilerplate.json")
    args = ap.parse_args()

    frame = generate_archive(args.docs, seed=args.seed)
    truth = frame["true_cluster"].to_numpy()
    runs = [("minhash", {"fuzzy.threshold": float(t)}) for t in args.thresholds.split(",")]
    runs += [("simhash", {"fuzzy.simhash_max_distance": k}) for k in (3, 6)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "archive.parquet"
        frame.to_parquet(src)
        for boilerplate in (False, True):
            for method, extra in runs:
                out = Path(tmp) / f"out-{len(rows)}"
                start = time.perf_counter()
                summary = gpucurate.run([str(src)], out, overrides={
                    "run.progress": False, "semantic.enabled": False, "fuzzy.method": method,
                    "fuzzy.boilerplate": boilerplate, "fuzzy.boilerplate_max_df": args.max_df,
                    "fuzzy.ngram": args.ngram, **extra})
                ann = pq.read_table(out / "annotations").to_pandas().set_index("id").loc[frame["id"]]
                setting = extra.get("fuzzy.threshold", f"hamming<={extra.get('fuzzy.simhash_max_distance')}")
                row = {"method": f"{method}, boilerplate {'on' if boilerplate else 'off'}", "threshold": setting,
                       **metrics(ann["dedup_id"].to_numpy(), truth), "seconds": round(time.perf_counter() - start, 2)}
                if boilerplate:
                    row["shingles_removed"] = summary["stages"]["fuzzy"]["boilerplate"]["shingles_removed"]
                rows.append(row)
    print_table(rows, ["method", "threshold", "pair_precision", "pair_recall", "false_merges", "missed_merges",
                       "pred_clusters", "true_clusters"],
                f"templated archive: {len(frame):,} documents, {int((frame.kind != 'unique').sum()):,} in "
                f"{frame[frame.kind != 'unique'].true_cluster.nunique():,} near-copy clusters")
    write_json({"documents": len(frame), "max_df": args.max_df, "runs": rows}, args.json)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
