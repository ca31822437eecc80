"""Byte-level text kernels over Arrow string buffers."""

from __future__ import annotations

import numpy as np

from .jit import njit


def collapse_whitespace(offsets, data):
    """Trim each text and replace every run of whitespace by one space.

    Whitespace is what Python's ``str.split()`` splits on: ASCII \\t\\n\\v\\f\\r, \\x1c-\\x1f and space,
    U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F and U+3000, so the result
    equals ``" ".join(s.split())`` per text.

    Returns new ``(offsets int64[n + 1], data uint8[m'])``.
    """
    n = len(offsets) - 1
    return collapse_mixed(np.zeros(n + 1, np.int64), data[:0], np.zeros(n, np.bool_), False, offsets, data)


@njit(nogil=True, cache=True, aot=("i8[:], u1[:]",))
def ascii_texts(offsets, data):
    """bool[n]: text ``d`` is pure ASCII (then NFKC leaves it as it is and lowercase is A-Z -> a-z)."""
    n = offsets.shape[0] - 1
    out = np.empty(n, dtype=np.bool_)
    for d in range(n):
        high = 0
        for i in range(offsets[d], offsets[d + 1]):
            high |= data[i]
        out[d] = high < 0x80
    return out


@njit(nogil=True, cache=True, aot=("i8[:], u1[:], b1[:], b1, i8[:], u1[:]",))
def collapse_mixed(offsets, data, ascii, lower_ascii, other_offsets, other_data):
    """``collapse_whitespace`` of texts from two sources, in one pass: text ``d`` is
    ``data[offsets[d]:offsets[d + 1]]`` when ``ascii[d]`` (pure ASCII, lowercased A-Z -> a-z when
    ``lower_ascii``), else the next text of ``other_offsets`` / ``other_data`` (any UTF-8, already
    lowercased by Arrow when asked). An ASCII byte goes through one local table (its lowercase, or a space
    for whitespace), twice as fast as the byte tests; a global table would be reloaded at every access.
    The rare other texts keep the tests written out.

    Returns new ``(offsets int64[n + 1], data uint8[m'])``.
    """
    n = ascii.shape[0]
    byte_map = np.empty(256, dtype=np.uint8)
    for c in range(256):
        ws = c == 32 or 9 <= c <= 13 or 28 <= c <= 31
        byte_map[c] = 32 if ws else c + 32 if lower_ascii and 65 <= c <= 90 else c
    out = np.empty(offsets[n] - offsets[0] + other_offsets[other_offsets.shape[0] - 1] - other_offsets[0] + 1,
                   dtype=np.uint8)
    out_off = np.empty(n + 1, dtype=np.int64)
    w = 0
    j = 0
    out_off[0] = 0
    for d in range(n):
        start_w = w
        prev_space = True  # at the start, whitespace is dropped
        if ascii[d]:
            for i in range(offsets[d], offsets[d + 1]):
                c = byte_map[data[i]]
                ws = c == 32
                # branch-free: write the byte, keep it unless it repeats a space
                out[w] = c
                w += 1 - (ws & prev_space)
                prev_space = ws
        else:
            i, end = other_offsets[j], other_offsets[j + 1]
            j += 1
            while i < end:
                c = other_data[i]
                width = 1
                ws = (c == 32) | ((c >= 9) & (c <= 13)) | ((c >= 28) & (c <= 31))
                if (c == 0xC2) | ((c >= 0xE1) & (c <= 0xE3)):  # lead bytes of U+0085, U+00A0, U+1680, U+2000..
                    if c == 0xC2:
                        if i + 1 < end and (other_data[i + 1] == 0x85 or other_data[i + 1] == 0xA0):
                            ws, width = True, 2
                    elif i + 2 < end:
                        c1 = other_data[i + 1]
                        c2 = other_data[i + 2]
                        if (c == 0xE1 and c1 == 0x9A and c2 == 0x80) or (c == 0xE3 and c1 == 0x80 and c2 == 0x80) or \
                                (c == 0xE2 and ((c1 == 0x80 and (c2 <= 0x8A or c2 == 0xA8 or c2 == 0xA9 or c2 == 0xAF))
                                                or (c1 == 0x81 and c2 == 0x9F))):
                            ws, width = True, 3
                out[w] = 32 if ws else c
                w += 1 - (ws & prev_space)
                prev_space = ws
                i += width
        if w > start_w and prev_space:
            w -= 1
        out_off[d + 1] = w
    return out_off, out[:w]


#: the bytes a blank line may hold besides its newline
_LINE_BLANK = np.zeros(256, dtype=np.bool_)
_LINE_BLANK[[9, 11, 12, 13, 32]] = True


def nonblank_lines(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start offset and 0-based index of every line of ``data`` (uint8) that has a byte other than
    ASCII whitespace. Returns ``(starts int64[k], line_index int64[k])``.

    The newlines are found vectorized; a line's first byte settles it unless that byte is whitespace,
    and only those few lines are scanned (a byte loop over everything ran at 250 MB/s)."""
    newlines = np.flatnonzero(data == 10)
    starts = np.empty(len(newlines) + 1, dtype=np.int64)
    starts[0] = 0
    starts[1:] = newlines + 1
    ends = np.empty_like(starts)
    ends[:-1] = newlines
    ends[-1] = len(data)
    nonempty = ends > starts
    first = data[np.minimum(starts, max(len(data) - 1, 0))] if len(data) else np.zeros(len(starts), np.uint8)
    keep = nonempty & ~_LINE_BLANK[first]
    doubtful = np.flatnonzero(nonempty & ~keep)
    if len(doubtful):
        keep[doubtful] = _has_nonblank(data, starts[doubtful], ends[doubtful])
    index = np.flatnonzero(keep)
    return starts[index], index.astype(np.int64)


@njit(nogil=True, cache=True)
def _has_nonblank(data, starts, ends):
    out = np.zeros(starts.shape[0], dtype=np.bool_)
    for k in range(starts.shape[0]):
        for i in range(starts[k], ends[k]):
            if not _LINE_BLANK[data[i]]:
                out[k] = True
                break
    return out


@njit(nogil=True, cache=True, aot=("u1[:]",))
def find_final_sigma(data):
    """Byte offset of the first U+03C2 GREEK SMALL LETTER FINAL SIGMA (UTF-8 ``CF 82``) in ``data``
    (uint8), or -1. ``CF`` is always a lead byte, so ``CF 82`` is that character wherever it occurs."""
    for i in range(data.shape[0] - 1):
        if data[i] == 0xCF and data[i + 1] == 0x82:
            return i
    return -1


@njit(nogil=True, cache=True)
def fold_final_sigma(data, start):
    """In place: every final sigma ς (``CF 82``) at or after ``start`` becomes σ (``CF 83``, same length)."""
    for i in range(start, data.shape[0] - 1):
        if data[i] == 0xCF and data[i + 1] == 0x82:
            data[i + 1] = 0x83


@njit(nogil=True, cache=True, aot=("i8[:], u1[:]",))
def word_and_char_counts(offsets, data):
    """Words (single-space separated, as normalized text is) and code points of each text, in one pass
    over the bytes. Returns ``(words int64[n], chars int64[n])``; both 0 for an empty text."""
    n = offsets.shape[0] - 1
    words = np.zeros(n, dtype=np.int64)
    chars = np.zeros(n, dtype=np.int64)
    for d in range(n):
        start, end = offsets[d], offsets[d + 1]
        if end == start:
            continue
        spaces = 0
        points = 0
        for i in range(start, end):
            c = data[i]
            spaces += c == 32
            points += (c & 0xC0) != 0x80
        words[d] = spaces + 1
        chars[d] = points
    return words, chars


@njit(nogil=True, cache=True, inline="always")
def _spaceless(cp):
    """Whether code point ``cp`` is a letter of a script written without spaces between words: Thai, Lao,
    Tibetan, Myanmar, Khmer, kana, CJK ideographs (Hangul is written with spaces)."""
    return (0x0E00 <= cp <= 0x0FFF or 0x1000 <= cp <= 0x109F or 0x1780 <= cp <= 0x17FF
            or 0x3040 <= cp <= 0x30FF or 0x31F0 <= cp <= 0x31FF or 0x3400 <= cp <= 0x4DBF
            or 0x4E00 <= cp <= 0x9FFF or 0xF900 <= cp <= 0xFAFF or 0xFF66 <= cp <= 0xFF9F
            or 0x20000 <= cp <= 0x3FFFF)


@njit(nogil=True, cache=True, aot=("i8[:], u1[:]",))
def spaceless_texts(offsets, data):
    """bool[n]: most of text ``d``'s letters are of scripts written without spaces (``_spaceless``), against
    the others: ASCII letters and the other code points past U+007F, but for general and CJK punctuation
    (U+2000-U+206F, U+3000-U+303F) and the full-width forms' punctuation and digits. Digits, ASCII
    punctuation and whitespace count for neither. ``fuzzy.shingle: auto`` gives such texts character
    shingles."""
    n = offsets.shape[0] - 1
    out = np.zeros(n, dtype=np.bool_)
    for d in range(n):
        spaceless = 0
        other = 0
        i, end = offsets[d], offsets[d + 1]
        while i < end:
            c = np.int64(data[i])
            if c < 0x80:
                other += (65 <= c <= 90) | (97 <= c <= 122)
                i += 1
                continue
            width = 2 if c < 0xE0 else 3 if c < 0xF0 else 4
            cp = c & (0x1F if width == 2 else 0x0F if width == 3 else 0x07)
            for t in range(1, min(width, end - i)):
                cp = (cp << 6) | (np.int64(data[i + t]) & 0x3F)
            if _spaceless(cp):
                spaceless += 1
            elif not (0x2000 <= cp <= 0x206F or 0x3000 <= cp <= 0x303F or 0xFF00 <= cp <= 0xFF20
                      or 0xFF3B <= cp <= 0xFF40 or 0xFF5B <= cp <= 0xFF65):
                other += 1
            i += width
        out[d] = spaceless > other
    return out


@njit(nogil=True, cache=True, aot=("u1[:], i8, i8",))
def space_width(data, i, end):
    """Bytes of the whitespace character at ``i`` (before ``end``), else 0. Whitespace is
    ``collapse_whitespace``'s: what Python's ``str.split()`` splits on."""
    c = data[i]
    if c == 32 or 9 <= c <= 13 or 28 <= c <= 31:
        return 1
    if c == 0xC2:
        if i + 1 < end and (data[i + 1] == 0x85 or data[i + 1] == 0xA0):
            return 2
        return 0
    if 0xE1 <= c <= 0xE3 and i + 2 < end:
        c1, c2 = data[i + 1], data[i + 2]
        if (c == 0xE1 and c1 == 0x9A and c2 == 0x80) or (c == 0xE3 and c1 == 0x80 and c2 == 0x80) or \
                (c == 0xE2 and ((c1 == 0x80 and (c2 <= 0x8A or c2 == 0xA8 or c2 == 0xA9 or c2 == 0xAF))
                                or (c1 == 0x81 and c2 == 0x9F))):
            return 3
    return 0


@njit(nogil=True, cache=True)
def _space_before(out, w, w_start):
    """Bytes of the whitespace character that ends at ``out[w - 1]`` (not before ``w_start``), else 0."""
    for width in (1, 2, 3):
        if w - width >= w_start and (out[w - width] & 0xC0) != 0x80:
            return width if space_width(out, w - width, w) == width else 0
    return 0


@njit(nogil=True, cache=True, aot=("i8[:], u1[:], i8[:], i8[:]",))
def cut_ranges(offsets, data, cut_offsets, cuts):
    """Each text without its byte ranges: text ``d``'s ranges are ``cuts[cut_offsets[d]:cut_offsets[d + 1]]``,
    flat pairs ``[s0, e0, s1, e1, ...]`` of byte offsets into the text, ascending and disjoint. Where a cut
    leaves two separators side by side (whitespace runs), the one before it stays and the one after it
    goes; at the start and at the end of a text, the separator a cut leaves goes.

    Returns new ``(offsets int64[n + 1], data uint8[m'])``."""
    n = offsets.shape[0] - 1
    out = np.empty(offsets[n] - offsets[0], dtype=np.uint8)
    out_off = np.empty(n + 1, dtype=np.int64)
    out_off[0] = 0
    w = 0
    for d in range(n):
        start, end = offsets[d], offsets[d + 1]
        w_start = w
        pos = start
        cut_end = False
        for q in range(cut_offsets[d], cut_offsets[d + 1], 2):
            a, b = start + cuts[q], start + cuts[q + 1]
            for i in range(pos, a):
                out[w] = data[i]
                w += 1
            pos = b
            cut_end = b >= end
            if w == w_start or _space_before(out, w, w_start) > 0:
                while pos < end:
                    width = space_width(data, pos, end)
                    if width == 0:
                        break
                    pos += width
        for i in range(pos, end):
            out[w] = data[i]
            w += 1
        if cut_end:
            width = _space_before(out, w, w_start)
            while width > 0:
                w -= width
                width = _space_before(out, w, w_start)
        out_off[d + 1] = w
    return out_off, out[:w]
