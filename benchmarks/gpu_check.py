"""GPU check: one script for a machine with a CUDA GPU (CuPy or numba-cuda, PyTorch optional).

1. runs the CUDA kernel tests on the device (``GPUCURATE_REAL_GPU=1``, no simulator) and the tests
   marked ``gpu``;
2. checks CPU/GPU parity: MinHash signatures and band keys on a synthetic corpus, and the final
   annotations of whole runs on the Reuters data (when ../shared/data is there) and on a synthetic
   corpus;
3. times the MinHash kernel (text -> signatures) and the whole exact+fuzzy run on the GPU and on the CPU,
   and prints a table: docs/s, GB/s of text, ratio to the CPU, and the fraction of the GPU's memory
   bandwidth that the MinHash step reaches (bytes it must move / time / peak bandwidth).

    python benchmarks/gpu_check.py                   # ~1M synthetic documents; under 5 minutes on one GPU
    python benchmarks/gpu_check.py --docs 3000000    # fill a large GPU for longer

Writes benchmarks/results/gpu_check.json. On a multi-GPU node with dask-cuda installed, the pipeline
starts one worker per GPU by itself (``LocalCUDACluster``); this script measures one GPU.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REUTERS, print_table, write_json  # noqa: E402


def synthetic_texts(n_docs: int, seed: int = 0, vocab_size: int = 50_000) -> pa.LargeStringArray:
    """``n_docs`` texts of 50-400 random words (Zipf-like), a third of them near-copies of another with
    3% of the words replaced, built straight into Arrow buffers (no Python per word)."""
    rng = np.random.default_rng(seed)
    vocab = np.array([f"w{i:x}" for i in range(vocab_size)])
    vocab_bytes = np.frombuffer("".join(vocab).encode(), np.uint8)
    vocab_len = np.char.str_len(vocab).astype(np.int64)
    vocab_off = np.concatenate(([0], np.cumsum(vocab_len)))
    lengths = rng.integers(50, 400, n_docs)
    ids = np.minimum(rng.zipf(1.3, lengths.sum()) - 1, vocab_size - 1)
    starts = np.concatenate(([0], np.cumsum(lengths)))
    copies = rng.random(n_docs) < 1 / 3
    source = rng.integers(0, n_docs, n_docs)
    for d in np.flatnonzero(copies):  # a copy takes its source's words (then some edits)
        s = source[d]
        k = min(lengths[d], lengths[s])
        ids[starts[d]:starts[d] + k] = ids[starts[s]:starts[s] + k]
    edit = np.repeat(copies, lengths) & (rng.random(lengths.sum()) < 0.03)
    ids[edit] = rng.integers(0, vocab_size, edit.sum())
    word_bytes = vocab_len[ids] + 1  # word + space
    pos = np.concatenate(([0], np.cumsum(word_bytes)))
    data = np.full(pos[-1], 32, np.uint8)
    within = np.arange(pos[-1]) - np.repeat(pos[:-1], word_bytes)
    is_char = within < np.repeat(vocab_len[ids], word_bytes)
    data[is_char] = vocab_bytes[np.repeat(vocab_off[ids], word_bytes)[is_char] + within[is_char]]
    doc_start = pos[starts]  # byte where each text starts; it ends with one space, dropped here
    keep = np.ones(len(data), bool)
    keep[doc_start[1:] - 1] = False
    text_off = np.concatenate(([0], np.cumsum(np.diff(doc_start) - 1))).astype(np.int64)
    return pa.LargeStringArray.from_buffers(n_docs, pa.py_buffer(text_off), pa.py_buffer(data[keep]))


def run_tests() -> dict:
    env = dict(os.environ, GPUCURATE_REAL_GPU="1")
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    cmd = [sys.executable, "-m", "pytest", "-q", "tests/test_cuda_kernels.py", "-m", "gpu or not gpu"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    marked = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "tests"], cwd=ROOT, env=env,
                            capture_output=True, text=True)
    tail = (proc.stdout.strip().splitlines() or [""])[-1]
    return {"kernel_tests": tail, "kernel_tests_ok": proc.returncode == 0,
            "gpu_marked_tests": (marked.stdout.strip().splitlines() or [""])[-1],
            "seconds": round(time.perf_counter() - start, 1)}


def peak_bandwidth() -> float | None:
    """Bytes/s of the current device's memory (clock x bus width x 2), if the driver reports them."""
    try:
        from numba import cuda
        dev = cuda.get_current_device()
        clock_khz = dev.MEMORY_CLOCK_RATE
        bus_bits = dev.GLOBAL_MEMORY_BUS_WIDTH
        return 2.0 * clock_khz * 1e3 * bus_bits / 8
    except Exception:
        return None


def time_signatures(arr: pa.LargeStringArray, kernels, repeat: int) -> tuple[float, np.ndarray, np.ndarray]:
    from gpucurate.kernels.hashing import permutations
    from gpucurate.kernels.minhash import WORD
    from gpucurate.text import arrow_buffers
    offsets, data = arrow_buffers(arr)
    a, b = permutations(128, 42)
    best = np.inf
    for _ in range(repeat):
        start = time.perf_counter()
        sigs, _, _ = kernels.signatures(offsets, data, WORD, 5, np.uint64(42), a, b, threads=os.cpu_count() or 1)
        best = min(best, time.perf_counter() - start)
    keys = kernels.band_keys(sigs, 17, 7, np.uint64(42))
    return best, sigs, keys


def full_run(src: Path, out: Path, backend: str) -> tuple[float, object]:
    import gpucurate
    start = time.perf_counter()
    gpucurate.run([str(src)], out, overrides={"run.backend": backend, "run.progress": False,
                                               "semantic.enabled": False, "output.overwrite": True})
    wall = time.perf_counter() - start
    table = pq.read_table(out / "annotations")
    return wall, table.sort_by("doc_id")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=1_000_000, help="synthetic documents (default 1,000,000)")
    ap.add_argument("--run-docs", type=int, default=300_000, help="of them, in the whole-run comparison")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--no-reuters", action="store_true", help="skip the Reuters whole-run parity")
    ap.add_argument("--json", default="benchmarks/results/gpu_check.json")
    args = ap.parse_args()

    from gpucurate.backend import select
    from gpucurate.kernels import minhash as cpu
    gpu_backend = select("gpu")
    result: dict = {"docs": args.docs}
    if not args.skip_tests:
        result["tests"] = run_tests()
        print("tests:", result["tests"])

    arr = synthetic_texts(args.docs)
    text_bytes = arr.buffers()[2].size
    g_time, g_sigs, g_keys = time_signatures(arr, gpu_backend.minhash, args.repeat)
    sample = arr.slice(0, min(len(arr), 200_000))  # the CPU on a slice: same kernels, scaled per document
    c_time, c_sigs, c_keys = time_signatures(sample, cpu, 1)
    n_sample = len(sample)
    parity_sigs = bool(np.array_equal(g_sigs[:n_sample], c_sigs) and np.array_equal(g_keys[:n_sample], c_keys))
    bw = peak_bandwidth()
    # the MinHash step must read the text and write signatures, unit and shingle hashes at least once
    moved = text_bytes + g_sigs.nbytes + 8 * 2 * (text_bytes // 4)
    rows = [{"step": "MinHash signatures (text -> sigs)", "backend": "gpu", "docs": len(arr),
             "docs_per_s": len(arr) / g_time, "gb_per_s": text_bytes / g_time / 1e9,
             "ratio_to_cpu": (len(arr) / g_time) / (n_sample / c_time),
             "bandwidth_fraction": (moved / g_time / bw) if bw else None},
            {"step": "MinHash signatures (text -> sigs)", "backend": "cpu", "docs": n_sample,
             "docs_per_s": n_sample / c_time, "gb_per_s": sample.buffers()[2].size / c_time / 1e9,
             "ratio_to_cpu": 1.0}]
    parity = {"signatures_and_band_keys": parity_sigs}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpora = [("synthetic", arr.slice(0, min(len(arr), args.run_docs)))]
        if REUTERS.is_file() and not args.no_reuters:
            import gzip
            import json
            with gzip.open(REUTERS, "rt", encoding="utf-8") as fh:
                bodies = [json.loads(line).get("body") or "" for line in fh]
            corpora.insert(0, ("reuters", pa.array(bodies, pa.large_string())))
        for name, texts in corpora:
            src = tmp / f"{name}.parquet"
            pq.write_table(pa.table({"id": np.arange(len(texts)), "text": texts}), src, row_group_size=50_000)
            g_wall, g_table = full_run(src, tmp / f"{name}-gpu", "gpu")
            c_wall, c_table = full_run(src, tmp / f"{name}-cpu", "cpu")
            parity[f"annotations_{name}"] = bool(g_table.equals(c_table))
            nbytes = texts.buffers()[2].size
            for backend, wall in (("gpu", g_wall), ("cpu", c_wall)):
                rows.append({"step": f"whole exact+fuzzy run, {name}", "backend": backend, "docs": len(texts),
                             "docs_per_s": len(texts) / wall, "gb_per_s": nbytes / wall / 1e9,
                             "ratio_to_cpu": c_wall / wall if backend == "gpu" else 1.0,
                             "tb_per_hour": nbytes / wall * 3600 / 1e12})
    result.update({"parity": parity, "rows": rows, "peak_bandwidth_gb_s": bw / 1e9 if bw else None})
    print_table(rows, ["step", "backend", "docs", "docs_per_s", "gb_per_s", "ratio_to_cpu", "bandwidth_fraction",
                       "tb_per_hour"], "gpucurate GPU check")
    print("parity:", parity)
    write_json(result, args.json)
    print(f"wrote {args.json}")
    if not all(parity.values()) or not result.get("tests", {}).get("kernel_tests_ok", True):
        sys.exit(1)


if __name__ == "__main__":
    main()
