"""Memory set by a budget, not by the corpus: the CLI as a user runs it (JSON Lines in, exact + fuzzy,
process start to exit) at several corpus sizes, with the default budget and with ``run.memory_limit``.

Corpus (own generator, fixed seed): Reuters-21578 bodies in groups of ``--group`` near-copies, each copy
with 2% of its words replaced, each group made from a distinct pseudo-source (30% of the body's words
replaced by words of that group), so that every document has the same number of near duplicates at every
size (N copies of the same sources would make the pairs grow as N squared). ``--factors 10 40`` is
about 10x and 40x the Reuters text.

Per size and budget: documents, MB of text, seconds (and against the first budget's run of the corpus:
``vs_first``), MB/s per core, peak RSS of the process (GNU time's ``%M``; the CLI runs one process with
threads), the bytes spilled, and whether the annotations, aliases, edges and run index are byte-identical
to the first budget's run of the same corpus. Each run starts after a ``sync``, so that it does not share
the disk with the writing back of the previous run's spilled files. The issue's speed check at x160 forces
the in-memory path with a budget above what it holds:

    python benchmarks/bench_outofcore.py --shape scattered --factors 160 --limits 20GB 1GB

    python benchmarks/bench_outofcore.py --factors 10 40 --limits default 1GB
    python benchmarks/bench_outofcore.py --factors 10 --limits default 200MB --out /tmp/ooc.json
    python benchmarks/bench_outofcore.py --shape scattered templated --factors 10 40 --limits default 1GB

``--partition-mb 256`` sets ``input.partition_bytes``: the part files' size. Under a small budget a partition
is read in pieces (the ``partitions`` column: part files / pieces), so the peak does not follow it:

    python benchmarks/bench_outofcore.py --shape scattered --factors 40 --limits default 1GB --partition-mb 256

``--shape`` (``write_corpus``): ``contiguous`` (the groups above, each group's copies next to each other),
``scattered`` (the copies of a source a corpus' length apart, the first round of sources Reuters' own
bodies, whose templated near-duplicates cluster across bodies) and ``templated`` (``--factors`` copies of
every body, scattered: the pair-heavy case).

``--cluster 2GB`` also runs each corpus on the command-line cluster: ``dask scheduler`` + two one-thread
``dask worker`` processes with that ``--memory-limit``, the CLI with ``--set run.scheduler=...`` and the
same partition size, the driver's peak RSS by GNU time (the command itself, not a warm benchmark process)
and each worker's peak sampled every 0.2 s (psutil, with its children). The warm-up corpus runs once on the
cluster first, unmeasured: the workers compile the kernels of the cluster's path that one process does not
call (a first run on a fresh install took 46 s where the next took 31 s).

    python benchmarks/bench_outofcore.py --factors 1 40 --limits default --cluster 2GB

``--repeat 10`` runs the CLI ten times in a row on the same cluster (a failed run is a row with its exit
code, and the benchmark exits 1): the pair-heavy check is

    python benchmarks/bench_outofcore.py --group 40 --factors 40 --limits default --cluster 2GB --repeat 10

``--profile`` adds, to each cluster run, where its workers' time went: per task function, the tasks, their
seconds of compute, of transfer and of spill, and when the first started and the last ended (the task
stream of a client attached to the scheduler; a table per run, and ``profile`` in the JSON row):

    python benchmarks/bench_outofcore.py --shape scattered --factors 40 --limits default --cluster 2GB --profile

Writes ``benchmarks/results/bench_outofcore.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import print_table, reuters_bodies, stop_processes, time_command, write_json  # noqa: E402



SHAPES = ("contiguous", "scattered", "templated")


def write_corpus(path: Path, factor: int, group: int = 10, edit: float = 0.02, source_edit: float = 0.3,
                 seed: int = 0, shape: str = "contiguous") -> dict:
    """``factor`` x the Reuters bodies as JSON Lines, in one of ``SHAPES``. Returns {"documents", "text_bytes"}.

    * ``contiguous``: groups of ``group`` near-copies (``edit`` of the words replaced) of distinct
      pseudo-sources (``source_edit`` of a body's words replaced by the group's), each group's copies next to
      each other;
    * ``scattered``: the same number of groups, the first round of sources the Reuters bodies themselves
      (their own templated near-duplicates cluster across bodies), each further round with half of every
      body's words redrawn; written copy-major, so a source's copies are a corpus' length apart, as a crawl's
      copies of a page come from different dumps;
    * ``templated``: ``factor`` near-copies of every Reuters body, copy-major: Reuters' templated clusters
      (earnings reports and the like) times ``factor``, the pair-heavy case."""
    texts, _ = reuters_bodies()
    words = [t.split() for t in texts]
    if shape == "contiguous":
        rng = np.random.default_rng(seed)
        n_groups = factor * len(texts) // group
        docs = text_bytes = 0
        with open(path, "w", encoding="utf-8") as fh:
            for g in range(n_groups):
                base = list(words[g % len(words)])
                for i in rng.choice(len(base), max(1, int(source_edit * len(base))), replace=False):
                    base[i] = f"s{g}x{rng.integers(1 << 20)}"
                for c in range(group):
                    text = _copy(base, edit, rng, "e")
                    fh.write(json.dumps({"id": f"{g}-{c}", "text": text}) + "\n")
                    docs += 1
                    text_bytes += len(text.encode())
        return {"documents": docs, "text_bytes": text_bytes}
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {SHAPES}")
    copies = factor if shape == "templated" else group
    n_groups = len(texts) if shape == "templated" else factor * len(texts) // group

    def source(g: int) -> list:  # made again for each copy: memory does not grow with the corpus
        base = list(words[g % len(words)])
        if g >= len(words):
            rng = np.random.default_rng((seed, g))
            for i in rng.choice(len(base), len(base) // 2, replace=False):
                base[i] = f"s{g}x{rng.integers(1 << 20)}"
        return base
    docs = text_bytes = 0
    with open(path, "w", encoding="utf-8") as fh:
        for c in range(copies):
            rng = np.random.default_rng((seed, c, n_groups))
            for g in range(n_groups):
                text = _copy(source(g), edit, rng, f"e{c}x")
                fh.write(json.dumps({"id": f"{g}-{c}", "text": text}) + "\n")
                docs += 1
                text_bytes += len(text.encode())
    return {"documents": docs, "text_bytes": text_bytes}


def _copy(base: list, edit: float, rng, tag: str) -> str:
    """``base`` with ``edit`` of its words (at least one) replaced by random tokens, as one text."""
    copy = list(base)
    for i in rng.choice(len(copy), max(1, int(round(edit * len(copy)))), replace=False):
        copy[i] = f"{tag}{rng.integers(1 << 30)}"
    return " ".join(copy)


def run_cli(src: Path, out: Path, limit: str | None, scheduler: str | None = None, check: bool = True,
            partition_bytes: int | None = None) -> dict:
    """``python -m gpucurate run`` under GNU time: seconds from spawn to exit, peak RSS, the summary; a failed
    run exits the benchmark, or with ``check=False`` gives ``{"exit_code", "error"}``."""
    cmd = [sys.executable, "-m", "gpucurate", "run", "--input", str(src), "--output", str(out), "-q",
           "--set", "semantic.enabled=false", "--set", "output.overwrite=true"]
    if partition_bytes is not None:
        cmd += ["--set", f"input.partition_bytes={partition_bytes}"]
    if limit is not None:
        cmd += ["--set", f"run.memory_limit={limit}"]
    if scheduler is not None:
        cmd += ["--set", f"run.scheduler={scheduler}"]
    os.sync()  # the previous run's spilled files are not still being written back while this one runs
    result = time_command(cmd, check)
    if "exit_code" not in result:
        result["summary"] = json.loads((out / "summary.json").read_text())
    return result


@contextmanager
def cluster(memory: str, folder: Path):
    """A ``dask scheduler`` and two one-thread ``dask worker`` processes with ``--memory-limit memory``;
    yields ``(address, peaks)``, ``peaks`` filled with each worker's peak RSS (MiB, with its children)."""
    import psutil
    dask_cli = shutil.which("dask") or str(Path(sys.executable).with_name("dask"))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    log = open(folder / "cluster.log", "w")
    procs = [subprocess.Popen([dask_cli, "scheduler", "--host", "127.0.0.1", "--port", str(port),
                               "--no-dashboard"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)]
    peaks: dict = {}
    stop = threading.Event()

    def sample():
        while not stop.wait(0.2):
            for k, proc in enumerate(procs[1:]):
                try:
                    tree = psutil.Process(proc.pid)
                    rss = sum(p.memory_info().rss for p in [tree, *tree.children(recursive=True)])
                except psutil.Error:
                    continue
                peaks[k] = max(peaks.get(k, 0), round(rss / 2**20))
    try:
        time.sleep(3)
        for k in range(2):
            procs.append(subprocess.Popen([dask_cli, "worker", address, "--nthreads", "1", "--memory-limit", memory,
                                           "--no-dashboard", "--local-directory", str(folder / f"worker{k}")],
                                          stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        from distributed import Client
        with Client(address, timeout="60s") as client:
            client.wait_for_workers(2, timeout=120)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        yield address, peaks
    finally:
        stop.set()
        stop_processes(procs)
        log.close()


@contextmanager
def task_streams(address: str | None):
    """``streams(since)``: the task stream of the cluster at ``address`` since ``since`` (``time.time()``),
    recorded from now on; with ``address`` None, a ``streams`` that gives None."""
    if address is None:
        yield lambda since: None
        return
    from distributed import Client
    with Client(address, timeout="60s") as client:
        client.get_task_stream()  # the scheduler records every task from here on
        yield lambda since: client.get_task_stream(start=since)


def task_profile(stream: list, since: float) -> list[dict]:
    """Per task function (``dask.utils.key_split`` of its key) of a cluster's task stream: its tasks, seconds of
    compute, transfer and spill (disk) summed over the workers, and when the first started and the last
    ended (seconds after ``since``), in the order they started."""
    from dask.utils import key_split
    kinds = {"compute": "compute_s", "transfer": "transfer_s", "disk-read": "spill_s", "disk-write": "spill_s"}
    rows: dict = {}
    for task in stream:
        row = rows.setdefault(key_split(task["key"]), {"function": key_split(task["key"]), "tasks": 0,
                                                       "compute_s": 0.0, "transfer_s": 0.0, "spill_s": 0.0,
                                                       "first_s": None, "last_s": None})
        row["tasks"] += 1
        for span in task["startstops"]:
            row[kinds.get(span["action"], "compute_s")] += span["stop"] - span["start"]
            first, last = span["start"] - since, span["stop"] - since
            row["first_s"] = first if row["first_s"] is None else min(row["first_s"], first)
            row["last_s"] = last if row["last_s"] is None else max(row["last_s"], last)
    out = sorted(rows.values(), key=lambda r: r["first_s"] if r["first_s"] is not None else 0.0)
    return [{k: round(v, 2) if isinstance(v, float) else v for k, v in r.items()} for r in out]


def _outputs(out: Path) -> dict:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.parquet"))}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--factors", type=int, nargs="+", default=[10, 40])
    p.add_argument("--limits", nargs="+", default=["default", "1GB"], help="run.memory_limit values; "
                                                                         "'default' leaves it unset")
    p.add_argument("--group", type=int, default=10, help="near copies a pseudo-source")
    p.add_argument("--shape", choices=SHAPES, nargs="+", default=["contiguous"],
                   help="where the near-copies are (write_corpus); templated: --factors copies of each body")
    p.add_argument("--partition-mb", type=int, default=None, help="input.partition_bytes in MB (default: "
                   "gpucurate's, 64 MB)")
    p.add_argument("--work", default=None, help="folder for the corpora and outputs (default: a temporary one)")
    p.add_argument("--cluster", metavar="MEMORY", help="also run each corpus on a 2-worker command-line cluster "
                                                         "with this --memory-limit per worker (e.g. 2GB)")
    p.add_argument("--repeat", type=int, default=1, help="runs in a row on the cluster, each a row")
    p.add_argument("--profile", action="store_true", help="where each cluster run's worker time went (task stream)")
    p.add_argument("--out", default="benchmarks/results/bench_outofcore.json")
    args = p.parse_args(argv)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    rows = []
    with tempfile.TemporaryDirectory(dir=args.work) as work:
        work = Path(work)
        # once, unmeasured: the first run after an install or an edit compiles the kernels it has not cached
        write_corpus(work / "warmup.jsonl", 1, args.group)
        run_cli(work / "warmup.jsonl", work / "out-warmup", None)
        for shape, factor in [(s, f) for s in args.shape for f in args.factors]:
            src = work / f"x{factor}.jsonl"
            corpus = write_corpus(src, factor, args.group, shape=shape) | {"shape": shape}
            reference = first_seconds = None
            runs = [(limit, None) for limit in args.limits] + ([("cluster", args.cluster)] if args.cluster else [])
            for limit, worker_memory in runs:
                out = work / f"out-x{factor}-{limit}"
                if worker_memory is None:
                    got = run_cli(src, out, None if limit == "default" else limit,
                                  partition_bytes=args.partition_mb and args.partition_mb << 20)
                    rows.append(_row(factor, limit, corpus, got, "", _outputs(out), reference, cores))
                    first_seconds = first_seconds or got["seconds"]
                    rows[-1]["vs_first"] = round(got["seconds"] / first_seconds, 2)
                    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
                else:
                    with cluster(worker_memory, work) as (address, peaks), \
                            task_streams(address if args.profile else None) as streams:
                        # unmeasured: the workers load (or compile) the kernels of the cluster's path
                        run_cli(work / "warmup.jsonl", work / "out-warmup", None, address, check=False)
                        for _ in range(args.repeat):  # the worker peaks are those of all runs so far
                            since = time.time()
                            got = run_cli(src, out, None, address, check=False,
                                          partition_bytes=args.partition_mb and args.partition_mb << 20)
                            workers = " / ".join(f"{peaks[k]:,}" for k in sorted(peaks))
                            files = _outputs(out) if "exit_code" not in got else {}
                            rows.append(_row(factor, f"cluster {worker_memory}", corpus, got, workers, files,
                                             reference, cores))
                            if first_seconds and "exit_code" not in got:
                                rows[-1]["vs_first"] = round(got["seconds"] / first_seconds, 2)
                            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
                            stream = streams(since)
                            if stream is not None:
                                rows[-1]["profile"] = task_profile(stream, since)
                                print_table(rows[-1]["profile"], ["function", "tasks", "compute_s", "transfer_s",
                                                                  "spill_s", "first_s", "last_s"],
                                            f"x{factor} {shape} on the cluster: {got['seconds']} s, worker time "
                                            "by task function (first_s, last_s: seconds after the command started)")
                reference = reference or _outputs(out)
                if out.name != f"out-x{factor}-{args.limits[0]}":
                    shutil.rmtree(out, ignore_errors=True)
    cols = ["corpus", "shape", "memory_limit", "documents", "text_mb", "partitions", "seconds", "vs_first",
            "mb_s_per_core", "peak_rss_mib",
            "worker_peaks_mib", "rss_per_text", "spilled_mb", "fuzzy_duplicates", "same_output", "exit_code"]
    print_table(rows, cols, f"gpucurate run on {cores} cores: peak RSS against the memory budget (the driver's "
                            "on a cluster)")
    on_cluster = [r for r in rows if r["memory_limit"].startswith("cluster") and not r["exit_code"]]
    failed = [r for r in rows if r["exit_code"]]
    if args.cluster:
        print(f"cluster runs: {len(on_cluster)} completed, {len(failed)} failed")
    growth = None
    corpora = sorted({r["documents"] for r in on_cluster})
    if len(corpora) > 1:  # the driver should hold nothing per document: its peak should not grow
        first = max((r for r in on_cluster if r["documents"] == corpora[0]), key=lambda r: r["peak_rss_mib"])
        last = max((r for r in on_cluster if r["documents"] == corpora[-1]), key=lambda r: r["peak_rss_mib"])
        growth = round((last["peak_rss_mib"] - first["peak_rss_mib"]) * 2**20 / (last["documents"] - first["documents"]))
        print(f"driver peak RSS growth on the cluster: {growth} bytes per added document "
              f"({first['corpus']} -> {last['corpus']})")
    write_json({"benchmark": "bench_outofcore", "date": time.strftime("%Y-%m-%d"), "cores": cores,
                "group": args.group, "rows": rows, "driver_growth_bytes_per_document": growth}, args.out)
    print(f"wrote {args.out}")
    return 1 if failed else 0


def _row(factor: int, limit: str, corpus: dict, got: dict, workers: str, files: dict, reference: dict | None,
         cores: int) -> dict:
    """One table row: a run of the CLI on the corpus ``x{factor}``; ``files`` its parquet outputs, compared
    with ``reference`` (the first run's on that corpus; None: this is the first)."""
    mb = corpus["text_bytes"] / 1e6
    failed = "exit_code" in got
    summary = got.get("summary") or {}
    memory = summary.get("memory") or {}
    return {"corpus": f"x{factor}", "shape": corpus["shape"], "memory_limit": limit, "documents": corpus["documents"],
            "text_mb": round(mb, 1), "seconds": got["seconds"],
            # the part files, and the pieces they were read in (under a small budget)
            "partitions": None if failed else "{partitions} / {read_pieces}".format(**summary["stages"]["input"]),
            "mb_s_per_core": None if failed else round(mb / got["seconds"] / cores, 2),
            "peak_rss_mib": got.get("peak_rss_mib"), "worker_peaks_mib": workers,
            "rss_per_text": None if failed else round(got["peak_rss_mib"] * 2**20 / corpus["text_bytes"], 2),
            "spilled_mb": round(memory.get("spilled_bytes", 0) / 1e6),
            "fuzzy_duplicates": summary["stages"]["fuzzy"]["duplicates"] if summary else None,
            "same_output": None if failed else files == (reference if reference is not None else files),
            "exit_code": got.get("exit_code", 0)}


if __name__ == "__main__":
    sys.exit(main())
