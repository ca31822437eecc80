"""Chunks of canonical documents for a RAG index, deduplicated across the corpus.

A document is cut top-down: paragraphs (runs of non-blank lines) are packed into chunks of at most
``chunks.max_tokens`` tokens; a paragraph longer than that is cut into windows of words that overlap
by ``chunks.overlap`` tokens. Chunks are then grouped like documents: identical normalized texts
(exact), then word-shingle MinHash + LSH with verified Jaccard at ``chunks.threshold`` (fuzzy). A
boilerplate paragraph shared by thousands of documents is one chunk, stored and embedded once.

Token counts come from the encoder's tokenizer when one is given, otherwise from words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from ..config import ChunksConfig, FuzzyConfig
from ..kernels.hashing import padded_words
from ..stages.fuzzy import FuzzyDedup
from ..stages.sketches import Sketches, signature_partition
from ..stages.normalize import arrow_buffers, normalize

_BLANK_LINE = re.compile(r"\n[ \t\r\f\v]*\n")


def paragraphs(text: str) -> list[str]:
    """Runs of non-blank lines, stripped; empty ones dropped."""
    return [p.strip() for p in _BLANK_LINE.split(text or "") if p.strip()]


class Chunker:
    """``split(texts) -> list[list[str]]``: the chunks of each text, in order.

    Parameters
    ----------
    cfg : ``chunks`` settings (max_tokens, overlap).
    tokenizer : a Hugging Face tokenizer to count tokens; None counts words.
    """

    def __init__(self, cfg: ChunksConfig, tokenizer=None):
        self.cfg, self.tokenizer = cfg, tokenizer

    def _tokens(self, pieces: list[str]) -> np.ndarray:
        if not pieces:
            return np.zeros(0, np.int64)
        if self.tokenizer is None:
            return np.array([len(p.split()) for p in pieces], np.int64)
        ids = self.tokenizer(pieces, add_special_tokens=False, truncation=False)["input_ids"]
        return np.array([len(i) for i in ids], np.int64)

    def split(self, texts: list[str]) -> tuple[list[list[str]], list[list[int]]]:
        """Chunks of each text and their token counts."""
        paras = [paragraphs(t) for t in texts]
        flat = [p for ps in paras for p in ps]
        counts = self._tokens(flat)
        out, out_tokens, k = [], [], 0
        limit = self.cfg.max_tokens
        for ps in paras:
            chunks, tokens, current, current_tokens = [], [], [], 0
            for p in ps:
                t = int(counts[k])
                k += 1
                if t > limit:  # a long paragraph: close the open chunk, then windows of words
                    if current:
                        chunks.append("\n\n".join(current))
                        tokens.append(current_tokens)
                        current, current_tokens = [], 0
                    for window, window_tokens in self._windows(p, t):
                        chunks.append(window)
                        tokens.append(window_tokens)
                    continue
                if current and current_tokens + t > limit:
                    chunks.append("\n\n".join(current))
                    tokens.append(current_tokens)
                    current, current_tokens = [], 0
                current.append(p)
                current_tokens += t
            if current:
                chunks.append("\n\n".join(current))
                tokens.append(current_tokens)
            out.append(chunks)
            out_tokens.append(tokens)
        return out, out_tokens

    def _windows(self, paragraph: str, tokens: int):
        words = paragraph.split()
        per_word = max(tokens / max(len(words), 1), 1e-9)
        size = max(1, int(self.cfg.max_tokens / per_word))
        overlap = min(size - 1, int(self.cfg.overlap / per_word))
        step = max(1, size - overlap)
        for s in range(0, len(words), step):
            window = words[s:s + size]
            yield " ".join(window), int(round(len(window) * per_word))
            if s + size >= len(words):
                break


def chunk_fuzzy_config(cfg: ChunksConfig, seed: int) -> FuzzyConfig:
    """The fuzzy settings of chunk dedup: word shingles of ``chunks.ngram``, verified at ``chunks.threshold``."""
    return FuzzyConfig(threshold=cfg.threshold, ngram=cfg.ngram, shingle="word", verify=True, seed=seed)


@dataclass
class ChunkTexts:
    """Chunks of a set of documents, flattened."""
    doc: np.ndarray  # int64[c] which document (index into the texts given) each chunk is from
    position: np.ndarray  # int64[c] the chunk's position in its document
    text: list  # original chunk text
    tokens: np.ndarray  # int64[c]
    normalized: pa.LargeStringArray
    hashes: np.ndarray  # uint64[c] hash of the normalized chunk (the exact-dedup key)


def chunk_documents(texts: list[str], cfg: ChunksConfig, normalize_cfg, backend, tokenizer=None) -> ChunkTexts:
    """Cut ``texts`` into chunks, drop chunks under ``chunks.min_chars`` normalized characters, hash them."""
    chunks, tokens = Chunker(cfg, tokenizer).split(texts)
    doc = np.concatenate([np.full(len(c), d, np.int64) for d, c in enumerate(chunks)] + [np.empty(0, np.int64)])
    position = np.concatenate([np.arange(len(c), dtype=np.int64) for c in chunks] + [np.empty(0, np.int64)])
    flat = [c for cs in chunks for c in cs]
    flat_tokens = np.array([t for ts in tokens for t in ts], np.int64)
    normalized = normalize(pa.array(flat, pa.large_string()), normalize_cfg)
    long_enough = np.asarray(pa.compute.utf8_length(normalized).to_numpy(zero_copy_only=False)) >= cfg.min_chars
    keep = np.flatnonzero(long_enough)
    normalized = normalized.take(pa.array(keep))
    offsets, data = arrow_buffers(normalized)
    hashes = backend.minhash.text_hashes(offsets, padded_words(data)) if len(keep) else np.empty(0, np.uint64)
    # positions are renumbered over the chunks kept
    doc = doc[keep]
    position = np.concatenate([np.arange(c) for c in np.bincount(doc, minlength=len(texts))]).astype(np.int64) \
        if len(keep) else np.empty(0, np.int64)
    return ChunkTexts(doc, position, [flat[i] for i in keep], flat_tokens[keep], normalized, hashes)


def sketch_chunks(stage: FuzzyDedup, normalized: pa.LargeStringArray) -> Sketches:
    """Band keys and shingle sets of normalized chunk texts."""
    frame = pd.DataFrame({"_text": pd.arrays.ArrowExtensionArray(normalized)})
    keys, offsets, values, sigs = signature_partition(frame, np.ones(len(normalized), bool), stage.params(),
                                                      stage.backend)
    return Sketches(keys, offsets, values, sigs)
