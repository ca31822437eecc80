"""Incremental ingestion: deduplicate a new batch against a persisted state and against itself.

The state (``gpucurate.workflows.state``) keeps, per document, what the global steps need (text hash, gate
results, timestamps) and, per distinct text, what was expensive to compute: LSH band keys and shingle
sets (fuzzy), embeddings (semantic), and the pairs already verified with their scores. An ingest
reads and hashes only the new batch, sketches only texts never seen, embeds only new canonicals, and
then regroups the whole collection from the stored and the new pieces with the same rules as a full
run. So with ``canonical.policy: first`` and the hash-based stages, ``ingest A`` then ``ingest B``
gives the clusters of one run over A+B (tested). The semantic stage searches exhaustively (every new
embedding against every stored one) instead of within k-means clusters.

A document already in the state (same id, same text) is reported and not added again, so re-running
a batch is idempotent; the same id with another text is an error.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from ..stages.annotate import alias_table, annotate
from ..engine.backend import select
from ..config import Config, flatten, load_config, resolve_config, run_annotation_prefix
from ..errors import ConfigError, InputError
from ..engine.executor import Executor, quiet_logs
from ..io.reader import plan_partitions, read_documents
from ..kernels.pairs import index_of, pack_pairs
from ..stages.contamination import ContaminationResult
from ..stages.exact import ExactDedup, ExactResult, exact_canonicals, exact_result
from ..stages.fuzzy import FuzzyDedup, FuzzyResult
from ..stages.sketches import Sketches
from ..stages.quality import QualityResult
from ..stages.semantic import SemanticDedup, SemanticResult, keep_priority, keep_rule, semantic_enabled
from ..engine.failpoints import failpoint
from .state import Segment, State, StateLock
from ..stages.table import DocTable, canonicals, split_rows

log = logging.getLogger("gpucurate")

#: config sections and keys that must stay as the state was built with: they decide the stored hashes,
#: sketches, embeddings and groups. Others (input, run, output, contamination, ...) may change per batch.
FIXED_KEYS = ("normalize.", "quality.", "exact.", "fuzzy.", "canonical.", "chunks.", "semantic.enabled",
              "semantic.model", "semantic.threshold", "semantic.min_chars", "semantic.max_tokens",
              "semantic.max_unknown_fraction", "semantic.max_tokens_per_word", "semantic.keep", "semantic.dtype")

DOC_COLUMNS = ("doc_id", "timestamp", "nbytes", "text_hash", "empty", "words", "chars", "quality_rule",
               "quality_value", "contaminated", "contamination_drop", "contamination_reason", "ingested_at",
               "batch")


def resolve_ingest_config(state: State, config, overrides) -> Config:
    """The state's config with the allowed overrides; a new state takes ``config`` + ``overrides``."""
    if state.config is None:
        cfg = resolve_config(config, overrides)
    else:
        if config is not None:
            user = resolve_config(config, overrides)
            changed = {k: v for k, v in flatten(user.to_dict()).items() if v != flatten(state.config).get(k)}
            cfg = load_config(None, changed, base=load_config(None, flatten(state.config)))
        else:
            cfg = load_config(None, overrides, base=load_config(None, flatten(state.config)))
        before, after = flatten(state.config), flatten(cfg.to_dict())
        fixed = [k for k in after if k.startswith(FIXED_KEYS) and after[k] != before.get(k)]
        if fixed:
            raise ConfigError(f"{state.root}: {', '.join(fixed)} cannot change in an existing state (it was "
                              "built with other values); start a new state for that")
    if cfg.paragraphs.enabled:
        raise ConfigError("ingest does not support paragraphs.enabled (paragraph dedup rewrites texts of "
                          "already indexed documents)")
    if cfg.semantic.keep in ("nearest", "farthest"):
        raise ConfigError("ingest compares embeddings exhaustively, without k-means centroids: semantic.keep "
                          "must be policy, first, earliest or longest")
    return cfg


@dataclass
class Union:
    """The committed documents followed by the batch's new ones: the table every global step runs on."""
    table: DocTable
    docs: pd.DataFrame  # DOC_COLUMNS of every document, union order
    n_old: int
    batch_rows: np.ndarray  # int64[n_batch] union row of each batch row (new or already present)
    new_batch_rows: np.ndarray  # int64[k] batch rows of the new documents


def _unify_ids(old: np.ndarray, new: np.ndarray) -> np.ndarray:
    if old.dtype.kind == "i" and new.dtype.kind == "i":
        return np.concatenate([old, new]).astype(np.int64)
    return np.concatenate([old.astype(str).astype(object), new.astype(str).astype(object)])


def build_union(prior: pd.DataFrame | None, batch: pd.DataFrame, locate) -> Union:
    """Append the batch's documents not yet in ``prior``; an id already there with another text is an
    error naming the record."""
    n_old = 0 if prior is None else len(prior)
    ids_b = batch["doc_id"].to_numpy()
    present = np.zeros(len(batch), bool)
    batch_rows = np.empty(len(batch), np.int64)
    if n_old:
        index = pd.Index(prior["doc_id"].astype(str) if prior["doc_id"].dtype.kind != "i" or ids_b.dtype.kind != "i"
                         else prior["doc_id"])
        keys = pd.Index(ids_b.astype(str)) if index.dtype == object else pd.Index(ids_b)
        found = index.get_indexer(keys)
        present = found >= 0
        if present.any():
            r = np.flatnonzero(present)
            differs = prior["text_hash"].to_numpy()[found[r]] != batch["text_hash"].to_numpy()[r]
            if differs.any():
                bad = int(r[np.flatnonzero(differs)[0]])
                raise InputError(f"document id {ids_b[bad]!r} is already in the state with another text; ids "
                                 f"must be stable (a changed document needs a new id) ({locate(bad)})")
            batch_rows[r] = found[r]
    new_rows = np.flatnonzero(~present)
    batch_rows[new_rows] = n_old + np.arange(len(new_rows))
    new_part = batch.iloc[new_rows].reset_index(drop=True)
    if n_old:
        docs = pd.concat([prior, new_part], ignore_index=True)
        docs["doc_id"] = _unify_ids(prior["doc_id"].to_numpy(), new_part["doc_id"].to_numpy())
    else:
        docs = new_part
    n = len(docs)
    table = DocTable(np.arange(n, dtype=np.int64), docs["doc_id"].to_numpy(), docs["timestamp"].to_numpy(np.int64),
                     docs["nbytes"].to_numpy(np.int64), np.array([0, n], np.int64))
    return Union(table, docs, n_old, batch_rows, new_rows)


# ------------------------------------------------------------------------------------------------
# stored pieces: concatenation and lookups


def _concat_sketches(parts: list[dict], bands: int) -> Sketches:
    """Sketches of the stored fuzzy items, in item order (``fuzzy.npz`` of every segment)."""
    parts = [p for p in parts if p]
    if not parts:
        return Sketches(np.empty((0, bands), np.uint64), np.zeros(1, np.int64), np.empty(0, np.uint64))
    lengths = np.concatenate([np.diff(p["csr_offsets"]) for p in parts])
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    sk = Sketches(np.concatenate([p["keys"] for p in parts]), offsets, np.concatenate([p["csr_values"] for p in parts]))
    if "sigs" in parts[0]:
        sk.sigs = np.concatenate([p["sigs"] for p in parts])
    if "simhashes" in parts[0]:
        sk.simhashes = np.concatenate([p["simhashes"] for p in parts])
    return sk


def _append_sketches(a: Sketches, b: Sketches) -> Sketches:
    offsets = np.concatenate([a.csr_offsets, b.csr_offsets[1:] + a.csr_offsets[-1]])
    out = Sketches(np.concatenate([a.keys, b.keys]), offsets, np.concatenate([a.csr_values, b.csr_values]))
    if b.sigs is not None:
        out.sigs = np.concatenate([a.sigs, b.sigs]) if a.sigs is not None and len(a.keys) else b.sigs
    if b.simhashes is not None:
        out.simhashes = np.concatenate([a.simhashes, b.simhashes]) if a.simhashes is not None and len(a.keys) \
            else b.simhashes
    return out


def _sketch_arrays(sk: Sketches, hashes: np.ndarray) -> dict:
    out = {"item_hash": hashes, "keys": sk.keys, "csr_offsets": sk.csr_offsets, "csr_values": sk.csr_values}
    if sk.sigs is not None:
        out["sigs"] = sk.sigs
    if sk.simhashes is not None:
        out["simhashes"] = sk.simhashes
    return out


def _cat(parts: list[dict], name: str, empty: np.ndarray) -> np.ndarray:
    arrays = [p[name] for p in parts if p and name in p]
    return np.concatenate(arrays) if arrays else empty


@dataclass
class ItemGroups:
    """Result of clustering items (distinct texts) with stored and new pairs."""
    canon: np.ndarray  # int64[m] item index of each item's canonical
    similarity: np.ndarray  # float64[m]
    pi: np.ndarray  # int64[e] candidate pairs (item indices) and their scores
    pj: np.ndarray
    scores: np.ndarray
    new_pairs: np.ndarray  # uint64 packed pairs verified in this batch
    new_scores: np.ndarray
    recomputed: int


def group_items(stage: FuzzyDedup, sk: Sketches, active: np.ndarray, key: np.ndarray, order: np.ndarray,
                cached_pairs: np.ndarray, cached_scores: np.ndarray, max_bucket: int, anchors: int,
                executor: Executor | None = None) -> ItemGroups:
    """LSH candidates over all ``active`` items, scores from the cache or computed, components,
    canonicals (smallest ``key``, then ``order``) and each member's score to its canonical.

    ``cached_pairs`` (uint64 ``pack_pairs``) hold the pairs verified by earlier batches.
    """
    some = np.flatnonzero(active & (np.diff(sk.csr_offsets) > 0))
    pi, pj = stage.backend.pairs.candidate_pairs(sk.keys[some], max_bucket, anchors,
                                                 executor.local_threads if executor is not None else 1)
    pi, pj = some[pi], some[pj]
    packed = pack_pairs(pi, pj)
    at = index_of(cached_pairs, packed)
    scores = np.empty(len(pi), np.float64)
    scores[at >= 0] = cached_scores[at[at >= 0]]
    todo = np.flatnonzero(at < 0)
    if len(todo):
        scores[todo] = stage.scores(sk, pi[todo], pj[todo], executor)
    m = len(active)
    edge = scores >= stage.score_threshold - 1e-12
    labels = stage.backend.pairs.components(m, pi[edge], pj[edge])
    items = np.flatnonzero(active)
    canon = np.arange(m, dtype=np.int64)
    if len(items):  # the winner's order value (its union row), mapped back to its item
        winner_row = canonicals(labels[items], order[items], key[items])
        by_row = np.argsort(order[items])
        canon[items] = items[by_row][np.searchsorted(order[items][by_row], winner_row)]
    similarity = np.ones(m, np.float64)
    members = np.flatnonzero(canon != np.arange(m))
    recomputed = 0
    if len(members):
        pos = index_of(packed, pack_pairs(members, canon[members]))
        similarity[members[pos >= 0]] = scores[pos[pos >= 0]]
        missing = members[pos < 0]
        if len(missing):
            similarity[missing] = stage.scores(sk, missing, canon[missing])
            recomputed = len(missing)
    return ItemGroups(canon, similarity, pi, pj, scores, packed[todo], scores[todo], recomputed)


# ------------------------------------------------------------------------------------------------
# the job


def _batch_documents(table: DocTable, exact: ExactResult, quality: QualityResult | None,
                     contamination: ContaminationResult | None, now: pd.Timestamp, batch: int) -> pd.DataFrame:
    n = table.n
    return pd.DataFrame({
        "doc_id": table.ids, "timestamp": table.timestamps, "nbytes": table.nbytes,
        "text_hash": exact.hashes, "empty": exact.empty, "words": exact.words, "chars": exact.chars,
        "quality_rule": quality.rule if quality is not None else np.full(n, -1, np.int16),
        "quality_value": quality.value if quality is not None else np.zeros(n),
        "contaminated": contamination.contaminated if contamination is not None else np.zeros(n, bool),
        "contamination_drop": contamination.drop if contamination is not None else np.zeros(n, bool),
        "contamination_reason": contamination.drop_reason if contamination is not None else np.full(n, None, object),
        "ingested_at": np.full(n, now.value, np.int64), "batch": np.full(n, batch, np.int64)})


@dataclass
class Batch:
    """What one ingest computed before it commits: the regrouped collection and the new pieces."""
    cfg: Config
    union: Union
    prep: object  # pipeline.Prepared of the batch
    specs: list
    annotations: pa.Table  # every document of the collection, union order
    previous: pd.DataFrame | None  # the registry before this batch
    segment: Segment
    boilerplate: list | None
    semantic: SemanticResult | None
    model: dict | None
    stats: dict


def compute_batch(state: State, cfg: Config, inputs: list[str], executor: Executor, backend, timer) -> Batch:
    """Read, gate and sketch the batch and regroup the collection; nothing is written."""
    from .run import _locator, prepare
    report: dict = {}
    with timer("read+normalize"):
        specs = plan_partitions(inputs, cfg.input, report, parallelism=executor.workers)  # (a run's records are input here: no name check)
        locate_key = _locator(specs)
        prep = prepare(read_documents(specs, cfg.input, local=executor.client is None), cfg, executor, backend,
                       locate_key)
    with timer("exact"):
        hashed, _ = ExactDedup(cfg, backend).run(prep.ddf, prep.table, executor)
        exact_b = exact_result(hashed, executor)  # its hashes and counts; canonicals are the union's
    quality_b = prep.quality(executor)
    batch_table = prep.table = prep.table.to_table(executor)  # the collection is kept in memory
    contamination_b = None
    if prep.contamination_gate.enabled:
        with timer("contamination"):
            contamination_b = prep.contamination_gate.collect(prep.ddf, batch_table, executor)
    number = len(state.manifest["batches"]) + 1
    now = pd.Timestamp.now(tz="UTC")
    prior = state.documents()
    union = build_union(prior.to_pandas() if prior is not None else None,
                        _batch_documents(batch_table, exact_b, quality_b, contamination_b, now, number),
                        lambda r: locate_key(batch_table.ords[r]))
    docs, table, n = union.docs, union.table, union.table.n
    hashes = docs["text_hash"].to_numpy(np.uint64)
    empty = docs["empty"].to_numpy(bool)
    eligible = docs["quality_rule"].to_numpy() < 0
    rows = np.arange(n, dtype=np.int64)
    policy_key = table.policy_key(cfg.canonical.policy)
    exact_canon = exact_canonicals(hashes, empty, eligible, policy_key, cfg.exact.enabled)
    exact = ExactResult(hashes, empty, exact_canon, docs["words"].to_numpy(np.int64), docs["chars"].to_numpy(np.int64))
    canonical = (exact_canon == rows) & ~empty & eligible
    segment = Segment(pa.Table.from_pandas(docs.iloc[union.n_old:], preserve_index=False))
    stats: dict = {"batch": number}

    def batch_mask(union_rows: np.ndarray) -> np.ndarray:
        """bool[batch rows] of these union rows, which must be new documents."""
        if (union_rows < union.n_old).any():
            raise RuntimeError("the state lacks data of a committed document")  # a bug, not bad input
        mask = np.zeros(batch_table.n, bool)
        mask[union.new_batch_rows[union_rows - union.n_old]] = True
        return mask

    fuzzy, boilerplate = None, state.manifest.get("boilerplate_hashes")
    if cfg.fuzzy.enabled:
        with timer("fuzzy"):
            fuzzy, boilerplate = _fuzzy(state, cfg, backend, executor, prep, batch_table, exact, canonical, policy_key,
                                        batch_mask, segment, boilerplate, stats)
        canonical[fuzzy.rows[fuzzy.canon != fuzzy.rows]] = False
    semantic = model = None
    if semantic_enabled(cfg.semantic):
        with timer("semantic"):
            semantic, model = _semantic(state, cfg, backend, executor, prep, batch_table, exact_b, union, canonical,
                                        batch_mask, segment, stats)
    quality = None
    if quality_b is not None:
        quality = QualityResult(docs["quality_rule"].to_numpy(np.int16), docs["quality_value"].to_numpy(np.float64),
                                quality_b.limits)
    contamination = None
    if docs["contaminated"].any() or contamination_b is not None:
        label, stripped = np.full(n, None, object), np.full(n, None, object)
        if contamination_b is not None:
            label[union.batch_rows] = contamination_b.label
            stripped[union.batch_rows] = contamination_b.stripped
        contamination = ContaminationResult(docs["contaminated"].to_numpy(bool), label, stripped,
                                            docs["contamination_drop"].to_numpy(bool),
                                            docs["contamination_reason"].to_numpy(object), {}, {})
    with timer("annotate"):
        annotations = annotate(table, exact, fuzzy, cfg.output, semantic, quality, contamination)
    stats.update(report)
    return Batch(cfg, union, prep, specs, annotations, state.registry(), segment, boilerplate, semantic, model, stats)


def _fuzzy(state, cfg, backend, executor, prep, batch_table, exact, canonical, policy_key, batch_mask, segment,
           boilerplate, stats) -> tuple[FuzzyResult, list | None]:
    stage = FuzzyDedup(cfg.fuzzy, cfg.canonical.policy, backend)
    participants = canonical.copy()
    if cfg.fuzzy.min_length:
        participants &= (exact.words if cfg.fuzzy.shingle == "word" else exact.chars) >= cfg.fuzzy.min_length
    stored = state.arrays("fuzzy")
    old_hash = _cat(stored, "item_hash", np.empty(0, np.uint64))
    p_rows = np.flatnonzero(participants)
    item = index_of(old_hash, exact.hashes[p_rows])
    need = p_rows[item < 0]
    frozen = np.asarray(boilerplate, np.uint64) if boilerplate is not None else None
    new_sk = stage.sketch(prep.ddf, batch_table, batch_mask(need), executor, frozen)
    if cfg.fuzzy.boilerplate and boilerplate is None:  # the first batch fixes the boilerplate shingles
        boilerplate = new_sk.boilerplate.tolist()
        stats["fuzzy_boilerplate"] = new_sk.boilerplate_stats
    sk = _append_sketches(_concat_sketches(stored, stage.bands), new_sk)
    m_old, m = len(old_hash), len(old_hash) + len(need)
    item[item < 0] = m_old + np.arange(len(need))
    item_row = np.full(m, -1, np.int64)
    item_row[item] = p_rows
    active = item_row >= 0
    edges = state.arrays("fuzzy_edges")
    cached = _cat(edges, "pairs", np.empty(0, np.uint64))
    cached_scores = _cat(edges, "scores", np.empty(0, np.float64))
    g = group_items(stage, sk, active, np.where(active, policy_key[np.maximum(item_row, 0)], 0),
                    np.where(active, item_row, np.iinfo(np.int64).max), cached, cached_scores,
                    cfg.fuzzy.max_bucket_size, cfg.fuzzy.bucket_anchors, executor)
    segment.arrays["fuzzy"] = _sketch_arrays(new_sk, exact.hashes[need])
    segment.arrays["fuzzy_edges"] = {"pairs": g.new_pairs, "scores": g.new_scores}
    a = np.flatnonzero(active)
    members = int((g.canon[a] != a).sum())
    stats["fuzzy"] = {"items": int(m), "new_items": int(len(need)), "candidate_pairs": int(len(g.pi)),
                      "pairs_verified": int(len(g.new_pairs)), "pairs_from_state": int(len(g.pi) - len(g.new_pairs)),
                      "duplicates": members, "bands": stage.bands, "rows": stage.rows_per_band}
    result = FuzzyResult(item_row[a], item_row[g.canon[a]], g.similarity[a], item_row[g.pi], item_row[g.pj], g.scores,
                         stage.score_kind, stage.score_threshold, stage.bands, stage.rows_per_band,
                         dict(stats["fuzzy"]), frozen if frozen is not None else new_sk.boilerplate)
    return result, boilerplate


def _semantic(state, cfg, backend, executor, prep, batch_table, exact_b, union, canonical, batch_mask, segment,
              stats) -> tuple[SemanticResult, dict | None]:
    docs = union.docs
    hashes = docs["text_hash"].to_numpy(np.uint64)
    stored = state.arrays("semantic")
    old_hash = _cat(stored, "item_hash", np.empty(0, np.uint64))
    skipped = _cat(stored, "skip_hash", np.empty(0, np.uint64))
    old_vectors = [p["embeddings"] for p in stored if p and len(p["embeddings"])]
    p_rows = np.flatnonzero(canonical)
    known = (index_of(old_hash, hashes[p_rows]) >= 0) | (index_of(skipped, hashes[p_rows]) >= 0)
    need = p_rows[~known]
    stage = SemanticDedup(cfg.semantic, cfg.canonical.policy, backend, cfg.run.progress)
    model = state.manifest.get("semantic_model")
    new_hash, new_skip = np.empty(0, np.uint64), np.empty(0, np.uint64)
    new_vectors = None
    computed = 0
    if len(need):
        offs = batch_table.part_offsets
        emb = stage.embed(prep.ddf, batch_table, split_rows(batch_mask(need), offs), split_rows(exact_b.hashes, offs),
                          executor)
        if model is not None and emb.model["fingerprint"] != model["fingerprint"]:
            raise ConfigError(f"{state.root}: the encoder differs from the one the state's embeddings were made "
                              "with (model, weights or dtype); start a new state for another model")
        model = emb.model
        new_hash = exact_b.hashes[emb.rows]
        new_vectors = emb.embeddings
        new_skip = np.setdiff1d(hashes[need], new_hash)
        computed = emb.stats["embeddings_computed"]
    vectors = np.concatenate(old_vectors + ([new_vectors] if new_vectors is not None and len(new_vectors) else [])) \
        if old_vectors or (new_vectors is not None and len(new_vectors)) else np.empty((0, 1), np.float32)
    item_hash = np.concatenate([old_hash, new_hash])
    m_old = len(old_hash)
    a, b, s = backend.semantic.later_pairs(vectors, m_old, cfg.semantic.threshold, stage.device) \
        if len(new_hash) else (np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float32))
    edges = state.arrays("semantic_edges")
    all_a = np.concatenate([_cat(edges, "a", np.empty(0, np.int64)), a])
    all_b = np.concatenate([_cat(edges, "b", np.empty(0, np.int64)), b])
    all_s = np.concatenate([_cat(edges, "score", np.empty(0, np.float64)), s.astype(np.float64)])
    segment.arrays["semantic"] = {"item_hash": new_hash, "skip_hash": new_skip,
                                  "embeddings": new_vectors if new_vectors is not None
                                  else np.empty((0, vectors.shape[1]), np.float32)}
    segment.arrays["semantic_edges"] = {"a": a, "b": b, "score": s.astype(np.float64)}
    pos = index_of(item_hash, hashes[p_rows])
    rows = p_rows[pos >= 0]
    items = pos[pos >= 0]
    local = np.full(len(item_hash), -1, np.int64)
    local[items] = np.arange(len(rows))
    la, lb = local[all_a], local[all_b]
    use = (la >= 0) & (lb >= 0) & (all_s >= cfg.semantic.threshold)
    la, lb, ls = la[use], lb[use], all_s[use]
    priority = keep_priority(cfg.semantic.keep, cfg.canonical.policy, union.table, rows, np.zeros(len(rows)))
    canon, similarity = keep_rule(la, lb, ls, priority, rows, backend.semantic.greedy_keep)
    duplicates = int((canon != np.arange(len(rows))).sum())
    stats["semantic"] = {"documents": int(len(rows)), "embeddings_computed": int(computed),
                         "new_embeddings": int(len(new_hash)), "not_embeddable": int(len(new_skip)),
                         "edges": int(len(ls)), "new_edges": int(len(s)), "duplicates": duplicates,
                         "clusters": 0}
    result = SemanticResult(rows, rows[canon], similarity, np.full(len(rows), -1, np.int64),
                            np.zeros(len(rows), np.float32), rows[la], rows[lb], ls, vectors[items],
                            model or {}, dict(stats["semantic"]))
    return result, model


REGISTRY_COLUMNS = ("doc_id", "dedup_id", "is_canonical", "keep", "drop_stage", "drop_reason", "similarity",
                    "cluster_size", "weight", "exact_group", "fuzzy_group", "semantic_group", "contaminated",
                    "contamination")


def registry_table(batch: Batch) -> pa.Table:
    """The registry: every document's annotation, with the batch that brought it and when."""
    docs = batch.union.docs
    t = batch.annotations.select(list(REGISTRY_COLUMNS))
    return t.append_column("batch", pa.array(docs["batch"].to_numpy(np.int64))).append_column(
        "ingested_at", pa.array(docs["ingested_at"].to_numpy(np.int64)).cast(pa.timestamp("ns", tz="UTC")))


def batch_summary(batch: Batch, inputs: list[str]) -> dict:
    """Counts of one ingest (documents in, new canonicals, new aliases, embeddings computed and saved)."""
    u, ann = batch.union, batch.annotations
    n_batch, n_old, n = len(u.batch_rows), u.n_old, u.table.n
    new = np.arange(n_old, n)
    is_canonical = np.asarray(ann.column("is_canonical"))
    keep = np.asarray(ann.column("keep"))
    stage = np.asarray(ann.column("drop_stage").to_pylist(), dtype=object)
    dedup = ann.column("dedup_id").to_pandas()
    aliases_by_stage = pd.Series(stage[new][~is_canonical[new]]).value_counts().to_dict()
    demoted = repointed = 0
    if batch.previous is not None and n_old:
        before = batch.previous
        demoted = int((before["is_canonical"].to_numpy() & ~is_canonical[:n_old]).sum())
        repointed = int((before["dedup_id"].astype(str).to_numpy() != dedup.iloc[:n_old].astype(str).to_numpy()).sum())
    sem = batch.stats.get("semantic", {})
    # a new document that joined a cluster at the exact or fuzzy stage is never embedded
    saved = int(sum(v for k, v in aliases_by_stage.items() if k in ("exact", "fuzzy")))
    return {
        "batch": batch.stats["batch"],
        "inputs": inputs,
        "documents_in": int(n_batch),
        "already_present": int(n_batch - len(new)),
        "new_documents": int(len(new)),
        "new_canonicals": int((is_canonical[new] & keep[new]).sum()),
        "new_aliases": int((~is_canonical[new]).sum()),
        "new_aliases_by_stage": {str(k): int(v) for k, v in aliases_by_stage.items()},
        "new_dropped_by_gates": int((is_canonical[new] & ~keep[new]).sum()),
        "canonicals_demoted": demoted,
        "documents_repointed": repointed,
        "embeddings_computed": int(sem.get("embeddings_computed", 0)),
        "embeddings_saved": saved if sem else 0,
        "chunks_in": 0,
        "unique_chunks": 0,
        "state_documents": int(n),
        "state_canonicals": int((is_canonical & keep).sum()),
        "stages": {k: batch.stats[k] for k in ("fuzzy", "semantic") if k in batch.stats},
        "skipped": batch.prep.table.skipped + batch.stats.get("skipped", []),
    }


def ingest(inputs: list[str] | str, state_dir: str | os.PathLike, config: Config | str | None = None,
           overrides: list[str] | dict | None = None, output: str | os.PathLike | None = None,
           sink=None, batch_only: dict | None = None) -> dict:
    """Deduplicate ``inputs`` against the state in ``state_dir`` and against themselves, then commit.

    Parameters
    ----------
    inputs : files, globs or directories, as for ``run``.
    state_dir : the state directory (created on the first ingest, which fixes the config).
    config, overrides : as for ``run``; for an existing state only keys outside ``FIXED_KEYS`` may change.
    output : also write the batch's annotated records, aliases and summary there (optional).
    sink : a ``rag.RagSink`` written before the state commits (so a crash in between is repaired by
        re-running the batch: the sink's writes are idempotent upserts).
    batch_only : ``{"section.key": value}`` settings for this batch that the state does not keep (how
        to read a run's records when seeding from it).

    Returns the batch summary; its counts are also kept in the state's manifest.
    """
    from .run import Timer
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [str(inputs)]
    inputs = [str(i) for i in inputs]
    root = Path(state_dir)
    timer = Timer()
    start = time.perf_counter()
    with StateLock(root):
        state = State(root)
        state.remove_leftovers()
        cfg = resolve_ingest_config(state, config, overrides)
        batch_cfg = load_config(None, batch_only, base=cfg) if batch_only else cfg
        backend = select(cfg.run.backend)
        with quiet_logs(), Executor(cfg.run.scheduler, cfg.run.workers, cfg.run.progress,
                                    gpus=backend.name == "gpu", memory_limit=cfg.run.memory_limit,
                                    partition_bytes=cfg.input.partition_bytes,
                                    spill_dir=cfg.run.spill_dir or Path(root).resolve().parent) as executor:
            batch = compute_batch(state, batch_cfg, inputs, executor, backend, timer)
            failpoint("computed")
            summary = batch_summary(batch, inputs)
            if sink is not None:
                with timer("sink"):
                    summary["sink"] = sink.write_batch(state, batch, executor)
                failpoint("sink-written")
                _count_sink_embeddings(summary)
            if output is not None:
                with timer("output"):
                    _write_output(batch, Path(output), executor)
        if summary["new_documents"] == 0:  # a re-run of a committed batch: nothing to commit
            log.info("ingest: every document of the batch is already in the state; nothing committed")
        else:
            _commit(state, batch, summary, cfg, timer)
        summary["timings_s"] = timer.times
        summary["wall_time_s"] = round(time.perf_counter() - start, 4)
        log.info("ingest: %d documents in, %d already present, %d new canonicals, %d new aliases, %d embeddings "
                 "computed, %d saved (%.2f s)", summary["documents_in"], summary["already_present"],
                 summary["new_canonicals"], summary["new_aliases"], summary["embeddings_computed"],
                 summary["embeddings_saved"], summary["wall_time_s"])
        return summary


def _count_sink_embeddings(summary: dict) -> None:
    """Add what the sink embedded (documents without a semantic embedding, unique chunks) and saved
    (chunks that duplicate a stored one) to the batch's totals."""
    sink = summary["sink"]
    summary["embeddings_computed"] += sink.get("documents_embedded", 0) + sink.get("chunks_embedded", 0)
    if not summary["stages"].get("semantic"):  # without the stage, the sink is what would embed every document
        summary["embeddings_saved"] = int(sum(v for k, v in summary["new_aliases_by_stage"].items()
                                              if k in ("exact", "fuzzy")))
    summary["embeddings_saved"] += sink.get("chunk_embeddings_saved", 0)
    summary["chunks_in"] = sink.get("chunks_in", 0)
    summary["unique_chunks"] = sink.get("unique_new_chunks", 0)


def _commit(state: State, batch: Batch, summary: dict, cfg: Config, timer) -> None:
    with timer("commit"):
        if batch.model:
            state.manifest["semantic_model"] = batch.model
        info = {k: summary[k] for k in ("inputs", "documents_in", "already_present", "new_documents",
                                        "new_canonicals", "new_aliases", "chunks_in", "unique_chunks",
                                        "embeddings_computed", "embeddings_saved")}
        info["committed_at"] = pd.Timestamp.now(tz="UTC").isoformat()
        state.commit(batch.segment, registry_table(batch), info, cfg.to_dict(), batch.boilerplate)


def _write_output(batch: Batch, output: Path, executor: Executor) -> None:
    """The batch's annotated records, aliases and summary, staged and put in place complete (as ``run``)."""
    from ..engine.tasks import delayed
    from ..io.writer import StagedOutput, write_json, write_partition, write_table
    with StagedOutput(output, batch.cfg.output.overwrite, "ingest") as staged:
        out = staged.path
        table = batch.prep.table
        offs = table.part_offsets
        rows = batch.union.batch_rows
        tasks = [delayed(write_partition)(spec, batch.cfg,
                                          batch.annotations.take(pa.array(rows[offs[p]:offs[p + 1]])),
                                          table.ords[offs[p]:offs[p + 1]], str(out))
                 for p, spec in enumerate(batch.specs)]
        executor.compute(tasks, "write")
        write_table(alias_table(batch.annotations.take(pa.array(rows))), out / "aliases.parquet", batch.cfg)
        write_json({"documents": int(len(rows))}, out / "summary.json")
        staged.commit()


def ingest_run(run_dir: str | os.PathLike, state_dir: str | os.PathLike, sink=None,
               overrides: list[str] | dict | None = None) -> dict:
    """Seed a state (and a sink) from a finished run: its annotated records are ingested as one batch with
    the run's config, reusing its embeddings. The hash-based groups are the run's; the semantic stage
    searches exhaustively where the run searched within k-means clusters."""
    from ..io.writer import read_run_json, require_complete
    run = require_complete(run_dir, "ingest --from-run")  # a run that failed or is being written: refused
    summary = read_run_json(run / "summary.json")
    cfg = load_config(None, overrides, base=load_config(None, flatten(summary["config"])))
    # how to read the run's records; later batches are read with the run's own input settings
    batch_only = {"input.id_field": run_annotation_prefix(summary["config"]) + "doc_id",
                  "input.on_duplicate_id": "error"}
    if (run / "embeddings").is_dir():
        batch_only["semantic.reuse_embeddings"] = str(run)
    return ingest([str(run / "annotations")], state_dir, config=cfg, sink=sink, batch_only=batch_only)
