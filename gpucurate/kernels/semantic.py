"""Kernels of the semantic stage on the CPU: k-means (scikit-learn), nearest-centroid assignment and
within-cluster cosine search (Torch, so the same code runs on a CUDA device), and the SemDeDup greedy
keep rule (numba).

Embeddings are float32 unit vectors, so cosine similarity is a dot product.
"""

from __future__ import annotations

import numba as nb
import numpy as np

#: similarity-matrix entries computed per block of the within-cluster search (bounds its memory)
BLOCK_ENTRIES = 1 << 24


def kmeans_fit(x: np.ndarray, k: int, seed: int, max_iter: int, sample: int, device: str = "cpu") -> np.ndarray:
    """float32[k, d] centroids of k-means (k-means++ init, one run) fit on at most ``sample`` points
    drawn with ``seed``: cuML on a CUDA device when it is installed, scikit-learn otherwise."""
    if len(x) > sample:
        pick = np.sort(np.random.default_rng(seed).choice(len(x), sample, replace=False))
        x = x[pick]
    if device.startswith("cuda"):
        try:
            from cuml.cluster import KMeans as CuKMeans
        except ImportError:
            pass
        else:
            km = CuKMeans(n_clusters=k, n_init=1, max_iter=max_iter, random_state=seed)
            return np.asarray(km.fit(x).cluster_centers_, dtype=np.float32)
    from sklearn.cluster import KMeans
    km = KMeans(n_clusters=k, n_init=1, max_iter=max_iter, random_state=seed, algorithm="lloyd")
    return km.fit(x).cluster_centers_.astype(np.float32)


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
    import torch
    n = len(x)
    out_a, out_b, out_s = [], [], []
    compared = 0
    primary = labels[:, 0]
    members_order = np.argsort(primary, kind="stable")
    m_starts = np.searchsorted(primary[members_order], np.arange(n_clusters + 1))
    # (point, probed cluster) for the 2nd..p-th nearest clusters
    probe_points = np.repeat(np.arange(n), labels.shape[1] - 1)
    probe_clusters = labels[:, 1:].reshape(-1)
    probe_order = np.argsort(probe_clusters, kind="stable")
    q_starts = np.searchsorted(probe_clusters[probe_order], np.arange(n_clusters + 1))
    xt = torch.from_numpy(np.array(x, dtype=np.float32)).to(device)

    def collect(sim, rows_idx, cols_idx, mask):
        r, c = torch.nonzero(mask, as_tuple=True)
        if len(r):
            out_s.append(sim[r, c].cpu().numpy())
            out_a.append(rows_idx[r.cpu().numpy()])
            out_b.append(cols_idx[c.cpu().numpy()])

    with torch.inference_mode():
        for c in range(n_clusters):
            members = members_order[m_starts[c]:m_starts[c + 1]]
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
                collect(sim, members[s:e], members[:e], (sim >= threshold) & (cols < rows))
                compared += (e - s) * (s + e - 1) // 2
            queries = probe_points[probe_order[q_starts[c]:q_starts[c + 1]]]
            for s in range(0, len(queries), step):  # points that probe this cluster against all members
                q = queries[s:s + step]
                sim = xt[torch.from_numpy(q).to(device)] @ mx.T
                collect(sim, q, members, sim >= threshold)
                compared += len(q) * m
    if not out_a:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float32), compared
    a, b, score = np.concatenate(out_a), np.concatenate(out_b), np.concatenate(out_s).astype(np.float32)
    a, b = np.minimum(a, b), np.maximum(a, b)
    key = a.astype(np.int64) * n + b
    key, first = np.unique(key, return_index=True)  # a pair found from both sides is kept once
    return key // n, key % n, score[first], compared


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


@nb.njit(cache=True)
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
