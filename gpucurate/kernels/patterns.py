"""Checksums of the contamination gate's PII candidates over a UTF-8 buffer (the regex finds a candidate,
the checksum decides): ``luhn_valid`` for payment cards, ``iban_ends`` for IBANs (ISO 13616 mod 97).

Each takes the buffer ``data`` (uint8) and the candidates' byte spans ``starts``/``ends`` (int64[k]) and
returns bool[k] (``iban_ends``: where each ends). Separators inside a span (anything but a digit, or a
letter for IBANs) are skipped, so ``4111 1111-1111 1111`` is checked as ``4111111111111111``.
"""

from __future__ import annotations

import numpy as np

from .jit import njit


@njit(nogil=True, cache=True, aot=("u1[:], i8[:], i8[:]",))
def luhn_valid(data, starts, ends):
    """Candidates of 13 to 19 digits whose Luhn sum is a multiple of 10."""
    out = np.zeros(starts.shape[0], np.bool_)
    for k in range(starts.shape[0]):
        total = 0
        digits = 0
        for i in range(ends[k] - 1, starts[k] - 1, -1):
            c = data[i]
            if 48 <= c <= 57:
                d = c - 48
                if digits % 2 == 1:
                    d *= 2
                    if d > 9:
                        d -= 9
                total += d
                digits += 1
        out[k] = 13 <= digits <= 19 and total % 10 == 0
    return out


@njit(nogil=True, cache=True, aot=("u1[:], i8[:], i8[:], i8[:]",))
def iban_ends(data, starts, ends, lengths):
    """Where the IBAN starting at each candidate ends: the candidate's letters and digits (upper case) read
    as a country code, two check digits and as many more as the country's IBAN has (``lengths``:
    int64[26 * 26], 0 for an unknown country, indexed by the two letters); returns int64[k], the byte after
    its last character, or -1 when the candidate is too short or its rearranged number is not 1 modulo 97."""
    out = np.full(starts.shape[0], -1, np.int64)
    chars = np.empty(34, np.uint8)
    for k in range(starts.shape[0]):
        s = starts[k]
        if ends[k] - s < 4 or not (65 <= data[s] <= 90 and 65 <= data[s + 1] <= 90):
            continue
        want = lengths[(data[s] - 65) * 26 + (data[s + 1] - 65)]
        if want == 0:
            continue
        n = 0
        stop = -1
        for i in range(s, ends[k]):
            c = data[i]
            if (48 <= c <= 57) or (65 <= c <= 90):
                chars[n] = c
                n += 1
                if n == want:
                    stop = i + 1
                    break
        if stop < 0 or not (48 <= chars[2] <= 57 and 48 <= chars[3] <= 57):
            continue
        rem = 0
        for j in range(n):
            c = chars[(j + 4) % n]  # the first four characters go to the end
            if c <= 57:
                rem = (rem * 10 + (c - 48)) % 97
            else:
                rem = (rem * 100 + (c - 55)) % 97  # A = 10 .. Z = 35
        if rem == 1:
            out[k] = stop
    return out
