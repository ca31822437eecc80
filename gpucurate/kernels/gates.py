"""Kernels of the quality and contamination gates over Arrow string buffers (offsets + UTF-8 bytes).

* ``quality_stats``: per-document statistics of the raw text for the Gopher-style quality rules.
* ``ngram_hashes`` / ``ngram_matches``: word n-gram hashes of texts normalized for contamination (NFKC,
  lowercase, punctuation removed, whitespace collapsed, so words are separated by single spaces), and
  their lookup in the sorted table of benchmark n-gram hashes (binary search).

The n-gram hash of words ``w_i .. w_{i+m-1}``: ``h = seed + m``, then ``h = fold(h, hash_bytes(w))``
for each word, then ``fmix64(h)``; ``reference_ngram_hash`` is the plain-Python specification.
"""

from __future__ import annotations

import numpy as np

from .hashing import U64, fmix64, fold, hash_bytes, reference_fmix64, reference_fold, reference_hash_bytes
from .jit import njit

#: seed of the contamination word hashes and n-gram folds
NGRAM_SEED = U64(0xC0A7A1A7)

#: columns of ``quality_stats``
QUALITY_STATS = ("words", "mean_word_length", "symbol_word_ratio", "ellipsis_line_fraction",
                 "bullet_line_fraction", "duplicate_line_fraction", "top_2gram_fraction", "top_3gram_fraction",
                 "top_4gram_fraction", "alpha_word_fraction")


def reference_ngram_hash(words: list[bytes]) -> int:
    h = (int(NGRAM_SEED) + len(words)) & ((1 << 64) - 1)
    for w in words:
        h = reference_fold(h, reference_hash_bytes(w, int(NGRAM_SEED)))
    return reference_fmix64(h)


@njit(nogil=True, cache=True)
def _word_bounds(data, start, end, starts, ends):
    """Words of ``data[start:end]`` separated by single spaces (normalized text); returns the count."""
    nw = 0
    i = start
    while i < end:
        j = i
        while j < end and data[j] != 32:
            j += 1
        if j > i:
            starts[nw] = i
            ends[nw] = j
            nw += 1
        i = j + 1
    return nw


@njit(nogil=True, cache=True)
def ngram_hashes(offsets, data, words, n):
    """All word n-gram hashes of each text; a text of 1..n-1 words gives one hash of all its words.

    Returns ``(doc int64[e], hash uint64[e], length int64[e])`` in text order.
    """
    n_docs = offsets.shape[0] - 1
    total = 0
    for d in range(n_docs):
        total += offsets[d + 1] - offsets[d] + 1
    doc = np.empty(total, np.int64)
    out = np.empty(total, np.uint64)
    length = np.empty(total, np.int64)
    starts = np.empty(total // 2 + 2, np.int64)
    ends = np.empty(total // 2 + 2, np.int64)
    wh = np.empty(total // 2 + 2, np.uint64)
    e = 0
    for d in range(n_docs):
        nw = _word_bounds(data, offsets[d], offsets[d + 1], starts, ends)
        if nw == 0:
            continue
        for w in range(nw):
            wh[w] = hash_bytes(words, starts[w], ends[w], NGRAM_SEED)
        m = n if nw >= n else nw
        for i in range(nw - m + 1):
            h = NGRAM_SEED + U64(m)
            for j in range(m):
                h = fold(h, wh[i + j])
            doc[e] = d
            out[e] = fmix64(h)
            length[e] = m
            e += 1
    return doc[:e], out[:e], length[:e]


@njit(nogil=True, cache=True)
def ngram_matches(offsets, data, words, lengths, table):
    """Word m-grams (m in ``lengths``) of each text whose hash is in the sorted ``table``.

    Returns ``(doc int64[k], table_index int64[k] of the first equal entry, start int64[k], end
    int64[k])``: byte span of the matched words in the text buffer.
    """
    n_docs = offsets.shape[0] - 1
    cap = 1024
    doc = np.empty(cap, np.int64)
    where = np.empty(cap, np.int64)
    span_s = np.empty(cap, np.int64)
    span_e = np.empty(cap, np.int64)
    max_words = 1
    for d in range(n_docs):
        max_words = max(max_words, (offsets[d + 1] - offsets[d]) // 2 + 2)
    starts = np.empty(max_words, np.int64)
    ends = np.empty(max_words, np.int64)
    wh = np.empty(max_words, np.uint64)
    k = 0
    n_table = table.shape[0]
    for d in range(n_docs):
        nw = _word_bounds(data, offsets[d], offsets[d + 1], starts, ends)
        for w in range(nw):
            wh[w] = hash_bytes(words, starts[w], ends[w], NGRAM_SEED)
        for li in range(lengths.shape[0]):
            m = lengths[li]
            for i in range(nw - m + 1):
                h = NGRAM_SEED + U64(m)
                for j in range(m):
                    h = fold(h, wh[i + j])
                h = fmix64(h)
                lo = 0
                hi = n_table
                while lo < hi:  # first entry >= h
                    mid = (lo + hi) >> 1
                    if table[mid] < h:
                        lo = mid + 1
                    else:
                        hi = mid
                if lo < n_table and table[lo] == h:
                    if k == cap:
                        cap *= 2
                        doc = np.concatenate((doc, np.empty(cap - k, np.int64)))
                        where = np.concatenate((where, np.empty(cap - k, np.int64)))
                        span_s = np.concatenate((span_s, np.empty(cap - k, np.int64)))
                        span_e = np.concatenate((span_e, np.empty(cap - k, np.int64)))
                    doc[k] = d
                    where[k] = lo
                    span_s[k] = starts[i]
                    span_e[k] = ends[i + m - 1]
                    k += 1
    return doc[:k], where[:k], span_s[:k], span_e[:k]


@njit(nogil=True, cache=True, aot=("u1[:], i8, i8",))
def _is_space(data, i, end):
    """Width of the whitespace character at ``i`` (ASCII whitespace or U+00A0), else 0."""
    c = data[i]
    if c == 32 or (9 <= c <= 13):
        return 1
    if c == 0xC2 and i + 1 < end and data[i + 1] == 0xA0:
        return 2
    return 0


@njit(nogil=True, cache=True, aot=("u8[:], i4[:], i8, i8, i8, u8[:]",))
def _top_ngram_fraction(wh, wlen, nw, n, total_chars, buf):
    """Fraction of word characters covered by the most frequent word n-gram (0 if none repeats)."""
    if nw < n or total_chars == 0:
        return 0.0
    m = nw - n + 1
    for i in range(m):
        h = U64(n)
        for j in range(n):
            h = fold(h, wh[i + j])
        buf[i] = h
    order = np.argsort(buf[:m], kind="mergesort")
    best_count = 1
    best_first = -1
    run = 1
    for r in range(1, m + 1):
        if r < m and buf[order[r]] == buf[order[r - 1]]:
            run += 1
        else:
            if run > best_count:
                best_count = run
                best_first = order[r - 1]
            run = 1
    if best_first < 0:
        return 0.0
    chars = 0
    for j in range(n):
        chars += wlen[best_first + j]
    return min(1.0, best_count * chars / total_chars)


@njit(nogil=True, cache=True, aot=("i8[:], u1[:], u8[:]",))
def quality_stats(offsets, data, words):
    """``float64[n, len(QUALITY_STATS)]`` statistics of each raw text.

    Words are maximal runs of non-whitespace; word length counts code points; symbols are ``#`` and
    ellipses (``...`` or U+2026); lines are split on ``\\n`` and blank lines are not counted; a bullet line
    starts with ``-``, ``*``, ``•``, ``‣``, ``◦``, ``▪`` or ``●``; a duplicate line repeats an earlier
    line of the text (after trimming); an alphabetic word has an ASCII letter or a non-ASCII character.
    """
    n_docs = offsets.shape[0] - 1
    out = np.zeros((n_docs, 10), np.float64)
    # a text of L bytes has at most L // 2 + 1 words or lines; buf holds line hashes, then n-gram hashes
    max_units = 2
    for d in range(n_docs):
        max_units = max(max_units, (offsets[d + 1] - offsets[d]) // 2 + 2)
    wh = np.empty(max_units, np.uint64)
    wlen = np.empty(max_units, np.int32)
    buf = np.empty(max_units, np.uint64)
    line_h = buf
    for d in range(n_docs):
        start = offsets[d]
        end = offsets[d + 1]
        # words
        nw = 0
        chars = 0
        alpha = 0
        symbols = 0
        i = start
        while i < end:
            sp = _is_space(data, i, end)
            if sp:
                i += sp
                continue
            j = i
            wc = 0
            has_alpha = False
            while j < end and _is_space(data, j, end) == 0:
                c = data[j]
                if (c & 0xC0) != 0x80:
                    wc += 1
                if (65 <= c <= 90) or (97 <= c <= 122) or c >= 0xC0:
                    has_alpha = True
                if c == 35:  # '#'
                    symbols += 1
                if c == 46 and j + 2 < end and data[j + 1] == 46 and data[j + 2] == 46:
                    symbols += 1
                    j += 2
                    wc += 2
                elif c == 0xE2 and j + 2 < end and data[j + 1] == 0x80 and data[j + 2] == 0xA6:
                    symbols += 1
                j += 1
            wh[nw] = hash_bytes(words, i, j, U64(0))
            wlen[nw] = wc
            nw += 1
            chars += wc
            if has_alpha:
                alpha += 1
            i = j
        # lines
        lines = 0
        ellipsis = 0
        bullets = 0
        i = start
        while i <= end:
            j = i
            while j < end and data[j] != 10:
                j += 1
            a = i
            b = j
            while a < b and _is_space(data, a, b):
                a += _is_space(data, a, b)
            while b > a and (data[b - 1] == 32 or (9 <= data[b - 1] <= 13)):
                b -= 1
            if b > a:
                line_h[lines] = hash_bytes(words, a, b, U64(1))
                lines += 1
                if (b - a >= 3 and data[b - 1] == 46 and data[b - 2] == 46 and data[b - 3] == 46) or \
                        (b - a >= 3 and data[b - 3] == 0xE2 and data[b - 2] == 0x80 and data[b - 1] == 0xA6):
                    ellipsis += 1
                c = data[a]
                if c == 45 or c == 42:
                    bullets += 1
                elif c == 0xE2 and b - a >= 3:
                    code = (np.int64(data[a + 1]) << 8) | np.int64(data[a + 2])
                    # U+2022 U+2023 (E2 80 A2/A3), U+25E6 U+25CF (E2 97 A6/8F), U+25AA (E2 96 AA)
                    if code == 0x80A2 or code == 0x80A3 or code == 0x97A6 or code == 0x978F or code == 0x96AA:
                        bullets += 1
            i = j + 1
        dup_lines = 0
        if lines > 1:
            order = np.argsort(line_h[:lines], kind="mergesort")
            for r in range(1, lines):
                if line_h[order[r]] == line_h[order[r - 1]]:
                    dup_lines += 1
        out[d, 0] = nw
        out[d, 1] = chars / nw if nw else 0.0
        out[d, 2] = symbols / nw if nw else 0.0
        out[d, 3] = ellipsis / lines if lines else 0.0
        out[d, 4] = bullets / lines if lines else 0.0
        out[d, 5] = dup_lines / lines if lines else 0.0
        out[d, 6] = _top_ngram_fraction(wh, wlen, nw, 2, chars, buf)
        out[d, 7] = _top_ngram_fraction(wh, wlen, nw, 3, chars, buf)
        out[d, 8] = _top_ngram_fraction(wh, wlen, nw, 4, chars, buf)
        out[d, 9] = alpha / nw if nw else 0.0
    return out


@njit(nogil=True, cache=True)
def _sentence_end(data, j, end):
    """Width of a sentence terminator at ``j`` (. ! ? or the CJK 。！？) followed by whitespace or the end
    of the text, else 0."""
    c = data[j]
    w = 0
    if c == 46 or c == 33 or c == 63:
        w = 1
    elif c == 0xE3 and j + 2 < end and data[j + 1] == 0x80 and data[j + 2] == 0x82:
        return 3  # 。 needs no following space
    elif c == 0xEF and j + 2 < end and data[j + 1] == 0xBC and (data[j + 2] == 0x81 or data[j + 2] == 0x9F):
        return 3  # ！？
    if w and (j + 1 >= end or data[j + 1] == 32 or (9 <= data[j + 1] <= 13)):
        return w
    return 0


@njit(nogil=True, cache=True)
def _grow(a, k):
    return np.concatenate((a, np.empty(a.shape[0], a.dtype))) if k >= a.shape[0] else a


@njit(nogil=True, cache=True)
def _emit(data, d, para_start, para_end, sentences, doc, s_out, e_out, k):
    """Append one paragraph, or its groups of ``sentences`` sentences, to the output arrays."""
    span_start = para_start
    q = para_start
    in_span = 0
    while sentences > 0 and q < para_end:
        w = _sentence_end(data, q, para_end)
        if w == 0:
            q += 1
            continue
        q += w
        in_span += 1
        if in_span == sentences:
            doc, s_out, e_out = _grow(doc, k), _grow(s_out, k), _grow(e_out, k)
            doc[k], s_out[k], e_out[k] = d, span_start, q
            k += 1
            in_span = 0
            while q < para_end and (data[q] == 32 or (9 <= data[q] <= 13)):
                q += 1
            span_start = q
    if span_start < para_end:
        doc, s_out, e_out = _grow(doc, k), _grow(s_out, k), _grow(e_out, k)
        doc[k], s_out[k], e_out[k] = d, span_start, para_end
        k += 1
    return doc, s_out, e_out, k


@njit(nogil=True, cache=True)
def paragraph_spans(offsets, data, sentences):
    """Spans of each raw text: paragraphs, or with ``sentences > 0`` groups of that many consecutive
    sentences inside each paragraph (the last group may be shorter).

    A paragraph is a run of non-blank lines, trimmed; a blank line or an indented line (starting with
    two spaces or a tab, as in newswire text) starts a new one.

    Returns ``(doc int64[s], start int64[s], end int64[s])``, byte offsets into ``data``.
    """
    n_docs = offsets.shape[0] - 1
    doc = np.empty(n_docs * 4 + 16, np.int64)
    s_out = np.empty(n_docs * 4 + 16, np.int64)
    e_out = np.empty(n_docs * 4 + 16, np.int64)
    k = 0
    for d in range(n_docs):
        end = offsets[d + 1]
        i = offsets[d]
        para_start = -1
        para_end = -1
        while i <= end:
            j = i
            while j < end and data[j] != 10:
                j += 1
            a = i  # trim the line
            while a < j and (data[a] == 32 or (9 <= data[a] <= 13)):
                a += 1
            b = j
            while b > a and (data[b - 1] == 32 or (9 <= data[b - 1] <= 13)):
                b -= 1
            indented = b > a and (data[i] == 9 or (a - i >= 2 and data[i] == 32 and data[i + 1] == 32))
            if para_start >= 0 and (b <= a or indented):  # the paragraph so far ends before this line
                doc, s_out, e_out, k = _emit(data, d, para_start, para_end, sentences, doc, s_out, e_out, k)
                para_start = -1
            if b > a:
                if para_start < 0:
                    para_start = a
                para_end = b
            i = j + 1
        if para_start >= 0:
            doc, s_out, e_out, k = _emit(data, d, para_start, para_end, sentences, doc, s_out, e_out, k)
    return doc[:k], s_out[:k], e_out[:k]
