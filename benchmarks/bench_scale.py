"""Throughput as the corpus grows, and a run on a memory-limited Dask cluster.

Corpus: Reuters-21578 bodies enlarged ``factor`` times (each copy with 2% of its words replaced, shuffled)
plus, for several languages, the demo generator's templated letters (1 in 10 documents), written as
Parquet shards of about 64 MB. Each size runs the whole pipeline (exact + fuzzy, no semantic stage)
in this process; reported: documents, MB of text, seconds, documents/s and MB/s per core, peak memory.

``--cluster`` also runs the largest corpus on a local ``dask scheduler`` + two ``dask worker`` processes
limited to ``--worker-memory`` each (``fuzzy.lsh`` is then ``dask``), and reports each worker's peak memory.

    python benchmarks/bench_scale.py [--factors 1 10 100] [--cluster --worker-memory 2GB --partition-mb 8]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
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

import gpucurate  # noqa: E402

SHARD_BYTES = 64 << 20


def write_corpus(folder: Path, factor: int, seed: int = 0) -> tuple[int, int]:
    """Parquet shards of the enlarged corpus; returns (documents, text bytes)."""
    from gpucurate.demo import generate_corpus
    texts, _ = reuters_bodies()
    docs = enlarge(texts, factor, seed=seed)
    letters = generate_corpus(n_docs=max(100, len(docs) // 10), seed=seed).text.fillna("").tolist()
    rng = np.random.default_rng(seed)
    docs = [docs[i] for i in rng.permutation(len(docs))] + letters
    folder.mkdir(parents=True, exist_ok=True)
    shard, size, start, total = [], 0, 0, 0
    for i, t in enumerate(docs):
        shard.append(t)
        size += len(t.encode())
        if size >= SHARD_BYTES or i == len(docs) - 1:
            table = pa.table({"id": pa.array(np.arange(start, start + len(shard)), pa.int64()), "text": shard})
            pq.write_table(table, folder / f"part-{start:09d}.parquet", row_group_size=20_000)
            total += size
            start += len(shard)
            shard, size = [], 0
    return len(docs), total


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cluster_run(corpus: Path, out: Path, memory: str, partition_mb: int) -> dict:
    """The corpus on ``dask scheduler`` + 2 ``dask worker`` processes (1 thread, ``memory`` each)."""
    from distributed import Client
    dask_cli = shutil.which("dask") or str(Path(sys.executable).with_name("dask"))
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    log = open(out.parent / "cluster.log", "w")
    procs = [subprocess.Popen([dask_cli, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)]
    try:
        time.sleep(3)
        for k in range(2):
            procs.append(subprocess.Popen([dask_cli, "worker", address, "--nthreads", "1", "--memory-limit", memory,
                                           "--no-dashboard", "--local-directory", str(out.parent / f"w{k}")],
                                          stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        client = Client(address, timeout="60s")
        client.wait_for_workers(2, timeout=120)
        peaks = {}
        stop = False

        def sample():
            while not stop:
                try:
                    rss = client.run(lambda: __import__("psutil").Process().memory_info().rss)
                except Exception:  # a worker restarting (memory limit): sample again
                    rss = {}
                for w, m in rss.items():
                    peaks[w] = max(peaks.get(w, 0), m)
                time.sleep(0.5)
        import threading
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        start = time.perf_counter()
        summary = gpucurate.run([str(corpus)], out, overrides={"run.progress": False, "semantic.enabled": False,
                                                               "run.scheduler": address,
                                                               "input.partition_bytes": partition_mb << 20})
        seconds = time.perf_counter() - start
        stop = True
        sampler.join()
        client.close()
        return {"seconds": round(seconds, 1), "worker_peak_mib": [round(p / 2**20) for p in peaks.values()],
                "fuzzy_lsh": summary["stages"]["fuzzy"].get("lsh", "driver"), "kept": summary["documents_kept"],
                "partitions": summary["stages"]["input"]["partitions"]}
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        log.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--factors", type=int, nargs="+", default=[1, 10, 100])
    ap.add_argument("--cluster", action="store_true", help="also run the largest corpus on a 2-worker cluster")
    ap.add_argument("--worker-memory", default="2GB")
    ap.add_argument("--partition-mb", type=int, default=8, help="input.partition_bytes of the cluster run (MB)")
    ap.add_argument("--keep", metavar="DIR", help="write the corpora here and keep them")
    ap.add_argument("--out", default="benchmarks/results/scale.json")
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    rows, results = [], {}
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="gpucurate-scale-"))
    try:
        gpucurate.run([str(write_small(root))], root / "warm", overrides={"run.progress": False,
                                                                          "semantic.enabled": False})
        for factor in args.factors:
            corpus = root / f"x{factor}"
            t = time.perf_counter()
            docs, nbytes = write_corpus(corpus, factor)
            generate_s = time.perf_counter() - t
            timing: dict = {}
            with timed(timing, "run"):
                summary = gpucurate.run([str(corpus)], root / f"out-x{factor}", overrides={
                    "run.progress": False, "semantic.enabled": False})
            seconds = timing["run"]["seconds"]
            rows.append({"size": f"{factor}x Reuters", "documents": docs, "text_mb": round(nbytes / 1e6, 1),
                         "seconds": seconds, "docs_per_s_per_core": round(docs / seconds / cores, 1),
                         "mb_per_s_per_core": round(nbytes / 1e6 / seconds / cores, 2),
                         "peak_mib": timing["run"]["peak_mib"], "kept": summary["documents_kept"],
                         "generate_s": round(generate_s, 1)})
            print(rows[-1], file=sys.stderr)
            shutil.rmtree(root / f"out-x{factor}", ignore_errors=True)
        print_table(rows, list(rows[0]), f"gpucurate run (exact + fuzzy) as the corpus grows, {cores} cores")
        results["sizes"] = rows
        base = rows[0]["mb_per_s_per_core"]
        results["throughput_ratio_to_smallest"] = [round(r["mb_per_s_per_core"] / base, 3) for r in rows]
        if args.cluster:
            largest = root / f"x{args.factors[-1]}"
            c = cluster_run(largest, root / "out-cluster", args.worker_memory, args.partition_mb)
            c.update({"corpus_mb": rows[-1]["text_mb"], "worker_memory": args.worker_memory,
                      "partition_mb": args.partition_mb, "in_process_kept": rows[-1]["kept"]})
            results["cluster"] = c
            print(c)
        write_json(results, args.out)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


def write_small(root: Path) -> Path:
    """A tiny corpus to compile the kernels before timing."""
    path = root / "warm.parquet"
    root.mkdir(parents=True, exist_ok=True)
    texts, _ = reuters_bodies()
    pq.write_table(pa.table({"id": np.arange(500), "text": texts[:500]}), path)
    return path


if __name__ == "__main__":
    main()
