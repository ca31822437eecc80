"""Input edge cases (issue 16, input half): truncated compressed files, files edited during a run,
directory walking (symlinks, hidden/_ files, hive folders), messages, and many small files."""

import bz2
import gzip
import io
import json
import lzma
import os

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

import gpucurate
from gpucurate.cli import main
from gpucurate.config import resolve_config
from gpucurate.errors import InputError
from gpucurate.io import reader

from conftest import ANNOTATION_COLUMNS, read_annotations, write_jsonl

Q = ["run.progress=false"]


def _lines(n, start=0, prefix="doc"):
    return b"".join(json.dumps({"id": f"{prefix}{i}", "text": f"{prefix} number {i} about topic {i % 13} and more"})
                    .encode() + b"\n" for i in range(start, start + n))


def run_cli(capsys, inputs, out, *extra):
    code = main(["run", "--input", *map(str, inputs), "--output", str(out), "--no-progress", "-q", *extra])
    return code, capsys.readouterr().err


def one_error_line(code, err, *needles, exit_code=1):
    assert code == exit_code, err
    lines = [ln for ln in err.splitlines() if ln.startswith("gpucurate: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def _load_all(paths, *overrides):
    cfg = resolve_config(None, list(Q) + list(overrides)).input
    specs = reader.plan_partitions([str(p) for p in paths], cfg, {})
    return [reader.load_partition(s, cfg) for s in specs]


def _rows(paths, *overrides):
    return sum(p.table.num_rows for p in _load_all(paths, *overrides))


# ------------------------------------------------------------------------------------------------
# 1. truncated compressed files

def _zstd_stream(first: bytes, second: bytes) -> tuple[bytes, int]:
    """A streaming zstd frame (no content size) of first + second, flushed as a block after first;
    returns the whole frame and the offset where that block ends."""
    buf = io.BytesIO()
    with zstandard.ZstdCompressor().stream_writer(buf, closefd=False) as w:
        w.write(first)
        w.flush(zstandard.FLUSH_BLOCK)
        cut = buf.tell()
        w.write(second)
    return buf.getvalue(), cut


def test_zstd_cut_at_a_block_boundary_is_truncated_not_half_read(tmp_path, capsys):
    whole, cut = _zstd_stream(_lines(1000), _lines(1000, 1000))
    full = tmp_path / "full.jsonl.zst"
    full.write_bytes(whole)
    assert _rows([full]) == 2000
    cut_file = tmp_path / "cut.jsonl.zst"
    cut_file.write_bytes(whole[:cut])
    # the hole: a frame cut after a flushed block decodes cleanly to the first 1,000 rows
    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(whole[:cut])) as r:
        assert r.read() == _lines(1000)
    with pytest.raises(InputError, match="truncated") as exc:
        _rows([cut_file])
    assert "cut.jsonl.zst" in str(exc.value)
    code, err = run_cli(capsys, [cut_file], tmp_path / "o")
    one_error_line(code, err, "cut.jsonl.zst", "truncated")
    # on_error=skip: the whole file is skipped and listed, the good file is read
    good = write_jsonl(tmp_path / "good.jsonl", [{"id": "g", "text": "a good document"}])
    s = gpucurate.run([str(cut_file), str(good)], tmp_path / "o2", overrides=Q + ["input.on_error=skip"])
    assert s["documents_in"] == 1
    assert [k["path"] for k in s["skipped"]] == [str(cut_file)] and "truncated" in s["skipped"][0]["reason"]


def test_zstd_cut_mid_block_says_truncated_not_invalid_json(tmp_path):
    whole, cut = _zstd_stream(_lines(1000), _lines(1000, 1000))
    for n, end in enumerate([cut - 9, cut + (len(whole) - cut) // 2, len(whole) - 1]):
        path = tmp_path / f"mid{n}.jsonl.zst"
        path.write_bytes(whole[:end])
        with pytest.raises(InputError) as exc:
            _rows([path])
        assert "truncated" in str(exc.value) and "invalid JSON" not in str(exc.value), str(exc.value)


def test_zstd_with_several_frames_is_read_whole(tmp_path):
    c = zstandard.ZstdCompressor()
    path = tmp_path / "frames.jsonl.zst"
    path.write_bytes(c.compress(_lines(700)) + c.compress(_lines(800, 700)))  # like `cat a.zst b.zst`
    assert _rows([path]) == 1500


@pytest.mark.parametrize("suffix,compress", [(".gz", gzip.compress), (".bz2", bz2.compress),
                                             (".xz", lzma.compress)])
def test_other_compressions_cut_are_truncated(tmp_path, suffix, compress):
    data = compress(_lines(2000))
    whole = tmp_path / f"whole.jsonl{suffix}"
    whole.write_bytes(data)
    assert _rows([whole]) == 2000
    for n, end in enumerate([len(data) // 2, len(data) - 1]):
        path = tmp_path / f"cut{n}.jsonl{suffix}"
        path.write_bytes(data[:end])
        with pytest.raises(InputError) as exc:
            _rows([path])
        assert "truncated" in str(exc.value) and path.name in str(exc.value), str(exc.value)
        # on_error=skip: skipped whole, in both passes
        parts = _load_all([path], "input.on_error=skip")
        assert parts[0].table.num_rows == 0 and "truncated" in parts[0].skipped[0]["reason"]


# ------------------------------------------------------------------------------------------------
# 5. files edited while the run reads them

def _same_size_edit(path, keep_mtime: bool):
    st = os.stat(path)
    data = bytearray(path.read_bytes())
    i = data.rindex(b"number")
    data[i:i + 6] = b"NUMBER"
    path.write_bytes(bytes(data))
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_size == st.st_size


@pytest.mark.parametrize("kind", ["plain", "gz", "parquet", "group"])
@pytest.mark.parametrize("keep_mtime", [False, True])
def test_a_file_edited_after_planning_is_an_error(tmp_path, kind, keep_mtime):
    if kind == "parquet":
        path = tmp_path / "p.parquet"
        pq.write_table(pa.Table.from_pylist([json.loads(x) for x in _lines(50).splitlines()]), path,
                       compression="none")
        paths = [path]
    elif kind == "group":  # small files sharing a partition: the edited one is named
        paths = [write_jsonl(tmp_path / f"s{i}.jsonl", [{"id": f"s{i}", "text": f"small number {i}"}])
                 for i in range(5)]
        path = paths[3]
    else:
        path = tmp_path / "f.jsonl"
        path.write_bytes(_lines(50))
        if kind == "gz":
            path = tmp_path / "f.jsonl.gz"
            path.write_bytes(gzip.compress(_lines(50), mtime=0))
        paths = [path]
    cfg = resolve_config(None, Q).input
    specs = reader.plan_partitions([str(p) for p in paths], cfg, {})
    assert len(specs) == 1 and reader.load_partition(specs[0], cfg).table.num_rows > 0
    if kind == "gz":  # the same size after compression: write a same-length stream with other content
        st = os.stat(path)
        other = bytearray(path.read_bytes())
        other[len(other) // 2] ^= 0xFF  # still the same size (and now undecodable or different)
        path.write_bytes(bytes(other))
        if keep_mtime:
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    else:
        _same_size_edit(path, keep_mtime)
    for skip in ([], ["input.on_error=skip"]):  # never skipped: the two passes would disagree
        with pytest.raises(InputError, match="changed while the run was reading it") as exc:
            reader.load_partition(specs[0], resolve_config(None, Q + skip).input)
        assert str(path) in str(exc.value)
    with pytest.raises(InputError, match="changed while the run was reading it"):
        reader.load_narrow(specs[0], cfg)


@pytest.mark.parametrize("parse_in_memory", [False, True])
def test_a_file_edited_between_the_read_and_the_write_pass(tmp_path, monkeypatch, parse_in_memory):
    """The writer writes the parse of the read pass, kept in memory or, past its budget, in the spill folder
    (``ParsedCache``): an edit in between changes nothing, the output is the file as read. A partition read
    again (``output.columns=annotations`` with texts to show) stops at such an edit
    (``test_a_file_edited_after_planning_is_an_error``)."""
    import gpucurate.workflows.run as pipeline
    if not parse_in_memory:
        monkeypatch.setattr(pipeline, "machine_memory", lambda: 0)
    path = tmp_path / "f.jsonl"
    path.write_bytes(_lines(40))
    original = pipeline.annotate_parts

    def annotate_then_edit(*args, **kwargs):
        result = original(*args, **kwargs)
        _same_size_edit(path, keep_mtime=True)  # after the read pass, before the writer
        return result
    monkeypatch.setattr(pipeline, "annotate_parts", annotate_then_edit)
    summary = gpucurate.run([str(path)], tmp_path / "o", overrides=Q)
    assert (summary["memory"]["spilled_bytes"] > 0) != parse_in_memory
    written = read_annotations(tmp_path / "o")
    read = [json.loads(x) for x in _lines(40).splitlines()]
    assert dict(zip(written["id"], written["text"])) == {r["id"]: r["text"] for r in read}


def test_the_writer_uses_the_read_pass_parse_whatever_the_budget(tmp_path, monkeypatch):
    """A local run writes from the read pass's parses (the writer reads nothing again): in memory as long as
    they fit its budget, past it from the spill folder, where they were written once; the output is the
    same either way."""
    import gpucurate.workflows.run as pipeline
    path = write_jsonl(tmp_path / "f.jsonl", [{"id": j, "text": f"text {j % 7} of row {j} " * 20, "x": j}
                                              for j in range(3000)])
    overrides = Q + ["input.partition_bytes=200000"]
    cfg = resolve_config(None, overrides).input
    specs = reader.plan_partitions([str(path)], cfg, {})
    assert len(specs) >= 3
    rereads = []
    original = pipeline.load_partition  # what the write pass reads a partition with
    monkeypatch.setattr(pipeline, "load_partition", lambda spec, cfg: rereads.append(spec.index) or original(spec, cfg))
    spilled = {}
    largest = max(reader.load_partition(spec, cfg).table.nbytes for spec in specs)
    # all in memory; about one partition in memory; none
    for name, machine in (("kept", None), ("partly", 8 * (largest + largest // 2)), ("on disk", 0)):
        if machine is not None:
            monkeypatch.setattr(pipeline, "machine_memory", lambda: machine)
        spilled[name] = gpucurate.run([str(path)], tmp_path / name, overrides=overrides)["memory"]["spilled_bytes"]
    assert rereads == []
    assert spilled["kept"] == 0 and spilled["on disk"] >= largest * len(specs) // 2
    kept = read_annotations(tmp_path / "kept")
    assert kept["x"].tolist() == list(range(3000))
    for other in ("partly", "on disk"):
        pd.testing.assert_frame_equal(kept, read_annotations(tmp_path / other))


# ------------------------------------------------------------------------------------------------
# 7. directories: symlinks, hidden and _ files, hive folders

def test_directory_walk_follows_links_ignores_hidden_and_keeps_hive_columns(tmp_path):
    root = tmp_path / "in"
    (root / "year=2020" / "lang=en%20us").mkdir(parents=True)
    write_jsonl(root / "year=2020" / "lang=en%20us" / "a.jsonl", [{"id": "a", "text": "alpha text here"}])
    write_jsonl(root / "year=2020" / "b.jsonl", [{"id": "b", "text": "beta text here", "year": "own"}])
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    write_jsonl(outside / "c.jsonl", [{"id": "c", "text": "gamma text here"}])
    os.symlink(outside, root / "linked")  # a symlinked folder: followed
    os.symlink(outside, root / "linked_again")  # a second link to the same folder: read once
    os.symlink(root, root / "loop")  # a loop: not followed twice
    write_jsonl(root / ".hidden.jsonl", [{"id": "h", "text": "hidden"}])
    (root / "_SUCCESS").write_bytes(b"")
    (root / "_temporary").mkdir()
    write_jsonl(root / "_temporary" / "t.jsonl", [{"id": "t", "text": "temporary"}])
    (root / "README.txt").write_text("not data")
    report = {}
    specs = reader.plan_partitions([str(root)], resolve_config(None, Q).input, report)
    files = sorted(os.path.basename(p) for s in specs for p in s.paths)
    assert files == ["a.jsonl", "b.jsonl", "c.jsonl"]
    ignored = {os.path.basename(i["path"]) for i in report["ignored_files"]}
    assert {".hidden.jsonl", "_SUCCESS", "_temporary", "README.txt", "loop"} <= ignored
    s = gpucurate.run([str(root)], tmp_path / "o", overrides=Q)
    assert s["documents_in"] == 3 and {".hidden.jsonl", "_SUCCESS"} <= {
        os.path.basename(i["path"]) for i in s["ignored_files"]}
    ann = read_annotations(tmp_path / "o").set_index("doc_id")
    assert ann.loc["a", "year"] == "2020" and ann.loc["a", "lang"] == "en us"  # URL-decoded, strings
    assert ann.loc["b", "year"] == "own"  # the file's own column wins over the folder's
    assert pd.isna(ann.loc["c", "year"])  # not under a key=value folder


def test_hive_columns_on_parquet_and_a_file_named_directly(tmp_path):
    d = tmp_path / "in" / "split=train"
    d.mkdir(parents=True)
    pq.write_table(pa.table({"id": [1, 2], "text": ["one doc", "two doc"]}), d / "p.parquet")
    parts = _load_all([tmp_path / "in"])
    assert parts[0].table.column("split").to_pylist() == ["train", "train"]
    parts = _load_all([d / "p.parquet"])  # named directly: no base folder, no hive columns
    assert "split" not in parts[0].table.column_names


# ------------------------------------------------------------------------------------------------
# 12. messages

def test_json_array_file_is_read(tmp_path, capsys):
    recs = [{"id": f"j{i}", "text": f"array document {i}"} for i in range(40)]
    path = tmp_path / "arr.json"
    path.write_text(json.dumps(recs, indent=2))
    s = gpucurate.run([str(path)], tmp_path / "o", overrides=Q + ["input.partition_bytes=1024"])
    assert s["documents_in"] == 40 and s["stages"]["input"]["partitions"] == 1  # not cut at line ends
    assert set(read_annotations(tmp_path / "o").doc_id) == {r["id"] for r in recs}
    gpucurate.run([str(path)], tmp_path / "o2", overrides=Q + ["input.id_field=null"])
    assert set(read_annotations(tmp_path / "o2").doc_id) == {f"arr.json:{k}" for k in range(1, 41)}
    gz = tmp_path / "arr2.json.gz"
    gz.write_bytes(gzip.compress(json.dumps(recs).encode()))
    assert _rows([gz]) == 40
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([recs[0], None, recs[1]]))
    code, err = run_cli(capsys, [bad], tmp_path / "o3")
    one_error_line(code, err, "bad.json:2", "element 2 of the JSON array: expected a JSON object, got null")
    numbers = tmp_path / "numbers.json"
    numbers.write_text("[1, 2]")
    with pytest.raises(InputError, match="expected a JSON object, got number"):
        _rows([numbers])
    pretty = tmp_path / "one.json"  # one object over several lines: neither JSON Lines nor an array
    pretty.write_text(json.dumps(recs[0], indent=2))
    code, err = run_cli(capsys, [pretty], tmp_path / "o4")
    one_error_line(code, err, "one.json:1", "JSON array of objects")


def test_null_line_is_not_an_object(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    path.write_bytes(_lines(2) + b"null\n" + b"  \"str\"\n")
    code, err = run_cli(capsys, [path], tmp_path / "o")
    line = one_error_line(code, err, "r.jsonl:3", "expected a JSON object, got null")
    assert "id" not in line.split("r.jsonl:3")[1]
    s = gpucurate.run([str(path)], tmp_path / "o2", overrides=Q + ["input.on_error=skip"])
    assert s["documents_in"] == 2 and [k["row"] for k in s["skipped"]] == [3, 4]
    assert "got string" in s["skipped"][1]["reason"]


def test_earliest_without_timestamp_field_is_a_config_error(tmp_path, capsys):
    good = write_jsonl(tmp_path / "g.jsonl", [{"id": i, "text": f"text {i}", "ts": f"2020-01-0{i + 1}"}
                                              for i in range(3)])
    for key in ("canonical.policy", "semantic.keep"):
        code, err = run_cli(capsys, [good], tmp_path / "o", "--set", f"{key}=earliest")
        one_error_line(code, err, "earliest", "input.timestamp_field", exit_code=2)
    assert run_cli(capsys, [good], tmp_path / "o", "--set", "canonical.policy=earliest",
                   "--set", "input.timestamp_field=ts")[0] == 0


def test_lone_surrogates_are_rejected_or_replaced(tmp_path, capsys):
    path = tmp_path / "s.jsonl"
    path.write_bytes(_lines(2) + b'{"id": "sur", "text": "bad \\ud800 here", "\\udfff": 1}\n'
                     + b'{"id": "pair", "text": "emoji \\ud83d\\ude00 ok"}\n')
    code, err = run_cli(capsys, [path], tmp_path / "o")
    one_error_line(code, err, "s.jsonl:3", "surrogate", "encoding_errors=replace")
    s = gpucurate.run([str(path)], tmp_path / "o2", overrides=Q + ["input.encoding_errors=replace"])
    assert s["documents_in"] == 4 and s["invalid_utf8_rows_replaced"] == 1
    ann = read_annotations(tmp_path / "o2").set_index("doc_id")
    assert ann.loc["sur", "text"] == "bad \ufffd here" and ann.loc["pair", "text"] == "emoji \U0001F600 ok"
    assert "\ufffd" in ann.columns  # the key's surrogate too


def test_duplicate_integer_id_message(tmp_path, capsys):
    path = write_jsonl(tmp_path / "d.jsonl", [{"id": 1, "text": "one"}, {"id": 1, "text": "two"}])
    code, err = run_cli(capsys, [path], tmp_path / "o")
    line = one_error_line(code, err, "duplicate id 1 (", "d.jsonl:1", "d.jsonl:2")
    assert "np." not in line


# ------------------------------------------------------------------------------------------------
# 13. many small files

def test_small_files_share_partitions_and_give_the_same_annotations(tmp_path, demo_frame):
    recs = demo_frame.head(400)[["id", "text"]].to_dict(orient="records")
    one = write_jsonl(tmp_path / "one.jsonl", recs)
    d = tmp_path / "many"
    d.mkdir()
    for i, r in enumerate(recs):  # one record a file, some compressed, some without a final newline
        p = write_jsonl(d / f"f{i:04d}.jsonl", [r], compress=[None, None, "gz", "zst"][i % 4])
        if i % 7 == 0 and p.suffix == ".jsonl":
            p.write_bytes(p.read_bytes().rstrip(b"\n"))
    ref = gpucurate.run([str(one)], tmp_path / "o1", overrides=Q)
    small = gpucurate.run([str(d)], tmp_path / "o2", overrides=Q + ["input.partition_bytes=200000"])
    assert small["stages"]["input"]["files"] == 400
    parts = small["stages"]["input"]["partitions"]
    assert 2 <= parts <= 10, parts
    assert len(list((tmp_path / "o2" / "annotations").glob("part-*.parquet"))) == parts
    pd.testing.assert_frame_equal(read_annotations(tmp_path / "o2")[ANNOTATION_COLUMNS],
                                  read_annotations(tmp_path / "o1")[ANNOTATION_COLUMNS])
    assert ref["stages"]["fuzzy"]["duplicates"] == small["stages"]["fuzzy"]["duplicates"]
    # generated ids and order keys are each file's own whatever the grouping
    cfg = resolve_config(None, Q + ["input.id_field=null"]).input
    specs = reader.plan_partitions([str(d)], cfg, {})
    frame = pd.concat([reader.load_narrow(s, cfg) for s in specs])
    assert list(frame._id) == [f"f{i:04d}.jsonl{['', '', '.gz', '.zst'][i % 4]}:1" for i in range(400)]
    assert list(frame._ord) == [i << 40 for i in range(400)]


def test_a_group_keeps_each_files_errors_types_and_skips(tmp_path, capsys):
    d = tmp_path / "g"
    d.mkdir()
    write_jsonl(d / "a.jsonl", [{"id": 1, "text": "first file text", "score": 3}])
    write_jsonl(d / "b.jsonl", [{"id": 2, "text": "second file text", "score": "high"}])
    write_jsonl(d / "c.jsonl", [{"id": 3, "text": "third file text"}, {"id": None, "text": "no id"}])
    cfg = resolve_config(None, Q + ["input.on_error=skip"]).input
    specs = reader.plan_partitions([str(d)], cfg, {})
    assert len(specs) == 1 and len(specs[0].members) == 3
    part = reader.load_partition(specs[0], cfg)
    assert part.table.column("score").to_pylist() == ["3", "high", None]  # types differ: JSON text
    assert [(os.path.basename(k["path"]), k["row"]) for k in part.skipped] == [("c.jsonl", 2)]
    code, err = run_cli(capsys, [d], tmp_path / "o")
    one_error_line(code, err, "c.jsonl:2", "field 'id'")
    (d / "b.jsonl").write_bytes(b'{"id": 2, "text": "ok"}\n{"id": 5, "text": 7}\n')
    code, err = run_cli(capsys, [d], tmp_path / "o2")
    one_error_line(code, err, "b.jsonl:2", "field 'text'")
    s = gpucurate.run([str(d)], tmp_path / "o3", overrides=Q + ["input.on_error=skip"])
    assert s["documents_in"] == 3 and {(os.path.basename(k["path"]), k["row"]) for k in s["skipped"]} == {
        ("b.jsonl", 2), ("c.jsonl", 2)}
    assert len(list((tmp_path / "o3" / "annotations").glob("part-*.parquet"))) == 1


def test_small_parquet_files_are_grouped_too(tmp_path):
    d = tmp_path / "pq"
    d.mkdir()
    for i in range(6):
        pq.write_table(pa.table({"id": [2 * i, 2 * i + 1], "text": [f"doc {2 * i}", f"doc {2 * i + 1}"]}),
                       d / f"p{i}.parquet")
    cfg = resolve_config(None, Q).input
    specs = reader.plan_partitions([str(d)], cfg, {})
    assert len(specs) == 1 and len(specs[0].members) == 6
    frame = reader.load_narrow(specs[0], cfg)
    assert list(frame._id_int) == list(range(12))
    assert list(frame._ord) == [(i // 2) << 40 | (i % 2) for i in range(12)]
    # files that together pass input.partition_rows do not share a partition
    specs = reader.plan_partitions([str(d)], resolve_config(None, Q + ["input.partition_rows=3"]).input, {})
    assert len(specs) == 6 and not any(s.members for s in specs)
