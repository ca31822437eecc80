"""BERT's tokenizer as a compiled kernel over Arrow string buffers: the same token ids as Hugging Face
tokenizers' ``BertNormalizer`` + ``BertPreTokenizer`` + ``WordPiece`` (all-MiniLM-L6-v2's, and BERT's,
``tokenizer.json``), with no Python per text and no GIL.

What it reproduces:

* normalizer: what ``BertNormalizer`` makes of each code point (removed, kept, or a few others: lowercase,
  accents stripped, spaces around CJK ideographs), asked of the tokenizer itself once per machine for
  every code point. It maps characters one by one; only the canonical reordering of combining marks that
  are not nonspacing (a few musical symbols) could differ;
* pre-tokenizer: words split at whitespace, and every punctuation character a word of its own, also as
  the tokenizer classifies each code point;
* WordPiece: the longest vocabulary entry at each position (``##`` before a word's later pieces); a word
  of more than ``max_input_chars_per_word`` characters, or with a position no entry matches, is the
  unknown token.

A text stops at ``limit`` tokens, so a long document costs only what its first tokens take. Texts that
contain a special token's spelling (``[CLS]`` and the like, which Hugging Face matches in the raw text)
are left to the library (``TextTokenizer`` checks for them).
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

from .jit import njit
from .tables import cached_arrays

#: code point classes (low 2 bits: how the normalizer maps it; bits 2-3: how the pre-tokenizer splits it)
REMOVED, SAME, MAPPED = 0, 1, 2
WORD, SPACE, PUNCT = 0, 4, 8
_BASE = np.uint64(0x100000001B3)
_MIX = np.uint64(0x9E3779B97F4A7C15)
def _poly_hash(cps) -> int:
    h = 0
    for c in cps:
        h = (h * int(_BASE) + c) & 0xFFFFFFFFFFFFFFFF
    return h


def char_tables(backend) -> tuple:
    """``(classes uint8[0x110000], mapped_at int32[0x110000], mapped_offsets int64[m + 1], mapped_cps
    int32[...])``: every code point's class and, for the mapped ones, what it becomes, asked of the
    tokenizer's own normalizer and pre-tokenizer (so the tables follow its Unicode version, not Python's).
    About 2 s; cached under ``$GPUCURATE_CACHE_DIR/wordpiece`` by the rules and the library's version."""
    import tokenizers
    spec = json.loads(backend.to_str())
    key = hashlib.sha256(json.dumps([spec.get("normalizer"), spec.get("pre_tokenizer"), tokenizers.__version__],
                                    sort_keys=True).encode()).hexdigest()[:20]
    if key not in _CHAR_TABLES:  # two threads may both make them: the same tables
        _CHAR_TABLES[key] = cached_arrays("wordpiece", f"chars-{key}", ("classes", "mapped_at", "mapped_offsets",
                                                                        "mapped_cps"), lambda: _ask_tokenizer(backend))
    return _CHAR_TABLES[key]


#: the tables of this process, by the key of their rules
_CHAR_TABLES: dict = {}


def _ask_tokenizer(backend) -> tuple:
    normalize, pre_tokenize = backend.normalizer.normalize_str, backend.pre_tokenizer.pre_tokenize_str
    classes = np.zeros(0x110000, np.uint8)
    mapped_at = np.full(0x110000, -1, np.int32)
    offsets, cps = [0], []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:  # surrogates: never in UTF-8
            continue
        c = chr(cp)
        out = normalize(c)
        if out == c:
            classes[cp] = SAME
        elif out:
            classes[cp] = MAPPED
            mapped_at[cp] = len(offsets) - 1
            cps.extend(ord(x) for x in out)
            offsets.append(len(cps))
    # how the pre-tokenizer splits each character between two word characters: "a" c "a" c "a" ...
    for lo in range(0, 0x110000, 1 << 14):
        chars = [cp for cp in range(lo, lo + (1 << 14)) if not 0xD800 <= cp <= 0xDFFF]
        covered = np.zeros(2 * len(chars) + 1, np.int64)  # length of the piece covering each position
        for _, (a, b) in pre_tokenize("a" + "a".join(chr(cp) for cp in chars) + "a"):
            covered[a:b] = b - a
        at = covered[1::2]
        classes[chars] |= np.where(at == 0, SPACE, np.where(at == 1, PUNCT, WORD)).astype(np.uint8)
    offsets = np.array(offsets, np.int64)
    assert np.diff(offsets).max() <= 3, "wordpiece's output bound assumes a character maps to 3 at most"
    return classes, mapped_at, offsets, np.array(cps, np.int32)


class WordPieceTables:
    """A BERT ``tokenizer.json``'s vocabulary and rules as arrays for ``wordpiece``; ``from_backend``
    gives None for a tokenizer of another kind."""

    def __init__(self, backend, vocab: dict, prefix: str, max_chars: int, unk_id: int):
        self.classes, self.mapped_at, self.mapped_offsets, self.mapped_cps = char_tables(backend)
        self.max_chars, self.unk_id = max_chars, unk_id
        tokens = sorted(vocab.items(), key=lambda kv: kv[1])
        self.token_offsets = np.zeros(len(tokens) + 1, np.int64)
        flat = []
        for k, (token, _) in enumerate(tokens):
            flat.extend(ord(x) for x in token)
            self.token_offsets[k + 1] = len(flat)
        self.token_cps = np.array(flat, np.int32)
        self.token_ids = np.array([i for _, i in tokens], np.int32)
        self.max_token_chars = int(np.diff(self.token_offsets).max())
        bits = max(4, int(2 * len(tokens) - 1).bit_length())
        self.shift = 64 - bits
        self.slots = np.full(1 << bits, -1, np.int32)
        for k, (token, _) in enumerate(tokens):
            s = _slot(_poly_hash(ord(x) for x in token), self.shift)
            while self.slots[s] >= 0:
                s = (s + 1) & (len(self.slots) - 1)
            self.slots[s] = k
        self.prefix_hash = np.uint64(_poly_hash(ord(x) for x in prefix))
        self.prefix = np.array([ord(x) for x in prefix], np.int32)
        self.powers = np.ones(max(self.max_token_chars, max_chars) + 2, np.uint64)
        for i in range(1, len(self.powers)):
            self.powers[i] = np.uint64((int(self.powers[i - 1]) * int(_BASE)) & 0xFFFFFFFFFFFFFFFF)

    @classmethod
    def from_backend(cls, backend) -> "WordPieceTables | None":
        """The tables of a ``tokenizers.Tokenizer``, when it is BERT's kind (else None)."""
        spec = json.loads(backend.to_str())
        model, normalizer, pre = spec.get("model") or {}, spec.get("normalizer") or {}, spec.get("pre_tokenizer") or {}
        if model.get("type") != "WordPiece" or pre.get("type") != "BertPreTokenizer" or \
                normalizer.get("type") != "BertNormalizer":
            return None
        vocab = model["vocab"]
        unk = model.get("unk_token")
        if unk not in vocab:
            return None
        return cls(backend, vocab, model.get("continuing_subword_prefix", "##"),
                   int(model.get("max_input_chars_per_word", 100)), vocab[unk])

    def tokenize(self, offsets: np.ndarray, data: np.ndarray, limit: int):
        """``(ids int32[total], lengths int64[n], words int64[n], unknown int64[n])`` of the texts in the
        Arrow buffers ``offsets`` (int64[n + 1]) and ``data`` (uint8), at most ``limit`` tokens each."""
        return wordpiece(offsets, data, limit, self.classes, self.mapped_at, self.mapped_offsets, self.mapped_cps,
                         self.slots, self.shift, self.token_offsets, self.token_cps, self.token_ids, self.powers,
                         self.prefix, self.prefix_hash, self.max_chars, self.unk_id, self.max_token_chars)


def _slot(h: int, shift: int) -> int:
    return ((h * int(_MIX)) & 0xFFFFFFFFFFFFFFFF) >> shift


@njit(nogil=True, cache=True)
def _lookup(h, word, a, b, prefix, prefix_len, slots, shift, token_offsets, token_cps, token_ids):
    """The id of the vocabulary entry spelled by ``prefix[:prefix_len]`` + ``word[a:b]`` (hash ``h``), or -1."""
    mask = slots.shape[0] - 1
    s = np.int64((h * _MIX) >> np.uint64(shift))
    n = b - a
    while slots[s] >= 0:
        k = slots[s]
        o, e = token_offsets[k], token_offsets[k + 1]
        if e - o == n + prefix_len:
            same = True
            for j in range(prefix_len):
                if token_cps[o + j] != prefix[j]:
                    same = False
                    break
            for j in range(n if same else 0):
                if token_cps[o + prefix_len + j] != word[a + j]:
                    same = False
                    break
            if same:
                return token_ids[k]
        s = (s + 1) & mask
    return -1


@njit(nogil=True, cache=True)
def _word_pieces(word, n, out, cursor, end, prefix, prefix_hash, powers, slots, shift, token_offsets, token_cps,
                 token_ids, max_chars, unk_id, max_token_chars):
    """Write the pieces of ``word[:n]`` to ``out[cursor:end]``; returns ``(new cursor, unknown tokens)``."""
    if n > max_chars:
        out[cursor] = unk_id
        return cursor + 1, 1
    # prefix hashes: hash(word[a:b]) = P[b] - P[a] * B^(b-a)
    hashes = np.empty(n + 1, np.uint64)
    hashes[0] = 0
    for i in range(n):
        hashes[i + 1] = hashes[i] * _BASE + np.uint64(word[i])
    start = 0
    first = cursor
    while start < n:
        prefix_len = len(prefix) if start > 0 else 0
        body_max = max_token_chars - prefix_len
        stop = min(n, start + body_max)
        found = -1
        b = stop
        while b > start:
            h = hashes[b] - hashes[start] * powers[b - start]
            if start > 0:
                h = prefix_hash * powers[b - start] + h
            found = _lookup(h, word, start, b, prefix, prefix_len, slots, shift, token_offsets, token_cps, token_ids)
            if found >= 0:
                break
            b -= 1
        if found < 0:  # no entry at this position: the whole word is unknown
            out[first] = unk_id
            return first + 1, 1
        if cursor < end:
            out[cursor] = found
        cursor += 1
        start = b
    return min(cursor, end), 0


@njit(nogil=True, cache=True)
def wordpiece(offsets, data, limit, classes, mapped_at, mapped_offsets, mapped_cps, slots, shift, token_offsets,
              token_cps, token_ids, powers, prefix, prefix_hash, max_chars, unk_id, max_token_chars):
    """``WordPieceTables.tokenize``'s kernel."""
    n = len(offsets) - 1
    # a token holds at least one character, and a character maps to at most 3 (the tables' longest)
    out = np.empty(min(n * limit, 3 * (offsets[n] - offsets[0]) + n) + 16, np.int32)
    lengths = np.zeros(n, np.int64)
    words = np.zeros(n, np.int64)
    unknown = np.zeros(n, np.int64)
    word = np.empty(max_chars + 1, np.int32)
    cursor = 0
    for t in range(n):
        begin = cursor
        end = begin + min(limit, 3 * (offsets[t + 1] - offsets[t]) + 1)
        w = 0  # characters of the current word (counted past the buffer, which holds max_chars + 1)
        i = offsets[t]
        stop = offsets[t + 1]
        while i < stop and cursor < end:
            # one UTF-8 code point
            c = np.int64(data[i])
            if c < 0x80:
                i += 1
            elif c < 0xE0:
                c = ((c & 0x1F) << 6) | (np.int64(data[i + 1]) & 0x3F)
                i += 2
            elif c < 0xF0:
                c = ((c & 0x0F) << 12) | ((np.int64(data[i + 1]) & 0x3F) << 6) | (np.int64(data[i + 2]) & 0x3F)
                i += 3
            else:
                c = ((c & 0x07) << 18) | ((np.int64(data[i + 1]) & 0x3F) << 12) | \
                    ((np.int64(data[i + 2]) & 0x3F) << 6) | (np.int64(data[i + 3]) & 0x3F)
                i += 4
            kind = classes[c] & 3
            if kind == 0:
                continue
            if kind == 1:
                m0, m1 = -1, 0
            else:
                m = mapped_at[c]
                m0, m1 = mapped_offsets[m], mapped_offsets[m + 1]
            k = m0
            while (k < m1 or m0 == -1) and cursor < end:
                o = c if m0 == -1 else np.int64(mapped_cps[k])
                split = classes[o] & 12
                if split == 0:  # a word character
                    if w <= max_chars:
                        word[w] = o
                    w += 1
                else:
                    if w > 0:
                        cursor, unk = _word_pieces(word, w, out, cursor, end, prefix, prefix_hash, powers, slots,
                                                   shift, token_offsets, token_cps, token_ids, max_chars, unk_id,
                                                   max_token_chars)
                        words[t] += 1
                        unknown[t] += unk
                        w = 0
                    if split == 8 and cursor < end:  # punctuation: a word of its own
                        word[0] = o
                        cursor, unk = _word_pieces(word, 1, out, cursor, end, prefix, prefix_hash, powers, slots,
                                                   shift, token_offsets, token_cps, token_ids, max_chars, unk_id,
                                                   max_token_chars)
                        words[t] += 1
                        unknown[t] += unk
                if m0 == -1:
                    break
                k += 1
        if w > 0 and cursor < end:
            cursor, unk = _word_pieces(word, w, out, cursor, end, prefix, prefix_hash, powers, slots, shift,
                                       token_offsets, token_cps, token_ids, max_chars, unk_id, max_token_chars)
            words[t] += 1
            unknown[t] += unk
        lengths[t] = cursor - begin
    return out[:cursor].copy(), lengths, words, unknown
