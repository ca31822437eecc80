"""Kernels of the semantic stage against brute force (no model needed; torch and scikit-learn are)."""

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")

from gpucurate.kernels import semantic as sk  # noqa: E402


def unit_vectors(n, d, seed, clumps=0):
    """Random unit vectors; with ``clumps`` > 0 most are small perturbations of a few centres."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(np.float32)
    if clumps:
        centres = rng.standard_normal((clumps, d)).astype(np.float32) * 4
        x = centres[rng.integers(0, clumps, n)] + x * 0.6
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def brute_pairs(x, threshold, same=None):
    sim = x @ x.T
    a, b = np.nonzero(np.triu(sim >= threshold, 1))
    if same is not None:
        keep = same(a, b)
        a, b = a[keep], b[keep]
    return set(zip(a.tolist(), b.tolist()))


def reference_greedy(n, edges):
    """Plain-Python SemDeDup keep rule: visit points in order, a point is dropped when an earlier kept
    point is linked to it; it points to the most similar one (ties: the earlier point)."""
    canon = list(range(n))
    score = [1.0] * n
    for i in range(n):
        best = None
        for (a, b), s in edges.items():
            if a == i and canon[b] == b and b < i:
                if best is None or s > best[1] or (s == best[1] and b < best[0]):
                    best = (b, s)
        if best:
            canon[i], score[i] = best
    return canon, score


@pytest.mark.parametrize("n,clusters,probes", [(0, 1, 1), (1, 1, 1), (2, 1, 1), (300, 1, 1), (300, 7, 1),
                                               (300, 7, 2), (300, 7, 7), (1000, 20, 3)])
def test_cluster_pairs_match_brute_force(n, clusters, probes):
    x = unit_vectors(n, 16, seed=n + clusters, clumps=5)
    threshold = 0.8
    if n >= 2:
        centroids = sk.kmeans_fit(x, min(clusters, n), seed=1, max_iter=50, sample=10_000)
    else:
        centroids = np.ones((1, 16), np.float32)
    labels, cosine = sk.assign(x, centroids, probes)
    assert labels.shape == (n, min(probes, len(centroids)))
    a, b, score, compared = sk.cluster_pairs(x, labels, len(centroids), threshold)
    found = set(zip(a.tolist(), b.tolist()))
    assert len(found) == len(a), "each pair once"
    assert np.all(a < b) and np.all(np.diff(a * n + b) > 0), "sorted by (a, b)"
    if len(a):
        assert np.allclose(score, np.sum(x[a] * x[b], axis=1), atol=1e-5)
    prim = labels[:, 0]
    probed = [set(row) for row in labels.tolist()]
    expected = brute_pairs(x, threshold, lambda i, j: np.array(
        [prim[q] in probed[p] or prim[p] in probed[q] for p, q in zip(i, j)], dtype=bool))
    assert found == expected
    if probes >= len(centroids):  # every cluster probed: exhaustive
        assert found == brute_pairs(x, threshold)
    if n >= 2:
        members = labels[:, 0]
        assert compared >= sum(c * (c - 1) // 2 for c in np.bincount(members))


def test_assign_is_nearest_centroid():
    x = unit_vectors(500, 8, seed=3)
    centroids = unit_vectors(9, 8, seed=4) * 0.7
    labels, cosine = sk.assign(x, centroids, probes=3)
    d = ((x[:, None, :] - centroids[None, :, :]) ** 2).sum(axis=2)
    assert np.array_equal(labels, np.argsort(d, axis=1, kind="stable")[:, :3])
    unit = centroids / np.linalg.norm(centroids, axis=1, keepdims=True)
    assert np.allclose(cosine, np.sum(x * unit[labels[:, 0]], axis=1), atol=1e-5)


def test_greedy_keep_matches_reference():
    rng = np.random.default_rng(5)
    for trial in range(20):
        n = int(rng.integers(1, 40))
        edges = {}
        for _ in range(int(rng.integers(0, 3 * n))):
            i, j = sorted(rng.integers(0, n, 2).tolist(), reverse=True)
            if i != j:
                edges[(i, j)] = float(np.float32(rng.choice([0.93, 0.95, 0.97, 0.99])))
        keys = sorted(edges)
        ei = np.array([k[0] for k in keys], np.int64)
        ej = np.array([k[1] for k in keys], np.int64)
        es = np.array([edges[k] for k in keys], np.float32)
        canon, score = sk.greedy_keep(n, ei, ej, es)
        ref_canon, ref_score = reference_greedy(n, edges)
        assert canon.tolist() == ref_canon, trial
        assert np.allclose(score, ref_score)
        kept = canon == np.arange(n)
        assert kept[canon].all(), "every duplicate points to a kept point"


def test_greedy_keep_drops_only_against_kept_points():
    # 0 - 1 similar, 1 - 2 similar, 0 - 2 not: 1 goes (to 0), so 2 stays, although it is similar to 1
    canon, score = sk.greedy_keep(3, np.array([1, 2]), np.array([0, 1]), np.array([0.95, 0.96], np.float32))
    assert canon.tolist() == [0, 0, 2]
    assert score[1] == np.float32(0.95) and score[2] == 1.0


def test_kmeans_is_deterministic_and_samples():
    x = unit_vectors(2000, 12, seed=9, clumps=6)
    a = sk.kmeans_fit(x, 6, seed=3, max_iter=50, sample=500)
    b = sk.kmeans_fit(x, 6, seed=3, max_iter=50, sample=500)
    assert a.shape == (6, 12) and a.dtype == np.float32
    assert np.array_equal(a, b)


def _inertia(x, centroids):
    return float(((x[:, None, :] - centroids[None]) ** 2).sum(axis=2).min(axis=1).sum())


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_torch_kmeans_fits_as_well_as_scikit_learn(seed):
    """The device's k-means (run here on the CPU): as good a fit as scikit-learn's, the same bits twice."""
    from sklearn.cluster import KMeans
    x = unit_vectors(3000, 16, seed=seed, clumps=12)
    ours = sk.kmeans_torch(x, 12, seed=seed, max_iter=100)
    theirs = KMeans(12, n_init=1, max_iter=100, random_state=seed).fit(x).cluster_centers_
    assert ours.shape == (12, 16) and ours.dtype == np.float32
    assert _inertia(x, ours) <= 1.05 * _inertia(x, theirs)
    assert np.array_equal(ours, sk.kmeans_torch(x, 12, seed=seed, max_iter=100))
    # one round of Lloyd from the fitted centroids moves nothing: each is the mean of its points
    labels, _ = sk.assign(x, ours)
    means = np.stack([x[labels[:, 0] == c].mean(axis=0) for c in range(12)])
    assert np.allclose(means, ours, atol=1e-5)


def test_torch_kmeans_with_fewer_distinct_points_than_clusters():
    x = np.repeat(unit_vectors(3, 4, seed=0), 5, axis=0)
    centroids = sk.kmeans_torch(x, 6, seed=0, max_iter=10)
    assert centroids.shape == (6, 4)
    assert {tuple(np.round(c, 5)) for c in centroids} == {tuple(np.round(p, 5)) for p in x}


def test_kept_embeddings_count_at_their_size_in_the_budget():
    """A partition's embeddings are a kept value of the engine: its budget counts their arrays."""
    from gpucurate.engine.spill import nbytes_of
    from gpucurate.stages.semantic import PartEmbeddings
    part = PartEmbeddings(np.arange(1000), unit_vectors(1000, 384, seed=1), 0, 0, 0, {})
    assert nbytes_of(part) == 1000 * 8 + 1000 * 384 * 4
