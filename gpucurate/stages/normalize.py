"""Normalize stage and the normalization it applies: the vectorized implementation and its plain-Python
specification (with the reference shingling the tests compare against).

Normalization (each step switchable in ``normalize`` config): boilerplate regexes removed, Unicode
NFKC, lowercase, punctuation removed (optional), whitespace runs collapsed to one space and trimmed.
It only feeds the hashes: stored texts are never changed.

Lowercase is the Unicode *simple* case mapping of each code point (as Arrow's ``utf8_lower``; so
U+0130 İ becomes ``i``, not ``i`` + U+0307), followed by one fold: Greek final sigma ς (U+03C2) becomes
σ (U+03C3). Σ lowercases to σ whatever its position, so without the fold "ΟΔΟΣ" and "οδος" would
differ; with it, both spellings of the letter hash alike and no context rule is needed (Python's
``str.lower`` applies the final-sigma context rule, which Arrow does not). The compiled path and
``reference_normalize`` agree on every code point assigned in Python's Unicode database
(``unicodedata.unidata_version``); characters newer than that follow pyarrow's (utf8proc's) tables in
the pipeline, while the reference, which does not know them, leaves them unchanged (tested over the
whole code space).

The stage (``Normalize``) replaces the ``_text`` column of each partition by its normalized form.
"""

from __future__ import annotations

import unicodedata

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..config import NormalizeConfig
from ..engine.clock import task_clock
from ..engine.threads import thread_map
from ..kernels.hashing import M2, reference_fmix64, reference_fold, reference_hash_bytes
from ..kernels.text import ascii_texts, collapse_mixed, collapse_whitespace, find_final_sigma, fold_final_sigma


def arrow_buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Zero-copy ``(offsets int64[n + 1], data uint8[m])`` of a string array; nulls read as empty."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    if arr.null_count:
        arr = pc.fill_null(arr, "")
    if arr.type != pa.large_string():
        arr = arr.cast(pa.large_string())
    _, off_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(off_buf, dtype=np.int64)[arr.offset:arr.offset + len(arr) + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.empty(0, np.uint8)
    return offsets, data


def from_buffers(offsets: np.ndarray, data: np.ndarray) -> pa.LargeStringArray:
    n = len(offsets) - 1
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(np.ascontiguousarray(offsets)),
                                            pa.py_buffer(np.ascontiguousarray(data)))


def normalize(texts: pa.Array, cfg: NormalizeConfig | None = None) -> pa.LargeStringArray:
    """Normalize a string array; null becomes empty. Returns ``large_string[n]``."""
    cfg = cfg or NormalizeConfig()
    arr = texts.combine_chunks() if isinstance(texts, pa.ChunkedArray) else texts
    if arr.null_count:
        arr = pc.fill_null(arr, "")
    if cfg.collapse_whitespace and not cfg.boilerplate_patterns and not cfg.strip_punctuation:
        return _normalize_fused(arr, cfg)
    for pattern in cfg.boilerplate_patterns:
        arr = pc.replace_substring_regex(arr, pattern, " ")
    if cfg.nfkc:
        arr = pc.utf8_normalize(arr, "NFKC")
    if cfg.lowercase:
        arr = fold_sigma(pc.utf8_lower(arr))
    if cfg.strip_punctuation:
        arr = pc.replace_substring_regex(arr, r"\p{P}+", " ")
    if cfg.collapse_whitespace:
        return from_buffers(*collapse_whitespace(*arrow_buffers(arr)))
    return arr.cast(pa.large_string())


def _normalize_fused(arr: pa.Array, cfg: NormalizeConfig) -> pa.LargeStringArray:
    """NFKC, lowercase and whitespace collapse with one pass over the bytes for the ASCII texts: NFKC
    leaves ASCII as it is and its lowercase is A-Z -> a-z, so only the other texts go through Arrow's
    Unicode functions first (two more passes and copies of them)."""
    offsets, data = arrow_buffers(arr)
    ascii = ascii_texts(offsets, data)
    other = arr.filter(pa.array(~ascii)) if not ascii.all() else arr.slice(0, 0)
    if len(other) and cfg.nfkc:
        other = pc.utf8_normalize(other, "NFKC")
    if len(other) and cfg.lowercase:
        other = fold_sigma(pc.utf8_lower(other))
    return from_buffers(*collapse_mixed(offsets, data, ascii, cfg.lowercase, *arrow_buffers(other)))


def fold_sigma(arr: pa.Array) -> pa.Array:
    """``arr`` with every final sigma ς replaced by σ (the same byte length: offsets are kept); the
    array itself when it has none (one scan, no copy)."""
    offsets, data = arrow_buffers(arr)
    first = find_final_sigma(data)
    if first < 0:
        return arr
    data = data.copy()
    fold_final_sigma(data, first)
    return from_buffers(offsets, data)


# ------------------------------------------------------------------------------------------------
# Plain-Python specification (tests, peers' adapters in benchmarks). Not used by the pipeline.

def reference_shingles(normalized: str, mode: str = "word", k: int = 5) -> list[str]:
    """Shingles of an already normalized text: ``k`` words joined by one space, or ``k`` code points."""
    if not normalized:
        return []
    units = normalized.split(" ") if mode == "word" else list(normalized)
    sep = " " if mode == "word" else ""
    if len(units) <= k:
        return [sep.join(units)]
    return [sep.join(units[i:i + k]) for i in range(len(units) - k + 1)]


def reference_shingle_hashes(normalized: str, mode: str, k: int, seed: int) -> set[int]:
    """Set of 64-bit shingle hashes: each unit (word or code point) is hashed with ``hash_bytes``,
    and a shingle's hash is ``fmix64`` of its unit hashes folded into ``seed ^ M2``."""
    if not normalized:
        return set()
    units = normalized.split(" ") if mode == "word" else list(normalized)
    unit_hashes = [reference_hash_bytes(u.encode("utf-8"), seed) for u in units]
    count = max(1, len(units) - k + 1)
    out = set()
    for u in range(count):
        h = seed ^ int(M2)
        for x in unit_hashes[u:u + k]:
            h = reference_fold(h, x)
        out.add(reference_fmix64(h))
    return out


def reference_lower(text: str) -> str:
    """The normalization's lowercase: simple case mapping of each code point, then ς -> σ. Python's
    ``str.lower`` differs from the simple mapping only for U+0130 (full mapping ``i`` + U+0307) and for
    the final-sigma context rule, which the fold makes moot."""
    return text.replace("\u0130", "i").lower().replace("\u03c2", "\u03c3")


#: scripts written without spaces between words (RE2 classes): each character is a word for term matching
CJK_CHARACTER = r"([\p{Han}\p{Hiragana}\p{Katakana}])"


def per_char_normalized(text: str, split_cjk: bool = False) -> tuple[str, list[int]]:
    """``text`` normalized for matching (NFKC, lowercase, punctuation and whitespace to a space) one
    character at a time, so that each character of the result knows the index of the character of ``text``
    it came from: ``(normalized, origin)``, ``len(origin) == len(normalized)``. Runs of spaces are kept
    (the word kernels skip them). ``split_cjk``: characters of ``CJK_CHARACTER`` get a space on each side,
    as ``pc.replace_substring_regex(..., CJK_CHARACTER, r" \1 ")`` does to a whole text."""
    cjk = set()
    if split_cjk and text:
        distinct = sorted(set(text))
        hit = pc.match_substring_regex(pa.array(distinct), CJK_CHARACTER).to_pylist()
        cjk = {c for c, h in zip(distinct, hit) if h}
    chars, origin = [], []
    for i, ch in enumerate(text):
        if ch in cjk:
            chars += [" ", ch, " "]
            origin += [i, i, i]
            continue
        for c in reference_lower(unicodedata.normalize("NFKC", ch)):
            chars.append(" " if c.isspace() or unicodedata.category(c).startswith("P") else c)
            origin.append(i)
    return "".join(chars), origin


def reference_normalize(text: str | None) -> str:
    """Python version of the default normalization (NFKC, lowercase as ``reference_lower``, whitespace
    collapsed); equal to ``normalize`` for every code point Python's Unicode database assigns."""
    return " ".join(reference_lower(unicodedata.normalize("NFKC", text or "")).split())


def normalize_partition(df: pd.DataFrame, cfg: NormalizeConfig, threads: int = 1) -> pd.DataFrame:
    """``df`` with ``_text`` normalized; with ``threads > 1`` slices of it are normalized in parallel."""
    out = df.copy(deep=False)
    if len(df):
        with task_clock("normalize"):
            out["_text"] = _normalized(df, cfg, threads)
    out.attrs = dict(df.attrs)
    return out


def _normalized(df: pd.DataFrame, cfg: NormalizeConfig, threads: int) -> pd.arrays.ArrowExtensionArray:
    arr = pa.chunked_array(df["_text"].array._pa_array).combine_chunks()
    cuts = np.linspace(0, len(arr), max(1, min(threads, len(arr))) + 1).astype(int)
    parts = thread_map(lambda c: normalize(arr.slice(c[0], c[1] - c[0]), cfg), list(zip(cuts[:-1], cuts[1:])), threads)
    return pd.arrays.ArrowExtensionArray(parts[0] if len(parts) == 1 else pa.concat_arrays(parts))


class Normalize:
    """NFKC, lowercase, whitespace collapse and optional boilerplate removal (see the module docstring).

    ``run(ddf) -> ddf`` with ``_text`` normalized; other columns untouched.
    """

    name = "normalize"

    def __init__(self, cfg: NormalizeConfig):
        self.cfg = cfg

    def run(self, ddf, threads: int = 1):
        return ddf.map_partitions(normalize_partition, self.cfg, threads, meta=ddf._meta)
