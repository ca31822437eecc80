"""Near-duplicate detection side by side: gpucurate vs its peers, on Reuters and a 10x enlargement.

Ground truth: every pair with exact Jaccard >= threshold (exact all-pairs join over gpucurate's word
5-gram shingle sets), clusters = connected components. Every tool is scored against it with pair
precision/recall and false/missed merges (``gpucurate.review.evaluate.cluster_metrics``).

``--mode inprocess`` (default): gpucurate (``gpucurate.run``) vs datasketch and rensa in this process,
JIT warm. Everyone sees the same normalized texts (gpucurate's normalization) and the same shingles; the
peers get theirs from ordinary Python code (``text.split(" ")``), as their users do. Reported: documents/s,
peak memory above the baseline, signature throughput.

``--mode e2e``: every tool a fresh process from a JSON Lines file, timed by this process from spawn to
exit (median of ``--repeat-e2e`` interleaved runs, after one untimed warm-up run each on 200 documents so
that numba's on-disk cache and the page cache are warm): the gpucurate CLI as a user runs it, gaoya with
its own tokenizer and with gpucurate's shingles, dedup-rs, and with ``--slow-peers`` datasketch and
rensa+verify (child programs in ``e2e_peers.py``). Peak RSS: the child's high-water mark, by GNU time. Also
gpucurate's per-step timings, ``x_gaoya`` (seconds / gaoya-native seconds) and PASS/FAIL target lines.

    python benchmarks/bench_fuzzy.py                      # in-process, 1x and 10x, all peers
    python benchmarks/bench_fuzzy.py --factors 1 --no-peers
    python benchmarks/bench_fuzzy.py --mode e2e           # fresh processes, 1x and 10x
    python benchmarks/bench_fuzzy.py --mode e2e --factors 1 --repeat-e2e 1 --slow-peers
    python benchmarks/bench_fuzzy.py --mode both          # both, each to its default JSON
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import enlarge, print_table, reuters_bodies, timed, write_json  # noqa: E402
from e2e_peers import K, NUM_PERM, SEED, THRESHOLD, datasketch_pairs, pair_labels, python_shingles, rensa_pairs  # noqa: E402,E501

import gpucurate  # noqa: E402
from gpucurate.review.evaluate import cluster_metrics, exact_similar_pairs  # noqa: E402
from gpucurate.kernels.hashing import permutations  # noqa: E402
from gpucurate.kernels.minhash import WORD, signatures  # noqa: E402
from gpucurate.stages.normalize import arrow_buffers, normalize  # noqa: E402

PEERS_SCRIPT = Path(__file__).resolve().parent / "e2e_peers.py"
TIME = "/usr/bin/time"  # GNU time, for the children's peak RSS (see spawn)
E2E_PEERS = ("gaoya-native", "gaoya-our-shingles", "dedup-rs")
E2E_SLOW_PEERS = ("datasketch", "rensa+verify")
METRICS = ("pair_precision", "pair_recall", "edge_recall", "false_merges", "missed_merges")


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


def run_rensa(norm_texts, results, verify_sets: bool):
    key = "rensa+verify" if verify_sets else "rensa"
    with timed(results, key):
        pairs, sig_seconds = rensa_pairs(norm_texts, verify_sets)
        labels = pair_labels(len(norm_texts), pairs)
    results[key]["signature_seconds"] = round(sig_seconds, 3)
    results[key]["signature_docs_per_s"] = round(len(norm_texts) / sig_seconds, 1)
    return labels


def run_datasketch(norm_texts, results):
    with timed(results, "datasketch"):
        pairs, sig_seconds = datasketch_pairs(norm_texts)
        labels = pair_labels(len(norm_texts), pairs)
    results["datasketch"]["signature_seconds"] = round(sig_seconds, 3)
    results["datasketch"]["signature_docs_per_s"] = round(len(norm_texts) / sig_seconds, 1)
    return labels


def prepare(factor: int, texts: list[str]) -> dict:
    """The enlarged corpus, its normalization and its exact ground truth, shared by both modes."""
    raw = enlarge(texts, factor)
    mb = sum(len(t.encode()) for t in raw) / 1e6
    norm = normalize(pa.array(raw, type=pa.large_string())).to_pylist()
    print(f"[{factor}x] {len(raw):,} documents, {mb:.1f} MB; computing exact ground truth ...", file=sys.stderr)
    t0 = time.perf_counter()
    true_i, true_j = ground_truth(norm)
    return {"factor": factor, "raw": raw, "norm": norm, "n": len(raw), "mb": mb, "true_i": true_i,
            "true_j": true_j, "truth_seconds": time.perf_counter() - t0}


def score(results: dict, labels: dict, corpus: dict) -> None:
    for tool, lab in labels.items():
        m = cluster_metrics(lab, corpus["true_i"], corpus["true_j"], corpus["n"])
        results[tool].update({k: m[k] for k in METRICS})
    for r in results.values():
        r["docs_per_s"] = round(corpus["n"] / r["seconds"], 1)


def run_header(corpus: dict) -> dict:
    return {"factor": corpus["factor"], "documents": corpus["n"], "text_mb": round(corpus["mb"], 1),
            "true_pairs": int(len(corpus["true_i"])), "ground_truth_seconds": round(corpus["truth_seconds"], 2)}


def ratio_vs_1x(runs: list[dict]) -> dict | None:
    """gpucurate's docs/s at every factor relative to 1x (None without 1x and another factor)."""
    base = {r["factor"]: r["tools"]["gpucurate"]["docs_per_s"] for r in runs}
    if 1 not in base or len(base) < 2:
        return None
    return {f: round(v / base[1], 3) for f, v in base.items()}


def bench(corpus: dict, peers: bool, workers: int, repeat: int, tmp: Path, bucket_caps: tuple = ()) -> dict:
    factor, raw, norm, n = corpus["factor"], corpus["raw"], corpus["norm"], corpus["n"]
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
    labels = {"gpucurate": annotation_labels(tmp / f"out_{factor}x", n)}
    results["gpucurate"]["stage_seconds"] = summary["timings_s"]
    results["gpucurate"]["lsh"] = f"b={summary['lsh']['bands']} r={summary['lsh']['rows']}"
    for cap, anchors in bucket_caps:  # the recall cost of anchoring buckets above fuzzy.max_bucket_size
        name = f"gpucurate max_bucket_size={cap} anchors={anchors}"
        with timed(results, name):
            capped = gpucurate.run([str(src)], tmp / f"cap_{factor}x", overrides=[
                "run.progress=false", f"run.workers={workers}", "semantic.enabled=false", "output.overwrite=true",
                f"input.partition_rows={max(1, n // (2 * workers))}", f"fuzzy.max_bucket_size={cap}",
                f"fuzzy.bucket_anchors={anchors}"])
        labels[name] = annotation_labels(tmp / f"cap_{factor}x", n)
        results[name]["candidate_pairs"] = capped["stages"]["fuzzy"]["candidate_pairs"]
    results["gpucurate"]["candidate_pairs"] = summary["stages"]["fuzzy"]["candidate_pairs"]

    if peers:
        labels["rensa"] = run_rensa(norm, results, verify_sets=False)
        labels["rensa+verify"] = run_rensa(norm, results, verify_sets=True)
        labels["datasketch"] = run_datasketch(norm, results)
    score(results, labels, corpus)
    return {**run_header(corpus), "signature_docs_per_s": sig, "tools": results}


def annotation_labels(out_dir: Path, n: int) -> np.ndarray:
    """gpucurate's ``dedup_id`` per input row: the inputs' ``id`` is the row number, so doc_id indexes it."""
    ann = pq.read_table(out_dir / "annotations", columns=["doc_id", "dedup_id"])
    doc_id, dedup_id = ann["doc_id"].to_numpy(), ann["dedup_id"].to_numpy()
    if not np.array_equal(np.sort(doc_id), np.arange(n)):
        raise SystemExit(f"{out_dir}: annotations do not cover the rows 0..{n - 1} once each")
    labels = np.empty(n, dtype=dedup_id.dtype)
    labels[doc_id] = dedup_id
    return labels


def write_jsonl(path: Path, texts: list[str]) -> Path:
    with open(path, "w", encoding="utf-8") as fh:
        for i, t in enumerate(texts):
            fh.write(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n")
    return path


#: the least a Python tool on NumPy and PyArrow spends from process start to exit
IMPORT_FLOOR = [sys.executable, "-c", "import numpy, pyarrow, pyarrow.compute, pyarrow.json, pyarrow.parquet"]


def spawn(cmd: list[str]) -> tuple[float, float]:
    """Run ``cmd`` as a fresh process: (seconds from spawn to exit, peak RSS in MiB), the peak being the
    kernel's high-water mark of that child as ``/usr/bin/time -f %M`` reports it. Not ``os.wait4`` on our own
    child: forked from this process it starts with our RSS (the corpus) and Linux keeps that mark across
    exec, whereas time's child is forked from a tiny process. Not RUSAGE_CHILDREN deltas (a max over every
    child so far), nor 10 ms psutil polling (misses short spikes). For a tree the mark is that of the largest
    process; every tool here is one process with threads. time's own exec (~1 ms) is in the seconds."""
    with tempfile.TemporaryDirectory() as d:
        rss, err = Path(d) / "rss", Path(d) / "stderr"
        with open(err, "wb") as fh:  # a file, not a pipe: a chatty child cannot block on a full pipe
            t0 = time.perf_counter()
            rc = subprocess.run([TIME, "-f", "%M", "-o", str(rss), *cmd], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=fh).returncode
            seconds = time.perf_counter() - t0
        if rc:
            raise SystemExit(f"{' '.join(cmd)} exited {rc}:\n{err.read_text(errors='replace')[-4000:]}")
        return seconds, int(rss.read_text().split()[-1]) / 1024  # %M is KiB


def e2e_command(tool: str, src: Path, work: Path) -> list[str]:
    if tool == "gpucurate":  # the CLI exactly as a user runs it: default config and workers
        return [sys.executable, "-m", "gpucurate", "run", "--input", str(src), "--output", str(work / "gpucurate"),
                "--set", "output.overwrite=true", "--set", "semantic.enabled=false",
                "--set", f"fuzzy.threshold={THRESHOLD}", "-q"]
    return [sys.executable, str(PEERS_SCRIPT), tool, str(src), str(work / f"{tool}.npy")]


def e2e_labels(tool: str, work: Path, n: int) -> np.ndarray:
    if tool == "gpucurate":
        return annotation_labels(work / "gpucurate", n)
    labels = np.load(work / f"{tool}.npy")
    if labels.shape != (n,):
        raise SystemExit(f"{tool}: {labels.shape[0]} labels for {n} rows")
    return labels


def warm_e2e(tools: list[str], texts: list[str], tmp: Path) -> None:
    """One untimed run of every tool on a small file: numba's on-disk cache and the page cache get warm, so
    that the timed runs measure steady-state runs rather than a first-ever compilation."""
    work = tmp / "e2e_warm"
    work.mkdir()
    src = write_jsonl(work / "warm.jsonl", texts)
    for tool in tools:
        spawn(e2e_command(tool, src, work))


def bench_e2e(corpus: dict, tools: list[str], repeat: int, tmp: Path) -> dict:
    factor, n = corpus["factor"], corpus["n"]
    work = tmp / f"e2e_{factor}x"
    work.mkdir()
    src = write_jsonl(work / f"reuters_{factor}x.jsonl", corpus["raw"])
    runs = {tool: [] for tool in tools}
    floor = []
    for _ in range(repeat):  # interleaved, so that machine noise hits every tool alike
        for tool in tools:
            print(f"[{factor}x e2e] {tool} ...", file=sys.stderr)
            runs[tool].append(spawn(e2e_command(tool, src, work)))
        floor.append(spawn(IMPORT_FLOOR)[0])
    results = {tool: {"seconds": round(statistics.median(s for s, _ in r), 3), "runs_s": [round(s, 3) for s, _ in r],
                      "peak_rss_mib": round(max(m for _, m in r), 1)} for tool, r in runs.items()}
    score(results, {tool: e2e_labels(tool, work, n) for tool in tools}, corpus)
    summary = json.loads((work / "gpucurate" / "summary.json").read_text())  # of the last run
    results["gpucurate"]["stage_seconds"] = summary["timings_s"]
    results["gpucurate"]["pipeline_seconds"] = summary["wall_time_s"]
    results["gpucurate"]["lsh"] = f"b={summary['lsh']['bands']} r={summary['lsh']['rows']}"
    if "gaoya-native" in results:
        for r in results.values():
            r["x_gaoya"] = round(r["seconds"] / results["gaoya-native"]["seconds"], 3)
    return {**run_header(corpus), "tools": results, "import_floor_s": round(statistics.median(floor), 3)}


def fixed_cost(runs: list[dict]) -> dict | None:
    """gpucurate's 1x and 10x times as a fixed cost plus a cost per 1x of text, the most fixed cost the
    1x -> 10x target allows at that slope, and the floor under it: a Python process that imports only NumPy
    and PyArrow. 10 (F + s) / (F + 10 s) <= 1.25 means F <= 2 s / 7."""
    by_factor = {r["factor"]: r for r in runs}
    if 1 not in by_factor or 10 not in by_factor:
        return None
    t1, t10 = (by_factor[f]["tools"]["gpucurate"]["seconds"] for f in (1, 10))
    p1, p10 = (by_factor[f]["tools"]["gpucurate"]["pipeline_seconds"] for f in (1, 10))
    slope = (t10 - t1) / 9
    return {"fixed_s": round(t1 - slope, 3), "per_1x_s": round(slope, 3), "fixed_allowed_s": round(2 * slope / 7, 3),
            "import_floor_s": by_factor[1]["import_floor_s"],
            "pipeline_ratio_10x_vs_1x": round(10 * p1 / p10, 3)}


def e2e_checks(runs: list[dict], ratio: dict | None) -> list[dict]:
    """The targets, each PASS, FAIL or n/a when its factor or gaoya-native was not run."""
    by_factor = {r["factor"]: r["tools"] for r in runs}

    def vs_gaoya(factor, limit, quality):
        tools = by_factor.get(factor, {})
        if "gaoya-native" not in tools:
            return None, f"{factor}x or gaoya-native not run"
        g = tools["gpucurate"]
        ok = g["x_gaoya"] <= limit and (not quality or (g["pair_precision"] == 1.0 and g["pair_recall"] >= 0.995))
        return ok, f"x_gaoya {g['x_gaoya']}, P {g['pair_precision']}, R {g['pair_recall']}"

    checks = [("10x gpucurate <= 0.8x gaoya-native, P == 1.0, R >= 0.995", *vs_gaoya(10, 0.8, True)),
              ("1x gpucurate <= 1.2x gaoya-native", *vs_gaoya(1, 1.2, False))]
    # same machine and workers at both factors, so the ratio of docs/s per core is the ratio of docs/s
    name = "1x->10x gpucurate docs/s per core within 25% of each other (0.75 <= 10x / 1x <= 1.25)"
    if ratio is None or 10 not in ratio:
        checks.append((name, None, "1x and 10x not both run"))
    else:
        cores = os.cpu_count()
        per_core = {f: round(by_factor[f]["gpucurate"]["docs_per_s"] / cores, 1) for f in (1, 10)}
        checks.append((name, abs(ratio[10] - 1) <= 0.25,
                       f"ratio {ratio[10]}, docs/s per core {per_core} ({cores} cores)"))
    return [{"target": t, "result": {True: "PASS", False: "FAIL", None: "n/a"}[ok], "detail": d}
            for t, ok, d in checks]


def report_inprocess(runs: list[dict], repeat: int, out: str) -> None:
    report = {"threshold": THRESHOLD, "num_perm": NUM_PERM, "shingles": f"word {K}-grams", "runs": runs}
    ratio = ratio_vs_1x(runs)
    if ratio:
        report["throughput_ratio_vs_1x"] = ratio
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
        print(f"signature throughput (best of {repeat}, docs/s): " + ", ".join(f"{k} {v:,}" for k, v in sig.items()))
    if ratio:
        print(f"gpucurate throughput relative to 1x: {ratio}")
    write_json(report, out)
    print(f"wrote {out}")


def report_e2e(runs: list[dict], repeat: int, out: str) -> None:
    ratio = ratio_vs_1x(runs)
    report = {"threshold": THRESHOLD, "num_perm": NUM_PERM, "shingles": f"word {K}-grams", "repeat": repeat,
              "cores": os.cpu_count(), "runs": runs, "throughput_ratio_vs_1x": ratio}
    for r in runs:
        rows = [dict(tool=k, **v) for k, v in r["tools"].items()]
        print_table(rows, ["tool", "seconds", "docs_per_s", "peak_rss_mib", "pair_precision", "pair_recall",
                           "false_merges", "missed_merges", "x_gaoya"],
                    f"end to end, {r['factor']}x Reuters: {r['documents']:,} docs, {r['true_pairs']:,} true pairs "
                    f"(threshold {THRESHOLD}, median of {repeat} fresh processes)")
        steps = r["tools"]["gpucurate"]["stage_seconds"]
        print("gpucurate steps (s, last run): " + ", ".join(f"{k} {v}" for k, v in steps.items()))
    if ratio:
        print(f"gpucurate throughput relative to 1x: {ratio}")
    report["fixed_cost"] = cost = fixed_cost(runs)
    if cost:
        print(f"gpucurate: {cost['fixed_s']} s fixed + {cost['per_1x_s']} s per 1x of Reuters; the 1x -> 10x target "
              f"allows at most {cost['fixed_allowed_s']} s fixed at that slope; a Python process importing NumPy "
              f"and PyArrow takes {cost['import_floor_s']} s; pipeline alone (summary wall_time_s) 10x/1x docs/s "
              f"{cost['pipeline_ratio_10x_vs_1x']}")
    report["checks"] = e2e_checks(runs, ratio)
    for c in report["checks"]:
        print(f"check: {c['target']}: {c['result']} ({c['detail']})")
    write_json(report, out)
    print(f"wrote {out}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=("inprocess", "e2e", "both"), default="inprocess",
                   help="in this process (default), every tool a fresh process, or both")
    p.add_argument("--factors", default="1,10", help="enlargement factors (default 1,10)")
    p.add_argument("--no-peers", action="store_true", help="only gpucurate")
    p.add_argument("--workers", type=int, default=2, help="gpucurate's workers in-process (e2e: its default)")
    p.add_argument("--repeat", type=int, default=3, help="best-of-N for the signature throughput (default 3)")
    p.add_argument("--repeat-e2e", type=int, default=2, help="fresh-process runs per tool, median (default 2)")
    p.add_argument("--slow-peers", action="store_true", help="e2e: also datasketch and rensa+verify")
    p.add_argument("--bucket-caps", default="", metavar="SIZE:ANCHORS,...",
                   help="also run gpucurate with these fuzzy.max_bucket_size:bucket_anchors (recall of anchoring)")
    p.add_argument("--out", help="JSON report (default benchmarks/results/fuzzy.json, e2e: fuzzy_e2e.json)")
    args = p.parse_args(argv)
    if args.mode == "both" and args.out:
        p.error("--out names one report; --mode both writes both default ones")
    modes = ("inprocess", "e2e") if args.mode == "both" else (args.mode,)
    if "e2e" in modes and not os.access(TIME, os.X_OK):
        p.error(f"--mode e2e needs GNU time at {TIME} (apt-get install time) for the peak RSS")
    caps = tuple(tuple(int(x) for x in c.split(":")) for c in args.bucket_caps.split(",") if c)
    peers = () if args.no_peers else E2E_PEERS + (E2E_SLOW_PEERS if args.slow_peers else ())
    tools = ["gpucurate", *peers]
    texts, _ = reuters_bodies()
    if "inprocess" in modes:  # warm the JIT once so timings measure the kernels, not their compilation
        with tempfile.TemporaryDirectory() as warm:
            gpucurate_signatures(pa.array(texts[:200], type=pa.large_string()), 1)
            gpucurate.run([str(_write_small(Path(warm), texts[:200]))], Path(warm) / "o",
                          overrides=["run.progress=false", "semantic.enabled=false"])
    runs, e2e_runs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        if "e2e" in modes:
            warm_e2e(tools, texts[:200], Path(tmp))
        for factor in [int(f) for f in args.factors.split(",")]:
            corpus = prepare(factor, texts)
            if "inprocess" in modes:
                runs.append(bench(corpus, not args.no_peers, args.workers, args.repeat, Path(tmp), caps))
            if "e2e" in modes:
                e2e_runs.append(bench_e2e(corpus, tools, args.repeat_e2e, Path(tmp)))
    if runs:
        report_inprocess(runs, args.repeat, args.out or "benchmarks/results/fuzzy.json")
    if e2e_runs:
        report_e2e(e2e_runs, args.repeat_e2e, args.out or "benchmarks/results/fuzzy_e2e.json")
    return 0


def _write_small(d: Path, texts: list[str]) -> Path:
    path = d / "warm.parquet"
    pq.write_table(pa.table({"id": np.arange(len(texts)), "text": texts}), path)
    return path


if __name__ == "__main__":
    sys.exit(main())
