"""Bad input: one clear line naming file/row/field and a non-zero exit, or documented behaviour."""

import gzip
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpucurate
from gpucurate.cli import main

from conftest import read_annotations, write_jsonl

GOOD = [{"id": f"g{i}", "text": f"document number {i} talks about topic {i % 7} in some detail here"}
        for i in range(20)]


def run_cli(capsys, inputs, out, *extra):
    code = main(["run", "--input", *map(str, inputs), "--output", str(out), "--no-progress", "-q", *extra])
    err = capsys.readouterr().err
    return code, err


def assert_one_line_error(code, err, *needles, exit_code=1):
    assert code == exit_code, err
    lines = [ln for ln in err.splitlines() if ln.startswith("gpucurate: error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def test_missing_file(tmp_path, capsys):
    code, err = run_cli(capsys, [tmp_path / "nope.jsonl"], tmp_path / "o")
    assert_one_line_error(code, err, "nope.jsonl", "no such file")


def test_missing_file_skipped(tmp_path, capsys):
    good = write_jsonl(tmp_path / "good.jsonl", GOOD)
    code, err = run_cli(capsys, [good, tmp_path / "nope.jsonl"], tmp_path / "o", "--set", "input.on_error=skip")
    assert code == 0, err
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["documents_in"] == 20 and "nope.jsonl" in summary["skipped"][0]["path"]


def test_empty_file_contributes_nothing_and_alone_is_an_error(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    blank = tmp_path / "blank.jsonl"
    blank.write_bytes(b"\n  \n")
    code, err = run_cli(capsys, [empty], tmp_path / "o1")
    assert_one_line_error(code, err, "no records")
    good = write_jsonl(tmp_path / "good.jsonl", GOOD)
    s = gpucurate.run([str(empty), str(blank), str(good)], tmp_path / "o2", overrides=["run.progress=false"])
    assert s["documents_in"] == 20 and str(empty) in s["empty_files"]


def test_truncated_parquet(tmp_path, capsys):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist(GOOD), path)
    path.write_bytes(path.read_bytes()[:-40])
    code, err = run_cli(capsys, [path], tmp_path / "o")
    assert_one_line_error(code, err, "t.parquet", "Parquet")
    good = write_jsonl(tmp_path / "good.jsonl", GOOD)
    code, err = run_cli(capsys, [path, good], tmp_path / "o2", "--set", "input.on_error=skip")
    assert code == 0
    summary = json.loads((tmp_path / "o2" / "summary.json").read_text())
    assert summary["skipped"][0]["path"].endswith("t.parquet") and summary["documents_in"] == 20


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_missing_text_column(tmp_path, capsys, fmt):
    recs = [{"id": 1, "body": "x"}, {"id": 2, "body": "y"}]
    if fmt == "jsonl":
        path = write_jsonl(tmp_path / "n.jsonl", recs)
    else:
        path = tmp_path / "n.parquet"
        pq.write_table(pa.Table.from_pylist(recs), path)
    code, err = run_cli(capsys, [path], tmp_path / "o")
    assert_one_line_error(code, err, path.name, "field 'text'")


def test_null_and_empty_texts_are_kept_and_never_duplicates(tmp_path):
    recs = GOOD[:3] + [{"id": "n1", "text": None}, {"id": "n2"}, {"id": "e1", "text": ""}, {"id": "e2", "text": " \n\t"}]
    path = write_jsonl(tmp_path / "e.jsonl", recs)
    s = gpucurate.run([str(path)], tmp_path / "o", overrides=["run.progress=false"])
    ann = read_annotations(tmp_path / "o").set_index("doc_id")
    assert s["stages"]["input"]["empty_texts"] == 4
    assert ann.loc[["n1", "n2", "e1", "e2"], "keep"].all()
    assert (ann.loc[["n1", "n2", "e1", "e2"], "cluster_size"] == 1).all()


def test_invalid_utf8(tmp_path, capsys):
    lines = [json.dumps(r).encode() for r in GOOD[:5]]
    lines.insert(3, b'{"id": "bad", "text": "caf\xe9 au lait"}')
    path = tmp_path / "u.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    code, err = run_cli(capsys, [path], tmp_path / "o")
    assert_one_line_error(code, err, "u.jsonl:4", "UTF-8")
    code, _ = run_cli(capsys, [path], tmp_path / "o2", "--set", "input.on_error=skip")
    summary = json.loads((tmp_path / "o2" / "summary.json").read_text())
    assert code == 0 and summary["documents_in"] == 5 and summary["skipped"][0]["row"] == 4
    code, _ = run_cli(capsys, [path], tmp_path / "o3", "--set", "input.encoding_errors=replace")
    summary = json.loads((tmp_path / "o3" / "summary.json").read_text())
    assert code == 0 and summary["documents_in"] == 6 and summary["invalid_utf8_rows_replaced"] == 1
    assert "caf\ufffd" in read_annotations(tmp_path / "o3").set_index("doc_id").loc["bad", "text"]


@pytest.mark.parametrize("line,needle", [
    (b'{"id": "x", "text": "unterminated', "invalid JSON"),
    (b'[1, 2, 3]', "expected a JSON object"),
    (b'{"id": "x", "text": 42}', "field 'text'"),
    (b'{"id": null, "text": "no id here"}', "field 'id'"),
])
def test_bad_rows_name_file_and_line(tmp_path, capsys, line, needle):
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\n".join([json.dumps(GOOD[0]).encode(), json.dumps(GOOD[1]).encode(), line]) + b"\n")
    code, err = run_cli(capsys, [path], tmp_path / "o")
    assert_one_line_error(code, err, "r.jsonl:3", needle)
    code, err = run_cli(capsys, [path], tmp_path / "o2", "--set", "input.on_error=skip")
    summary = json.loads((tmp_path / "o2" / "summary.json").read_text())
    assert code == 0 and summary["documents_in"] == 2 and summary["skipped"][0]["row"] == 3


def test_duplicate_ids(tmp_path, capsys):
    a = write_jsonl(tmp_path / "a.jsonl", GOOD[:3])
    b = write_jsonl(tmp_path / "b.jsonl", [{"id": "g1", "text": "another text entirely"}])
    code, err = run_cli(capsys, [a, b], tmp_path / "o")
    assert_one_line_error(code, err, "duplicate id 'g1'", "a.jsonl:2", "b.jsonl:1")
    code, err = run_cli(capsys, [a, b], tmp_path / "o2", "--set", "input.on_duplicate_id=suffix")
    assert code == 0, err
    ann = read_annotations(tmp_path / "o2")
    assert sorted(ann.doc_id) == ["g0", "g1", "g1#dup1", "g2"] and list(ann.id).count("g1") == 2


@pytest.mark.slow
def test_fifty_megabyte_document(tmp_path):
    rng = np.random.default_rng(0)
    vocab = np.array([f"w{i}" for i in range(50_000)])
    words = rng.choice(vocab, 8_000_000)
    big = " ".join(words)
    assert len(big) > 50_000_000
    words[1000] = "changed"
    recs = [{"id": "big", "text": big}, {"id": "big2", "text": " ".join(words)}, {"id": "small", "text": "tiny doc"}]
    path = tmp_path / "big.jsonl.gz"
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in recs).encode(), compresslevel=1))
    s = gpucurate.run([str(path)], tmp_path / "o", overrides=["run.progress=false"])
    ann = read_annotations(tmp_path / "o").set_index("doc_id")
    assert s["stages"]["fuzzy"]["duplicates"] == 1 and ann.loc["big2", "dedup_id"] == "big"
    assert ann.loc["big2", "similarity"] > 0.999


def test_text_without_spaces(tmp_path):
    long = "がんばってください" * 20000
    recs = [{"id": 1, "text": long}, {"id": 2, "text": long}, {"id": 3, "text": long + "。"}]
    path = write_jsonl(tmp_path / "s.jsonl", recs)
    s = gpucurate.run([str(path)], tmp_path / "o", overrides=["run.progress=false"])
    assert s["stages"]["exact"]["duplicates"] == 1 and s["stages"]["fuzzy"]["duplicates"] == 0
    s = gpucurate.run([str(path)], tmp_path / "o2", overrides=["run.progress=false", "fuzzy.shingle=char"])
    assert s["stages"]["fuzzy"]["duplicates"] == 1


def test_mixed_schemas_across_files(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [{"id": 1, "text": "alpha beta", "score": 3, "tags": ["x"]}])
    b = tmp_path / "b.parquet"
    pq.write_table(pa.table({"text": ["gamma delta", "alpha beta"], "id": ["s1", "s2"],
                             "score": ["high", "low"], "extra": [1.5, 2.5]}), b)
    c = write_jsonl(tmp_path / "c.jsonl", [{"id": 7, "text": "mixed", "score": 1}, {"id": 8, "text": "x", "score": "hi"}])
    s = gpucurate.run([str(a), str(b), str(c)], tmp_path / "o", overrides=["run.progress=false"])
    assert s["documents_in"] == 5 and s["stages"]["exact"]["duplicates"] == 1
    parts = sorted((tmp_path / "o" / "annotations").glob("*.parquet"))
    tables = [pq.read_table(p) for p in parts]
    assert tables[0].column("tags").to_pylist() == [["x"]] and tables[0].column("score").type == pa.int64()
    assert tables[1].column("score").to_pylist() == ["high", "low"] and "extra" in tables[1].column_names
    assert tables[2].column("score").to_pylist() == ["1", "hi"]  # mixed types in one file: kept as JSON text
    assert set(tables[1].column("doc_id").to_pylist()) == {"s1", "s2"}  # ids are strings once any file has them
    assert tables[1].column("dedup_id").to_pylist()[1] == "1"


def test_timestamp_errors_name_row_and_field(tmp_path, capsys):
    path = write_jsonl(tmp_path / "t.jsonl", [{"id": 1, "text": "a", "ts": "2020-01-01"}, {"id": 2, "text": "b", "ts": "soon"}])
    code, err = run_cli(capsys, [path], tmp_path / "o", "--set", "input.timestamp_field=ts")
    assert_one_line_error(code, err, "t.jsonl:2", "field 'ts'", "'soon'")
    code, err = run_cli(capsys, [path], tmp_path / "o2", "--set", "input.timestamp_field=ts",
                        "--set", "input.on_error=skip")
    summary = json.loads((tmp_path / "o2" / "summary.json").read_text())
    assert code == 0 and summary["documents_in"] == 1 and summary["skipped"][0]["row"] == 2
    assert len(read_annotations(tmp_path / "o2")) == 1


def test_config_errors(tmp_path, capsys):
    good = write_jsonl(tmp_path / "good.jsonl", GOOD)
    for args, needle in [(["--set", "fuzzy.threshold=1.5"], "fuzzy.threshold"),
                         (["--set", "fuzzy.nope=1"], "fuzzy.nope"),
                         (["--set", "fuzzy.num_perm=many"], "fuzzy.num_perm"),
                         (["--set", "canonical.policy=random"], "canonical.policy"),
                         (["--set", "fuzzy.bands=20", "--set", "fuzzy.rows=10"], "num_perm"),
                         (["--config", str(tmp_path / "missing.yaml")], "missing.yaml")]:
        code, err = run_cli(capsys, [good], tmp_path / "o", *args)
        assert_one_line_error(code, err, needle, exit_code=2)


def test_non_empty_output_directory(tmp_path, capsys):
    good = write_jsonl(tmp_path / "good.jsonl", GOOD)
    assert run_cli(capsys, [good], tmp_path / "o")[0] == 0
    code, err = run_cli(capsys, [good], tmp_path / "o")
    assert_one_line_error(code, err, "not empty", exit_code=2)
    assert run_cli(capsys, [good], tmp_path / "o", "--set", "output.overwrite=true")[0] == 0


def test_unknown_format(tmp_path, capsys):
    path = tmp_path / "data.csv"
    path.write_text("id,text\n1,a\n")
    code, err = run_cli(capsys, [path], tmp_path / "o")
    assert_one_line_error(code, err, "data.csv", "format")


def test_arrow_string_variants_and_huge_unsigned_ids(tmp_path):
    texts = ["the same words in this text", "the same words in this text", "other"]
    table = pa.table({
        "id": pa.array([1, 2, 2**64 - 1], type=pa.uint64()),
        "text": pa.array(texts).dictionary_encode(),
        "note": pa.array(["a", "b", "c"], type=pa.string_view()),
    })
    pq.write_table(table, tmp_path / "d.parquet")
    s = gpucurate.run([str(tmp_path / "d.parquet")], tmp_path / "o", overrides=["run.progress=false"])
    ann = read_annotations(tmp_path / "o")
    assert s["stages"]["exact"]["duplicates"] == 1
    assert sorted(ann.doc_id) == ["1", "18446744073709551615", "2"]  # exact, as text
