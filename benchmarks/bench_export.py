"""``export dataset`` at several corpus sizes: memory set by a part file, not by the run.

Corpus: the Reuters-21578 bodies enlarged ``factor`` times (``common.enlarge``: copies with 2% of the words
replaced, shuffled), each with one of three boilerplate footers as its last paragraph and two columns of
its own (``source``, ``n``), as JSON Lines. ``gpucurate run`` (exact + fuzzy + paragraphs, no semantic
stage) writes the run; then ``gpucurate export dataset`` writes the cleaned corpus in each ``--formats``
(Parquet zstd, JSON Lines zstd). Both are CLI processes as a user runs them, timed from spawn to exit,
peak RSS by GNU time (``%M``: the export is one process without children). One untimed export of a small
run first, so that the kernels are built and cached as on a user's second call.

Per size and format: documents in and out, MB of text in and out, part files, export seconds, MB/s of text
in, peak RSS of the export; the run's seconds and peak RSS for scale.

    python benchmarks/bench_export.py --factors 1 10 40 [--formats parquet jsonl] \
        [--out benchmarks/results/bench_export.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import enlarge, print_table, reuters_bodies, time_command, write_json  # noqa: E402

GPUCURATE = [sys.executable, "-m", "gpucurate"]
RUN_SETTINGS = ["--set", "semantic.enabled=false", "--set", "paragraphs.enabled=true", "-q"]
FOOTERS = ("This story was filed by the Reuters news desk. Reproduction without written permission is "
           "prohibited; all rights reserved.",
           "For corrections and questions about this report, contact the regional editor of the wire "
           "service by telephone.",
           "Prices and figures in this report are as of the close of trading and may have changed since "
           "publication.")
#: the format flags of each exported format
FORMATS = {"parquet": ["--format", "parquet", "--compression", "zstd"],
           "jsonl": ["--format", "jsonl", "--compression", "zstd"]}


def write_corpus(path: Path, factor: int) -> dict:
    """``factor`` x the Reuters bodies with a footer each, as JSON Lines; returns {"documents", "text_mb"}."""
    texts = enlarge(reuters_bodies()[0], factor)
    text_bytes = 0
    with open(path, "w", encoding="utf-8") as fh:
        for i, body in enumerate(texts):
            text = f"{body.strip()}\n\n{FOOTERS[i % len(FOOTERS)]}"
            text_bytes += len(text.encode())
            fh.write(json.dumps({"id": i, "text": text, "source": "reuters", "n": i % 97}) + "\n")
    return {"documents": len(texts), "text_mb": round(text_bytes / 1e6, 1)}


def export_cmd(run: Path, out: Path, fmt: str) -> list[str]:
    return [*GPUCURATE, "export", "dataset", "--run", str(run), "--output", str(out), *FORMATS[fmt],
            "--overwrite", "-q"]


def warm_up(tmp: Path) -> None:
    """One small run and export, untimed: the numba kernels compiled and built ahead of time, caches warm."""
    src = tmp / "warm.jsonl"
    src.write_text("".join(json.dumps({"id": i, "text": f"text {i}\n\n{FOOTERS[0]}"}) + "\n" for i in range(50)))
    time_command([*GPUCURATE, "run", "--input", str(src), "--output", str(tmp / "warm-run"), *RUN_SETTINGS])
    time_command(export_cmd(tmp / "warm-run", tmp / "warm-export", "parquet"))


def measure(tmp: Path, factor: int, formats: list[str]) -> list[dict]:
    """Rows of one corpus size: the run once, then one export per format."""
    src = tmp / f"x{factor}.jsonl"
    corpus = write_corpus(src, factor)
    run = tmp / f"x{factor}-run"
    run_result = time_command([*GPUCURATE, "run", "--input", str(src), "--output", str(run), *RUN_SETTINGS])
    src.unlink()  # the disk holds the run and one export at a time
    rows = []
    for fmt in formats:
        out = tmp / f"x{factor}-{fmt}"
        result = time_command(export_cmd(run, out, fmt))
        summary = json.loads((out / "export_summary.json").read_text())
        rows.append({"factor": factor, "format": f"{fmt} zstd", "documents_in": summary["documents_in"],
                     "documents_out": summary["documents_out"],
                     "text_mb_in": round(summary["text_bytes_in"] / 1e6, 1),
                     "text_mb_out": round(summary["text_bytes_out"] / 1e6, 1), "files": summary["files_written"],
                     "export_s": result["seconds"], "export_mb_per_s": round(summary["text_bytes_in"] / 1e6 /
                                                                             result["seconds"], 1),
                     "export_peak_rss_mib": result["peak_rss_mib"], "run_s": run_result["seconds"],
                     "run_peak_rss_mib": run_result["peak_rss_mib"], "corpus": corpus})
        shutil.rmtree(out)
    shutil.rmtree(run)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--factors", type=int, nargs="+", default=[1, 10, 40], help="corpus sizes (x Reuters)")
    ap.add_argument("--formats", nargs="+", choices=sorted(FORMATS), default=["parquet", "jsonl"])
    ap.add_argument("--out", default="benchmarks/results/bench_export.json")
    ap.add_argument("--tmp", help="folder for the corpora, runs and exports (default: a temporary one)")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(dir=args.tmp) as d:
        tmp = Path(d)
        warm_up(tmp)
        for factor in args.factors:
            rows += measure(tmp, factor, args.formats)
            print(f"x{factor}: " + "; ".join(f"{r['format']} {r['export_s']} s, {r['export_peak_rss_mib']} MiB"
                                             for r in rows if r["factor"] == factor), flush=True)
    print_table(rows, ["factor", "format", "documents_in", "documents_out", "text_mb_in", "text_mb_out", "files",
                       "export_s", "export_mb_per_s", "export_peak_rss_mib", "run_s", "run_peak_rss_mib"],
                "export dataset: CLI process, spawn to exit")
    write_json({"rows": rows, "command": " ".join(sys.argv)}, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
