"""The whole run from process start to exit, against an earlier commit, and planning many small files.

Corpus: Reuters-21578 bodies enlarged ``--factor`` times (every body copied with 2% of its words replaced,
shuffled; ``common.enlarge``) as one JSON Lines file. The CLI runs exact + fuzzy (semantic off) as a user
runs it, under GNU time, for:

* ``baseline``: the commit ``--baseline`` (default ``HEAD~1``), checked out in a temporary worktree, with
  ``output.columns`` left at its default (``all``);
* ``all`` and ``annotations``: this tree with each ``output.columns``.

The three run interleaved ``--repeat`` times (medians; this machine is noisy) after one untimed run each
(numba's cache, the AOT kernels and the page cache warm). Reported per variant: wall seconds and the ratio
to the baseline, peak RSS, and from ``summary.json`` the MB/s per core of read+normalize, annotate and write
(text MB / stage seconds / cores). The annotation columns of the three are compared (identical expected),
and the ``all`` part files against the baseline's (identical data expected).

Planning: ``--small-files 5000 100000`` one-line JSON Lines files in one directory; reported the ``plan``
seconds of ``summary.json`` and the whole run.

    python benchmarks/bench_pipeline.py --factor 10 --repeat 5 --small-files 5000 100000
    python benchmarks/bench_pipeline.py --baseline 9dff2bc --small-files

Writes ``benchmarks/results/bench_pipeline.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import enlarge, print_table, reuters_bodies, time_command, write_json  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("read+normalize", "annotate", "write")


def write_corpus(path: Path, factor: int) -> dict:
    texts, _ = reuters_bodies()
    texts = enlarge(texts, factor)
    with open(path, "w", encoding="utf-8") as fh:
        for i, t in enumerate(texts):
            fh.write(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n")
    return {"documents": len(texts), "text_mb": round(sum(len(t.encode()) for t in texts) / 1e6, 1)}


def worktree(ref: str, where: Path) -> Path:
    """``ref`` checked out (detached) at ``where``: the baseline's source tree."""
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(where), ref], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return where


def command(src: Path, out: Path, columns: str | None, extra: list[str]) -> list[str]:
    cmd = [sys.executable, "-m", "gpucurate", "run", "--input", str(src), "--output", str(out), "-q",
           "--set", "output.overwrite=true", "--set", "semantic.enabled=false", *extra]
    return cmd + (["--set", f"output.columns={columns}"] if columns else [])


def timed_run(cmd: list[str], source: Path) -> dict:
    """``cmd`` with the package imported from ``source`` (a source tree), run from the filesystem root so that
    ``python -m`` finds no other tree first."""
    return time_command(cmd, env=dict(os.environ, PYTHONPATH=str(source)), cwd="/")


def annotation_columns(out: Path) -> "pa.Table":
    import pyarrow as pa
    import pyarrow.parquet as pq
    from gpucurate.config import ANNOTATION_COLUMNS
    parts = sorted((out / "annotations").glob("part-*.parquet"))
    return pa.concat_tables([pq.read_table(p, columns=list(ANNOTATION_COLUMNS)) for p in parts])


def same_data(a: Path, b: Path) -> bool:
    """Whether two runs' part files hold the same rows and columns (the files' bytes may differ)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def table(out):
        return pa.concat_tables([pq.read_table(p) for p in sorted((out / "annotations").glob("part-*.parquet"))])
    return table(a).equals(table(b))


def bench_corpus(args, work: Path, baseline_src: Path) -> list[dict]:
    src = work / f"reuters_{args.factor}x.jsonl"
    corpus = write_corpus(src, args.factor)
    variants = {"baseline": (baseline_src, None), "all": (ROOT, "all"), "annotations": (ROOT, "annotations")}
    runs: dict[str, list] = {name: [] for name in variants}
    summaries: dict[str, list] = {name: [] for name in variants}
    for k in range(args.repeat + 1):
        for name, (source, columns) in variants.items():
            out = work / f"out_{name}"
            print(f"[{args.factor}x] {name} run {k}{' (warm-up)' if k == 0 else ''} ...", file=sys.stderr)
            result = timed_run(command(src, out, columns, args.set), source)
            if k:
                runs[name].append(result)
                summaries[name].append(json.loads((out / "summary.json").read_text()))
    base_wall = statistics.median(r["seconds"] for r in runs["baseline"])
    reference = annotation_columns(work / "out_baseline")
    rows = []
    for name in variants:
        wall = statistics.median(r["seconds"] for r in runs[name])
        row = {"variant": name, "documents": corpus["documents"], "text_mb": corpus["text_mb"],
               "wall_s": round(wall, 2), "x_baseline": round(wall / base_wall, 3),
               "peak_rss_mib": max(r["peak_rss_mib"] for r in runs[name]),
               "runs_s": [r["seconds"] for r in runs[name]]}
        for step in STEPS:
            rates = [s["stages"]["input"]["text_bytes"] / 1e6 / s["timings_s"][step] / s["cores"]
                     for s in summaries[name] if s["timings_s"].get(step)]
            row[f"{step} MB/s/core"] = round(statistics.median(rates), 1) if rates else None
        # the read's own work by the task clock (this tree only): the stage's wall now also holds the exact
        # stage's text pass and the sketches, which the baseline made in its exact and fuzzy stages
        clocked = [s["stages"]["input"]["text_bytes"] / 1e6 / (s["task_seconds"]["parse"] + s["task_seconds"][
            "normalize"]) for s in summaries[name] if "task_seconds" in s]
        row["parse+normalize MB/s/core"] = round(statistics.median(clocked), 1) if clocked else None
        row["annotations identical"] = annotation_columns(work / f"out_{name}").equals(reference)
        if name == "all":
            row["all identical"] = same_data(work / "out_baseline", work / "out_all")
        row["stage_seconds"] = summaries[name][-1]["timings_s"]
        row["step_seconds"] = summaries[name][-1].get("step_seconds")
        rows.append(row)
    for row in rows:
        for step in STEPS:
            key = f"{step} MB/s/core"
            if rows[0][key] and row[key]:
                row[f"{step} x"] = round(row[key] / rows[0][key], 2)
    return rows


def bench_small_files(counts: list[int], work: Path) -> list[dict]:
    rows = []
    for n in counts:
        folder = work / f"small_{n}"
        folder.mkdir()
        for i in range(n):
            (folder / f"f{i:06d}.jsonl").write_text(json.dumps({"id": i, "text": f"document {i} of {n}"}) + "\n")
        out = work / f"out_small_{n}"
        print(f"[{n} files] ...", file=sys.stderr)
        result = timed_run(command(folder, out, None, ["--set", "fuzzy.enabled=false"]), ROOT)
        summary = json.loads((out / "summary.json").read_text())
        rows.append({"files": n, "plan_s": summary["timings_s"]["plan"], "wall_s": result["seconds"],
                     "peak_rss_mib": result["peak_rss_mib"]})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--factor", type=int, default=10, help="Reuters enlargement (default 10)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per variant, interleaved (default 3)")
    ap.add_argument("--baseline", default="HEAD~1", help="the commit to compare with (default HEAD~1)")
    ap.add_argument("--small-files", type=int, nargs="*", default=None, metavar="N",
                    help="also plan N one-line files (no number: 5000 100000)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="extra --set for every run (repeatable)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "bench_pipeline.json"))
    args = ap.parse_args(argv)
    args.set = [x for kv in args.set for x in ("--set", kv)]
    result: dict = {"factor": args.factor, "repeat": args.repeat, "baseline": args.baseline, "cores": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="bench_pipeline_") as tmp:
        work = Path(tmp)
        baseline_src = worktree(args.baseline, work / "baseline_src")
        try:
            result["runs"] = bench_corpus(args, work, baseline_src)
            print_table(result["runs"], ["variant", "documents", "text_mb", "wall_s", "x_baseline", "peak_rss_mib",
                                         *(f"{s} MB/s/core" for s in STEPS), "parse+normalize MB/s/core",
                                         *(f"{s} x" for s in STEPS), "annotations identical", "all identical"],
                        f"{args.factor}x Reuters, CLI start to exit (median of {args.repeat})")
            if args.small_files is not None:
                result["small_files"] = bench_small_files(args.small_files or [5000, 100000], work)
                print_table(result["small_files"], ["files", "plan_s", "wall_s", "peak_rss_mib"], "many small files")
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(baseline_src)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    write_json(result, args.out)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
