"""Ids round-trip exactly and have one type per run; input columns named like annotation columns fail
fast, and ``output.annotation_prefix`` is the way out."""

import json

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import gpucurate
from gpucurate.cli import main
from gpucurate.config import ANNOTATION_COLUMNS
from gpucurate.errors import ConfigError

#: a field that makes every file larger than ``input.partition_bytes=1024``: one file, one or more partitions
PAD = "p" * 1100
Q = ["run.progress=false"]
SPLIT = Q + ["input.partition_bytes=1024"]  # files are never grouped: each part file holds one file's rows
ID_COLUMNS = ["id", "doc_id", "dedup_id", "exact_group", "fuzzy_group", "semantic_group"]


def jsonl(path, records, raw_lines=()):
    path.write_text("".join(json.dumps(dict(r, pad=PAD)) + "\n" for r in records) + "".join(raw_lines),
                    encoding="utf-8")
    return str(path)


def parquet(path, ids, texts):
    pq.write_table(pa.table({"id": ids, "text": texts, "pad": [PAD] * len(texts)}), path)
    return str(path)


def one_dataset(out) -> pa.Table:
    """The annotations as one dataset; every part file has the same type for each id column."""
    parts = sorted((out / "annotations").glob("part-*.parquet"))
    for col in ID_COLUMNS:
        assert len({str(pq.read_schema(p).field(col).type) for p in parts}) == 1, col
    table = ds.dataset(out / "annotations").to_table()
    assert len(pd.read_parquet(out / "annotations")) == table.num_rows
    return table


def cli(capsys, inputs, out, *extra):
    code = main(["run", "--input", *map(str, inputs), "--output", str(out), "--no-progress", "-q", *extra])
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("gpucurate: error:")]
    return code, lines


@pytest.mark.parametrize("overrides", [SPLIT, Q], ids=["file-per-partition", "default-partitions"])
def test_ints_in_one_file_strings_in_another_make_one_string_dataset(tmp_path, overrides):
    a = jsonl(tmp_path / "a.jsonl", [{"id": 1, "text": "alpha beta gamma"}, {"id": 2, "text": "delta"}])
    b = jsonl(tmp_path / "b.jsonl", [{"id": "s1", "text": "alpha beta gamma"}, {"id": "s2", "text": "eps"}])
    c = parquet(tmp_path / "c.parquet", pa.array([7, 8], pa.int32()), ["zeta", "delta"])
    s = gpucurate.run([a, b, c], tmp_path / "o", overrides=overrides)
    t = one_dataset(tmp_path / "o")
    assert s["documents_in"] == 6 and s["stages"]["exact"]["duplicates"] == 2
    for col in ID_COLUMNS:
        assert t.schema.field(col).type == pa.string(), col
    rows = {r["doc_id"]: r for r in t.to_pylist()}
    assert sorted(rows) == ["1", "2", "7", "8", "s1", "s2"]  # each integer as its exact decimal text
    assert all(r["id"] == d for d, r in rows.items())  # the user's id column: the same text as doc_id
    assert rows["s1"]["dedup_id"] == "1" and rows["8"]["dedup_id"] == "2"
    aliases = pq.read_table(tmp_path / "o" / "aliases.parquet")
    assert aliases.schema.field("alias_id").type == pa.string()


def test_integer_ids_stay_int64_across_files_and_types(tmp_path):
    a = jsonl(tmp_path / "a.jsonl", [{"id": 3, "text": "one two three"}, {"id": -4, "text": "four"}])
    b = parquet(tmp_path / "b.parquet", pa.array([10, 11], pa.uint8()), ["one two three", "x"])
    c = parquet(tmp_path / "c.parquet", pa.array([2**62, 12], pa.int64()), ["y", "z"])
    gpucurate.run([a, b, c], tmp_path / "o", overrides=SPLIT)
    t = one_dataset(tmp_path / "o")
    for col in ID_COLUMNS:
        assert t.schema.field(col).type == pa.int64(), col
    assert sorted(t.column("id").to_pylist()) == [-4, 3, 10, 11, 12, 2**62]
    assert dict(zip(t.column("doc_id").to_pylist(), t.column("dedup_id").to_pylist()))[10] == 3


@pytest.mark.parametrize("extra", [[], ['{"id": 99, "text": "mixed field", "pad": 5}\n']],
                         ids=["arrow-parse", "python-parse"])
def test_integers_beyond_2_53_are_exact(tmp_path, extra):
    # 2**53 + 1 and 2**53 are one double: as floats they were the same id (a duplicate-id error)
    a = jsonl(tmp_path / "a.jsonl", [{"id": 2**53 + 1, "text": "the same text"}, {"id": 2**53, "text": "the same text"},
                                     {"id": 2**63 - 1, "text": "max"}, {"id": -2**63, "text": "min"}], extra)
    s = gpucurate.run([a], tmp_path / "o", overrides=SPLIT)
    t = one_dataset(tmp_path / "o")
    assert t.schema.field("doc_id").type == pa.int64()
    got = dict(zip(t.column("doc_id").to_pylist(), t.column("dedup_id").to_pylist()))
    assert got[2**53] == 2**53 + 1 and got[2**53 + 1] == 2**53 + 1 and got[2**63 - 1] == 2**63 - 1
    assert -2**63 in got and s["stages"]["exact"]["duplicates"] == 1


def test_integers_beyond_int64_become_strings_of_their_digits(tmp_path):
    # one id beyond int64 used to turn the whole file's ids into doubles: 2**53 + 1 became 2**53
    big = [2**63, 2**64 - 1, 2**64 + 1, -2**63 - 1, 10**30 + 7, 2**53 + 1, 2**53]
    a = jsonl(tmp_path / "a.jsonl", [{"id": v, "text": f"doc {k}"} for k, v in enumerate(big)]
              + [{"id": 10**30 + 8, "text": "doc 0"}])
    b = jsonl(tmp_path / "b.jsonl", [{"id": 5, "text": "small"}])
    gpucurate.run([a, b], tmp_path / "o", overrides=SPLIT)
    t = one_dataset(tmp_path / "o")
    assert t.schema.field("id").type == pa.string()
    assert sorted(t.column("doc_id").to_pylist()) == sorted(str(v) for v in big + [10**30 + 8, 5])
    assert t.column("id").to_pylist() == t.column("doc_id").to_pylist()
    got = dict(zip(t.column("doc_id").to_pylist(), t.column("dedup_id").to_pylist()))
    assert got[str(10**30 + 8)] == str(2**63)  # "doc 0": an exact duplicate, ids not rounded


def test_big_ints_beyond_int64_in_parquet(tmp_path):
    a = parquet(tmp_path / "a.parquet", pa.array([2**64 - 1, 2**64 - 2], pa.uint64()), ["same", "same"])
    gpucurate.run([a], tmp_path / "o", overrides=Q)
    t = one_dataset(tmp_path / "o")
    assert t.column("doc_id").to_pylist() == ["18446744073709551615", "18446744073709551614"]
    assert t.column("dedup_id").to_pylist() == ["18446744073709551615"] * 2


@pytest.mark.parametrize("line,shown", [('{"id": 1.5, "text": "b"}', "1.5"), ('{"id": 1.0, "text": "b"}', "1.0"),
                                        ('{"id": 1e3, "text": "b"}', "1000.0"), ('{"id": true, "text": "b"}', "true"),
                                        ('{"id": [1], "text": "b"}', "[1]"), ('{"id": {"a": 1}, "text": "b"}', "{")])
def test_non_integer_ids_are_errors_naming_file_and_line(tmp_path, capsys, line, shown):
    path = tmp_path / "f.jsonl"
    path.write_text('{"id": 1, "text": "a"}\n' + line + '\n{"id": 3, "text": "c"}\n')
    code, err = cli(capsys, [path], tmp_path / "o")
    assert code == 1 and len(err) == 1, err
    assert "f.jsonl:2" in err[0] and "field 'id'" in err[0] and "ids must be integers or strings" in err[0]
    assert shown in err[0]
    code, _ = cli(capsys, [path], tmp_path / "o2", "--set", "input.on_error=skip")
    summary = json.loads((tmp_path / "o2" / "summary.json").read_text())
    assert code == 0 and summary["documents_in"] == 2 and summary["skipped"][0]["row"] == 2
    t = one_dataset(tmp_path / "o2")
    assert t.column("doc_id").to_pylist() == [1, 3] and t.schema.field("id").type == pa.int64()


def test_nan_id_is_invalid_json(tmp_path, capsys):
    path = tmp_path / "f.jsonl"
    path.write_text('{"id": 1, "text": "a"}\n{"id": NaN, "text": "b"}\n')
    code, err = cli(capsys, [path], tmp_path / "o")
    assert code == 1 and "f.jsonl:2" in err[0] and "invalid JSON" in err[0]


def test_float_id_column_in_parquet_is_an_error(tmp_path, capsys):
    path = parquet(tmp_path / "f.parquet", pa.array([1.0, 2.0]), ["a", "b"])
    code, err = cli(capsys, [path], tmp_path / "o")
    assert code == 1 and "f.parquet" in err[0] and "ids must be integers or strings" in err[0] and "double" in err[0]


def test_suffixed_repeats_keep_the_users_integer_ids(tmp_path):
    a = jsonl(tmp_path / "a.jsonl", [{"id": 1, "text": "x"}, {"id": 1, "text": "y"}])
    b = jsonl(tmp_path / "b.jsonl", [{"id": 2, "text": "z"}])
    s = gpucurate.run([a, b], tmp_path / "o", overrides=SPLIT + ["input.on_duplicate_id=suffix"])
    t = one_dataset(tmp_path / "o")
    assert s["renamed_duplicate_ids"] == 1
    assert t.schema.field("doc_id").type == pa.string() and t.schema.field("id").type == pa.int64()
    assert t.column("doc_id").to_pylist() == ["1", "1#dup1", "2"] and t.column("id").to_pylist() == [1, 1, 2]


def test_integer_and_string_with_the_same_text_are_the_same_id(tmp_path, capsys):
    a = jsonl(tmp_path / "a.jsonl", [{"id": 1, "text": "x"}])
    b = jsonl(tmp_path / "b.jsonl", [{"id": "1", "text": "y"}])
    code, err = cli(capsys, [a, b], tmp_path / "o", "--set", "input.partition_bytes=1024")
    assert code == 1 and "duplicate id '1'" in err[0]


# ------------------------------------------------------------------------------------------------
# input columns named like annotation columns


def test_parquet_clash_fails_at_planning(tmp_path, capsys, monkeypatch):
    pq.write_table(pa.table({"id": [1, 2], "text": ["a", "b"], "similarity": [0.1, 0.2], "keep": [True, False]}),
                   tmp_path / "f.parquet")
    import gpucurate.workflows.run as pipeline

    def no_work(*args, **kwargs):
        raise AssertionError("the run read the input before failing")
    monkeypatch.setattr(pipeline, "read_documents", no_work)
    with pytest.raises(ConfigError, match=r"f.parquet: input column\(s\) similarity, keep .*annotation_prefix"):
        gpucurate.run([str(tmp_path / "f.parquet")], tmp_path / "o", overrides=Q + ["input.on_error=skip"])


def test_jsonl_clash_fails_in_the_read_pass(tmp_path, capsys, monkeypatch):
    records = [{"id": i, "text": f"text {i}"} for i in range(40)]
    records[35]["weight"] = 3  # only a late record of a later partition has it
    path = jsonl(tmp_path / "f.jsonl", records)
    import gpucurate.workflows.run as pipeline
    monkeypatch.setattr(pipeline.ExactDedup, "run", lambda *a, **k: (_ for _ in ()).throw(AssertionError("too late")))
    code, err = cli(capsys, [path], tmp_path / "o", "--set", "input.partition_bytes=4096")
    assert code == 2 and len(err) == 1 and "f.jsonl" in err[0] and "weight" in err[0], err
    assert "output.annotation_prefix" in err[0]
    assert not list((tmp_path / "o").glob("annotations/*.parquet"))


def _clashing_run(tmp_path):
    base = "the committee met on tuesday to discuss the budget for the next fiscal year and beyond"
    records = [{"id": i, "text": base + f" item {i // 2}" + (" extra" if i % 4 == 1 else ""), "keep": "user",
                "similarity": i, "doc_id": f"user-{i}"} for i in range(12)]
    path = jsonl(tmp_path / "in.jsonl", records)
    s = gpucurate.run([path], tmp_path / "o", overrides=Q + ["output.annotation_prefix=gc_", "fuzzy.threshold=0.7"])
    return s, records


def test_annotation_prefix_writes_prefixed_columns_and_keeps_the_users(tmp_path):
    s, records = _clashing_run(tmp_path)
    t = one_dataset_prefixed(tmp_path / "o")
    assert [c for c in t.column_names if c.startswith("gc_")] == ["gc_" + c for c in ANNOTATION_COLUMNS]
    assert t.column("keep").to_pylist() == ["user"] * 12 and t.column("similarity").to_pylist() == list(range(12))
    assert t.column("doc_id").to_pylist() == [f"user-{i}" for i in range(12)]
    assert t.column("gc_doc_id").to_pylist() == list(range(12))
    assert s["documents_kept"] == sum(t.column("gc_keep").to_pylist()) < 12
    assert "Largest clusters" in (tmp_path / "o" / "report.html").read_text()


def one_dataset_prefixed(out) -> pa.Table:
    table = ds.dataset(out / "annotations").to_table()
    assert table.schema.field("gc_doc_id").type == pa.int64() and table.schema.field("id").type == pa.int64()
    return table


def test_annotation_prefix_readers_report_rethreshold_sample_pairs(tmp_path, capsys):
    s, _ = _clashing_run(tmp_path)
    before = ds.dataset(tmp_path / "o" / "annotations").to_table()
    from gpucurate.workflows.rethreshold import rethreshold
    r = rethreshold(tmp_path / "o", ["fuzzy.threshold=0.99"], tmp_path / "r")
    after = ds.dataset(tmp_path / "r" / "annotations").to_table()
    assert r["documents_kept"] > s["documents_kept"] and r["documents_kept"] == sum(after.column("gc_keep").to_pylist())
    for col in ("keep", "similarity", "doc_id", "gc_doc_id"):
        assert after.column(col).equals(before.column(col)), col
    assert (tmp_path / "r" / "report.html").is_file()
    assert main(["report", "--run", str(tmp_path / "o")]) == 0
    assert main(["sample-pairs", "--run", str(tmp_path / "o"), "-n", "4", "--out", str(tmp_path / "p.csv"),
                 "-q"]) == 0
    pairs = pd.read_csv(tmp_path / "p.csv", keep_default_na=False)
    assert len(pairs) and (pairs.text_a != "").all()
    capsys.readouterr()


def test_annotation_prefix_must_be_a_plain_string(tmp_path, capsys):
    a = jsonl(tmp_path / "a.jsonl", [{"id": 1, "text": "x"}])
    code, err = cli(capsys, [a], tmp_path / "o", "--set", "output.annotation_prefix=a/b")
    assert code == 2 and "output.annotation_prefix" in err[0]


def test_generated_ids_are_unchanged(tmp_path):
    a = jsonl(tmp_path / "a.jsonl", [{"text": "x"}, {"text": "x"}])
    gpucurate.run([a], tmp_path / "o", overrides=Q + ["input.id_field=null"])
    t = ds.dataset(tmp_path / "o" / "annotations").to_table()
    assert t.column("doc_id").to_pylist() == ["a.jsonl:1", "a.jsonl:2"]
    assert t.column("dedup_id").to_pylist() == ["a.jsonl:1"] * 2


def test_float_ids_of_a_dataframe_are_an_error():
    import dask.dataframe as dd
    from gpucurate.errors import InputError
    frame = dd.from_pandas(pd.DataFrame({"id": [1.0, 2.0], "text": ["a b", "a b"]}), npartitions=1)
    with pytest.raises(InputError, match="ids must be integers or strings"):
        gpucurate.dedup(frame, overrides={"run.progress": False})
