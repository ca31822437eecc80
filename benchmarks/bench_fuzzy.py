"""Near-duplicate detection side by side: gpucurate vs datasketch vs rensa, on Reuters and a 10x enlargement.

Everyone sees the same normalized texts (gpucurate's normalization) and the same word 5-gram shingles;
the peers get their shingles from ordinary Python code (``text.split(" ")``), as their users do.
Ground truth: every pair with exact Jaccard >= threshold (exact all-pairs join over the shingle sets),
clusters = connected components. Reported per tool: documents/s, peak memory above the baseline, and
pair precision/recall, edge recall and false merges against the exact clusters.

    python benchmarks/bench_fuzzy.py                      # 1x and 10x, all peers
    python benchmarks/bench_fuzzy.py --factors 1 --no-peers
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
from common import enlarge, print_table, reuters_bodies, timed, write_json  # noqa: E402

import gpucurate  # noqa: E402
from gpucurate.evaluate import cluster_metrics, connected_components, exact_similar_pairs  # noqa: E402
from gpucurate.kernels.hashing import permutations  # noqa: E402
from gpucurate.kernels.minhash import WORD, signatures  # noqa: E402
from gpucurate.text import arrow_buffers, normalize, reference_shingles  # noqa: E402

THRESHOLD, NUM_PERM, SEED, K = 0.8, 128, 42, 5


def gpucurate_signatures(arr: pa.Array, workers: int) -> int:
    """Signatures from raw text (an Arrow array, as read from Parquet): normalize + shingle + MinHash,
    in ``workers`` threads over chunks."""
    from concurrent.futures import ThreadPoolExecutor
    a, b = permutations(NUM_PERM, SEED)
    chunks = np.array_split(np.arange(len(arr)), max(workers * 4, len(arr) // 5000))

    def one(idx):
        offsets, data = arrow_buffers(normalize(arr.slice(idx[0], len(idx))))
        return signatures(offsets, data, WORD, K, np.uint64(SEED), a, b)[0].shape[0]

    with ThreadPoolExecutor(workers) as pool:
        return sum(pool.map(one, [c for c in chunks if len(c)]))


def rensa_signatures(norm_texts: list[str]) -> int:
    from rensa import RMinHash
    for sh in python_shingles(norm_texts):
        m = RMinHash(num_perm=NUM_PERM, seed=SEED)
        m.update(sh)
    return len(norm_texts)


def datasketch_signatures(norm_texts: list[str]) -> int:
    from datasketch import MinHash
    for sh in python_shingles(norm_texts):
        MinHash(num_perm=NUM_PERM, seed=SEED).update_batch([s.encode("utf-8") for s in sh])
    return len(norm_texts)


def signature_throughput(raw_arrow: pa.Array, norm: list[str], workers: int, repeat: int, peers: bool) -> dict:
    """Best-of-``repeat`` documents/s of signature computation, the tools interleaved so that machine
    noise hits them alike. gpucurate starts from raw text (normalization included), the peers from the
    normalized text with their Python shingling included. datasketch runs on a 20,000-document sample."""
    sample = norm[:20000]
    tools = {"gpucurate": (lambda: gpucurate_signatures(raw_arrow, workers), len(norm))}
    if peers:
        tools["rensa"] = (lambda: rensa_signatures(norm), len(norm))
        tools["datasketch"] = (lambda: datasketch_signatures(sample), len(sample))
    best = {name: float("inf") for name in tools}
    for _ in range(repeat):
        for name, (fn, _) in tools.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    out = {name: round(count / best[name], 1) for name, (_, count) in tools.items()}
    if peers:
        out["speedup_vs_rensa"] = round(out["gpucurate"] / out["rensa"], 2)
        out["speedup_vs_datasketch"] = round(out["gpucurate"] / out["datasketch"], 2)
    return out


def ground_truth(norm_texts: list[str]):
    """Exact pairs (i, j) with Jaccard >= THRESHOLD over gpucurate's shingle sets (sorted CSR)."""
    offsets, data = arrow_buffers(pa.array(norm_texts, type=pa.large_string()))
    a, b = permutations(8, SEED)
    _, csr_off, values = signatures(offsets, data, WORD, K, np.uint64(SEED), a, b)
    csr_val = np.concatenate([np.sort(values[csr_off[d]:csr_off[d + 1]]) for d in range(len(csr_off) - 1)])
    i, j, _ = exact_similar_pairs(csr_off, csr_val, THRESHOLD)
    return i, j


def python_shingles(norm_texts):
    return [reference_shingles(t, "word", K) for t in norm_texts]


def union_labels(n, pairs) -> np.ndarray:
    if not pairs:
        return np.arange(n)
    i, j = np.array(pairs, dtype=np.int64).T
    return connected_components(n, i, j)


def exact_jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


def run_rensa(norm_texts, results, verify_sets: bool):
    from rensa import RMinHash, RMinHashLSH
    key = "rensa+verify" if verify_sets else "rensa"
    with timed(results, key):
        t0 = time.perf_counter()
        shingles = python_shingles(norm_texts)
        mhs = []
        for sh in shingles:
            m = RMinHash(num_perm=NUM_PERM, seed=SEED)
            m.update(sh)
            mhs.append(m)
        sig_seconds = time.perf_counter() - t0
        lsh = RMinHashLSH(threshold=THRESHOLD, num_perm=NUM_PERM, num_bands=16)
        for i, m in enumerate(mhs):
            if shingles[i]:
                lsh.insert(i, m)
        sets = [set(s) for s in shingles] if verify_sets else None
        edges = []
        for i, m in enumerate(mhs):
            if not shingles[i]:
                continue
            for j in lsh.query(m):
                if j <= i:
                    continue
                ok = exact_jaccard(sets[i], sets[j]) >= THRESHOLD if verify_sets else m.jaccard(mhs[j]) >= THRESHOLD
                if ok:
                    edges.append((i, j))
        labels = union_labels(len(norm_texts), edges)
    results[key]["signature_seconds"] = round(sig_seconds, 3)
    results[key]["signature_docs_per_s"] = round(len(norm_texts) / sig_seconds, 1)
    return labels


def run_datasketch(norm_texts, results):
    from datasketch import MinHash, MinHashLSH
    with timed(results, "datasketch"):
        t0 = time.perf_counter()
        shingles = python_shingles(norm_texts)
        mhs = []
        for sh in shingles:
            m = MinHash(num_perm=NUM_PERM, seed=SEED)
            m.update_batch([s.encode("utf-8") for s in sh])
            mhs.append(m)
        sig_seconds = time.perf_counter() - t0
        lsh = MinHashLSH(threshold=THRESHOLD, num_perm=NUM_PERM)
        with lsh.insertion_session() as session:
            for i, m in enumerate(mhs):
                if shingles[i]:
                    session.insert(i, m)
        edges = [(i, j) for i, m in enumerate(mhs) if shingles[i] for j in lsh.query(m) if j > i]
        labels = union_labels(len(norm_texts), edges)
    results["datasketch"]["signature_seconds"] = round(sig_seconds, 3)
    results["datasketch"]["signature_docs_per_s"] = round(len(norm_texts) / sig_seconds, 1)
    return labels


def bench(factor: int, texts: list[str], peers: bool, workers: int, repeat: int, tmp: Path,
          bucket_caps: tuple = ()) -> dict:
    raw = enlarge(texts, factor)
    n = len(raw)
    mb = sum(len(t.encode()) for t in raw) / 1e6
    norm = normalize(pa.array(raw, type=pa.large_string())).to_pylist()
    print(f"[{factor}x] {n:,} documents, {mb:.1f} MB; computing exact ground truth ...", file=sys.stderr)
    t0 = time.perf_counter()
    true_i, true_j = ground_truth(norm)
    truth_seconds = time.perf_counter() - t0
    results: dict = {}

    raw_arrow = pa.array(raw, type=pa.large_string())
    sig = signature_throughput(raw_arrow, norm, workers, repeat, peers)
    src = tmp / f"reuters_{factor}x.parquet"
    pq.write_table(pa.table({"id": np.arange(n), "text": raw}), src, row_group_size=max(1, n // (4 * workers)))
    with timed(results, "gpucurate"):
        summary = gpucurate.run([str(src)], tmp / f"out_{factor}x",
                                overrides=["run.progress=false", f"run.workers={workers}", "semantic.enabled=false",
                                           f"input.partition_rows={max(1, n // (2 * workers))}",
                                           "output.overwrite=true"])
    ann = pq.read_table(tmp / f"out_{factor}x" / "annotations").to_pandas().sort_values("doc_id")
    labels = {"gpucurate": ann["dedup_id"].to_numpy()}
    results["gpucurate"]["stage_seconds"] = summary["timings_s"]
    results["gpucurate"]["lsh"] = f"b={summary['lsh']['bands']} r={summary['lsh']['rows']}"
    for cap, anchors in bucket_caps:  # the recall cost of anchoring buckets above fuzzy.max_bucket_size
        name = f"gpucurate max_bucket_size={cap} anchors={anchors}"
        with timed(results, name):
            capped = gpucurate.run([str(src)], tmp / f"cap_{factor}x", overrides=[
                "run.progress=false", f"run.workers={workers}", "semantic.enabled=false", "output.overwrite=true",
                f"input.partition_rows={max(1, n // (2 * workers))}", f"fuzzy.max_bucket_size={cap}",
                f"fuzzy.bucket_anchors={anchors}"])
        labels[name] = pq.read_table(tmp / f"cap_{factor}x" / "annotations").to_pandas().sort_values(
            "doc_id")["dedup_id"].to_numpy()
        results[name]["candidate_pairs"] = capped["stages"]["fuzzy"]["candidate_pairs"]
    results["gpucurate"]["candidate_pairs"] = summary["stages"]["fuzzy"]["candidate_pairs"]

    if peers:
        labels["rensa"] = run_rensa(norm, results, verify_sets=False)
        labels["rensa+verify"] = run_rensa(norm, results, verify_sets=True)
        labels["datasketch"] = run_datasketch(norm, results)

    for tool, lab in labels.items():
        m = cluster_metrics(lab, true_i, true_j, n)
        results[tool].update({k: m[k] for k in ("pair_precision", "pair_recall", "edge_recall", "false_merges",
                                                "missed_merges")})
    for r in results.values():
        r["docs_per_s"] = round(n / r["seconds"], 1)
    return {"factor": factor, "documents": n, "text_mb": round(mb, 1), "true_pairs": int(len(true_i)),
            "ground_truth_seconds": round(truth_seconds, 2), "signature_docs_per_s": sig, "tools": results}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--factors", default="1,10", help="enlargement factors (default 1,10)")
    p.add_argument("--no-peers", action="store_true", help="only gpucurate")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3, help="best-of-N for the signature throughput (default 3)")
    p.add_argument("--bucket-caps", default="", metavar="SIZE:ANCHORS,...",
                   help="also run gpucurate with these fuzzy.max_bucket_size:bucket_anchors (recall of anchoring)")
    p.add_argument("--out", default="benchmarks/results/fuzzy.json")
    args = p.parse_args(argv)
    caps = tuple(tuple(int(x) for x in c.split(":")) for c in args.bucket_caps.split(",") if c)
    texts, _ = reuters_bodies()
    # warm the JIT once so timings measure the kernels, not their compilation
    with tempfile.TemporaryDirectory() as warm:
        gpucurate_signatures(pa.array(texts[:200], type=pa.large_string()), 1)
        gpucurate.run([str(_write_small(Path(warm), texts[:200]))], Path(warm) / "o",
                      overrides=["run.progress=false", "semantic.enabled=false"])
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for factor in [int(f) for f in args.factors.split(",")]:
            runs.append(bench(factor, texts, not args.no_peers, args.workers, args.repeat, Path(tmp), caps))
    report = {"threshold": THRESHOLD, "num_perm": NUM_PERM, "shingles": f"word {K}-grams", "runs": runs}
    base = {r["factor"]: r["tools"]["gpucurate"]["docs_per_s"] for r in runs}
    if 1 in base and len(base) > 1:
        report["throughput_ratio_vs_1x"] = {f: round(v / base[1], 3) for f, v in base.items()}
    for r in runs:
        tools = r["tools"]
        g = tools["gpucurate"]
        for peer in ("rensa", "rensa+verify", "datasketch"):
            if peer in tools:
                tools[peer]["gpucurate_speedup"] = round(tools[peer]["seconds"] / g["seconds"], 2)
        rows = [dict(tool=k, **v) for k, v in tools.items()]
        print_table(rows, ["tool", "seconds", "docs_per_s", "signature_docs_per_s", "peak_mib", "candidate_pairs",
                           "pair_precision", "pair_recall", "edge_recall", "false_merges", "gpucurate_speedup"],
                    f"{r['factor']}x Reuters: {r['documents']:,} docs, {r['true_pairs']:,} true pairs "
                    f"(threshold {THRESHOLD})")
        sig = r["signature_docs_per_s"]
        print(f"signature throughput (best of {args.repeat}, docs/s): " + ", ".join(f"{k} {v:,}" for k, v in sig.items()))
    if "throughput_ratio_vs_1x" in report:
        print(f"gpucurate throughput relative to 1x: {report['throughput_ratio_vs_1x']}")
    write_json(report, args.out)
    print(f"wrote {args.out}")
    return 0


def _write_small(d: Path, texts: list[str]) -> Path:
    path = d / "warm.parquet"
    pq.write_table(pa.table({"id": np.arange(len(texts)), "text": texts}), path)
    return path


if __name__ == "__main__":
    sys.exit(main())
