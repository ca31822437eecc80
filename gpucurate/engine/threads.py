"""One helper for running GIL-releasing work (numba kernels, Arrow compute) on local threads."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor


def concatenate(arrays: list, threads: int):
    """``np.concatenate(arrays)`` of 1-d arrays of one dtype, the copies on up to ``threads`` threads (a copy
    of hundreds of MB into new memory is bound by page faults, which threads share out)."""
    import numpy as np
    if threads <= 1 or len(arrays) <= 1:
        return np.concatenate(arrays)
    ends = np.cumsum([len(a) for a in arrays])
    out = np.empty(int(ends[-1]) if len(ends) else 0, dtype=arrays[0].dtype)

    def copy(k: int) -> None:
        out[ends[k] - len(arrays[k]):ends[k]] = arrays[k]
    thread_map(copy, list(range(len(arrays))), threads)
    return out


def thread_map(fn, items: list, threads: int) -> list:
    """``[fn(x) for x in items]`` on up to ``threads`` threads, results in order; inline when one
    thread or one item would do."""
    threads = min(threads, len(items))
    if threads <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(fn, items))
