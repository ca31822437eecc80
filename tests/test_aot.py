"""Ahead-of-time kernels (``kernels.aot``): a CLI run builds the kernels it used; the next run loads them
without numba and writes the same bytes; calls the build does not take go to numba."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from gpucurate.kernels import aot, jit, minhash  # noqa: F401 (minhash defines the kernel)
from gpucurate.kernels.hashing import padded_words
from gpucurate.stages.normalize import arrow_buffers

from conftest import read_annotations, write_jsonl


pytestmark = pytest.mark.skipif(
    (shutil.which("cc") is None and shutil.which("gcc") is None) or importlib.util.find_spec("setuptools") is None,
    reason="building the kernels needs a C compiler and setuptools (numba's pycc)")


def _cli(args: list, cache, *python_flags) -> subprocess.CompletedProcess:
    env = dict(os.environ, GPUCURATE_AOT="1", GPUCURATE_CACHE_DIR=str(cache))
    return subprocess.run([sys.executable, *python_flags, "-m", "gpucurate", *args], env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def built(tmp_path_factory, demo_frame):
    """A corpus, the cache folder of its build, and the output of the run that built it (through numba)."""
    root = tmp_path_factory.mktemp("aot")
    records = [{"id": str(i), "text": t} for i, t in enumerate(demo_frame["text"].tolist()[:600])]
    src = write_jsonl(root / "in.jsonl", records)
    run = ["run", "--input", str(src), "--set", "semantic.enabled=false", "--set", "run.progress=false"]
    first = _cli(run + ["--output", str(root / "jit")], root / "cache")
    assert first.returncode == 0, first.stderr
    assert "ahead of time" in first.stderr
    return root, run


def test_the_build_names_the_kernels_the_run_used(built):
    root, _ = built
    (manifest,) = (root / "cache" / "aot").glob("*/manifest.json")
    kernels = json.loads(manifest.read_text())["kernels"]
    for name in ("gpucurate.kernels.minhash.text_hashes", "gpucurate.kernels.minhash.shingle_minhash",
                 "gpucurate.kernels.pairs.jaccard_pairs", "gpucurate.kernels.text.collapse_mixed"):
        assert name in kernels
    import importlib
    for module in aot._KERNEL_MODULES:
        importlib.import_module(module)
    declared = [k for k in jit.kernels() if k.aot_signatures]
    assert len(declared) >= 19  # the declared signatures are built whether or not this corpus called them
    for k in declared:
        assert set(k.aot_signatures) <= {tuple(tuple(key) for key in keys) for _, keys in kernels[k.name]}
    assert not list((root / "cache" / "aot").glob("*.failed"))


def test_the_next_run_loads_no_numba_and_writes_the_same(built):
    root, run = built
    second = _cli(run + ["--output", str(root / "aot")], root / "cache", "-X", "importtime")
    assert second.returncode == 0, second.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in second.stderr.splitlines()
                if line.startswith("import time")}
    assert "numba" not in imported and "llvmlite" not in imported
    assert "ahead of time" not in second.stderr  # nothing new to build
    assert read_annotations(root / "aot").equals(read_annotations(root / "jit"))
    for name in ("edges.parquet", "aliases.parquet"):
        assert (root / "aot" / name).read_bytes() == (root / "jit" / name).read_bytes()


def test_calls_the_build_lacks_go_to_numba(built, monkeypatch):
    root, _ = built
    (folder,) = [p.parent for p in (root / "cache" / "aot").glob("*/manifest.json")]
    monkeypatch.setattr(aot, "_loaded", aot._read_build(folder))
    offsets, data = arrow_buffers(pa.array(["", "a", "déjà vu", "x" * 100], pa.large_string()))
    words = padded_words(data)
    name = "gpucurate.kernels.minhash.text_hashes"
    kernel = next(k for k in jit.kernels() if k.name == name)
    assert aot.function(name, (offsets, words)) is not None
    fast = kernel(offsets, words)  # the build's function
    strided = np.repeat(words, 2)[::2]
    narrow = offsets.astype(np.int32)
    for args in ((offsets, strided), (narrow, words)):
        assert aot.function(name, args) is None  # pycc would read these with the wrong layout or type
        assert np.array_equal(kernel(*args), fast)
    assert np.array_equal(kernel.dispatcher(offsets, words), fast)


def test_argument_keys():
    assert aot.arg_key(np.zeros(3, np.uint64)) == ("a", "<u8", 1)
    assert aot.arg_key(np.zeros((2, 3), np.uint32)) == ("a", "<u4", 2)
    assert aot.arg_key(np.zeros((2, 3), np.uint32, order="F")) == ("other",)
    assert aot.arg_key(np.frombuffer(b"abc", np.uint8)) == ("r", "|u1", 1)
    assert aot.arg_key(np.zeros(3, ">u8")) == ("other",)
    assert [aot.arg_key(v) for v in (True, np.bool_(False), 3, 1 << 63, 2.0, np.uint64(5), np.int32(1))] == [
        ("s", "|b1"), ("s", "|b1"), ("s", "<i8"), ("s", "<u8"), ("s", "<f8"), ("s", "<u8"), ("s", "<i4")]
    assert aot.arg_key("text") == ("other",)


def test_declared_signatures():
    assert aot.declared_keys("i8[:], u4[:, :], b1, u8") == (
        ("a", "<i8", 1), ("a", "<u4", 2), ("s", "|b1"), ("s", "<u8"))


def test_a_damaged_build_is_ignored(tmp_path, caplog):
    (tmp_path / "gpucurate_kernels.so").write_bytes(b"not a shared object")
    (tmp_path / aot.MANIFEST).write_text(json.dumps({"file": "gpucurate_kernels.so", "kernels": {}}))
    assert aot._read_build(tmp_path) == {}
    assert "not loaded" in caplog.text
