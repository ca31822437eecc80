"""GPU check: one run of 6-8 minutes on a machine with one CUDA GPU (CuPy, numba-cuda; PyTorch optional;
no cuDF, no internet needed), short enough to run twice in a 15-minute device budget.

Phases (``--phases a,b,c,d,e``; each runs in its own thread under its own deadline, ``--timeout-X``
seconds; one that fails or runs out of time records its error and the next one still runs):

  (a) environment: versions (Python, NumPy, CuPy, numba, numba-cuda, PyTorch, CUDA driver and runtime),
      ``numba.cuda.detect()``, the device (name, memory, SMs, compute capability), ``device.arrays.probe_device``
      (compile + launch a kernel), every kernel of ``kernels.cuda.KERNELS`` compiled once (JIT seconds),
      the PTX version and target used, and host <-> device bandwidth from pageable and pinned memory
      (256 MiB, CUDA events) plus device-to-device.
  (b) parity with the CPU kernels: the glue's text hashes, shingle sets, signatures, band keys, candidate
      pairs, Jaccard scores and components against ``kernels.minhash`` / ``kernels.pairs`` on 200k
      synthetic documents and on a sliced Arrow array (offsets not starting at 0), the host-array API on
      the slice, and whole runs (``gpucurate.run``, semantic off) with ``run.backend`` gpu vs cpu: byte
      equality of the annotation files, ``edges.parquet`` and ``run_index.parquet`` on a synthetic Parquet
      corpus and on Reuters-21578 (``../shared/data`` beside the checkout, or the copy that
      ``benchmarks/device/prepare.sh`` puts in ``benchmarks/device/data/``).
  (c) kernel-only timings on pre-uploaded inputs (CUDA events, one warm-up, best of ``--repeat``): text
      units, exact hashes, unit hashes, shingle sets, MinHash, band keys, the whole MinHash chain from the
      uploaded text, LSH bucketing (candidate pairs), verification (Jaccard), components; in GB/s of text
      and documents/s, each CUDA kernel's own time (an event pair around every launch), and the same
      steps with the CPU kernels on all cores.
  (d) end to end: exact + fuzzy runs (Parquet in, semantic off) on the GPU and the CPU backend at three
      sizes (100k, 300k, 1M documents), the fixed cost and slope of wall time vs text bytes (least
      squares), the transfer ledger and the device memory high-water (``summary["device"]`` and CuPy's
      pool). A size whose predicted time does not fit in the phase's time left is skipped (and said so).
  (e) the static resources of every kernel (``benchmarks/gpu_static.py``: registers, spills, occupancy;
      needs the nvidia-cuda-nvcc wheel's ptxas, the phase records the error without it) beside the
      kernel times measured in (c).

The result is written after every phase (and inside the long ones) to ``$OUT/gpu_check.json`` when
``$OUT`` is set, else to ``--out`` (default ``benchmarks/results/gpu_check.json``; an explicit ``--out``
wins over ``$OUT``), so a killed run still leaves what it had. The end is one table with the targets
(MinHash >= 20 GB/s of text, measured on the whole chain text -> band keys of (c), the minhash kernel
alone shown beside it; whole exact + fuzzy run >= 1 GB/s of Parquet text at the largest size of (d);
GPU >= 10x the CPU backend on the same machine's cores, whole runs at the largest size both ran) and
PASS/FAIL for each (n/a in the simulator). Exit status 1 when a parity check fails or phase a-d errs or
times out; a phase left behind at its deadline stops at its next checkpoint, and the next phase waits for
it a while before it uses the device.

Through the project's device tool (one H200, 16 cores): ``benchmarks/device/prepare.sh`` here, then
``bash benchmarks/device/run.sh`` there (docs/gpu.md shows the call): it installs the carried wheels and
runs this script with ``--budget``, which scales the phase limits down to fit (``--phases a,c`` runs a
subset). The script imports ``gpucurate`` from the checkout when it is not installed; what it and the
GPU path import (NumPy, pandas, pyarrow, PyYAML, rich, numba, numba-cuda, CuPy; orjson, array-api-compat
and dask, which the device image lacks, travel as wheels) must be importable there.

In a RAPIDS container (or any CUDA 12 image with Python):

    docker run --gpus all --rm -it -v $PWD:/src -w /src rapidsai/base:latest bash
    pip install -e '.[gpu]' && python benchmarks/gpu_check.py

On a multi-GPU node this script measures one GPU (the first visible one; pick it with
``CUDA_VISIBLE_DEVICES``). The pipeline itself starts one Dask worker per GPU (``LocalCUDACluster``) when
it runs with ``--backend gpu`` and dask-cuda is installed (``pip install dask-cuda``):
``gpucurate run --backend gpu ...``.

Without a GPU, ``--smoke`` runs every phase on tiny inputs in numba's CUDA simulator (~40 s: glue parity on
300 short documents and a 100-document slice, a 150-document whole run, kernels on 100, whole runs of
50/100/150; 16 permutations, word 2-shingles, threshold 0.5, so that the short texts have near
duplicates), timed with perf_counter and marked ``simulated: true`` (no bandwidth, no CUDA events):

    NUMBA_ENABLE_CUDASIM=1 python benchmarks/gpu_check.py --smoke --out /tmp/gpu_check.json
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
if str(ROOT) not in sys.path:  # gpucurate from this checkout when it is not installed (a bare device machine)
    sys.path.insert(1, str(ROOT))
from common import REUTERS, print_table, reuters_bodies, write_json  # noqa: E402

PHASES = {"a": "environment", "b": "parity", "c": "kernel timings", "d": "end to end", "e": "static resources",
          "f": "semantic"}
DEFAULT_TIMEOUTS = {"a": 45, "b": 90, "c": 75, "d": 180, "e": 30, "f": 240}  # a-e: 420 s in all
TARGETS = {"minhash_gb_s": 20.0, "whole_run_gb_s": 1.0, "gpu_vs_cpu": 10.0}
# parity check -> the record of phase (b) that holds its details
PARITY_SOURCES = {"glue_sketch_and_pairs": "glue", "glue_sliced_arrow": "glue_sliced",
                  "host_api_sliced_arrow": "host_api_sliced"}
# which CUDA kernels each glue step launches (the static table's rows are kernels)
STEP_KERNELS = {"text units": ["byte_flags"], "exact text hashes": ["text_hashes"], "unit hashes": ["unit_hashes"],
                "shingle sets": ["shingle_hashes"], "minhash signatures": ["minhash"], "band keys": ["band_keys"],
                "lsh candidate pairs": ["emit_bucket_pairs"], "verify jaccard": ["jaccard_sorted"],
                "components": ["hook_min", "compress_labels"]}


# --- synthetic corpus ------------------------------------------------------------------------------------

_CHUNK = 1 << 16
_VOCAB: dict[int, pa.Array] = {}


def _vocab(size: int) -> pa.Array:
    if size not in _VOCAB:
        _VOCAB[size] = pa.array([f"w{i:x}" for i in range(size)], pa.large_string())
    return _VOCAB[size]


def _chunk_texts(n: int, seed, vocab_size: int, min_words: int, max_words: int, copy_fraction: float,
                 exact_fraction: float, edit_rate: float) -> pa.Array:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(min_words, max_words + 1, n)
    copies = rng.random(n) < copy_fraction
    copies[0] = False  # a chunk always has an original to copy
    originals = np.flatnonzero(~copies)
    cd = np.flatnonzero(copies)
    cs = originals[rng.integers(0, len(originals), len(cd))]
    lengths[cd] = lengths[cs]
    starts = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=starts[1:])
    # word ids log-uniform over the vocabulary (a Zipf law of exponent 1: frequent words, a long tail)
    ids = (np.float32(vocab_size) ** rng.random(int(starts[-1]), dtype=np.float32)).astype(np.int32) - 1
    np.clip(ids, 0, vocab_size - 1, out=ids)
    k = lengths[cd]
    rep = np.repeat(np.arange(len(cd)), k)
    within = np.arange(int(k.sum())) - np.repeat(np.cumsum(k) - k, k)
    dst = starts[cd][rep] + within
    ids[dst] = ids[starts[cs][rep] + within]  # a copy takes its original's words ...
    near = rng.random(len(cd)) >= exact_fraction
    edit = near[rep] & (rng.random(len(dst), dtype=np.float32) < edit_rate)
    ids[dst[edit]] = rng.integers(0, vocab_size, int(edit.sum()))  # ... then some edits (near copies)
    words = _vocab(vocab_size).take(pa.array(ids))
    return pc.binary_join(pa.LargeListArray.from_arrays(pa.array(starts), words),
                          pa.scalar(" ", pa.large_string())).cast(pa.large_string())


def synthetic_texts(n_docs: int, seed: int = 0, vocab_size: int = 50_000, min_words: int = 50,
                    max_words: int = 400, copy_fraction: float = 1 / 3, exact_fraction: float = 0.2,
                    edit_rate: float = 0.02, threads: int | None = None) -> pa.LargeStringArray:
    """``n_docs`` texts of ``min_words``-``max_words`` random words (``w`` + hex id, log-uniform ids),
    ``copy_fraction`` of them copies of another text of their 65,536-document chunk: ``exact_fraction`` of
    the copies exact, the others with ``edit_rate`` of the words replaced. Built with Arrow kernels, the
    chunks on ``threads`` threads (1M documents, ~1 GB of text, in a few seconds on 16 cores); the same
    arguments give the same texts."""
    from concurrent.futures import ThreadPoolExecutor
    counts = [min(_CHUNK, n_docs - s) for s in range(0, n_docs, _CHUNK)]
    if not counts:
        return pa.array([], pa.large_string())
    _vocab(vocab_size)

    def one(i):
        return _chunk_texts(counts[i], np.random.SeedSequence([seed, i]), vocab_size, min_words, max_words,
                            copy_fraction, exact_fraction, edit_rate)
    with ThreadPoolExecutor(threads or os.cpu_count() or 1) as pool:
        parts = list(pool.map(one, range(len(counts))))
    return pa.concat_arrays(parts) if len(parts) > 1 else parts[0]


def text_nbytes(arr: pa.Array) -> int:
    from gpucurate.stages.normalize import arrow_buffers
    offsets, _ = arrow_buffers(arr)
    return int(offsets[-1] - offsets[0])


#: where ``benchmarks/device/prepare.sh`` copies the Reuters file for the device (``../shared`` does not travel)
DEVICE_REUTERS = ROOT / "benchmarks" / "device" / "data" / "reuters21578.jsonl.gz"


def reuters_path() -> Path | None:
    for p in (DEVICE_REUTERS, REUTERS):
        if p.is_file():
            return p
    return None


def reuters_table(path: Path) -> pa.Table:
    """Non-empty Reuters bodies and their ``newid``."""
    texts, ids = reuters_bodies(path)
    return pa.table({"id": pa.array(ids, pa.int64()), "text": pa.array(texts, pa.large_string())})


# --- shared state, timing helpers --------------------------------------------------------------------------

class Context:
    """What the phases share: arguments, the backend, the corpus, the result and its writer."""

    def __init__(self, args, result: dict, out_path: Path):
        self.args, self.result, self.out_path = args, result, out_path
        self.backend = None
        self._local = threading.local()  # each phase thread's deadline
        self.zombies: list[threading.Thread] = []
        # held by the running phase: one left behind past its deadline stops at its next checkpoint, and
        # the next phase waits for that (a while) before it uses the device (the simulator is not
        # thread-safe; on a GPU two phases at once would also skew the timings)
        self.phase_lock = threading.Lock()
        self.tmp = Path(tempfile.mkdtemp(prefix="gpu_check-", dir=args.tmp))
        self._corpus: pa.Array | None = None
        self.corpus_docs = 0
        self.kernel_measured: dict[str, dict] = {}  # CUDA kernel -> measured in (c)
        self.text_bytes_c = 0
        self._save_lock = threading.Lock()

    def left(self) -> float:
        """Seconds left to the calling phase."""
        return getattr(self._local, "deadline", math.inf) - time.monotonic()

    def checkpoint(self) -> None:
        """Stop a phase thread that is past its deadline (it was left behind: the next phase runs)."""
        if self.left() < -2:
            raise PhaseAbandoned("past the phase's deadline")

    def get_backend(self):
        if self.backend is None:
            from gpucurate.engine.backend import select
            self.backend = select("gpu")
        return self.backend

    @property
    def dev(self):
        return self.get_backend().arrays

    @property
    def simulated(self) -> bool:
        return bool(self.dev.simulated)

    def corpus(self, n: int) -> pa.Array:
        """The first ``n`` synthetic documents (one corpus for every phase, generated once)."""
        if self._corpus is None or len(self._corpus) < n:
            a = self.args
            start = time.perf_counter()
            self._corpus = synthetic_texts(max(n, self.corpus_docs), seed=a.seed, min_words=a.min_words,
                                           max_words=a.max_words, edit_rate=a.edit_rate)
            self.result.setdefault("corpus", {}).update(
                {"documents": len(self._corpus), "text_bytes": text_nbytes(self._corpus),
                 "generated_s": round(time.perf_counter() - start, 2), "min_words": a.min_words,
                 "max_words": a.max_words, "edit_rate": a.edit_rate, "seed": a.seed})
        return self._corpus.slice(0, n)

    def save(self) -> None:
        self.checkpoint()
        with self._save_lock:
            for _ in range(5):  # a phase thread past its deadline may still be writing into the result
                try:
                    data = json.loads(json.dumps(self.result, default=_json_default))
                    break
                except RuntimeError:
                    time.sleep(0.05)
            else:
                return
            tmp = self.out_path.with_name(self.out_path.name + ".tmp")
            write_json(data, tmp)
            os.replace(tmp, self.out_path)


def _json_default(v):
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, (Path, tuple, set)):
        return str(v) if isinstance(v, Path) else list(v)
    return repr(v)


class PhaseAbandoned(RuntimeError):
    pass


class OutOfTime(RuntimeError):
    """The phase's time is nearly spent: the steps left are skipped (and said so)."""


class Clock:
    """CUDA events (on CuPy's current stream, which numba's launches share) on a GPU, perf_counter in the
    simulator (whose launches are synchronous)."""

    def __init__(self, dev):
        self.events = dev.kind == "cupy"
        if self.events:
            import cupy
            self.cp = cupy

    def mark(self):
        if self.events:
            e = self.cp.cuda.Event()
            e.record()
            return e
        return time.perf_counter()

    def seconds(self, a, b) -> float:
        if self.events:
            b.synchronize()
            return self.cp.cuda.get_elapsed_time(a, b) / 1e3
        return b - a

    def sync(self):
        if self.events:
            self.cp.cuda.get_current_stream().synchronize()


@contextlib.contextmanager
def traced_launches(dev, clock: Clock, records: list):
    """Every ``dev.launch`` inside appends ``(kernel, threads, start, end)`` (an event pair on a GPU)."""
    launch = dev.launch

    def timed_launch(name, n, *args):
        if n <= 0:
            return launch(name, n, *args)
        a = clock.mark()
        launch(name, n, *args)
        records.append((name, n, a, clock.mark()))
    dev.launch = timed_launch
    try:
        yield
    finally:
        del dev.launch


def time_step(dev, clock: Clock, fn, repeat: int, warmup: bool):
    """``(timing, output)``: the best and median seconds of ``repeat`` calls of ``fn`` and each CUDA kernel's
    time in the best call."""
    if warmup:
        fn()
        clock.sync()
    times, best, out = [], None, None
    for _ in range(max(1, repeat)):
        records: list = []
        out = None
        with traced_launches(dev, clock, records):
            a = clock.mark()
            out = fn()
            b = clock.mark()
        sec = clock.seconds(a, b)
        times.append(sec)
        if best is None or sec < best[0]:
            kernels: dict = {}
            for name, n, x, y in records:
                k = kernels.setdefault(name, {"launches": 0, "threads": 0, "seconds": 0.0})
                k["launches"] += 1
                k["threads"] += int(n)
                k["seconds"] += clock.seconds(x, y)
            best = (sec, kernels)
    return {"seconds": best[0], "median_s": statistics.median(times), "repeats": len(times),
            "kernels": best[1]}, out


def cpu_time(fn, repeat: int = 1):
    best, out = math.inf, None
    for _ in range(max(1, repeat)):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def fuzzy_params(args) -> SimpleNamespace:
    """The run's MinHash settings (word ``--ngram``-shingles, seed 42, verify on) as glue params."""
    from gpucurate.kernels.hashing import permutations
    from gpucurate.kernels.minhash import WORD
    from gpucurate.stages.sketches import optimal_bands_rows
    bands, rows = optimal_bands_rows(args.threshold, args.num_perm, 0.02, 0.98)
    a, b = permutations(args.num_perm, 42)
    return SimpleNamespace(mode=WORD, k=args.ngram, seed=np.uint64(42), bands=bands, rows=rows, keep_signatures=True,
                           perm_a=a, perm_b=b, threshold=args.threshold, max_bucket=1000, anchors=8)


def run_overrides(args, backend: str, columns: str = "all") -> dict:
    over = {"run.backend": backend, "run.progress": False, "semantic.enabled": False, "output.overwrite": True,
            "fuzzy.num_perm": args.num_perm, "fuzzy.threshold": args.threshold, "fuzzy.ngram": args.ngram,
            "output.columns": columns}
    if args.workers:
        over["run.workers"] = args.workers
    return over


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}".strip()


def attempt(rec: dict, key: str, fn):
    """``rec[key] = fn()``, or ``rec[key] = {"error": ...}`` when it raises."""
    try:
        rec[key] = fn()
    except Exception as exc:  # noqa: BLE001 - a sub-step's failure is a result
        rec[key] = {"error": _first_line(exc)}
    return rec[key]


# --- (a) environment ---------------------------------------------------------------------------------------

def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def versions() -> dict:
    from importlib import metadata
    out = {"python": sys.version.split()[0], "platform": platform.platform(), "cpu_count": os.cpu_count()}
    for dist in ("gpucurate", "numpy", "pandas", "pyarrow", "numba", "numba-cuda", "cupy", "cupy-cuda12x", "cupy-cuda13x",
                 "torch", "nvidia-cuda-nvcc-cu12", "dask-cuda"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    try:
        import cupy
        out["cupy_module"] = cupy.__version__
        out["cuda_driver"] = _cuda_version(cupy.cuda.runtime.driverGetVersion())
        out["cuda_runtime"] = _cuda_version(cupy.cuda.runtime.runtimeGetVersion())
    except Exception as exc:  # noqa: BLE001
        out["cupy_error"] = _first_line(exc)
    try:
        import torch
        out["torch_cuda"] = torch.version.cuda
        out["torch_cuda_available"] = bool(torch.cuda.is_available())
    except Exception as exc:  # noqa: BLE001
        out["torch_error"] = _first_line(exc)
    try:
        from numba import cuda
        if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") in ("", "0"):  # a real driver
            out["numba_cuda_driver"] = ".".join(map(str, cuda.cudadrv.driver.driver.get_version()))
            out["numba_cuda_runtime"] = ".".join(map(str, cuda.runtime.get_version()))
            from numba.cuda.cudadrv import nvvm
            out["nvvm"] = ".".join(map(str, nvvm.NVVM().get_version()))
    except Exception as exc:  # noqa: BLE001
        out["numba_cuda_error"] = _first_line(exc)
    return out


def device_info() -> dict:
    import cupy
    from numba import cuda
    props = cupy.cuda.runtime.getDeviceProperties(0)
    free, total = cupy.cuda.Device(0).mem_info
    info = {"name": props["name"].decode() if isinstance(props["name"], bytes) else props["name"],
            "total_memory_bytes": int(total), "free_memory_bytes": int(free),
            "sm_count": int(props["multiProcessorCount"]), "compute_capability": f"{props['major']}.{props['minor']}",
            "l2_bytes": int(props.get("l2CacheSize", 0)), "device_count": cupy.cuda.runtime.getDeviceCount(),
            "numba_device": cuda.get_current_device().name.decode()
            if isinstance(cuda.get_current_device().name, bytes) else cuda.get_current_device().name}
    if props.get("memoryClockRate") and props.get("memoryBusWidth"):
        info["peak_memory_gb_s"] = 2.0 * props["memoryClockRate"] * 1e3 * props["memoryBusWidth"] / 8 / 1e9
    return info


def compile_kernels(left=lambda: math.inf) -> dict:
    """Compile every registered kernel with its declared signature (what the first launches would JIT);
    those left when ``left()`` falls under 5 s compile at their first launch instead."""
    from gpucurate.kernels.cuda import KERNELS
    out, total = {}, 0.0
    for name, spec in KERNELS.items():
        if left() < 5:
            out[name] = "not compiled here (phase time)"
            continue
        start = time.perf_counter()
        try:
            spec.dispatcher.compile(spec.signature)
            out[name] = round(time.perf_counter() - start, 3)
        except Exception as exc:  # noqa: BLE001
            out[name] = {"error": _first_line(exc)}
        total += time.perf_counter() - start
    return {"seconds": round(total, 2), "kernels": out}


def ptx_info() -> dict:
    """PTX ``.version`` and ``.target`` of the probe kernel as compiled for this device, where numba-cuda
    found libNVVM, and whether the driver's CUDA version loads that PTX (``device.toolchain``)."""
    from numba import cuda
    from gpucurate.kernels.cuda import KERNELS
    cc = cuda.get_current_device().compute_capability
    asm = KERNELS["probe"].dispatcher.inspect_asm()
    ptx = next(iter(asm.values())) if isinstance(asm, dict) and asm else asm
    if not ptx:
        from gpucurate.kernels import cuda_build
        ptx = cuda_build.compile_kernel(KERNELS["probe"], cc)
    from gpucurate.device import toolchain
    from gpucurate.kernels.cuda_build import nvvm_location
    isa = toolchain.ptx_isa(ptx)
    target = re.search(r"^\s*\.target\s+(\S+)", ptx, re.M)
    where = nvvm_location()
    return {"device_cc": f"{cc[0]}.{cc[1]}", "ptx_version": f"{isa[0]}.{isa[1]}" if isa else None,
            "ptx_target": target.group(1) if target else None, **where,
            "ptx_vs_driver": toolchain.describe(isa, cuda.cudadrv.driver.driver.get_version(), where["nvvm"],
                                                where["nvvm_found_by"])}


def bandwidth(nbytes: int, repeat: int = 3) -> dict:
    """Host -> device and device -> host GB/s from a pageable NumPy array and from pinned memory, and a
    device -> device copy (read + write counted), best of ``repeat`` (CUDA events)."""
    import cupy as cp
    clock = Clock(SimpleNamespace(kind="cupy"))
    host = np.ones(nbytes, np.uint8)  # touched, so that page faults are not timed
    try:
        import cupyx
        pinned = cupyx.empty_pinned(nbytes, np.uint8)
    except (ImportError, AttributeError):
        mem = cp.cuda.alloc_pinned_memory(nbytes)
        pinned = np.frombuffer(mem, np.uint8, nbytes)
    pinned[:] = 1
    dev = cp.empty(nbytes, cp.uint8)
    dev2 = cp.empty(nbytes, cp.uint8)

    def best(fn, moved=nbytes):
        t = math.inf
        for _ in range(repeat):
            a = clock.mark()
            fn()
            t = min(t, clock.seconds(a, clock.mark()))
        return round(moved / t / 1e9, 2)
    out = {"bytes": nbytes,
           "h2d_pageable_gb_s": best(lambda: dev.set(host)),
           "h2d_pinned_gb_s": best(lambda: dev.set(pinned)),
           "d2h_pageable_gb_s": best(lambda: dev.get(out=host)),
           "d2h_pinned_gb_s": best(lambda: dev.get(out=pinned)),
           "d2d_gb_s": best(lambda: cp.copyto(dev2, dev), 2 * nbytes)}
    del dev, dev2, pinned
    cp.get_default_memory_pool().free_all_blocks()
    cp.get_default_pinned_memory_pool().free_all_blocks()
    return out


def phase_env(ctx: Context, rec: dict) -> None:
    rec["versions"] = versions()
    ctx.save()
    from numba import cuda
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            cuda.detect()
        except Exception as exc:  # noqa: BLE001
            print(f"detect failed: {_first_line(exc)}")
    rec["numba_cuda_detect"] = buf.getvalue()
    start = time.perf_counter()
    backend = ctx.get_backend()  # backend.select("gpu"): probe_device compiles and launches a kernel
    dev = backend.arrays
    rec["probe"] = {"ok": True, "seconds": round(time.perf_counter() - start, 2), "arrays": dev.kind,
                    "torch_device": backend.torch_device}
    rec["simulated"] = ctx.result["simulated"] = bool(dev.simulated)
    ctx.save()
    if dev.simulated:
        rec["device"] = {"name": "numba CUDA simulator"}
        rec["bandwidth"] = {"skipped": "simulated"}
        return
    attempt(rec, "device", device_info)
    attempt(rec, "ptx", ptx_info)
    ctx.save()
    if ctx.left() > 10:
        attempt(rec, "bandwidth", lambda: bandwidth(ctx.args.bandwidth_mb << 20))
    else:
        rec["bandwidth"] = {"skipped": "no time left"}
    ctx.save()
    attempt(rec, "jit", lambda: compile_kernels(ctx.left))
    ctx.save()
    attempt(rec, "kernel_cache", kernel_cache_check)


#: a fresh process: select the GPU backend, whose probe compiles (or loads from numba-cuda's on-disk cache)
#: and launches a kernel; prints the seconds of that and of a first launch of the MinHash kernel
_CACHE_PROBE = """
import json, time, numpy as np
t0 = time.perf_counter()
from gpucurate.engine.backend import select
dev = select("gpu").arrays
t1 = time.perf_counter()
sigs = dev.empty((4, 8), dev.xp.uint32)
up = dev.to_device
dev.launch("minhash", 32, up(np.arange(5, dtype=np.int64)), up(np.arange(4, dtype=np.uint64)),
           up(np.arange(8, dtype=np.uint64)), up(np.arange(8, dtype=np.uint64)), sigs)
dev.to_host(sigs)
print(json.dumps({"select_gpu_s": round(t1 - t0, 3), "first_minhash_launch_s": round(time.perf_counter() - t1, 3)}))
"""


def kernel_cache_check() -> dict:
    """numba-cuda's on-disk kernel cache: the same first launches in two fresh processes (the first may
    compile and save, the second should load)."""
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", _CACHE_PROBE], capture_output=True, text=True, timeout=120,
                             cwd=ROOT, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                 [str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)})
        if out.returncode != 0:
            raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed")
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {"first_process": runs[0], "second_process": runs[1]}


# --- (b) parity --------------------------------------------------------------------------------------------

def sorted_sets(dev, offsets: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The CPU's sets (first-seen order) sorted within each set, on the device."""
    xp = dev.xp
    off, val = dev.to_device(offsets.astype(np.int64)), dev.to_device(values)
    owner = xp.searchsorted(off[1:], xp.arange(val.shape[0], dtype=xp.int64), side="right")
    by_value = xp.argsort(val, stable=True)
    order = xp.take(by_value, xp.argsort(xp.take(owner, by_value), stable=True))
    return dev.to_host(xp.take(val, order))


def glue_parity(dev, arr: pa.Array, fz, threads: int) -> dict:
    """The glue's results on ``arr`` against the CPU kernels', step by step."""
    from gpucurate.device import glue
    from gpucurate.kernels import minhash, pairs
    from gpucurate.kernels.hashing import padded_words
    from gpucurate.stages.normalize import arrow_buffers
    offsets, data = arrow_buffers(arr)
    n = len(offsets) - 1
    start = time.perf_counter()
    t = glue.upload_texts(dev, offsets, data)
    units = glue.text_units(dev, t, False)
    sk = glue.sketch(dev, t, units, fz, dev.to_device(fz.perm_a), dev.to_device(fz.perm_b))
    g_hash = dev.to_host(glue.text_hashes(dev, t))
    pi, pj = glue.candidate_pairs(dev, sk.keys, fz.max_bucket, fz.anchors)
    scores = glue.jaccard(dev, sk.set_offsets, sk.set_values, pi, pj)
    edge = scores >= fz.threshold - 1e-12
    g_labels = dev.to_host(glue.components(dev, n, pi[edge], pj[edge]))
    g = {"sigs": dev.to_host(sk.sigs), "keys": dev.to_host(sk.keys), "off": dev.to_host(sk.set_offsets),
         "val": dev.to_host(sk.set_values), "pi": dev.to_host(pi), "pj": dev.to_host(pj),
         "scores": dev.to_host(scores)}
    gpu_s = time.perf_counter() - start
    start = time.perf_counter()
    c_sigs, c_off, c_val = minhash.signatures(offsets, data, fz.mode, fz.k, fz.seed, fz.perm_a, fz.perm_b,
                                              threads=threads)
    c_keys = minhash.band_keys(c_sigs, fz.bands, fz.rows, fz.seed)
    c_hash = minhash.text_hashes(offsets - offsets[0], padded_words(data[offsets[0]:offsets[-1]]))
    c_pi, c_pj = pairs.candidate_pairs(c_keys, fz.max_bucket, fz.anchors)
    c_scores = pairs.jaccard_pairs(c_off, c_val, c_pi, c_pj)
    c_edge = c_scores >= fz.threshold - 1e-12
    c_labels = pairs.components(n, c_pi[c_edge], c_pj[c_edge])
    cpu_s = time.perf_counter() - start
    checks = {"text_hashes": np.array_equal(g_hash, c_hash), "signatures": np.array_equal(g["sigs"], c_sigs),
              "band_keys": np.array_equal(g["keys"], c_keys), "set_offsets": np.array_equal(g["off"], c_off),
              "set_values": np.array_equal(g["val"], sorted_sets(dev, c_off, c_val)),
              "candidate_pairs": np.array_equal(g["pi"], c_pi) and np.array_equal(g["pj"], c_pj),
              "jaccard": np.array_equal(g["scores"], c_scores), "components": np.array_equal(g_labels, c_labels)}
    return {"documents": n, "text_bytes": int(offsets[-1] - offsets[0]), "first_offset": int(offsets[0]),
            "shingles": int(len(c_val)), "candidate_pairs": int(len(c_pi)), "edges": int(c_edge.sum()),
            "components": int(len(np.unique(c_labels))), "gpu_s": round(gpu_s, 3), "cpu_s": round(cpu_s, 3),
            "checks": {k: bool(v) for k, v in checks.items()}, "ok": bool(all(checks.values()))}


def host_api_parity(backend, arr: pa.Array, fz) -> dict:
    """The GPU backend's host-array functions (``device.host_api``) against the CPU kernels."""
    from gpucurate.kernels import minhash
    from gpucurate.stages.normalize import arrow_buffers
    offsets, data = arrow_buffers(arr)
    g_sigs, g_off, _ = backend.minhash.signatures(offsets, data, fz.mode, fz.k, fz.seed, fz.perm_a, fz.perm_b)
    c_sigs, c_off, _ = minhash.signatures(offsets, data, fz.mode, fz.k, fz.seed, fz.perm_a, fz.perm_b)
    checks = {"signatures": np.array_equal(g_sigs, c_sigs), "set_offsets": np.array_equal(g_off, c_off),
              "band_keys": np.array_equal(backend.minhash.band_keys(g_sigs, fz.bands, fz.rows, fz.seed),
                                          minhash.band_keys(c_sigs, fz.bands, fz.rows, fz.seed))}
    checks.update(_substring_parity(backend, arr))
    return {"documents": len(arr), "first_offset": int(offsets[0]), "checks": {k: bool(v) for k, v in checks.items()},
            "ok": bool(all(checks.values()))}


def _substring_parity(backend, arr: pa.Array) -> dict:
    """The substrings stage's CUDA kernels (window keys; repeated windows of a bucket) against the CPU's."""
    from gpucurate.kernels import substrings as cpu
    from gpucurate.stages.substrings import unit_hashes
    _, _, _, cursor, a, b, _ = unit_hashes(arr, False)
    win = cpu.window_counts(cursor, 50)
    g_keys, c_keys = backend.substrings.window_hashes(a, b, cursor, win, 50), cpu.window_hashes(a, b, cursor, win, 50)
    hits = [f(*c_keys) for f in (backend.substrings.repeated_windows, cpu.repeated_windows)]
    as_set = [sorted(zip(h[0].tolist(), h[1].tolist(), h[2].tolist())) for h in hits]
    return {"substring_window_keys": all(np.array_equal(g, c) for g, c in zip(g_keys, c_keys)),
            "substring_repeated_windows": as_set[0] == as_set[1] and hits[0][3] == hits[1][3]}


def _same_bytes(a: Path, b: Path) -> bool:
    return a.is_file() and b.is_file() and a.read_bytes() == b.read_bytes()


def whole_run_parity(ctx: Context, name: str, table: pa.Table, extra: dict | None = None,
                     row_group_size: int = 50_000) -> dict:
    """Both backends on ``table`` (``extra``: more overrides): byte-identical annotations, edges, run index."""
    import gpucurate
    src = ctx.tmp / f"parity-{name}.parquet"
    pq.write_table(table, src, row_group_size=row_group_size)
    outs, info = {}, {"documents": table.num_rows, "text_bytes": text_nbytes(table.column("text").combine_chunks())}
    for backend in ("gpu", "cpu"):
        out = outs[backend] = ctx.tmp / f"parity-{name}-{backend}"
        start = time.perf_counter()
        summary = gpucurate.run([str(src)], out, overrides={**run_overrides(ctx.args, backend), **(extra or {})})
        info[f"{backend}_s"] = round(time.perf_counter() - start, 2)
        info[f"{backend}_duplicates"] = {"exact": summary["stages"]["exact"]["duplicates"],
                                         "fuzzy": summary["stages"]["fuzzy"]["duplicates"]}
        if backend == "gpu":
            info["device"] = summary.get("device")
    g, c = outs["gpu"], outs["cpu"]
    g_parts = sorted(p.name for p in (g / "annotations").glob("*.parquet"))
    c_parts = sorted(p.name for p in (c / "annotations").glob("*.parquet"))
    ann_bytes = bool(g_parts) and g_parts == c_parts and all(
        _same_bytes(g / "annotations" / p, c / "annotations" / p) for p in g_parts)
    checks = {"annotations_bytes": ann_bytes, "edges_bytes": _same_bytes(g / "edges.parquet", c / "edges.parquet"),
              "run_index_bytes": _same_bytes(g / "run_index.parquet", c / "run_index.parquet")}
    if not ann_bytes:  # say whether at least the values agree
        info["annotations_values_equal"] = bool(pq.read_table(g / "annotations").sort_by("doc_id").equals(
            pq.read_table(c / "annotations").sort_by("doc_id")))
    info["checks"] = checks
    info["ok"] = bool(all(checks.values()))
    for out in outs.values():
        shutil.rmtree(out, ignore_errors=True)
    src.unlink(missing_ok=True)
    return info


def phase_parity(ctx: Context, rec: dict) -> None:
    a = ctx.args
    backend, dev = ctx.get_backend(), ctx.dev
    fz = fuzzy_params(a)
    rec["params"] = {"num_perm": a.num_perm, "bands": fz.bands, "rows": fz.rows, "k": fz.k,
                     "threshold": fz.threshold}
    parity = rec["parity"] = {}
    arr = ctx.corpus(a.parity_docs)
    threads = os.cpu_count() or 1
    rec["glue"] = glue_parity(dev, arr, fz, threads)
    parity["glue_sketch_and_pairs"] = rec["glue"]["ok"]
    ctx.save()
    lo, hi = len(arr) // 10 + 7, len(arr) - len(arr) // 20 - 3
    if a.smoke:  # the simulator's time goes by the byte: a shorter slice
        hi = min(hi, lo + 100)
    sliced = arr.slice(lo, hi - lo)
    rec["glue_sliced"] = glue_parity(dev, sliced, fz, threads)
    parity["glue_sliced_arrow"] = rec["glue_sliced"]["ok"] and rec["glue_sliced"]["first_offset"] > 0
    ctx.save()
    small = sliced.slice(0, min(len(sliced), 60 if a.smoke else 20_000))
    rec["host_api_sliced"] = host_api_parity(backend, small, fz)
    parity["host_api_sliced_arrow"] = rec["host_api_sliced"]["ok"]
    ctx.save()
    synth = ctx.corpus(a.run_docs)
    rec["run_synthetic"] = whole_run_parity(ctx, "synthetic", pa.table({"id": np.arange(len(synth)), "text": synth}))
    parity["run_synthetic"] = rec["run_synthetic"]["ok"]
    ctx.save()
    # the LSH as exchanges of device arrays (what the workers of a multi-GPU node run) over about 8
    # partitions, with a device budget of a quarter of the sketches (the stored values spill), on a slice
    few = synth.slice(0, min(len(synth), 20_000))
    est = (rec["run_synthetic"]["gpu_s"] + rec["run_synthetic"]["cpu_s"]) * len(few) / max(1, len(synth)) + 10
    if ctx.left() < est:
        rec["run_synthetic_dask_lsh"] = {"skipped": f"no time left ({ctx.left():.0f} s < ~{est:.0f} s)"}
    else:
        nbytes = text_nbytes(few)
        run = rec["run_synthetic_dask_lsh"] = whole_run_parity(
            ctx, "synthetic-dask-lsh", pa.table({"id": np.arange(len(few)), "text": few}),
            {"fuzzy.lsh": "dask", "input.partition_bytes": max(4096, nbytes // 8),
             "run.device_memory": max(4096, nbytes // 4)}, row_group_size=max(1, len(few) // 8))
        device = run.get("device") or {}
        run["partitions"] = device.get("steps", {}).get("upload text", {}).get("transfers", 0) // 2
        run["stored"] = device.get("stored")
        parity["run_synthetic_dask_lsh"] = run["ok"]
    ctx.save()
    path = reuters_path()
    if a.no_reuters or (a.smoke and not a.reuters):
        rec["run_reuters"] = {"skipped": "smoke" if a.smoke else "--no-reuters"}
    elif path is None:
        rec["run_reuters"] = {"skipped": f"not found: {REUTERS} or {DEVICE_REUTERS} (benchmarks/device/prepare.sh)"}
    else:
        est = 2 * (rec["run_synthetic"]["gpu_s"] + rec["run_synthetic"]["cpu_s"]) + 10
        if ctx.left() < est:
            rec["run_reuters"] = {"skipped": f"no time left ({ctx.left():.0f} s < ~{est:.0f} s)"}
        else:
            rec["run_reuters"] = whole_run_parity(ctx, "reuters", reuters_table(path))
            parity["run_reuters"] = rec["run_reuters"]["ok"]
    rec["ok"] = bool(all(parity.values()))


# --- (c) kernel timings ------------------------------------------------------------------------------------

def phase_kernels(ctx: Context, rec: dict) -> None:
    from gpucurate.device import glue
    from gpucurate.kernels import minhash, pairs
    from gpucurate.kernels.hashing import padded_words
    from gpucurate.stages.normalize import arrow_buffers
    a = ctx.args
    dev = ctx.dev
    fz = fuzzy_params(a)
    fz.keep_signatures = False
    clock = Clock(dev)
    warm = not dev.simulated
    repeat = a.repeat
    rec["timer"] = "cuda events" if clock.events else "perf_counter (simulated)"
    arr = ctx.corpus(a.kernel_docs)
    offsets, data = arrow_buffers(arr)
    n, nbytes = len(arr), int(offsets[-1] - offsets[0])
    ctx.text_bytes_c = nbytes
    rec.update({"documents": n, "text_bytes": nbytes, "repeat": repeat, "warmup": warm})
    steps = rec["steps"] = {}

    def record(name, timing, note=None):
        timing = dict(timing)
        timing["gb_per_s"] = nbytes / timing["seconds"] / 1e9 if timing["seconds"] > 0 else None
        timing["docs_per_s"] = n / timing["seconds"] if timing["seconds"] > 0 else None
        if note:
            timing["note"] = note
        steps[name] = timing
        ctx.save()

    start = clock.mark()
    t = glue.upload_texts(dev, offsets, data)
    record("upload text (host -> device, incl. padding)", {"seconds": clock.seconds(start, clock.mark())})
    pa_d, pb_d = dev.to_device(fz.perm_a), dev.to_device(fz.perm_b)

    def step(name, fn):
        ctx.checkpoint()
        if ctx.left() < 5:
            raise OutOfTime(f"{name} and the steps after it ({ctx.left():.0f} s left)")
        timing, out = time_step(dev, clock, fn, repeat, warm)
        record(name, timing)
        return out

    def gpu_steps():  # its locals (the device arrays) go when it returns
        units = step("text units", lambda: glue.text_units(dev, t, False))
        step("exact text hashes", lambda: glue.text_hashes(dev, t))
        uh = step("unit hashes", lambda: glue.unit_hashes(dev, t, units.spaces, units.space_cursor, fz.mode,
                                                          fz.seed))
        sets = step("shingle sets", lambda: glue.shingle_sets(dev, uh[0], uh[1], fz.k, fz.seed))
        del uh
        sigs = step("minhash signatures", lambda: glue.minhash_signatures(dev, sets[0], sets[1], pa_d, pb_d))
        keys = step("band keys", lambda: glue.band_keys(dev, sigs, fz.bands, fz.rows, fz.seed))
        del sigs
        step("minhash chain (text -> band keys)",
             lambda: glue.sketch(dev, t, glue.text_units(dev, t, False), fz, pa_d, pb_d))
        pij = step("lsh candidate pairs", lambda: glue.candidate_pairs(dev, keys, fz.max_bucket, fz.anchors))
        rec["candidate_pairs"] = int(pij[0].shape[0])
        scores = step("verify jaccard", lambda: glue.jaccard(dev, sets[0], sets[1], pij[0], pij[1]))
        edge = scores >= fz.threshold - 1e-12
        ei, ej = pij[0][edge], pij[1][edge]
        rec["edges"] = int(ei.shape[0])
        step("components", lambda: glue.components(dev, n, ei, ej))
    try:
        gpu_steps()
    except OutOfTime as exc:
        rec["skipped"] = str(exc)
    del t
    for name, kernels in STEP_KERNELS.items():  # each kernel's time where it is the step's own
        if name in steps:
            for k in kernels:
                if k in steps[name]["kernels"]:
                    ctx.kernel_measured[k] = dict(steps[name]["kernels"][k], step=name)
    rec["kernels"] = ctx.kernel_measured
    if dev.kind == "cupy":
        import cupy
        rec["pool_bytes"] = int(cupy.get_default_memory_pool().total_bytes())
        cupy.get_default_memory_pool().free_all_blocks()
    ctx.save()

    # the CPU kernels on the same texts, all cores (the CPU backend's steps)
    cpu = rec["cpu"] = {"threads": os.cpu_count() or 1}
    if ctx.left() < 15:
        cpu["skipped"] = "no time left"
        return
    threads = os.cpu_count() or 1
    head = min(n, 64)
    minhash.signatures(offsets[:head + 1], data, fz.mode, fz.k, fz.seed, fz.perm_a, fz.perm_b, threads=threads)
    sec, (c_sigs, c_off, c_val) = cpu_time(lambda: minhash.signatures(offsets, data, fz.mode, fz.k, fz.seed,
                                                                      fz.perm_a, fz.perm_b, threads=threads))
    kb_s, c_keys = cpu_time(lambda: minhash.band_keys(c_sigs, fz.bands, fz.rows, fz.seed))
    cpu["minhash chain (text -> band keys)"] = sec + kb_s
    cpu["band keys"] = kb_s
    words = padded_words(data)
    cpu["exact text hashes"], _ = cpu_time(lambda: minhash.text_hashes(offsets, words))
    if ctx.left() > 10:
        cpu["lsh candidate pairs"], (ci, cj) = cpu_time(lambda: pairs.candidate_pairs(c_keys, fz.max_bucket,
                                                                                       fz.anchors))
        cpu["verify jaccard"], c_scores = cpu_time(lambda: pairs.jaccard_pairs(c_off, c_val, ci, cj))
        e = c_scores >= fz.threshold - 1e-12
        cpu["components"], _ = cpu_time(lambda: pairs.components(n, ci[e], cj[e]))
    for name, value in cpu.items():
        if name in steps and isinstance(value, float):
            steps[name]["cpu_s"] = value
            steps[name]["vs_cpu"] = value / steps[name]["seconds"] if steps[name]["seconds"] > 0 else None


# --- (d) end to end ----------------------------------------------------------------------------------------

def _fit(points: list[tuple[int, float]]) -> dict | None:
    """Least squares of wall seconds vs text bytes: fixed cost (s) and slope (GB/s at the margin)."""
    if len(points) < 2:
        return None
    x = np.array([p[0] for p in points], float)
    y = np.array([p[1] for p in points], float)
    slope, intercept = np.polyfit(x, y, 1)
    return {"fixed_s": float(intercept), "seconds_per_gb": float(slope * 1e9),
            "marginal_gb_per_s": float(1 / (slope * 1e9)) if slope > 0 else None, "points": len(points)}


def _predict(points: list[tuple[int, float]], nbytes: int) -> float | None:
    fit = _fit(points)
    if fit:
        return max(fit["fixed_s"] + fit["seconds_per_gb"] * nbytes / 1e9, points[-1][1])
    if points:
        return points[-1][1] * nbytes / max(points[-1][0], 1)
    return None


def one_run(ctx: Context, src: Path, backend: str, docs: int, nbytes: int, columns: str = "all") -> dict:
    import gpucurate
    pool = None
    if backend == "gpu" and not ctx.simulated:
        import cupy
        pool = cupy.get_default_memory_pool()
        pool.free_all_blocks()
    out = ctx.tmp / f"e2e-{backend}-{docs}"
    start = time.perf_counter()
    summary = gpucurate.run([str(src)], out, overrides=run_overrides(ctx.args, backend, columns))
    wall = time.perf_counter() - start
    row = {"backend": backend, "columns": columns, "documents": docs, "text_bytes": nbytes, "wall_s": wall,
           "summary_wall_s": summary.get("wall_time_s"), "timings_s": summary.get("timings_s"),
           "step_seconds": summary.get("step_seconds"), "task_seconds": summary.get("task_seconds"),
           "gb_per_s": nbytes / wall / 1e9, "docs_per_s": docs / wall,
           "partitions": summary["stages"]["input"]["partitions"],
           "duplicates": {"exact": summary["stages"]["exact"]["duplicates"],
                          "fuzzy": summary["stages"]["fuzzy"]["duplicates"]},
           "candidate_pairs": summary["stages"]["fuzzy"].get("candidate_pairs")}
    if backend == "gpu":
        row["device"] = summary.get("device")
        row["device_busy_fraction"] = (summary.get("device") or {}).get("device_busy_fraction")
        if pool is not None:
            row["pool_high_water_bytes"] = int(pool.total_bytes())  # the pool keeps what it took
            row["pool_used_after_bytes"] = int(pool.used_bytes())
            pool.free_all_blocks()
    shutil.rmtree(out, ignore_errors=True)
    return row


def phase_e2e(ctx: Context, rec: dict) -> None:
    a = ctx.args
    sizes = sorted(set(a.sizes))
    cpu_sizes = sorted(set(a.cpu_sizes or a.sizes))
    corpus = ctx.corpus(max(sizes + cpu_sizes))
    files = {}

    def source(docs):
        if docs not in files:
            arr = corpus.slice(0, docs)
            path = ctx.tmp / f"e2e-{docs}.parquet"
            pq.write_table(pa.table({"id": np.arange(docs), "text": arr}), path, row_group_size=50_000)
            files[docs] = (path, text_nbytes(arr))
        return files[docs]
    runs = rec["runs"] = []
    skipped = rec["skipped"] = []
    if not a.smoke:  # JIT (CPU kernels from numba's cache, CUDA kernels if phase a did not compile them)
        warm_docs = min(5_000, sizes[0])
        path, nbytes = source(warm_docs)
        rec["warmup"] = {b: round(one_run(ctx, path, b, warm_docs, nbytes)["wall_s"], 2) for b in ("gpu", "cpu")}
        ctx.save()
    for backend, backend_sizes in (("gpu", sizes), ("cpu", cpu_sizes)):
        points: list[tuple[int, float]] = []
        for docs in backend_sizes:
            nbytes = text_nbytes(corpus.slice(0, docs))
            est = _predict(points, nbytes)
            if est is not None and ctx.left() < 1.3 * est * len(a.columns) + 5:
                skipped.append(f"{backend} {docs} docs: ~{est:.0f} s predicted, {ctx.left():.0f} s left")
                continue
            path, nbytes = source(docs)
            for columns in a.columns:  # output.columns: every record again, or the annotations only
                row = one_run(ctx, path, backend, docs, nbytes, columns)
                runs.append(row)
                if columns == a.columns[0]:
                    points.append((nbytes, row["wall_s"]))
                ctx.save()
        rec[f"fit_{backend}"] = _fit(points)
    by = {(r["backend"], r["documents"], r["columns"]): r for r in runs}
    for r in runs:
        other = by.get(("cpu", r["documents"], r["columns"]))
        if r["backend"] == "gpu" and other:
            r["vs_cpu"] = other["wall_s"] / r["wall_s"]
            r["counts_match_cpu"] = r["duplicates"] == other["duplicates"]
    for path, _ in files.values():
        path.unlink(missing_ok=True)


# --- (e) static resources ----------------------------------------------------------------------------------

def phase_static(ctx: Context, rec: dict) -> None:
    import gpu_static
    from gpucurate.kernels import cuda_build as cb
    ccs = [(9, 0)] if ctx.args.smoke else list(cb.DEFAULT_CCS)  # smoke: one arch (half the build)
    try:
        if not ctx.simulated:
            from numba import cuda
            cc = tuple(cuda.get_current_device().compute_capability)
            if cc not in ccs:
                ccs.append(cc)
    except Exception:  # noqa: BLE001
        pass
    ccs = tuple(ccs)
    rec["archs"] = [f"sm_{c[0]}{c[1]}" for c in ccs]
    start = time.perf_counter()
    rows = gpu_static.static_rows(ccs)
    rec["build_s"] = round(time.perf_counter() - start, 2)
    nbytes = ctx.text_bytes_c
    for r in rows:
        m = ctx.kernel_measured.get(r["kernel"])
        if m:
            r["measured_s"] = m["seconds"]
            r["launches"] = m["launches"]
            r["measured_in"] = m["step"]
            r["gb_per_s"] = nbytes / m["seconds"] / 1e9 if m["seconds"] > 0 and nbytes else None
    rec["columns"] = gpu_static.columns(ccs)
    rec["rows"] = rows


# --- the phases, the table -----------------------------------------------------------------------------------

# --- (f) semantic ------------------------------------------------------------------------------------------

#: where ``benchmarks/device/prepare.sh`` puts a float16 copy of the bundled model (the device has no hub)
DEVICE_MODEL = ROOT / "benchmarks" / "device" / "model"


def semantic_texts(n: int) -> pa.Array:
    """``n`` Reuters bodies (cycled: the encoders' cost does not depend on repeats), else synthetic text."""
    path = reuters_path()
    base = reuters_table(path).column("text").combine_chunks() if path else synthetic_texts(min(n, 20_000))
    reps = -(-n // len(base))
    return pa.concat_arrays([base] * reps).slice(0, n) if reps > 1 else base.slice(0, n)


def phase_semantic(ctx: Context, rec: dict) -> None:
    """Encoders' documents/s at growing sizes, k-means and the within-cluster search on the device, and
    whole runs with exact + fuzzy + semantic."""
    import torch
    import gpucurate
    from gpucurate.config import load_config
    from gpucurate.kernels import semantic as sk
    from gpucurate.stages.encoders import make_encoder
    a = ctx.args
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = str(DEVICE_MODEL) if (DEVICE_MODEL / "config.json").is_file() else None
    rec.update(device=device, model=model or "bundled all-MiniLM-L6-v2", threads=os.cpu_count())
    sizes = sorted(set(a.semantic_sizes))
    texts = semantic_texts(max(sizes))
    rows = rec["encode"] = []
    skipped = rec["skipped"] = []
    vectors = None
    for kind in ("static", "transformer"):
        cfg = load_config(None, {"semantic.encoder": kind, "semantic.model": model}).semantic
        t0 = time.perf_counter()
        encoder = make_encoder(cfg, device, threads=os.cpu_count())
        encoder.encode(texts.slice(0, 256))  # warm: kernels compiled, weights on the device
        load_s = time.perf_counter() - t0
        points: list[tuple[int, float]] = []
        for n in sizes:
            part = texts.slice(0, n)
            est = _predict(points, n)
            if est is not None and ctx.left() < 1.5 * est + 60:
                skipped.append(f"{kind} {n} docs: ~{est:.0f} s predicted, {ctx.left():.0f} s left")
                continue
            ctx.checkpoint()
            t0 = time.perf_counter()
            tokens = encoder.tokenize(part)
            tokenize_s = time.perf_counter() - t0
            x = encoder.encode_tokens(tokens)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            seconds = time.perf_counter() - t0
            points.append((n, seconds))
            nbytes = text_nbytes(part)
            rows.append({"encoder": kind, "documents": n, "seconds": seconds, "tokenize_s": tokenize_s,
                         "docs_per_s": n / seconds, "mb_per_s": nbytes / seconds / 1e6,
                         "tokens": int(len(tokens.ids)), "load_s": load_s, "dim": int(x.shape[1]),
                         "dtype": getattr(encoder, "dtype", None)})
            if kind == "transformer" or vectors is None or len(x) > len(vectors):
                vectors = x
            ctx.save()
    if vectors is not None and len(vectors) > 1:  # k-means and the search over the largest embeddings
        n = len(vectors)
        k = max(1, math.ceil(math.sqrt(n)))
        cfg = load_config(None, {}).semantic
        ctx.checkpoint()
        t0 = time.perf_counter()
        points = min(cfg.kmeans_sample, cfg.kmeans_per_cluster * k)
        centroids = sk.kmeans_fit(vectors, k, cfg.seed, cfg.kmeans_iter, points, device)
        fit_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        labels, _ = sk.assign(vectors, centroids, cfg.probes, device)
        assign_s = time.perf_counter() - t0
        ctx.checkpoint()
        t0 = time.perf_counter()
        pairs = sk.cluster_pairs(vectors, labels, k, cfg.threshold, device)
        rec["clusters"] = {"documents": n, "dim": int(vectors.shape[1]), "clusters": k, "fit_s": fit_s,
                           "kmeans": "cuml" if _has("cuml") and device.startswith("cuda") else
                           "torch" if device.startswith("cuda") else "scikit-learn",
                           "assign_s": assign_s, "search_s": time.perf_counter() - t0, "pairs": int(len(pairs[0])),
                           "compared": int(pairs[3])}
        ctx.save()
    path = reuters_path()
    if path is None or (a.smoke and not a.reuters):
        src, docs = ctx.tmp / "semantic-run.parquet", a.run_docs
        pq.write_table(pa.table({"id": np.arange(docs), "text": ctx.corpus(docs)}), src)
    else:
        src, docs = ctx.tmp / "semantic-run.parquet", None
        pq.write_table(reuters_table(path), src)
    runs = rec["runs"] = []
    for backend, kind in (("gpu", "static"), ("gpu", "transformer"), ("cpu", "static")):
        if ctx.left() < 45:
            skipped.append(f"whole run {backend} {kind}: {ctx.left():.0f} s left")
            continue
        over = dict(run_overrides(a, backend), **{"semantic.enabled": True, "semantic.encoder": kind,
                                                  "semantic.model": model})
        out = ctx.tmp / f"semantic-{backend}-{kind}"
        t0 = time.perf_counter()
        summary = gpucurate.run([str(src)], out, overrides=over)
        sem = summary["stages"]["semantic"]
        runs.append({"backend": backend, "encoder": kind, "wall_s": time.perf_counter() - t0,
                     "documents": summary["stages"]["input"]["documents"], "embedded": sem["documents"],
                     "embeddings_per_s": sem.get("embeddings_per_s"), "semantic_duplicates": sem["duplicates"],
                     "step_seconds": sem.get("step_seconds"), "timings_s": summary.get("timings_s"),
                     "fuzzy_duplicates": summary["stages"]["fuzzy"]["duplicates"]})
        shutil.rmtree(out, ignore_errors=True)
        ctx.save()
    by = {(r["backend"], r["encoder"]): r for r in runs}
    if ("gpu", "static") in by and ("cpu", "static") in by:  # pooled by Torch on the device, by numba here
        rec["static_duplicates_match_cpu"] = \
            by["gpu", "static"]["semantic_duplicates"] == by["cpu", "static"]["semantic_duplicates"]


def _has(module: str) -> bool:
    from importlib.util import find_spec
    return find_spec(module) is not None


PHASE_FUNCS = {"a": phase_env, "b": phase_parity, "c": phase_kernels, "d": phase_e2e, "e": phase_static,
               "f": phase_semantic}


def run_phase(ctx: Context, key: str, timeout: float) -> None:
    rec = {"name": PHASES[key], "status": "running", "timeout_s": timeout}
    ctx.result["phases"][key] = rec
    ctx.save()
    deadline = time.monotonic() + timeout
    box: dict = {}

    def target():
        ctx._local.deadline = deadline
        waited = time.monotonic()
        held = ctx.phase_lock.acquire(timeout=min(60.0, timeout / 3))
        if time.monotonic() - waited > 0.5:
            rec["waited_for_previous_s"] = round(time.monotonic() - waited, 1)
        if not held:
            rec["note"] = "started beside a previous phase that was left running"
        try:
            with warnings.catch_warnings(), np.errstate(over="ignore"):
                warnings.filterwarnings("ignore", category=RuntimeWarning, message=".*overflow")
                PHASE_FUNCS[key](ctx, rec)
        except BaseException as exc:  # noqa: BLE001 - the phase's failure is its result
            box["error"] = _first_line(exc)
            box["traceback"] = traceback.format_exc()[-4000:]
        finally:
            if held:
                ctx.phase_lock.release()
    start = time.monotonic()
    thread = threading.Thread(target=target, name=f"gpu_check-{key}", daemon=True)
    thread.start()
    thread.join(timeout)
    rec["seconds"] = round(time.monotonic() - start, 2)
    if thread.is_alive():
        rec["status"] = "timeout"
        rec["error"] = f"still running after {timeout:.0f} s (left behind; the next phase runs)"
        ctx.zombies.append(thread)
    elif "error" in box:
        rec["status"], rec["error"], rec["traceback"] = "error", box["error"], box["traceback"]
    else:
        rec["status"] = "ok"
    print(f"phase ({key}) {PHASES[key]}: {rec['status']} in {rec['seconds']} s"
          + (f": {rec['error']}" if rec.get("error") else ""), flush=True)
    ctx.save()


def _target_row(item, value, threshold, simulated, unit="") -> tuple[dict, dict]:
    if value is None:
        result = "n/a (not measured)"
        ok = None
    elif simulated:
        result, ok = "n/a (simulated)", None
    else:
        ok = value >= threshold
        result = "PASS" if ok else "FAIL"
    return ({"item": f"TARGET {item}", "target": f">= {threshold:g}{unit}", "result": result,
             "gb_per_s" if unit == " GB/s" else "vs_cpu": value},
            {"target": item, "threshold": threshold, "value": value, "pass": ok})


def build_table(result: dict) -> tuple[list[dict], list[str], list[dict]]:
    ph = result["phases"]
    sim = bool(result.get("simulated"))
    rows, targets = [], []
    for key, rec in ph.items():
        rows.append({"item": f"phase ({key}) {rec['name']}", "seconds": rec.get("seconds"),
                     "result": rec["status"] + (f": {rec['error'][:90]}" if rec.get("error") else "")})
    bw = ph.get("a", {}).get("bandwidth") or {}
    for k in ("h2d_pageable_gb_s", "h2d_pinned_gb_s", "d2h_pageable_gb_s", "d2h_pinned_gb_s", "d2d_gb_s"):
        if k in bw:
            rows.append({"item": f"bandwidth {k[:-5].replace('_', ' ')}", "backend": "gpu", "gb_per_s": bw[k]})
    cache = ph.get("a", {}).get("kernel_cache") or {}
    if "first_process" in cache:
        first, second = cache["first_process"], cache["second_process"]
        rows.append({"item": "kernel cache: select gpu + first MinHash launch, 1st / 2nd process", "backend": "gpu",
                     "result": f"{first['select_gpu_s'] + first['first_minhash_launch_s']:.2f} / "
                               f"{second['select_gpu_s'] + second['first_minhash_launch_s']:.2f} s"})
    b = ph.get("b", {})
    for name, ok in (b.get("parity") or {}).items():
        sub = b.get(PARITY_SOURCES.get(name, name)) or {}
        failed = [k for k, v in (sub.get("checks") or {}).items() if not v]
        rows.append({"item": f"parity {name}", "docs": sub.get("documents"),
                     "result": "PASS" if ok else "FAIL" + (f" ({', '.join(failed)})" if failed else "")})
    for name, why in ((k, v.get("skipped")) for k, v in b.items() if isinstance(v, dict) and v.get("skipped")):
        rows.append({"item": f"parity {name}", "result": f"skipped: {why}"})
    c = ph.get("c", {})
    static = {r["kernel"]: r for r in ph.get("e", {}).get("rows") or []}
    arch = (ph.get("e", {}).get("archs") or ["sm_90"])[-1]
    for name, s in (c.get("steps") or {}).items():
        kern = [static.get(k) for k in STEP_KERNELS.get(name, []) if static.get(k)]
        rows.append({"item": f"kernels: {name}", "backend": "gpu", "docs": c.get("documents"),
                     "seconds": s.get("seconds"), "gb_per_s": s.get("gb_per_s"), "docs_per_s": s.get("docs_per_s"),
                     "vs_cpu": s.get("vs_cpu"),
                     "regs": "/".join(str(k.get(f"regs_{arch}")) for k in kern) or None,
                     "occupancy": "/".join(f"{k.get(f'occ_{arch}')}" for k in kern) or None,
                     "spills": sum((k.get("spill_stores") or 0) + (k.get("spill_loads") or 0) for k in kern)
                     if kern else None})
    for kname, m in sorted(((k, v) for k, v in (c.get("kernels") or {}).items()), key=lambda kv: kv[0]):
        st = static.get(kname, {})
        rows.append({"item": f"  cuda kernel {kname}", "backend": "gpu", "seconds": m.get("seconds"),
                     "gb_per_s": (c.get("text_bytes") or 0) / m["seconds"] / 1e9 if m.get("seconds") else None,
                     "regs": st.get(f"regs_{arch}"), "occupancy": st.get(f"occ_{arch}"),
                     "spills": (st.get("spill_stores") or 0) + (st.get("spill_loads") or 0) if st else None,
                     "result": st.get("error") or st.get("note")})
    d = ph.get("d", {})
    for r in d.get("runs") or []:
        rows.append({"item": f"whole exact+fuzzy run, output.columns={r.get('columns', 'all')}",
                     "backend": r["backend"], "docs": r["documents"],
                     "seconds": r["wall_s"], "gb_per_s": r["gb_per_s"], "docs_per_s": r["docs_per_s"],
                     "vs_cpu": r.get("vs_cpu"),
                     "result": None if r["backend"] == "cpu" else
                     ("counts match cpu" if r.get("counts_match_cpu") else
                      "COUNTS DIFFER" if "counts_match_cpu" in r else "")
                     + (f"; device busy <= {r['device_busy_fraction']:.0%}" if r.get("device_busy_fraction") is not None
                        else "")})
    for backend in ("gpu", "cpu"):
        fit = d.get(f"fit_{backend}")
        if fit:
            rows.append({"item": "whole run fit: fixed cost (s), marginal GB/s", "backend": backend,
                         "seconds": fit["fixed_s"], "gb_per_s": fit["marginal_gb_per_s"]})
    for line in d.get("skipped") or []:
        rows.append({"item": "whole run skipped", "result": line})
    f = ph.get("f", {})
    backend = "gpu" if str(f.get("device", "")).startswith("cuda") else "cpu"
    for r in f.get("encode") or []:
        rows.append({"item": f"semantic: encode, {r['encoder']} ({r['dtype']}; tokenize {r['tokenize_s']:.1f} s)",
                     "backend": backend, "docs": r["documents"], "seconds": r["seconds"],
                     "gb_per_s": r["mb_per_s"] / 1e3, "docs_per_s": r["docs_per_s"]})
    cl = f.get("clusters")
    if cl:
        rows.append({"item": f"semantic: k-means ({cl['kmeans']}, {cl['clusters']:,} clusters) / assign / search",
                     "backend": backend, "docs": cl["documents"],
                     "result": f"{cl['fit_s']:.2f} / {cl['assign_s']:.2f} / {cl['search_s']:.2f} s, "
                               f"{cl['pairs']:,} pairs"})
    for r in f.get("runs") or []:
        rows.append({"item": f"semantic: whole run exact+fuzzy+semantic, {r['encoder']}", "backend": r["backend"],
                     "docs": r["documents"], "seconds": r["wall_s"], "docs_per_s": r["documents"] / r["wall_s"],
                     "result": f"{r['semantic_duplicates']:,} semantic duplicates, "
                               f"{r['embeddings_per_s'] or 0:,.0f} embeddings/s"})
    for line in f.get("skipped") or []:
        rows.append({"item": "semantic skipped", "result": line})
    # targets
    chain = (c.get("steps") or {}).get("minhash chain (text -> band keys)", {})
    row, t = _target_row("MinHash (text -> signatures, whole chain)", chain.get("gb_per_s"),
                         TARGETS["minhash_gb_s"], sim, " GB/s")
    rows.append(row)
    targets.append(t)
    kernel_only = (c.get("steps") or {}).get("minhash signatures", {}).get("gb_per_s")
    if kernel_only is not None:
        rows.append({"item": "  (minhash kernel alone, sets -> signatures)", "gb_per_s": kernel_only,
                     "result": "info"})
    gpu_runs = [r for r in d.get("runs") or [] if r["backend"] == "gpu" and r.get("columns", "all") == "all"]
    for label, field, target, unit in (("whole exact+fuzzy run", "gb_per_s", "whole_run_gb_s", " GB/s"),
                                       ("GPU vs CPU backend, whole run", "vs_cpu", "gpu_vs_cpu", "x")):
        measured = [r for r in gpu_runs if r.get(field)]
        largest = max(measured, key=lambda r: r["documents"]) if measured else None  # least fixed cost
        row, t = _target_row(f"{label} ({largest['documents']:,} docs)" if largest else label,
                             largest[field] if largest else None, TARGETS[target], sim, unit)
        rows.append(row)
        targets.append(t)
    cols = ["item", "backend", "docs", "seconds", "gb_per_s", "docs_per_s", "vs_cpu", "regs", "occupancy", "spills",
            "target", "result"]
    return rows, cols, targets


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="tiny sizes (runs in numba's CUDA simulator)")
    p.add_argument("--phases", default="a,b,c,d,e", help="comma-separated subset of a,b,c,d,e,f (f: semantic, "
                                                         "needs torch; a,f is the semantic check)")
    p.add_argument("--out", default=None, help="JSON result (default $OUT/gpu_check.json, else "
                                               "benchmarks/results/gpu_check.json)")
    for k, v in DEFAULT_TIMEOUTS.items():
        p.add_argument(f"--timeout-{k}", type=float, default=v, help=f"phase ({k}) {PHASES[k]}: seconds (default {v})")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds for all phases: their timeouts are scaled down to fit (benchmarks/device/run.sh)")
    p.add_argument("--parity-docs", type=int, default=200_000, help="documents of the glue parity (b)")
    p.add_argument("--run-docs", type=int, default=100_000, help="documents of the synthetic whole-run parity (b)")
    p.add_argument("--kernel-docs", type=int, default=1_000_000, help="documents of the kernel timings (c)")
    p.add_argument("--sizes", default="100000,300000,1000000", help="whole-run sizes on the GPU (d)")
    p.add_argument("--cpu-sizes", default=None, help="whole-run sizes on the CPU (d; default --sizes, "
                                                     "larger ones skipped when time is short)")
    p.add_argument("--columns", default="all,annotations",
                   help="output.columns of the whole runs (d): all, annotations or both (default)")
    p.add_argument("--semantic-sizes", default="10000,100000,1000000",
                   help="documents the encoders embed (f), larger ones skipped when time is short")
    p.add_argument("--repeat", type=int, default=3, help="timed repetitions of each kernel step (c)")
    p.add_argument("--num-perm", type=int, default=128)
    p.add_argument("--threshold", type=float, default=0.8)
    p.add_argument("--ngram", type=int, default=5, help="words a shingle")
    p.add_argument("--edit-rate", type=float, default=0.02, help="words replaced in a near copy")
    p.add_argument("--workers", type=int, default=0, help="run.workers of the whole runs (0: the default)")
    p.add_argument("--min-words", type=int, default=50)
    p.add_argument("--max-words", type=int, default=400)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bandwidth-mb", type=int, default=256)
    p.add_argument("--no-reuters", action="store_true", help="skip the Reuters whole-run parity")
    p.add_argument("--reuters", action="store_true", help="with --smoke: run the Reuters parity too (slow there)")
    p.add_argument("--tmp", default=None, help="scratch directory (default: the system's)")
    args = p.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    args.semantic_sizes = [int(s) for s in args.semantic_sizes.split(",") if s]
    args.columns = [c for c in args.columns.split(",") if c]
    args.cpu_sizes = [int(s) for s in args.cpu_sizes.split(",") if s] if args.cpu_sizes else None
    if args.smoke:
        given = {a.split("=")[0] for a in (argv if argv is not None else sys.argv[1:])}
        for flag, attr, value in (("--parity-docs", "parity_docs", 300), ("--run-docs", "run_docs", 150),
                                  ("--kernel-docs", "kernel_docs", 100), ("--repeat", "repeat", 1),
                                  ("--num-perm", "num_perm", 16), ("--min-words", "min_words", 4),
                                  ("--max-words", "max_words", 12), ("--ngram", "ngram", 2),
                                  ("--threshold", "threshold", 0.5), ("--edit-rate", "edit_rate", 0.08)):
            if flag not in given:
                setattr(args, attr, value)
        if "--sizes" not in given:
            args.sizes = [50, 100, 150]
        if "--semantic-sizes" not in given:
            args.semantic_sizes = [50, 200]
    args.phases = [x.strip() for x in args.phases.split(",") if x.strip()]
    bad = [x for x in args.phases if x not in PHASES]
    if bad:
        p.error(f"unknown phase(s) {bad}; choose from {','.join(PHASES)}")
    total = sum(getattr(args, f"timeout_{k}") for k in args.phases)
    if args.budget is not None and total > args.budget:
        for k in args.phases:
            setattr(args, f"timeout_{k}", round(getattr(args, f"timeout_{k}") * args.budget / total, 1))
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.out:
        out_path = Path(args.out)
    elif os.environ.get("OUT"):
        out_path = Path(os.environ["OUT"]) / "gpu_check.json"
    else:
        out_path = ROOT / "benchmarks" / "results" / "gpu_check.json"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    simulated = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
    if simulated:
        warnings.filterwarnings("ignore", category=RuntimeWarning, message=".*overflow")
    result = {"script": "benchmarks/gpu_check.py", "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "smoke": args.smoke, "simulated": simulated,
              "args": {k: v for k, v in vars(args).items()}, "targets_wanted": TARGETS, "phases": {}}
    ctx = Context(args, result, out_path)
    need = []
    if "b" in args.phases:
        need += [args.parity_docs, args.run_docs]
    if "c" in args.phases:
        need.append(args.kernel_docs)
    if "d" in args.phases:
        need += args.sizes + (args.cpu_sizes or [])
    if "f" in args.phases:
        need.append(args.run_docs)
    ctx.corpus_docs = max(need or [0])
    start = time.monotonic()
    print(f"gpu_check: phases {','.join(args.phases)}, writing {out_path}", flush=True)
    for key in PHASES:
        if key in args.phases:
            run_phase(ctx, key, getattr(args, f"timeout_{key}"))
    result["seconds"] = round(time.monotonic() - start, 1)
    rows, cols, targets = build_table(result)
    result["targets"] = targets
    result["table"] = rows
    parity = result["phases"].get("b", {}).get("parity") or {}
    result["parity_ok"] = bool(parity) and all(parity.values()) if "b" in args.phases else None
    ctx.save()
    dev = (result["phases"].get("a", {}).get("device") or {}).get("name", "?")
    print(f"device: {dev}; simulated: {result['simulated']}; {result['seconds']} s in all")
    print_table(rows, cols, "gpucurate GPU check" + (" (smoke, numba CUDA simulator)" if result["simulated"] else ""))
    for t in targets:
        verdict = "n/a" if t["pass"] is None else ("PASS" if t["pass"] else "FAIL")
        value = "-" if t["value"] is None else f"{t['value']:.3g}"
        print(f"target {t['target']}: {value} (>= {t['threshold']:g}) {verdict}")
    print(f"wrote {out_path}", flush=True)
    failed = result["parity_ok"] is False or any(
        r["status"] != "ok" for k, r in result["phases"].items() if k in "abcdf")
    shutil.rmtree(ctx.tmp, ignore_errors=True)
    code = 1 if failed else 0
    if any(t.is_alive() for t in ctx.zombies):  # a phase left running: do not wait for it at exit
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
