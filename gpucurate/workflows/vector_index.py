"""The embeddings of an ingest state, searched exhaustively while they are few and through k-means cells
(an IVF index) once there are many.

Until ``IVF_MIN`` embeddings are stored, a batch's new embeddings are compared with every stored one, a
file chunk at a time (what is held is the batch's vectors and one chunk). The batch that brings the
state past it fits ``cells`` k-means centroids on a sample of every embedding and files each stored
embedding under its nearest centroid (the ``cells`` index: cell -> embedding); every later embedding is
filed by its own batch. A new embedding is then compared only with the embeddings of its ``PROBES``
nearest cells, read by cell, so a batch reads about ``PROBES / cells`` of the stored embeddings. Pairs whose
two ends fall in cells far apart are the ones lost (``benchmarks/bench_ivf.py`` measures them).
"""

from __future__ import annotations

import numpy as np

from ..io.row_store import read_rows
from .state import State, vector_record

#: stored embeddings from which a state searches through cells
IVF_MIN = 50_000
#: cells a new embedding is compared within
PROBES = 16
#: embeddings held at once: a chunk of a stored file, or the cells searched together
VECTOR_CHUNK = 65536
#: points the centroids are fit on, per cell
SAMPLE_PER_CELL = 40


def cells_for(n: int) -> int:
    """Cells of an IVF index over ``n`` embeddings: about sqrt(n)."""
    return int(min(4096, max(16, round(np.sqrt(n)))))


def fit_centroids(state: State, new: np.ndarray, backend, device: str, seed: int) -> np.ndarray:
    """float32[k, dim] centroids fit on a sample of the stored embeddings and ``new`` (at most
    ``SAMPLE_PER_CELL`` per cell)."""
    total = state.n_vectors + len(new)
    k = min(cells_for(total), total)
    take = min(total, SAMPLE_PER_CELL * k)
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(total, take, replace=False))
    stored = chosen[chosen < state.n_vectors]
    sample = np.concatenate([read_rows(state.vector_files(), vector_record(new.shape[1]), stored)["vector"],
                             new[chosen[chosen >= state.n_vectors] - state.n_vectors]])
    return backend.semantic.kmeans_fit(sample, k, seed, 20, take, device)


def stored_cells(state: State, centroids: np.ndarray, backend, device: str) -> tuple[np.ndarray, np.ndarray]:
    """``(cell uint64[n], item int64[n])`` of every stored embedding, a chunk at a time."""
    cells, items = [], []
    for f in state.vector_files():
        for start in range(0, f.count, VECTOR_CHUNK):
            stop = min(f.count, start + VECTOR_CHUNK)
            chunk = read_rows([f], vector_record(centroids.shape[1]), f.first + np.arange(start, stop))["vector"]
            cells.append(backend.semantic.assign(chunk, centroids, 1, device)[0][:, 0])
            items.append(f.first + np.arange(start, stop, dtype=np.int64))
    if not cells:
        return np.empty(0, np.uint64), np.empty(0, np.int64)
    return np.concatenate(cells).astype(np.uint64), np.concatenate(items)


def _exhaustive(state: State, x: np.ndarray, first: int, threshold: float, backend, device: str):
    for f in state.vector_files():
        for start in range(0, f.count, VECTOR_CHUNK):
            stop = min(f.count, start + VECTOR_CHUNK)
            chunk = read_rows([f], vector_record(x.shape[1]), f.first + np.arange(start, stop))["vector"]
            a, b, s = backend.semantic.later_pairs(np.concatenate([chunk, x]), len(chunk), threshold, device)
            old = a < len(chunk)
            yield f.first + start + a[old], first + b[old] - len(chunk), s[old]


def _probed(state: State, x: np.ndarray, first: int, threshold: float, centroids: np.ndarray, backend,
            device: str):
    probes = backend.semantic.assign(x, centroids, PROBES, device)[0]
    cell_of = probes.ravel()
    query_of = np.repeat(np.arange(len(x)), probes.shape[1])
    by_cell = np.argsort(cell_of, kind="stable")
    cell_of, query_of = cell_of[by_cell], query_of[by_cell]
    cells = np.unique(cell_of)
    index = state.index("cells")
    per_cell = max(1, state.n_vectors // len(centroids))
    for group in np.array_split(cells, max(1, -(-len(cells) * per_cell // VECTOR_CHUNK))):
        which, _, items = index.find(group.astype(np.uint64))
        if not len(items):
            continue
        vectors = read_rows(state.vector_files(), vector_record(x.shape[1]), items)["vector"]
        for g, cell in enumerate(group.tolist()):
            members = np.flatnonzero(which == g)
            queries = query_of[np.searchsorted(cell_of, cell):np.searchsorted(cell_of, cell, "right")]
            if not len(members) or not len(queries):
                continue
            sim = vectors[members] @ x[queries].T
            ia, iq = np.nonzero(sim >= threshold)
            yield items[members][ia], first + queries[iq], sim[ia, iq]


def search(state: State, x: np.ndarray, first: int, threshold: float, backend, device: str,
           centroids: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs ``(a, b, cosine)`` (embedding items, ``a < b``) at or above ``threshold`` between the new
    embeddings ``x`` (float32[v, dim] unit vectors, items ``first ..``) and the stored ones (through the
    cells when ``centroids`` are given, else all), and among the new ones."""
    found = list(_probed(state, x, first, threshold, centroids, backend, device) if centroids is not None
                 else _exhaustive(state, x, first, threshold, backend, device))
    a, b, s = backend.semantic.later_pairs(x, 0, threshold, device)
    found.append((first + a, first + b, s))
    a, b, s = (np.concatenate([f[k] for f in found]) for k in range(3))
    order = np.lexsort((b, a))
    return a[order].astype(np.int64), b[order].astype(np.int64), s[order].astype(np.float64)
