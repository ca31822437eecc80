"""Language identification kernel: a supervised fastText model's prediction (top label and probability) for
every text of an Arrow string buffer, with no Python per document and without the GIL.

The prediction is fastText's (``predict(text, k=1)`` of a model trained with character n-grams and
hierarchical softmax, such as lid.176):

* words are the runs between the bytes `` \\n\\r\\t\\v\\f\\0``, and the end-of-sentence word ``</s>`` follows
  the last one (a text is read as one line: newlines separate words, as where the caller replaces them by
  spaces);
* a word of the vocabulary contributes its own input row and its character n-grams' rows; another word its
  n-grams' only (``<word>`` cut into ``minn`` to ``maxn`` code points, FNV-1a hashed into ``bucket`` ids,
  mapped through the model's pruning table; ids it pruned contribute nothing);
* the hidden vector is the mean of those rows; the label is the leaf of the Huffman tree over the labels
  reached with the highest sum of ``log(sigmoid + 1e-5)`` along the path, and its probability that sum's
  exponential.

Rows are summed in float32, as fastText does, but in another order: a vocabulary word's rows are summed
once, when the model is loaded, and the n-gram rows of a word out of the vocabulary once per call (a
direct-mapped cache of 65,536 words), so probabilities agree with fastText's to about 1e-6, not bit for bit
(labels equal on Reuters-21578 and the demo's six languages, ``tests/test_language.py``). One thread runs
50-60 MB/s on Reuters, against 5.7 for fastText's own predict called per document. See ``stages.language``
for the model file.
"""

from __future__ import annotations

import numpy as np

from .hashing import pack_short
from .jit import njit

#: the direct-mapped cache of the n-gram sums of words out of the vocabulary, per call: its slots, the longest
#: word kept in a slot, and the mark of a longer word's length
CACHE_SLOTS = 1 << 16
SHORT_WORD = 16
LONG_WORD = np.uint64(1 << 63)
FNV_OFFSET = np.uint64(2166136261)
FNV_PRIME = np.uint64(16777619)
_LOW32 = np.uint64(0xFFFFFFFF)


@njit(nogil=True, cache=True)
def _is_separator(c):
    return c == 32 or c == 10 or c == 13 or c == 9 or c == 11 or c == 12 or c == 0


@njit(nogil=True, cache=True)
def _fnv_step(h, byte):
    """One byte of fastText's 32-bit FNV-1a, the byte taken as a signed char (held in a uint64)."""
    c = np.uint64(byte) | np.uint64(0xFFFFFF00) if byte >= 128 else np.uint64(byte)
    return ((h ^ c) * FNV_PRIME) & _LOW32


@njit(nogil=True, cache=True)
def fasttext_hash(data, start, end):
    """fastText's hash of ``data[start:end]``: 32-bit FNV-1a over the bytes taken as signed chars."""
    h = FNV_OFFSET
    for i in range(start, end):
        h = _fnv_step(h, data[i])
    return h


@njit(nogil=True, cache=True)
def _find_word(data, start, end, h, slots, word_offsets, word_bytes):
    """The vocabulary index of ``data[start:end]`` (hash ``h``), or -1: open addressing over ``slots``."""
    mask = slots.shape[0] - 1
    s = np.int64(h) & mask
    n = end - start
    while slots[s] >= 0:
        w = slots[s]
        a, b = word_offsets[w], word_offsets[w + 1]
        if b - a == n:
            same = True
            for i in range(n):
                if word_bytes[a + i] != data[start + i]:
                    same = False
                    break
            if same:
                return w
        s = (s + 1) & mask
    return -1


@njit(nogil=True, cache=True)
def _pruned_id(bucket_id, prune_keys, prune_values):
    """The input row of n-gram bucket ``bucket_id`` past the words, or -1 where the model pruned it."""
    mask = prune_keys.shape[0] - 1
    s = (np.int64(bucket_id) * 2654435761) & mask
    while prune_keys[s] >= 0:
        if prune_keys[s] == bucket_id:
            return prune_values[s]
        s = (s + 1) & mask
    return -1


@njit(nogil=True, cache=True)
def add_ngrams(word, n, minn, maxn, bucket, prune_keys, prune_values, nwords, rows, acc):
    """Add the rows of the character n-grams of ``word[:n]`` (``<`` + word + ``>``) into ``acc``; return
    how many."""
    count = 0
    for i in range(n):
        if (word[i] & 0xC0) == 0x80:
            continue
        h = FNV_OFFSET
        j = i
        k = 1
        while j < n and k <= maxn:
            h = _fnv_step(h, word[j])
            j += 1
            while j < n and (word[j] & 0xC0) == 0x80:
                h = _fnv_step(h, word[j])
                j += 1
            if k >= minn and not (k == 1 and (i == 0 or j == n)):
                row = _pruned_id(np.int64(h % np.uint64(bucket)), prune_keys, prune_values)
                if row >= 0:
                    r = nwords + row
                    for d in range(acc.shape[0]):
                        acc[d] += rows[r, d]
                    count += 1
            k += 1
    return count


@njit(nogil=True, cache=True)
def predict_languages(offsets, data, slots, word_offsets, word_bytes, word_sums, word_counts, eos, minn, maxn,
                      bucket, prune_keys, prune_values, rows, output, left, right, labels_out, scores_out):
    """fastText's top label and its probability for each text ``data[offsets[d]:offsets[d + 1]]``.

    Parameters
    ----------
    offsets : int64[n + 1]; data : uint8[m] -- Arrow string buffers (UTF-8).
    slots : int32[2^k] -- vocabulary hash table (word index or -1), keyed by ``fasttext_hash`` of the word.
    word_offsets : int64[nwords + 1]; word_bytes : uint8[...] -- the vocabulary's words.
    word_sums : float32[nwords, dim]; word_counts : int64[nwords] -- each word's own row plus its
        n-grams' rows, summed, and how many rows.
    eos : int -- the index of ``</s>``.
    minn, maxn, bucket : the model's n-gram lengths (code points) and bucket count.
    prune_keys, prune_values : int64[2^k] -- the pruning table (bucket id -> row past the words; key -1 free).
    rows : float32[nrows, dim] -- the decoded input matrix.
    output : float32[nlabels - 1, dim] -- the inner nodes' vectors; left, right : int32[2 nlabels - 1] -- the
        Huffman tree (leaves are the labels, -1 children).
    labels_out : int16[n] -- written: the label index, -1 for a text without words; scores_out :
        float32[n] -- written: its probability (0 without words).
    """
    n_docs = offsets.shape[0] - 1
    dim = rows.shape[1]
    nwords = word_counts.shape[0]
    nlabels = output.shape[0] + 1
    root = 2 * nlabels - 2
    longest = 2
    for d in range(n_docs):
        longest = max(longest, offsets[d + 1] - offsets[d] + 2)
    word = np.empty(longest, np.uint8)
    acc = np.zeros(dim, np.float32)
    hidden = np.zeros(dim, np.float32)
    stack_node = np.empty(2 * nlabels, np.int64)
    stack_score = np.empty(2 * nlabels, np.float64)
    floor = np.log(1e-5)
    # the n-gram sums of the words out of the vocabulary met in this call, a slot per hash (a new word replaces),
    # with the word's length (0: an empty slot) and its rows' count. A word of at most SHORT_WORD bytes is kept
    # in the slot (two words of eight bytes), as reading it where it came first was a cache miss; a longer one
    # is read there (its start kept, its length marked LONG_WORD)
    cache_mask = CACHE_SLOTS - 1
    cache_key = np.zeros((CACHE_SLOTS, 4), np.uint64)
    cache_sums = np.empty((CACHE_SLOTS, dim), np.float32)
    for d in range(n_docs):
        for k in range(dim):
            acc[k] = 0.0
        total = 0
        words = 0
        i = offsets[d]
        end = offsets[d + 1]
        while i < end:
            if _is_separator(data[i]):
                i += 1
                continue
            j = i
            while j < end and not _is_separator(data[j]):
                j += 1
            words += 1
            h = fasttext_hash(data, i, j)
            w = _find_word(data, i, j, h, slots, word_offsets, word_bytes)
            if w >= 0:
                for k in range(dim):
                    acc[k] += word_sums[w, k]
                total += word_counts[w]
            elif not (j - i >= 9 and data[i] == 95 and data[i + 1] == 95 and data[i + 2] == 108
                      and data[i + 3] == 97 and data[i + 4] == 98 and data[i + 5] == 101
                      and data[i + 6] == 108 and data[i + 7] == 95 and data[i + 8] == 95):  # not "__label__"
                # a word out of the vocabulary: its n-grams' rows, from the cache when it was seen before
                c = np.int64(h) & cache_mask
                if j - i <= SHORT_WORD:
                    length = np.uint64(j - i)
                    k0, k1, _ = pack_short(data, i, j - i)
                    hit = cache_key[c, 2] == length and cache_key[c, 0] == k0 and cache_key[c, 1] == k1
                else:
                    length = np.uint64(j - i) | LONG_WORD
                    k0, k1 = np.uint64(i), np.uint64(0)
                    hit = cache_key[c, 2] == length
                    if hit:
                        a = np.int64(cache_key[c, 0])
                        for k in range(j - i):
                            if data[a + k] != data[i + k]:
                                hit = False
                                break
                if not hit:
                    word[0] = 60  # '<'
                    for k in range(j - i):
                        word[k + 1] = data[i + k]
                    word[j - i + 1] = 62  # '>'
                    for k in range(dim):
                        cache_sums[c, k] = 0.0
                    count = add_ngrams(word, j - i + 2, minn, maxn, bucket, prune_keys, prune_values, nwords, rows,
                                       cache_sums[c])
                    cache_key[c, 0], cache_key[c, 1], cache_key[c, 2], cache_key[c, 3] = k0, k1, length, count
                for k in range(dim):
                    acc[k] += cache_sums[c, k]
                total += np.int64(cache_key[c, 3])
            i = j
        if words == 0:
            labels_out[d] = -1
            scores_out[d] = 0.0
            continue
        for k in range(dim):
            acc[k] += word_sums[eos, k]
        total += word_counts[eos]
        for k in range(dim):
            hidden[k] = acc[k] * np.float32(1.0 / total)
        # depth-first search of the tree, pruned by the best leaf so far (fastText's predict with k = 1)
        best_score = -np.inf
        best_label = -1
        top = 0
        stack_node[0] = root
        stack_score[0] = 0.0
        top = 1
        while top > 0:
            top -= 1
            node = stack_node[top]
            score = stack_score[top]
            if score < floor or score < best_score:
                continue
            if left[node] < 0:
                if score > best_score:
                    best_score = score
                    best_label = node
                continue
            f = np.float32(0.0)
            for k in range(dim):
                f += output[node - nlabels, k] * hidden[k]
            p = 1.0 / (1.0 + np.exp(-np.float64(f)))
            # right first on the stack so that the left child is searched first, as fastText does
            stack_node[top] = right[node]
            stack_score[top] = score + np.log(p + 1e-5)
            top += 1
            stack_node[top] = left[node]
            stack_score[top] = score + np.log(1.0 - p + 1e-5)
            top += 1
        labels_out[d] = best_label
        scores_out[d] = np.exp(best_score) if best_label >= 0 else 0.0
