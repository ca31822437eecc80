"""Semantic stage (SemDeDup): embed -> k-means -> within-cluster cosine -> keep rule.

Only the documents that are still canonical after the exact and fuzzy stages, with at least
``semantic.min_chars`` characters of normalized text, take part; the encoder sees that normalized text
truncated to ``semantic.max_tokens`` tokens. Documents the model's vocabulary does not cover
(``semantic.max_unknown_fraction``, ``semantic.max_tokens_per_word``: text in a language or script the
model was not trained on, whose embeddings would all look alike) are left out and counted.

Similarity is the cosine of L2-normalized embeddings (a dot product). Each document is compared with the
members of its ``semantic.probes`` nearest k-means clusters. Documents are visited in keep-priority
order (``semantic.keep``); a document is a duplicate when its cosine to an earlier *kept* document it was
compared with is at least ``semantic.threshold``, and it then points to the most similar such document.
Pairs never compared are the recall that ``n_clusters`` and ``probes`` trade against time
(benchmarks/bench_semantic.py measures it).

Where the work runs: each partition's texts are embedded by a task of their own (on a cluster, on the
worker that holds the partition, with the worker's own encoder and device), and the embeddings stay
there. k-means is fit on the driver from a sample of at most ``semantic.kmeans_sample`` embeddings
(``semantic.kmeans_per_cluster`` a cluster);
assignment runs on the workers; the points are then shuffled by cluster (with the points that probe a
cluster) into buckets, whose within-cluster searches run on the workers. The pairs at or above the
threshold go to the partitions of their smaller row (each pair once, sorted), their connected components
are found on Dask, and the keep rule runs on buckets of whole components (a point's fate depends only on
the earlier points of its component). Nothing per document comes to the driver. Embeddings are written by
the workers, one file per partition. Every step gives the same
bits whatever the partitioning (``encoder``: fixed batch shapes; ``kernels.semantic.search_clusters``:
a cluster's search depends only on its points).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..engine.backend import Backend
from ..config import SemanticConfig
from .encoders import encoder_available, make_encoder, prepare_encoder
from ..errors import ConfigError
from ..engine.executor import Executor
from ..engine.shuffle import answer_columns, by_bucket, exchange, lookup, owner_groups, owner_of, to_owners
from ..engine.tasks import delayed, to_dask
from .table import DocParts, DocTable, id_array, own_rows_with, state_policy_key

log = logging.getLogger("gpucurate")


def semantic_enabled(cfg: SemanticConfig) -> bool:
    """``semantic.enabled`` resolved: null means on when the encoder is installed."""
    return encoder_available() if cfg.enabled is None else cfg.enabled


def texts_partition(df: pd.DataFrame, mask: np.ndarray, min_chars: int):
    """Normalized texts of the rows selected by ``mask`` that have at least ``min_chars`` characters.

    Returns ``(rows int64[m] within the partition, texts pa.LargeStringArray[m])``.
    """
    rows = np.flatnonzero(mask)
    if len(rows) == 0:
        return rows.astype(np.int64), pa.array([], pa.large_string())
    text = pa.chunked_array(df["_text"].array._pa_array).combine_chunks().take(pa.array(rows))
    long_enough = np.asarray(pc.greater_equal(pc.utf8_length(text), min_chars), dtype=bool)
    return rows[long_enough].astype(np.int64), text.filter(pa.array(long_enough))


@dataclass
class SemanticResult:
    rows: np.ndarray  # int64[m] table rows that were embedded
    canon: np.ndarray  # int64[m] table row of the kept document each points to (itself when kept)
    similarity: np.ndarray  # float64[m] cosine to canon (1.0 when kept)
    cluster: np.ndarray  # int64[m] k-means cluster of each row
    centroid_cos: np.ndarray  # float32[m] cosine to the nearest centroid (the nearest/farthest keep rules)
    edge_i: np.ndarray  # int64[e] table rows of pairs with cosine >= threshold in one cluster
    edge_j: np.ndarray
    edge_score: np.ndarray  # float64[e]
    #: float32[m, dim], row r for table row rows[r]; None when they stayed on the workers (``parts``)
    embeddings: np.ndarray | None
    model: dict  # name, fingerprint, dim, max_tokens
    stats: dict
    #: delayed ``PartEmbeddings`` of each partition, kept where they were computed (``SemanticDedup.run``)
    parts: list | None = None
    #: after ``SemanticDedup.run``: the pairs ``(row_a, row_b, score)`` at or above the threshold in delayed
    #: pieces, in (row_a, row_b) order across them (``edge_i``, ``edge_j``, ``edge_score`` are then empty),
    #: and the embedded documents of each partition
    edge_parts: list | None = None
    part_sizes: list | None = None

    def joined(self, ranges: list[tuple[int, int]]) -> "SemanticResult":
        """The result whose ``parts`` follow ``DocParts.joined(ranges)``: the embeddings of each range of
        partitions as one (``write_embeddings`` writes a file per partition of the output's layout)."""
        if self.parts is None or all(stop - start == 1 for start, stop in ranges):
            return self
        return dataclasses.replace(self, parts=[delayed(_joined_embeddings)(self.parts[a:b]) for a, b in ranges],
                                   part_sizes=[sum(self.part_sizes[a:b]) for a, b in ranges])


def load_embeddings(path: str | Path, model: dict) -> dict[int, np.ndarray]:
    """text hash -> embedding from a previous output directory (or its ``embeddings/`` folder); only
    shards written by the same model, ``max_tokens`` and ``vector_dtype`` are used."""
    root = Path(path)
    if (root / "embeddings").is_dir():
        root = root / "embeddings"
    files = sorted(root.glob("part-*.parquet"))
    if not files:
        raise ConfigError(f"semantic.reuse_embeddings: no embeddings/part-*.parquet under {path}")
    found: dict[int, np.ndarray] = {}
    for f in files:
        table = pq.read_table(f)
        meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
        if meta.get("fingerprint") != model["fingerprint"] or meta.get("max_tokens") != str(model["max_tokens"]) or \
                meta.get("vector_dtype", "float32") != model.get("vector_dtype", "float32"):
            log.warning("semantic: %s was written by another model, max_tokens or vector_dtype; not reused", f)
            continue
        hashes = table.column("text_hash").to_numpy()
        vectors = np.asarray(table.column("embedding").combine_chunks().values, dtype=np.float32)
        vectors = vectors.reshape(len(hashes), -1)
        found.update(zip(hashes.tolist(), vectors))
    return found


@lru_cache(maxsize=2)
def _stored_vectors(path: str, fingerprint: tuple) -> dict[int, np.ndarray]:
    """``load_embeddings`` once per process (each worker reads the files it needs once)."""
    return load_embeddings(path, dict(fingerprint))


class PartEmbeddings:
    """One partition's embeddings: ``rows`` int64[m] table rows, ``vectors`` float32[m, dim], and the
    counts of the participants left out (``too_short``, ``outside``) and of vectors ``reused``."""

    __slots__ = ("rows", "vectors", "too_short", "outside", "reused", "model")

    def __init__(self, rows, vectors, too_short, outside, reused, model):
        self.rows, self.vectors, self.too_short, self.outside = rows, vectors, too_short, outside
        self.reused, self.model = reused, model

    @property
    def nbytes(self) -> int:
        """What the engine's budget counts of a kept partition's embeddings."""
        return int(self.rows.nbytes + self.vectors.nbytes)


def _joined_embeddings(parts: list) -> PartEmbeddings:
    held = [p for p in parts if len(p.rows)] or parts[:1]
    return PartEmbeddings(np.concatenate([p.rows for p in held]), np.concatenate([p.vectors for p in held]),
                          sum(p.too_short for p in parts), sum(p.outside for p in parts),
                          sum(p.reused for p in parts), parts[0].model)


#: texts tokenized and encoded at a time: the tokenizer's output for a whole 64 MB partition (Python lists
#: of ids and its encodings) took gigabytes; a text's vector depends on its own tokens only
EMBED_CHUNK = 4096


def embed_partition(df: pd.DataFrame, mask: np.ndarray, first_row: int, hashes: np.ndarray, cfg: SemanticConfig,
                    device: str, threads: int | None) -> PartEmbeddings:
    """Embeddings of the rows of ``df`` selected by ``mask`` that are long enough and covered by the model's
    vocabulary (table rows ``first_row + local``); ``hashes`` (uint64, one per row of ``df``) key the
    vectors reused from ``semantic.reuse_embeddings``. Runs where the partition is: the encoder is loaded
    once per process."""
    local, texts = texts_partition(df, mask, cfg.min_chars)
    encoder = make_encoder(cfg, device, threads)
    model = encoder.fingerprint()
    model = dict(model, vector_dtype=cfg.vector_dtype)
    stored = _stored_vectors(cfg.reuse_embeddings, tuple(sorted(model.items()))) if cfg.reuse_embeddings else {}
    kept_rows, vectors, reused = [], [], 0
    chunks = [texts.slice(start, EMBED_CHUNK) for start in range(0, len(local), EMBED_CHUNK)]
    # the next chunk is tokenized (the tokenizer releases the GIL) while this one is encoded
    with ThreadPoolExecutor(1) as ahead:
        pending = ahead.submit(encoder.tokenize, chunks[0]) if chunks else None
        for k in range(len(chunks)):
            tokens = pending.result()
            if k + 1 < len(chunks):
                pending = ahead.submit(encoder.tokenize, chunks[k + 1])
            covered = covered_by_vocabulary(tokens, cfg)
            rows = local[k * EMBED_CHUNK:(k + 1) * EMBED_CHUNK][covered]
            tokens = tokens.select(covered)
            chunk = np.empty((len(rows), encoder.dim), dtype=np.float32)
            missing = np.ones(len(rows), bool)
            for r, h in enumerate(hashes[rows].tolist() if stored else ()):
                vec = stored.get(h)
                if vec is not None:
                    chunk[r], missing[r] = vec, False
            if missing.any():
                chunk[missing] = encoder.encode_tokens(tokens.select(missing) if not missing.all() else tokens)
            kept_rows.append(rows)
            vectors.append(chunk)
            reused += int((~missing).sum())
    rows = np.concatenate(kept_rows) if kept_rows else np.empty(0, np.int64)
    vectors = np.concatenate(vectors) if vectors else np.empty((0, encoder.dim), np.float32)
    vectors = vectors.astype(cfg.vector_dtype, copy=False)  # what the engine keeps, spills and exchanges
    return PartEmbeddings(first_row + rows, vectors, int(mask.sum()) - len(local), len(local) - len(rows), reused,
                          model)


def covered_by_vocabulary(tokens, cfg: SemanticConfig) -> np.ndarray:
    """bool[m]: texts the model's vocabulary covers (``max_unknown_fraction``, ``max_tokens_per_word``)."""
    covered = np.ones(len(tokens), dtype=bool)
    if cfg.max_unknown_fraction is not None:
        covered &= tokens.unknown_fraction <= cfg.max_unknown_fraction
    if cfg.max_tokens_per_word is not None:
        covered &= tokens.tokens_per_word <= cfg.max_tokens_per_word
    return covered


def _counts(part: PartEmbeddings) -> tuple:
    return len(part.rows), part.too_short, part.outside, part.reused, part.model


def _take_vectors(part: PartEmbeddings, positions: np.ndarray) -> np.ndarray:
    return part.vectors[positions].astype(np.float32)


def _assign(part: PartEmbeddings, centroids: np.ndarray, probes: int, device: str, assign) -> tuple:
    """``(rows, labels int64[m, probes], centroid cosine float32[m])`` of one partition."""
    labels, cosine = assign(part.vectors, centroids, probes, device)
    return part.rows, labels, cosine


def _split_by_bucket(part: PartEmbeddings, assigned: tuple, n_buckets: int) -> tuple:
    """For each bucket (clusters ``c % n_buckets``): the rows, vectors and labels of the points it needs,
    its members and the points probing one of its clusters, with the labels of other buckets set to -1."""
    _, labels, _ = assigned
    out = []
    for b in range(n_buckets):
        here = np.where(labels % n_buckets == b, labels, -1)
        need = (here >= 0).any(axis=1)
        out.append((part.rows[need], part.vectors[need], here[need]))
    return tuple(out)


def _search_bucket(pieces: list, bucket: int, n_buckets: int, n_clusters: int, threshold: float, device: str,
                   search) -> tuple:
    """The within-cluster search of one bucket's clusters over its points (the partitions' pieces, in
    partition order, so the points are in ascending table row). Returns the pairs as table rows."""
    rows = np.concatenate([p[0] for p in pieces])
    vectors = np.concatenate([p[1] for p in pieces]) if len(rows) else np.zeros((0, 1), np.float32)
    labels = np.concatenate([p[2] for p in pieces])
    a, b, score, cluster, probed, compared = search(vectors, labels, np.arange(bucket, n_clusters, n_buckets),
                                                    threshold, device)
    return rows[a], rows[b], score, cluster, probed, compared


def _write_embedding_part(part: PartEmbeddings, state: dict, first_row: int, path: str, meta: dict,
                          compression: str) -> int:
    local = part.rows - first_row
    dim = part.vectors.shape[1]
    t = pa.table({"doc_id": id_array(state["id"][local]), "text_hash": pa.array(state["hash"][local], pa.uint64()),
                  "embedding": pa.FixedSizeListArray.from_arrays(
                      pa.array(part.vectors.reshape(-1).astype(np.float32, copy=False), pa.float32()), dim)})
    pq.write_table(t.replace_schema_metadata(meta), path, compression=None if compression == "none" else compression)
    return len(part.rows)


def write_embeddings(result: SemanticResult, table, out_dir: Path, compression: str, executor: Executor) -> int:
    """``embeddings/part-NNNNN.parquet`` (doc_id, text_hash of the normalized text, embedding), written
    where the embeddings are: one file per input partition with embedded documents (at least one file).
    ``table``: the run's ``DocParts`` (ids and hashes in its states)."""
    folder = out_dir / "embeddings"
    folder.mkdir(parents=True, exist_ok=True)
    meta = {k: str(v) for k, v in result.model.items()}
    offs = table.part_offsets
    tasks = []
    for p, (part, state) in enumerate(zip(result.parts, table.states)):
        if result.part_sizes[p] or (p == len(result.parts) - 1 and not tasks):
            tasks.append(delayed(_write_embedding_part)(part, state, int(offs[p]),
                                                        str(folder / f"part-{p:05d}.parquet"), meta, compression))
    executor.compute(tasks, "write embeddings")
    return len(tasks)


@dataclass
class Embedded:
    rows: np.ndarray  # int64[m] table rows embedded (participants long enough and covered)
    embeddings: np.ndarray  # float32[m, dim]
    model: dict  # the encoder's fingerprint()
    stats: dict
    steps: dict


class SemanticDedup:
    """``run(ddf, table, participants, executor) -> (table, SemanticResult)``: the documents still canonical
    after the earlier stages, compared and kept by the keep rule; ``embed`` for ingest."""

    name = "semantic"
    #: embedded points per bucket of the within-cluster search (a bucket's vectors are in one task)
    points_per_bucket = 200_000

    def __init__(self, cfg: SemanticConfig, policy: str, backend: Backend, progress: bool = False):
        self.cfg, self.policy, self.backend, self.progress = cfg, policy, backend, progress
        self.device = cfg.device or backend.torch_device

    #: component members per bucket of the keep rule's exchange by component
    members_per_bucket = 2_000_000

    def run(self, ddf, table: DocParts, participants: list, executor: Executor) -> tuple[DocParts, SemanticResult]:
        """The stage over a run's table; ``participants``: per partition, a (delayed) bool mask of the rows
        still canonical. Adds to the partitions' states ``semantic_canon`` (int64 row of the kept document
        each points to), ``semantic_sim``, ``semantic_participant``, ``semantic_cluster`` and
        ``semantic_cos`` (cosine to the nearest centroid).

        Everything per document stays on the workers: the pairs found by the within-cluster search go to
        the partition group of their smaller row, where each pair is kept once (``first_found``) and sorted
        (``edges.parquet`` reads them in that order); their connected components are found by exchanges
        (on Dask on a cluster), and the keep rule runs per bucket of components (a point's fate depends only
        on the earlier points of its component). This process holds the k-means sample and counts."""
        from .components import component_labels, label_column, labels_by_exchanges, labels_by_owner
        cfg, kernels = self.cfg, self.backend.semantic
        offs, n_parts = table.part_offsets, table.npartitions
        steps: dict[str, float] = {}
        t0 = time.perf_counter()
        parts = executor.persist_tasks(self._embed_tasks(ddf, table, participants, table.column("hash"), executor),
                                       "semantic: embed")
        counts = executor.compute([delayed(_counts)(p) for p in parts], "semantic: count")
        stats, model = self._embed_stats(counts)
        steps["embed"] = time.perf_counter() - t0
        stats["embeddings_per_s"] = round(stats["embeddings_computed"] / steps["embed"], 1) \
            if stats["embeddings_computed"] and steps["embed"] > 0 else None
        sizes = np.array([c[0] for c in counts], dtype=np.int64)
        m = int(sizes.sum())

        t0 = time.perf_counter()
        n_clusters = max(1, min(m, cfg.n_clusters or math.ceil(math.sqrt(m))))
        sample = self._gather_sample(parts, sizes, min(cfg.kmeans_sample, cfg.kmeans_per_cluster * n_clusters),
                                     executor)
        if n_clusters > 1:
            centroids = kernels.kmeans_fit(sample, n_clusters, cfg.seed, cfg.kmeans_iter, len(sample), self.device)
        else:  # one cluster: its centroid is the mean of the sample k-means would have been fit on
            centroids = sample.mean(axis=0, keepdims=True) if m else np.zeros((1, stats["dim"]), np.float32)
        steps["kmeans"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        assigned = executor.persist_tasks([delayed(_assign)(p, centroids, cfg.probes, self.device, kernels.assign)
                                           for p in parts], "semantic: assign")
        table = table.update(executor, _assigned_columns, "semantic: clusters", assigned)
        n_buckets = max(1, math.ceil(m / self.points_per_bucket))
        pieces = exchange(executor, _split_by_bucket, list(zip(parts, assigned)), n_buckets, desc="semantic: split")
        found = executor.persist_tasks([delayed(_search_bucket)(pieces[b], b, n_buckets, n_clusters,
                                                                cfg.threshold, self.device,
                                                                kernels.search_clusters)
                                        for b in range(n_buckets)] if m else [], "semantic: within-cluster search")
        # each pair once, in the group of partitions holding its smaller row, sorted by (row_a, row_b)
        groups = owner_groups(n_parts)
        split = executor.persist_tasks([delayed(_pairs_by_group)(f, offs[groups]) for f in found],
                                       "semantic: pairs")
        edges = executor.persist_tasks([delayed(_first_found)([s[g] for s in split], kernels.first_found)
                                        for g in range(len(groups) - 1)], "semantic: pairs")
        totals = executor.compute([delayed(_edge_count)(e) for e in edges]
                                  + [delayed(_compared)(f) for f in found]
                                  + [delayed(_cluster_sizes)(a, n_clusters) for a in assigned], "semantic: count")
        n_edges = int(sum(totals[:len(edges)]))
        compared = int(sum(totals[len(edges):len(edges) + len(found)]))
        cluster_sizes = sum(totals[len(edges) + len(found):], np.zeros(n_clusters, np.int64))

        # the keep rule per bucket of connected components of the pairs
        if executor.client is None:  # by the engine's exchanges, within run.memory_limit
            labels_of_parts, _ = labels_by_exchanges([delayed(_edge_frame)(e) for e in edges], None, offs, n_edges,
                                                     executor)
        else:
            import dask.dataframe as dd
            frame = dd.from_delayed(to_dask([delayed(_edge_frame)(e) for e in edges] or
                                            [delayed(_edge_frame)(None)]), meta=_EDGE_META, verify_meta=False)
            labels = component_labels(frame, table.n, executor, max(1, len(edges)))
            by_owner = executor.persist_tasks([delayed(labels_by_owner)(part, offs) for part in labels.to_delayed()],
                                              "semantic: components")
            labels_of_parts = [[b[q] for b in by_owner] for q in range(n_parts)]
        table = table.update(executor, label_column, "semantic: components", labels_of_parts,
                             name="semantic_component")
        edge_labels = lookup(executor, [delayed(_edge_rows)(e) for e in edges],
                             table.columns("semantic_component"), offs, answer_columns, "semantic: components")
        n_buckets_keep = max(1, -(-(2 * n_edges) // self.members_per_bucket))
        nodes = exchange(executor, _nodes_by_component, table.state_rows(), n_buckets_keep, cfg.keep, self.policy,
                         desc="semantic: split")
        pairs = exchange(executor, _pairs_by_component, list(zip(edges, edge_labels)), n_buckets_keep,
                         desc="semantic: split")
        kept = executor.persist_tasks([delayed(_keep_bucket)(nodes[b], pairs[b], offs, kernels.greedy_keep)
                                       for b in range(n_buckets_keep)], "semantic: keep rule")
        table = table.update(executor, _kept_columns, "semantic: canonicals",
                             [[k[q] for k in kept] for q in range(n_parts)])
        duplicates = int(sum(executor.compute([delayed(_duplicates)(k) for k in kept], "semantic: count")))
        steps["within_cluster"] = time.perf_counter() - t0

        stats = dict(stats, clusters=int(n_clusters), probes=int(min(cfg.probes, len(centroids))),
                     largest_cluster=int(cluster_sizes.max()) if m else 0, pairs_compared=compared,
                     edges=n_edges, duplicates=duplicates, buckets=int(n_buckets),
                     step_seconds={k: round(v, 4) for k, v in steps.items()})
        log.info("semantic: %d documents embedded (%d reused) in %d clusters, %d duplicates", m,
                 stats["embeddings_reused"], n_clusters, duplicates)
        empty = np.empty(0, np.int64)
        return table, SemanticResult(empty, empty, np.empty(0), empty, np.empty(0, np.float32), empty, empty,
                                     np.empty(0), None, model, stats, parts, edge_parts=edges,
                                     part_sizes=sizes.tolist())

    def embed(self, ddf, table, participants: list, hashes: list, executor: Executor) -> Embedded:
        """Embeddings of the ``participants`` (bool[n]) rows long enough and covered by the vocabulary,
        gathered to this process (for ingest, whose state keeps them); vectors of texts in
        ``semantic.reuse_embeddings`` are reused."""
        t0 = time.perf_counter()
        parts = executor.compute(self._embed_tasks(ddf, table, participants, hashes, executor), "semantic: embed")
        stats, model = self._embed_stats([_counts(p) for p in parts])
        rows = np.concatenate([p.rows for p in parts]) if parts else np.empty(0, np.int64)
        vectors = np.concatenate([p.vectors for p in parts]).astype(np.float32, copy=False) if parts else \
            np.zeros((0, stats["dim"]), np.float32)
        return Embedded(rows, vectors, model, stats, {"embed": time.perf_counter() - t0})

    def _embed_tasks(self, ddf, table, participants: list, hashes: list, executor: Executor):
        prepare_encoder(self.cfg)
        offs = table.part_offsets
        threads = executor.threads_per_task(ddf.npartitions)  # batches a task runs at once
        return [delayed(embed_partition)(part, participants[p], int(offs[p]), hashes[p], self.cfg, self.device,
                                         threads)
                for p, part in enumerate(ddf.to_delayed())]

    def _embed_stats(self, counts: list) -> tuple[dict, dict]:
        """The summary's embedding counts from each partition's ``_counts``, and the model's fingerprint."""
        if counts:
            model = counts[0][4]
        else:  # no partition: the model is still loaded, to fail early on a bad one and to fingerprint it
            cfg = self.cfg
            model = dict(make_encoder(cfg, self.device).fingerprint(), vector_dtype=cfg.vector_dtype)
        m = sum(c[0] for c in counts)
        reused = sum(c[3] for c in counts)
        outside = sum(c[2] for c in counts)
        if outside:
            log.warning("semantic: %d of %d documents are outside the vocabulary of %s (unknown tokens or "
                        "words split into characters: another language or script) and are not compared; "
                        "set semantic.model to a model for their language", outside, m + outside, model["model"])
        return {"model": model["model"], "device": self.device, "documents": int(m),
                "too_short": int(sum(c[1] for c in counts)), "outside_vocabulary": int(outside),
                "embeddings_computed": int(m - reused), "embeddings_reused": int(reused), "dim": model["dim"]}, model

    def _gather_sample(self, parts: list, sizes: np.ndarray, points: int, executor: Executor) -> np.ndarray:
        """The ``points`` embeddings k-means is fit on (``kernels.semantic.sample_positions`` of all of
        them, in table order), gathered from their partitions."""
        positions = self.backend.semantic.sample_positions(int(sizes.sum()), points, self.cfg.seed)
        starts = np.concatenate([[0], np.cumsum(sizes)])
        cuts = np.searchsorted(positions, starts)
        tasks = [delayed(_take_vectors)(part, positions[cuts[p]:cuts[p + 1]] - starts[p])
                 for p, part in enumerate(parts) if cuts[p + 1] > cuts[p]]
        got = executor.compute(tasks, "semantic: k-means sample")
        return np.concatenate(got) if got else np.zeros((0, 1), np.float32)


def keep_priority(keep: str, policy: str, table: DocTable, rows: np.ndarray, centroid_cos: np.ndarray) -> np.ndarray:
    """Sort key of ``semantic.keep`` for the embedded ``rows`` (smaller is kept first; ties go to input order)."""
    if keep == "nearest":
        return -centroid_cos
    if keep == "farthest":
        return centroid_cos
    return table.policy_key(policy if keep == "policy" else keep)[rows]


def keep_rule(pair_a, pair_b, scores, priority, rows, greedy_keep):
    """The keep rule over the compared pairs (point indices ``pair_a``, ``pair_b`` with cosine ``scores``);
    returns ``(canon int64[m] point index of the kept point each point points to, similarity float64[m]
    cosine to it)``."""
    m = len(rows)
    # number the points in keep-priority order; each edge goes from the later point to the earlier
    order = np.lexsort((rows, priority))
    position = np.empty(m, dtype=np.int64)
    position[order] = np.arange(m)
    later = np.maximum(position[pair_a], position[pair_b])
    earlier = np.minimum(position[pair_a], position[pair_b])
    by_later = np.lexsort((earlier, later))
    canon_pos, score = greedy_keep(m, later[by_later], earlier[by_later], scores[by_later])
    canon = np.empty(m, dtype=np.int64)
    canon[order] = order[canon_pos]
    similarity = np.empty(m, dtype=np.float64)
    similarity[order] = score
    return canon, similarity


_EDGE_META = pd.DataFrame({"i": pd.Series([], dtype=np.int64), "j": pd.Series([], dtype=np.int64)})


def _assigned_columns(state: dict, first_row: int, assigned: tuple) -> dict:
    """The partition's embedded rows: their k-means cluster (the nearest) and cosine to its centroid."""
    rows, labels, cosine = assigned
    m = len(state["ord"])
    local = rows - first_row
    participant, cluster, cos = np.zeros(m, bool), np.full(m, -1, np.int64), np.full(m, np.nan, np.float32)
    participant[local], cluster[local], cos[local] = True, labels[:, 0], cosine
    return {"semantic_participant": participant, "semantic_cluster": cluster, "semantic_cos": cos}


def _compared(found: tuple) -> int:
    return found[5]


def _cluster_sizes(assigned: tuple, n_clusters: int) -> np.ndarray:
    return np.bincount(assigned[1][:, 0], minlength=n_clusters).astype(np.int64)


def _pairs_by_group(found: tuple, row_bounds: np.ndarray) -> tuple:
    """One bucket's pairs ``(a, b, score, cluster, probed)`` with ``a < b``, cut by the group of partitions
    holding ``a``."""
    a, b, score, cluster, probed = found[:5]
    a, b = np.minimum(a, b), np.maximum(a, b)
    group = owner_of(row_bounds, a)
    return tuple(tuple(x[group == g] for x in (a, b, score, cluster, probed)) for g in range(len(row_bounds) - 1))


def _first_found(pieces: list, first_found) -> tuple:
    """A group's pairs each once (the lowest cluster's score), sorted by (a, b)."""
    columns = [np.concatenate([p[k] for p in pieces]) for k in range(5)] if pieces else \
        [np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float32), np.empty(0, np.int64),
         np.empty(0, bool)]
    return first_found(*columns)


def _edge_count(edges: tuple) -> int:
    return len(edges[0])


def _edge_frame(edges: tuple | None) -> pd.DataFrame:
    if edges is None:
        return _EDGE_META.copy()
    return pd.DataFrame({"i": edges[0].astype(np.int64), "j": edges[1].astype(np.int64)})


def _edge_rows(edges: tuple) -> np.ndarray:
    return edges[0]


def _state_priority(state: dict, keep: str, policy: str) -> np.ndarray:
    """``keep_priority`` of a partition's rows."""
    if keep == "nearest":
        return -state["semantic_cos"]
    if keep == "farthest":
        return state["semantic_cos"]
    return state_policy_key(state, policy if keep == "policy" else keep)


def _nodes_by_component(state: dict, first_row: int, n_buckets: int, keep: str, policy: str) -> tuple:
    """``(component, row, priority)`` of the partition's rows with a pair, one piece per bucket of components."""
    local = np.flatnonzero(state["semantic_component"] >= 0)
    label = state["semantic_component"][local]
    priority = _state_priority(state, keep, policy)[local]
    rows = first_row + local.astype(np.int64)
    return by_bucket(label % n_buckets, n_buckets, label, rows, priority)


def _pairs_by_component(edges: tuple, labels: tuple, n_buckets: int) -> tuple:
    return by_bucket(labels[0] % n_buckets, n_buckets, *edges)


def _keep_bucket(nodes: list, pairs: list, part_offsets: np.ndarray, greedy_keep) -> tuple:
    """The keep rule over one bucket of components: ``(rows, kept rows, similarity)`` of its points that are
    duplicates, one piece per partition."""
    rows = np.concatenate([n[1] for n in nodes]) if nodes else np.empty(0, np.int64)
    priority = np.concatenate([n[2] for n in nodes]) if nodes else np.empty(0)
    order = np.argsort(rows, kind="stable")
    rows, priority = rows[order], priority[order]
    a, b, score = (np.concatenate([p[k] for p in pairs]) for k in range(3))
    canon, similarity = keep_rule(np.searchsorted(rows, a), np.searchsorted(rows, b), score, priority, rows,
                                  greedy_keep)
    dup = np.flatnonzero(canon != np.arange(len(rows)))
    return to_owners(rows[dup], (rows[canon[dup]], similarity[dup]), part_offsets)


def _kept_columns(state: dict, first_row: int, pieces: list) -> dict:
    canon, similarity = own_rows_with(first_row, len(state["ord"]), pieces, 1.0)
    return {"semantic_canon": canon, "semantic_sim": similarity}


def _duplicates(kept: tuple) -> int:
    return int(sum(len(piece[0]) for piece in kept))
