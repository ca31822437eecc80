"""Paragraph-level dedup: spans of text repeated across documents (training data).

Spans are paragraphs of the raw text (runs of non-blank lines) or, with ``paragraphs.unit: sentences``,
groups of ``paragraphs.sentences`` consecutive sentences inside a paragraph (``kernels.gates.
paragraph_spans``). Each span is normalized like the exact stage (NFKC, lowercase, whitespace collapsed)
and hashed with the exact stage's hash. Only documents still kept after dedup and the gates count. A
span found in more than ``max_occurrences`` documents is removed from every one of them except the first
in input order (``keep: first``) or from all (``keep: none``); spans shorter than ``min_span_chars``
normalized characters are never removed. ``paragraph_text`` holds the text after removal,
``paragraph_chars_removed`` how many characters went; a document left with fewer than ``min_doc_chars``
characters is dropped with a reason.

The spans never come to the driver: each partition's spans are exchanged by hash into buckets
(``engine.shuffle``), each bucket counts the documents of its hashes and picks the spans to remove, and
those go back to the partitions of their documents, which turn them into cuts. The driver gets each
document's cuts and counts.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..config import NormalizeConfig, ParagraphsConfig
from ..engine.executor import Executor
from ..engine.partitions import Carried
from ..engine.shuffle import exchange, owner_of
from ..engine.tasks import delayed
from ..kernels.gates import paragraph_spans
from ..kernels.hashing import padded_words
from ..kernels.minhash import text_hashes
from .normalize import arrow_buffers, from_buffers, normalize

_BLANK_RUNS = re.compile(r"\n[ \t\r\f\v]*\n(?:[ \t\r\f\v]*\n)+")


def paragraph_partition(df: pd.DataFrame, sentences: int, hash_texts=text_hashes) -> pd.DataFrame:
    """Spans of every raw text with their hash and lengths, in ``df.attrs["paragraphs"]``: rows, byte
    start/end within the text, hash, normalized characters, raw characters."""
    start = time.perf_counter()
    out = df.copy(deep=False)
    out.attrs = dict(df.attrs)
    raw = pa.chunked_array(df["_text"].array._pa_array).combine_chunks() if len(df) else pa.array([], pa.large_string())
    offsets, data = arrow_buffers(raw)
    rows, s, e = paragraph_spans(offsets, data, sentences)
    lengths = e - s
    span_offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    # byte positions of every span, concatenated
    gather = np.repeat(s - span_offsets[:-1], lengths) + np.arange(span_offsets[-1]) if len(s) else \
        np.empty(0, np.int64)
    spans = from_buffers(span_offsets, data[gather])
    norm = normalize(spans, NormalizeConfig())
    n_off, n_data = arrow_buffers(norm)
    out.attrs["paragraphs"] = Carried({
        "rows": rows, "start": s - offsets[rows], "end": e - offsets[rows],
        "hash": hash_texts(n_off, padded_words(n_data)),
        "norm_chars": pc.utf8_length(norm).to_numpy(zero_copy_only=False).astype(np.int64),
        "raw_chars": pc.utf8_length(spans).to_numpy(zero_copy_only=False).astype(np.int64),
        "doc_chars": pc.utf8_length(raw).to_numpy(zero_copy_only=False).astype(np.int64),
        "seconds": time.perf_counter() - start})
    return out


def apply_cuts(texts: pa.Array, cuts: pa.Array) -> pa.Array:
    """``paragraph_text``: each text without its byte ranges ``cuts`` (a list ``[s0, e0, s1, e1, ...]``
    per text, null for none), blank-line runs left behind folded to one blank line and the ends trimmed."""
    out = []
    for text, cut in zip(texts.to_pylist(), cuts.to_pylist()):
        if not cut:
            out.append(None)
            continue
        raw = (text or "").encode("utf-8")
        keep, pos = [], 0
        for a, b in zip(cut[0::2], cut[1::2]):
            keep.append(raw[pos:a])
            pos = b
        keep.append(raw[pos:])
        out.append(_BLANK_RUNS.sub("\n\n", b"".join(keep).decode("utf-8")).strip())
    return pa.array(out, type=pa.string())


@dataclass
class ParagraphResult:
    cuts: list  # per document: None or [s0, e0, s1, e1, ...] byte ranges to remove
    chars_removed: np.ndarray  # int64[n]
    drop: np.ndarray  # bool[n]
    drop_reason: np.ndarray  # object[n]
    stats: dict


class ParagraphDedup:
    """``run(ddf) -> ddf`` (spans in partition attrs, fused with reading), ``collect(ddf, table, executor,
    apply)``: the cuts of each partition's documents, where the documents kept by the annotations count."""

    name = "paragraphs"

    def __init__(self, cfg: ParagraphsConfig, backend=None):
        self.cfg, self.backend = cfg, backend

    def run(self, ddf):
        sentences = self.cfg.sentences if self.cfg.unit == "sentences" else 0
        hash_texts = self.backend.minhash.text_hashes if self.backend is not None else text_hashes
        return ddf.map_partitions(paragraph_partition, sentences, hash_texts, meta=ddf._meta)

    #: spans per bucket of the exchange by span hash
    spans_per_bucket = 2_000_000

    def collect(self, ddf, table, kept: list, executor: Executor, apply) -> tuple:
        """Repeated spans of the kept documents, found by an exchange on the span hash; each partition of
        ``table`` (``DocParts`` with ``annotations``) then gets its cuts, and ``apply(annotations,
        ParagraphResult) -> annotations`` with them. ``kept``: per partition, a task of its bool mask of the
        documents that count. Returns ``(table, stats)``."""
        cfg = self.cfg
        offs = table.part_offsets
        delayed_parts = ddf.to_delayed()
        sizes = executor.compute([delayed(_span_count)(p) for p in delayed_parts], "paragraphs: count spans")
        n_buckets = max(1, -(-int(sum(sizes)) // self.spans_per_bucket))
        inputs = [(p, kept[q], int(offs[q])) for q, p in enumerate(delayed_parts)]
        by_hash = exchange(executor, _spans_by_hash, inputs, n_buckets, cfg.min_span_chars, desc="paragraphs: split")
        buckets = [delayed(_repeated_spans)(pieces, cfg.max_occurrences, cfg.keep) for pieces in by_hash]
        to_cut = exchange(executor, _cuts_by_partition, [(b,) for b in buckets], len(delayed_parts), offs,
                          desc="paragraphs: repeated spans")
        cuts = [delayed(_partition_cuts)(p, pieces, int(offs[q]), cfg.min_doc_chars)
                for q, (p, pieces) in enumerate(zip(delayed_parts, to_cut))]
        table = table.update(executor, _apply_cuts, "paragraphs: repeated spans", cuts, apply=apply)
        results = executor.compute(table.map(_cut_counts) + [delayed(_bucket_counts)(b) for b in buckets],
                                   "paragraphs: count")
        per_part, counts = results[:len(delayed_parts)], results[len(delayed_parts):]
        chars_removed = sum(r["chars_removed"] for r in per_part)
        counted_chars = sum(r["chars_in_kept_documents"] for r in per_part)
        stats = {"unit": cfg.unit, "distinct_spans_per_document": int(sum(c[0] for c in counts)),
                 "repeated_spans": int(sum(c[1] for c in counts)),
                 "documents_changed": int(sum(r["documents_changed"] for r in per_part)),
                 "chars_removed": int(chars_removed), "chars_in_kept_documents": int(counted_chars),
                 "share_removed": round(float(chars_removed) / counted_chars, 5) if counted_chars else 0.0,
                 "dropped": int(sum(r["dropped"] for r in per_part)),
                 "seconds": round(sum(r["seconds"] for r in per_part), 4), "buckets": n_buckets}
        return table, stats


def _apply_cuts(state: dict, first_row: int, cut: dict, *, apply) -> dict:
    kept = np.asarray(state["annotations"].column("keep"))
    result = ParagraphResult(cut["cuts"], cut["chars_removed"], cut["drop"], cut["reason"], {})
    return {"annotations": apply(state["annotations"], result),
            "paragraph_counts": {"chars_removed": int(cut["chars_removed"].sum()),
                                 "chars_in_kept_documents": int(cut["doc_chars"][kept].sum()),
                                 "documents_changed": int((cut["chars_removed"] > 0).sum()),
                                 "dropped": int(cut["drop"].sum()), "seconds": cut["seconds"]}}


def _cut_counts(state: dict, first_row: int) -> dict:
    return state["paragraph_counts"]


def _span_count(df: pd.DataFrame) -> int:
    return len(df.attrs["paragraphs"]["hash"])


def _spans_by_hash(df: pd.DataFrame, kept: np.ndarray, first_row: int, n_buckets: int, min_span_chars: int) -> tuple:
    """The spans that count (of kept documents, long enough, not empty) as frames ``(hash, row, start, end,
    raw_chars)`` with table rows, one per bucket (``hash % n_buckets``)."""
    d = df.attrs["paragraphs"]
    spans = pd.DataFrame({"hash": d["hash"], "row": first_row + d["rows"].astype(np.int64), "start": d["start"],
                          "end": d["end"], "raw_chars": d["raw_chars"]})
    use = kept[d["rows"]] & (d["norm_chars"] >= min_span_chars) & (d["norm_chars"] > 0)
    spans = spans[use]
    bucket = (spans["hash"].to_numpy() % np.uint64(n_buckets)).astype(np.int64)
    return tuple(spans[bucket == b] for b in range(n_buckets))


def _repeated_spans(pieces: list, max_occurrences: int, keep: str) -> tuple:
    """The spans of one bucket's hashes found in more than ``max_occurrences`` documents, less each one's
    first document with ``keep: first``; with the bucket's distinct (hash, document) and repeated-hash
    counts."""
    spans = pd.concat(pieces, ignore_index=True)
    per_doc = spans.drop_duplicates(["hash", "row"])
    occurrences = per_doc.groupby("hash").row.agg(["size", "min"])
    repeated = occurrences[occurrences["size"] > max_occurrences]
    spans = spans.merge(repeated, left_on="hash", right_index=True)
    if keep == "first":
        spans = spans[spans.row != spans["min"]]
    return spans[["row", "start", "end", "raw_chars"]], len(per_doc), len(repeated)


def _bucket_counts(bucket: tuple) -> tuple:
    return bucket[1], bucket[2]


def _cuts_by_partition(bucket: tuple, n_parts: int, offsets: np.ndarray) -> tuple:
    spans = bucket[0]
    part = owner_of(offsets, spans["row"].to_numpy())
    return tuple(spans[part == q] for q in range(n_parts))


def _partition_cuts(df: pd.DataFrame, pieces: list, first_row: int, min_doc_chars: int) -> dict:
    """One partition's cuts (byte ranges to remove, per document), characters removed and drops."""
    d = df.attrs["paragraphs"]
    n = len(d["doc_chars"])
    cuts: list = [None] * n
    chars_removed = np.zeros(n, np.int64)
    spans = pd.concat(pieces, ignore_index=True)
    for row, group in spans.sort_values(["row", "start"]).groupby("row", sort=True):
        cuts[row - first_row] = np.column_stack((group.start.to_numpy(), group.end.to_numpy())).reshape(-1).tolist()
        chars_removed[row - first_row] = int(group.raw_chars.sum())
    doc_chars = np.asarray(d["doc_chars"], dtype=np.int64)
    left = doc_chars - chars_removed
    drop = (chars_removed > 0) & (left < min_doc_chars)
    reason = np.full(n, None, dtype=object)
    for r in np.flatnonzero(drop):
        reason[r] = (f"paragraphs: about {left[r]} characters left after removing {len(cuts[r]) // 2} repeated "
                     f"span(s) < min_doc_chars {min_doc_chars}")
    return {"cuts": cuts, "chars_removed": chars_removed, "drop": drop, "reason": reason, "doc_chars": doc_chars,
            "seconds": d["seconds"]}
