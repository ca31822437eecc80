"""Semantic stage on real paraphrase pairs: clustered vs exhaustive search, labels, and encoder speed.

Corpus: both sentences of every pair of ``pan_paraphrase/pairs_<split>.tsv`` as separate documents
(test: 6,000 documents, train: 20,000). The whole pipeline runs with the semantic stage on, then:

* exhaustive search: every pair of embedded documents with cosine >= threshold (blocked matmul); the
  clustered stage's within-cluster pairs are compared with it, for several ``n_clusters``, giving the
  recall lost to cluster boundaries and the time of k-means + within-cluster search;
* precision/recall of the stage against the pair labels (a pair is predicted a duplicate when both
  documents end with the same ``dedup_id``);
* embeddings/s of gpucurate's encoder vs sentence-transformers' ``encode`` on the same texts, batch size
  and model, one after the other in this process.

    python benchmarks/bench_semantic.py                       # PAN test, 0.92
    python benchmarks/bench_semantic.py --split train         # 20,000 documents
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED_DATA, print_table, write_json  # noqa: E402

import gpucurate  # noqa: E402
from gpucurate.review.calibrate import PRESETS  # noqa: E402
from gpucurate.review.calibrate import load_pairs as calibrate_pairs  # noqa: E402
from gpucurate.stages.encoder import Encoder, resolve_model_path  # noqa: E402
from gpucurate.kernels import semantic as sk  # noqa: E402


def load_pairs(split: str) -> tuple[list[str], list[str], np.ndarray]:
    path = SHARED_DATA / "pan_paraphrase" / f"pairs_{split}.tsv"
    if not path.is_file():
        raise SystemExit(f"benchmark data not found: {path}")
    pairs = calibrate_pairs(path, *PRESETS["pan"])
    return pairs.a.tolist(), pairs.b.tolist(), pairs.label.to_numpy()


def exhaustive_pairs(x: np.ndarray, threshold: float) -> set[tuple[int, int]]:
    """Every pair (i < j) of rows of ``x`` with dot product >= threshold."""
    out = set()
    step = 2048
    for s in range(0, len(x), step):
        sim = x[s:s + step] @ x.T
        r, c = np.nonzero(sim >= threshold)
        keep = c > r + s
        out.update(zip((r[keep] + s).tolist(), c[keep].tolist()))
    return out


def clustered_pairs(x: np.ndarray, n_clusters: int, probes: int, threshold: float, seed: int, sample: int):
    """The pairs the stage's clustered search finds (the same kernels), with the time of each step."""
    t0 = time.perf_counter()
    centroids = sk.kmeans_fit(x, n_clusters, seed, 100, sample)
    labels, _ = sk.assign(x, centroids, probes)
    t1 = time.perf_counter()
    a, b, _, compared = sk.cluster_pairs(x, labels, n_clusters, threshold)
    t2 = time.perf_counter()
    return set(zip(a.tolist(), b.tolist())), t1 - t0, t2 - t1, compared


def encoder_speed(texts: list[str], batch_size: int, dtype: str) -> dict:
    """Embeddings/s of gpucurate's encoder and of sentence-transformers on the same texts."""
    out = {"texts": len(texts), "batch_size": batch_size}
    ours = Encoder(batch_size=batch_size, dtype=dtype)
    ours.encode(texts[:64])
    t0 = time.perf_counter()
    a = ours.encode(texts)
    out["gpucurate_per_s"] = round(len(texts) / (time.perf_counter() - t0), 1)
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        out["sentence_transformers_per_s"] = None
        return out
    st = SentenceTransformer(str(resolve_model_path(None)), device="cpu")
    st.encode(texts[:64], batch_size=batch_size)
    t0 = time.perf_counter()
    b = st.encode(texts, batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False)
    out["sentence_transformers_per_s"] = round(len(texts) / (time.perf_counter() - t0), 1)
    out["max_abs_difference"] = float(np.abs(a - b).max())
    out["ratio"] = round(out["gpucurate_per_s"] / out["sentence_transformers_per_s"], 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--split", default="test", choices=["test", "train"])
    ap.add_argument("--threshold", type=float, default=0.92)
    ap.add_argument("--clusters", default="0.25,0.5,1,2,4",
                    help="n_clusters to sweep, as multiples of the default ceil(sqrt(n))")
    ap.add_argument("--probes", default="1,2,3", help="probes to sweep (the default is 2)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--speed-texts", type=int, default=2000, help="texts for the encoder comparison (0: skip)")
    ap.add_argument("--json", default="benchmarks/results/semantic.json")
    args = ap.parse_args()

    left, right, labels = load_pairs(args.split)
    n_pairs = len(labels)
    result: dict = {"split": args.split, "pairs": n_pairs, "threshold": args.threshold}
    with tempfile.TemporaryDirectory() as tmp:
        import pandas as pd
        ids = [f"p{i}a" for i in range(n_pairs)] + [f"p{i}b" for i in range(n_pairs)]
        corpus = Path(tmp) / "pan.parquet"
        pd.DataFrame({"id": ids, "text": left + right}).to_parquet(corpus)
        summary = gpucurate.run([str(corpus)], Path(tmp) / "out", overrides={
            "semantic.enabled": True, "semantic.threshold": args.threshold, "semantic.batch_size": args.batch_size,
            "semantic.dtype": args.dtype, "run.progress": False})
        ann = pd.concat([pq.read_table(f).to_pandas() for f in sorted((Path(tmp) / "out" / "annotations")
                                                                      .glob("*.parquet"))])
        emb_table = pq.read_table(Path(tmp) / "out" / "embeddings")
    sem = summary["stages"]["semantic"]
    steps = sem["step_seconds"]
    result["pipeline"] = {"documents": summary["documents_in"], "kept": summary["documents_kept"],
                          "exact_duplicates": summary["stages"]["exact"]["duplicates"],
                          "fuzzy_duplicates": summary["stages"]["fuzzy"]["duplicates"], "semantic": sem}
    result["cluster_steps_vs_embedding"] = round((steps["kmeans"] + steps["within_cluster"]) / steps["embed"], 4)

    # (b) the stage against the labels
    group = dict(zip(ann["doc_id"], ann["dedup_id"]))
    predicted = np.array([group[f"p{i}a"] == group[f"p{i}b"] for i in range(n_pairs)])
    tp = int((predicted & (labels == 1)).sum())
    precision = tp / max(1, predicted.sum())
    recall = tp / max(1, (labels == 1).sum())
    result["labels"] = {"predicted_duplicates": int(predicted.sum()), "true_pairs": int((labels == 1).sum()),
                        "precision": round(precision, 4), "recall": round(recall, 4),
                        "f1": round(2 * precision * recall / max(1e-12, precision + recall), 4)}

    # pair cosine against the labels at other thresholds (what calibration would choose): a pair counts
    # as predicted when the earlier stages grouped it or the cosine of its two representatives reaches t
    x = np.asarray(emb_table.column("embedding").combine_chunks().values, dtype=np.float32).reshape(
        emb_table.num_rows, -1)
    row_of = {d: r for r, d in enumerate(emb_table.column("doc_id").to_pylist())}
    rep = dict(zip(ann["doc_id"], ann["fuzzy_group"]))
    ra = np.array([row_of.get(rep[f"p{i}a"], -1) for i in range(n_pairs)])
    rb = np.array([row_of.get(rep[f"p{i}b"], -1) for i in range(n_pairs)])
    pre = np.array([rep[f"p{i}a"] == rep[f"p{i}b"] for i in range(n_pairs)])
    both = (ra >= 0) & (rb >= 0)
    cos = np.full(n_pairs, -1.0)
    cos[both] = np.sum(x[ra[both]] * x[rb[both]], axis=1)
    sweep_t = []
    for t in np.round(np.arange(0.50, 0.985, 0.02), 2):
        pred = pre | (cos >= t)
        tp = int((pred & (labels == 1)).sum())
        p_, r_ = tp / max(1, pred.sum()), tp / max(1, (labels == 1).sum())
        sweep_t.append({"threshold": float(t), "precision": round(p_, 4), "recall": round(r_, 4),
                        "f1": round(2 * p_ * r_ / max(1e-12, p_ + r_), 4)})
    result["pair_cosine_sweep"] = sweep_t
    result["best_f1"] = max(sweep_t, key=lambda r: r["f1"])

    # (a) clustered vs exhaustive within the embedded documents
    t0 = time.perf_counter()
    exhaustive = exhaustive_pairs(x, args.threshold)
    result["exhaustive"] = {"documents": len(x), "pairs": len(exhaustive),
                            "seconds": round(time.perf_counter() - t0, 3)}
    base = math.ceil(math.sqrt(len(x)))
    sweep = []
    for factor in [float(f) for f in args.clusters.split(",")]:
        k = max(1, min(len(x), int(round(base * factor))))
        for probes in [int(p) for p in args.probes.split(",")]:
            found, t_kmeans, t_within, compared = clustered_pairs(x, k, probes, args.threshold, 42, 100_000)
            sweep.append({"n_clusters": k, "probes": probes, "default": factor == 1.0 and probes == 2,
                          "pairs_found": len(found & exhaustive),
                          "recall_vs_exhaustive": round(len(found & exhaustive) / max(1, len(exhaustive)), 4),
                          "pairs_compared": compared, "kmeans_s": round(t_kmeans, 3),
                          "within_s": round(t_within, 3)})
    result["cluster_sweep"] = sweep

    if args.speed_texts:
        result["encoder_speed"] = encoder_speed((left + right)[:args.speed_texts], args.batch_size, args.dtype)

    title = f"PAN {args.split}: {len(x):,} embedded, {len(exhaustive):,} exhaustive pairs at cosine >= {args.threshold}"
    print_table(sweep, ["n_clusters", "probes", "default", "pairs_found", "recall_vs_exhaustive", "pairs_compared",
                        "kmeans_s", "within_s"], title)
    best = result["best_f1"]
    rows = [{"measure": k, "value": v} for k, v in {
        **result["labels"], "best-F1 pair threshold": best["threshold"],
        "best F1 (precision, recall)": f"{best['f1']} ({best['precision']}, {best['recall']})",
        "embeddings/s (pipeline)": sem["embeddings_per_s"],
        "kmeans+within / embed": result["cluster_steps_vs_embedding"],
        **{f"encoder {k}": v for k, v in result.get("encoder_speed", {}).items()}}.items()]
    print_table(rows, ["measure", "value"], "semantic stage")
    write_json(result, args.json)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
