"""``output.columns: annotations``: part files of the input location and the annotation columns only, the
same annotations as ``all``; the string columns made by Arrow; what the readers of a run say about it."""

import json
import subprocess
import sys

import numpy as np
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


def test_read_back_gives_the_part_files_of_all(two_runs):
    """Each part file of the annotations run, read back from the inputs, is the part file ``all`` wrote."""
    from gpucurate.io.readback import RunRecords
    d, _, summaries = two_runs
    full = RunRecords(d / "all", summaries["all"]["config"], "test")
    slim = RunRecords(d / "annotations", summaries["annotations"]["config"], "test")
    assert slim.read_back and not full.read_back and len(slim.files) == len(full.files) > 3
    for a, b in zip(full.files, slim.files):
        assert slim.table(b).equals(full.table(a))
        assert slim.schema(b).names == full.schema(a).names
        assert pa.Table.from_batches(list(slim.batches(b, ["text", "keep"], 20_000))).equals(
            full.table(a, ["text", "keep"]))


def test_commands_that_need_the_texts_read_them_back(two_runs, tmp_path):
    from gpucurate.review.samples import sample_pairs, texts_of
    d, _, _ = two_runs
    for fmt in ("jsonl", "parquet"):
        for c in ("all", "annotations"):
            proc = _cli("export", "dataset", "--run", str(d / c), "--output", str(tmp_path / f"{c}.{fmt}"),
                        "--format", fmt, "--weight", "-q")
            assert proc.returncode == 0, proc.stderr
        names = sorted(p.name for p in (tmp_path / f"all.{fmt}").glob("part-*"))
        assert names and names == sorted(p.name for p in (tmp_path / f"annotations.{fmt}").glob("part-*"))
        for name in names:
            exported = [(tmp_path / f"{c}.{fmt}" / name).read_bytes() for c in ("all", "annotations")]
            assert exported[0] == exported[1]
    pairs = {c: sample_pairs(d / c, n=40) for c in ("all", "annotations")}
    assert len(pairs["all"]) and pairs["all"].equals(pairs["annotations"])
    ids = set(pairs["all"].id_a)
    assert texts_of(d / "annotations", ids, "test") == texts_of(d / "all", ids, "test") and len(ids)


def test_rethreshold_and_ingest_read_the_texts_back(tmp_path, demo_frame):
    from gpucurate.workflows.ingest import ingest_run
    from gpucurate.workflows.rethreshold import rethreshold
    write_jsonl(tmp_path / "in.jsonl", demo_frame.to_dict(orient="records"))
    for c in ("all", "annotations"):
        gpucurate.run([str(tmp_path / "in.jsonl")], tmp_path / c, overrides=Q + [
            "input.partition_bytes=100000", "semantic.enabled=false", f"output.columns={c}"])
    again = {c: rethreshold(tmp_path / c, ["fuzzy.threshold=0.5"], tmp_path / f"re-{c}")
             for c in ("all", "annotations")}
    assert again["annotations"]["stages"]["fuzzy"]["similarities_from_texts"] > 0  # read back from the inputs
    assert again["annotations"]["stages"]["fuzzy"] == again["all"]["stages"]["fuzzy"]
    assert _parts(tmp_path / "re-all").select(ANNOTATION_COLUMNS).equals(
        _parts(tmp_path / "re-annotations").select(ANNOTATION_COLUMNS))
    seeded = {c: ingest_run(tmp_path / f"re-{c}", tmp_path / f"state-{c}") for c in ("all", "annotations")}
    for key in ("documents_in", "new_documents", "new_canonicals", "new_aliases"):
        assert seeded["all"][key] == seeded["annotations"][key]


def test_changed_or_missing_inputs_are_refused(tmp_path, demo_frame):
    records = demo_frame.to_dict(orient="records")[:400]
    src, run = tmp_path / "in", tmp_path / "run"
    src.mkdir()
    write_jsonl(src / "a.jsonl", records[:200])
    write_jsonl(src / "b.jsonl", records[200:])
    # relative inputs, read back from another directory than the run's
    proc = subprocess.run([sys.executable, "-m", "gpucurate", "run", "-i", "in", "--output", "run", "-q",
                           "--set", "output.columns=annotations", "--set", "semantic.enabled=false"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert _cli("export", "dataset", "--run", str(run), "--output", str(tmp_path / "ok"), "-q").returncode == 0
    before = (src / "b.jsonl").read_bytes()
    (src / "b.jsonl").write_bytes(before.replace(b"e", b"E", 1))  # same size, new content and time
    for args in (["export", "dataset", "--run", str(run), "--output", str(tmp_path / "x")],
                 ["sample-pairs", "--run", str(run), "--out", str(tmp_path / "pairs.csv")],
                 ["report", "--run", str(run)]):
        proc = _cli(*args)
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "INFO" not in ln]
        assert proc.returncode == 1 and len(lines) == 1, (args, proc.stderr)
        assert "b.jsonl" in lines[0] and "changed since the run" in lines[0] and args[0] in lines[0]
    assert not (tmp_path / "x").exists()
    (src / "b.jsonl").unlink()
    proc = _cli("export", "dataset", "--run", str(run), "--output", str(tmp_path / "x"))
    assert proc.returncode == 1 and "b.jsonl: missing" in proc.stderr, proc.stderr


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
