"""The host memory budget (``run.memory_limit``, ``engine.spill``): past it the kept partitions and states
go to files and come back, with byte-identical output; the spill folder goes at the end, on failure and
after a kill; a disk that refuses the spill is one clear error."""

import errno
import os
import warnings
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import write_jsonl
from gpucurate.config import load_config
from gpucurate.engine import spill
from gpucurate.engine.tasks import compute
from gpucurate.errors import ConfigError, OutputError
from gpucurate.workflows.run import run

ROOT = Path(__file__).resolve().parents[1]
QUIET = {"run.progress": False, "semantic.enabled": False}


def _corpus(tmp_path, n=900, seed=3) -> Path:
    """Near copies of 60 texts over many partitions (2 KB each), so that states spill and come back."""
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(400)] + ["ёж", "über", "日本"]
    bases = [list(rng.choice(vocab, rng.integers(12, 60))) for _ in range(60)]
    records = []
    for i in range(n):
        words = list(bases[i % 60])
        for _ in range(int(rng.integers(0, 3))):
            words[int(rng.integers(len(words)))] = str(rng.choice(vocab))
        records.append({"id": f"d{i}", "text": " ".join(words) if i % 9 else " ".join(rng.choice(vocab, 20))})
    return write_jsonl(tmp_path / "docs.jsonl", records)


@pytest.fixture(autouse=True)
def _quiet_uint64_overflow():
    with warnings.catch_warnings(), np.errstate(over="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def _files(out: Path) -> dict:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.parquet"))}


def _spill_folders(root: Path) -> list:
    return sorted(p.name for p in root.glob("gpucurate-spill-*"))


@pytest.mark.parametrize("backend, docs, partition_bytes", [("cpu", 900, 8192), ("gpu", 150, 2048)])
def test_a_tiny_budget_spills_everything_and_changes_nothing(tmp_path, backend, docs, partition_bytes):
    """With a 1-byte budget every kept partition and state goes to disk and comes back for each task: the
    annotations, aliases, edges and run index are byte-identical to the run that kept them in memory (the
    GPU backend in numba's CUDA simulator, whose host code overflows uint64 on purpose), and the spill
    folder is gone at the end. On the CPU the fuzzy stage then runs by exchanges (``fuzzy_exchange``)."""
    src = _corpus(tmp_path, n=docs)
    over = {**QUIET, "input.partition_bytes": partition_bytes, "fuzzy.threshold": 0.6, "run.backend": backend}
    kept = run([str(src)], tmp_path / "kept", overrides=over)
    spilled = run([str(src)], tmp_path / "spilled", overrides={**over, "run.memory_limit": 1,
                                                               "run.spill_dir": str(tmp_path / "spill")})
    assert kept["memory"]["spills"] == 0 and kept["stages"]["input"]["partitions"] >= 8
    memory = spilled["memory"]
    assert memory["limit"] == 1 and memory["spills"] > kept["stages"]["input"]["partitions"]
    assert memory["loads"] > 0 and memory["spilled_bytes"] > 0
    assert spilled["stages"]["fuzzy"]["duplicates"] == kept["stages"]["fuzzy"]["duplicates"] > 0
    assert spilled["stages"]["fuzzy"]["candidate_pairs"] == kept["stages"]["fuzzy"]["candidate_pairs"]
    assert spilled["stages"]["fuzzy"].get("lsh") == ("exchange" if backend == "cpu" else None)
    assert "lsh" not in kept["stages"]["fuzzy"]
    assert _files(tmp_path / "spilled") == _files(tmp_path / "kept") != {}
    assert _spill_folders(tmp_path / "spill") == []


def test_store_keeps_within_its_budget(tmp_path):
    store = spill.SpillStore(3000, tmp_path)
    values = [np.full(250, i, np.int64) for i in range(4)]  # 2,000 bytes each
    tasks = [store.keep(v) for v in values]
    assert store.memory_bytes <= 3000 and store.spills == 3  # each newer value pushed the older ones out
    folder = store.folder
    assert folder.parent == tmp_path and len(list(folder.iterdir())) == 3
    got = compute(tasks, 1)
    assert all(np.array_equal(g, v) for g, v in zip(got, values))
    # each value loaded pushes the least recently used out: dropped, its file still there (written once)
    assert store.loads == 4 and store.spills == 4  # every value written once
    assert not got[0].flags.writeable  # a value read back is frozen: changing it in place would be lost
    assert store.memory_bytes <= 3000 and store.peak_bytes <= 4000
    frame = pd.DataFrame({"a": np.arange(100), "s": [f"text {i}" for i in range(100)]})
    assert spill.nbytes_of({"f": frame, "x": (np.zeros(10), np.zeros(5, np.int32))}) > 800 + 100 * 8 + 100
    ids = np.array([f"document-{i:040d}" for i in range(1000)], dtype=object)  # the strings, not the pointers
    assert spill.nbytes_of(ids) > 1000 * 49 + ids.nbytes
    none = store.keep(None)  # a task's result may be None: it is kept like any other
    assert compute([none], 1) == [None] and store.spills == 4
    del tasks, got, none
    assert store.memory_bytes == 0 and list(folder.iterdir()) == []  # a value no task holds: memory and file gone
    store.close()
    assert not folder.exists()


def test_a_value_the_collector_frees_under_the_store_s_lock_does_not_block(tmp_path):
    """The cyclic garbage collector runs inside any allocation, also one made while a thread holds the store's
    lock (evicting, admitting): a kept value it frees there is counted out later, without waiting for that
    lock (this hung a run, its worker killed at the test timeout)."""
    import gc
    import threading
    store = spill.SpillStore(10_000, tmp_path)
    gc.disable()
    try:
        cycle = [store.keep(np.zeros(250, np.int64))]  # freed only by the cyclic collector
        cycle.append(cycle)
        del cycle
        assert store.memory_bytes == 2000

        def collect_under_the_lock():
            with store._lock:
                gc.collect()
        worker = threading.Thread(target=collect_under_the_lock, daemon=True)
        worker.start()
        worker.join(10)
        assert not worker.is_alive()
    finally:
        gc.enable()
    assert store.memory_bytes == 0
    kept = [store.keep(np.zeros(250, np.int64)) for _ in range(6)]  # ids of collected values may be reused
    assert store.memory_bytes <= 10_000 and store.spills == 1
    del kept
    assert store.memory_bytes == 0
    store.close()


def test_the_device_store_counts_values_the_collector_frees_in_another_thread():
    """The device's store (``device.arrays.SpillStore``) is told of a freed value by a weakref callback, in
    whichever thread freed it: the callback only queues it (its ``device_bytes -= n`` raced the admitting
    thread's ``+=``), and the next admit counts it out, before a new value can reuse its id."""
    import gc
    import threading
    from gpucurate.device.arrays import SpillStore as DeviceStore

    class Item:
        nbytes = 100

        def spill(self):
            store.release(self)
    store = DeviceStore()
    store.budget = 450
    gc.disable()
    try:
        held = [Item() for _ in range(4)]
        for item in held:
            store.admit(item)
        cycle = [held.pop()]  # freed only by the cyclic collector
        cycle.append(cycle)
        del cycle
        freer = threading.Thread(target=gc.collect)
        freer.start()
        freer.join()
        assert store.device_bytes == 400  # queued, not yet counted out
        more = [Item() for _ in range(2)]  # may take the freed one's id
        for item in more:
            store.admit(item)
        assert store.device_bytes == 400 and len(store._lru) == 4  # one of the oldest spilled for the budget
    finally:
        gc.enable()


def test_small_values_go_to_disk_after_the_large_ones(tmp_path, monkeypatch):
    """An exchange's many small pieces stay in memory while larger values can make room (a file per small
    piece costs more than its bytes); past that, they spill too, and the budget holds either way."""
    monkeypatch.setattr(spill, "SMALL_VALUE_BYTES", 1000)
    store = spill.SpillStore(5000, tmp_path)
    large = [store.keep(np.zeros(250, np.int64)) for _ in range(2)]  # 2,000 bytes each, the oldest
    small = [store.keep(np.zeros(50, np.int64)) for _ in range(4)]  # 400 bytes each
    assert store.spills == 1 and store.memory_bytes <= 5000  # the oldest large one made room
    small += [store.keep(np.zeros(50, np.int64)) for _ in range(6)]
    assert store.spills == 2  # the other large one went before any small one
    small += [store.keep(np.zeros(50, np.int64)) for _ in range(5)]
    assert store.spills == 5 and store.memory_bytes <= 5000  # then the three oldest small ones
    assert all(np.array_equal(v, np.zeros(len(v))) for v in compute(large + small, 1))
    store.close()


def test_stale_spill_folders_go_at_the_next_run(tmp_path):
    """A folder of a process that no longer runs is removed when the next store is made there; another
    live process's folder and unrelated folders stay."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f"gpucurate-spill-{spill._HOST}-{int(dead.stdout)}-abc123"
    live = tmp_path / f"gpucurate-spill-{spill._HOST}-{os.getppid()}-def456"
    other = tmp_path / "gpucurate-spill-notes"
    for folder in (stale, live, other):
        folder.mkdir()
        (folder / "1.pkl").write_bytes(b"x")
    spill.SpillStore(10, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name])


def test_sigkill_while_spilling_leaves_nothing_the_next_run_keeps(tmp_path):
    src = _corpus(tmp_path, n=300)
    args = ["run", "--input", str(src), "--output", str(tmp_path / "out"), "-q", "--no-progress",
            "--set", "semantic.enabled=false", "--set", "input.partition_bytes=2048", "--set", "run.memory_limit=1",
            "--set", f"run.spill_dir={tmp_path / 'spill'}"]
    code = f"import sys\nfrom gpucurate.cli import main\nsys.exit(main({args!r}))\n"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "GPUCURATE_FAILPOINT": "spilled"})
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert len(_spill_folders(tmp_path / "spill")) == 1
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert _spill_folders(tmp_path / "spill") == [] and (tmp_path / "out" / "_SUCCESS").exists()


def test_a_full_spill_disk_is_one_error_naming_the_folder(tmp_path, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(spill, "_write_value", full)
    store = spill.SpillStore(1, tmp_path)
    first = store.keep(np.zeros(10))  # noqa: F841 - held, so that the next value pushes it to the disk
    with pytest.raises(OutputError, match=r"gpucurate-spill-.*: cannot spill past run.memory_limit \(1 bytes\): "
                                          r"the disk is full; set run.spill_dir"):
        store.keep(np.ones(10))
    store.close()
    assert _spill_folders(tmp_path) == []


def test_a_spill_dir_that_cannot_be_made_keeps_the_previous_output(tmp_path, capsys):
    from gpucurate.cli import main
    src = _corpus(tmp_path, n=200)
    out = tmp_path / "out"
    args = ["run", "--input", str(src), "--output", str(out), "-q", "--no-progress", "--set", "semantic.enabled=false"]
    assert main(args) == 0
    before = _files(out)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code = main(args + ["--set", "output.overwrite=true", "--set", "run.memory_limit=1",
                        "--set", f"run.spill_dir={blocker / 'spill'}"])
    err = capsys.readouterr().err
    assert code == 1 and "cannot make a spill folder" in err and str(blocker / "spill") in err, err
    assert _files(out) == before


@pytest.mark.parametrize("value, expected", [(2_000_000_000, 2_000_000_000), ("2GB", 2 * 10**9),
                                             ("512MiB", 512 << 20), ("1.5 gb", 1_500_000_000), ("64kb", 64_000)])
def test_memory_limit_sizes(value, expected):
    assert load_config(None, {"run.memory_limit": value}).run.memory_limit == expected


@pytest.mark.parametrize("value", ["lots", "2 parsecs", 0, -5, True, "0MB"])
def test_bad_memory_limit_names_the_key(value):
    with pytest.raises(ConfigError, match="run.memory_limit"):
        load_config(None, {"run.memory_limit": value})


def _concat_bucket(pieces) -> np.ndarray:
    return np.concatenate([p[0] for p in pieces])


def _split_mod(values: np.ndarray, n_buckets: int) -> tuple:
    from gpucurate.engine.shuffle import by_bucket
    return by_bucket(values % n_buckets, n_buckets, values)


def test_exchange_pieces_spill_and_come_back(tmp_path):
    """An exchange's pieces are kept by the store as each split finishes: past the budget each goes to disk
    and comes back to its bucket task, with the buckets unchanged."""
    from gpucurate.engine.executor import Executor
    from gpucurate.engine.shuffle import exchange
    from gpucurate.engine.tasks import delayed
    inputs = [(np.arange(p * 100, p * 100 + 100, dtype=np.int64),) for p in range(4)]
    got = {}
    for limit in (None, 1):
        with Executor(workers=2, progress=False, memory_limit=limit, spill_dir=tmp_path) as executor:
            pieces = exchange(executor, _split_mod, inputs, 3)
            got[limit] = executor.compute([delayed(_concat_bucket)(pieces[b]) for b in range(3)], "buckets")
            got[limit, "spills"] = executor.store.spills
    assert got[None, "spills"] == 0 and got[1, "spills"] >= 4 * 3 - 1  # all but the newest piece
    for b in range(3):
        assert np.array_equal(got[1][b], got[None][b])
        assert np.array_equal(got[None][b], np.sort(np.arange(400)[np.arange(400) % 3 == b]))
    assert _spill_folders(tmp_path) == []


def test_the_fuzzy_exchanges_do_not_depend_on_the_partitions(tmp_path):
    """The fuzzy stage by exchanges (a budget under its shingle sets) gives the driver path's annotations
    and edges at other partitionings too."""
    from conftest import read_annotations
    import pyarrow.parquet as pq
    src = _corpus(tmp_path, n=600, seed=5)
    over = {**QUIET, "fuzzy.threshold": 0.6}
    run([str(src)], tmp_path / "driver", overrides=over)
    for size in (3000, 20000):
        out = tmp_path / f"exchange-{size}"
        summary = run([str(src)], out, overrides={**over, "input.partition_bytes": size, "run.memory_limit": "100kB"})
        assert summary["stages"]["fuzzy"]["lsh"] == "exchange"
        pd.testing.assert_frame_equal(read_annotations(out), read_annotations(tmp_path / "driver"))
        assert pq.read_table(out / "edges.parquet").equals(pq.read_table(tmp_path / "driver" / "edges.parquet"))


def test_the_read_pass_sketches_once_and_keeps_no_text_that_nothing_reads(tmp_path, monkeypatch):
    """On this process's threads the read pass makes the fuzzy stage's sketches, kept apart from the states:
    the stage sketches nothing again, on the driver path as by exchanges (chosen by what they hold), with the
    same output. The normalized texts are not kept then, unless a later stage reads them (here the
    paragraph stage)."""
    import pyarrow.parquet as pq
    import gpucurate.workflows.run as pipeline
    from gpucurate.stages import fuzzy

    def sketched_again(*args, **kwargs):
        raise AssertionError("the fuzzy stage sketched the texts again")
    monkeypatch.setattr(fuzzy, "signature_partition", sketched_again)
    kept_texts = []
    original = pipeline._sketches_apart

    def recorded(df, texts_later):
        out = original(df, texts_later)
        kept_texts.append("_text" in out[0].columns)
        return out
    monkeypatch.setattr(pipeline, "_sketches_apart", recorded)
    src = _corpus(tmp_path, n=600, seed=5)
    over = {**QUIET, "fuzzy.threshold": 0.6, "input.partition_bytes": 3000}
    driver = run([str(src)], tmp_path / "driver", overrides=over)
    exchange = run([str(src)], tmp_path / "exchange", overrides={**over, "run.memory_limit": "100kB"})
    assert "lsh" not in driver["stages"]["fuzzy"] and exchange["stages"]["fuzzy"]["lsh"] == "exchange"
    assert driver["stages"]["fuzzy"]["duplicates"] > 0
    assert _files(tmp_path / "exchange") == _files(tmp_path / "driver")
    assert len(kept_texts) == 2 * driver["stages"]["input"]["partitions"] and not any(kept_texts)
    kept_texts.clear()
    paragraphs = run([str(src)], tmp_path / "paragraphs", overrides={**over, "paragraphs.enabled": True})
    assert kept_texts and all(kept_texts)
    assert pq.read_table(tmp_path / "paragraphs" / "edges.parquet").equals(
        pq.read_table(tmp_path / "driver" / "edges.parquet"))
    assert paragraphs["stages"]["fuzzy"]["duplicates"] == driver["stages"]["fuzzy"]["duplicates"]


def test_the_budget_is_shared_with_the_running_tasks_and_caches(monkeypatch):
    """``run.memory_limit`` counts the tasks running at once (``WORKING_BYTES_PER_INPUT_BYTE`` x a partition's
    bytes each, up to half of it) and what a cache sets aside; the kept values get the rest."""
    from gpucurate.engine.executor import Executor
    from gpucurate.engine.spill import WORKING_BYTES_PER_INPUT_BYTE as per_byte
    monkeypatch.setattr(spill, "_mallopt", None)  # the allocator keeps nothing (a CLI run in this process tuned it)
    with Executor(workers=2, progress=False, memory_limit=1000, partition_bytes=10) as executor:
        assert executor.memory_limit == 1000 and executor.store.budget == 1000 - 2 * per_byte * 10
        budget = executor.store.budget
        assert executor.store.set_aside(200) == 200 and executor.store.budget == budget - 200
    with Executor(workers=2, progress=False, memory_limit=1000, partition_bytes=100) as executor:
        assert executor.store.budget == 500


def test_freed_memory_the_allocator_keeps_is_taken_out_of_the_budget(monkeypatch):
    """A local executor lets glibc keep freed memory (256 MB at the top of its heaps, from heap arrays up to
    32 MB, under a budget of ``ALLOCATOR_CACHE_FROM`` or more, and as much again set aside for the holes
    between live arrays; an eighth of a smaller budget, from arrays up to a sixty-fourth of it), and the
    kept values' budget is that much smaller; only where the CLI tuned the allocator."""
    from gpucurate.engine.executor import Executor
    calls = []
    monkeypatch.setattr(spill, "_mallopt", lambda option, value: calls.append((option, value)))
    budgets = {}
    for limit in (1 << 30, spill.ALLOCATOR_CACHE_FROM, 8 << 20):
        with Executor(workers=1, progress=False, memory_limit=limit) as executor:
            budgets[limit] = executor.store.budget
    assert calls == [(-3, 16 << 20), (-1, 128 << 20), (-3, 32 << 20), (-1, 256 << 20), (-3, 256 << 10), (-1, 1 << 20)]
    monkeypatch.setattr(spill, "_mallopt", None)
    for limit, kept in ((1 << 30, 128 << 20), (spill.ALLOCATOR_CACHE_FROM, 512 << 20)):
        with Executor(workers=1, progress=False, memory_limit=limit) as executor:
            assert executor.store.budget == budgets[limit] + kept  # not tuned (a library call): nothing kept


@pytest.mark.parametrize("n_parts", [1, 5, 13])
def test_components_by_exchanges_equal_the_union_find(tmp_path, n_parts, monkeypatch):
    """Min-label propagation by the engine's exchanges, every piece on disk (a 1-byte budget): the same
    components as the union-find on a graph with a long chain (several pointer-jumping rounds), edges
    below the threshold left out, isolated rows, and rows partitioned unevenly, with the nodes in one range
    or in ranges of partitions; each label is the smallest row of its component."""
    from gpucurate.kernels.pairs import components as union_find
    from gpucurate.stages import components
    from gpucurate.engine.executor import Executor
    from gpucurate.engine.tasks import value
    rng = np.random.default_rng(n_parts)
    n = 2_000
    chain = rng.permutation(n)[:500]  # one path of 500 rows in random order: diameter 499
    i = np.concatenate([chain[:-1], rng.integers(0, n, 700)])
    j = np.concatenate([chain[1:], rng.integers(0, n, 700)])
    score = np.concatenate([np.ones(len(chain) - 1), rng.random(700)])
    keep = i != j
    i, j, score = np.minimum(i, j)[keep], np.maximum(i, j)[keep], score[keep]
    above = score >= 0.5
    mins = pd.Series(np.arange(n)).groupby(union_find(n, i[above], j[above])).transform("min").to_numpy()
    offsets = np.unique(np.r_[0, np.sort(rng.integers(0, n, n_parts - 1)), n])
    order = np.lexsort((j, i))
    i, j, score, above = i[order], j[order], score[order], above[order]
    cuts = np.searchsorted(i, offsets)
    with Executor(workers=2, progress=False, memory_limit=1, spill_dir=tmp_path) as executor:
        frames = [value(pd.DataFrame({"i": i[a:b], "j": j[a:b], "score": score[a:b]}))
                  for a, b in zip(cuts[:-1], cuts[1:])]
        for entries_per_range in (10**9, 300):  # the nodes in one range, in ranges of partitions
            monkeypatch.setattr(components, "ENTRIES_PER_RANGE", entries_per_range)
            bounds = components.node_ranges(offsets, len(i))
            assert len(bounds) - 1 == (1 if entries_per_range > 10**6 else min(n_parts, -(-2 * len(i) // 300)))
            states, n_edges = components.exchange_components(frames, 0.5, bounds, executor)
            assert n_edges == above.sum()
            pieces = executor.compute([p[0] for p in components.label_pieces(states, bounds, offsets)], "labels")
            assert executor.store.summary()["spills"] > 0
            got = np.arange(n)
            for p, (nodes, labels) in enumerate(pieces):
                assert np.all((nodes >= offsets[p]) & (nodes < offsets[p + 1]))
                got[nodes] = labels
            assert set(np.concatenate([p[0] for p in pieces])) == set(i[above]) | set(j[above])
            assert np.array_equal(got, mins)


@pytest.mark.parametrize("task_bytes", [1, 40_000, 10**9])
def test_verification_blocks_score_every_pair_whatever_their_size(task_bytes):
    """``KeptSets`` scores each partition's distinct pairs against the kept sets, a block of partitions per
    task (one partition, a few, all), streaming the other partitions' sets through, every set on disk (a
    1-byte budget): the scores of one CSR of all the sets, each partition's frame sorted by ``(i, j)``."""
    from types import SimpleNamespace
    from gpucurate.engine.executor import Executor
    from gpucurate.engine.tasks import value
    from gpucurate.kernels.pairs import jaccard_between, jaccard_pairs
    from gpucurate.stages.fuzzy_exchange import KeptSets, verify_blocks
    rng = np.random.default_rng(7)
    offsets = np.array([0, 40, 41, 120, 200, 260], np.int64)  # partition 1 holds one row
    n = int(offsets[-1])
    lengths = rng.integers(0, 30, n)
    csr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    values = np.concatenate([np.sort(rng.choice(60, k, replace=False)) for k in lengths]).astype(np.uint64)
    pi, pj = rng.integers(0, n, 3000), rng.integers(0, n, 3000)
    keep = pi != pj
    pi, pj = pi[keep], pj[keep]
    with Executor(workers=2, progress=False, memory_limit=1) as executor:
        executor.task_bytes = task_bytes
        sets, nbytes = [], []
        for p in range(len(offsets) - 1):
            rows = np.arange(offsets[p], offsets[p + 1])
            part = {"index": np.arange(len(rows)), "offsets": csr[rows[0]:rows[-1] + 2] - csr[rows[0]],
                    "values": values[csr[rows[0]]:csr[rows[-1] + 1]]}
            sets.append(executor.store.keep(part))
            nbytes.append(sum(a.nbytes for a in part.values()))
        owner = np.searchsorted(offsets, pi, side="right") - 1
        frames = [value(pd.DataFrame({"i": pi[owner == q], "j": pj[owner == q]})) for q in range(len(offsets) - 1)]
        table = SimpleNamespace(part_offsets=offsets)
        got = executor.compute(KeptSets(sets, nbytes, jaccard_between).scored(table, executor, frames), "test")
        assert executor.store.spilled_bytes > 0
        blocks = verify_blocks(nbytes, task_bytes // 2)
    fewest, most = {1: (5, 5), 40_000: (2, 4), 10**9: (1, 1)}[task_bytes]  # partitions of one, a few, all
    assert fewest <= len(blocks) <= most
    assert [b for block in blocks for b in range(*block)] == list(range(5))
    for q, frame in enumerate(got):
        distinct = np.unique((pi[owner == q].astype(np.uint64) << np.uint64(32)) | pj[owner == q].astype(np.uint64))
        i, j = (distinct >> np.uint64(32)).astype(np.int64), (distinct & np.uint64(0xFFFFFFFF)).astype(np.int64)
        assert np.array_equal(frame["i"].to_numpy(), i) and np.array_equal(frame["j"].to_numpy(), j)
        assert np.array_equal(frame["score"].to_numpy(), jaccard_pairs(csr, values, i, j))


def test_the_summary_gives_each_stage_s_peak_memory(tmp_path):
    """``summary.json``'s ``memory.stages``: per stage, the peak of the kept values (counted) and of the
    process's resident memory (sampled), against the budget."""
    src = _corpus(tmp_path, n=600, seed=3)
    summary = run([str(src)], tmp_path / "out", overrides={**QUIET, "run.memory_limit": "100kB",
                                                          "input.partition_bytes": 5000})
    memory = summary["memory"]
    stages = memory["stages"]
    assert {"plan", "read+normalize", "exact", "fuzzy", "annotate", "write"} <= set(stages)
    assert max(s["peak_kept_bytes"] for s in stages.values()) == memory["peak_kept_bytes"] > 0
    assert stages["plan"]["peak_kept_bytes"] == 0
    assert all(s["peak_rss_bytes"] > 50 << 20 for s in stages.values())  # the interpreter and its libraries
