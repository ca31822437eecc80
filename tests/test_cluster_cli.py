"""A real multi-process Dask cluster started from the command line (``dask scheduler`` + two ``dask worker``
processes with a memory limit), driven by ``python -m gpucurate run --scheduler``; and a worker killed
in the middle of a run."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import ANNOTATION_COLUMNS, read_annotations, write_jsonl

pytestmark = pytest.mark.slow
DASK = shutil.which("dask") or str(Path(sys.executable).with_name("dask"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CliCluster:
    """``dask scheduler`` and ``dask worker`` processes on loopback; workers inherit ``env``."""

    def __init__(self, tmp: Path, workers: int = 2, memory: str = "2GB", env: dict | None = None):
        self.port = _free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.env = {**os.environ, **(env or {})}
        self.procs = []
        self.log = tmp / "cluster.log"
        self._out = open(self.log, "w")
        self.procs.append(self._spawn([DASK, "scheduler", "--host", "127.0.0.1", "--port", str(self.port),
                                       "--no-dashboard"]))
        self._wait_for_port()
        for k in range(workers):
            self.procs.append(self._spawn([DASK, "worker", self.address, "--nworkers", "1", "--nthreads", "1",
                                           "--memory-limit", memory, "--no-dashboard", "--host", "127.0.0.1",
                                           "--local-directory", str(tmp / f"worker-{k}")]))
        self._wait_for_workers(workers)

    def _spawn(self, args):
        return subprocess.Popen(args, stdout=self._out, stderr=subprocess.STDOUT, env=self.env,
                                start_new_session=True)

    def _wait_for_port(self):
        deadline = time.time() + 60
        while time.time() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.2)
        raise RuntimeError("dask scheduler did not start:\n" + self.log.read_text()[-3000:])

    def _wait_for_workers(self, n):
        from distributed import Client
        with Client(self.address, timeout="30s") as c:
            c.wait_for_workers(n, timeout=120)

    def worker_pids(self) -> list[int]:
        """PIDs of the worker processes (the children of the nannies)."""
        from distributed import Client
        with Client(self.address, timeout="30s") as c:
            return sorted(c.run(os.getpid).values())

    def close(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        self._out.close()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, demo_frame):
    tmp = tmp_path_factory.mktemp("cluster")
    recs = demo_frame.to_dict(orient="records")
    for n in range(6):
        write_jsonl(tmp / f"part-{n}.jsonl", recs[n * 250:(n + 1) * 250])
    local = tmp / "local"
    from gpucurate.workflows.run import run
    run([str(tmp / "part-*.jsonl")], local, overrides={"run.progress": False, "semantic.enabled": False,
                                                         "input.partition_bytes": 30000})
    return tmp, read_annotations(local)


def _cli_run(corpus_dir: Path, out: Path, address: str, *settings: str) -> subprocess.CompletedProcess:
    extra = [a for s in settings for a in ("--set", s)]
    return subprocess.run([sys.executable, "-m", "gpucurate", "run", "--input", str(corpus_dir / "part-*.jsonl"),
                           "--output", str(out), "--scheduler", address, "--no-progress", "-q",
                           "--set", "semantic.enabled=false", "--set", "input.partition_bytes=30000", *extra],
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("components", ["driver", "auto"])
def test_run_on_a_command_line_cluster_is_identical(tmp_path, corpus, components):
    """The LSH on the workers (auto on a cluster) with components on the driver or by exchanges between the
    partitions (auto on a cluster)."""
    corpus_dir, local = corpus
    cluster = CliCluster(tmp_path)
    try:
        done = _cli_run(corpus_dir, tmp_path / "out", cluster.address, f"fuzzy.components={components}")
    finally:
        cluster.close()
    assert done.returncode == 0, done.stderr[-3000:]
    pd.testing.assert_frame_equal(read_annotations(tmp_path / "out")[ANNOTATION_COLUMNS], local[ANNOTATION_COLUMNS])
    fuzzy = json.loads((tmp_path / "out" / "summary.json").read_text())["stages"]["fuzzy"]
    assert fuzzy["lsh"] == "dask" and fuzzy["components"] == ("driver" if components == "driver" else "exchanges")


def test_a_killed_worker_is_retried_and_the_output_is_complete(tmp_path, corpus):
    """The first worker to read partition 7 is SIGKILLed there; the nanny restarts it, Dask reruns the lost
    tasks (and recomputes what the dead worker held), and the annotations are those of a local run."""
    corpus_dir, local = corpus
    marker = tmp_path / "killed-once"
    cluster = CliCluster(tmp_path, env={"GPUCURATE_FAILPOINT": f"read-partition-7@{marker}"})
    try:
        before = cluster.worker_pids()
        done = _cli_run(corpus_dir, tmp_path / "out", cluster.address)
        after = cluster.worker_pids()
    finally:
        cluster.close()
    assert marker.exists(), "the failpoint was not reached"
    assert before != after, "a worker process was replaced"
    assert done.returncode == 0, done.stderr[-3000:]
    out = read_annotations(tmp_path / "out")
    assert len(out) == len(local) == 1500
    pd.testing.assert_frame_equal(out[ANNOTATION_COLUMNS], local[ANNOTATION_COLUMNS])
