"""Exact-substring dedup: runs of at least ``substrings.min_tokens`` units repeated anywhere in the kept
documents (the rule of Lee et al., "Deduplicating Training Data Makes Language Models Better").

Units are the words of each original text (or, with ``unit: char``, its non-whitespace code points), each
normalized like the text (NFKC, lowercase); a window is ``min_tokens`` consecutive units of one text.

* A unit is *repeated* when a window covering it occurs at least twice among the kept documents (in two
  documents, or twice in one).
* It is *removable* when a window covering it is not that window's first occurrence in corpus order
  (input order, then position); with ``keep: none`` every repeated unit is.

``substring_spans`` holds each document's maximal runs of repeated units as byte ranges of the original
UTF-8 text (from its first unit's first byte to its last unit's last byte), ``substring_text`` the text
with the runs of removable units cut out (``stages.cuts``), ``substring_chars_removed`` the characters of
those runs. A document left with fewer than ``min_doc_chars`` characters is dropped.

How (bounded memory, exact): the read pass finds each text's units and the 128-bit key of every window
(``kernels.substrings``). After annotation, the windows of the kept documents are exchanged into buckets
by the top bits of their keys (``engine.shuffle.exchange``, in memory or spilled); each bucket counts its
keys alone and sends the repeated windows back to their partitions, which merge them into spans. No
window comes to the driver. Keys are compared whole (128 bits), so the result is that of comparing the
units' normal forms, except with probability about ``windows ** 2 / 2 ** 129``.
"""

from __future__ import annotations

import heapq
import time
import unicodedata
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..config import SubstringsConfig
from ..engine.executor import Executor
from ..engine.partitions import Carried
from ..engine.shuffle import exchange
from ..engine.tasks import delayed
from ..kernels import substrings as cpu
from .normalize import arrow_buffers, fold_sigma, from_buffers, reference_lower

#: bits of a window's exchange key that hold its index within its partition (the partition is above)
LOCAL_BITS = 40
#: repeated spans a partition proposes for the report (the run keeps the most repeated)
TOP_SPANS = 10
#: characters of a repeated span shown in the summary and the report
SAMPLE_CHARS = 300


def unit_hashes(raw: pa.Array, char_mode: bool) -> tuple:
    """The units of every text of ``raw`` (``string[n]``) and their two hashes: ``(offsets, start, end, cursor,
    a, b, chars)``: the texts' byte offsets, each unit's bytes ``start:end`` within its text (``int64[u]``),
    text d's units
    ``cursor[d]:cursor[d + 1]``, ``a``, ``b`` (``uint64[u]``), and ``chars``: ``(char_start, char_end,
    doc_chars)`` of ``kernels.substrings.unit_spans``."""
    offsets, data = arrow_buffers(raw)
    start, end, cursor, ascii, char_start, char_end, doc_chars = cpu.unit_spans(offsets, data, char_mode)
    other = np.flatnonzero(~ascii)
    base = offsets[np.searchsorted(cursor, other, side="right") - 1]
    other_offsets, other_data = _normal_forms(data, base + start[other], base + end[other])
    a, b = cpu.unit_hashes(data, offsets, start, end, cursor, ascii, other_offsets, other_data)
    return offsets, start, end, cursor, a, b, (char_start, char_end, doc_chars)


def substring_units(raw: pa.Array, char_mode: bool, k: int, window_hashes=cpu.window_hashes) -> dict:
    """Units and window keys of every text of ``raw`` (``string[n]``): ``cursor int64[n + 1]`` (text d owns
    units ``cursor[d]:cursor[d + 1]``), each unit's byte and character start and end within its text
    (``int64[u]`` each), ``win_cursor int64[n + 1]`` and the window keys ``hi``, ``lo`` (``uint64[w]``)."""
    offsets, start, end, cursor, a, b, (char_start, char_end, doc_chars) = unit_hashes(raw, char_mode)
    win_cursor = cpu.window_counts(cursor, k)
    hi, lo = window_hashes(a, b, cursor, win_cursor, k)
    return {"cursor": cursor, "start": start, "end": end, "char_start": char_start,
            "char_end": char_end, "doc_chars": doc_chars, "doc_bytes": np.diff(offsets), "win_cursor": win_cursor, "hi": hi, "lo": lo}


def _normal_forms(data: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Arrow buffers of the normal forms (NFKC, lowercase, final sigma folded) of the byte spans."""
    lengths = end - start
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    gather = np.repeat(start - offsets[:-1], lengths) + np.arange(offsets[-1]) if len(start) else \
        np.empty(0, np.int64)
    units = from_buffers(offsets, data[gather])
    if len(units):
        units = fold_sigma(pc.utf8_lower(pc.utf8_normalize(units, "NFKC")))
    out_offsets, out_data = arrow_buffers(units)
    return out_offsets - out_offsets[0], out_data[out_offsets[0]:]


def substring_partition(df: pd.DataFrame, char_mode: bool, k: int, window_hashes=cpu.window_hashes) -> pd.DataFrame:
    """The read pass's part: ``substring_units`` of the raw ``_text`` in ``df.attrs["substrings"]``."""
    start = time.perf_counter()
    out = df.copy(deep=False)
    out.attrs = dict(df.attrs)
    raw = pa.chunked_array(df["_text"].array._pa_array).combine_chunks() if len(df) else pa.array([], pa.large_string())
    units = substring_units(raw, char_mode, k, window_hashes)
    units["seconds"] = time.perf_counter() - start
    out.attrs["substrings"] = Carried(units)
    return out


@dataclass
class SubstringResult:
    """One partition's result: per document the repeated spans and the cuts (flat byte ranges, None for
    none), the characters removed and the drops."""
    spans: list
    cuts: list
    chars_removed: np.ndarray  # int64[n]
    drop: np.ndarray  # bool[n]
    drop_reason: np.ndarray  # object[n]


class SubstringDedup:
    """``run(ddf) -> ddf`` (units and window keys in partition attrs, fused with reading); ``collect(ddf,
    table, kept, executor, apply)``: the repeated spans of the kept documents and their cuts."""

    name = "substrings"
    #: windows per bucket of the exchange by window key (24 bytes each, plus the bucket's hash table)
    windows_per_bucket = 4_000_000

    def __init__(self, cfg: SubstringsConfig, char_mode: bool, backend=None):
        self.cfg, self.char_mode = cfg, char_mode
        self.kernels = backend.substrings if backend is not None else cpu

    def run(self, ddf):
        return ddf.map_partitions(substring_partition, self.char_mode, self.cfg.min_tokens,
                                  self.kernels.window_hashes, meta=ddf._meta)

    def collect(self, ddf, table, kept: list, executor: Executor, apply) -> tuple:
        """Exchange the kept documents' windows by key, find the repeated ones bucket by bucket, and give
        each partition of ``table`` (``DocParts``) its spans: ``apply(annotations, SubstringResult) ->
        annotations``. ``kept``: per partition, a task of its bool mask of the documents that count.
        Returns ``(table, stats)``; ``stats["top_spans"]`` holds ``(count, row, start, end)`` of the most
        repeated spans, whose texts the write fills in (``top_span_samples``)."""
        cfg = self.cfg
        parts = ddf.to_delayed()
        sizes = executor.compute([delayed(_window_count)(p, m) for p, m in zip(parts, kept)],
                                 "substrings: count windows")
        n_buckets = max(1, -(-int(sum(sizes)) // self.windows_per_bucket))
        by_key = exchange(executor, _windows_by_key, [(p, m, q) for q, (p, m) in enumerate(zip(parts, kept))],
                          n_buckets, desc="substrings: split windows")
        buckets = [delayed(_repeated)(pieces, self.kernels.repeated_windows) for pieces in by_key]
        to_parts = exchange(executor, _hits_by_partition, [(b,) for b in buckets], len(parts),
                            desc="substrings: repeated windows")
        found = [delayed(_partition_spans)(p, pieces, m, cfg.min_tokens, cfg.keep == "none", cfg.min_doc_chars)
                 for p, pieces, m in zip(parts, to_parts, kept)]
        table = table.update(executor, _apply_spans, "substrings: spans", found, apply=apply)
        per_part = executor.compute(table.map(_span_counts), "substrings: count")
        bucket_counts = np.sum([r[3] for r in per_part], axis=0)
        total = {key: int(sum(r[0][key] for r in per_part)) for key in per_part[0][0]}
        top = heapq.nlargest(TOP_SPANS * 4, [(c, -row, s, e, h) for r in per_part for c, row, s, e, h in r[1]])
        seen, top_spans = set(), []
        for count, row, s, e, key in top:  # one span per key (a span repeated as a whole is one entry)
            if key not in seen and len(top_spans) < TOP_SPANS:
                seen.add(key)
                top_spans.append({"count": int(count), "row": -row, "start": int(s), "end": int(e)})
        stats = {"unit": "char" if self.char_mode else "word", "min_tokens": cfg.min_tokens, "keep": cfg.keep,
                 **dict(zip(("windows", "distinct_windows", "repeated_windows", "repeated_window_occurrences"),
                            bucket_counts.tolist())),
                 **total, "buckets": n_buckets, "top_spans": top_spans}
        stats["share_removed"] = round(stats["removed_bytes"] / stats["bytes_in_kept_documents"], 5) \
            if stats.get("bytes_in_kept_documents") else 0.0
        stats["read_seconds"] = round(sum(r[2] for r in per_part), 4)  # units and keys, in the read pass
        return table, stats


def span_samples(top_spans: list, first_row: int, doc_ids, texts) -> dict:
    """``{k: {"doc_id", "sample"}}`` for the entries of ``top_spans`` (``{"row", "start", "end"}``: table row
    and byte range) whose rows are among ``doc_ids`` (``first_row`` onwards), ``texts`` their original
    texts; a sample is the span's text, cut at ``SAMPLE_CHARS`` characters."""
    out = {}
    for k, span in enumerate(top_spans):
        r = span["row"] - first_row
        if 0 <= r < len(doc_ids):
            text = (texts[r].as_py() or "").encode("utf-8")[span["start"]:span["end"]].decode("utf-8")
            out[k] = {"doc_id": doc_ids[r].as_py(), "sample": text[:SAMPLE_CHARS] + ("…" if len(text) > SAMPLE_CHARS
                                                                                      else "")}
    return out


def _window_count(df: pd.DataFrame, kept: np.ndarray) -> int:
    w = df.attrs["substrings"]["win_cursor"]
    return int(np.diff(w)[kept].sum())


def _windows_by_key(df: pd.DataFrame, kept: np.ndarray, q: int, n_buckets: int) -> tuple:
    """The kept documents' windows as ``(hi, lo, key)`` pieces, one per bucket (the top bits of ``hi``), in
    corpus order: ``key = q << LOCAL_BITS | the window's first unit in the partition`` orders them and says
    where they are."""
    d = df.attrs["substrings"]
    hi, lo, key, cuts = cpu.split_windows(d["hi"], d["lo"], d["cursor"], d["win_cursor"],
                                          np.ascontiguousarray(kept, bool), q, LOCAL_BITS, n_buckets)
    return tuple((hi[cuts[b]:cuts[b + 1]], lo[cuts[b]:cuts[b + 1]], key[cuts[b]:cuts[b + 1]])
                 for b in range(n_buckets))


def _repeated(pieces: list, repeated_windows) -> tuple:
    """One bucket's repeated windows ``(key, removable, count)`` and its counts (int64[4]: windows, distinct
    keys, repeated keys, their windows)."""
    hi = np.concatenate([p[0] for p in pieces])
    lo = np.concatenate([p[1] for p in pieces])
    key = np.concatenate([p[2] for p in pieces])
    index, removable, count, distinct = repeated_windows(hi, lo)
    counts = np.array([len(hi), distinct, len(index) - removable.sum(), len(index)], np.int64)
    return key[index], removable, count, counts


def _hits_by_partition(bucket: tuple, n_parts: int) -> tuple:
    """A bucket's hits split by partition; the bucket's counts ride with partition 0's piece (they reach
    the driver with its counts, and the bucket is not computed again for them)."""
    key, removable, count, counts = bucket
    order, cuts = cpu.counting_order(key >> LOCAL_BITS, n_parts)
    key, removable, count = key[order], removable[order], count[order]
    return tuple((key[cuts[q]:cuts[q + 1]], removable[cuts[q]:cuts[q + 1]], count[cuts[q]:cuts[q + 1]],
                  counts if q == 0 else counts[:0]) for q in range(n_parts))


def _partition_spans(df: pd.DataFrame, pieces: list, kept: np.ndarray, k: int, keep_none: bool,
                     min_doc_chars: int) -> dict:
    """One partition's spans, cuts, counts and drops from its repeated windows (``pieces``)."""
    d = df.attrs["substrings"]
    cursor, win_cursor = d["cursor"], d["win_cursor"]
    n = len(cursor) - 1
    unit = np.concatenate([p[0] for p in pieces]) & ((1 << LOCAL_BITS) - 1)
    removable = np.concatenate([p[1] for p in pieces])
    count = np.concatenate([p[2] for p in pieces]).astype(np.int32)
    rep, cut = cpu.covered_spans(cursor, unit, removable, count, k, keep_none)
    spans, rep_bytes = _ranges(d, rep, n)
    cuts, cut_bytes = _ranges(d, cut, n)
    chars_removed = np.bincount(cut[2], weights=d["char_end"][cut[1]] - d["char_start"][cut[0]],
                                minlength=n).astype(np.int64)
    doc_chars = d["doc_chars"]
    left = doc_chars - chars_removed
    drop = kept & (chars_removed > 0) & (left < min_doc_chars)
    reason = np.full(n, None, dtype=object)
    for r in np.flatnonzero(drop):
        reason[r] = (f"substrings: {left[r]} characters left after removing {len(cuts[r]) // 2} repeated "
                     f"span(s) < min_doc_chars {min_doc_chars}")
    # the report's candidates: each span by the key of its most repeated window
    best = np.argsort(-rep[3], kind="stable")[:TOP_SPANS * 4]
    top_window = win_cursor[rep[2][best]] + (rep[4][best] - cursor[rep[2][best]])
    top = [(int(rep[3][i]), int(rep[2][i]), int(d["start"][rep[0][i]]), int(d["end"][rep[1][i]]),
            (int(d["hi"][w]), int(d["lo"][w]))) for i, w in zip(best, top_window)]
    counts = {"documents_touched": int(sum(s is not None for s in spans)),
              "documents_changed": int((chars_removed > 0).sum()), "repeated_bytes": int(rep_bytes.sum()),
              "removed_bytes": int(cut_bytes.sum()), "chars_removed": int(chars_removed.sum()),
              "bytes_in_kept_documents": int(d["doc_bytes"][kept].sum()), "dropped": int(drop.sum())}
    bucket_counts = np.sum([p[3] for p in pieces if len(p[3])] or [np.zeros(4, np.int64)], axis=0)
    return {"spans": spans, "cuts": cuts, "chars_removed": chars_removed, "drop": drop, "reason": reason,
            "counts": counts, "top": top, "seconds": d["seconds"], "bucket_counts": bucket_counts}


def _ranges(d: dict, runs: tuple, n: int) -> tuple[list, np.ndarray]:
    """Per document, the flat byte ranges ``[s0, e0, ...]`` of ``runs`` (None for none), and their bytes."""
    first, last, text = runs[0], runs[1], runs[2]
    starts, ends = d["start"][first], d["end"][last]
    out: list = [None] * n
    counts = np.bincount(text, minlength=n)
    flat = np.column_stack((starts, ends)).reshape(-1).tolist()
    pos = 0
    for t in np.flatnonzero(counts):
        out[t] = flat[pos:pos + 2 * counts[t]]
        pos += 2 * counts[t]
    return out, np.bincount(text, weights=ends - starts, minlength=n).astype(np.int64)


def _apply_spans(state: dict, first_row: int, found: dict, *, apply) -> dict:
    result = SubstringResult(found["spans"], found["cuts"], found["chars_removed"], found["drop"], found["reason"])
    top = [(c, first_row + t, s, e, h) for c, t, s, e, h in found["top"]]
    # what this stage drops: documents still kept now (the paragraph stage may have dropped some)
    counts = dict(found["counts"], dropped=int((found["drop"] & np.asarray(state["annotations"].column("keep"))).sum()))
    return {"annotations": apply(state["annotations"], result),
            "substring_counts": (counts, top, found["seconds"], found["bucket_counts"])}


def _span_counts(state: dict, first_row: int) -> dict:
    return state["substring_counts"]


# ------------------------------------------------------------------------------------------------
# Plain-Python specification (tests, the benchmark's suffix-array baseline). Not used by the pipeline.

def reference_units(text: str, char_mode: bool = False) -> tuple[list[str], list[tuple[int, int]]]:
    """The units of ``text`` (normal forms) and their byte spans in its UTF-8 encoding."""
    units, spans = [], []
    pos = 0
    encoded_at = []
    for ch in text:
        encoded_at.append(pos)
        pos += len(ch.encode("utf-8"))
    encoded_at.append(pos)
    i = 0
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        j = i + 1
        if not char_mode:
            while j < len(text) and not text[j].isspace():
                j += 1
        units.append(reference_normal_form(text[i:j]))
        spans.append((encoded_at[i], encoded_at[j]))
        i = j
    return units, spans


def reference_normal_form(unit: str) -> str:
    """The normal form of one unit: NFKC, then the normalization's lowercase (``reference_lower``)."""
    return reference_lower(unicodedata.normalize("NFKC", unit))


def reference_spans(texts: list[str], k: int, keep: str = "first", char_mode: bool = False) -> list[tuple]:
    """Per text ``(repeated, removable)``: flat byte ranges of the maximal runs of repeated and of removable
    units, by the stage's rule, comparing the windows' unit sequences themselves."""
    units = [reference_units(t, char_mode) for t in texts]
    first: dict = {}
    seen: dict = {}
    for d, (u, _) in enumerate(units):
        for p in range(len(u) - k + 1):
            w = tuple(u[p:p + k])
            seen[w] = seen.get(w, 0) + 1
            first.setdefault(w, (d, p))
    out = []
    for d, (u, spans) in enumerate(units):
        rep = [False] * len(u)
        rem = [False] * len(u)
        for p in range(len(u) - k + 1):
            w = tuple(u[p:p + k])
            if seen[w] >= 2:
                for i in range(p, p + k):
                    rep[i] = True
                    if keep == "none" or first[w] != (d, p):
                        rem[i] = True
        out.append((_runs_of(rep, spans), _runs_of(rem, spans)))
    return out


def _runs_of(flags: list, spans: list) -> list:
    out: list = []
    i = 0
    while i < len(flags):
        if flags[i]:
            j = i
            while j + 1 < len(flags) and flags[j + 1]:
                j += 1
            out += [spans[i][0], spans[j][1]]
            i = j + 1
        else:
            i += 1
    return out


def suffix_array_spans(texts: list[str], k: int, keep: str = "first", char_mode: bool = False) -> list[tuple]:
    """``reference_spans`` by a suffix array (PyPI ``pydivsufsort``) and its LCP array over the units: the
    baseline of ``benchmarks/bench_substrings.py`` and a second reference of the tests.

    The texts' units (numbered by their ``a`` hash) are laid end to end, each text followed by a separator
    of its own, so no common prefix crosses texts. Suffixes next to each other in the suffix array with an
    LCP of at least ``k`` start the same window; a run of them is all of one window's occurrences, and the
    smallest position is its first."""
    from pydivsufsort import divsufsort, kasai
    raw = pa.array(texts, pa.large_string())
    offsets, start, end, cursor, a, _, _ = unit_hashes(raw, char_mode)
    n, units = len(texts), len(a)
    _, ids = np.unique(a, return_inverse=True)
    text_of = np.repeat(np.arange(n), np.diff(cursor))
    at = np.arange(units) + text_of  # each unit's place in the sequence; text d's separator after its units
    seq = np.full(units + n, 0, np.int64)
    seq[at] = ids + 1 + n
    seq[np.cumsum(np.diff(cursor)) + np.arange(n)] = np.arange(1, n + 1)  # separators 1..n, all distinct
    sa = divsufsort(seq.astype(np.uint32))
    lcp = kasai(seq.astype(np.uint32), sa)
    same = lcp[:-1] >= k  # sa[i] and sa[i + 1] start the same window
    group = np.concatenate(([0], np.cumsum(~same)))
    size = np.bincount(group)
    first = np.full(len(size), len(seq), np.int64)
    np.minimum.at(first, group, sa)
    repeated = size[group] >= 2
    removable = repeated & ((sa != first[group]) | (keep == "none"))
    out = []
    for flags in (repeated, removable):
        diff = np.zeros(len(seq) + 1, np.int64)
        np.add.at(diff, sa[flags], 1)
        np.add.at(diff, sa[flags] + k, -1)
        covered = np.cumsum(diff)[:-1][at] > 0
        unit_diff = np.diff(np.concatenate(([0], covered.astype(np.int32), [0]))).astype(np.int32)
        runs = cpu.runs_of(cursor, unit_diff, np.zeros(units, np.int32), units // 2 + 1)
        out.append(_ranges({"start": start, "end": end}, runs, n)[0])
    return [(rep or [], rem or []) for rep, rem in zip(*out)]
