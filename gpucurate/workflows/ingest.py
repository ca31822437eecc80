"""Incremental ingestion: deduplicate a new batch against a persisted state and against itself.

The state (``gpucurate.workflows.state``) is an on-disk index: it keeps, per document, what the global
steps need (text hash, gate results, timestamps), per distinct text what was expensive to compute (LSH band
keys and shingle sets, embeddings), the verified edges, and each document's cluster and annotation. An
ingest reads and hashes only the batch, sketches only texts never seen, and embeds only new canonicals.
Their LSH buckets, verified pairs and nearest embeddings link them to committed documents; the batch then
reads the clusters it touches (its *closure*: whole clusters, so a closed set) and regroups them with the
same rules as a full run. What it reads and holds grows with the batch and the clusters it touches, not
with the collection. So with ``canonical.policy: first`` and the hash-based stages, ``ingest A`` then
``ingest B`` gives the clusters of one run over A+B (tested). Two differences from a run: the semantic
stage compares new embeddings with every stored one instead of within k-means clusters, and an LSH bucket
that grows past ``fuzzy.max_bucket_size`` over several batches keeps the pairs verified while it was smaller
(a run over the whole collection would pair it through anchors only).

A document already in the state (same id, same text) is reported and not added again, so re-running
a batch is idempotent; the same id with another text is an error.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ..stages.annotate import alias_table, annotate, stage_canonicals
from ..engine.backend import select
from ..config import Config, flatten, load_config, resolve_config, run_annotation_prefix
from ..errors import ConfigError, InputError
from ..engine.executor import Executor, quiet_logs
from ..io.reader import plan_partitions, read_documents
from ..io.row_store import read_rows
from ..kernels.pairs import index_of, take_sets
from ..stages.contamination import ContaminationResult
from ..stages.exact import ExactDedup, ExactResult, exact_canonicals, exact_result
from ..stages.fuzzy import FuzzyDedup, FuzzyResult
from ..stages.sketches import Sketches
from ..stages.quality import QualityResult
from ..stages.semantic import SemanticDedup, SemanticResult, keep_priority, keep_rule, semantic_enabled
from ..engine.failpoints import failpoint
from .lsh_index import bucket_entries, stored_bucket_pairs
from . import vector_index
from .vector_index import fit_centroids, search, stored_cells
from .state import (DOC_RECORD, EDGE, MANIFEST, REGISTRY_RECORD, Segment, State, StateLock, doc_quality, id_keys,
                    item_record, vector_record)
from ..stages.table import DocTable, canonicals, split_rows

log = logging.getLogger("gpucurate")

#: config sections and keys that must stay as the state was built with: they decide the stored hashes,
#: sketches, embeddings and groups. Others (input, run, output, contamination, ...) may change per batch.
FIXED_KEYS = ("normalize.", "quality.", "exact.", "fuzzy.", "canonical.", "chunks.", "semantic.enabled",
              "semantic.model", "semantic.threshold", "semantic.min_chars", "semantic.max_tokens",
              "semantic.max_unknown_fraction", "semantic.max_tokens_per_word", "semantic.keep", "semantic.dtype")



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
    if not cfg.exact.enabled:
        raise ConfigError("ingest needs exact.enabled (the state keys documents with the same text as one)")
    for stage in ("paragraphs", "substrings"):
        if getattr(cfg, stage).enabled:
            raise ConfigError(f"ingest does not support {stage}.enabled ({stage} dedup rewrites texts of "
                              "already indexed documents)")
    if cfg.semantic.keep in ("nearest", "farthest"):
        raise ConfigError("ingest compares embeddings exhaustively, without k-means centroids: semantic.keep "
                          "must be policy, first, earliest or longest")
    return cfg


# ------------------------------------------------------------------------------------------------
# the batch's documents


def _batch_records(table: DocTable, exact: ExactResult, quality: QualityResult | None,
                   contamination: ContaminationResult | None, now: pd.Timestamp, batch: int) -> np.ndarray:
    """DOC_RECORD of every batch row."""
    n = table.n
    out = np.zeros(n, DOC_RECORD)
    out["text_hash"], out["timestamp"], out["nbytes"] = exact.hashes, table.timestamps, table.nbytes
    out["words"], out["chars"], out["empty"] = exact.words, exact.chars, exact.empty
    out["quality_rule"], out["lang"] = -1, -1
    if quality is not None:
        out["quality_rule"], out["quality_value"] = quality.rule, quality.value
        if quality.lang is not None:
            out["lang"], out["lang_score"] = quality.lang, quality.lang_score
    if contamination is not None:
        out["contaminated"], out["contamination_drop"] = contamination.contaminated, contamination.drop
    out["ingested_at"], out["batch"] = now.value, batch
    return out


def place_batch(state: State, ids: np.ndarray, hashes: np.ndarray, locate) -> tuple[np.ndarray, np.ndarray]:
    """``(row int64[n], new_rows int64[k])``: the state row of each batch document (a committed one, or a new
    row from ``state.n_rows`` on, in batch order), and the batch rows of the new ones. An id already in the
    state with another text is an error naming the record."""
    n = len(ids)
    rows = np.full(n, -1, np.int64)
    if n and not state.empty:
        keys = id_keys(ids)
        distinct, inverse = np.unique(keys, return_inverse=True)
        found_key, _, found = state.index("ids").find(distinct)
        # each batch position with each stored row of its id's hash (two ids may share a hash)
        pairs = pd.DataFrame({"key": inverse, "pos": np.arange(n)}).merge(
            pd.DataFrame({"key": found_key, "row": found}), on="key")
        which, found = pairs["pos"].to_numpy(np.int64), pairs["row"].to_numpy(np.int64)
        if len(which):  # the same id hash: the same id only when the stored id is the same text
            same = state.doc_ids(found).astype(str) == ids[which].astype(str)
            which, found = which[same], found[same]
            differs = state.records(found)["text_hash"] != hashes[which]
            if differs.any():
                bad = int(which[np.flatnonzero(differs)[0]])
                raise InputError(f"document id {ids[bad]!r} is already in the state with another text; ids must "
                                 f"be stable (a changed document needs a new id) ({locate(bad)})")
            rows[which] = found
    new = np.flatnonzero(rows < 0)
    rows[new] = state.n_rows + np.arange(len(new))
    return rows, new


# ------------------------------------------------------------------------------------------------
# the closure: the documents a batch regroups


@dataclass
class Closure:
    """The batch's new documents and every committed document of the clusters they touch, in row order:
    a closed set, so that grouping it alone gives what grouping the whole collection gives it."""
    rows: np.ndarray  # int64[c] state rows, ascending
    docs: np.ndarray  # DOC_RECORD[c]
    table: DocTable  # ids, timestamps, nbytes of ``rows`` (one partition)
    label: np.ndarray  # object[c] contamination label
    reason: np.ndarray  # object[c] contamination reason
    previous: np.ndarray  # REGISTRY_RECORD of its committed rows (``rows < n_old``), in that order
    n_old: int  # the state's rows before the batch

    @property
    def old(self) -> np.ndarray:
        return self.rows < self.n_old


class _StateFirst(DocTable):
    """A closure's table whose committed documents win every canonical choice over the new ones
    (``run --reference``): the policy orders each group apart, committed first."""

    committed: np.ndarray | None = None

    def policy_key(self, policy: str) -> np.ndarray:
        key = super().policy_key(policy)
        rank = np.empty(len(key), np.int64)
        rank[np.lexsort((np.arange(len(key)), key))] = np.arange(len(key))
        return np.where(self.committed, rank, rank + len(key))


def clusters_of(state: State, rows: np.ndarray) -> np.ndarray:
    """Every committed row of the clusters of ``rows`` (committed), ascending."""
    if not len(rows):
        return np.empty(0, np.int64)
    found, reg = state.index("registry").latest(np.unique(rows))
    if not found.all():
        raise RuntimeError("a committed row has no registry entry")  # a bug, not bad input
    _, _, members = state.index("clusters").find(np.unique(reg["cluster"]).astype(np.uint64))
    return np.unique(members)


def build_closure(state: State, old_rows: np.ndarray, batch_docs: np.ndarray, new_batch_rows: np.ndarray,
                  batch_ids: np.ndarray, batch_label: np.ndarray, batch_reason: np.ndarray,
                  int_ids: bool, state_first: bool = False) -> Closure:
    """The closure of the committed ``old_rows`` (whole clusters, ascending) and the batch's new documents;
    ``state_first``: the committed documents win every canonical choice."""
    n_old = state.n_rows
    k = len(new_batch_rows)
    rows = np.concatenate([old_rows, n_old + np.arange(k, dtype=np.int64)])
    docs = np.concatenate([state.records(old_rows), batch_docs[new_batch_rows]])
    new_ids = batch_ids[new_batch_rows]
    old_ids = state.doc_ids(old_rows) if len(old_rows) else np.empty(0, np.int64 if int_ids else object)
    ids = np.concatenate([old_ids, new_ids]).astype(np.int64) if int_ids else \
        np.array([str(x) for x in np.concatenate([old_ids.astype(object), new_ids.astype(object)])], dtype=object)
    label, reason = state.doc_strings(old_rows) if len(old_rows) else (np.empty(0, object), np.empty(0, object))
    label = np.concatenate([label, batch_label[new_batch_rows]])
    reason = np.concatenate([reason, batch_reason[new_batch_rows]])
    c = len(rows)
    table = (_StateFirst if state_first else DocTable)(rows, ids, docs["timestamp"], docs["nbytes"],
                                                       np.array([0, c], np.int64), int_ids=int_ids)
    if state_first:
        table.committed = rows < n_old
    previous = state.index("registry").latest(old_rows)[1] if len(old_rows) else np.empty(0, REGISTRY_RECORD)
    return Closure(rows, docs, table, label, reason, previous, n_old)


# ------------------------------------------------------------------------------------------------
# fuzzy items: the batch's new ones, their candidate pairs and verified edges


@dataclass
class FreshItems:
    """Fuzzy items first seen in the batch (``first ..``) and the edges they made."""
    first: int
    hashes: np.ndarray  # uint64[m] text hash of each
    sketches: Sketches  # their band keys, shingle sets, SimHashes or signatures
    edge_i: np.ndarray  # int64[e] items of verified candidate pairs at or above the threshold (i < j)
    edge_j: np.ndarray
    edge_score: np.ndarray  # float64[e]
    candidates: int  # candidate pairs verified
    buckets: tuple = ()  # (keys uint64, items int64): their LSH bucket entries (``bucket_entries``)

    def item_of(self, hashes: np.ndarray) -> np.ndarray:
        pos = index_of(self.hashes, hashes)
        return np.where(pos >= 0, self.first + pos, -1)


def _item_dtype(stage: FuzzyDedup):
    return item_record(stage.cfg.method, stage.params().perm_a.shape[0] if stage.score_kind == "minhash" else 0)


def item_sketches(state: State, stage: FuzzyDedup, items: np.ndarray, fresh: FreshItems | None) -> Sketches:
    """Shingle sets (and SimHashes or signatures) of ``items`` (ascending: committed ones, then fresh ones),
    in that order."""
    old = items < state.n_items
    offsets_old, values_old = state.item_sets(items[old])
    local = items[~old] - state.n_items
    sk_new = fresh.sketches if fresh is not None else _no_sketches(stage)
    lengths = np.concatenate([np.diff(offsets_old), np.diff(sk_new.csr_offsets)[local]])
    offsets = np.zeros(len(items) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = np.concatenate([values_old, take_sets(sk_new.csr_offsets, sk_new.csr_values, local)])
    sk = Sketches(np.empty((len(items), 0), np.uint64), offsets, values)
    if stage.cfg.method == "simhash" or stage.score_kind == "minhash":
        records = state.item_records(items[old], _item_dtype(stage))
        if stage.cfg.method == "simhash":
            sk.simhashes = np.empty(len(items), np.uint64)
            sk.simhashes[old], sk.simhashes[~old] = records["simhash"], sk_new.simhashes[local]
        else:
            sk.sigs = np.empty((len(items), sk_new.sigs.shape[1]), np.uint32)
            sk.sigs[old] = records["sig"]
            sk.sigs[~old] = sk_new.sigs[local]
    return sk


def fresh_items(state: State, stage: FuzzyDedup, cfg: Config, prep, batch_table: DocTable, batch_rows: np.ndarray,
                hashes: np.ndarray, executor: Executor, boilerplate, stats: dict) -> tuple[FreshItems, list | None]:
    """Sketch the batch rows ``batch_rows`` (texts ``hashes`` that take part for the first time), pair them
    with the stored items through the LSH index and with each other, and verify the pairs."""
    mask = np.zeros(batch_table.n, bool)
    mask[batch_rows] = True
    frozen = np.asarray(boilerplate, np.uint64) if boilerplate is not None else None
    sk = stage.sketch(prep.ddf, batch_table, mask, executor, frozen)
    if cfg.fuzzy.boilerplate and boilerplate is None:  # the first batch fixes the boilerplate shingles
        boilerplate = sk.boilerplate.tolist()
        stats["fuzzy_boilerplate"] = sk.boilerplate_stats
    # sketch() keeps row order: the items in the order of their batch rows
    order = np.argsort(batch_rows, kind="stable")
    fresh = FreshItems(state.n_items, hashes[order], sk, np.empty(0, np.int64), np.empty(0, np.int64),
                       np.empty(0, np.float64), 0)
    fresh.buckets = keys, items = bucket_entries(sk.keys, fresh.first, np.diff(sk.csr_offsets) > 0)
    pi, pj = stored_bucket_pairs(state.index("bands"), keys, items, cfg.fuzzy.max_bucket_size,
                                 cfg.fuzzy.bucket_anchors)
    involved = np.unique(np.concatenate([pi, pj]))
    local = item_sketches(state, stage, involved, fresh)
    scores = stage.scores(local, np.searchsorted(involved, pi), np.searchsorted(involved, pj), executor)
    edge = scores >= stage.score_threshold - 1e-12
    fresh.edge_i, fresh.edge_j, fresh.edge_score, fresh.candidates = pi[edge], pj[edge], scores[edge], len(pi)
    return fresh, boilerplate


def _stored_edges(index, items: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Edges ``(a, b, score)`` of the committed ``items`` (both ends committed; each edge once, a < b)."""
    which, _, found = index.find(items.astype(np.uint64)) if len(items) else (np.empty(0, np.int64),) * 3
    if not len(which):
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float64)
    a = items[which]
    b = found["other"]
    keep = a < b
    return a[keep], b[keep], found["score"][keep]


# ------------------------------------------------------------------------------------------------
# regrouping the closure


@dataclass
class Grouped:
    exact: ExactResult
    fuzzy: FuzzyResult | None
    semantic: SemanticResult | None
    canonical: np.ndarray  # bool[c] canonical after the exact and fuzzy stages
    registry: np.ndarray  # REGISTRY_RECORD[c]
    stats: dict


def regroup(state: State, cfg: Config, backend, closure: Closure, fresh: FreshItems | None,
            vectors: FreshVectors | None) -> Grouped:
    """The stages' groups of the closure, from its documents and the stored and fresh edges."""
    docs, c = closure.docs, len(closure.rows)
    hashes = docs["text_hash"]
    eligible = docs["quality_rule"] < 0
    policy_key = closure.table.policy_key(cfg.canonical.policy)
    exact_canon = exact_canonicals(hashes, docs["empty"], eligible, policy_key, cfg.exact.enabled)
    exact = ExactResult(hashes, docs["empty"], exact_canon, docs["words"], docs["chars"])
    canonical = (exact_canon == np.arange(c)) & ~docs["empty"] & eligible
    # relations of the closure's documents, for its clusters: the same text, fuzzy and semantic edges
    same = np.lexsort((np.arange(c), hashes))
    first_of = same[np.searchsorted(hashes[same], hashes)]
    link_i, link_j = [first_of], [np.arange(c)]
    stats: dict = {}
    fuzzy = None
    if cfg.fuzzy.enabled:
        stage = FuzzyDedup(cfg.fuzzy, cfg.canonical.policy, backend)
        participants = canonical & participates(cfg, docs)
        p_rows = np.flatnonzero(participants)
        items = fresh.item_of(hashes[p_rows]) if fresh is not None else np.full(len(p_rows), -1, np.int64)
        stored = items < 0
        if stored.any():
            which, _, found = state.index("items").find(hashes[p_rows][stored])
            got = np.full(int(stored.sum()), -1, np.int64)
            got[which] = found
            items[stored] = got
        if (items < 0).any():
            raise RuntimeError("a fuzzy participant has no item")  # a bug, not bad input
        order = np.argsort(items)
        sorted_items = items[order]
        a, b, score = _stored_edges(state.index("edges"), sorted_items[sorted_items < state.n_items])
        from_state = len(a)
        if fresh is not None:
            a = np.concatenate([a, fresh.edge_i])
            b = np.concatenate([b, fresh.edge_j])
            score = np.concatenate([score, fresh.edge_score])
        ia, ib = np.searchsorted(sorted_items, a), np.searchsorted(sorted_items, b)
        inside = (ia < len(items)) & (ib < len(items))
        inside[inside] &= (sorted_items[ia[inside]] == a[inside]) & (sorted_items[ib[inside]] == b[inside])
        if not inside.all():
            raise RuntimeError("an edge leaves its cluster")  # a bug, not bad input
        la, lb = order[ia], order[ib]  # participant positions
        labels = backend.pairs.components(len(p_rows), la, lb)
        canon_rows = canonicals(labels, p_rows, policy_key[p_rows])
        canon_pos = np.searchsorted(p_rows, canon_rows)
        members = np.flatnonzero(canon_pos != np.arange(len(p_rows)))
        similarity = np.ones(len(p_rows), np.float64)
        if len(members):
            need = np.unique(np.concatenate([items[members], items[canon_pos[members]]]))
            sk = item_sketches(state, stage, need, fresh)
            similarity[members] = stage.scores(sk, np.searchsorted(need, items[members]),
                                               np.searchsorted(need, items[canon_pos[members]]))
        fuzzy = FuzzyResult(p_rows, canon_rows, similarity, p_rows[la], p_rows[lb], score, stage.score_kind,
                            stage.score_threshold, stage.bands, stage.rows_per_band, {})
        canonical[p_rows[canon_pos != np.arange(len(p_rows))]] = False
        link_i.append(p_rows[la])
        link_j.append(p_rows[lb])
        stats["fuzzy"] = {"closure_items": int(len(p_rows)), "pairs_from_state": int(from_state),
                          "duplicates": int(len(members))}
    semantic = None
    if vectors is not None:
        semantic, s_links = _semantic_groups(state, cfg, backend, closure, canonical, vectors)
        link_i.append(s_links[0])
        link_j.append(s_links[1])
        stats["semantic"] = dict(semantic.stats)
    exact_c, fuzzy_c, final, fuzzy_sim, semantic_sim, size = stage_canonicals(c, exact, fuzzy, semantic)
    labels = backend.pairs.components(c, np.concatenate(link_i).astype(np.int64), np.concatenate(link_j).astype(np.int64))
    registry = np.zeros(c, REGISTRY_RECORD)
    rows = closure.rows
    registry["cluster"], registry["exact"], registry["fuzzy"], registry["final"] = rows[labels], rows[exact_c], \
        rows[fuzzy_c], rows[final]
    registry["fuzzy_similarity"], registry["semantic_similarity"], registry["cluster_size"] = fuzzy_sim, semantic_sim, size
    return Grouped(exact, fuzzy, semantic, canonical, registry, stats)


def _no_sketches(stage: FuzzyDedup) -> Sketches:
    sk = Sketches(np.empty((0, stage.bands), np.uint64), np.zeros(1, np.int64), np.empty(0, np.uint64))
    if stage.cfg.method == "simhash":
        sk.simhashes = np.empty(0, np.uint64)
    elif stage.score_kind == "minhash":
        sk.sigs = np.empty((0, stage.params().perm_a.shape[0]), np.uint32)
    return sk


def participates(cfg: Config, docs: np.ndarray) -> np.ndarray:
    """bool[c]: documents long enough for the fuzzy stage (``fuzzy.min_length``)."""
    if not cfg.fuzzy.min_length:
        return np.ones(len(docs), bool)
    return (docs["words"] if cfg.fuzzy.shingle == "word" else docs["chars"]) >= cfg.fuzzy.min_length


# ------------------------------------------------------------------------------------------------
# semantic: the batch's new embeddings against the stored ones


@dataclass
class FreshVectors:
    """Texts embedded in the batch (vector items ``first ..``), those that cannot be, and their edges."""
    first: int
    hashes: np.ndarray  # uint64[v]
    vectors: np.ndarray  # float32[v, dim]
    rows: np.ndarray  # int64[v] closure-independent state rows of the documents embedded
    skipped: np.ndarray  # uint64 text hashes never to embed
    edge_a: np.ndarray  # int64[e] vector items (a < b) with cosine at or above the threshold
    edge_b: np.ndarray
    edge_score: np.ndarray
    model: dict | None
    computed: int
    centroids: np.ndarray | None = None  # float32[k, dim] fit by this batch (the state's first)
    cells: tuple | None = None  # (cell uint64, item int64) entries of the ``cells`` index to add


def fresh_vectors(state: State, cfg: Config, backend, executor: Executor, prep, batch_table: DocTable,
                  batch_hashes: np.ndarray, batch_rows_to_embed: np.ndarray, state_rows: np.ndarray) -> FreshVectors:
    """Embed the batch rows ``batch_rows_to_embed`` and search the stored embeddings (``vector_index``)."""
    stage = SemanticDedup(cfg.semantic, cfg.canonical.policy, backend, cfg.run.progress)
    model = state.manifest.get("semantic_model")
    first = state.n_vectors
    empty = FreshVectors(first, np.empty(0, np.uint64), np.empty((0, 1), np.float32), np.empty(0, np.int64),
                         np.empty(0, np.uint64), np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0), model, 0)
    if not len(batch_rows_to_embed):
        return empty
    offs = batch_table.part_offsets
    mask = np.zeros(batch_table.n, bool)
    mask[batch_rows_to_embed] = True
    emb = stage.embed(prep.ddf, batch_table, split_rows(mask, offs), split_rows(batch_hashes, offs), executor)
    if model is not None and emb.model["fingerprint"] != model["fingerprint"]:
        raise ConfigError(f"{state.root}: the encoder differs from the one the state's embeddings were made "
                          "with (model, weights or dtype); start a new state for another model")
    hashes = batch_hashes[emb.rows]
    x = emb.embeddings
    centroids = state.centroids()
    a, b, score = search(state, x, first, cfg.semantic.threshold, backend, stage.device, centroids)
    fresh = FreshVectors(first, hashes, x, state_rows[emb.rows], np.setdiff1d(batch_hashes[batch_rows_to_embed], hashes),
                         a, b, score, emb.model, emb.stats["embeddings_computed"])
    if centroids is None and state.n_vectors + len(x) >= vector_index.IVF_MIN:  # from now on, search through cells
        centroids = fresh.centroids = fit_centroids(state, x, backend, stage.device, cfg.semantic.seed)
        fresh.cells = stored_cells(state, centroids, backend, stage.device)
    if centroids is not None and len(x):
        cells = backend.semantic.assign(x, centroids, 1, stage.device)[0][:, 0].astype(np.uint64)
        items = first + np.arange(len(x), dtype=np.int64)
        fresh.cells = (np.concatenate([fresh.cells[0], cells]), np.concatenate([fresh.cells[1], items])) \
            if fresh.cells is not None else (cells, items)
    return fresh


def _vector_items(state: State, hashes: np.ndarray, vectors: FreshVectors) -> np.ndarray:
    """int64 vector item of each text hash: fresh, committed, or -1 (not embedded)."""
    pos = index_of(vectors.hashes, hashes)
    out = np.where(pos >= 0, vectors.first + pos, -1)
    stored = pos < 0
    if stored.any():
        which, _, found = state.index("vectors").find(hashes[stored])
        got = np.full(int(stored.sum()), -1, np.int64)
        got[which] = found
        out[stored] = got
    return out


def _semantic_groups(state: State, cfg: Config, backend, closure: Closure, canonical: np.ndarray,
                     vectors: FreshVectors) -> tuple[SemanticResult, tuple]:
    """The keep rule over the closure's canonicals, and the links of every semantic edge of its texts (an
    edge stays a link when one end is no longer a canonical: clusters never split)."""
    hashes = closure.docs["text_hash"]
    texts, first_row = np.unique(hashes, return_index=True)
    items = _vector_items(state, texts, vectors)
    embedded = items >= 0
    texts, first_row, items = texts[embedded], first_row[embedded], items[embedded]
    order = np.argsort(items)
    sorted_items = items[order]
    a, b, score = _stored_edges(state.index("vector_edges"), sorted_items[sorted_items < state.n_vectors])
    a = np.concatenate([a, vectors.edge_a])
    b = np.concatenate([b, vectors.edge_b])
    score = np.concatenate([score, vectors.edge_score])
    ta, tb = order[np.searchsorted(sorted_items, a)], order[np.searchsorted(sorted_items, b)]
    if len(a) and not ((items[ta] == a) & (items[tb] == b)).all():
        raise RuntimeError("a semantic edge leaves its cluster")  # a bug, not bad input
    # the keep rule: over the canonicals embedded, with the edges between them at or above the threshold
    can_rows = np.flatnonzero(canonical)
    text_of = index_of(texts, hashes[can_rows])
    rows = can_rows[text_of >= 0]
    local_of_text = np.full(len(texts), -1, np.int64)
    local_of_text[text_of[text_of >= 0]] = np.arange(len(rows))
    la, lb = local_of_text[ta], local_of_text[tb]
    use = (la >= 0) & (lb >= 0) & (score >= cfg.semantic.threshold)
    la, lb, ls = la[use], lb[use], score[use]
    priority = keep_priority(cfg.semantic.keep, cfg.canonical.policy, closure.table, rows, np.zeros(len(rows)))
    canon, similarity = keep_rule(la, lb, ls, priority, rows, backend.semantic.greedy_keep)
    duplicates = int((canon != np.arange(len(rows))).sum())
    stats = {"documents": int(len(rows)), "embeddings_computed": int(vectors.computed),
             "new_embeddings": int(len(vectors.hashes)), "not_embeddable": int(len(vectors.skipped)),
             "edges": int(len(ls)), "new_edges": int(len(vectors.edge_a)), "duplicates": duplicates, "clusters": 0}
    result = SemanticResult(rows, rows[canon], similarity, np.full(len(rows), -1, np.int64),
                            np.zeros(len(rows), np.float32), rows[la], rows[lb], ls, None, vectors.model or {}, stats)
    return result, (first_row[ta], first_row[tb])


def _widened(state: State, closure: Closure, text_hashes: np.ndarray, rebuild) -> Closure:
    """The closure with the clusters of the committed documents whose text is one of ``text_hashes``."""
    more = clusters_of(state, _linked_rows(state, text_hashes))
    if not len(np.setdiff1d(more, closure.rows)):
        return closure
    return rebuild(np.union1d(closure.rows[closure.old], more))


def _linked_rows(state: State, hashes: np.ndarray) -> np.ndarray:
    """Committed rows whose text is one of ``hashes``."""
    if not len(hashes):
        return np.empty(0, np.int64)
    _, _, rows = state.index("texts").find(np.unique(hashes))
    return rows


# ------------------------------------------------------------------------------------------------
# the job


@dataclass
class Batch:
    """What one ingest computed before it commits: the regrouped closure and the new pieces."""
    cfg: Config
    prep: object  # pipeline.Prepared of the batch
    specs: list
    closure: Closure
    annotations: pa.Table  # of the closure, in its order
    previous: pa.Table | None  # the closure's committed rows' annotations before this batch
    batch_rows: np.ndarray  # int64[n] state row of each batch row
    new_batch_rows: np.ndarray  # int64[k] batch rows of the new documents
    segment: Segment
    boilerplate: list | None
    vectors: FreshVectors | None
    stats: dict
    int_ids: bool

    def batch_annotations(self, state: State) -> pa.Table:
        """The annotations of every batch row, in batch order (from the closure, or committed)."""
        pos = np.searchsorted(self.closure.rows, self.batch_rows)
        pos = np.minimum(pos, len(self.closure.rows) - 1)
        inside = self.closure.rows[pos] == self.batch_rows
        if inside.all():
            return self.annotations.take(pa.array(pos))
        committed = state.annotations(self.batch_rows[~inside], self.cfg)
        parts = pa.concat_tables([self.annotations.take(pa.array(pos[inside])).cast(committed.schema), committed])
        order = np.concatenate([np.flatnonzero(inside), np.flatnonzero(~inside)])
        return parts.take(pa.array(np.argsort(order)))


def compute_batch(state: State, cfg: Config, inputs: list[str], executor: Executor, backend, timer,
                  state_first: bool = False) -> Batch:
    """Read, gate and sketch the batch, and regroup the clusters it touches; nothing is written.
    ``state_first``: committed documents win every canonical choice (``reference``)."""
    from .run import _locator, prepare
    report: dict = {}
    with timer("read+normalize"):
        specs = plan_partitions(inputs, cfg.input, report, parallelism=executor.workers)
        locate_key = _locator(specs)
        prep = prepare(read_documents(specs, cfg.input, local=executor.client is None), cfg, executor, backend,
                       locate_key)
    with timer("exact"):
        hashed, _ = ExactDedup(cfg, backend).run(prep.ddf, prep.table, executor)
        exact_b = exact_result(hashed, executor)
    quality_b = prep.quality(executor)
    batch_table = prep.table = prep.table.to_table(executor)  # the batch is held in this process
    contamination_b = None
    if prep.contamination_gate.enabled:
        with timer("contamination"):
            contamination_b = prep.contamination_gate.collect(prep.ddf, batch_table, executor)
    number = len(state.manifest["batches"]) + 1
    now = pd.Timestamp.now(tz="UTC")
    batch_docs = _batch_records(batch_table, exact_b, quality_b, contamination_b, now, number)
    ids = batch_table.ids
    batch_rows, new_batch_rows = place_batch(state, ids, batch_docs["text_hash"],
                                             lambda r: locate_key(batch_table.ords[r]))
    int_ids = bool(state.manifest["int_ids"] and ids.dtype.kind == "i")
    n = batch_table.n
    label = contamination_b.label if contamination_b is not None else np.full(n, None, object)
    reason = contamination_b.drop_reason if contamination_b is not None else np.full(n, None, object)
    stats: dict = {"batch": number}
    new_docs = batch_docs[new_batch_rows]
    new_hashes = np.unique(new_docs["text_hash"])
    boilerplate = state.manifest.get("boilerplate_hashes")

    def rebuild(old_rows: np.ndarray) -> Closure:
        return build_closure(state, old_rows, batch_docs, new_batch_rows, ids, label, reason, int_ids, state_first)

    with timer("closure"):
        closure = rebuild(clusters_of(state, _linked_rows(state, new_hashes)))
    fresh = None
    if cfg.fuzzy.enabled:
        with timer("fuzzy"):
            stage = FuzzyDedup(cfg.fuzzy, cfg.canonical.policy, backend)
            first = regroup(state, dataclasses.replace(cfg, fuzzy=dataclasses.replace(cfg.fuzzy, enabled=False)),
                            backend, closure, None, None)
            # texts that take part in the fuzzy stage for the first time: new exact canonicals long enough,
            # without an item
            take_part = first.canonical & participates(cfg, closure.docs) & ~closure.old
            hashes = closure.docs["text_hash"][take_part]
            if len(hashes):
                which, _, _ = state.index("items").find(hashes)
                known = np.zeros(len(hashes), bool)
                known[which] = True
                new_rows = closure.rows[take_part][~known] - closure.n_old
                fresh, boilerplate = fresh_items(state, stage, cfg, prep, batch_table, new_batch_rows[new_rows], hashes[~known], executor,
                                                 boilerplate, stats)
                linked = np.concatenate([fresh.edge_i, fresh.edge_j])
                linked = np.unique(linked[linked < fresh.first])
                if len(linked):
                    closure = _widened(state, closure, state.item_records(linked, _item_dtype(stage))["hash"],
                                       rebuild)
    vectors = None
    if semantic_enabled(cfg.semantic):
        with timer("semantic"):
            grouped = regroup(state, cfg, backend, closure, fresh, None)
            embed = grouped.canonical & ~closure.old
            hashes = closure.docs["text_hash"]
            # new canonicals whose text was never embedded nor found not embeddable
            wanted = np.unique(hashes[embed])
            known = wanted[state.index("vectors").find(wanted, values=False)[0]]
            to_embed = closure.rows[embed][~np.isin(hashes[embed], known)]
            vectors = fresh_vectors(state, cfg, backend, executor, prep, batch_table, exact_b.hashes,
                                    new_batch_rows[to_embed - closure.n_old], batch_rows)
            linked = np.concatenate([vectors.edge_a, vectors.edge_b])
            linked = np.unique(linked[linked < vectors.first])
            if len(linked):
                stored = read_rows(state.vector_files(), vector_record(vectors.vectors.shape[1]), linked)
                closure = _widened(state, closure, stored["hash"], rebuild)
    with timer("regroup"):
        grouped = regroup(state, cfg, backend, closure, fresh, vectors)
    quality = None
    if quality_b is not None:
        quality = doc_quality(closure.docs, quality_b.limits)
    contamination = None
    if closure.docs["contaminated"].any():
        # the gate's texts and spans of the new documents (the state keeps labels and reasons only)
        stripped, redacted, spans = (np.full(len(closure.rows), None, object) for _ in range(3))
        if contamination_b is not None:
            new_pos = np.flatnonzero(~closure.old)
            stripped[new_pos] = contamination_b.stripped[new_batch_rows]
            redacted[new_pos] = contamination_b.redacted[new_batch_rows]
            spans[new_pos] = contamination_b.spans[new_batch_rows]
        contamination = ContaminationResult(closure.docs["contaminated"], closure.label, stripped,
                                            closure.docs["contamination_drop"], closure.reason, {}, {}, redacted,
                                            spans)
    with timer("annotate"):
        annotations = annotate(closure.table, grouped.exact, grouped.fuzzy, cfg.output, grouped.semantic, quality,
                               contamination)
        previous = state.annotations(closure.rows[closure.old], cfg) if closure.old.any() else None
    segment = _segment(state, cfg, closure, grouped, fresh, vectors, batch_docs, new_batch_rows, ids, label, reason,
                       backend)
    stats.update(grouped.stats)
    if fresh is not None:
        stats["fuzzy"] = dict(stats.get("fuzzy", {}), items=int(state.n_items + len(fresh.hashes)),
                              new_items=int(len(fresh.hashes)), candidate_pairs=int(fresh.candidates),
                              pairs_verified=int(fresh.candidates))
    stats.update(report)
    stats["closure_documents"] = int(len(closure.rows))
    return Batch(cfg, prep, specs, closure, annotations, previous, batch_rows, new_batch_rows, segment, boilerplate,
                 vectors, stats, int_ids)


def _both_ways(a: np.ndarray, b: np.ndarray, score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    keys = np.concatenate([a, b]).astype(np.uint64)
    values = np.zeros(len(keys), EDGE)
    values["other"] = np.concatenate([b, a])
    values["score"] = np.concatenate([score, score])
    return keys, values


def _segment(state: State, cfg: Config, closure: Closure, grouped: Grouped, fresh: FreshItems | None,
             vectors: FreshVectors | None, batch_docs, new_batch_rows, ids, label, reason, backend) -> Segment:
    """The batch's new documents, items, embeddings and index runs."""
    new_docs = batch_docs[new_batch_rows]
    k = len(new_docs)
    first_row = state.n_rows
    new_rows = first_row + np.arange(k, dtype=np.int64)
    contaminated = np.flatnonzero(new_docs["contaminated"])
    strings = pa.table({"row": pa.array(new_rows[contaminated]),
                        "contamination": pa.array(label[new_batch_rows][contaminated], pa.string()),
                        "contamination_reason": pa.array(reason[new_batch_rows][contaminated], pa.string())})
    seg = Segment(first_row, new_docs, ids[new_batch_rows], strings, state.n_items, first_vector=state.n_vectors)
    seg.runs["ids"] = (id_keys(ids[new_batch_rows]), new_rows)
    seg.runs["texts"] = (new_docs["text_hash"], new_rows)
    if fresh is not None:
        stage = FuzzyDedup(cfg.fuzzy, cfg.canonical.policy, backend)
        sk = fresh.sketches
        records = np.zeros(len(fresh.hashes), _item_dtype(stage))
        records["hash"] = fresh.hashes
        if sk.simhashes is not None:
            records["simhash"] = sk.simhashes
        if "sig" in records.dtype.names:
            records["sig"] = sk.sigs
        seg.items, seg.sets = records, (sk.csr_offsets, sk.csr_values)
        seg.runs["items"] = (fresh.hashes, fresh.first + np.arange(len(fresh.hashes), dtype=np.int64))
        seg.runs["bands"] = fresh.buckets
        seg.runs["edges"] = _both_ways(fresh.edge_i, fresh.edge_j, fresh.edge_score)
    if vectors is not None:
        v = len(vectors.hashes)
        if v:
            records = np.zeros(v, vector_record(vectors.vectors.shape[1]))
            records["hash"], records["vector"] = vectors.hashes, vectors.vectors
            seg.vectors = records
        seg.runs["vectors"] = (np.concatenate([vectors.hashes, vectors.skipped]),
                               np.concatenate([vectors.first + np.arange(v, dtype=np.int64),
                                               np.full(len(vectors.skipped), -1, np.int64)]))
        seg.runs["vector_edges"] = _both_ways(vectors.edge_a, vectors.edge_b, vectors.edge_score)
        if vectors.cells is not None:
            seg.runs["cells"] = vectors.cells
        seg.centroids = vectors.centroids
    # the closure's registry entries, and the members of clusters that are new or changed their name
    seg.runs["registry"] = (closure.rows.astype(np.uint64), grouped.registry)
    moved = np.ones(len(closure.rows), bool)
    moved[np.flatnonzero(closure.old)] = closure.previous["cluster"] != grouped.registry["cluster"][closure.old]
    seg.runs["clusters"] = (grouped.registry["cluster"][moved].astype(np.uint64), closure.rows[moved])
    return seg



def batch_summary(batch: Batch, inputs: list[str], state: State) -> dict:
    """Counts of one ingest (documents in, new canonicals, new aliases, embeddings computed and saved)."""
    closure, ann = batch.closure, batch.annotations
    old, new = closure.old, ~closure.old
    is_canonical = np.asarray(ann.column("is_canonical"))
    keep = np.asarray(ann.column("keep"))
    stage = np.asarray(ann.column("drop_stage").to_pylist(), dtype=object)
    aliases_by_stage = pd.Series(stage[new & ~is_canonical]).value_counts().to_dict()
    demoted = repointed = kept_before = 0
    if batch.previous is not None:
        before = batch.previous
        kept_before = int((np.asarray(before.column("is_canonical")) & np.asarray(before.column("keep"))).sum())
        demoted = int((np.asarray(before.column("is_canonical")) & ~is_canonical[old]).sum())
        repointed = int((before.column("dedup_id").to_pandas().astype(str).to_numpy()
                         != ann.column("dedup_id").to_pandas().astype(str).to_numpy()[old]).sum())
    sem = batch.stats.get("semantic", {})
    # a new document that joined a cluster at the exact or fuzzy stage is never embedded
    saved = int(sum(v for k, v in aliases_by_stage.items() if k in ("exact", "fuzzy")))
    n_new = int(new.sum())
    canonicals = state.manifest.get("canonicals", 0) - kept_before + int((is_canonical & keep).sum())
    return {
        "batch": batch.stats["batch"],
        "inputs": inputs,
        "documents_in": int(len(batch.batch_rows)),
        "already_present": int(len(batch.batch_rows) - n_new),
        "new_documents": n_new,
        "new_canonicals": int((is_canonical & keep & new).sum()),
        "new_aliases": int((~is_canonical & new).sum()),
        "new_aliases_by_stage": {str(k): int(v) for k, v in aliases_by_stage.items()},
        "new_dropped_by_gates": int((is_canonical & ~keep & new).sum()),
        "canonicals_demoted": demoted,
        "documents_repointed": repointed,
        "embeddings_computed": int(sem.get("embeddings_computed", 0)),
        "embeddings_saved": saved if sem else 0,
        "chunks_in": 0,
        "unique_chunks": 0,
        "state_documents": int(state.n_rows + n_new),
        "state_canonicals": int(canonicals),
        "documents_regrouped": int(len(closure.rows)),
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
            summary = batch_summary(batch, inputs, state)
            if sink is not None:
                with timer("sink"):
                    summary["sink"] = sink.write_batch(state, batch, executor)
                failpoint("sink-written")
                _count_sink_embeddings(summary)
            if output is not None:
                with timer("output"):
                    _write_output(batch, Path(output), executor, state)
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


def reference(inputs: list[str] | str, state_dir: str | os.PathLike, output: str | os.PathLike,
              config: Config | str | None = None, overrides: list[str] | dict | None = None) -> dict:
    """Deduplicate ``inputs`` against the committed state in ``state_dir`` without adding to it (``run
    --reference``): a document that matches a stored one becomes its alias, and a stored document is never
    an alias of an input one, whatever the canonical policy. Writes the inputs' annotated records, aliases
    and summary to ``output`` (as ``ingest --output``); the state is read under its lock and not written.

    Returns the batch summary (``state_documents`` and ``state_canonicals`` as if it had been committed)."""
    from .run import Timer
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [str(inputs)]
    inputs = [str(i) for i in inputs]
    root = Path(state_dir)
    if not (root / MANIFEST).is_file():
        raise ConfigError(f"{root}: no ingest state to deduplicate against (no {MANIFEST})")
    timer = Timer()
    start = time.perf_counter()
    with StateLock(root):
        state = State(root)
        cfg = resolve_ingest_config(state, config, overrides)
        backend = select(cfg.run.backend)
        with quiet_logs(), Executor(cfg.run.scheduler, cfg.run.workers, cfg.run.progress,
                                    gpus=backend.name == "gpu", memory_limit=cfg.run.memory_limit,
                                    partition_bytes=cfg.input.partition_bytes,
                                    spill_dir=cfg.run.spill_dir or Path(output).resolve().parent) as executor:
            batch = compute_batch(state, cfg, inputs, executor, backend, timer, state_first=True)
            summary = batch_summary(batch, inputs, state)
            with timer("output"):
                _write_output(batch, Path(output), executor, state)
    summary["timings_s"] = timer.times
    summary["wall_time_s"] = round(time.perf_counter() - start, 4)
    log.info("reference: %d documents in, %d already in the state, %d aliases of stored or earlier documents, "
             "%d new canonicals (%.2f s)", summary["documents_in"], summary["already_present"],
             summary["new_aliases"], summary["new_canonicals"], summary["wall_time_s"])
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
        info = {k: summary[k] for k in ("inputs", "documents_in", "already_present", "new_documents",
                                        "new_canonicals", "new_aliases", "chunks_in", "unique_chunks",
                                        "embeddings_computed", "embeddings_saved")}
        info["committed_at"] = pd.Timestamp.now(tz="UTC").isoformat()
        state.manifest["canonicals"] = summary["state_canonicals"]
        model = batch.vectors.model if batch.vectors is not None else None
        state.commit(batch.segment, info, cfg.to_dict(), batch.boilerplate, model, batch.int_ids)


def _write_output(batch: Batch, output: Path, executor: Executor, state: State) -> None:
    """The batch's annotated records, aliases and summary, staged and put in place complete (as ``run``)."""
    from ..engine.tasks import delayed
    from ..io.writer import StagedOutput, write_json, write_partition, write_table
    annotations = batch.batch_annotations(state)
    with StagedOutput(output, batch.cfg.output.overwrite, "ingest") as staged:
        out = staged.path
        table = batch.prep.table
        offs = table.part_offsets
        tasks = [delayed(write_partition)(spec, batch.cfg, annotations.slice(offs[p], offs[p + 1] - offs[p]),
                                          table.ords[offs[p]:offs[p + 1]], str(out))
                 for p, spec in enumerate(batch.specs)]
        executor.compute(tasks, "write")
        write_table(alias_table(annotations), out / "aliases.parquet", batch.cfg)
        write_json({"documents": int(len(batch.batch_rows))}, out / "summary.json")
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
    with _records_with_texts(run, summary["config"]) as records:
        return ingest([records], state_dir, config=cfg, sink=sink, batch_only=batch_only)


@contextmanager
def _records_with_texts(run: Path, summary_config: dict):
    """The folder of the run's part files with the input's columns: its own, or for a run that wrote
    annotations only, a temporary folder of them read back from the inputs a partition at a time."""
    from ..io.readback import RunRecords
    records = RunRecords(run, summary_config, "ingest --from-run")
    if not records.read_back:
        yield str(run / "annotations")
        return
    with tempfile.TemporaryDirectory(prefix="gpucurate-readback-") as tmp:
        for f in records.files:
            pq.write_table(records.table(f), Path(tmp) / f.name)
        yield tmp
