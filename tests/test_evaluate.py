"""Tests of gpucurate.review.evaluate: the exact join must equal brute force; metrics are hand-checked."""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest

from gpucurate.review.evaluate import (
    brute_force_pairs,
    cluster_metrics,
    connected_components,
    exact_similar_pairs,
    jaccard_of_pairs,
)

THRESHOLDS = [0.5, 0.55, 0.6, 2 / 3, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0]


def to_csr(sets):
    """CSR (offsets int64, values uint64) of an iterable of integer sets, each sorted and unique."""
    rows = [np.unique(np.asarray(list(s), dtype=np.uint64)) for s in sets]
    offsets = np.zeros(len(rows) + 1, np.int64)
    offsets[1:] = np.cumsum([len(r) for r in rows])
    values = np.concatenate(rows) if rows else np.empty(0, np.uint64)
    return offsets, values.astype(np.uint64)


def zipf_tokens(rng, size, vocab, a=1.0):
    """Ranks in [0, vocab) with a Zipf-like (power-law) frequency, via the inverse CDF."""
    u = rng.random(size)
    if a == 1.0:
        return np.floor(np.exp(u * np.log(vocab))).astype(np.int64) - 1
    e = 1.0 - a
    return np.floor(((vocab ** e - 1) * u + 1) ** (1 / e)).astype(np.int64) - 1


def random_sets(rng, n, vocab, max_len, copy_prob=0.4):
    """Random sets, many of them edited copies of earlier ones (near the threshold boundaries)."""
    sets = []
    for _ in range(n):
        if sets and rng.random() < copy_prob:
            s = set(sets[rng.integers(len(sets))])
            for _ in range(rng.integers(0, 3)):  # a few single-token edits
                if s and rng.random() < 0.5:
                    s.discard(sorted(s)[rng.integers(len(s))])
                else:
                    s.add(int(rng.integers(vocab)))
        else:
            s = set(zipf_tokens(rng, int(rng.integers(0, max_len + 1)), vocab).tolist())
        sets.append(sorted(s))
    return sets


def assert_same(got, want):
    for g, w, name in zip(got, want, ("i", "j", "jaccard")):
        assert g.dtype == w.dtype, name
        np.testing.assert_array_equal(g, w, err_msg=name)


# ---------------------------------------------------------------------------------------------------
# exact_similar_pairs == brute_force_pairs
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(12))
def test_exact_matches_brute_force_random(seed):
    rng = np.random.default_rng(seed)
    for _ in range(10):
        n = int(rng.integers(2, 60))
        sets = random_sets(rng, n, vocab=int(rng.integers(3, 60)), max_len=int(rng.integers(1, 15)))
        offsets, values = to_csr(sets)
        for t in THRESHOLDS + [float(rng.uniform(0.05, 1.0))]:
            want = brute_force_pairs(offsets, values, t)
            assert_same(exact_similar_pairs(offsets, values, t, n_jobs=int(rng.integers(1, 3))), want)


@pytest.mark.parametrize("threshold", [0.5, 0.6, 0.7, 0.8, 0.9, 1.0])
def test_exact_matches_brute_force_dense(threshold):
    # A small Zipf vocabulary makes prefixes collide a lot, exercising every filter.
    rng = np.random.default_rng(123)
    offsets, values = to_csr(random_sets(rng, 1200, vocab=400, max_len=60, copy_prob=0.5))
    want = brute_force_pairs(offsets, values, threshold)
    assert len(want[0]) > 50
    assert_same(exact_similar_pairs(offsets, values, threshold), want)


def test_boundary_pairs_decided_like_float_division():
    base = list(range(100, 104))
    sets = [
        base,                      # 0
        base + [200],              # 1: J(0,1) = 4/5 = 0.8 exactly
        base[:3] + [300, 301],     # 2: J(0,2) = 3/6 = 0.5, J(1,2) = 3/7
        list(range(10)),           # 3
        list(range(7)),            # 4: J(3,4) = 7/10
        list(range(2)),            # 5: J(4,5) = 2/7, J(3,5) = 2/10
        list(range(3)),            # 6: J(5,6) = 2/3, J(4,6) = 3/7, J(3,6) = 3/10
    ]
    offsets, values = to_csr(sets)
    for t, expected in [
        (0.8, {(0, 1)}),
        (np.nextafter(0.8, 1.0), set()),
        (0.7, {(0, 1), (3, 4)}),
        (0.1 * 7, {(0, 1)}),  # 0.7000000000000001 > 7 / 10 in float64
        (2 / 3, {(0, 1), (3, 4), (5, 6)}),
        (0.5, {(0, 1), (0, 2), (3, 4), (5, 6)}),
        (0.2, {(0, 1), (0, 2), (1, 2), (3, 4), (3, 5), (3, 6), (4, 5), (4, 6), (5, 6)}),
    ]:
        got = exact_similar_pairs(offsets, values, t)
        assert_same(got, brute_force_pairs(offsets, values, t))
        assert set(zip(got[0].tolist(), got[1].tolist())) == expected, t
    i, j, s = exact_similar_pairs(offsets, values, 0.5)
    assert s.tolist() == [4 / 5, 3 / 6, 7 / 10, 2 / 3]


def test_empty_identical_and_singleton_sets():
    sets = [[], [5], [5], [], [6], [1, 2, 3], [1, 2, 3], [1, 2, 3], [], [7]]
    offsets, values = to_csr(sets)
    i, j, s = exact_similar_pairs(offsets, values, 1.0)
    assert list(zip(i.tolist(), j.tolist())) == [(1, 2), (5, 6), (5, 7), (6, 7)]
    np.testing.assert_array_equal(s, 1.0)
    for t in THRESHOLDS:
        assert_same(exact_similar_pairs(offsets, values, t), brute_force_pairs(offsets, values, t))
    # all-empty, single-document and no-document inputs
    for sets in ([[], [], []], [[1, 2]], []):
        offsets, values = to_csr(sets)
        i, j, s = exact_similar_pairs(offsets, values, 0.5)
        assert len(i) == len(j) == len(s) == 0
        assert (i.dtype, j.dtype, s.dtype) == (np.int64, np.int64, np.float64)


def test_output_sorted_unique_and_threads_agree():
    rng = np.random.default_rng(7)
    offsets, values = to_csr(random_sets(rng, 3000, vocab=2000, max_len=40, copy_prob=0.6))
    one = exact_similar_pairs(offsets, values, 0.6, n_jobs=1)
    many = exact_similar_pairs(offsets, values, 0.6, n_jobs=4)
    assert_same(many, one)
    i, j, s = one
    assert np.all(i < j)
    key = i * len(offsets) + j
    assert np.all(np.diff(key) > 0)  # sorted by (i, j), no duplicates
    np.testing.assert_array_equal(s, jaccard_of_pairs(offsets, values, i, j))
    assert np.all(s >= 0.6)


def test_wide_key_path_matches(monkeypatch):
    # inputs over 2**31 shingles use int64 keys and per-row sorts; force that path on a small input
    import gpucurate.review.evaluate as ev

    rng = np.random.default_rng(9)
    offsets, values = to_csr(random_sets(rng, 400, vocab=300, max_len=40, copy_prob=0.5))
    monkeypatch.setattr(ev, "_PACK_LIMIT", 0)
    for t in (0.5, 0.8, 1.0):
        assert_same(exact_similar_pairs(offsets, values, t), brute_force_pairs(offsets, values, t))


def test_input_validation():
    offsets, values = to_csr([[1, 2], [2, 3]])
    for bad in (0.0, -0.1, 1.5, float("nan")):
        with pytest.raises(ValueError):
            exact_similar_pairs(offsets, values, bad)
    with pytest.raises(ValueError):  # unsorted
        exact_similar_pairs(offsets, np.array([2, 1, 2, 3], np.uint64), 0.5)
    with pytest.raises(ValueError):  # duplicate inside a set
        brute_force_pairs(offsets, np.array([1, 1, 2, 3], np.uint64), 0.5)
    with pytest.raises(ValueError):  # offsets do not cover values
        exact_similar_pairs(np.array([0, 2, 3]), values, 0.5)
    with pytest.raises(ValueError):
        jaccard_of_pairs(offsets, values, [0], [2])


@functools.lru_cache(maxsize=2)
def planted_corpus(n_docs, seed):
    """Zipf-token documents (~100 tokens), about a third in families of edited near-copies."""
    rng = np.random.default_rng(seed)
    vocab = 200_000
    sets, family = [], []
    n_fam = 0
    while len(sets) < n_docs:
        base = set(zipf_tokens(rng, int(rng.integers(60, 140)), vocab, a=1.1).tolist())
        copies = [base]
        if rng.random() < 0.15:  # a family: copies with a few token edits each
            for _ in range(int(rng.integers(1, 5))):
                s = set(copies[rng.integers(len(copies))])
                for tok in rng.choice(sorted(s), size=int(rng.integers(0, 12)), replace=False):
                    s.discard(int(tok))
                s.update(zipf_tokens(rng, int(rng.integers(0, 12)), vocab, a=1.1).tolist())
                copies.append(s)
        for s in copies:
            sets.append(sorted(s))
            family.append(n_fam)
        n_fam += 1
    return tuple(sets[:n_docs]), np.asarray(family[:n_docs])


@functools.lru_cache(maxsize=2)
def planted_csr(n_docs, seed):
    return to_csr(planted_corpus(n_docs, seed)[0])


@pytest.mark.parametrize("threshold", [0.5, 0.8])
def test_exact_on_20k_documents(threshold):
    sets, family = planted_corpus(20_000, seed=11)
    offsets, values = planted_csr(20_000, seed=11)
    i, j, s = exact_similar_pairs(offsets, values, threshold)
    np.testing.assert_array_equal(s, jaccard_of_pairs(offsets, values, i, j))

    # Brute force on a subsample of whole families plus random documents: a pair's result depends
    # only on its two sets, so the full run restricted to the subsample must match exactly.
    rng = np.random.default_rng(5)
    fams = np.unique(family[np.bincount(family)[family] >= 2])
    keep = np.isin(family, rng.choice(fams, size=min(200, fams.size), replace=False))
    keep[rng.choice(len(sets), size=1000, replace=False)] = True
    sub = np.flatnonzero(keep)
    sub_offsets, sub_values = to_csr([sets[d] for d in sub])
    bi, bj, bs = brute_force_pairs(sub_offsets, sub_values, threshold)
    assert len(bi) > 50
    pos = np.full(len(sets), -1)
    pos[sub] = np.arange(sub.size)
    inside = keep[i] & keep[j]
    assert_same((pos[i[inside]], pos[j[inside]], s[inside]), (bi, bj, bs))

    # every planted pair that reaches the threshold is found
    pi, pj = [], []
    for f in fams:
        members = np.flatnonzero(family == f)
        for a, b in itertools.combinations(members.tolist(), 2):
            pi.append(a)
            pj.append(b)
    pi, pj = np.asarray(pi), np.asarray(pj)
    pj_sim = jaccard_of_pairs(offsets, values, pi, pj)
    found = set(zip(i.tolist(), j.tolist()))
    planted_hits = {(a, b) for a, b, x in zip(pi.tolist(), pj.tolist(), pj_sim) if x >= threshold}
    assert planted_hits and planted_hits <= found


# ---------------------------------------------------------------------------------------------------
# jaccard_of_pairs, connected_components
# ---------------------------------------------------------------------------------------------------


def test_jaccard_of_pairs_hand_examples():
    offsets, values = to_csr([[1, 2, 3], [2, 3, 4], [], [1, 2, 3], [10], []])
    got = jaccard_of_pairs(offsets, values, [0, 0, 0, 1, 2, 4, 3], [1, 3, 2, 4, 5, 4, 1])
    np.testing.assert_array_equal(got, [0.5, 1.0, 0.0, 0.0, 0.0, 1.0, 0.5])
    assert got.dtype == np.float64
    assert jaccard_of_pairs(offsets, values, [], []).shape == (0,)


def test_connected_components_hand_examples():
    np.testing.assert_array_equal(connected_components(6, [0, 1, 4], [1, 2, 5]), [0, 0, 0, 3, 4, 4])
    # label is the smallest member whatever the edge order and direction
    np.testing.assert_array_equal(
        connected_components(7, [6, 5, 3, 2, 2], [5, 3, 1, 2, 4]), [0, 1, 2, 1, 2, 1, 1])
    np.testing.assert_array_equal(connected_components(4, [], []), [0, 1, 2, 3])
    assert connected_components(0, [], []).shape == (0,)
    labels = connected_components(5, np.array([4, 3, 2, 1]), np.array([3, 2, 1, 0]))
    assert labels.dtype == np.int64 and labels.tolist() == [0] * 5
    with pytest.raises(ValueError):
        connected_components(3, [0], [3])


# ---------------------------------------------------------------------------------------------------
# cluster_metrics
# ---------------------------------------------------------------------------------------------------

# truth: components {0, 1, 2} (a chain: 0-2 is not an edge), {3, 4}, singletons 5, 6
TRUE_I = np.array([0, 1, 3])
TRUE_J = np.array([1, 2, 4])


def test_metrics_perfect_prediction():
    m = cluster_metrics(np.array([7, 7, 7, -2, -2, 10**12, 3]), TRUE_I, TRUE_J, 7)
    assert m["pair_precision"] == m["pair_recall"] == m["pair_f1"] == m["edge_recall"] == 1.0
    assert m["false_merges"] == m["false_merge_pairs"] == m["missed_merges"] == 0
    assert m["true_edges"] == 3 and m["true_pairs"] == 4 and m["pred_pairs"] == 4
    assert m["pred_clusters"] == m["true_clusters"] == 2 and m["n_docs"] == 7


def test_metrics_false_merge():
    # the two true clusters predicted as one: one false merge, 6 wrong pairs
    m = cluster_metrics(np.array([0, 0, 0, 0, 0, 5, 6]), TRUE_I, TRUE_J, 7)
    assert m["false_merges"] == 1 and m["false_merge_pairs"] == 10 - 4
    assert m["missed_merges"] == 0
    assert m["pair_precision"] == pytest.approx(0.4) and m["pair_recall"] == 1.0
    assert m["pair_f1"] == pytest.approx(2 * 0.4 / 1.4)
    assert m["pred_clusters"] == 1 and m["true_clusters"] == 2
    # absorbing a true singleton is a false merge too
    m = cluster_metrics(np.array([0, 0, 0, 1, 1, 1, 6]), TRUE_I, TRUE_J, 7)
    assert m["false_merges"] == 1 and m["false_merge_pairs"] == 2


def test_metrics_split():
    # {0, 1, 2} split into {0, 1} and {2}: one missed merge, edge 1-2 lost
    m = cluster_metrics(np.array([0, 0, 2, 3, 3, 5, 6]), TRUE_I, TRUE_J, 7)
    assert m["missed_merges"] == 1 and m["missed_merge_pairs"] == 2
    assert m["false_merges"] == 0 and m["false_merge_pairs"] == 0
    assert m["pair_precision"] == 1.0 and m["pair_recall"] == 0.5
    assert m["edge_recall"] == pytest.approx(2 / 3)
    assert m["true_positive_pairs"] == 2


def test_metrics_degenerate_cases():
    m = cluster_metrics(np.arange(4), [], [], 4)  # nothing to find, nothing predicted
    assert m["pair_precision"] == m["pair_recall"] == m["pair_f1"] == m["edge_recall"] == 1.0
    assert m["true_clusters"] == m["pred_clusters"] == 0
    m = cluster_metrics(np.zeros(3, int), [], [], 3)  # everything merged, nothing true
    assert m["pair_precision"] == 0.0 and m["pair_recall"] == 1.0 and m["false_merges"] == 1
    m = cluster_metrics(np.arange(3), [0], [1], 3)  # nothing predicted, one true pair
    assert m["pair_precision"] == 1.0 and m["pair_recall"] == 0.0 and m["pair_f1"] == 0.0
    assert m["missed_merges"] == 1 and m["edge_recall"] == 0.0
    with pytest.raises(ValueError):
        cluster_metrics(np.arange(2), [], [], 3)


def test_metrics_match_pair_enumeration():
    rng = np.random.default_rng(3)
    for _ in range(30):
        n = int(rng.integers(1, 40))
        pred = rng.integers(0, max(1, n // 3), n) * 17 - 5  # arbitrary label values
        e = int(rng.integers(0, n))
        ti, tj = rng.integers(0, n, e), rng.integers(0, n, e)
        ti, tj = ti[ti != tj], tj[ti != tj]
        truth = connected_components(n, ti, tj)
        m = cluster_metrics(pred, ti, tj, n)
        pp = {(a, b) for a, b in itertools.combinations(range(n), 2) if pred[a] == pred[b]}
        tp = {(a, b) for a, b in itertools.combinations(range(n), 2) if truth[a] == truth[b]}
        assert m["pred_pairs"] == len(pp) and m["true_pairs"] == len(tp)
        assert m["true_positive_pairs"] == len(pp & tp)
        assert m["false_merge_pairs"] == len(pp - tp) and m["missed_merge_pairs"] == len(tp - pp)
        assert m["false_merges"] == len({pred[a] for a, b in pp - tp})
        assert m["missed_merges"] == len({truth[a] for a, b in tp - pp})
        assert m["edge_recall"] == (np.mean(pred[ti] == pred[tj]) if len(ti) else 1.0)
