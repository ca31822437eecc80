"""rethreshold vs a full run at the new threshold: time ratio and identical output.

* Reuters-21578 (all 21,578 records, fuzzy only): a full run at fuzzy.threshold 0.7 collects the edges;
  rethreshold to 0.8 and 0.9 is compared with full runs at those thresholds (same LSH bands x rows).
* Reuters subset with the semantic stage (``--semantic-docs``, default 1500): a full run at semantic
  threshold 0.85, rethresholded to 0.9, against a full run at 0.9 that embeds again.

Outputs are identical when every record's annotation columns are equal. ``ratio`` is rethreshold time
over the full run's time (both wall clock around the call, report.html included);
``ratio_without_report`` is the one ``summary.json`` records (both without writing report.html).

    python benchmarks/bench_rethreshold.py [--semantic-docs 1500] [--out benchmarks/results/rethreshold.json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REUTERS, print_table, write_json  # noqa: E402

import gpucurate  # noqa: E402
from gpucurate.workflows.rethreshold import rethreshold  # noqa: E402

BASE = {"run.progress": False, "input.text_field": "body", "input.id_field": "newid"}


def annotations(out: Path):
    return pq.read_table(out / "annotations").sort_by("doc_id").to_pandas()


def timed_run(src, out, overrides) -> tuple[dict, float]:
    start = time.perf_counter()
    summary = gpucurate.run([str(src)], out, overrides=overrides)
    return summary, time.perf_counter() - start


def compare(tmp: Path, src, name: str, collect: dict, targets: list[dict], pin_lsh: bool) -> list[dict]:
    base, base_s = timed_run(src, tmp / f"{name}-collect", collect)
    rows = []
    for k, target in enumerate(targets):
        start = time.perf_counter()
        redo = rethreshold(tmp / f"{name}-collect", target, output=tmp / f"{name}-re{k}")
        re_s = time.perf_counter() - start
        pin = {"fuzzy.bands": base["lsh"]["bands"], "fuzzy.rows": base["lsh"]["rows"]} if pin_lsh else {}
        ref, ref_s = timed_run(src, tmp / f"{name}-full{k}", {**collect, **target, **pin})
        identical = annotations(tmp / f"{name}-re{k}").equals(annotations(tmp / f"{name}-full{k}"))
        change = ", ".join(f"{key} {collect.get(key)} -> {v}" for key, v in target.items())
        rows.append({"corpus": name, "documents": base["documents_in"], "change": change,
                     "kept_before": base["documents_kept"], "kept_after": redo["documents_kept"],
                     "full_run_s": round(ref_s, 2), "rethreshold_s": round(re_s, 3),
                     "ratio": round(re_s / ref_s, 4), "identical": identical,
                     "exact_flag": redo["rethreshold"]["exact"],
                     "ratio_without_report": redo["rethreshold"]["time_ratio"],
                     "collect_run_s": round(base_s, 2)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--semantic-docs", type=int, default=1500, help="Reuters documents for the semantic case (0: skip)")
    ap.add_argument("--out", default="benchmarks/results/rethreshold.json")
    args = ap.parse_args()
    if not REUTERS.is_file():
        raise SystemExit(f"benchmark data not found: {REUTERS}")
    rows = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        gpucurate.run([str(REUTERS)], tmp / "warm", overrides={**BASE, "semantic.enabled": False})  # JIT, caches
        fuzzy = {**BASE, "semantic.enabled": False, "fuzzy.threshold": 0.7}
        rows += compare(tmp, REUTERS, "reuters", fuzzy, [{"fuzzy.threshold": 0.8}, {"fuzzy.threshold": 0.9}], True)
        if args.semantic_docs:
            subset = tmp / "subset.jsonl"
            with gzip.open(REUTERS, "rt", encoding="utf-8") as fh, subset.open("w", encoding="utf-8") as out:
                kept = 0
                for line in fh:
                    if kept == args.semantic_docs:
                        break
                    if json.loads(line).get("body"):
                        out.write(line)
                        kept += 1
            sem = {**BASE, "semantic.enabled": True, "semantic.threshold": 0.85}
            rows += compare(tmp, subset, f"reuters-{args.semantic_docs}+semantic", sem,
                            [{"semantic.threshold": 0.9}], True)
    print_table(rows, ["corpus", "documents", "change", "kept_before", "kept_after", "full_run_s", "rethreshold_s",
                       "ratio", "ratio_without_report", "identical", "exact_flag"], "rethreshold vs full run")
    write_json({"rows": rows}, args.out)


if __name__ == "__main__":
    main()
