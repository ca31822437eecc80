"""Shared benchmark helpers: corpora, peak-memory sampling, tables and JSON output."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
REUTERS = SHARED_DATA / "reuters21578" / "reuters21578.jsonl.gz"


def reuters_bodies(path: Path = REUTERS) -> tuple[list[str], list[int]]:
    """Non-empty Reuters bodies and their ``newid`` (19,043 documents) of ``path`` (the shared copy)."""
    if not path.is_file():
        raise SystemExit(f"benchmark data not found: {path}")
    texts, ids = [], []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            if rec.get("body"):
                texts.append(rec["body"])
                ids.append(rec["newid"])
    return texts, ids


def enlarge(texts: list[str], factor: int, edit_fraction: float = 0.02, seed: int = 0) -> list[str]:
    """``factor`` copies of every text, each with ``edit_fraction`` of its words replaced by random words of
    the corpus vocabulary, shuffled (fixed seed). ``factor == 1`` returns the texts unchanged."""
    if factor == 1:
        return list(texts)
    rng = np.random.default_rng(seed)
    tokenized = [t.split() for t in texts]
    vocab = np.array(sorted({w for toks in tokenized for w in toks}))
    out = []
    for toks in tokenized:
        n_edit = int(round(edit_fraction * len(toks)))
        for _ in range(factor):
            copy = list(toks)
            if n_edit:
                for pos, word in zip(rng.choice(len(toks), n_edit, replace=False), rng.choice(vocab, n_edit)):
                    copy[pos] = str(word)
            out.append(" ".join(copy))
    order = rng.permutation(len(out))
    return [out[i] for i in order]


class PeakMemory:
    """Peak resident memory of this process above the level at entry, sampled every 10 ms (MiB)."""

    def __enter__(self):
        import psutil
        self._proc = psutil.Process(os.getpid())
        self.base = self._proc.memory_info().rss
        self.peak = self.base
        self._stop = False
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop:
            self.peak = max(self.peak, self._proc.memory_info().rss)
            time.sleep(0.01)

    def __exit__(self, *exc):
        self._stop = True
        self._thread.join()
        self.peak = max(self.peak, self._proc.memory_info().rss)
        self.mib = (self.peak - self.base) / 2**20


@contextmanager
def timed(results: dict, key: str):
    start = time.perf_counter()
    with PeakMemory() as mem:
        yield
    results[key] = {"seconds": round(time.perf_counter() - start, 3), "peak_mib": round(mem.mib, 1)}


def print_table(rows: list[dict], columns: list[str], title: str) -> None:
    from rich.console import Console
    from rich.table import Table
    t = Table(title=title)
    for c in columns:
        t.add_column(c, justify="left" if c == columns[0] else "right")
    for r in rows:
        t.add_row(*[_fmt(r.get(c)) for c in columns])
    Console(width=200).print(t)


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 10 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def write_json(data: dict, path: str | Path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=2) + "\n")


def stop_processes(procs: list) -> None:
    """Stop started process groups (a scheduler and its workers), newest first: SIGTERM, then SIGKILL
    after 30 s."""
    for proc in reversed(procs):
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def time_command(cmd: list[str], check: bool = True, env: dict | None = None, cwd: str | None = None) -> dict:
    """``cmd`` under GNU time (``/usr/bin/time``): ``{"seconds", "peak_rss_mib"}`` from spawn to exit. A failed
    command exits the benchmark, or with ``check=False`` gives ``{"seconds", "exit_code", "error"}``. ``env``:
    the command's environment (default this process's); ``cwd``: its working directory (``python -m`` imports
    from there before ``PYTHONPATH``)."""
    import subprocess
    import tempfile
    import time
    with tempfile.TemporaryDirectory() as tmp:
        rss = Path(tmp) / "rss"
        t0 = time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", str(rss), *cmd], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                              cwd=cwd)
        seconds = round(time.perf_counter() - t0, 2)
        if proc.returncode and not check:
            return {"seconds": seconds, "exit_code": proc.returncode, "error": proc.stderr[-2000:]}
        if proc.returncode:
            raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
        return {"seconds": seconds, "peak_rss_mib": round(int(rss.read_text().split()[-1]) / 1024)}
