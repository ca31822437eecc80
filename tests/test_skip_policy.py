"""conftest's skip policy: under ``CI=true`` a skip fails (a test, or a whole module skipped at import),
unless the test is marked ``gpu`` or ``realdata`` or the reason is on ``CI_ALLOWED_SKIPS``; the closing
lines count the skips by reason. Checked on a small suite run in a subprocess with conftest as a plugin."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

SUITE = {
    "test_cases.py": '''
import pytest

def test_passes():
    pass

def test_missing_tool():
    pytest.skip("the frobnicator is not installed")

@pytest.mark.gpu
def test_needs_gpu():
    pytest.skip("no CUDA device here")

@pytest.mark.realdata
def test_needs_data():
    pytest.skip("../shared/data not present")

@pytest.mark.xfail(reason="known")
def test_expected_failure():
    assert False
''',
    "test_module_skip.py": '''
import pytest
pytest.importorskip("no_such_module_for_the_skip_policy")

def test_never_collected():
    pass
''',
}


def _run(tmp_path, ci: str | None, *files: str) -> subprocess.CompletedProcess:
    """``files`` of the suite above with ``CI`` set to ``ci`` (None: unset)."""
    for name, text in SUITE.items():
        (tmp_path / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "conftest", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), "-W", "ignore::pytest.PytestUnknownMarkWarning", *files],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def _closing(out: str) -> str:
    return out.strip().splitlines()[-1]


def test_skips_fail_under_ci(tmp_path):
    proc = _run(tmp_path, "true", "test_cases.py")
    out = proc.stdout
    assert proc.returncode == 1, out
    assert re.search(r"^1 failed, 1 passed, 2 skipped, 1 xfailed in ", _closing(out)), out
    assert "skipped under CI=true: the frobnicator is not installed" in out
    # the allowed skips, counted by reason just before the closing line
    assert "2 skipped, by reason (allowed under CI=true)" in out, out
    assert re.search(r"^\s+1  no CUDA device here$", out, re.M) and re.search(r"^\s+1  \S*shared/data", out, re.M)


def test_a_module_skipped_at_import_fails_collection_under_ci(tmp_path):
    proc = _run(tmp_path, "true", "test_module_skip.py", "test_cases.py")
    assert proc.returncode == 2, proc.stdout  # interrupted: errors during collection
    assert "skipped under CI=true: could not import 'no_such_module_for_the_skip_policy'" in proc.stdout


@pytest.mark.parametrize("ci", [None, "false"])
def test_skips_stay_skips_outside_ci(tmp_path, ci):
    proc = _run(tmp_path, ci, "test_module_skip.py", "test_cases.py")
    assert proc.returncode == 0, proc.stdout
    assert re.search(r"^1 passed, 4 skipped, 1 xfailed in ", _closing(proc.stdout)), proc.stdout
    assert "4 skipped, by reason" in proc.stdout and "skipped under CI" not in proc.stdout


def test_allowlist_and_marks(monkeypatch):
    import conftest
    monkeypatch.setitem(conftest.CI_ALLOWED_SKIPS, r"^no display", "CI has no screen")
    assert conftest._skip_exempt("no display here", set()) == "CI has no screen"
    assert conftest._skip_exempt("no printer here", {"slow"}) is None
    assert conftest._skip_exempt("anything", {"slow", "realdata"}) == "marked realdata"
