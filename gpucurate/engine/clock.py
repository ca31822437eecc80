"""Seconds spent in named kinds of partition work (parsing, normalizing, ...), summed over the tasks that
ran in this process.

A step that runs inside partition tasks has no wall time of its own: its tasks run on several threads and
share each one with other steps of the same chain. ``task_clock(name)`` adds a block's seconds to ``name``;
``totals()`` says what this process spent per name since ``reset()``. ``summary.json`` reports them as task
seconds (divide by the threads to compare them with the wall time).
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

_lock = threading.Lock()
_totals: dict[str, float] = {}


@contextmanager
def task_clock(name: str):
    """Add the seconds of the ``with`` block to ``name``'s total (thread-safe)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - start
        with _lock:
            _totals[name] = _totals.get(name, 0.0) + elapsed


def totals() -> dict[str, float]:
    """Seconds per name since the last ``reset``, rounded to 0.1 ms."""
    with _lock:
        return {k: round(v, 4) for k, v in _totals.items()}


def reset() -> None:
    with _lock:
        _totals.clear()
