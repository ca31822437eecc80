"""The in-process task graphs of local runs (``engine.tasks``): results, sharing, order, memory, errors,
and the same graphs on Dask."""

import threading
import weakref

import pytest

from gpucurate.engine.tasks import compute, delayed, holds_dask, to_dask, value


class Box:
    """A result that can be watched with a weak reference."""

    def __init__(self, n):
        self.n = n


def test_results_in_order_with_shared_tasks_run_once_and_containers_searched():
    calls = []

    def leaf(n):
        calls.append(n)
        return n

    a, b = delayed(leaf)(1), delayed(leaf)(2)
    both = delayed(lambda xs, d: xs[0] + xs[1][0] + d["k"])([a, (b,)], {"k": a})
    pair = delayed(lambda x: (x, 10 * x), nout=2)(value(3))
    first, second = pair
    tasks = [both, a, both, first, second, pair[1], delayed(sum)([first, second])]
    for threads in (1, 2, 4):
        calls.clear()
        assert compute(tasks, threads) == [4, 1, 4, 3, 30, 30, 33]
        assert sorted(calls) == [1, 2]  # each leaf once, though three tasks take ``a``
    with pytest.raises(TypeError):
        iter(a)


def test_independent_tasks_run_at_the_same_time():
    meet = threading.Barrier(2, timeout=10)
    tasks = [delayed(meet.wait)() for _ in range(2)]
    assert sorted(compute(tasks, 2)) == [0, 1]  # one thread alone would break the barrier


def test_a_chain_finishes_before_the_next_starts_and_its_results_are_dropped():
    order, alive = [], []

    def read(p):
        order.append(f"read{p}")
        return Box(p)

    def parse(box):
        order.append(f"parse{box.n}")
        alive.append(weakref.ref(box))
        return box.n

    def check(n):
        order.append(f"check{n}")
        return alive[n]() is None  # ``read``'s result was dropped once ``parse``, its only taker, ran

    tasks = [delayed(check)(delayed(parse)(delayed(read)(p))) for p in range(3)]
    assert compute(tasks, 1) == [True, True, True]
    assert order == ["read0", "parse0", "check0", "read1", "parse1", "check1", "read2", "parse2", "check2"]


@pytest.mark.parametrize("threads", [1, 2])
def test_kept_results_are_handed_over_as_they_come_and_not_held_for_the_last(threads):
    ran, kept = [], []

    def make(p):
        ran.append(p)
        return Box(p)

    def keep(box):  # what SpillStore.keep does: the value goes elsewhere, a handle comes back
        kept.append((box.n, len(ran)))
        return f"handle{box.n}"

    first = delayed(make)(0)
    tasks = [first] + [delayed(make)(p) for p in range(1, 4)] + [delayed(lambda b: Box(b.n + 10))(first)]
    got = compute(tasks, threads, keep=keep)
    assert got == ["handle0", "handle1", "handle2", "handle3", "handle10"]
    assert sorted(n for n, _ in kept) == [0, 1, 2, 3, 10]  # each root kept once, the shared one too
    if threads == 1:  # kept right after it ran, not after the last root
        assert [seen for _, seen in kept[:4]] == [1, 2, 3, 4]


def test_a_wide_reduction_runs_its_leaves_in_parallel():
    meet = threading.Barrier(2, timeout=10)
    leaves = [delayed(lambda: meet.wait() >= 0)() for _ in range(2)]
    assert compute([delayed(all)(leaves)], 2) == [True]


@pytest.mark.parametrize("threads", [1, 2])
def test_the_first_error_is_raised_and_later_chains_do_not_start(threads):
    started = []

    def fail(p):
        started.append(p)
        raise ValueError(f"bad partition {p}")

    def later(p):
        started.append(p)
        return p

    tasks = [delayed(later)(0), delayed(fail)(1)] + [delayed(later)(p) for p in range(2, 40)]
    with pytest.raises(ValueError, match="bad partition 1"):
        compute(tasks, threads)
    assert len(started) <= 2 + threads


def test_progress_bar_gets_the_total_and_every_task():
    class Bar:
        def __init__(self, total):
            self.total, self.done, self.closed = total, 0, False

        def update(self, n=1):
            self.done += n

        def close(self):
            self.closed = True

    bars = []
    a = delayed(abs)(-1)
    compute([delayed(max)(a, value(0)), a], 2, lambda total: bars.append(Bar(total)) or bars[-1])
    assert [(b.total, b.done, b.closed) for b in bars] == [(3, 3, True)]


def test_the_same_graph_on_dask_shares_tasks_and_gives_the_same_results():
    import dask
    calls = []

    def leaf(n):
        calls.append(n)
        return n

    a = delayed(leaf)(5)
    pair = delayed(lambda x: (x, x + 1), nout=2)(a)
    tasks = [delayed(lambda xs: xs[0] * xs[1])([pair[0], pair[1]]), a, value(7)]
    ours = compute(tasks, 2)
    calls.clear()
    assert list(dask.compute(*to_dask(tasks), scheduler="sync")) == ours == [30, 5, 7]
    assert calls == [5]
    assert not holds_dask(tasks)
    assert holds_dask([delayed(abs)([dask.delayed(-1)])])
