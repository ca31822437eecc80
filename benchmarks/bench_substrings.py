"""The exact-substring stage against a suffix array: the CLI as a user runs it and a pydivsufsort baseline,
each its own process from spawn to exit, on the same corpus, with their spans compared.

Corpus: the Reuters-21578 bodies (19,043 non-empty) enlarged ``factor`` times (``common.enlarge``: copies
with 2% of the words replaced, shuffled), as JSON Lines ``{"id": i, "text": ...}``.

* gpucurate: ``python -m gpucurate run --input IN --output OUT --set substrings.enabled=true --set
  fuzzy.enabled=false --set semantic.enabled=false --set exact.enabled=false --set
  substrings.min_doc_chars=0 -q``, with ``substrings.min_tokens`` and ``substrings.keep`` as given. The
  exact stage is off so that every document counts (exact duplicates would otherwise leave the kept set)
  and both sides see the same unit sequence; ``min_doc_chars=0`` so that no document is dropped.
* the same run with ``substrings.enabled=false``: the wall-clock cost of the stage is the difference.
* the baseline: ``python -c DRIVER IN SPANS k keep unit`` reads the same JSON Lines (pyarrow), calls
  ``gpucurate.stages.substrings.suffix_array_spans`` (pydivsufsort's suffix array and LCP array over the
  same units, numbered by their hash) and writes its spans to a Parquet file.

All three under GNU time (peak RSS of the process tree, ``%M``). One untimed small run of each first, so
that the kernels are compiled and cached as on a user's second call.

Spans: gpucurate's ``annotations/part-*.parquet`` (``substring_spans``, ``removed_spans``: flat byte
ranges, null for none), in input order, against the baseline's repeated and removable ranges (with
substrings the only stage that removes, ``removed_spans`` are its cuts): ``identical`` and the documents
that differ.

Targets, printed under the table: the speedup over the baseline on 10x Reuters (>= 3x, end to end), and
the stage's MB of text per second per core (>= 20): text bytes / (``timings_s["substrings"]`` +
``stats["read_seconds"]``) / cores, where ``read_seconds`` (units and window keys in the read pass) is
summed over the partition tasks (CPU time, not wall); and, wall clock, text bytes / (run wall - the run
without substrings) / cores.

Memory: ``--budgets LIMIT:PARTITION ...`` runs the largest corpus again under each ``run.memory_limit`` and
``input.partition_bytes``, with its peak RSS and its spans compared with the baseline's.

    python benchmarks/bench_substrings.py [--factors 1 10] [--budgets 1GB:67108864 300MB:16777216]
        [--out benchmarks/results/bench_substrings.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import enlarge, print_table, reuters_bodies, time_command, write_json  # noqa: E402

GPUCURATE = [sys.executable, "-m", "gpucurate", "run"]
SETTINGS = ["--set", "fuzzy.enabled=false", "--set", "semantic.enabled=false", "--set", "exact.enabled=false",
            "--set", "substrings.min_doc_chars=0", "-q"]

#: the baseline's process: read the JSON Lines, suffix_array_spans, write the spans (argv: IN OUT k keep unit)
DRIVER = """
import sys
import pyarrow as pa, pyarrow.json as pj, pyarrow.parquet as pq
from gpucurate.stages.substrings import suffix_array_spans
src, out, k, keep, unit = sys.argv[1:]
texts = pj.read_json(src).column("text").to_pylist()
spans = suffix_array_spans(texts, int(k), keep, unit == "char")
ranges = pa.list_(pa.int64())
pq.write_table(pa.table({"repeated": pa.array([s[0] for s in spans], ranges),
                         "removable": pa.array([s[1] for s in spans], ranges)}), out)
"""


def write_corpus(path: Path, texts: list[str]) -> dict:
    text_bytes = 0
    with open(path, "w", encoding="utf-8") as fh:
        for i, text in enumerate(texts):
            text_bytes += len(text.encode("utf-8"))
            fh.write(json.dumps({"id": i, "text": text}) + "\n")
    return {"documents": len(texts), "text_bytes": text_bytes}


def run_gpucurate(src: Path, out: Path, k: int, keep: str, substrings: bool, extra: tuple = ()) -> dict:
    cmd = [*GPUCURATE, "--input", str(src), "--output", str(out), "--set",
           f"substrings.enabled={'true' if substrings else 'false'}", "--set", f"substrings.min_tokens={k}",
           "--set", f"substrings.keep={keep}", *SETTINGS, *(x for setting in extra for x in ("--set", setting))]
    result = time_command(cmd)
    result["summary"] = json.loads((out / "summary.json").read_text())
    result["command"] = " ".join(cmd)
    return result


def run_baseline(src: Path, out: Path, k: int, keep: str, unit: str) -> dict:
    cmd = [sys.executable, "-c", DRIVER, str(src), str(out), str(k), keep, unit]
    result = time_command(cmd)
    result["command"] = f"{sys.executable} -c DRIVER {src} {out} {k} {keep} {unit}"
    return result


def compare(run: Path, baseline: Path, n: int) -> dict:
    """gpucurate's spans in input order against the baseline's: identical, and the documents that differ."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    parts = sorted((run / "annotations").glob("part-*.parquet"))
    got = pa.concat_tables([pq.read_table(p, columns=["id", "substring_spans", "removed_spans"]) for p in parts])
    got = got.sort_by("id")
    ref = pq.read_table(baseline)
    if got.num_rows != n or got.column("id").to_pylist() != list(range(n)):
        return {"identical": False, "documents_differing": n, "note": "documents missing or not in input order"}
    differ = set()
    for ours, theirs in (("substring_spans", "repeated"), ("removed_spans", "removable")):
        a, b = got.column(ours).to_pylist(), ref.column(theirs).to_pylist()
        differ |= {i for i, (x, y) in enumerate(zip(a, b)) if (x or []) != (y or [])}
    return {"identical": not differ, "documents_differing": len(differ)}


def measure(tmp: Path, factor: int, texts: list[str], k: int, keep: str, unit: str, cores: int,
            budgets: list[str] = ()) -> dict:
    src = tmp / f"x{factor}.jsonl"
    corpus = write_corpus(src, enlarge(texts, factor))
    on = run_gpucurate(src, tmp / f"x{factor}-on", k, keep, True)
    print(f"x{factor}: gpucurate {on['seconds']} s, {on['peak_rss_mib']} MiB", file=sys.stderr, flush=True)
    off = run_gpucurate(src, tmp / f"x{factor}-off", k, keep, False)
    print(f"x{factor}: gpucurate without substrings {off['seconds']} s", file=sys.stderr, flush=True)
    base = run_baseline(src, tmp / f"x{factor}-sa.parquet", k, keep, unit)
    print(f"x{factor}: suffix array {base['seconds']} s, {base['peak_rss_mib']} MiB", file=sys.stderr, flush=True)
    same = compare(tmp / f"x{factor}-on", tmp / f"x{factor}-sa.parquet", corpus["documents"])
    summary = on["summary"]
    stats = {key: v for key, v in summary["stages"]["substrings"].items() if key != "top_spans"}
    kept = summary["documents_kept"]
    stage_cpu = summary["timings_s"]["substrings"] + stats["read_seconds"]
    stage_wall = on["seconds"] - off["seconds"]
    mb = corpus["text_bytes"] / 1e6
    row = {"corpus": f"Reuters x{factor}", "documents": corpus["documents"], "counted": kept,
           "text_mb": round(mb, 1), "gpucurate_s": on["seconds"], "gpucurate_rss_mib": on["peak_rss_mib"],
           "substrings_off_s": off["seconds"], "suffix_array_s": base["seconds"],
           "suffix_array_rss_mib": base["peak_rss_mib"], "speedup": round(base["seconds"] / on["seconds"], 2),
           **same,
           "stage_s": round(stage_cpu, 2), "stage_mb_s_core": round(mb / stage_cpu / cores, 1),
           "stage_wall_s": round(stage_wall, 2),
           "wall_mb_s_core": round(mb / stage_wall / cores, 1) if stage_wall > 0 else None,
           "collect_s": summary["timings_s"]["substrings"], "read_seconds": stats["read_seconds"],
           "timings_s": summary["timings_s"], "timings_s_off": off["summary"]["timings_s"],
           "run_wall_time_s": summary["wall_time_s"], "stats": stats,
           "commands": {"gpucurate": on["command"], "substrings_off": off["command"], "suffix_array": base["command"]}}
    for name in (f"x{factor}-on", f"x{factor}-off"):
        shutil.rmtree(tmp / name)
    row["budgets"] = []
    for budget in budgets:  # the same run under a memory budget and partition size, spans compared again
        limit, partition = budget.split(":")
        out = tmp / f"x{factor}-budget"
        run = run_gpucurate(src, out, k, keep, True, (f"run.memory_limit={limit}", f"input.partition_bytes={partition}"))
        row["budgets"].append({"memory_limit": limit, "partition_bytes": partition, "seconds": run["seconds"],
                               "peak_rss_mib": run["peak_rss_mib"],
                               **compare(out, tmp / f"x{factor}-sa.parquet", corpus["documents"])})
        print(f"x{factor}: budget {budget}: {run['seconds']} s, {run['peak_rss_mib']} MiB", file=sys.stderr, flush=True)
        shutil.rmtree(out)
    src.unlink()
    return row


def warm_up(tmp: Path, texts: list[str], k: int, keep: str, unit: str) -> None:
    """Untimed: the kernels compiled (or built ahead of time) and cached, as on a user's second call."""
    src = tmp / "warm.jsonl"
    write_corpus(src, texts[:500] * 2)
    run_gpucurate(src, tmp / "warm-on", k, keep, True)
    run_gpucurate(src, tmp / "warm-off", k, keep, False)
    run_baseline(src, tmp / "warm-sa.parquet", k, keep, unit)


def report(rows: list[dict], min_tokens: int, keep: str, cores: int) -> dict:
    """Print the table, the stage's stats and the targets (on the largest corpus); returns the targets."""
    shown = {"corpus": "corpus", "documents": "documents", "text_mb": "text MB", "gpucurate_s": "gpucurate s",
             "gpucurate_rss_mib": "peak RSS MiB", "suffix_array_s": "suffix array s",
             "suffix_array_rss_mib": "SA peak RSS MiB", "speedup": "speedup", "identical": "identical",
             "documents_differing": "docs differing", "substrings_off_s": "run w/o stage s",
             "stage_s": "stage s (CPU)", "stage_mb_s_core": "MB/s/core", "stage_wall_s": "stage s (wall)",
             "wall_mb_s_core": "MB/s/core (wall)"}
    print_table([{shown[key]: ("yes" if r[key] else "no") if key == "identical" else r[key] for key in shown}
                 for r in rows], list(shown.values()),
                f"exact substrings (min_tokens {min_tokens}, keep {keep}): gpucurate CLI against a "
                f"pydivsufsort suffix array, processes from spawn to exit, {cores} cores")
    stat_names = {"windows": "windows", "distinct_windows": "distinct", "repeated_windows": "repeated windows",
                  "repeated_window_occurrences": "their occurrences", "documents_touched": "docs touched",
                  "documents_changed": "docs changed", "repeated_bytes": "repeated bytes",
                  "removed_bytes": "removed bytes", "share_removed": "share removed", "buckets": "buckets"}
    stat_rows = [{"corpus": r["corpus"], **{name: r["stats"][key] for key, name in stat_names.items()},
                  "collect s": r["collect_s"], "read_seconds": r["read_seconds"]} for r in rows]
    print_table(stat_rows, list(stat_rows[0]), "the stage's stats (summary stages.substrings)")
    largest = max(rows, key=lambda r: r["documents"])
    targets = {"corpus": largest["corpus"], "speedup": largest["speedup"], "speedup_target": 3.0,
               "stage_mb_s_core": largest["stage_mb_s_core"], "wall_mb_s_core": largest["wall_mb_s_core"],
               "mb_s_core_target": 20.0, "identical": all(r["identical"] for r in rows)}
    if largest["budgets"]:
        budget_rows = [{"corpus": largest["corpus"], "run.memory_limit": b["memory_limit"],
                        "input.partition_bytes": b["partition_bytes"], "seconds": b["seconds"],
                        "peak RSS MiB": b["peak_rss_mib"], "spans identical": "yes" if b["identical"] else "no"}
                       for b in largest["budgets"]]
        print_table(budget_rows, list(budget_rows[0]), "the same run under a memory budget")
    print(f"targets on {targets['corpus']}: speedup over the suffix array {targets['speedup']}x (target >= 3x); "
          f"stage {targets['stage_mb_s_core']} MB/s per core from timings_s + read_seconds (CPU time summed "
          f"over tasks), {targets['wall_mb_s_core']} MB/s per core from the wall difference with substrings off "
          f"(target >= 20); spans identical: {targets['identical']}")
    return targets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--factors", type=int, nargs="+", default=[1, 10], help="corpus sizes (x Reuters)")
    ap.add_argument("--min-tokens", type=int, default=50, help="substrings.min_tokens (the window)")
    ap.add_argument("--keep", choices=["first", "none"], default="first", help="substrings.keep")
    ap.add_argument("--out", default="benchmarks/results/bench_substrings.json")
    ap.add_argument("--tmp", help="folder for the corpora and runs (default: a temporary one)")
    ap.add_argument("--budgets", nargs="*", default=[], metavar="LIMIT:PARTITION",
                    help="on the largest corpus, the run again with run.memory_limit=LIMIT and "
                         "input.partition_bytes=PARTITION (e.g. 1GB:67108864 300MB:16777216), spans compared")
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    unit = "word"  # substrings.unit null -> fuzzy.shingle, word by default
    texts, _ = reuters_bodies()
    rows = []
    with tempfile.TemporaryDirectory(dir=args.tmp) as d:
        tmp = Path(d)
        warm_up(tmp, texts, args.min_tokens, args.keep, unit)
        for factor in args.factors:
            budgets = args.budgets if factor == max(args.factors) else []
            rows.append(measure(tmp, factor, texts, args.min_tokens, args.keep, unit, cores, budgets))
    targets = report(rows, args.min_tokens, args.keep, cores)
    write_json({"benchmark": "bench_substrings", "date": time.strftime("%Y-%m-%d"), "cores": cores,
                "min_tokens": args.min_tokens, "keep": args.keep, "rows": rows, "targets": targets,
                "command": " ".join([Path(sys.executable).name, *sys.argv])}, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
