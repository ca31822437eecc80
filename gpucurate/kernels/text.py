"""Byte-level text kernels over Arrow string buffers."""

from __future__ import annotations

import numpy as np
from numba import njit


# byte tables (numba freezes global arrays as constants): ASCII whitespace, and the lead bytes of
# the multi-byte whitespace characters (U+0085, U+00A0: C2; U+1680: E1; U+2000-U+205F: E2; U+3000: E3)
_ASCII_SPACE = np.zeros(256, dtype=np.bool_)
_ASCII_SPACE[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = True
_MULTIBYTE_SPACE_LEAD = np.zeros(256, dtype=np.bool_)
_MULTIBYTE_SPACE_LEAD[[0xC2, 0xE1, 0xE2, 0xE3]] = True


@njit(nogil=True, cache=True)
def collapse_whitespace(offsets, data):
    """Trim each text and replace every run of whitespace by one space.

    Whitespace is what Python's ``str.split()`` splits on: ASCII \\t\\n\\v\\f\\r, \\x1c-\\x1f and space,
    U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F and U+3000, so the result
    equals ``" ".join(s.split())`` per text. The byte tests are written out in the loop (not in a
    helper) because that keeps this loop at hundreds of MB/s.

    Returns new ``(offsets int64[n + 1], data uint8[m'])``.
    """
    n = offsets.shape[0] - 1
    out = np.empty(offsets[n] - offsets[0] + 1, dtype=np.uint8)
    out_off = np.empty(n + 1, dtype=np.int64)
    w = 0
    out_off[0] = 0
    for d in range(n):
        i = offsets[d]
        end = offsets[d + 1]
        start_w = w
        prev_space = True  # at the start, whitespace is dropped
        while i < end:
            c = data[i]
            width = 1
            ws = _ASCII_SPACE[c]
            if _MULTIBYTE_SPACE_LEAD[c]:
                if c == 0xC2:
                    if i + 1 < end and (data[i + 1] == 0x85 or data[i + 1] == 0xA0):
                        ws, width = True, 2
                elif i + 2 < end:
                    c1 = data[i + 1]
                    c2 = data[i + 2]
                    if (c == 0xE1 and c1 == 0x9A and c2 == 0x80) or (c == 0xE3 and c1 == 0x80 and c2 == 0x80) or \
                            (c == 0xE2 and ((c1 == 0x80 and (c2 <= 0x8A or c2 == 0xA8 or c2 == 0xA9 or c2 == 0xAF))
                                            or (c1 == 0x81 and c2 == 0x9F))):
                        ws, width = True, 3
            # branch-free in the common case: write the byte (or a space), keep it unless it repeats a space
            out[w] = 32 if ws else c
            w += 1 - (ws & prev_space)
            prev_space = ws
            i += width
        if w > start_w and prev_space:
            w -= 1
        out_off[d + 1] = w
    return out_off, out[:w]


@njit(nogil=True, cache=True)
def nonblank_lines(data):
    """Start offset and 0-based index of every line of ``data`` (uint8) that has a byte other than
    ASCII whitespace. Returns ``(starts int64[k], line_index int64[k])``."""
    n = data.shape[0]
    lines = 1
    for i in range(n):
        if data[i] == 10:
            lines += 1
    starts = np.empty(lines, dtype=np.int64)
    index = np.empty(lines, dtype=np.int64)
    k = 0
    line = 0
    start = 0
    blank = True
    for i in range(n + 1):
        if i == n or data[i] == 10:
            if not blank:
                starts[k] = start
                index[k] = line
                k += 1
            line += 1
            start = i + 1
            blank = True
        else:
            c = data[i]
            if not (c == 32 or c == 9 or c == 13 or c == 11 or c == 12):
                blank = False
    return starts[:k], index[:k]


@njit(nogil=True, cache=True)
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
