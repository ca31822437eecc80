"""Boilerplate-aware near-duplicate detection on a templated archive with ground truth.

The archive (``gpucurate.archive.generate_archive``): letters and offers in English and Russian from six
companies, each carrying its company's letterhead, a ~300-word legal footer and a signature; true
near-copies change only names, amounts, dates and ids; every other document shares only the template.
Reported against the labels, per run: pair precision/recall, false merges (predicted clusters holding
documents of different true clusters) and missed merges:

* MinHash + LSH + verification (gpucurate) with ``fuzzy.boilerplate`` off and on, at several thresholds;
* SimHash (64-bit, over the same word-shingle hashes, Hamming distance <= k, exhaustive search),
  on all shingles and on the shingles left after boilerplate removal.

    python benchmarks/bench_boilerplate.py [--docs 3000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import print_table, write_json  # noqa: E402

import gpucurate  # noqa: E402
from gpucurate.archive import generate_archive  # noqa: E402
from gpucurate.evaluate import cluster_metrics, connected_components  # noqa: E402
from gpucurate.kernels.hashing import permutations  # noqa: E402
from gpucurate.kernels.minhash import WORD, signatures  # noqa: E402
from gpucurate.text import arrow_buffers, normalize  # noqa: E402


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


def shingle_sets(texts: list[str], k: int):
    arr = normalize(pa.array(texts, pa.large_string()))
    offsets, data = arrow_buffers(arr)
    a, b = permutations(1, 42)
    _, csr_offsets, csr_values = signatures(offsets, data, WORD, k, np.uint64(42), a, b)
    return csr_offsets, csr_values


def drop_common(offsets, values, max_df):
    ordered = np.sort(values)
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    df = np.diff(np.r_[starts, len(ordered)])
    common = set(ordered[starts][df > max_df * (len(offsets) - 1)].tolist())
    keep = np.array([v not in common for v in values.tolist()])
    return np.concatenate(([0], np.cumsum(keep)))[offsets], values[keep]


def simhash(offsets, values) -> np.ndarray:
    """64-bit SimHash of each shingle-hash set (every shingle weight 1)."""
    bits = ((values[:, None] >> np.arange(64, dtype=np.uint64)) & np.uint64(1)).astype(np.int32) * 2 - 1
    sums = np.add.reduceat(bits, offsets[:-1], axis=0) if len(values) else np.zeros((len(offsets) - 1, 64))
    sums[np.diff(offsets) == 0] = 0
    return ((sums > 0).astype(np.uint64) << np.arange(64, dtype=np.uint64)).sum(axis=1).astype(np.uint64)


POPCOUNT = np.array([bin(i).count("1") for i in range(256)], np.int64)


def simhash_clusters(sig: np.ndarray, max_distance: int, nonempty: np.ndarray) -> np.ndarray:
    n = len(sig)
    ii, jj = [], []
    for s in range(0, n, 512):
        x = sig[s:s + 512, None] ^ sig[None, :]
        dist = np.zeros(x.shape, np.int64)
        for shift in range(0, 64, 8):
            dist += POPCOUNT[((x >> np.uint64(shift)) & np.uint64(255)).astype(np.intp)]
        r, c = np.nonzero(dist <= max_distance)
        keep = (c > r + s) & nonempty[r + s] & nonempty[c]
        ii.append(r[keep] + s)
        jj.append(c[keep])
    return connected_components(n, np.concatenate(ii), np.concatenate(jj))


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
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "archive.parquet"
        frame.to_parquet(src)
        for boilerplate in (False, True):
            for t in [float(x) for x in args.thresholds.split(",")]:
                out = Path(tmp) / f"out-{boilerplate}-{t}"
                start = time.perf_counter()
                summary = gpucurate.run([str(src)], out, overrides={
                    "run.progress": False, "semantic.enabled": False, "fuzzy.threshold": t,
                    "fuzzy.boilerplate": boilerplate, "fuzzy.boilerplate_max_df": args.max_df,
                    "fuzzy.ngram": args.ngram})
                ann = pq.read_table(out / "annotations").to_pandas().set_index("id").loc[frame["id"]]
                row = {"method": f"minhash, boilerplate {'on' if boilerplate else 'off'}", "threshold": t,
                       **metrics(ann["dedup_id"].to_numpy(), truth), "seconds": round(time.perf_counter() - start, 2)}
                if boilerplate:
                    row["shingles_removed"] = summary["stages"]["fuzzy"]["boilerplate"]["shingles_removed"]
                rows.append(row)
    offsets, values = shingle_sets(frame["text"].tolist(), args.ngram)
    for boilerplate in (False, True):
        off, val = drop_common(offsets, values, args.max_df) if boilerplate else (offsets, values)
        sig = simhash(off, val)
        for k in (3, 6):
            labels = simhash_clusters(sig, k, np.diff(off) > 0)
            rows.append({"method": f"simhash, boilerplate {'on' if boilerplate else 'off'}",
                         "threshold": f"hamming<={k}", **metrics(labels, truth)})
    print_table(rows, ["method", "threshold", "pair_precision", "pair_recall", "false_merges", "missed_merges",
                       "pred_clusters", "true_clusters"],
                f"templated archive: {len(frame):,} documents, {int((frame.kind != 'unique').sum()):,} in "
                f"{frame[frame.kind != 'unique'].true_cluster.nunique():,} near-copy clusters")
    write_json({"documents": len(frame), "max_df": args.max_df, "runs": rows}, args.json)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
