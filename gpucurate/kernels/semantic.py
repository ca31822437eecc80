"""Kernels of the semantic stage on the CPU: k-means (scikit-learn), nearest-centroid assignment and
within-cluster cosine search (Torch, so the same code runs on a CUDA device), and the SemDeDup greedy
keep rule (numba).

Embeddings are float32 unit vectors, so cosine similarity is a dot product.
"""

from __future__ import annotations

import math

import numpy as np

from .jit import njit

#: similarity-matrix entries computed per block of the within-cluster search (bounds its memory)
BLOCK_ENTRIES = 1 << 24


def kmeans_fit(x: np.ndarray, k: int, seed: int, max_iter: int, sample: int, device: str = "cpu") -> np.ndarray:
    """float32[k, d] centroids of k-means (k-means++ init, one run) fit on at most ``sample`` points
    drawn with ``seed``: on a CUDA device with cuML when it is installed, else with ``kmeans_torch``
    there; scikit-learn on the CPU."""
    if len(x) > sample:
        x = x[sample_positions(len(x), sample, seed)]
    if device.startswith("cuda"):
        try:
            from cuml.cluster import KMeans as CuKMeans
        except ImportError:
            return kmeans_torch(x, k, seed, max_iter, device)
        km = CuKMeans(n_clusters=k, n_init=1, max_iter=max_iter, random_state=seed)
        return np.asarray(km.fit(x).cluster_centers_, dtype=np.float32)
    from sklearn.cluster import KMeans
    km = KMeans(n_clusters=k, n_init=1, max_iter=max_iter, random_state=seed, algorithm="lloyd")
    return km.fit(x).cluster_centers_.astype(np.float32)


def kmeans_torch(x: np.ndarray, k: int, seed: int, max_iter: int, device: str = "cpu", tol: float = 1e-4) -> np.ndarray:
    """float32[k, d] centroids of Lloyd's k-means in Torch on ``device``, the points copied there once.

    k-means++ seeding (each next centroid drawn with probability proportional to the squared distance to
    the nearest one so far, the best of ``2 + log k`` draws, as scikit-learn's greedy seeding; a
    ``torch.Generator`` seeded with ``seed``), then assignment by blocked matrix
    products and centroid sums as products of one-hot blocks with the points, which, unlike scattered
    atomic adds, give the same bits on every run. Stops after ``max_iter`` rounds or when the centroids
    move less (sum of squares) than ``tol`` times the points' mean variance, as scikit-learn does. A
    cluster left empty keeps its centroid.
    """
    import torch
    points = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(device)
    n = len(points)
    step = max(1, BLOCK_ENTRIES // max(1, k))
    generator = torch.Generator(device=points.device).manual_seed(seed)
    with torch.inference_mode():
        sq = (points * points).sum(dim=1)
        centroids = torch.empty((k, points.shape[1]), dtype=points.dtype, device=points.device)
        first = int(torch.randint(n, (1,), generator=generator, device=points.device))
        centroids[0] = points[first]
        nearest = (sq - 2.0 * (points @ centroids[0]) + sq[first]).clamp_(min=0)
        tries = 2 + int(math.log(k))
        for c in range(1, k):
            total = nearest.sum()
            if total <= 0:  # fewer distinct points than clusters: the rest repeat the first
                centroids[c:] = centroids[0]
                break
            picks = torch.multinomial(nearest / total, tries, replacement=True, generator=generator)
            candidates = torch.minimum(nearest[None, :], (sq[None, :] - 2.0 * (points[picks] @ points.T)
                                                          + sq[picks][:, None]).clamp_(min=0))
            best = int(torch.argmin(candidates.sum(dim=1)))
            centroids[c] = points[picks[best]]
            nearest = candidates[best]
        limit = tol * float(points.var(dim=0).mean()) if n > 1 else 0.0
        for _ in range(max_iter):
            c_sq = (centroids * centroids).sum(dim=1)
            sums = torch.zeros_like(centroids)
            counts = torch.zeros(k, dtype=points.dtype, device=points.device)
            for s in range(0, n, step):
                block = points[s:s + step]
                label = torch.argmin(c_sq - 2.0 * (block @ centroids.T), dim=1)
                onehot = torch.nn.functional.one_hot(label, k).to(points.dtype)
                sums += onehot.T @ block
                counts += onehot.sum(dim=0)
            moved = torch.where(counts[:, None] > 0, sums / counts.clamp(min=1)[:, None], centroids)
            shift = float(((moved - centroids) ** 2).sum())
            centroids = moved
            if shift <= limit:
                break
    return centroids.cpu().numpy().astype(np.float32)


def sample_positions(n: int, sample: int, seed: int) -> np.ndarray:
    """int64[min(n, sample)] ascending positions of the points k-means is fit on (drawn with ``seed``)."""
    if n <= sample:
        return np.arange(n, dtype=np.int64)
    return np.sort(np.random.default_rng(seed).choice(n, sample, replace=False)).astype(np.int64)


def assign(x: np.ndarray, centroids: np.ndarray, probes: int = 1, device: str = "cpu"):
    """The ``probes`` nearest centroids (Euclidean) of each row of ``x``.

    Returns ``(labels int64[n, probes] nearest first, cosine float32[n])`` where cosine is the similarity
    to the (normalized) nearest centroid, for the nearest/farthest keep rules.
    """
    import torch
    n, probes = len(x), min(probes, len(centroids))
    labels = np.empty((n, probes), dtype=np.int64)
    cosine = np.empty(n, dtype=np.float32)
    c = torch.from_numpy(np.array(centroids, dtype=np.float32)).to(device)
    c_sq = (c * c).sum(dim=1)
    c_unit = torch.nn.functional.normalize(c, dim=1)
    step = max(1, BLOCK_ENTRIES // max(1, len(centroids)))
    with torch.inference_mode():
        for s in range(0, n, step):
            xb = torch.from_numpy(np.array(x[s:s + step], dtype=np.float32)).to(device)
            # |x - c|^2 = |x|^2 - 2 x.c + |c|^2; |x|^2 is constant per row. Ties go to the lower label.
            dist = c_sq - 2.0 * (xb @ c.T)
            best = torch.topk(dist, probes, dim=1, largest=False, sorted=True).indices
            labels[s:s + step] = best.cpu().numpy()
            cosine[s:s + step] = (xb * c_unit[best[:, 0]]).sum(dim=1).cpu().numpy()
    return labels, cosine


def cluster_pairs(x: np.ndarray, labels: np.ndarray, n_clusters: int, threshold: float, device: str = "cpu"):
    """Pairs of points that share a cluster (or a probed one) with cosine at least ``threshold``.

    Parameters
    ----------
    x : float32[n, d] unit vectors.
    labels : int64[n, probes] clusters of each point, nearest first (``assign``). A point is a member
        of its nearest cluster and is compared with the members of each of its probed clusters.

    Returns
    -------
    ``(a int64[e], b int64[e], score float32[e], compared)`` with ``a < b`` point indices, each pair once,
    sorted by (a, b); ``compared`` is the number of similarities computed.
    """
    found = search_clusters(x, labels, np.arange(n_clusters), threshold, device)
    a, b, score = first_found(*found[:5])
    return a, b, score, found[5]


def search_clusters(x: np.ndarray, labels: np.ndarray, clusters: np.ndarray, threshold: float, device: str = "cpu"):
    """The within-cluster search of ``clusters`` (ascending): each cluster's members against the earlier
    members, then the points that probe it against all its members. A label of -1 is a cluster searched
    elsewhere (a shuffled bucket holds only some clusters).

    A cluster's computation depends only on its members and probing points, in ascending point order, so
    searching the clusters in any grouping gives the same pairs and the same float scores.

    Returns ``(a, b int64[e] point indices, score float32[e], cluster int64[e], probed bool[e], compared)``
    in the order found, with ``a != b`` unordered and a pair possibly found in several clusters
    (``first_found`` keeps one).
    """
    import torch
    n = len(x)
    out_a, out_b, out_s, out_c, out_p = [], [], [], [], []
    compared = 0
    primary = labels[:, 0]
    members_order = np.argsort(primary, kind="stable")
    m_starts = np.searchsorted(primary[members_order], clusters)
    m_ends = np.searchsorted(primary[members_order], clusters, side="right")
    # (point, probed cluster) for the 2nd..p-th nearest clusters
    probe_points = np.repeat(np.arange(n), labels.shape[1] - 1)
    probe_clusters = labels[:, 1:].reshape(-1)
    probe_order = np.argsort(probe_clusters, kind="stable")
    q_starts = np.searchsorted(probe_clusters[probe_order], clusters)
    q_ends = np.searchsorted(probe_clusters[probe_order], clusters, side="right")
    xt = torch.from_numpy(np.array(x, dtype=np.float32)).to(device)

    def collect(sim, rows_idx, cols_idx, mask, cluster, probed):
        r, c = torch.nonzero(mask, as_tuple=True)
        if len(r):
            out_s.append(sim[r, c].cpu().numpy())
            out_a.append(rows_idx[r.cpu().numpy()])
            out_b.append(cols_idx[c.cpu().numpy()])
            out_c.append(np.full(len(r), cluster, np.int64))
            out_p.append(np.full(len(r), probed))

    with torch.inference_mode():
        for k, c in enumerate(clusters):
            members = members_order[m_starts[k]:m_ends[k]]
            m = len(members)
            if m == 0:
                continue
            mx = xt[torch.from_numpy(members).to(device)]
            step = max(1, BLOCK_ENTRIES // m)
            for s in range(1, m, step):  # members against earlier members
                e = min(m, s + step)
                sim = mx[s:e] @ mx[:e].T
                rows = torch.arange(s, e, device=sim.device).unsqueeze(1)
                cols = torch.arange(e, device=sim.device).unsqueeze(0)
                collect(sim, members[s:e], members[:e], (sim >= threshold) & (cols < rows), c, False)
                compared += (e - s) * (s + e - 1) // 2
            queries = probe_points[probe_order[q_starts[k]:q_ends[k]]]
            for s in range(0, len(queries), step):  # points that probe this cluster against all members
                q = queries[s:s + step]
                sim = xt[torch.from_numpy(q).to(device)] @ mx.T
                collect(sim, q, members, sim >= threshold, c, True)
                compared += len(q) * m
    if not out_a:
        return (np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float32), np.empty(0, np.int64),
                np.empty(0, bool), compared)
    return (np.concatenate(out_a).astype(np.int64), np.concatenate(out_b).astype(np.int64),
            np.concatenate(out_s).astype(np.float32), np.concatenate(out_c), np.concatenate(out_p), compared)


def first_found(a, b, score, cluster, probed):
    """Each pair once, as ``(a < b, score)`` sorted by (a, b): where ``search_clusters`` found a pair in
    several clusters, the score of the lowest cluster, members before probes (the order it searches)."""
    a, b = np.minimum(a, b), np.maximum(a, b)
    order = np.lexsort((probed, cluster, b, a))
    a, b, score = a[order], b[order], score[order]
    first = np.r_[True, (a[1:] != a[:-1]) | (b[1:] != b[:-1])] if len(a) else np.zeros(0, bool)
    return a[first], b[first], score[first]


def later_pairs(x: np.ndarray, start: int, threshold: float, device: str = "cpu"):
    """Exhaustive search of the points ``start..n-1`` of ``x`` (float32[n, d] unit vectors) against every
    earlier point: pairs ``(a < b)`` with ``b >= start`` and cosine at least ``threshold``, sorted by
    ``(a, b)``. The incremental index's query: new embeddings against all stored ones and each other.

    Returns ``(a int64[e], b int64[e], score float32[e])``.
    """
    import torch
    n = len(x)
    out_a, out_b, out_s = [], [], []
    xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(device)
    step = max(1, BLOCK_ENTRIES // max(1, n))
    with torch.inference_mode():
        for s in range(start, n, step):
            e = min(n, s + step)
            sim = xt[s:e] @ xt[:e].T
            rows = torch.arange(s, e, device=sim.device).unsqueeze(1)
            cols = torch.arange(e, device=sim.device).unsqueeze(0)
            r, c = torch.nonzero((sim >= threshold) & (cols < rows), as_tuple=True)
            if len(r):
                out_s.append(sim[r, c].cpu().numpy())
                out_b.append(r.cpu().numpy() + s)
                out_a.append(c.cpu().numpy())
    if not out_a:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float32)
    a, b, score = np.concatenate(out_a), np.concatenate(out_b), np.concatenate(out_s).astype(np.float32)
    order = np.lexsort((b, a))
    return a[order].astype(np.int64), b[order].astype(np.int64), score[order]


@njit(cache=True, aot=("i8, i8[:], i8[:], f4[:]",))
def greedy_keep(n, ei, ej, es):
    """SemDeDup keep rule over points numbered in keep-priority order.

    A point is a duplicate when some earlier *kept* point it was compared with has cosine >= threshold
    (the edges ``(ei, ej, es)``, ``ej < ei``, sorted by ``ei``); it then points to the most similar such
    point. Returns ``(canon int64[n], score float32[n])``: canon is the point itself when kept.
    """
    canon = np.arange(n)
    score = np.ones(n, dtype=np.float32)
    e = 0
    n_edges = len(ei)
    while e < n_edges:
        i = ei[e]
        best = -1
        best_s = np.float32(-2.0)
        while e < n_edges and ei[e] == i:
            j = ej[e]
            if canon[j] == j and (es[e] > best_s or (es[e] == best_s and j < best)):
                best, best_s = j, es[e]
            e += 1
        if best >= 0:
            canon[i] = best
            score[i] = best_s
    return canon, score


@njit(nogil=True, cache=True, aot=("i4[:], i8[:], f4[:,:], b1[:]",))
def mean_pool(ids, offsets, table, skip):
    """Unit-length means of table rows: row i of the result is the normalized mean of ``table[ids[k]]``
    over ``offsets[i] <= k < offsets[i + 1]`` with ``skip[ids[k]]`` false (zero when none is left).

    ids : int32[total] token ids; offsets : int64[n + 1]; table : float32[vocabulary, d] token vectors;
    skip : bool[vocabulary]. Returns float32[n, d]. Sums are float64, in token order, so a row depends
    only on its own tokens.
    """
    n = len(offsets) - 1
    d = table.shape[1]
    out = np.zeros((n, d), dtype=np.float32)
    acc = np.zeros(d, dtype=np.float64)
    for i in range(n):
        acc[:] = 0.0
        count = 0
        for k in range(offsets[i], offsets[i + 1]):
            t = ids[k]
            if skip[t]:
                continue
            for c in range(d):
                acc[c] += table[t, c]
            count += 1
        if count == 0:
            continue
        norm = 0.0
        for c in range(d):
            norm += acc[c] * acc[c]
        if norm > 0.0:
            scale = 1.0 / np.sqrt(norm)
            for c in range(d):
                out[i, c] = acc[c] * scale
    return out
