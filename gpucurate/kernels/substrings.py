"""CPU kernels of the exact-substring stage (``stages.substrings``), over Arrow string buffers.

The contract (mirrored by ``stages.substrings.reference_units`` and ``reference_spans``):

* Units are the original text's words (maximal runs of non-whitespace, whitespace as ``str.split``) or,
  in char mode, its non-whitespace code points; each unit is normalized on its own (NFKC, lowercase and
  the final-sigma fold of ``stages.normalize``) and hashed twice, with ``hash_bytes`` under ``UNIT_SEED_A``
  and ``UNIT_SEED_B``: 128 bits a unit.
* A window is ``k`` consecutive units of one text. Its two lanes are polynomials of the units' hashes,
  ``A = sum_j a_j * BASE_A ** (k - 1 - j)`` and ``B`` likewise with ``BASE_B`` (mod 2**64), and its key is
  ``(fmix64(A), fmix64(B))``: 128 bits. Here the lanes roll from one window to the next; the CUDA kernel
  computes each by Horner's rule, which gives the same bits (``window_lane``).
* A bucket's windows arrive in corpus order; ``repeated_windows`` finds the keys seen at least twice and
  says, for each of their windows, whether it is the key's first occurrence.
"""

from __future__ import annotations

import numpy as np

from .hashing import M1, U64, _mix_word as mix_word, fmix64
from .jit import njit
from .text import space_width

UNIT_SEED_A = U64(0x5B57A001)
UNIT_SEED_B = U64(0x5B57B002)
BASE_A = U64(0x9E3779B97F4A7C15)
BASE_B = U64(0xC2B2AE3D27D4EB4F)
#: bits of a window's ``hi`` key that pick its sub-bucket inside a bucket task (cache-sized hash tables)
SUB_BITS = 12


def define_window_functions(jit):
    """``window_lane(h, start, k, base)``: ``sum_j h[start + j] * base ** (k - 1 - j)`` by Horner's rule,
    compiled with ``jit`` (the CUDA kernel's definition of a lane)."""

    @jit
    def window_lane(h, start, k, base):
        acc = U64(0)
        for j in range(k):
            acc = acc * base + h[start + j]
        return acc

    return window_lane


#: each byte with A-Z lowercased
_LOWER = np.arange(256, dtype=np.uint8)
_LOWER[65:91] += 32
#: byte classes of ``unit_spans``: 0 inside a unit, 1 ASCII whitespace, 2 the lead byte of a character that
#: may be Unicode whitespace (U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028/9, U+202F, U+205F, U+3000)
_BYTE_CLASS = np.zeros(256, np.uint8)
_BYTE_CLASS[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = 1
_BYTE_CLASS[[0xC2, 0xE1, 0xE2, 0xE3]] = 2


@njit(nogil=True, cache=True, aot=("i8[:], u1[:], b1",))
def unit_spans(offsets, data, char_mode):
    """Byte and character spans of every unit, in one pass over the bytes.

    Returns ``(start, end, cursor, ascii, char_start, char_end, doc_chars)``: byte offsets within the text
    (int64[u]); text ``d`` owns units ``cursor[d]:cursor[d + 1]``; ``ascii`` (bool[u]): the unit is ASCII
    (its normal form is its lowercase); character offsets within the text (int64[u]); the characters of
    each text (int64[n])."""
    n = offsets.shape[0] - 1
    cap = max(16, (offsets[n] - offsets[0]) // 4 + n + 1)
    start = np.empty(cap, np.int64)
    end = np.empty(cap, np.int64)
    char_start = np.empty(cap, np.int64)
    char_end = np.empty(cap, np.int64)
    ascii = np.empty(cap, np.bool_)
    cursor = np.empty(n + 1, np.int64)
    doc_chars = np.empty(n, np.int64)
    cursor[0] = 0
    u = 0
    for d in range(n):
        if u + offsets[d + 1] - offsets[d] > cap:  # a text has at most as many units as bytes
            cap = max(2 * cap, u + offsets[d + 1] - offsets[d])
            start, end, ascii = _grown(start, cap), _grown(end, cap), _grown(ascii, cap)
            char_start, char_end = _grown(char_start, cap), _grown(char_end, cap)
        u, doc_chars[d] = _text_units(data, offsets[d], offsets[d + 1], char_mode, u, start, end, ascii,
                                      char_start, char_end)
        cursor[d + 1] = u
    return start[:u], end[:u], cursor, ascii[:u], char_start[:u], char_end[:u], doc_chars


@njit(nogil=True, cache=True)
def _text_units(data, i, stop, char_mode, u, start, end, ascii, char_start, char_end):
    """``unit_spans`` of one text ``data[i:stop]``, its units written from ``u`` on (the arrays have room).
    Returns the next unit and the text's characters. (Its own function: growing the arrays in the loop
    that fills them made numba's code five times slower.)"""
    byte_class = _BYTE_CLASS
    chars = 0
    base = i
    while i < stop:
        c = data[i]
        kind = byte_class[c]
        if kind == 1:
            i += 1
            chars += 1
            continue
        if kind == 2:
            width = space_width(data, i, stop)
            if width > 0:
                i += width
                chars += 1
                continue
        start[u], char_start[u] = i - base, chars
        high = c
        i += 1
        chars += 1
        if char_mode:  # one code point: its continuation bytes
            while i < stop and (data[i] & 0xC0) == 0x80:
                high |= data[i]
                i += 1
        else:  # up to the next whitespace
            while i < stop:
                c = data[i]
                kind = byte_class[c]
                if kind == 1 or (kind == 2 and space_width(data, i, stop) > 0):
                    break
                high |= c
                chars += (c & 0xC0) != 0x80
                i += 1
        end[u], char_end[u], ascii[u] = i - base, chars, high < 0x80
        u += 1
    return u, chars


@njit(nogil=True, cache=True)
def _grown(a, cap):
    out = np.empty(cap, a.dtype)
    out[:a.shape[0]] = a
    return out


@njit(nogil=True, cache=True, inline="always")
def _hash_pair(data, start, end):
    """``hash_bytes`` of the bytes ``data[start:end]`` with A-Z lowercased, under ``UNIT_SEED_A`` and
    ``UNIT_SEED_B`` (the words put together from the bytes: no lowered, padded copy of the text)."""
    ha = UNIT_SEED_A + U64(end - start) * M1
    hb = UNIT_SEED_B + U64(end - start) * M1
    i = start
    while i < end:
        w = U64(0)
        for j in range(min(8, end - i)):
            w |= U64(_LOWER[data[i + j]]) << U64(8 * j)
        ha = mix_word(ha, w)
        hb = mix_word(hb, w)
        i += 8
    return fmix64(ha), fmix64(hb)


@njit(nogil=True, cache=True, aot=("u1[:], i8[:], i8[:], i8[:], i8[:], b1[:], i8[:], u1[:]",))
def unit_hashes(data, offsets, start, end, cursor, ascii, other_offsets, other_data):
    """Two 64-bit hashes of every unit's normal form: ``hash_bytes`` under ``UNIT_SEED_A`` and
    ``UNIT_SEED_B`` of an ASCII unit's lowercased bytes (``start``, ``end``: within its text, whose bytes
    start at ``offsets[d]``), and of the others' normal forms (``other_*``, in unit order).
    Returns ``(a uint64[u], b uint64[u])``."""
    n = cursor.shape[0] - 1
    a = np.empty(start.shape[0], np.uint64)
    b = np.empty(start.shape[0], np.uint64)
    j = 0
    for d in range(n):
        base = offsets[d]
        for q in range(cursor[d], cursor[d + 1]):
            if ascii[q]:
                a[q], b[q] = _hash_pair(data, base + start[q], base + end[q])
            else:
                a[q], b[q] = _hash_pair(other_data, other_offsets[j], other_offsets[j + 1])
                j += 1
    return a, b


def window_counts(cursor: np.ndarray, k: int) -> np.ndarray:
    """``int64[n + 1]``: text ``d`` owns windows ``w[d]:w[d + 1]`` (a text of fewer than ``k`` units has none)."""
    per_text = np.maximum(np.diff(cursor) - k + 1, 0)
    return np.concatenate(([0], np.cumsum(per_text))).astype(np.int64)


@njit(nogil=True, cache=True, aot=("u8[:], u8[:], i8[:], i8[:], i8",))
def window_hashes(a, b, cursor, win_cursor, k):
    """Keys ``(hi uint64[w], lo uint64[w])`` of every window, text by text (``win_cursor``: ``window_counts``),
    the lanes rolled: ``A' = (A - a_p * BASE_A ** (k - 1)) * BASE_A + a_(p + k)``, all mod 2**64."""
    n = cursor.shape[0] - 1
    w = win_cursor[n]
    hi = np.empty(w, np.uint64)
    lo = np.empty(w, np.uint64)
    top_a = U64(1)
    top_b = U64(1)
    for _ in range(k - 1):
        top_a *= BASE_A
        top_b *= BASE_B
    for d in range(n):
        first, count = cursor[d], win_cursor[d + 1] - win_cursor[d]
        if count == 0:
            continue
        la = U64(0)
        lb = U64(0)
        for j in range(k):
            la = la * BASE_A + a[first + j]
            lb = lb * BASE_B + b[first + j]
        out = win_cursor[d]
        hi[out] = fmix64(la)
        lo[out] = fmix64(lb)
        for p in range(1, count):
            la = (la - a[first + p - 1] * top_a) * BASE_A + a[first + p + k - 1]
            lb = (lb - b[first + p - 1] * top_b) * BASE_B + b[first + p + k - 1]
            hi[out + p] = fmix64(la)
            lo[out + p] = fmix64(lb)
    return hi, lo


@njit(nogil=True, cache=True, inline="always")
def _bucket(h, n_buckets):
    """The bucket of a key from its top 32 bits: ``(h >> 32) * n_buckets >> 32``."""
    return np.int64(((h >> U64(32)) * U64(n_buckets)) >> U64(32))


@njit(nogil=True, cache=True, aot=("u8[:], u8[:], i8[:], i8[:], b1[:], i8, i8, i8",))
def split_windows(hi, lo, cursor, win_cursor, kept, part, local_bits, n_buckets):
    """The kept texts' windows grouped by bucket, in corpus order within each: ``(hi, lo, key, cuts)``
    where bucket b holds ``[cuts[b], cuts[b + 1])`` and ``key = part << local_bits | the window's first
    unit`` (an O(w) counting sort, in one kernel: numpy's temporaries cost more than the sort)."""
    n = kept.shape[0]
    cuts = np.zeros(n_buckets + 1, np.int64)
    for d in range(n):
        if kept[d]:
            for w in range(win_cursor[d], win_cursor[d + 1]):
                cuts[_bucket(hi[w], n_buckets) + 1] += 1
    for b in range(n_buckets):
        cuts[b + 1] += cuts[b]
    fill = cuts[:-1].copy()
    total = cuts[n_buckets]
    out_hi = np.empty(total, np.uint64)
    out_lo = np.empty(total, np.uint64)
    out_key = np.empty(total, np.int64)
    top = np.int64(part) << local_bits
    for d in range(n):
        if kept[d]:
            unit = top | (cursor[d] - win_cursor[d])  # window w starts at unit w + this
            for w in range(win_cursor[d], win_cursor[d + 1]):
                b = _bucket(hi[w], n_buckets)
                x = fill[b]
                out_hi[x], out_lo[x], out_key[x] = hi[w], lo[w], unit + w
                fill[b] = x + 1
    return out_hi, out_lo, out_key, cuts


@njit(nogil=True, cache=True, aot=("i8[:], i8",))
def counting_order(bucket, n_buckets):
    """Stable order of ``bucket`` (int64 in ``[0, n_buckets)``) and its cut points: ``(order int64[m],
    cuts int64[n_buckets + 1])``; an O(m) counting sort (``np.argsort`` of a split cost most of it)."""
    cuts = np.zeros(n_buckets + 1, np.int64)
    for x in bucket:
        cuts[x + 1] += 1
    for b in range(n_buckets):
        cuts[b + 1] += cuts[b]
    fill = cuts[:-1].copy()
    order = np.empty(bucket.shape[0], np.int64)
    for i in range(bucket.shape[0]):
        order[fill[bucket[i]]] = i
        fill[bucket[i]] += 1
    return order, cuts


@njit(nogil=True, cache=True, aot=("u8[:], u8[:]",))
def repeated_windows(hi, lo):
    """The windows of one bucket (in corpus order) whose key occurs at least twice.

    Returns ``(index int64[h], removable bool[h], count int32[h], distinct int64)``: each such window's
    position in the input, whether it is not its key's first occurrence, how often its key occurs, and the
    number of distinct keys. The keys are first moved, stably, into sub-buckets by the low ``SUB_BITS`` bits
    of ``hi`` (a counting sort that copies them, so the tables below read them in order); each sub-bucket's
    open-addressing table stays in cache and sees a key's first occurrence first.
    """
    m = hi.shape[0]
    subs = 1 << SUB_BITS
    mask = U64(subs - 1)
    cuts = np.zeros(subs + 1, np.int64)
    for i in range(m):
        cuts[np.int64(hi[i] & mask) + 1] += 1
    largest = 1
    for s in range(subs):
        largest = max(largest, cuts[s + 1])
        cuts[s + 1] += cuts[s]
    fill = cuts[:-1].copy()
    s_hi = np.empty(m, np.uint64)
    s_lo = np.empty(m, np.uint64)
    s_index = np.empty(m, np.int64)
    for i in range(m):
        x = fill[np.int64(hi[i] & mask)]
        s_hi[x], s_lo[x], s_index[x] = hi[i], lo[i], i
        fill[np.int64(hi[i] & mask)] = x + 1
    size = 16
    while size < 2 * largest:
        size *= 2
    slot_hi = np.empty(size, np.uint64)
    slot_lo = np.empty(size, np.uint64)
    slot_first = np.empty(size, np.int64)
    slot_count = np.zeros(size, np.int32)
    where = np.empty(largest, np.int64)  # each window's slot, in its sub-bucket
    index = np.empty(m, np.int64)
    removable = np.empty(m, np.bool_)
    count = np.empty(m, np.int32)
    h = 0
    distinct = 0
    for s in range(subs):
        lo_cut, hi_cut = cuts[s], cuts[s + 1]
        if hi_cut == lo_cut:
            continue
        table = 16
        while table < 2 * (hi_cut - lo_cut):
            table *= 2
        tmask = table - 1
        slot_count[:table] = 0
        for q in range(lo_cut, hi_cut):
            x = np.int64(s_hi[q] >> U64(SUB_BITS)) & tmask
            while True:
                if slot_count[x] == 0:
                    slot_hi[x], slot_lo[x], slot_first[x], slot_count[x] = s_hi[q], s_lo[q], s_index[q], 1
                    distinct += 1
                    break
                if slot_hi[x] == s_hi[q] and slot_lo[x] == s_lo[q]:
                    slot_count[x] += 1
                    break
                x = (x + 1) & tmask
            where[q - lo_cut] = x
        for q in range(lo_cut, hi_cut):
            y = where[q - lo_cut]
            if slot_count[y] >= 2:
                index[h] = s_index[q]
                removable[h] = slot_first[y] != s_index[q]
                count[h] = slot_count[y]
                h += 1
    return index[:h], removable[:h], count[:h], distinct


@njit(nogil=True, cache=True, aot=("i8[:], i8[:], b1[:], i4[:], i8, b1",))
def covered_spans(cursor, hit_unit, removable, count, k, keep_none):
    """Spans of one partition's texts from its repeated windows.

    Parameters
    ----------
    cursor : int64[n + 1] -- text d owns units ``cursor[d]:cursor[d + 1]``.
    hit_unit, removable, count : one per repeated window: its first unit (an index into the partition's
        units), whether it is not its key's first occurrence, how often the key occurs.
    k : units a window; keep_none : every repeated unit is removable (``keep: none``).

    Returns
    -------
    ``(rep, cut)``: the maximal runs of repeated units and of removable units, each a tuple ``(first, last,
    text, top, top_at)`` of int64 arrays ascending by unit: first and last unit, text, and the largest
    count of a window starting in the run with that window's first unit.
    """
    units = cursor[cursor.shape[0] - 1]
    rep = np.zeros(units + 1, np.int32)
    cut = np.zeros(units + 1, np.int32)
    best = np.zeros(units, np.int32)
    for h in range(hit_unit.shape[0]):
        u = hit_unit[h]
        rep[u] += 1
        rep[u + k] -= 1
        if removable[h] or keep_none:
            cut[u] += 1
            cut[u + k] -= 1
        best[u] = max(best[u], count[h])
    cap = hit_unit.shape[0] + 1  # a run holds the first unit of a repeated window
    return runs_of(cursor, rep, best, cap), runs_of(cursor, cut, best, cap)


@njit(nogil=True, cache=True)
def runs_of(cursor, diff, best, cap):
    """Maximal runs of units, within each text, where the running sum of ``diff`` is positive (a window
    ends where the next one of its text could start, so the sum runs across texts); at most ``cap`` runs
    (arrays sized once: growing them in this loop made numba's code several times slower)."""
    n = cursor.shape[0] - 1
    first = np.empty(cap, np.int64)
    last = np.empty(cap, np.int64)
    text = np.empty(cap, np.int64)
    top = np.empty(cap, np.int64)
    top_at = np.empty(cap, np.int64)
    r = 0
    depth = 0
    for d in range(n):
        open_run = False
        for u in range(cursor[d], cursor[d + 1]):
            depth += diff[u]
            if depth > 0:
                if not open_run:
                    first[r], text[r], top[r], top_at[r] = u, d, -1, u
                    open_run = True
                if best[u] > top[r]:
                    top[r], top_at[r] = best[u], u
                last[r] = u
            elif open_run:
                r += 1
                open_run = False
        if open_run:
            r += 1
    return first[:r], last[:r], text[:r], top[:r], top_at[:r]

