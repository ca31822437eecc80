"""The host memory budget of a run on this process's threads. ``run.memory_limit`` is shared: the tasks
running at once get ``WORKING_BYTES_PER_INPUT_BYTE`` x a partition's bytes each (up to half of it), and
what the run keeps between tasks (the persisted partitions, the partitions' states and the exchanges'
pieces) gets the rest; past that, the least recently used values go to disk, one file each in a spill
folder, written once, and come back when a task takes them: mapped, not read (``_write_value``), so a task
that touches part of a value reads only that part. Each result is handed over as its task
finishes (``engine.tasks.compute``'s ``keep``), not when the step ends.

A stage never sees this: ``Executor.persist_tasks`` and ``engine.shuffle.exchange`` keep each result or
piece here and hand on a task that loads it (``SpillStore.keep``). A run whose values fit never touches
the disk. The spill folder
(``gpucurate-spill-<pid>-<random>`` under ``run.spill_dir``) is created at the first spill and removed when
the run ends or fails; a killed run's folder is removed by the next store made under the same directory.
On a Dask cluster the workers' own memory managers do this (Dask's spilling to their local directory).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import errno
import functools
import logging
import mmap
import os
import pickle
import re
import shutil
import socket
import struct
import sys
import tempfile
import threading
import weakref
from collections import OrderedDict, deque
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ..errors import OutputError
from .failpoints import failpoint
from .tasks import Task

log = logging.getLogger("gpucurate")

_PREFIX = "gpucurate-spill-"
_HOST = re.sub(r"[^A-Za-z0-9]", "_", socket.gethostname())
#: what a running task holds of its own, per byte of its input partition: the parse, the normalized text,
#: the shingle sets and their exchange pieces (measured 5 to 7 on JSON Lines of news text)
WORKING_BYTES_PER_INPUT_BYTE = 6
#: the smallest piece a partition is read in under a small budget (``Executor.piece_bytes``): below it a
#: task's fixed costs outweigh what it saves
MIN_PIECE_BYTES = 1 << 20
#: kept values under this size go to disk after all the larger ones: an exchange between P partitions
#: makes P x P pieces, and one file each would cost more to open than its bytes
SMALL_VALUE_BYTES = 256 * 1024


def machine_memory() -> int:
    """This machine's physical memory in bytes."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not POSIX: a conservative guess
        return 8 << 30


#: glibc's ``mallopt``, once ``tune_allocator`` has set it up (the CLI), else None
_mallopt = _malloc_trim = None
#: a budget from which freed memory may stay in the process (``fit_allocator_to``)
ALLOCATOR_CACHE_FROM = 4 << 30


def tune_allocator() -> None:
    """glibc's malloc for a command that keeps to ``run.memory_limit``: arrays of 256 KB and more mapped on
    their own, so that freeing one gives its pages back at once, and two arenas instead of eight a core,
    whose freed pages stay in the process (x40 corpus, ``run.memory_limit=1GB``: peak RSS 1.44 -> 1.27 GB
    at the same speed). Settings given in the environment (``MALLOC_*_``) are left alone; other C
    libraries are too."""
    global _mallopt, _malloc_trim
    if any(k in os.environ for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_ARENA_MAX")):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        _mallopt, _malloc_trim = libc.mallopt, libc.malloc_trim
    except (OSError, AttributeError):
        return
    _mallopt(-3, 256 * 1024)  # M_MMAP_THRESHOLD (fixed: glibc no longer raises it after big frees)
    _mallopt(-8, 2)  # M_ARENA_MAX


def trim_allocator() -> None:
    """Hand the free pages inside glibc's heaps back to the OS (``malloc_trim``; where ``tune_allocator`` ran).
    Freed arrays stay in the heaps under a large budget (``fit_allocator_to``), and the holes between live
    ones are not trimmed from the top. Called between stages."""
    if _malloc_trim is not None:
        _malloc_trim(0)


def fit_allocator_to(memory_limit: int) -> int:
    """Let freed memory stay in the process for the next arrays, taken out of the budget; returns the bytes
    it may keep (0 where the CLI did not tune the allocator). Each mapped array's pages are faulted in
    afresh: a third of the CPU time of a run in memory (10x Reuters: 2.1 -> 1.0 s of system time, wall
    5.4 -> 4.6 s, peak RSS 1.13 -> 1.40 GB), and a quarter of the system time of the x40 scattered corpus
    under a 1 GB budget. From ``ALLOCATOR_CACHE_FROM``, arrays up to 32 MB come from the heap and up to 256 MB
    stays at the top of a heap, and as much again in the holes between live arrays (``trim_allocator``
    frees them between stages only); under it, an eighth of the budget stays, from arrays up to a
    sixty-fourth of it. x160 scattered under the default budget (6.3 GB here): 64 MB arrays from the heap
    and 256 MB set aside peaked at 7.14 GB; 32 MB and 512 MB at 6.47 GB (10x Reuters: +0.2 s of system
    time)."""
    if _mallopt is None:
        return 0
    top = 256 << 20 if memory_limit >= ALLOCATOR_CACHE_FROM else memory_limit // 8
    _mallopt(-3, min(32 << 20, max(256 << 10, memory_limit // 64)))  # M_MMAP_THRESHOLD
    _mallopt(-1, top)  # M_TRIM_THRESHOLD
    return 2 * top if memory_limit >= ALLOCATOR_CACHE_FROM else top


def nbytes_of(value) -> int:
    """Bytes a kept value holds: NumPy, pandas and Arrow buffers, containers summed; other objects by
    ``sys.getsizeof``. Text in object columns is estimated from a sample (it is not walked)."""
    if isinstance(value, np.ndarray):
        return _objects_nbytes(value) if value.dtype == object else int(value.nbytes)
    if isinstance(value, dict):
        return sum(nbytes_of(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(nbytes_of(v) for v in value)
    host = getattr(value, "host_nbytes", None)  # a value whose buffers may be elsewhere (device arrays)
    if host is not None:
        return int(host)
    nbytes = getattr(value, "nbytes", None)
    if hasattr(value, "memory_usage") and hasattr(value, "columns"):  # a pandas DataFrame
        return _frame_nbytes(value)
    if isinstance(nbytes, (int, np.integer)):  # Arrow arrays and tables, pandas extension arrays
        return int(nbytes)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(nbytes_of(getattr(value, f.name)) for f in dataclasses.fields(value))
    return sys.getsizeof(value)


def _frame_nbytes(frame) -> int:
    # the read pass's per-stage arrays ride in attrs (paragraph spans, substring units and window keys)
    total = int(frame.index.memory_usage()) + (nbytes_of(frame.attrs) if frame.attrs else 0)
    for _, column in frame.items():
        total += _objects_nbytes(column.to_numpy()) if column.dtype == object else int(column.array.nbytes)
    return total


def _objects_nbytes(values: np.ndarray) -> int:
    """An object array's pointers and the objects they point to (ids, texts), estimated from a sample."""
    if not len(values):
        return 0
    sample = values.reshape(-1)[:: max(1, values.size // 256)]
    return int(sum(sys.getsizeof(v) for v in sample) / len(sample) * values.size) + 8 * values.size


#: ``_Kept.value`` of a value that is on disk only (a task's result may itself be None)
_ON_DISK = object()


class _Kept:
    """One kept value: in memory (``value``), on disk (``file[0]``, a path), or both after it came back.
    ``file`` is a list so that the finalizer of a value gone can remove its file."""

    __slots__ = ("value", "file", "nbytes", "lock", "__weakref__")

    def __init__(self, value, nbytes: int):
        self.value, self.file, self.nbytes = value, [None], nbytes
        self.lock = threading.Lock()


class SpillStore:
    """Values kept for later tasks within ``budget`` bytes of memory; the rest on disk under ``root``.

    Parameters
    ----------
    budget : bytes of kept values in memory; past it the least recently used others are written to disk.
    root : the directory the spill folder is made in (created at the first spill).
    """

    def __init__(self, budget: int, root: str | os.PathLike | None = None):
        self.budget = int(budget)
        self.root = Path(root) if root is not None else Path(tempfile.gettempdir())
        self.folder: Path | None = None
        self._lock = threading.Lock()
        # id -> weakref of the _Kept values in memory, oldest first: the large ones, then the small ones,
        # which go to disk only when the large ones are all there (a file per small piece costs more in
        # opening it than in its bytes)
        self._large: OrderedDict = OrderedDict()
        self._small: OrderedDict = OrderedDict()
        # (key, nbytes, ref) of values collected, settled under the lock by the next call that takes it: the
        # collector may run a weakref's callback inside any allocation, also one made while this thread
        # holds the lock, so the callback must not take it
        self._collected: deque = deque()
        self._count = 0
        self._memory_bytes = 0
        self.peak_bytes = 0
        self.stage_peak_bytes = 0  # since ``StagePeaks`` last started a stage
        self.spilled_bytes = 0
        self.spills = 0
        self.loads = 0
        if self.root.is_dir():  # a killed run's folder goes at the next run, whether or not it spills
            remove_stale(self.root)

    def keep(self, value) -> Task:
        """A task whose result is ``value``, kept in memory or on disk until no task refers to it."""
        kept = _Kept(value, nbytes_of(value))
        weakref.finalize(kept, _unlink, kept.file)  # its file goes with it
        with self._lock:
            self._admit(kept)
            victims = self._victims(kept)
        self._spill_all(victims)
        return Task(self._load, (kept,), {})

    def keep_on_disk(self, value) -> "Loader":
        """``keep`` for a value that no task needs until much later: written to disk at once, not taking
        the budget from the values that are needed sooner; the ``Loader`` that loads it."""
        kept = _Kept(_ON_DISK, nbytes_of(value))
        weakref.finalize(kept, _unlink, kept.file)
        kept.file[0] = self._write(value)
        with self._lock:
            self.spills += 1
            self.spilled_bytes += kept.nbytes
        return Loader(Task(self._load, (kept,), {}))

    def _load(self, kept: _Kept):
        with kept.lock:
            value = kept.value
            if value is _ON_DISK:
                value = _read_value(kept.file[0])
                _freeze(value)  # as on disk: evicted again, it is dropped, not written again
                kept.value = value
                with self._lock:
                    self.loads += 1
                    self._admit(kept)
                    victims = self._victims(kept)
            else:
                with self._lock:
                    queue = self._queue(kept.nbytes)
                    if id(kept) in queue:
                        queue.move_to_end(id(kept))
                victims = []
        self._spill_all(victims)
        return value

    @property
    def memory_bytes(self) -> int:
        """Bytes of the kept values in memory."""
        with self._lock:
            self._settle()
            return self._memory_bytes

    def _queue(self, nbytes: int) -> OrderedDict:
        return self._small if nbytes < SMALL_VALUE_BYTES else self._large

    def _admit(self, kept: _Kept) -> None:
        self._settle()  # before a new value takes the id of one collected
        key = id(kept)
        self._queue(kept.nbytes)[key] = weakref.ref(kept, functools.partial(self._gone, key, kept.nbytes))
        self._memory_bytes += kept.nbytes
        self.peak_bytes = max(self.peak_bytes, self._memory_bytes)
        self.stage_peak_bytes = max(self.stage_peak_bytes, self._memory_bytes)

    def _victims(self, newest: _Kept) -> list:
        """The least recently used kept values to move to disk for ``memory_bytes`` to fit the budget (taken
        out of the count here, under the lock; written by the caller)."""
        self._settle()
        victims = []
        for queue in (self._large, self._small):
            for key in list(queue):
                if self._memory_bytes <= self.budget:
                    return victims
                kept = queue[key]()
                if kept is None or kept is newest:
                    continue
                del queue[key]
                self._memory_bytes -= kept.nbytes
                victims.append(kept)
        return victims

    def _spill_all(self, victims: list) -> None:
        for kept in victims:
            with kept.lock:
                if kept.value is _ON_DISK:
                    continue
                if kept.file[0] is None:  # written once; one that came back is the file's (frozen)
                    kept.file[0] = self._write(kept.value)
                    self.spills += 1
                    self.spilled_bytes += kept.nbytes
                kept.value = _ON_DISK
            failpoint("spilled")

    def _write(self, value) -> Path:
        folder = self._folder()
        with self._lock:
            self._count += 1
            path = folder / f"{self._count}.pkl"
        try:
            with open(path, "wb") as f:
                _write_value(f, value)
        except OSError as exc:
            path.unlink(missing_ok=True)
            why = "the disk is full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else exc.strerror or str(exc)
            raise OutputError(f"cannot spill past run.memory_limit ({self.budget:,} bytes): {why}; set "
                              f"run.spill_dir to a disk with room, or raise run.memory_limit", folder) from None
        return path

    def _folder(self) -> Path:
        with self._lock:
            if self.folder is None:
                try:
                    self.root.mkdir(parents=True, exist_ok=True)
                    self.folder = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{_HOST}-{os.getpid()}-", dir=self.root))
                except OSError as exc:
                    raise OutputError(f"cannot make a spill folder: {exc.strerror or exc}", self.root) from None
                log.info("memory: kept values past their %.0f MB of run.memory_limit, spilling to %s",
                         self.budget / 1e6, self.folder)
            return self.folder

    def _gone(self, key: int, nbytes: int, ref) -> None:
        """A kept value in memory that no task refers to any more: its bytes no longer count (once settled)."""
        self._collected.append((key, nbytes, ref))

    def _settle(self) -> None:
        """Take the values collected out of the queues and the count (under the lock)."""
        while self._collected:
            key, nbytes, ref = self._collected.popleft()
            queue = self._queue(nbytes)
            if queue.get(key) is ref:
                del queue[key]
                self._memory_bytes -= nbytes

    def set_aside(self, nbytes: int) -> int:
        """Take ``nbytes`` out of the budget, for a cache that the caller holds itself; returns them."""
        with self._lock:
            self.budget -= nbytes
        return nbytes

    def summary(self) -> dict:
        """``summary.json``'s ``memory`` section."""
        return {"kept_budget": self.budget, "peak_kept_bytes": self.peak_bytes, "spilled_bytes": self.spilled_bytes,
                "spills": self.spills, "loads": self.loads, "spill_dir": str(self.root)}

    def close(self) -> None:
        """Remove the spill folder (the run is over: no task will load from it)."""
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None


class Loader:
    """A kept value handed to a task unloaded: ``loader()`` loads it (from memory or disk, as ``keep``'s task
    would). A task streams through values with these, one in memory at a time, where its arguments would all
    be loaded before it starts. Not a ``Task``: the graph passes it on as it is."""

    __slots__ = ("_task",)

    def __init__(self, task: Task):
        if not (task.args and isinstance(task.args[0], _Kept)):
            raise TypeError("a Loader takes a task that SpillStore.keep made")
        self._task = task

    def __call__(self):
        return self._task.fn(*self._task.args)


def _resident_bytes() -> int | None:
    """This process's resident memory now (Linux ``/proc/self/statm``), None where it cannot be read."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class StagePeaks:
    """Per stage of a run, the peak of what the ``store`` kept (counted) and of the process's resident memory
    (sampled every ``interval`` seconds on a thread: short spikes can be missed): ``summary.json``'s
    ``memory.stages``, against ``run.memory_limit``. The kernel's own peak (VmHWM) is not reset for this:
    that would also reset the one ``wait4`` reports (GNU time's)."""

    def __init__(self, store: SpillStore, interval: float = 0.05):
        self.store, self.interval = store, interval
        self.stages: dict[str, dict] = {}
        self._rss_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="gpucurate-rss", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            rss = _resident_bytes()
            if rss is None:
                return
            self._rss_peak = max(self._rss_peak, rss)

    @contextmanager
    def stage(self, name: str):
        """Measure the block as stage ``name`` (a stage inside another counts for both)."""
        outer = self.store.stage_peak_bytes, self._rss_peak
        self.store.stage_peak_bytes = self.store.memory_bytes
        self._rss_peak = _resident_bytes() or 0
        try:
            yield
        finally:
            trim_allocator()  # what the stage freed, for the next one
            kept, rss = self.store.stage_peak_bytes, max(self._rss_peak, _resident_bytes() or 0)
            seen = self.stages.setdefault(name, {"peak_kept_bytes": 0, "peak_rss_bytes": 0})
            seen["peak_kept_bytes"] = max(seen["peak_kept_bytes"], kept)
            seen["peak_rss_bytes"] = max(seen["peak_rss_bytes"], rss)
            self.store.stage_peak_bytes, self._rss_peak = max(outer[0], kept), max(outer[1], rss)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


#: a spilled value's file: ``<header length, buffer count>``, each buffer's length, the pickle of the value
#: without its buffers, then each buffer (pickle protocol 5's out-of-band buffers: the arrays' and Arrow
#: columns' bytes) at a multiple of ``_ALIGN``; a file this large or more is mapped when it comes back, so
#: its bytes are neither read nor copied until a task touches them (the verification's streamed shingle sets
#: touch a fraction of each partition's)
_COUNTS = struct.Struct("<QQ")
_ALIGN = 64
_MAP_BYTES = 1 << 20


def _write_value(f, value) -> None:
    buffers: list = []
    header = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]
    f.write(_COUNTS.pack(len(header), len(raws)))
    f.write(np.array([r.nbytes for r in raws], dtype="<u8").tobytes())
    f.write(header)
    for raw in raws:
        f.write(b"\0" * (-f.tell() % _ALIGN))
        f.write(raw)


def _read_value(path: Path):
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size >= _MAP_BYTES:
            data = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
        else:
            data = memoryview(f.read())
    header_bytes, count = _COUNTS.unpack_from(data, 0)
    at = _COUNTS.size + 8 * count
    sizes = np.frombuffer(data, dtype="<u8", count=count, offset=_COUNTS.size).tolist()
    header = data[at:at + header_bytes]
    at += header_bytes
    buffers = []
    for size in sizes:
        at += -at % _ALIGN
        buffers.append(data[at:at + size])
        at += size
    return pickle.loads(header, buffers=buffers)


def _freeze(value) -> None:
    """Make the NumPy arrays of a value read from disk read-only: a task that changed one in place would
    otherwise lose the change when the value is dropped again (it fails instead)."""
    if isinstance(value, np.ndarray):
        value.flags.writeable = False
    elif isinstance(value, dict):
        for v in value.values():
            _freeze(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _freeze(v)


def _unlink(file: list) -> None:
    if file[0] is not None:
        file[0].unlink(missing_ok=True)


def remove_stale(root: Path) -> None:
    """Remove the spill folders under ``root`` of this host's processes that no longer run (a killed
    run's)."""
    for folder in root.glob(f"{_PREFIX}{_HOST}-*"):
        found = re.fullmatch(rf"{_PREFIX}{re.escape(_HOST)}-(\d+)-\w+", folder.name)
        if found and not _alive(int(found.group(1))):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
