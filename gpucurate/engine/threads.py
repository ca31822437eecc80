"""One helper for running GIL-releasing work (numba kernels, Arrow compute) on local threads."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor


def thread_map(fn, items: list, threads: int) -> list:
    """``[fn(x) for x in items]`` on up to ``threads`` threads, results in order; inline when one
    thread or one item would do."""
    threads = min(threads, len(items))
    if threads <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(fn, items))
