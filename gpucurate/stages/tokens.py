"""Token ids of texts for the semantic encoders, as flat arrays.

A BERT tokenizer (WordPiece with BERT's normalizer and pre-tokenizer: all-MiniLM-L6-v2's) runs as a
compiled kernel over the texts' Arrow buffers (``kernels.wordpiece``): the library's token ids, with no
Python per text, on ``threads`` threads, and each text read only until its ``max_tokens`` tokens. Any
other fast tokenizer runs in Hugging Face's library over batches of texts on ``threads`` threads at once
(its ``encode_batch`` releases the GIL). Either way the output is one flat ``int32`` array of ids and one
array of offsets, so that selecting, padding and pooling are array operations.

For the library, a text is cut before it is tokenized: the encoder sees at most ``max_tokens`` tokens,
and a web page may hold many times that. The cut is at a whitespace after ``CUT_CHARS_PER_TOKEN``
characters per wanted token. Tokenization never joins across whitespace (both the BERT and the
Metaspace/ByteLevel pre-tokenizers split there, and normalizers map characters one by one), so the tokens
of the cut text are a prefix of the whole text's; when that prefix is shorter than the tokens wanted, the
text is tokenized again from ``CHARS_PER_TOKEN_BOUND`` characters per token, which no token exceeds.
"""

from __future__ import annotations

import json
from itertools import chain
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..engine.threads import thread_map
from ..kernels.wordpiece import WordPieceTables

#: a WordPiece token covers at most ~100 characters plus a space, so cutting a (whitespace-collapsed)
#: text after this many characters per token never changes its first ``max_tokens`` tokens
CHARS_PER_TOKEN_BOUND = 128
#: the first cut: English runs about 4.5 characters a token (Reuters: 4.3), so this keeps the second pass rare
CUT_CHARS_PER_TOKEN = 8
#: texts per call of the tokenizer on one thread
TOKENIZE_BATCH = 1024


@dataclass
class Tokens:
    """Tokenized texts, flat: the ids of text ``i`` are ``ids[offsets[i]:offsets[i + 1]]``.

    ``unknown_fraction`` (float64[n]) is the fraction of a text's tokens that are the unknown token and
    ``tokens_per_word`` (float64[n]) its tokens per pre-tokenizer word (both without special tokens). Text
    in a script the model was not trained on shows up as many unknown tokens (Chinese in an English
    WordPiece vocabulary) or as words shattered into single characters (Russian, Korean)."""

    ids: np.ndarray  # int32[total]
    offsets: np.ndarray  # int64[n + 1]
    unknown_fraction: np.ndarray
    tokens_per_word: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def select(self, keep: np.ndarray) -> "Tokens":
        """The texts where ``keep`` (bool[n]) is true, in order."""
        rows = np.flatnonzero(keep)
        lengths = self.lengths[rows]
        offsets = np.zeros(len(rows) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return Tokens(self.ids[ranges(self.offsets[rows], lengths)], offsets, self.unknown_fraction[rows],
                      self.tokens_per_word[rows])

    def padded(self, rows: np.ndarray, width: int, pad: int) -> tuple[np.ndarray, np.ndarray]:
        """``(ids int64[len(rows), width], mask int64[...])`` of ``rows``, right-padded with ``pad``."""
        lengths = self.lengths[rows]
        cols = np.arange(width)
        mask = cols[None, :] < lengths[:, None]
        index = np.where(mask, self.offsets[rows][:, None] + cols[None, :], 0)
        ids = np.where(mask, self.ids[index] if len(self.ids) else 0, pad).astype(np.int64)
        return ids, mask.astype(np.int64)


def ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """int64[lengths.sum()]: the positions ``starts[k] .. starts[k] + lengths[k] - 1`` of every k, in order."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    ends = np.cumsum(lengths)
    shift = np.repeat(starts - (ends - lengths), lengths)
    return np.arange(total, dtype=np.int64) + shift


class TextTokenizer:
    """``tokenize(texts) -> Tokens``: a copy of a fast tokenizer that truncates to ``max_tokens`` tokens
    (special tokens included when ``special``) and never pads.

    Parameters
    ----------
    backend : a ``tokenizers.Tokenizer`` (``PreTrainedTokenizerFast.backend_tokenizer`` or from
        ``tokenizer.json``); it is copied, the original is not changed.
    max_tokens : tokens kept of each text (default MiniLM's 256).
    special : add the model's special tokens ([CLS], [SEP]) as its post-processor says.
    threads : threads that tokenize batches at once.
    """

    def __init__(self, backend, max_tokens: int = 256, special: bool = True, threads: int = 1):
        from tokenizers import Tokenizer
        self.backend = Tokenizer.from_str(backend.to_str())
        self.backend.no_padding()
        self.backend.enable_truncation(max_tokens)
        self.max_tokens, self.special, self.threads = max_tokens, special, max(1, threads or 1)
        model = json.loads(self.backend.to_str())["model"]
        self.unk_id = self.backend.token_to_id(model["unk_token"]) if model.get("unk_token") else None
        self.specials = self.backend.num_special_tokens_to_add(False) if special else 0
        self.wordpiece = WordPieceTables.from_backend(self.backend)
        # the special tokens around a text, and the spellings the library matches in raw text
        content = self.backend.encode("a", add_special_tokens=False).ids
        framed = self.backend.encode("a", add_special_tokens=special).ids
        at = next(k for k in range(len(framed)) if framed[k:k + len(content)] == content)
        self.before, self.after = framed[:at], framed[at + len(content):]
        self.added = [t.content for t in self.backend.get_added_tokens_decoder().values() if t.content]
        self.continuation = _continuation_table(self.backend, model)
        if self.continuation is not None:
            self.special_ids = np.zeros(len(self.continuation), bool)
            self.special_ids[[i for i, t in self.backend.get_added_tokens_decoder().items()
                              if t.special and i < len(self.special_ids) and i != self.unk_id]] = True

    def tokenize(self, texts) -> Tokens:
        """The ids of each text (a list of str or an Arrow string array), truncated, and how well the
        vocabulary covers it (see ``Tokens``)."""
        n = len(texts)
        if n == 0:
            return Tokens(np.zeros(0, np.int32), np.zeros(1, np.int64), np.zeros(0), np.zeros(0))
        wanted = max(0, self.max_tokens - self.specials)
        batches = [(s, min(n, s + TOKENIZE_BATCH)) for s in range(0, n, TOKENIZE_BATCH)]
        if self.wordpiece is None:
            texts = texts.to_pylist() if isinstance(texts, (pa.Array, pa.ChunkedArray)) else texts
            parts = thread_map(lambda b: self._encode(texts[b[0]:b[1]], wanted), batches, self.threads)
            ids, lengths, words, unknown = (np.concatenate([p[k] for p in parts]) for k in range(4))
            content = np.maximum(lengths - self.specials, 0)
        else:
            array = pa.array(texts, pa.large_string()) if not isinstance(texts, (pa.Array, pa.ChunkedArray)) else \
                pc.cast(texts, pa.large_string())
            array = array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array
            ids, content, words, unknown = self._wordpiece(array, batches, wanted)
            ids, lengths = self._framed(ids, content)
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if self.continuation is not None:  # special tokens matched in the text are not content either
            marked = np.concatenate([[0], np.cumsum(self.special_ids[ids])])
            content = lengths - (marked[offsets[1:]] - marked[offsets[:-1]])
        with np.errstate(divide="ignore", invalid="ignore"):
            unknown_fraction = np.where(content > 0, unknown / np.maximum(content, 1), 0.0)
            tokens_per_word = np.where(words > 0, content / np.maximum(words, 1), 0.0)
        return Tokens(ids, offsets, unknown_fraction, tokens_per_word)

    def _wordpiece(self, array: pa.Array, batches: list, wanted: int):
        """The kernel's content tokens of ``array``: ``(ids, lengths, words, unknown)``; texts holding a
        special token's spelling go through the library, which matches it in the raw text."""
        offsets, data = _buffers(array)
        parts = thread_map(lambda b: self.wordpiece.tokenize(offsets[b[0]:b[1] + 1], data, wanted), batches,
                           self.threads)
        ids, lengths, words, unknown = (np.concatenate([p[k] for p in parts]) for k in range(4))
        spelled = np.zeros(len(array), bool)
        for text in self.added:
            spelled |= np.asarray(pc.match_substring(array, text, ignore_case=True).fill_null(False))
        if spelled.any():
            rows = np.flatnonzero(spelled)
            lib = self._encode(array.take(pa.array(rows)).to_pylist(), wanted, special=False)
            starts = np.concatenate([[0], np.cumsum(lengths)])
            pieces, at = [], 0
            lib_starts = np.concatenate([[0], np.cumsum(lib[1])])
            for k, r in enumerate(rows):  # the few texts that spell a special token, spliced in order
                pieces += [ids[starts[at]:starts[r]], lib[0][lib_starts[k]:lib_starts[k + 1]]]
                at = r + 1
            pieces.append(ids[starts[at]:])
            ids = np.concatenate(pieces)
            lengths, words, unknown = lengths.copy(), words.copy(), unknown.copy()
            lengths[rows], words[rows], unknown[rows] = lib[1], lib[2], lib[3]
        return ids.astype(np.int32, copy=False), lengths, words, unknown

    def _framed(self, content_ids: np.ndarray, lengths: np.ndarray):
        """The content tokens with the special tokens before and after each text: ``(ids, lengths)``."""
        if not self.before and not self.after:
            return content_ids, lengths
        b, a = len(self.before), len(self.after)
        framed = lengths + b + a
        starts = np.concatenate([[0], np.cumsum(framed)[:-1]]).astype(np.int64)
        ids = np.empty(int(framed.sum()), np.int32)
        ids[ranges(starts + b, lengths)] = content_ids
        for j, t in enumerate(self.before):
            ids[starts + j] = t
        for j, t in enumerate(self.after):
            ids[starts + b + lengths + j] = t
        return ids, framed

    def _encode(self, texts: list[str], wanted: int, special: bool | None = None):
        """One batch through the library: ``(ids int32[total], lengths int64[n], words int64[n], unknown
        int64[n])``; ``special`` (default: the tokenizer's) adds the special tokens."""
        special = self.special if special is None else special
        limit = wanted + (self.specials if special else 0)
        first = [_cut(t, wanted * CUT_CHARS_PER_TOKEN) for t in texts]
        encodings = self.backend.encode_batch(first, add_special_tokens=special)
        again = [k for k, (t, f, e) in enumerate(zip(texts, first, encodings))
                 if f is not t and len(e.ids) < limit]
        if again:
            bound = self.max_tokens * CHARS_PER_TOKEN_BOUND
            redone = self.backend.encode_batch([texts[k][:bound] for k in again], add_special_tokens=special)
            for k, e in zip(again, redone):
                encodings[k] = e
        # the backend truncates with the special tokens counted; without them, to ``wanted`` here
        lengths = np.fromiter((min(len(e.ids), limit) for e in encodings), np.int64, len(encodings))
        ids = np.fromiter(chain.from_iterable(e.ids[:limit] for e in encodings), np.int32, int(lengths.sum()))
        if self.continuation is not None:  # WordPiece: a word is a token without the ## prefix
            owner = np.repeat(np.arange(len(encodings)), lengths)
            marked = self.special_ids[ids]
            starts = ~self.continuation[ids] & ~marked
            words = np.bincount(owner[starts], minlength=len(encodings))
            unknown = np.bincount(owner[(ids == self.unk_id) & ~marked], minlength=len(encodings))
        else:  # other models: the pre-tokenizer's words as the tokenizer numbers them
            words = np.array([len({w for w in e.word_ids[:limit] if w is not None}) for e in encodings], np.int64)
            unknown = np.array([sum(1 for t in e.ids[:limit] if t == self.unk_id) for e in encodings], np.int64)
        return ids, lengths, words, unknown


def _buffers(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets int64[n + 1], data uint8[...])`` of a large_string array (its slice offset applied)."""
    offsets = np.frombuffer(array.buffers()[1], np.int64)[array.offset:array.offset + len(array) + 1]
    data = array.buffers()[2]
    return offsets, np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)


def _cut(text: str, chars: int) -> str:
    """``text`` up to its last whitespace before ``chars`` characters; the text itself when it is not
    longer or has no whitespace there."""
    if len(text) <= chars:
        return text
    space = max(text.rfind(" ", 0, chars), text.rfind("\n", 0, chars))
    return text[:space] if space > 0 else text


def _continuation_table(backend, model: dict) -> np.ndarray | None:
    """bool[vocabulary]: WordPiece tokens that continue a word (the ``##`` prefix); None for other models."""
    if model.get("type") != "WordPiece":
        return None
    prefix = model.get("continuing_subword_prefix", "##")
    vocab = backend.get_vocab(with_added_tokens=True)
    table = np.zeros(max(vocab.values()) + 1, bool)
    for token, i in vocab.items():
        table[i] = token.startswith(prefix)
    return table


def load_backend(model_dir: Path):
    """The ``tokenizers.Tokenizer`` of a model directory (its ``tokenizer.json``), or None without one."""
    path = Path(model_dir) / "tokenizer.json"
    if not path.is_file():
        return None
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(path))
