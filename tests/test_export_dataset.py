"""``export dataset``: the kept documents with the user's columns and the text after every removal stage,
as Parquet or JSON Lines, streamed per part file, staged and atomic like a run's output."""

import datetime
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from conftest import read_annotations, write_jsonl
from test_output_safety import leftovers, snapshot
from test_paragraphs import DISCLAIMER, QA, corpus
import gpucurate.workflows.export_dataset as export_module
from gpucurate.cli import main
from gpucurate.errors import ArgumentError, ConfigError, OutputError
from gpucurate.io.writer import MARKER
from gpucurate.stages.cuts import cut_texts
from gpucurate.workflows.export_dataset import export_dataset, final_texts, input_format
from gpucurate.workflows.run import run

ROOT = Path(__file__).resolve().parents[1]
BASE = {"run.progress": False, "semantic.enabled": False}
USER = ["id", "text", "n", "meta"]


def records() -> list[dict]:
    """The paragraphs corpus with an int column (one null) and a nested one."""
    out = []
    for i, r in enumerate(corpus()):
        out.append(dict(r, n=None if i == 2 else i * 10, meta={"tags": ["t", str(i)], "depth": {"k": i}}))
    return out


@pytest.fixture(scope="module")
def paragraph_run(tmp_path_factory) -> Path:
    """A run with paragraphs.enabled over two JSON Lines files (several part files), weights by cluster size."""
    root = tmp_path_factory.mktemp("paragraphs")
    recs = records()
    files = [str(write_jsonl(root / "a.jsonl", recs[:4])), str(write_jsonl(root / "b.jsonl", recs[4:]))]
    run(files, root / "run", overrides={**BASE, "paragraphs.enabled": True, "output.weight": "size",
                                        "input.partition_bytes": 1024})
    assert len(part_names(root / "run")) >= 2
    return root / "run"


@pytest.fixture(scope="module")
def parquet_run(tmp_path_factory) -> Path:
    """A run of a Parquet file with timestamps, nested lists, null ints and a user column named ``weight``
    (annotation columns prefixed ``gc_``)."""
    root = tmp_path_factory.mktemp("parquet")
    n = 30
    table = pa.table({
        "id": pa.array([f"d{i}" for i in range(n)]),
        "text": pa.array([f"document {i % 10} about topic {i % 10} with several words in it" for i in range(n)]),
        "count": pa.array([None if i % 4 == 0 else i for i in range(n)], pa.int64()),
        "at": pa.array([datetime.datetime(2024, 1, 1, 12, 30, i % 60) for i in range(n)], pa.timestamp("us")),
        "tags": pa.array([[f"t{i}", None] if i % 3 else None for i in range(n)], pa.list_(pa.string())),
        "weight": pa.array([i / 10 for i in range(n)]),
    })
    pq.write_table(table, root / "in.parquet")
    run([str(root / "in.parquet")], root / "run", overrides={**BASE, "output.annotation_prefix": "gc_"})
    return root / "run"


def part_names(run_dir: Path, suffix: str = ".parquet") -> list[str]:
    """The names of the files an export of ``run_dir`` writes, one per part file of the run."""
    return [p.name.replace(".parquet", suffix) for p in sorted((run_dir / "annotations").glob("part-*.parquet"))]


def exported(out: Path) -> pd.DataFrame:
    """The rows of an export directory's part files (any format), in file order."""
    frames = []
    for path in sorted(out.glob("part-*")):
        if path.suffix == ".parquet":
            frames.append(pq.read_table(path).to_pandas())
        else:
            frames.append(pd.DataFrame(read_json_lines(path)))
    return pd.concat(frames, ignore_index=True)


def read_json_lines(path: Path) -> list[dict]:
    raw = path.read_bytes()
    if path.name.endswith(".gz"):
        raw = gzip.decompress(raw)
    elif path.name.endswith(".zst"):
        raw = zstandard.ZstdDecompressor().stream_reader(raw).read()
    return [json.loads(line) for line in raw.decode("utf-8").splitlines()]


def cli(*args: str) -> subprocess.CompletedProcess:
    """``python -m gpucurate ARGS`` in a subprocess."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "gpucurate", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def one_line_error(proc: subprocess.CompletedProcess, code: int, *needles) -> None:
    assert proc.returncode == code, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("gpucurate: error:"), proc.stderr
    for needle in needles:
        assert str(needle) in lines[0], (needle, lines[0])


# --- content ---------------------------------------------------------------------------------------

def test_only_kept_documents_with_the_user_columns_and_the_cut_text(paragraph_run, tmp_path):
    summary = export_dataset(paragraph_run, tmp_path / "clean", progress=False)
    ann = read_annotations(paragraph_run).set_index("doc_id")
    kept = ann[ann.keep]
    got = exported(tmp_path / "clean").set_index("id", drop=False)
    assert list(got.columns) == USER  # no annotation column, no original text, no weight
    assert sorted(got.index) == sorted(kept.index) == [1, 2, 3, 6, 7]  # 4: nothing left; 5: exact copy of 1
    by_id = {r["id"]: r for r in records()}
    for doc_id, row in got.iterrows():
        assert (None if pd.isna(row.n) else row.n) == by_id[doc_id]["n"]
        assert {"tags": list(row.meta["tags"]), "depth": row.meta["depth"]} == by_id[doc_id]["meta"]
    # the text is the original without removed_spans: for these documents, the paragraph stage's text
    expected = cut_texts(pa.array(kept.text.tolist()), pa.array(kept.removed_spans.tolist(), pa.list_(pa.int64())),
                         unchanged_null=False).to_pylist()
    assert got.loc[kept.index, "text"].tolist() == expected
    assert got.loc[2, "text"] == ann.loc[2, "paragraph_text"] == \
        "A different article about printers, toner and paper jams in offices."
    assert got.loc[3, "text"] == ann.loc[3, "paragraph_text"]
    assert QA not in got.loc[2, "text"] and DISCLAIMER not in got.loc[3, "text"]
    assert got.loc[1, "text"] == by_id[1]["text"]  # the first holder of the repeated paragraphs keeps them
    assert summary["files"] == part_names(paragraph_run) and summary["files_written"] == len(summary["files"])


def test_original_text_and_weight_only_on_request(paragraph_run, tmp_path):
    export_dataset(paragraph_run, tmp_path / "clean", original_text="original", weight=True, progress=False)
    got = exported(tmp_path / "clean").set_index("id", drop=False)
    ann = read_annotations(paragraph_run).set_index("doc_id")
    assert list(got.columns) == USER + ["original", "weight"]
    assert got.original.tolist() == ann.loc[got.index, "text"].tolist()
    assert got.loc[2, "original"] != got.loc[2, "text"]
    assert got.weight.tolist() == ann.loc[got.index, "weight"].tolist()
    assert got.loc[1, "weight"] == 2.0  # output.weight=size: document 5 is its exact copy


def test_summary_counts_match_the_data(paragraph_run, tmp_path):
    summary = export_dataset(paragraph_run, tmp_path / "clean", fmt="jsonl", progress=False)
    ann = read_annotations(paragraph_run)
    got = exported(tmp_path / "clean")
    assert summary["documents_in"] == len(ann) == 7
    assert summary["documents_out"] == len(got) == int(ann.keep.sum())
    assert summary["text_bytes_in"] == sum(len(t.encode()) for t in ann.text)
    assert summary["text_bytes_out"] == sum(len(t.encode()) for t in got.text)
    assert summary["text_bytes_out"] < summary["text_bytes_in"]
    assert (summary["format"], summary["compression"]) == ("jsonl", "none")
    assert summary["source_run"] == json.loads((paragraph_run / "summary.json").read_text())
    assert json.loads((tmp_path / "clean" / "export_summary.json").read_text()) == summary
    assert (tmp_path / "clean" / MARKER).is_file()


def test_small_batches_give_the_same_files(paragraph_run, tmp_path, monkeypatch):
    """A part file read a row at a time (many record batches, many row groups) exports the same rows."""
    export_dataset(paragraph_run, tmp_path / "whole", weight=True, progress=False)
    monkeypatch.setattr(export_module, "BATCH_BYTES", 1)
    export_dataset(paragraph_run, tmp_path / "rows", weight=True, progress=False)
    export_dataset(paragraph_run, tmp_path / "rows.jsonl", fmt="jsonl", weight=True, progress=False)
    assert pq.ParquetFile(tmp_path / "rows" / "part-00000.parquet").metadata.num_row_groups > 1
    whole = exported(tmp_path / "whole")
    pd.testing.assert_frame_equal(exported(tmp_path / "rows"), whole)
    assert exported(tmp_path / "rows.jsonl")[["id", "text", "weight"]].equals(whole[["id", "text", "weight"]])


# --- formats ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt, compression, suffix", [("jsonl", None, ".jsonl"), ("jsonl", "gzip", ".jsonl.gz"),
                                                      ("jsonl", "zstd", ".jsonl.zst"), ("parquet", "snappy", ".parquet"),
                                                      ("parquet", "none", ".parquet")])
def test_formats_hold_the_same_rows(paragraph_run, tmp_path, fmt, compression, suffix):
    reference = export_dataset(paragraph_run, tmp_path / "ref", progress=False)
    summary = export_dataset(paragraph_run, tmp_path / "out", fmt=fmt, compression=compression, progress=False)
    assert sorted(p.name for p in (tmp_path / "out").glob("part-*")) == part_names(paragraph_run, suffix)
    assert summary["compression"] == (compression or "none")
    got, want = exported(tmp_path / "out"), exported(tmp_path / "ref")
    assert got.id.tolist() == want.id.tolist() and got.text.tolist() == want.text.tolist()
    assert summary["text_bytes_out"] == reference["text_bytes_out"]
    if fmt == "jsonl":  # the user's values round-trip: ints stay ints, nulls null, nested as objects
        rows = {r["id"]: r for path in sorted((tmp_path / "out").glob("part-*")) for r in read_json_lines(path)}
        by_id = {r["id"]: r for r in records()}
        for doc_id, row in rows.items():
            assert list(row) == USER
            assert row["n"] == by_id[doc_id]["n"] and row["meta"] == by_id[doc_id]["meta"]


def test_same_writes_the_run_input_format(paragraph_run, parquet_run, tmp_path):
    assert export_dataset(paragraph_run, tmp_path / "a", fmt="same", progress=False)["format"] == "jsonl"
    assert sorted(p.name for p in (tmp_path / "a").glob("part-*")) == part_names(paragraph_run, ".jsonl")
    assert export_dataset(parquet_run, tmp_path / "b", fmt="same", progress=False)["format"] == "parquet"


def test_input_format_of_older_runs_and_mixed_ones():
    config = {"input": {"format": "auto"}}
    assert input_format({"input_formats": ["parquet"], "config": config}) == "parquet"
    assert input_format({"inputs": ["x/a.jsonl.zst", "b*.ndjson"], "config": config}) == "jsonl"
    assert input_format({"inputs": ["data/"], "config": {"input": {"format": "parquet"}}}) == "parquet"
    with pytest.raises(ArgumentError, match=r"cannot tell the format the run read from its inputs \(data/\)"):
        input_format({"inputs": ["data/"], "config": config})
    with pytest.raises(ArgumentError, match="jsonl and parquet"):
        input_format({"input_formats": ["jsonl", "parquet"], "config": config})


def test_json_lines_keep_the_users_values(parquet_run, tmp_path):
    """Timestamps as ISO strings, ints with nulls as ints, lists with nulls, the prefixed run's own column
    ``weight`` as it was; the annotation ``gc_weight`` under ``weight`` would clash (exit 2)."""
    export_dataset(parquet_run, tmp_path / "out", fmt="jsonl", compression="gzip", progress=False)
    rows = read_json_lines(tmp_path / "out" / "part-00000.jsonl.gz")
    source = {r["id"]: r for r in pq.read_table(parquet_run.parent / "in.parquet").to_pylist()}
    ann = pq.read_table(parquet_run / "annotations").to_pandas()
    assert sorted(r["id"] for r in rows) == sorted(ann[ann.gc_keep].id)
    assert 0 < len(rows) < len(source)
    for row in rows:
        want = source[row["id"]]
        assert list(row) == ["id", "text", "count", "at", "tags", "weight"]
        assert row["at"] == want["at"].isoformat() and row["count"] == want["count"]
        assert row["tags"] == want["tags"] and row["weight"] == want["weight"] and row["text"] == want["text"]
    with pytest.raises(ArgumentError, match="--weight: the input already has a column named 'weight'"):
        export_dataset(parquet_run, tmp_path / "clash", weight=True, progress=False)
    assert not (tmp_path / "clash").exists()


def test_every_removal_stage_is_in_the_exported_text(tmp_path):
    """Contamination strip, paragraphs and substrings together: the exported text has all their ranges
    cut (``removed_spans`` is their union), and a text with only a strip equals the gate's stripped_text."""
    item = "the quick brown fox jumps over the lazy dog near the old river bank today"
    bench = write_jsonl(tmp_path / "bench.jsonl", [{"q": item}])
    shared = " ".join(f"shared{i}" for i in range(12))
    recs = [{"id": 0, "text": f"first words here. {shared} then the end of one."},
            {"id": 1, "text": f"second text opens. {shared} and {item} closes it well."},
            {"id": 2, "text": f"only the item: {item} and some more words after it to keep."}]
    src = write_jsonl(tmp_path / "in.jsonl", recs)
    run([str(src)], tmp_path / "run", overrides={
        **BASE, "exact.enabled": False, "fuzzy.enabled": False, "substrings.enabled": True,
        "substrings.min_tokens": 8, "substrings.min_doc_chars": 0, "contamination.benchmarks": [f"b={bench}:q"],
        "contamination.action": "strip", "contamination.strip_window": 0, "contamination.strip_min_chars": 0})
    export_dataset(tmp_path / "run", tmp_path / "clean", progress=False)
    ann = read_annotations(tmp_path / "run").sort_values("id")
    clean = pd.concat(pd.read_parquet(f) for f in sorted((tmp_path / "clean").glob("part-*.parquet"))).sort_values("id")
    assert ann.removed_spans.notna().tolist() == [False, True, True]
    for text in clean.text[1:]:
        assert "quick brown fox" not in text, text
    assert "shared3" in clean.text.iloc[0] and "shared3" not in clean.text.iloc[1]
    assert clean.text.iloc[2] == ann.stripped_text.iloc[2].strip().replace("  ", " ")
    assert final_texts(pa.array(["aaa bbb ccc"]).cast(pa.large_string()), pa.array([[0, 4]])).type == \
        pa.large_string()


# --- errors ----------------------------------------------------------------------------------------

def test_a_run_without_removed_spans_is_refused(paragraph_run, tmp_path):
    """A part file of an older gpucurate (no removed_spans annotation): a one-line error naming it, exit 1."""
    old = tmp_path / "run"
    shutil.copytree(paragraph_run, old)
    part = sorted((old / "annotations").glob("part-*.parquet"))[-1]
    pq.write_table(pq.read_table(part).drop_columns(["removed_spans"]), part)
    with pytest.raises(OutputError, match=f"{part}: no annotation column removed_spans"):
        export_dataset(old, tmp_path / "clean", progress=False)
    assert not (tmp_path / "clean").exists()


def test_an_incomplete_run_is_refused(paragraph_run, tmp_path):
    incomplete = tmp_path / "run"
    shutil.copytree(paragraph_run, incomplete)
    (incomplete / MARKER).unlink()
    proc = cli("export", "dataset", "--run", str(incomplete), "--output", str(tmp_path / "clean"))
    one_line_error(proc, 1, incomplete, MARKER, "not a complete gpucurate run", "export dataset")
    assert not (tmp_path / "clean").exists()


def test_argument_errors_exit_2(paragraph_run, tmp_path, capsys):
    out = str(tmp_path / "clean")
    one_line_error(cli("export", "dataset", "--run", str(paragraph_run), "-o", out, "--original-text", "meta"),
                   2, "--original-text", "'meta'")
    one_line_error(cli("export", "pgvector", "--run", str(paragraph_run)), 2, "export pgvector needs --dsn")
    for args, needle in ((["dataset", "-o", out, "--format", "jsonl", "--compression", "snappy"], "none, gzip, zstd"),
                         (["dataset", "-o", out, "--dsn", "postgresql://x"], "does not take --dsn"),
                         (["dataset"], "needs --output"),
                         (["pgvector", "--dsn", "postgresql://x", "--weight"], "does not take --weight")):
        assert main(["export", *args, "--run", str(paragraph_run), "-q"]) == 2, args
        assert needle in capsys.readouterr().err
    assert not (tmp_path / "clean").exists()


def test_progress_on_stderr_and_quiet(paragraph_run, tmp_path):
    proc = cli("export", "dataset", "--run", str(paragraph_run), "-o", str(tmp_path / "a"))
    assert proc.returncode == 0 and proc.stdout == "", proc.stderr
    assert "export: 7 documents in" in proc.stderr and "exported 5 of 7 documents" in proc.stderr
    proc = cli("export", "dataset", "--run", str(paragraph_run), "-o", str(tmp_path / "b"), "-q")
    assert proc.returncode == 0 and proc.stdout == "" and "export:" not in proc.stderr, proc.stderr


# --- atomic output ---------------------------------------------------------------------------------

def test_existing_output_needs_overwrite_and_is_then_replaced(paragraph_run, tmp_path):
    out = tmp_path / "clean"
    export_dataset(paragraph_run, out, progress=False)
    with pytest.raises(ConfigError, match="not empty.*--overwrite"):
        export_dataset(paragraph_run, out, fmt="jsonl", progress=False)
    assert sorted(p.name for p in out.glob("part-*")) == part_names(paragraph_run)
    export_dataset(paragraph_run, out, fmt="jsonl", overwrite=True, progress=False)
    assert sorted(p.name for p in out.glob("part-*")) == part_names(paragraph_run, ".jsonl")
    assert leftovers(out) == []
    with pytest.raises(ConfigError, match="also holds"):  # a run's directory is no export directory
        export_dataset(paragraph_run, paragraph_run, overwrite=True, progress=False)
    assert (paragraph_run / MARKER).is_file()


def test_a_killed_export_leaves_the_previous_output(paragraph_run, tmp_path):
    out = tmp_path / "clean"
    export_dataset(paragraph_run, out, progress=False)
    before = snapshot(out)
    env = dict(os.environ, GPUCURATE_FAILPOINT="export-part-written",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    args = ["export", "dataset", "--run", str(paragraph_run), "-o", str(out), "--format", "jsonl", "--overwrite", "-q"]
    proc = subprocess.run([sys.executable, "-m", "gpucurate", *args], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert leftovers(out)  # the dead writer's staging directory, with the part it wrote
    assert snapshot(out) == before
    assert cli(*args).returncode == 0  # a retry deletes the leftovers
    assert sorted(p.name for p in out.glob("part-*")) == part_names(paragraph_run, ".jsonl")
    assert leftovers(out) == []


def test_a_run_replaced_during_the_export_is_an_error(paragraph_run, tmp_path, monkeypatch):
    run_copy = tmp_path / "run"
    shutil.copytree(paragraph_run, run_copy)
    export_part = export_module.export_part

    def replace_marker(*args, **kwargs):  # a rethreshold in place puts a new marker in
        (run_copy / MARKER).write_text('{"complete": true, "command": "rethreshold"}\n')
        return export_part(*args, **kwargs)

    monkeypatch.setattr(export_module, "export_part", replace_marker)
    with pytest.raises(OutputError, match="replaced while it was being exported"):
        export_dataset(run_copy, tmp_path / "clean", progress=False)
    assert not (tmp_path / "clean").exists() and leftovers(tmp_path / "clean") == []
