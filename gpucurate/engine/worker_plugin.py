"""What gpucurate installs on the workers of a Dask cluster it connects to."""

from __future__ import annotations

import ctypes
import ctypes.util
import time

import pyarrow as pa
from distributed import WorkerPlugin


class TrimMemory(WorkerPlugin):
    """Every second, and after a task at most once a second, hand freed heap pages back to the OS (Arrow's
    pool and glibc's ``malloc_trim``). Without it, memory freed by big partition tasks stays in the worker
    as unmanaged memory; a worker above its pause threshold with nothing left to spill then waits forever
    (seen with 1 GB workers). The timer also runs while the worker is paused."""

    idempotent = True

    def setup(self, worker):
        from tornado.ioloop import PeriodicCallback
        self._last = 0.0
        try:
            self._malloc_trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
        except (OSError, AttributeError):  # not glibc
            self._malloc_trim = None
        self._timer = PeriodicCallback(self._trim, 1000)
        worker.periodic_callbacks["gpucurate-trim-memory"] = self._timer
        self._timer.start()

    def teardown(self, worker):
        self._timer.stop()
        worker.periodic_callbacks.pop("gpucurate-trim-memory", None)

    def transition(self, key, start, finish, **kwargs):
        if finish == "memory" and time.monotonic() - self._last >= 1.0:
            self._trim()

    def _trim(self):
        pa.default_memory_pool().release_unused()
        if self._malloc_trim is not None:
            self._malloc_trim(0)
        self._last = time.monotonic()
