"""MinHash vs SimHash (``fuzzy.method``) on the same data, against ground truth.

* Reuters-21578 bodies: the truth is every pair with exact word-5-gram Jaccard >= 0.8 (exact all-pairs
  join), clusters = connected components; reported: pair precision/recall, false merges, seconds.
* PAN paraphrase pairs (test): both sentences of each pair as documents; a pair is predicted when both end
  with the same ``dedup_id``; reported: precision/recall against the labels.

    python benchmarks/bench_methods.py
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import print_table, reuters_bodies, write_json  # noqa: E402

import gpucurate  # noqa: E402
from gpucurate.review.calibrate import PRESETS, load_pairs  # noqa: E402
from gpucurate.review.evaluate import cluster_metrics, exact_similar_pairs  # noqa: E402
from gpucurate.kernels.hashing import permutations  # noqa: E402
from gpucurate.kernels.minhash import WORD, signatures  # noqa: E402
from gpucurate.stages.normalize import arrow_buffers, normalize  # noqa: E402
from common import SHARED_DATA  # noqa: E402

METHODS = [("minhash", {"fuzzy.threshold": 0.8}), ("minhash", {"fuzzy.threshold": 0.5}),
           ("simhash", {"fuzzy.simhash_max_distance": 3}), ("simhash", {"fuzzy.simhash_max_distance": 6}),
           ("simhash", {"fuzzy.simhash_max_distance": 10})]


def run_method(src: Path, out: Path, method: str, extra: dict) -> tuple[pd.DataFrame, float]:
    start = time.perf_counter()
    gpucurate.run([str(src)], out, overrides={"run.progress": False, "semantic.enabled": False,
                                               "fuzzy.method": method, **extra})
    seconds = time.perf_counter() - start
    return pq.read_table(out / "annotations").to_pandas(), seconds


def setting(method: str, extra: dict) -> str:
    return f"threshold {extra['fuzzy.threshold']}" if method == "minhash" else \
        f"hamming <= {extra['fuzzy.simhash_max_distance']}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default="benchmarks/results/methods.json")
    args = ap.parse_args()
    texts, _ = reuters_bodies()
    offsets, data = arrow_buffers(normalize(pa.array(texts, pa.large_string())))
    a, b = permutations(1, 42)
    _, c_off, c_val = signatures(offsets, data, WORD, 5, np.uint64(42), a, b)
    doc = np.repeat(np.arange(len(c_off) - 1), np.diff(c_off))
    c_val = c_val[np.lexsort((c_val, doc))]  # the exact join wants each set sorted
    ti, tj, _ = exact_similar_pairs(c_off, c_val, 0.8)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        src = tmp / "reuters.parquet"
        pq.write_table(pa.table({"id": np.arange(len(texts)), "text": texts}), src)
        for method, extra in METHODS:
            ann, seconds = run_method(src, tmp / f"r-{method}-{len(rows)}", method, extra)
            labels = ann.sort_values("id")["dedup_id"].to_numpy()
            m = cluster_metrics(labels, ti, tj, len(texts))
            rows.append({"data": "reuters (truth: jaccard >= 0.8)", "method": method, "setting": setting(method, extra),
                         "precision": m["pair_precision"], "recall": m["pair_recall"],
                         "false_merges": m["false_merges"], "seconds": round(seconds, 2)})
        pan = load_pairs(SHARED_DATA / "pan_paraphrase" / "pairs_test.tsv", *PRESETS["pan"])
        n = len(pan)
        src = tmp / "pan.parquet"
        pq.write_table(pa.table({"id": [f"a{i}" for i in range(n)] + [f"b{i}" for i in range(n)],
                                 "text": pan.a.tolist() + pan.b.tolist()}), src)
        truth = pan.label.to_numpy() == 1
        for method, extra in METHODS:
            ann, seconds = run_method(src, tmp / f"p-{method}-{len(rows)}", method, extra)
            group = dict(zip(ann["id"], ann["dedup_id"]))
            pred = np.array([group[f"a{i}"] == group[f"b{i}"] for i in range(n)])
            tp = int((pred & truth).sum())
            rows.append({"data": "PAN test (labels)", "method": method, "setting": setting(method, extra),
                         "precision": tp / pred.sum() if pred.any() else 1.0, "recall": tp / truth.sum(),
                         "false_merges": int((pred & ~truth).sum()), "seconds": round(seconds, 2)})
    print_table(rows, ["data", "method", "setting", "precision", "recall", "false_merges", "seconds"],
                "MinHash vs SimHash")
    write_json({"runs": rows, "reuters_true_pairs": int(len(ti))}, args.json)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
