"""Ahead-of-time kernels (``kernels.aot``): a CLI run builds the kernels it used; the next run loads them
without numba and writes the same bytes; calls the build does not take go to numba."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time

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


def test_export_names_say_the_kernel_and_signature(built):
    """A module put in place by a concurrent build after the manifest was read cannot map a name to another
    kernel: every export's name is derived from its kernel and signature."""
    root, _ = built
    (manifest,) = (root / "cache" / "aot").glob("*/manifest.json")
    entries = [(name, export, tuple(tuple(k) for k in keys))
               for name, rows in json.loads(manifest.read_text())["kernels"].items() for export, keys in rows]
    assert len({export for _, export, _ in entries}) == len(entries) >= 19
    for name, export, keys in entries:
        assert export == aot._export_name(name, keys)


def test_a_manifest_naming_what_the_module_lacks_is_ignored(built, tmp_path, caplog):
    root, _ = built
    (folder,) = [p.parent for p in (root / "cache" / "aot").glob("*/manifest.json")]
    manifest = json.loads((folder / aot.MANIFEST).read_text())
    shutil.copy(folder / manifest["file"], tmp_path / manifest["file"])
    manifest["kernels"]["gpucurate.kernels.minhash.text_hashes"][0][0] = aot._export_name("other", ())
    (tmp_path / aot.MANIFEST).write_text(json.dumps(manifest))
    assert aot._read_build(tmp_path) == {}
    assert "not loaded" in caplog.text


def _age(path, seconds):
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_prune_deletes_unused_builds_and_killed_staging(tmp_path):
    day = 24 * 3600
    for name in ("current", "recent", "old", ".build-killed", ".build-running", ".old-killed"):
        (tmp_path / name).mkdir()
    for name in ("current", "recent", "old"):
        (tmp_path / name / aot.MANIFEST).write_text("{}")
    (tmp_path / "not-ours").mkdir()  # no manifest
    for name in ("current.failed", "old.failed", "recent.failed"):
        (tmp_path / name).write_text("x")
    _age(tmp_path / "current" / aot.MANIFEST, 90 * day)
    _age(tmp_path / "current.failed", 90 * day)
    _age(tmp_path / "old" / aot.MANIFEST, 31 * day)
    _age(tmp_path / "old.failed", 31 * day)
    _age(tmp_path / "recent" / aot.MANIFEST, 29 * day)
    _age(tmp_path / ".build-killed", 2 * 3600)
    _age(tmp_path / ".old-killed", 2 * 3600)
    aot._prune(tmp_path, keep="current")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".build-running", "current", "current.failed", "not-ours", "recent", "recent.failed"]


def test_loading_a_build_dates_it_as_used(built, tmp_path):
    root, _ = built
    (folder,) = [p.parent for p in (root / "cache" / "aot").glob("*/manifest.json")]
    copy = tmp_path / "build"
    shutil.copytree(folder, copy)
    _age(copy / aot.MANIFEST, 40 * 24 * 3600)
    assert aot._read_build(copy)
    assert time.time() - (copy / aot.MANIFEST).stat().st_mtime < 3600


def test_a_failed_build_is_tried_again_after_a_day(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUCURATE_AOT", "1")
    monkeypatch.setenv("GPUCURATE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(aot, "_loaded", {})
    name = "gpucurate.kernels.minhash.text_hashes"
    kernel = next(k for k in jit.kernels() if k.name == name)
    offsets, data = arrow_buffers(pa.array(["a b c"], pa.large_string()))
    kernel.dispatcher(offsets, padded_words(data))  # numba serves it: a build would take it
    builds = []
    monkeypatch.setattr(aot, "build", lambda wanted, kernels: builds.append(wanted))
    marker = aot._failed_marker()
    marker.parent.mkdir(parents=True)
    marker.write_text("OSError: No space left on device\n")
    assert aot.refresh(jit.kernels) is None and builds == []
    _age(marker, aot.RETRY_FAILED_S + 60)
    aot.refresh(jit.kernels)
    assert len(builds) == 1 and name in builds[0]


def test_a_cache_that_cannot_be_written_fails_no_command(tmp_path, monkeypatch, caplog):
    (tmp_path / "file").write_text("a file where the cache folder would go")
    monkeypatch.setenv("GPUCURATE_CACHE_DIR", str(tmp_path / "file" / "cache"))
    assert aot.build({}, jit.kernels) is None
    assert "GPUCURATE_CACHE_DIR" in caplog.text


def test_a_build_replaces_the_one_in_place(tmp_path):
    folder, staging = tmp_path / "build", tmp_path / ".build-new"
    for path, text in ((folder, "old"), (staging, "new")):
        path.mkdir()
        (path / aot.MANIFEST).write_text(text)
    aot._replace(folder, staging)
    assert (folder / aot.MANIFEST).read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["build"]


def test_a_build_replaces_one_put_in_place_meanwhile(tmp_path):
    """Another process's build lands between moving the old one aside and the rename: moved aside too."""
    folder = tmp_path / "build"
    staging = tmp_path / ".build-new"
    for path, text in ((folder, "old"), (staging, "new")):
        path.mkdir()
        (path / aot.MANIFEST).write_text(text)

    class Contested:
        name, calls = staging.name, 0

        def rename(self, target):
            self.calls += 1
            if self.calls == 2:  # the other build lands
                folder.mkdir()
                (folder / aot.MANIFEST).write_text("other")
            return staging.rename(target)

    aot._replace(folder, Contested())
    assert (folder / aot.MANIFEST).read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["build"]


def test_every_module_with_cpu_kernels_names_the_build():
    """A module whose kernels are built must be among the sources that name the build: otherwise an edited
    kernel loads the stale build of its old code (which crashed the process: pycc checks no argument)."""
    import re
    from pathlib import Path
    from gpucurate.kernels import aot
    package = Path(aot.__file__).resolve().parent.parent
    with_kernels = {str(p.relative_to(package)) for p in package.rglob("*.py")
                    if re.search(r"^@njit\(", p.read_text(encoding="utf-8"), re.M)}
    assert with_kernels <= set(aot.SOURCES), with_kernels - set(aot.SOURCES)
