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
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

import dask
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..config import NormalizeConfig, ParagraphsConfig
from ..engine.executor import Executor
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
    out.attrs["paragraphs"] = {
        "rows": rows, "start": s - offsets[rows], "end": e - offsets[rows],
        "hash": hash_texts(n_off, padded_words(n_data)),
        "norm_chars": pc.utf8_length(norm).to_numpy(zero_copy_only=False).astype(np.int64),
        "raw_chars": pc.utf8_length(spans).to_numpy(zero_copy_only=False).astype(np.int64),
        "doc_chars": pc.utf8_length(raw).to_numpy(zero_copy_only=False).astype(np.int64),
        "seconds": time.perf_counter() - start}
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
    """``run(ddf) -> ddf`` (spans in partition attrs, fused with reading), ``collect(ddf, table, kept,
    executor) -> ParagraphResult`` where ``kept`` is bool[n]: the documents that count."""

    name = "paragraphs"

    def __init__(self, cfg: ParagraphsConfig, backend=None):
        self.cfg, self.backend = cfg, backend

    def run(self, ddf):
        sentences = self.cfg.sentences if self.cfg.unit == "sentences" else 0
        hash_texts = self.backend.minhash.text_hashes if self.backend is not None else text_hashes
        return ddf.map_partitions(paragraph_partition, sentences, hash_texts, meta=ddf._meta)

    def collect(self, ddf, table, kept: np.ndarray, executor: Executor) -> ParagraphResult:
        cfg = self.cfg
        parts = executor.compute([dask.delayed(lambda p: p.attrs["paragraphs"])(p) for p in ddf.to_delayed()],
                                 "paragraphs: collect")
        offs = table.part_offsets
        cat = {k: np.concatenate([d[k] for d in parts]) for k in ("start", "end", "hash", "norm_chars", "raw_chars")}
        rows = np.concatenate([offs[p] + d["rows"] for p, d in enumerate(parts)]).astype(np.int64)
        doc_chars = np.concatenate([d["doc_chars"] for d in parts]).astype(np.int64)
        spans = pd.DataFrame({"row": rows, **cat})
        spans = spans[kept[spans.row.to_numpy()] & (spans.norm_chars >= cfg.min_span_chars)
                      & (spans.norm_chars > 0)]
        # documents per span hash, and the first of them in input order
        per_doc = spans.drop_duplicates(["hash", "row"])
        occurrences = per_doc.groupby("hash").row.agg(["size", "min"])
        repeated = occurrences[occurrences["size"] > cfg.max_occurrences]
        spans = spans.merge(repeated, left_on="hash", right_index=True)
        if cfg.keep == "first":
            spans = spans[spans.row != spans["min"]]
        n = table.n
        cuts: list = [None] * n
        chars_removed = np.zeros(n, np.int64)
        for row, group in spans.sort_values(["row", "start"]).groupby("row", sort=True):
            cuts[row] = np.column_stack((group.start.to_numpy(), group.end.to_numpy())).reshape(-1).tolist()
            chars_removed[row] = int(group.raw_chars.sum())
        left = doc_chars - chars_removed
        drop = (chars_removed > 0) & (left < cfg.min_doc_chars)
        reason = np.full(n, None, dtype=object)
        for r in np.flatnonzero(drop):
            reason[r] = (f"paragraphs: about {left[r]} characters left after removing {len(cuts[r]) // 2} repeated "
                         f"span(s) < min_doc_chars {cfg.min_doc_chars}")
        counted_chars = int(doc_chars[kept].sum())
        stats = {"unit": cfg.unit, "distinct_spans_per_document": int(len(per_doc)),
                 "repeated_spans": int(len(repeated)),
                 "documents_changed": int((chars_removed > 0).sum()), "chars_removed": int(chars_removed.sum()),
                 "chars_in_kept_documents": counted_chars,
                 "share_removed": round(float(chars_removed.sum()) / counted_chars, 5) if counted_chars else 0.0,
                 "dropped": int(drop.sum()), "seconds": round(sum(d["seconds"] for d in parts), 4)}
        return ParagraphResult(cuts, chars_removed, drop, reason, stats)
