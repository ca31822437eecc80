"""Output directories are never lost or mixed: one locked writer at a time, staging + completion marker +
swap, readers that refuse an incomplete run, SIGTERM like Ctrl-C, and environment errors as one line."""

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from conftest import read_annotations, write_jsonl
from gpucurate.cli import main
from gpucurate.io.writer import MARKER

ROOT = Path(__file__).resolve().parents[1]
RUN = ["--no-progress", "-q", "--set", "semantic.enabled=false"]


def records(prefix: str, n: int = 60) -> list[dict]:
    return [{"id": f"{prefix}{i}", "text": f"{prefix} document {i % 20} about topic {i % 7} with a few more words"}
            for i in range(n)]


@pytest.fixture
def inputs(tmp_path):
    return (str(write_jsonl(tmp_path / "a.jsonl", records("a"))), str(write_jsonl(tmp_path / "b.jsonl", records("b"))))


def run_args(src, out, *extra) -> list[str]:
    return ["run", "--input", str(src), "--output", str(out), *RUN, *extra]


def cli(capsys, *args) -> tuple[int, str]:
    code = main(list(args))
    return code, capsys.readouterr().err


def assert_one_line_error(code, err, exit_code, *needles):
    assert code == exit_code, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("gpucurate: error:"), err
    for needle in needles:
        assert str(needle) in lines[0], (needle, lines[0])


def snapshot(out: Path, skip=()) -> dict:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.name not in skip}


def leftovers(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")
                  and not p.name.endswith(".lock"))


def spawn(args: list[str], patch: str = "", env: dict | None = None, **kw) -> subprocess.Popen:
    """``python -m gpucurate ARGS`` in a subprocess, after the Python statements ``patch``."""
    code = f"import sys\n{patch}\nfrom gpucurate.cli import main\nsys.exit(main({args!r}))\n"
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


# --- point 2: one writer at a time ---------------------------------------------------------------

def test_second_run_into_the_same_directory_fails_at_once_naming_the_holder(tmp_path, inputs, capsys):
    """Two overwriting runs into one directory: the second exits 4 at once naming the first (pid, host,
    start time); the output then holds exactly the first run's rows, and a retry exactly the second's."""
    out = tmp_path / "out"
    paused, go = tmp_path / "paused", tmp_path / "go"
    patch = (  # the first run stops just before it puts its complete output in place
        "import time, pathlib, gpucurate.io.writer as w\n"
        "commit = w.StagedOutput.commit\n"
        "def slow(self):\n"
        f"    pathlib.Path({str(paused)!r}).touch()\n"
        "    t = time.monotonic()\n"
        f"    while not pathlib.Path({str(go)!r}).exists() and time.monotonic() - t < 120: time.sleep(0.05)\n"
        "    return commit(self)\n"
        "w.StagedOutput.commit = slow\n")
    first = spawn(run_args(inputs[0], out, "--set", "output.overwrite=true"), patch)
    try:
        wait_for(paused, first)
        start = time.monotonic()
        code, err = cli(capsys, *run_args(inputs[1], out, "--set", "output.overwrite=true"))
        assert time.monotonic() - start < 10
        assert_one_line_error(code, err, 4, out, "another gpucurate process", f"pid {first.pid}",
                              socket.gethostname(), "since", "run")
        code, err = cli(capsys, "report", "--run", str(out))  # also a writer of the directory
        assert_one_line_error(code, err, 4, f"pid {first.pid}")
    finally:
        go.touch()
        _, first_err = first.communicate(timeout=120)
    assert first.returncode == 0, first_err
    assert set(read_annotations(out).doc_id) == {f"a{i}" for i in range(60)}
    assert (out / MARKER).is_file()
    assert cli(capsys, *run_args(inputs[1], out, "--set", "output.overwrite=true"))[0] == 0
    assert set(read_annotations(out).doc_id) == {f"b{i}" for i in range(60)}
    assert leftovers(out) == []


def test_lock_of_a_killed_holder_is_released(tmp_path, inputs, capsys):
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom gpucurate.io.writer import lock_output\n"
                               f"with lock_output({str(out)!r}, 'test'):\n    print('locked', flush=True)\n"
                               "    time.sleep(120)\n"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert cli(capsys, *run_args(inputs[0], out))[0] == 4
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert cli(capsys, *run_args(inputs[0], out))[0] == 0


# --- point 3: staging, marker and swap ------------------------------------------------------------

def _disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device", "/data/out/annotations/part-00000.parquet")


@pytest.mark.parametrize("failure", ["bad input", "missing input", "disk full"])
def test_failed_overwrite_keeps_the_previous_output(tmp_path, inputs, capsys, monkeypatch, failure):
    out = tmp_path / "out"
    assert cli(capsys, *run_args(inputs[0], out))[0] == 0
    before = snapshot(out)
    src, needle = inputs[1], None
    if failure == "bad input":
        src = tmp_path / "bad.jsonl"
        src.write_text('{"id": "x", "text": "fine"}\n{not json\n')
        needle = "bad.jsonl:2"
    elif failure == "missing input":
        src, needle = tmp_path / "nope.jsonl", "nope.jsonl"
    else:
        import gpucurate.workflows.run
        monkeypatch.setattr(gpucurate.workflows.run, "write_partition", _disk_full)
        needle = "No space left on device"
    code, err = cli(capsys, *run_args(src, out, "--set", "output.overwrite=true"))
    assert_one_line_error(code, err, 1, needle)
    assert snapshot(out) == before  # untouched, marker included
    assert leftovers(out) == []
    monkeypatch.undo()
    assert cli(capsys, *run_args(inputs[1], out, "--set", "output.overwrite=true"))[0] == 0
    assert set(read_annotations(out).doc_id) == {f"b{i}" for i in range(60)}


def test_failed_first_run_leaves_nothing_that_blocks_a_retry(tmp_path, inputs, capsys):
    out = tmp_path / "out"
    code, err = cli(capsys, *run_args(tmp_path / "nope.jsonl", out))
    assert code == 1 and not out.exists() and leftovers(out) == []
    assert cli(capsys, *run_args(inputs[0], out))[0] == 0  # no "not empty"


def test_overwrite_replaces_only_a_gpucurate_output(tmp_path, inputs, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    code, err = cli(capsys, *run_args(inputs[0], out, "--set", "output.overwrite=true"))
    assert_one_line_error(code, err, 2, "notes.txt")
    assert (out / "notes.txt").read_text() == "mine"
    code, err = cli(capsys, *run_args(inputs[0], out))  # without overwrite, as before
    assert_one_line_error(code, err, 2, "not empty")


@pytest.mark.parametrize("point", ["output-written", "output-marked", "output-aside"])
def test_sigkill_keeps_the_previous_output(tmp_path, inputs, capsys, point):
    """SIGKILL while writing, after the marker, and between the two renames of the swap: the previous
    output stays complete and readable (put back by the next command after a kill between the renames),
    and a retry succeeds and removes the leftovers."""
    out = tmp_path / "out"
    assert cli(capsys, *run_args(inputs[0], out))[0] == 0
    before = snapshot(out)
    proc = spawn(run_args(inputs[1], out, "--set", "output.overwrite=true"), env={"GPUCURATE_FAILPOINT": point})
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL, err
    assert leftovers(out)  # the dead writer's staging (and, between the renames, the old output aside)
    if point == "output-aside":
        assert not out.exists()  # the documented window; a reader repairs it
        assert cli(capsys, "report", "--run", str(out))[0] == 0
        assert snapshot(out, skip=("report.html",)) == {k: v for k, v in before.items() if k != "report.html"}
    else:
        assert snapshot(out) == before
    assert ds.dataset(out / "annotations").count_rows() == 60
    assert cli(capsys, *run_args(inputs[1], out, "--set", "output.overwrite=true"))[0] == 0
    assert set(read_annotations(out).doc_id) == {f"b{i}" for i in range(60)}
    assert leftovers(out) == []


def test_sigterm_is_an_interrupt(tmp_path, inputs, capsys):
    out = tmp_path / "out"
    assert cli(capsys, *run_args(inputs[0], out))[0] == 0
    before = snapshot(out)
    writing = tmp_path / "writing"
    patch = (  # the partition writes (in the Dask threads) are slow
        "import time, pathlib, gpucurate.workflows.run as p\n"
        "write = p.write_partition\n"
        "def slow(*a, **k):\n"
        f"    pathlib.Path({str(writing)!r}).touch()\n"
        "    time.sleep(2)\n"
        "    return write(*a, **k)\n"
        "p.write_partition = slow\n")
    proc = spawn(run_args(inputs[1], out, "--set", "output.overwrite=true"), patch)
    wait_for(writing, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "gpucurate: terminated (SIGTERM)" in err and "Traceback" not in err
    assert snapshot(out) == before
    assert cli(capsys, *run_args(inputs[1], out, "--set", "output.overwrite=true"))[0] == 0
    assert leftovers(out) == []


# --- point 4: rethreshold in place ------------------------------------------------------------------

def test_killed_rethreshold_in_place_leaves_the_run_intact(tmp_path, inputs, capsys):
    out = tmp_path / "out"
    assert cli(capsys, *run_args(inputs[0], out, "--set", "fuzzy.threshold=0.5"))[0] == 0
    before = snapshot(out)
    args = ["rethreshold", "--run", str(out), "--set", "fuzzy.threshold=0.9", "-q"]
    proc = spawn(args, env={"GPUCURATE_FAILPOINT": "output-written"})
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL, err
    assert snapshot(out) == before  # no part at the new threshold, no .tmp file
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    assert ds.dataset(out / "annotations").count_rows() == 60
    assert cli(capsys, "report", "--run", str(out))[0] == 0
    assert cli(capsys, *args)[0] == 0
    assert json.loads((out / "summary.json").read_text())["config"]["fuzzy"]["threshold"] == 0.9
    assert (out / MARKER).is_file() and leftovers(out) == []


@pytest.mark.parametrize("command", ["report", "rethreshold", "ingest --from-run"])
def test_readers_refuse_a_run_without_the_marker(tmp_path, inputs, capsys, command):
    out = tmp_path / "out"
    assert cli(capsys, *run_args(inputs[0], out))[0] == 0
    (out / MARKER).unlink()
    before = snapshot(out)
    args = {"report": ["report", "--run", str(out)],
            "rethreshold": ["rethreshold", "--run", str(out), "--set", "fuzzy.threshold=0.9"],
            "ingest --from-run": ["ingest", "--from-run", str(out), "--state", str(tmp_path / "state"),
                                  "--no-progress"]}[command]
    code, err = cli(capsys, *args, "-q")
    assert_one_line_error(code, err, 1, out, MARKER, "not a complete gpucurate run")
    assert snapshot(out) == before


# --- point 11: environment and argument errors ------------------------------------------------------

def test_output_under_a_file(tmp_path, inputs, capsys):
    (tmp_path / "file").write_text("x")
    code, err = cli(capsys, *run_args(inputs[0], tmp_path / "file" / "out"))
    assert_one_line_error(code, err, 1, tmp_path / "file", "not a directory")
    code, err = cli(capsys, "demo", "--docs", "5", "--output", str(tmp_path / "file" / "demo"), *RUN)
    assert_one_line_error(code, err, 1, tmp_path / "file")


def test_unwritable_output_directory(tmp_path, inputs, capsys):
    """Root ignores permission bits: sysfs refuses a new directory even to root."""
    target = Path("/sys/gpucurate-test-output")
    try:
        target.mkdir()
    except OSError:
        pass
    else:
        target.rmdir()
        pytest.skip("/sys is writable here")
    code, err = cli(capsys, *run_args(inputs[0], target))
    assert_one_line_error(code, err, 1, target, "cannot write")


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_rethreshold_of_a_damaged_run(tmp_path, inputs, capsys, damage):
    out = tmp_path / "out"
    assert cli(capsys, *run_args(inputs[0], out))[0] == 0
    edges = out / "edges.parquet"
    if damage == "missing":
        edges.unlink()
    else:
        edges.write_bytes(edges.read_bytes()[:100])
    before = snapshot(out)
    code, err = cli(capsys, "rethreshold", "--run", str(out), "--set", "fuzzy.threshold=0.9", "-q")
    assert_one_line_error(code, err, 1, edges)
    assert snapshot(out) == before and leftovers(out) == []
    if damage == "truncated":
        code, err = cli(capsys, "report", "--run", str(out), "-q")
        assert_one_line_error(code, err, 1, edges)


def test_demo_negative_docs(tmp_path, capsys):
    code, err = cli(capsys, "demo", "--docs", "-5", "--output", str(tmp_path / "demo"))
    assert_one_line_error(code, err, 2, "--docs", "-5")
    assert not (tmp_path / "demo").exists()
    from gpucurate.generators.demo import write_demo_corpus
    with pytest.raises(ValueError):  # the API still raises a ValueError (an ArgumentError, exit 2 in the CLI)
        write_demo_corpus(tmp_path / "d", n_docs=-5)
    assert not (tmp_path / "d").exists()
