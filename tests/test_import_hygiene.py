"""``import gpucurate``, a local run on the CPU and the GPU backend need no Dask: dask and distributed are
imported only by the code paths that use them (a cluster, Dask collections). The GPU machine the project
is lent has neither, so a stray import there would fail the whole GPU check at start-up.

Each check runs in a fresh interpreter whose ``sitecustomize`` makes dask, distributed, dask-cuda and
dask-cudf unimportable.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import read_annotations, write_jsonl

ROOT = Path(__file__).resolve().parents[1]
DASK = ("dask", "distributed", "dask_cuda", "dask_cudf")

SITECUSTOMIZE = f"""
import sys

class RefuseDask:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {DASK!r}:
            raise ImportError(f"{{name}} is made unimportable by tests/test_import_hygiene.py")
        return None

sys.meta_path.insert(0, RefuseDask())
"""


def _python(tmp_path, *args, code=None):
    """Run ``python -c code`` or ``python -m args`` with Dask unimportable; returns the completed process."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]))
    cmd = [sys.executable, "-c", code] if code is not None else [sys.executable, "-m", *args]
    return subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)


def _corpus(tmp_path) -> Path:
    base = "the quarterly report shows revenue growth across all regions and segments this year"
    records = [{"id": i, "text": f"{base} {'again ' * (i % 3)}note {i % 5}"} for i in range(60)]
    records += [{"id": 100 + i, "text": f"an unrelated letter number {i} about something else entirely"}
                for i in range(20)]
    return write_jsonl(tmp_path / "docs.jsonl", records)


def test_blocker_refuses_dask(tmp_path):
    """The check itself: with the sitecustomize, importing dask fails."""
    proc = _python(tmp_path, code="import dask")
    assert proc.returncode != 0 and "made unimportable by tests/test_import_hygiene.py" in proc.stderr


def test_import_and_both_backends_without_dask(tmp_path):
    """``import gpucurate``, then whole exact + fuzzy runs on the CPU and on the GPU backend (its kernels in
    numba's CUDA simulator, as conftest sets) with partitions on local threads: no Dask module is loaded."""
    src = _corpus(tmp_path)
    code = f"""
import json, sys
import gpucurate
after_import = sorted(m for m in sys.modules if m.partition(".")[0] in {DASK!r})
over = {{"run.progress": False, "semantic.enabled": False, "input.partition_bytes": 2000,
         "fuzzy.num_perm": 32, "fuzzy.threshold": 0.6}}
cpu = gpucurate.run([{str(src)!r}], "cpu", overrides={{**over, "run.backend": "cpu"}})
gpu = gpucurate.run([{str(src)!r}], "gpu", overrides={{**over, "run.backend": "gpu"}})
print(json.dumps({{"after_import": after_import, "cpu": cpu["stages"]["fuzzy"]["duplicates"],
                  "gpu": gpu["stages"]["fuzzy"]["duplicates"], "resident": gpu["device"]["resident"],
                  "partitions": cpu["stages"]["input"]["partitions"],
                  "dask": sorted(m for m in sys.modules if m.partition(".")[0] in {DASK!r})}}))
"""
    proc = _python(tmp_path, code=code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["after_import"] == [] and got["dask"] == []
    assert got["partitions"] > 1 and got["resident"]
    assert got["gpu"] == got["cpu"] > 0
    assert read_annotations(tmp_path / "gpu").equals(read_annotations(tmp_path / "cpu"))


def test_cli_run_without_dask(tmp_path):
    """The CLI as a user runs it, JSON Lines in: exit 0 and the output written."""
    src = _corpus(tmp_path)
    proc = _python(tmp_path, "gpucurate", "run", "--input", str(src), "--output", "out", "-q",
                   "--set", "semantic.enabled=false")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["stages"]["exact"]["duplicates"] + summary["stages"]["fuzzy"]["duplicates"] > 0
