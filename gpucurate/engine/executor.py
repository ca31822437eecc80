"""Where partition tasks run: in-process threads (default) or an existing Dask cluster.

Stages hand the executor lists of tasks (``engine.tasks``) and get results back in task order, with their
progress on stderr (``engine.progress``). A run without a cluster runs them on its own threads and never imports Dask;
on a cluster (or when a graph holds parts of a Dask collection) they become ``dask.delayed`` calls.
Nothing else in the package talks to a scheduler.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from contextlib import contextmanager

from ..errors import ConfigError, WorkerLostError
from .partitions import Partitions
from .progress import Reporter
from . import spill
from .spill import WORKING_BYTES_PER_INPUT_BYTE, SpillStore, fit_allocator_to, machine_memory
from .tasks import compute, delayed, holds_dask, to_dask
from .threads import thread_map

log = logging.getLogger("gpucurate")


def _threads(*args, **kwargs):
    """Dask's threaded scheduler, passed as a function: the name ``"threads"`` makes Dask import
    ``distributed`` (half a second) to look for a client first."""
    import dask.threaded
    return dask.threaded.get(*args, **kwargs)


def _dask_progress(desc: str, reporter: Reporter):
    """A Dask callback that counts the finished tasks of a local Dask compute on a step of ``reporter``."""
    from dask.callbacks import Callback

    class StepCallback(Callback):
        def __init__(self):
            super().__init__()
            self.bar = None

        def _start_state(self, dsk, state):
            self.bar = reporter.step(sum(len(state[k]) for k in ("ready", "waiting", "running", "finished")), desc,
                                     "task")

        def _posttask(self, key, result, dsk, state, worker_id):
            self.bar.update(1)

        def _finish(self, dsk, state, errored):
            if self.bar is not None:
                self.bar.close()
    return StepCallback()


class Executor:
    """Runs delayed tasks.

    Parameters
    ----------
    scheduler : address of a running Dask scheduler (``tcp://host:port``); None -> local threads.
    workers : threads of the local scheduler; None -> ``os.cpu_count()``.
    progress : show progress on stderr (``engine.progress``: bars in a terminal, a line per stage in a log).
    memory_limit : bytes a run on local threads holds of persisted results, exchange pieces and running
        tasks; None -> a quarter of this machine's memory. spill_dir : where the results and pieces past it
        go (None: the temporary dir).
    partition_bytes : ``input.partition_bytes``; a running task holds ``spill.WORKING_BYTES_PER_INPUT_BYTE``
        times that of its own, set aside out of ``memory_limit`` for each thread, up to half of it; the
        rest is the ``SpillStore``'s budget. Default 0 (nothing set aside).
    """

    def __init__(self, scheduler: str | None = None, workers: int | None = None, progress: bool = True,
                 gpus: bool = False, memory_limit: int | None = None, spill_dir=None, partition_bytes: int = 0):
        self.scheduler_address = scheduler
        self.workers = workers or os.cpu_count() or 1
        self.progress = progress
        self.reporter = Reporter(progress)
        self._reporting = self.reporter.active()  # entered while the executor is open (``with``)
        self.client = None
        self.cluster = None
        self.memory_limit = memory_limit or machine_memory() // 4
        reserved = min(self.memory_limit // 2, self.workers * WORKING_BYTES_PER_INPUT_BYTE * partition_bytes)
        #: what one running task may hold of its own (a thread's share of what is set aside)
        self.task_bytes = reserved // self.workers
        self.store = SpillStore(self.memory_limit - reserved, spill_dir)
        if not scheduler:  # what the allocator keeps of freed memory is held too
            self.store.set_aside(fit_allocator_to(self.memory_limit))
        if gpus and not scheduler:
            scheduler = self._start_cuda_cluster()
        if scheduler:
            try:
                from distributed import Client
                self.client = Client(scheduler, timeout="10s")  # the default client while the run lasts
            except (OSError, TimeoutError) as exc:
                raise ConfigError(f"cannot connect to Dask scheduler {scheduler}: {str(exc).splitlines()[0]}") from None
            self.workers = max(1, sum(self.client.nthreads().values()))
            self._limits_at_start = self._read_limits()
            self.task_bytes = self._worker_task_bytes()
            from .worker_plugin import TrimMemory
            self.client.register_plugin(TrimMemory(), name="gpucurate-trim-memory")

    def _start_cuda_cluster(self) -> str | None:
        """With dask-cuda installed and several GPUs visible: one worker per GPU (``LocalCUDACluster``).
        One GPU needs no cluster: the in-process threads share it."""
        try:
            from dask_cuda import LocalCUDACluster
            from numba import cuda
            if len(cuda.gpus) < 2:
                return None
        except Exception:  # dask-cuda not installed, or no driver: stay in-process
            return None
        self.cluster = LocalCUDACluster()
        log.info("started a LocalCUDACluster with %d workers", len(self.cluster.workers))
        return self.cluster.scheduler_address

    @property
    def description(self) -> str:
        return f"dask cluster {self.scheduler_address}" if self.client else f"local threads ({self.workers})"

    def compute(self, tasks: list, desc: str) -> list:
        """Compute delayed ``tasks``; return their results in order (to this process)."""
        with self._worker_deaths(desc):
            return self._compute(tasks, desc)

    @contextmanager
    def _worker_deaths(self, desc: str):
        """A worker that died under the step (Dask's ``KilledWorker``: killed, or out of memory) as one
        ``WorkerLostError`` naming the step and the workers' memory limit."""
        try:
            yield
        except Exception as exc:
            if self.client is None or type(exc).__name__ != "KilledWorker":
                raise
            raise WorkerLostError(f"a Dask worker died during '{desc}' ({self._worker_limits()}): it was killed or "
                                  f"ran out of memory; give the workers more memory (dask worker --memory-limit) "
                                  f"or make partitions smaller (--set input.partition_bytes=...)") from None

    def _read_limits(self) -> list:
        """The workers' memory limits now (0: none), [] when none is there or the scheduler does not answer."""
        try:
            return sorted({w.get("memory_limit") or 0 for w in self.client.scheduler_info()["workers"].values()})
        except Exception:  # noqa: BLE001 - the scheduler may be gone too
            return []

    def _worker_task_bytes(self) -> int:
        """On a cluster, what one running task may hold of its own: a quarter of the smallest worker's memory
        limit per thread (the rest holds the persisted partitions, which Dask spills from 60% of the limit
        on); without limits, as in one process."""
        try:
            shares = [w["memory_limit"] // max(1, w.get("nthreads", 1))
                      for w in self.client.scheduler_info()["workers"].values() if w.get("memory_limit")]
        except Exception:  # noqa: BLE001 - an old scheduler's answer without these fields
            shares = []
        return min(shares) // 4 if shares else self.task_bytes

    def _worker_limits(self) -> str:
        limits = self._read_limits() or self._limits_at_start  # a dead worker's replacement may not be up yet
        if not limits:
            return "memory limit unknown"
        if limits == [0]:
            return "workers without a memory limit"
        return "memory limit " + " / ".join(f"{v / 1e9:.2f} GB" for v in limits if v) + " per worker"

    def _compute(self, tasks: list, desc: str, keep=None) -> list:
        """``keep`` (local runs only): ``engine.tasks.compute``'s, each result handed over as it comes."""
        if not tasks:
            return []
        if self.client is None:
            if holds_dask(tasks):
                results = self._dask_local(tasks, desc)
                return results if keep is None else [keep(r) for r in results]
            return compute(tasks, self.workers, lambda total: self.reporter.step(total, desc, "task"), keep=keep)
        futures = self.client.compute(to_dask(tasks))
        self._wait(futures, desc)
        return self.client.gather(futures)

    def _dask_local(self, tasks: list, desc: str) -> list:
        """Tasks that take parts of a Dask collection, on Dask's local threads."""
        import dask
        with _dask_progress(desc, self.reporter):
            return list(dask.compute(*to_dask(tasks), scheduler=_threads, num_workers=self.workers))

    def iter_compute(self, tasks: list, desc: str):
        """Compute ``tasks`` a few at a time (twice the threads), yielding results in order: for results
        that together would not fit in this process. On a cluster that many are in flight, each next one
        sent as a result comes (a batch at a time waited for its slowest task and a round trip)."""
        step = max(1, 2 * self.workers)
        with self.reporter.step(len(tasks), desc, "part") as bar, self._worker_deaths(desc):
            if self.client is not None:
                pending = deque()
                for task in tasks:
                    pending.append(self.client.compute(to_dask(task)))
                    if len(pending) > step:
                        yield self._next_result(pending, bar)
                while pending:
                    yield self._next_result(pending, bar)
                return
            for start in range(0, len(tasks), step):
                batch = tasks[start:start + step]
                results = self._dask_local(batch, desc) if holds_dask(batch) else compute(batch, self.workers)
                bar.update(len(batch))
                yield from results

    @staticmethod
    def _next_result(pending, bar):
        result = pending.popleft().result()
        bar.update(1)
        return result

    def persist(self, collection, desc: str):
        """``collection`` (``Partitions`` or a Dask collection) with its partitions computed and kept
        where they were computed. A tuple of Dask collections is persisted together: the tasks they share
        run once."""
        if isinstance(collection, Partitions):
            return Partitions(self.persist_tasks(collection.to_delayed(), desc), collection._meta)
        several = isinstance(collection, tuple)
        if self.client is None:
            import dask
            with _dask_progress(desc, self.reporter):
                persisted = dask.persist(*(collection if several else (collection,)), scheduler=_threads,
                                         num_workers=self.workers)
            return persisted if several else persisted[0]
        from distributed import futures_of
        with self._worker_deaths(desc):
            persisted = self.client.persist(list(collection) if several else collection)
            self._wait(futures_of(persisted), desc)
        return tuple(persisted) if several else persisted

    def persist_tasks(self, tasks: list, desc: str, measure=None):
        """Compute ``tasks`` and keep each result where it was computed (on a cluster, in its worker's
        memory); returns tasks (Dask objects on a cluster) of the results, in order, for later tasks.

        ``measure(result)``, optional: a small fact about each result (its length), taken as it is made,
        so that counting kept results does not read them back from disk; then returns ``(tasks, facts)``."""
        if self.client is None:  # the results stay here, in memory up to the budget, then on disk
            if measure is None:
                return self._compute(tasks, desc, keep=self.store.keep)
            both = self._compute(tasks, desc, keep=lambda result: (self.store.keep(result), measure(result)))
            return [b[0] for b in both], [b[1] for b in both]
        from distributed import futures_of
        with self._worker_deaths(desc):
            persisted = self.client.persist(to_dask(tasks))
            self._wait([f for t in persisted for f in futures_of(t)], desc)
        if measure is None:
            return persisted
        return persisted, self.compute([delayed(measure)(t) for t in persisted], desc)

    def values_here(self, tasks: list, desc: str) -> list:
        """Compute delayed ``tasks`` on this process's threads and return their values (only without a
        cluster, where results stay in this process anyway; ``compute`` is the driver's own step)."""
        assert self.client is None, "values_here runs without a cluster"
        return self._compute(tasks, desc)

    def _wait(self, futures: list, desc: str) -> None:
        """Wait for cluster ``futures`` with a progress bar, so that step timings and failures belong to
        the step that started them."""
        from distributed import as_completed
        with self.reporter.step(len(futures), desc, "part") as bar:
            for future in as_completed(futures):
                if future.status == "error":  # raised here, by the step that ran it
                    raise future.exception()
                bar.update(1)

    @property
    def piece_bytes(self) -> int:
        """The input bytes a running task's share (``task_bytes``) holds the work of: a partition larger than
        this is read and processed in pieces of about this size (``io.reader.processing_partitions``), never
        under ``spill.MIN_PIECE_BYTES``."""
        return max(spill.MIN_PIECE_BYTES, self.task_bytes // WORKING_BYTES_PER_INPUT_BYTE)

    def threads_per_task(self, n_tasks: int) -> int:
        """Threads one task may use itself: the spare local cores when there are fewer tasks than cores
        (e.g. one big compressed file); 1 on a cluster, whose workers own their cores."""
        if self.client is not None or n_tasks <= 0:
            return 1
        return max(1, self.workers // n_tasks)

    @property
    def local_threads(self) -> int:
        """Threads for driver-side work: the run's workers in one process, this machine's cores on a cluster."""
        return self.workers if self.client is None else (os.cpu_count() or 1)

    def map_threads(self, fn, chunks: list) -> list:
        """Run ``fn`` over driver-side chunks on ``local_threads`` threads (numba kernels release the GIL)."""
        return thread_map(fn, chunks, self.local_threads)

    def close(self) -> None:
        self.store.close()
        if self.client is not None:
            self.client.close()
            self.client = None
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None

    def __enter__(self):
        self._reporting.__enter__()
        return self

    def __exit__(self, *exc):
        try:
            self.close()
        finally:
            self._reporting.__exit__(*exc)


@contextmanager
def quiet_logs():
    """Keep distributed's own INFO logs off stderr while a run shows its progress."""
    logger = logging.getLogger("distributed")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)
