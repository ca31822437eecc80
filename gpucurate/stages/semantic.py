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
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path

import dask
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..engine.backend import Backend
from ..config import SemanticConfig
from .encoder import Encoder, encoder_available
from ..errors import ConfigError
from ..engine.executor import Executor
from .table import DocTable

log = logging.getLogger("gpucurate")

EMBEDDING_SHARD_ROWS = 65_536


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
    embeddings: np.ndarray  # float32[m, dim], row r for table row rows[r]
    model: dict  # name, fingerprint, dim, max_tokens
    stats: dict


def model_fingerprint(encoder: Encoder) -> dict:
    """What must match for stored embeddings to be reused: model config, weights size, max_tokens."""
    digest = hashlib.sha256((encoder.path / "config.json").read_bytes())
    weights = sorted(p.stat().st_size for p in encoder.path.glob("*.safetensors")) or \
        sorted(p.stat().st_size for p in encoder.path.glob("*.bin"))
    digest.update(repr(weights).encode())
    digest.update(encoder.dtype.encode())
    return {"model": encoder.name, "fingerprint": digest.hexdigest()[:16], "dim": encoder.dim,
            "max_tokens": encoder.max_tokens, "dtype": encoder.dtype}


def load_embeddings(path: str | Path, model: dict) -> dict[int, np.ndarray]:
    """text hash -> embedding from a previous output directory (or its ``embeddings/`` folder); only
    shards written by the same model and ``max_tokens`` are used."""
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
        if meta.get("fingerprint") != model["fingerprint"] or meta.get("max_tokens") != str(model["max_tokens"]):
            log.warning("semantic: %s was written by another model or max_tokens; not reused", f)
            continue
        hashes = table.column("text_hash").to_numpy()
        vectors = np.asarray(table.column("embedding").combine_chunks().values, dtype=np.float32)
        vectors = vectors.reshape(len(hashes), -1)
        found.update(zip(hashes.tolist(), vectors))
    return found


def write_embeddings(result: SemanticResult, table: DocTable, hashes: np.ndarray, out_dir: Path,
                     compression: str) -> int:
    """``embeddings/part-NNNNN.parquet``: doc_id, text_hash (of the normalized text), embedding."""
    from .table import id_array
    folder = out_dir / "embeddings"
    folder.mkdir(parents=True, exist_ok=True)
    meta = {k: str(v) for k, v in result.model.items()}
    dim = result.embeddings.shape[1] if result.embeddings.ndim == 2 else 0
    shards = 0
    for shard, s in enumerate(range(0, max(1, len(result.rows)), EMBEDDING_SHARD_ROWS)):
        rows = result.rows[s:s + EMBEDDING_SHARD_ROWS]
        flat = pa.array(result.embeddings[s:s + EMBEDDING_SHARD_ROWS].reshape(-1), type=pa.float32())
        t = pa.table({"doc_id": id_array(table.ids[rows]), "text_hash": pa.array(hashes[rows], pa.uint64()),
                      "embedding": pa.FixedSizeListArray.from_arrays(flat, dim)})
        pq.write_table(t.replace_schema_metadata(meta), folder / f"part-{shard:05d}.parquet",
                       compression=None if compression == "none" else compression)
        shards += 1
    return shards


@dataclass
class Embedded:
    rows: np.ndarray  # int64[m] table rows embedded (participants long enough and covered)
    embeddings: np.ndarray  # float32[m, dim]
    model: dict  # model_fingerprint
    stats: dict
    steps: dict
    encoder: Encoder


class SemanticDedup:
    """``run(ddf, table, participants, hashes, executor) -> SemanticResult``.

    ``participants`` is a bool[n] mask of the table rows still canonical after the earlier stages;
    ``hashes`` the uint64[n] normalized-text hashes of the exact stage (the key of reused embeddings).
    """

    name = "semantic"

    def __init__(self, cfg: SemanticConfig, policy: str, backend: Backend, progress: bool = False):
        self.cfg, self.policy, self.backend, self.progress = cfg, policy, backend, progress
        self.device = cfg.device or backend.torch_device

    def run(self, ddf, table: DocTable, participants: np.ndarray, hashes: np.ndarray,
            executor: Executor) -> SemanticResult:
        cfg = self.cfg
        emb = self.embed(ddf, table, participants, hashes, executor)
        rows, embeddings, steps = emb.rows, emb.embeddings, emb.steps
        t0 = time.perf_counter()
        labels, centroid_cos, n_clusters = self._cluster(embeddings)
        steps["kmeans"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        pair_a, pair_b, scores, compared = self.backend.semantic.cluster_pairs(embeddings, labels, n_clusters,
                                                                              cfg.threshold, self.device)
        priority = keep_priority(cfg.keep, self.policy, table, rows, centroid_cos)
        canon, similarity = keep_rule(pair_a, pair_b, scores, priority, rows, self.backend.semantic.greedy_keep)
        steps["within_cluster"] = time.perf_counter() - t0

        m = len(rows)
        duplicates = int((canon != np.arange(m)).sum())
        stats = dict(emb.stats, clusters=int(n_clusters), probes=int(labels.shape[1]),
                     largest_cluster=int(np.bincount(labels[:, 0]).max()) if m else 0, pairs_compared=int(compared),
                     edges=int(len(scores)), duplicates=duplicates,
                     step_seconds={k: round(v, 4) for k, v in steps.items()})
        log.info("semantic: %d documents embedded (%d reused) in %d clusters, %d duplicates", m,
                 emb.stats["embeddings_reused"], n_clusters, duplicates)
        # pair_a < pair_b are point indices, so the edges' table rows are ascending too
        return SemanticResult(rows, rows[canon], similarity, labels[:, 0], centroid_cos, rows[pair_a], rows[pair_b],
                              scores.astype(np.float64), embeddings, emb.model, stats)

    def embed(self, ddf, table: DocTable, participants: np.ndarray, hashes: np.ndarray,
              executor: Executor, stored: dict | None = None) -> Embedded:
        """Embeddings of the ``participants`` (bool[n]) rows long enough and covered by the vocabulary;
        texts whose hash is in ``stored`` (text hash -> vector) or in ``semantic.reuse_embeddings`` are
        not encoded again."""
        cfg = self.cfg
        steps: dict[str, float] = {}
        t0 = time.perf_counter()
        offs = table.part_offsets
        tasks = [dask.delayed(texts_partition)(part, participants[offs[p]:offs[p + 1]], cfg.min_chars)
                 for p, part in enumerate(ddf.to_delayed())]
        parts = executor.compute(tasks, "semantic: gather")
        rows = np.concatenate([offs[p] + r for p, (r, _) in enumerate(parts)]).astype(np.int64)
        texts = pa.concat_arrays([t for _, t in parts]).to_pylist() if parts else []
        too_short = int(participants.sum()) - len(rows)
        steps["gather"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        encoder = Encoder(cfg.model, self.device, cfg.max_tokens, cfg.batch_size, cfg.dtype, threads=executor.workers)
        model = model_fingerprint(encoder)
        steps["load_model"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        tokens = encoder.tokenize(texts)
        covered = self._covered(tokens, encoder.name)
        rows = rows[covered]
        token_ids = [t for t, c in zip(tokens.ids, covered) if c]
        steps["tokenize"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        embeddings, reused = self._embed(encoder, model, token_ids, hashes[rows], stored)
        steps["embed"] = time.perf_counter() - t0
        m = len(rows)
        encoded = m - reused
        stats = {"model": model["model"], "device": self.device, "documents": int(m), "too_short": too_short,
                 "outside_vocabulary": int((~covered).sum()), "embeddings_computed": int(encoded),
                 "embeddings_reused": int(reused), "dim": encoder.dim,
                 "embeddings_per_s": round(encoded / steps["embed"], 1) if encoded and steps["embed"] > 0 else None}
        return Embedded(rows, embeddings, model, stats, steps, encoder)

    def _covered(self, tokens, model_name: str) -> np.ndarray:
        """bool[m]: texts the model's vocabulary covers (``max_unknown_fraction``, ``max_tokens_per_word``)."""
        covered = np.ones(len(tokens.ids), dtype=bool)
        if self.cfg.max_unknown_fraction is not None:
            covered &= tokens.unknown_fraction <= self.cfg.max_unknown_fraction
        if self.cfg.max_tokens_per_word is not None:
            covered &= tokens.tokens_per_word <= self.cfg.max_tokens_per_word
        if not covered.all():
            log.warning("semantic: %d of %d documents are outside the vocabulary of %s (unknown tokens or "
                        "words split into characters: another language or script) and are not compared; "
                        "set semantic.model to a model for their language", int((~covered).sum()), len(covered),
                        model_name)
        return covered

    def _cluster(self, embeddings: np.ndarray):
        """k-means; returns ``(labels int64[m, probes], cosine to the nearest centroid float32[m], k)``."""
        cfg, m = self.cfg, len(embeddings)
        n_clusters = min(m, cfg.n_clusters or max(1, math.ceil(math.sqrt(m))))
        if n_clusters > 1:
            centroids = self.backend.semantic.kmeans_fit(embeddings, n_clusters, cfg.seed, cfg.kmeans_iter,
                                                         cfg.kmeans_sample, self.device)
        else:
            n_clusters = 1
            centroids = embeddings.mean(axis=0, keepdims=True) if m else np.zeros((1, embeddings.shape[1]), np.float32)
        labels, centroid_cos = self.backend.semantic.assign(embeddings, centroids, cfg.probes, self.device)
        return labels, centroid_cos, n_clusters

    def _embed(self, encoder: Encoder, model: dict, token_ids: list, text_hashes: np.ndarray, stored: dict | None):
        """Embeddings of the tokenized texts; those whose text hash is in ``stored`` or in
        ``semantic.reuse_embeddings`` are reused. Returns ``(float32[m, dim], number reused)``."""
        if self.cfg.reuse_embeddings:
            stored = {**load_embeddings(self.cfg.reuse_embeddings, model), **(stored or {})}
        if not stored:
            return encoder.encode_tokens(token_ids, self.progress), 0
        out = np.empty((len(token_ids), encoder.dim), dtype=np.float32)
        missing = []
        for r, h in enumerate(text_hashes.tolist()):
            vec = stored.get(h)
            if vec is None:
                missing.append(r)
            else:
                out[r] = vec
        if missing:
            out[missing] = encoder.encode_tokens([token_ids[r] for r in missing], self.progress)
        return out, len(token_ids) - len(missing)


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
