"""Throughput as the corpus grows, and a run on a memory-limited Dask cluster over a corpus larger than
the workers' memory.

Corpus: ``benchmarks/synthetic.py`` (near-copy families of a fixed size distribution, templated letters,
exact copies, six languages and scripts) written as Parquet shards of about 64 MB; sizes are given as
multiples of the Reuters-21578 text (19.4 MB), so ``--factors 1 10 100`` is about 19 MB, 194 MB and
1.9 GB. Each size runs the whole pipeline (exact + fuzzy, no semantic stage) in this process; reported:
documents, MB of text, seconds, documents/s and MB/s per core, peak memory, and against the generator's
families: the share of duplicate families left with one kept document and the unique documents dropped.

``--cluster-gb G`` writes a corpus of G GB and runs it on a local ``dask scheduler`` + two ``dask worker``
processes (1 thread, ``--worker-memory`` each; spill to their local directory), with the Dask LSH and, if
``--cluster-components dask``, the Dask connected components; it reports each worker's peak memory.
``--cluster-factor F`` instead runs the F-times-Reuters corpus on the cluster and checks it against the
in-process run of the same corpus. ``--driver-factors F [F ...]`` runs each F-times-Reuters corpus on a
fresh cluster and reports the driver's peak memory and its growth per added document (the driver should
hold no per-document state: issue 17's goal is a flat driver).

    python benchmarks/bench_scale.py [--factors 1 10 100]
    python benchmarks/bench_scale.py --factors 1 --cluster-gb 4 --worker-memory 1GB --partition-mb 8
    python benchmarks/bench_scale.py --factors --driver-factors 1 10
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import PeakMemory, print_table, stop_processes, timed, write_json  # noqa: E402
from synthetic import write_corpus  # noqa: E402

import gpucurate  # noqa: E402

REUTERS_TEXT_BYTES = 19_400_000


def ground_truth_scores(out: Path) -> dict:
    """Against the generator's families: share of duplicate families with exactly one kept document, and
    unique documents (families of one) that were dropped."""
    a = pd.read_parquet(out / "annotations", columns=["family", "keep"])
    size = a.groupby("family")["keep"].transform("size")
    kept = a[size > 1].groupby("family")["keep"].sum()
    return {"families_collapsed": round(float((kept == 1).mean()), 4) if len(kept) else None,
            "unique_dropped": int((~a["keep"][size == 1]).sum())}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cluster_run(corpus: Path, out: Path, memory: str, partition_mb: int, components: str = "auto") -> dict:
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
        with PeakMemory() as driver:
            summary = gpucurate.run([str(corpus)], out, overrides={"run.progress": False, "semantic.enabled": False,
                                                                   "run.scheduler": address, "output.overwrite": True,
                                                                   "input.partition_bytes": partition_mb << 20,
                                                                   "fuzzy.components": components})
            seconds = time.perf_counter() - start
        stop = True
        sampler.join()
        client.close()
        fuzzy = summary["stages"]["fuzzy"]
        return {"seconds": round(seconds, 1), "worker_peak_mib": [round(p / 2**20) for p in peaks.values()],
                "driver_peak_mib": round(driver.mib), "driver_rss_mib": round(driver.peak / 2**20),
                "fuzzy_lsh": fuzzy.get("lsh", "driver"), "components": fuzzy.get("components", "driver"),
                "documents": summary["documents_in"], "kept": summary["documents_kept"],
                "partitions": summary["stages"]["input"]["partitions"],
                "mb_per_s_per_core": round(summary["stages"]["input"]["text_bytes"] / 1e6 / seconds / 2, 2),
                **ground_truth_scores(out)}
    finally:
        stop_processes(procs)
        log.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--factors", type=int, nargs="*", default=[1, 10, 100],
                    help="in-process runs at these multiples of the Reuters text size (19.4 MB)")
    ap.add_argument("--cluster-gb", type=float, help="run a corpus of this many GB on a 2-worker cluster")
    ap.add_argument("--cluster-factor", type=int, help="run the corpus of this factor on the cluster too")
    ap.add_argument("--driver-factors", type=int, nargs="*", default=[],
                    help="cluster runs at these factors: the driver's peak memory as the corpus grows")
    ap.add_argument("--worker-memory", default="2GB")
    ap.add_argument("--partition-mb", type=int, default=16, help="input.partition_bytes of every run (MB)")
    ap.add_argument("--cluster-components", default="auto", choices=["auto", "driver", "dask"])
    ap.add_argument("--keep", metavar="DIR", help="write the corpora here and keep them")
    ap.add_argument("--out", default="benchmarks/results/scale.json")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("gpucurate").setLevel(logging.INFO)
    cores = os.cpu_count() or 1
    rows, results = [], {"cores": cores}
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="gpucurate-scale-"))
    overrides = {"run.progress": False, "semantic.enabled": False}
    try:
        warm = root / "warm"
        if not warm.exists():
            write_corpus(warm, 2_000_000, seed=1, progress=False)
        gpucurate.run([str(warm)], root / "warm-out", overrides={**overrides, "output.overwrite": True})
        for factor in args.factors:
            corpus = root / f"x{factor}"
            t = time.perf_counter()
            info = write_corpus(corpus, factor * REUTERS_TEXT_BYTES) if not corpus.exists() else None
            generate_s = time.perf_counter() - t
            timing: dict = {}
            out = root / f"out-x{factor}"
            with timed(timing, "run"):
                summary = gpucurate.run([str(corpus)], out, overrides={
                    **overrides, "output.overwrite": True, "input.partition_bytes": args.partition_mb << 20})
            # throughput from the pipeline's wall time; report.html (about 1 s whatever the size) comes after
            seconds = summary["wall_time_s"]
            docs, nbytes = summary["documents_in"], summary["stages"]["input"]["text_bytes"]
            rows.append({"size": f"{factor}x Reuters", "documents": docs, "text_mb": round(nbytes / 1e6, 1),
                         "partitions": summary["stages"]["input"]["partitions"],
                         "seconds": round(seconds, 2), "with_report_s": timing["run"]["seconds"],
                         "docs_per_s_per_core": round(docs / seconds / cores, 1),
                         "mb_per_s_per_core": round(nbytes / 1e6 / seconds / cores, 2),
                         "peak_mib": timing["run"]["peak_mib"], "kept": summary["documents_kept"],
                         **ground_truth_scores(out), "generate_s": round(generate_s, 1) if info else None})
            print(rows[-1], file=sys.stderr)
            if factor != args.cluster_factor:
                shutil.rmtree(out, ignore_errors=True)
        if rows:
            print_table(rows, list(rows[0]), f"gpucurate run (exact + fuzzy) as the corpus grows, {cores} cores")
            best = max(r["mb_per_s_per_core"] for r in rows)
            results["sizes"] = rows
            results["throughput_ratio_to_best"] = [round(r["mb_per_s_per_core"] / best, 3) for r in rows]
        if args.cluster_gb or args.cluster_factor:
            if args.cluster_gb:
                corpus = root / f"gb{args.cluster_gb:g}"
                if not corpus.exists():
                    write_corpus(corpus, int(args.cluster_gb * 1e9))
            else:
                corpus = root / f"x{args.cluster_factor}"
            c = cluster_run(corpus, root / "out-cluster", args.worker_memory, args.partition_mb,
                            args.cluster_components)
            c.update({"corpus": corpus.name, "worker_memory": args.worker_memory, "partition_mb": args.partition_mb})
            if args.cluster_factor and not args.cluster_gb:
                c["identical_to_in_process"] = _same_annotations(root / f"out-x{args.cluster_factor}",
                                                                 root / "out-cluster")
            results["cluster"] = c
            print_table([c], [k for k in c if not isinstance(c[k], list)] + ["worker_peak_mib"],
                        "the same pipeline on dask scheduler + 2 dask workers")
        if args.driver_factors:
            results["driver_scale"] = driver_scale(root, args.driver_factors, args.worker_memory, args.partition_mb,
                                                   args.cluster_components)
        write_json(results, args.out)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


def driver_scale(root: Path, factors: list[int], memory: str, partition_mb: int, components: str) -> list[dict]:
    """One cluster run per factor; the driver's peak (above its level before the run, and its whole RSS)
    and the growth of the former per document from the run before. The driver is this process, already
    warm, so the peak above entry counts what a run adds, not the imports."""
    rows = []
    for factor in factors:
        corpus = root / f"x{factor}"
        if not corpus.exists():
            write_corpus(corpus, factor * REUTERS_TEXT_BYTES)
        c = cluster_run(corpus, root / f"out-driver-x{factor}", memory, partition_mb, components)
        row = {"size": f"{factor}x Reuters", "documents": c["documents"], "partitions": c["partitions"],
               "seconds": c["seconds"], "driver_peak_mib": c["driver_peak_mib"], "driver_rss_mib": c["driver_rss_mib"],
               "worker_peak_mib": max(c["worker_peak_mib"]) if c["worker_peak_mib"] else None}
        if rows:
            grown = (row["driver_peak_mib"] - rows[-1]["driver_peak_mib"]) * 2**20
            row["driver_bytes_per_added_doc"] = round(grown / max(1, row["documents"] - rows[-1]["documents"]))
        rows.append(row)
        print(row, file=sys.stderr)
        shutil.rmtree(root / f"out-driver-x{factor}", ignore_errors=True)
    print_table(rows, list(rows[-1]), "the driver's peak memory on dask scheduler + 2 dask workers")
    return rows


def _same_annotations(a: Path, b: Path) -> bool:
    cols = ["id", "dedup_id", "keep", "drop_stage", "similarity", "cluster_size"]
    left = pd.read_parquet(a / "annotations", columns=cols).sort_values("id", ignore_index=True)
    right = pd.read_parquet(b / "annotations", columns=cols).sort_values("id", ignore_index=True)
    return bool(left.equals(right))


if __name__ == "__main__":
    main()
