"""Byte-level text kernels over Arrow string buffers."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(inline="always", nogil=True)
def _space_len(data, i, end):
    """Byte length of the whitespace character at ``data[i]``, or 0.

    Whitespace is what Python's ``str.split()`` splits on: ASCII \\t\\n\\v\\f\\r, \\x1c-\\x1f and space,
    U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F and U+3000.
    """
    c = data[i]
    if c == 32 or (9 <= c <= 13) or (28 <= c <= 31):
        return 1
    if c == 0xC2 and i + 1 < end and (data[i + 1] == 0x85 or data[i + 1] == 0xA0):
        return 2
    if i + 2 < end:
        c1, c2 = data[i + 1], data[i + 2]
        if c == 0xE1 and c1 == 0x9A and c2 == 0x80:
            return 3
        if c == 0xE2 and c1 == 0x80 and (c2 <= 0x8A or c2 == 0xA8 or c2 == 0xA9 or c2 == 0xAF):
            return 3
        if c == 0xE2 and c1 == 0x81 and c2 == 0x9F:
            return 3
        if c == 0xE3 and c1 == 0x80 and c2 == 0x80:
            return 3
    return 0


@njit(nogil=True, cache=True)
def collapse_whitespace(offsets, data):
    """Trim each text and replace every run of whitespace by one space.

    Returns new ``(offsets int64[n + 1], data uint8[m'])``; equal to ``" ".join(s.split())`` per text.
    """
    n = offsets.shape[0] - 1
    out = np.empty(offsets[n] - offsets[0], dtype=np.uint8)
    out_off = np.empty(n + 1, dtype=np.int64)
    w = 0
    out_off[0] = 0
    for d in range(n):
        i, end = offsets[d], offsets[d + 1]
        pending_space = False
        start_w = w
        while i < end:
            sl = _space_len(data, i, end)
            if sl > 0:
                pending_space = w > start_w
                i += sl
            else:
                if pending_space:
                    out[w] = 32
                    w += 1
                    pending_space = False
                out[w] = data[i]
                w += 1
                i += 1
        out_off[d + 1] = w
    return out_off, out[:w]
