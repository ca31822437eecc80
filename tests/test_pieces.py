"""Partitions read in pieces under a small budget (``Executor.piece_bytes``, ``io.reader.processing_partitions``):
the planned partitions (the output's part files) do not change, each piece reads a contiguous part of its
partition, and the output is byte-identical to the run that read the partitions whole."""

import json
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import write_jsonl
from gpucurate.config import InputConfig
from gpucurate.engine import spill
from gpucurate.io import reader
from gpucurate.workflows.run import run

QUIET = {"run.progress": False, "semantic.enabled": False}


@pytest.fixture(autouse=True)
def _quiet_uint64_overflow():
    with warnings.catch_warnings(), np.errstate(over="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def _records(n: int, seed: int = 5) -> list:
    """Near copies of 40 texts, scattered, with ids of mixed types past the middle."""
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(300)] + ["ёж", "über", "日本"]
    bases = [list(rng.choice(vocab, rng.integers(15, 70))) for _ in range(40)]
    out = []
    for i in range(n):
        words = list(bases[(i * 7) % 40])
        for _ in range(int(rng.integers(0, 3))):
            words[int(rng.integers(len(words)))] = str(rng.choice(vocab))
        out.append({"id": i if i < n // 2 else f"s{i}", "text": " ".join(words), "n": i})
    return out


def _files(out: Path) -> dict:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.parquet"))}


def _inputs(tmp_path: Path, shape: str) -> Path:
    records = _records(150 if shape == "small" else 1200)
    if shape in ("jsonl", "small"):
        return write_jsonl(tmp_path / "docs.jsonl", records)
    if shape == "bad":  # unparseable lines and null ids, skipped (input.on_error: skip)
        path = tmp_path / "docs.jsonl"
        path.write_text("".join("{not json\n" if k % 13 == 5 else json.dumps(dict(r, id=None) if k % 11 == 7 else r)
                                + "\n" for k, r in enumerate(records)), encoding="utf-8")
        return path
    if shape == "parquet":
        path = tmp_path / "docs.parquet"
        pq.write_table(pa.Table.from_pylist([dict(r, id=str(r["id"])) for r in records]), path, row_group_size=150)
        return path
    folder = tmp_path / "files"  # small files, grouped into partitions
    folder.mkdir()
    for k in range(0, len(records), 40):
        write_jsonl(folder / f"f{k:05d}.jsonl", records[k:k + 40])
    return folder


@pytest.mark.parametrize("shape", ["jsonl", "parquet", "files"])
def test_the_layout_does_not_change_and_pieces_cover_each_partition(tmp_path, shape, monkeypatch):
    if shape != "files":  # files of a few KB are grouped two in a partition
        monkeypatch.setattr(reader, "MIN_SPLIT_BYTES", 0)
    src = _inputs(tmp_path, shape)
    cfg = InputConfig(partition_bytes=20_000)
    whole = reader.plan_partitions([str(src)], cfg, {}, (), 2)
    split = reader.plan_partitions([str(src)], cfg, {}, (), 2, piece_bytes=4_000)
    assert [s.to_dict() for s in split] == [s.to_dict() for s in whole] and len(whole) >= 3
    pieces, layout = reader.processing_partitions(split)
    assert len(pieces) > 2 * len(split) and [p.index for p in pieces] == list(range(len(pieces)))
    assert layout[0][0] == 0 and layout[-1][1] == len(pieces) and all(b > a for a, b in layout)
    assert all(a[1] == b[0] for a, b in zip(layout, layout[1:]))
    for spec, (a, b) in zip(split, layout):
        part = reader.load_partition(spec, cfg)
        read = [reader.load_partition(p, cfg) for p in pieces[a:b]]
        keys = [reader.order_keys(p, r.records) for p, r in zip(pieces[a:b], read)] if shape == "files" else \
            [r.records for r in read]
        assert np.array_equal(np.concatenate(keys), reader.order_keys(spec, part.records) if shape == "files"
                              else part.records)
        assert sum((r.table.column("text").to_pylist() for r in read), []) == part.table.column("text").to_pylist()
    assert reader.processing_partitions(whole)[0] == list(whole)


@pytest.mark.parametrize("shape, extra", [
    ("jsonl", {}),
    ("small", {"run.backend": "gpu"}),  # numba's CUDA simulator
    ("jsonl", {"output.columns": "annotations", "quality.identify_language": True, "paragraphs.enabled": True}),
    ("parquet", {"substrings.enabled": True}),
    ("files", {}),
    ("bad", {"input.on_error": "skip"}),
])
def test_a_run_read_in_pieces_writes_the_same_bytes(tmp_path, shape, extra, monkeypatch):
    """A one-byte budget with pieces of a few KB (``spill.MIN_PIECE_BYTES`` lowered) against the default
    budget: the same part files, aliases, edges and run index, byte for byte."""
    src = _inputs(tmp_path, shape)
    small = shape == "small"
    over = {**QUIET, "input.partition_bytes": 8_000 if small else 20_000, "fuzzy.threshold": 0.6, **extra}
    whole = run([str(src)], tmp_path / "whole", overrides=over)
    monkeypatch.setattr(spill, "MIN_PIECE_BYTES", 2_000 if small else 4_000)
    split = run([str(src)], tmp_path / "split", overrides={**over, "run.memory_limit": 1,
                                                           "run.spill_dir": str(tmp_path / "spill")})
    inputs = [s["stages"]["input"] for s in (whole, split)]
    assert inputs[0]["read_pieces"] == inputs[0]["partitions"] == inputs[1]["partitions"] >= 3
    assert inputs[1]["read_pieces"] > 2 * inputs[1]["partitions"]
    assert split["stages"]["fuzzy"]["duplicates"] == whole["stages"]["fuzzy"]["duplicates"] > 0
    assert _files(tmp_path / "split") == _files(tmp_path / "whole") != {}
    assert split["skipped"] == whole["skipped"] and (shape != "bad" or len(whole["skipped"]) > 20)
    meta = pq.read_schema(tmp_path / "split" / "run_index.parquet").metadata[b"gpucurate"]
    assert len(json.loads(meta)["part_offsets"]) == inputs[1]["partitions"] + 1
