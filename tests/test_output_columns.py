"""``output.columns: annotations``: part files of the input location and the annotation columns only, the
same annotations as ``all``; the string columns made by Arrow; what the readers of a run say about it."""

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpucurate
from gpucurate.stages.annotate import fixed3, stage_names

from conftest import ANNOTATION_COLUMNS, write_jsonl

Q = ["run.progress=false"]


def _parts(out) -> pa.Table:
    return pa.concat_tables([pq.read_table(p) for p in sorted((out / "annotations").glob("part-*.parquet"))],
                            promote_options="permissive")


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, demo_frame):
    """The demo corpus as two JSON Lines files and a Parquet file of several row groups, run with both
    ``output.columns``, with the paragraphs stage on (its texts are annotation columns) and small partitions."""
    d = tmp_path_factory.mktemp("columns")
    records = demo_frame.to_dict(orient="records")
    half = len(records) // 3
    (d / "in").mkdir()
    write_jsonl(d / "in" / "a.jsonl", records[:half])
    write_jsonl(d / "in" / "b.jsonl", records[half:2 * half])
    pq.write_table(pa.Table.from_pandas(demo_frame.iloc[2 * half:], preserve_index=False), d / "in" / "c.parquet",
                   row_group_size=100)
    common = Q + ["paragraphs.enabled=true", "input.partition_bytes=60000", "semantic.enabled=false"]
    summaries = {c: gpucurate.run([str(d / "in")], d / c, overrides=common + [f"output.columns={c}"])
                 for c in ("all", "annotations")}
    return d, records, summaries


def test_annotations_mode_writes_the_location_and_the_same_annotations(two_runs):
    d, records, summaries = two_runs
    full, slim = _parts(d / "all"), _parts(d / "annotations")
    assert slim.column_names == ["input_file", "input_row", *ANNOTATION_COLUMNS]
    assert full.select(ANNOTATION_COLUMNS).equals(slim.select(ANNOTATION_COLUMNS))
    assert summaries["all"]["documents_kept"] == summaries["annotations"]["documents_kept"]
    assert (slim.column("paragraph_text").null_count < slim.num_rows)  # made from the texts, read again
    # each row's location is the input record it annotates
    files = slim.column("input_file").to_pylist()
    rows = slim.column("input_row").to_pylist()
    texts = {}
    for name in ("a.jsonl", "b.jsonl"):
        texts[name] = [json.loads(line)["text"] for line in (d / "in" / name).read_text().splitlines()]
    texts["c.parquet"] = pq.read_table(d / "in" / "c.parquet").column("text").to_pylist()
    located = [texts[f.rsplit("/", 1)[-1]][r] for f, r in zip(files, rows)]
    assert located == full.column("text").to_pylist()
    assert sorted({f.rsplit("/", 1)[-1] for f in files}) == ["a.jsonl", "b.jsonl", "c.parquet"]
    assert all(f.startswith(str(d / "in")) for f in files)


def test_annotations_mode_is_smaller_and_has_no_input_column(two_runs):
    d, _, _ = two_runs
    size = {c: sum(p.stat().st_size for p in (d / c / "annotations").glob("*.parquet")) for c in ("all",
                                                                                                  "annotations")}
    assert size["annotations"] < size["all"] / 2
    assert "text" not in _parts(d / "annotations").column_names
    assert (d / "annotations" / "report.html").is_file()


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpucurate", *args], capture_output=True, text=True, timeout=300)


def test_commands_that_need_the_texts_refuse_an_annotations_run(two_runs, tmp_path):
    d, _, _ = two_runs
    proc = _cli("export", "dataset", "--run", str(d / "annotations"), "--output", str(tmp_path / "x"))
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert "output.columns=annotations" in lines[0] and "export dataset" in lines[0]
    assert not (tmp_path / "x").exists()
    proc = _cli("export", "dataset", "--run", str(d / "all"), "--output", str(tmp_path / "y"))
    assert proc.returncode == 0, proc.stderr


def test_fixed3_is_printf():
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.random(20000), np.arange(0, 33) / 16, np.arange(0, 2001) / 2000,
                             [0.0, 1.0, 0.9995, 0.0005, 0.00049999999999, 12.3456, -0.25, -0.0001, np.nan, np.inf]])
    assert fixed3(values).to_pylist() == ["%.3f" % v for v in values]


def test_stage_names_are_null_for_code_zero():
    codes = np.array([0, 1, 2, 3, 4, 5, 0], np.int8)
    assert stage_names(codes).to_pylist() == [None, "exact", "fuzzy", "semantic", "quality", "contamination", None]


def test_quality_reasons_format_each_rule_and_value(tmp_path):
    from gpucurate.stages.quality import RULES, QualityResult
    rule = np.array([0, 1, 0, -1, 1, 0], np.int16)
    value = np.array([3.0, 0.25, 3.0, 0.0, 0.123456, 7.5])
    limits = {key: 10.0 for _, _, key, _ in RULES}
    result = QualityResult(rule, value, limits)
    rows = np.flatnonzero(rule >= 0)
    expected = [f"quality: {RULES[rule[r]][0]} {value[r]:.4g} {RULES[rule[r]][3]} {RULES[rule[r]][2]} 10" for r in rows]
    assert result.reasons(rows).to_pylist() == expected


def test_summary_splits_read_and_write(two_runs):
    _, _, summaries = two_runs
    s = summaries["annotations"]
    assert set(s["step_seconds"]["read+normalize"]) == {"partition pass", "collect"}
    assert {"parts", "edges", "aliases", "run index", "report samples", "report"} <= set(s["step_seconds"]["write"])
    assert s["task_seconds"]["parse"] > 0 and s["task_seconds"]["normalize"] > 0
    assert s["task_seconds"]["fuzzy: minhash"] > 0
    assert sum(s["step_seconds"]["write"].values()) - s["step_seconds"]["write"]["report"] <= s["timings_s"][
        "write"] + 1e-3
