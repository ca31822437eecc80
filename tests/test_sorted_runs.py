"""The on-disk sorted runs of the ingest state's index: lookups and merges against plain NumPy."""

import numpy as np
import pytest

from gpucurate.io import sorted_runs
from gpucurate.io.sorted_runs import SortedRuns, aranges, merge_runs, write_run

VALUE = np.dtype([("item", np.int64), ("score", np.float32)])


def _entries(rng, n, key_space):
    keys = rng.integers(0, key_space, n).astype(np.uint64)
    keys[: n // 10] = np.uint64(2**64 - 1)  # a big bucket at the top of the key space
    values = np.zeros(n, VALUE)
    values["item"] = rng.integers(0, 1 << 40, n)
    values["score"] = rng.random(n)
    return keys, values


def _runs(tmp_path, rng, sizes, key_space):
    runs, all_keys, all_values = [], [], []
    for i, n in enumerate(sizes):
        keys, values = _entries(rng, n, key_space)
        runs.append(write_run(tmp_path / f"run{i}", keys, values))
        order = np.argsort(keys, kind="stable")
        all_keys.append(keys[order])
        all_values.append(values[order])
    return runs, all_keys, all_values


@pytest.mark.parametrize("key_space", [50, 10**6, 2**63])
def test_find_and_positions_match_numpy(tmp_path, monkeypatch, key_space):
    monkeypatch.setattr(sorted_runs, "LOOKUP_KEYS", 50)  # lookups in several pieces
    rng = np.random.default_rng(key_space % 1000)
    runs, run_keys, run_values = _runs(tmp_path, rng, [0, 5000, 1, 1234], key_space)
    index = SortedRuns(runs, VALUE)
    asked = np.unique(np.concatenate([rng.integers(0, key_space, 300).astype(np.uint64), run_keys[1][::97],
                                      np.array([0, 2**64 - 1], np.uint64)]))
    rng.shuffle(asked)
    for run, keys in zip(runs, run_keys):
        sorted_asked = np.sort(asked)
        for side in ("left", "right"):
            assert np.array_equal(index.positions(run, sorted_asked, side), np.searchsorted(keys, sorted_asked, side))
    which, run_of, values = index.find(asked)
    expected = [(w, r, v["item"]) for w in np.argsort(asked, kind="stable") for r in range(len(runs))
                for v in run_values[r][run_keys[r] == asked[w]]]
    assert [(int(a), int(b), int(c["item"])) for a, b, c in zip(which, run_of, values)] == \
        [(int(a), int(b), int(c)) for a, b, c in expected]
    assert len(index) == sum(len(k) for k in run_keys)


def test_find_rejects_repeated_keys(tmp_path):
    run = write_run(tmp_path / "r", np.arange(10, dtype=np.uint64), np.zeros(10, VALUE))
    with pytest.raises(ValueError):
        SortedRuns([run], VALUE).find(np.array([3, 3], np.uint64))


def test_latest_takes_the_newest_run(tmp_path):
    old = write_run(tmp_path / "old", np.array([1, 2, 3], np.uint64), np.array([10, 20, 30], np.int64))
    new = write_run(tmp_path / "new", np.array([2, 4], np.uint64), np.array([21, 41], np.int64))
    found, values = SortedRuns([old, new], np.int64).latest(np.array([4, 2, 9, 1], np.uint64))
    assert found.tolist() == [True, True, False, True]
    assert values.tolist() == [41, 21, 0, 10]


@pytest.mark.parametrize("latest", [False, True])
def test_merge_equals_a_stable_sort_of_all_runs(tmp_path, monkeypatch, latest):
    monkeypatch.setattr(sorted_runs, "BLOCK", 16)  # many fence keys, so many merge ranges
    monkeypatch.setattr(sorted_runs, "LOOKUP_KEYS", 7)  # lookups in many pieces
    rng = np.random.default_rng(7)
    runs, run_keys, run_values = _runs(tmp_path, rng, [3000, 0, 700, 4100], 5000)
    merged = merge_runs(runs, VALUE, tmp_path / "merged", latest=latest, max_entries=256)
    keys, values = np.concatenate(run_keys), np.concatenate(run_values)
    order = np.argsort(keys, kind="stable")
    keys, values = keys[order], values[order]
    if latest:
        last = np.r_[keys[1:] != keys[:-1], True]
        keys, values = keys[last], values[last]
    assert merged.count == len(keys)
    assert np.array_equal(np.fromfile(merged.file("keys"), np.uint64), keys)
    assert np.array_equal(np.fromfile(merged.file("values"), VALUE), values)
    assert np.array_equal(np.fromfile(merged.file("fence"), np.uint64), keys[::16])
    which, _, found = SortedRuns([merged], VALUE).find(np.array([keys[5]], np.uint64))
    assert np.array_equal(found, values[keys == keys[5]])


def test_aranges():
    starts, lengths = np.array([5, 0, 9, 2]), np.array([3, 0, 1, 2])
    assert aranges(starts, lengths).tolist() == [5, 6, 7, 9, 2, 3]
    assert aranges(np.array([], np.int64), np.array([], np.int64)).tolist() == []


@pytest.mark.parametrize("max_bucket,anchors", [(1000, 8), (6, 2), (3, 1), (2, 0)])
def test_stored_bucket_pairs_are_a_full_runs_pairs_with_a_new_item(tmp_path, max_bucket, anchors):
    """Batches of items joining stored LSH buckets: the pairs found through the index are exactly the
    candidate pairs of one ``candidate_pairs`` over every item that involve a new one, whatever the
    buckets' sizes before and after (small, crossing ``max_bucket``, large)."""
    from gpucurate.kernels.pairs import candidate_pairs
    from gpucurate.workflows.lsh_index import ITEM, bucket_entries, stored_bucket_pairs
    rng = np.random.default_rng(max_bucket)
    bands = 3
    all_keys = np.empty((0, bands), np.uint64)
    shingles = np.empty(0, bool)
    runs = []
    for batch, size in enumerate([40, 1, 25, 60, 30]):
        # few distinct keys per band: buckets of every size; some items without shingles (no keys)
        new_keys = (rng.integers(0, 12, (size, bands)) + np.arange(bands) * 100).astype(np.uint64)
        new_shingles = rng.random(size) > 0.1
        first_new = len(all_keys)
        keys, items = bucket_entries(new_keys, first_new, new_shingles)
        pi, pj = stored_bucket_pairs(SortedRuns(runs, ITEM), keys, items, max_bucket, anchors)
        all_keys = np.concatenate([all_keys, new_keys])
        shingles = np.concatenate([shingles, new_shingles])
        some = np.flatnonzero(shingles)
        fi, fj = candidate_pairs(all_keys[some], max_bucket, anchors)
        fi, fj = some[fi], some[fj]
        new = fj >= first_new
        assert np.array_equal(pi, fi[new]) and np.array_equal(pj, fj[new]), batch
        runs.append(write_run(tmp_path / f"bands{batch}", keys, items))
        if batch == 3:  # a compaction in between changes nothing
            runs = [merge_runs(runs, ITEM, tmp_path / "merged")]


@pytest.mark.parametrize("bits", [10, 1, 0])
def test_bloom_filters_skip_absent_keys_and_never_hide_present_ones(tmp_path, monkeypatch, bits):
    """Each run's Bloom filter: no key of the run is ever ruled out, about 1% of absent keys pass at 10 bits
    per entry, and a filter so small that most absent keys pass (or none) changes no answer."""
    monkeypatch.setattr(sorted_runs, "BLOOM_BITS", bits)
    rng = np.random.default_rng(bits)
    keys = rng.integers(0, 2**63, 20000).astype(np.uint64)
    run = write_run(tmp_path / "r", keys, np.arange(len(keys), dtype=np.int64))
    index = SortedRuns([run], np.int64)
    assert run.file("bloom").is_file() == (bits > 0)
    assert index.maybe(run, np.sort(keys)).all()  # the whole filter read at once
    assert index.maybe(run, np.sort(keys[:10])).all()  # only the blocks of these keys read
    absent = np.sort(rng.integers(0, 2**63, 20000).astype(np.uint64))
    passed = index.maybe(run, absent).mean()
    if bits == 10:
        assert passed < 0.03
    asked = np.concatenate([keys[:500], absent[:500]])
    which, _, values = index.find(asked)
    assert sorted(which.tolist()) == list(range(500)) and np.array_equal(np.sort(values), np.arange(500))
    lo, hi = index.bounds(run, np.sort(asked), present=True)
    assert int((hi - lo).sum()) == 500
