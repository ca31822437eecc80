"""Lazy tasks: the part of ``dask.delayed`` the stages use, run on local threads without importing Dask.

Importing Dask costs 0.17-0.2 s of a run's start-up (a tenth of a small run), and its threaded scheduler
another 0.05-0.1 s of graph work per run. A run without a cluster needs neither, so the stages build
their task graphs from ``Task`` objects; ``compute`` runs them on this process's threads, and on a Dask
cluster (or when a graph holds Dask objects) ``to_dask`` turns them into ``dask.delayed`` calls.

Arguments are searched for tasks the way ``dask.delayed`` searches them: inside lists, tuples and dict
values, to any depth.
"""

from __future__ import annotations

import heapq
import operator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

_CONTAINERS = (list, tuple, dict)


class Task:
    """``fn(*args, **kwargs)``, run later; ``fn is None``: an already known value (``args[0]``).

    ``task[k]`` is the task of its result's item ``k``; a task made with ``nout`` unpacks into that many.
    """

    __slots__ = ("fn", "args", "kwargs", "nout")

    def __init__(self, fn, args: tuple, kwargs: dict, nout: int | None = None):
        self.fn, self.args, self.kwargs, self.nout = fn, args, kwargs, nout

    def __getitem__(self, key) -> "Task":
        return Task(operator.getitem, (self, key), {})

    def __iter__(self):
        if self.nout is None:
            raise TypeError("a Task without nout cannot be unpacked")
        return (self[k] for k in range(self.nout))

    def __repr__(self) -> str:
        return "Task(value)" if self.fn is None else f"Task({getattr(self.fn, '__name__', self.fn)!r})"


def delayed(fn, *, nout: int | None = None, pure: bool = False):
    """``delayed(fn)(*args, **kwargs)``: the task of ``fn``'s call (``dask.delayed``'s shape; tasks are
    never pure: each call is its own task)."""
    def call(*args, **kwargs) -> Task:
        return Task(fn, args, kwargs, nout)
    return call


def value(obj) -> Task:
    """A task whose result is ``obj`` (a result already computed, handed to later tasks)."""
    return Task(None, (obj,), {})


def _children(obj, out: list) -> None:
    """Append the tasks and Dask objects found in ``obj`` (an argument) to ``out``."""
    if isinstance(obj, Task) or hasattr(obj, "__dask_graph__"):
        out.append(obj)
    elif isinstance(obj, _CONTAINERS):
        for item in (obj.values() if isinstance(obj, dict) else obj):
            _children(item, out)


def _task_children(task: Task) -> list:
    """The tasks and Dask objects among ``task``'s arguments (with repeats)."""
    out: list = []
    _children(task.args, out)
    _children(task.kwargs, out)
    return out


def _map_tasks(obj, fn):
    """``obj`` (an argument) with every task in it replaced by ``fn(task)``, containers rebuilt."""
    if isinstance(obj, Task):
        return fn(obj)
    if isinstance(obj, _CONTAINERS):
        if isinstance(obj, dict):
            return {k: _map_tasks(v, fn) for k, v in obj.items()}
        items = [_map_tasks(v, fn) for v in obj]
        return items if isinstance(obj, list) else tuple(items)
    return obj


def holds_dask(tasks: list) -> bool:
    """Whether the graph of ``tasks`` holds a Dask object (a persisted Dask collection's part)."""
    seen: set = set()
    stack = list(tasks)
    while stack:
        obj = stack.pop()
        if hasattr(obj, "__dask_graph__"):
            return True
        if isinstance(obj, Task) and id(obj) not in seen:
            seen.add(id(obj))
            stack.extend(_task_children(obj))
    return False


def to_dask(obj, memo: dict | None = None):
    """``obj`` (a task, or a list, tuple or dict of them) as ``dask.delayed`` objects; a task shared by
    several others stays one Dask task (``memo``: converted tasks by id, for one graph)."""
    import dask
    memo = {} if memo is None else memo

    def convert(task: Task):
        got = memo.get(id(task))
        if got is None:
            if task.fn is None:
                got = dask.delayed(task.args[0], pure=False)
            else:
                got = dask.delayed(task.fn, pure=False, nout=task.nout)(*_map_tasks(task.args, convert),
                                                                        **_map_tasks(task.kwargs, convert))
            memo[id(task)] = (got, task)  # the task is kept alive while its id is a key
            return got
        return got[0]
    return _map_tasks(obj, convert)


def compute(tasks: list, threads: int, progress=None, keep=None) -> list:
    """The results of ``tasks`` (in order), run on up to ``threads`` threads; no Dask object may be in
    their graph (see ``holds_dask``). With ``keep`` (``SpillStore.keep``), what ``keep`` returns for each
    result is returned in its place, made as soon as that result is there: the results do not wait in
    memory for the last one.

    Tasks run as soon as their inputs are there, the earliest in a depth-first order of the graph first,
    so that a partition's chain of tasks finishes before the next partitions start (what keeps memory
    to a few partitions at a time). A result is dropped when the last task that takes it has run.
    ``progress(n_tasks)``, optional, makes a progress bar (tqdm's shape), updated for each finished task
    and closed at the end. The first error raised by a task is raised here, once the tasks already
    running have stopped.
    """
    if not tasks:
        return []
    graph = _Graph(tasks, keep)
    bar = progress(len(graph.rank)) if progress is not None else None
    try:
        graph.run(threads, bar)
    finally:
        if bar is not None:
            bar.close()
    return [(graph.kept if keep is not None else graph.results)[id(t)] for t in tasks]


class _Graph:
    """One ``compute``: the tasks by id, what each waits for, and the results not yet taken by all."""

    def __init__(self, roots: list, keep=None):
        self.keep, self.kept = keep, {}
        self.roots = {id(root) for root in roots}
        self.by_id: dict = {}
        self.children: dict = {}  # id -> ids of the distinct child tasks
        for root in roots:
            self._visit(root)
        self.rank = {key: r for r, key in enumerate(self.by_id)}  # depth-first post-order
        self.waiting = {key: len(kids) for key, kids in self.children.items()}
        self.takers = dict.fromkeys(self.by_id, 0)  # the tasks (and the caller) still to take each result
        self.parents: dict = {key: [] for key in self.by_id}
        for key, kids in self.children.items():
            for kid in kids:
                self.takers[kid] += 1
                self.parents[kid].append(key)
        if keep is None:  # the caller takes the roots' results themselves
            for root in roots:
                self.takers[id(root)] += 1
        self.ready = [(self.rank[key], key) for key, n in self.waiting.items() if n == 0]
        heapq.heapify(self.ready)
        self.results: dict = {}

    def _visit(self, root: Task) -> None:
        """Add ``root``'s graph, each task after its children (iteratively: chains may be long)."""
        if id(root) in self.children:
            return
        stack = [(root, self._kids(root))]
        while stack:
            task, kids = stack[-1]
            for kid in kids:
                if id(kid) not in self.children:
                    stack.append((kid, self._kids(kid)))
                    break
            else:
                stack.pop()
                self.by_id[id(task)] = task

    def _kids(self, task: Task):
        kids = list({id(k): k for k in _task_children(task)}.values())
        self.children[id(task)] = [id(k) for k in kids]
        return iter(kids)

    def call(self, key):
        task = self.by_id[key]
        return task.fn(*_map_tasks(task.args, self.result_of), **_map_tasks(task.kwargs, self.result_of))

    def result_of(self, task: Task):
        return self.results[id(task)]

    def finish(self, key, result, bar) -> None:
        if self.keep is not None and key in self.roots:
            self.kept[key] = self.keep(result)
        if self.takers[key]:
            self.results[key] = result
        for kid in self.children[key]:
            self.takers[kid] -= 1
            if self.takers[kid] == 0:
                del self.results[kid]
        for parent in self.parents[key]:
            self.waiting[parent] -= 1
            if self.waiting[parent] == 0:
                heapq.heappush(self.ready, (self.rank[parent], parent))
        if bar is not None:
            bar.update(1)

    def next_ready(self, bar):
        """The next task to call (None: none is ready); known values are finished on the way."""
        while self.ready:
            _, key = heapq.heappop(self.ready)
            task = self.by_id[key]
            if task.fn is not None:
                return key
            self.finish(key, task.args[0], bar)
        return None

    def run(self, threads: int, bar) -> None:
        if threads <= 1:
            while (key := self.next_ready(bar)) is not None:
                self.finish(key, self.call(key), bar)
            return
        with ThreadPoolExecutor(threads) as pool:
            running: dict = {}  # future -> task id; results are finished here, in this thread
            try:
                while True:
                    while len(running) < threads and (key := self.next_ready(bar)) is not None:
                        running[pool.submit(self.call, key)] = key
                    if not running:
                        return
                    done, _ = wait(running, return_when=FIRST_COMPLETED)
                    for future in sorted(done, key=lambda f: self.rank[running[f]]):
                        self.finish(running.pop(future), future.result(), bar)
            except BaseException:
                for future in running:
                    future.cancel()
                raise
