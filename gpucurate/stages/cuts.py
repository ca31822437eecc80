"""Byte ranges removed from texts: the removal stages (paragraphs, substrings) say which ranges of the
original UTF-8 text go, and the text after removal is made here, for the part files and for ``export
dataset``."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..config import ANNOTATION_COLUMNS, LANGUAGE_COLUMNS
from ..kernels.text import cut_ranges
from .normalize import arrow_buffers, from_buffers

#: annotation columns of byte ranges to remove, which ``output_annotations`` turns into ``paragraph_text``
#: and ``substring_text`` (and, together, ``removed_spans``)
PARAGRAPH_CUTS = "_paragraph_cuts"
SUBSTRING_CUTS = "_substring_cuts"
#: the byte ranges a contamination strip removed (only into ``removed_spans``: the gate makes stripped_text)
STRIP_CUTS = "_strip_cuts"
#: the type of a column of flat byte ranges; its items are named as Parquet's (compliant) lists name them,
#: so that a part file read back and rewritten (``rethreshold``) keeps its bytes
RANGES = pa.list_(pa.field("element", pa.int64()))


def merge_ranges(*flat: list | None) -> list | None:
    """The union of flat range lists ``[s0, e0, s1, e1, ...]`` (each ascending or not), as one ascending list
    of disjoint ranges; None when there is none."""
    pairs = sorted((a, b) for f in flat if f for a, b in zip(f[0::2], f[1::2]) if b > a)
    out: list = []
    for a, b in pairs:
        if out and a <= out[-1]:
            out[-1] = max(out[-1], b)
        else:
            out += [a, b]
    return out or None


def edited(raw: str, cuts: list, redactions: list) -> str:
    """``raw`` without the byte ranges ``cuts`` (flat ``[s0, e0, ...]``, ascending, disjoint), and with each
    redaction ``(start, end, token)`` replaced by its token; a redaction inside a cut goes with it."""
    data = raw.encode("utf-8")
    removed = merge_ranges(cuts, [x for a, e, _ in redactions for x in (a, e)]) or []
    tokens = sorted((a, t) for a, _, t in redactions
                    if not any(s <= a < e for s, e in zip(cuts[0::2], cuts[1::2])))
    out, pos, k = [], 0, 0
    for a, e in zip(removed[0::2], removed[1::2]):
        out.append(data[pos:a])
        while k < len(tokens) and tokens[k][0] < e:
            out.append(tokens[k][1].encode("utf-8"))
            k += 1
        pos = e
    out.append(data[pos:])
    return b"".join(out).decode("utf-8")


def cut_texts(texts: pa.Array, cuts: pa.Array, unchanged_null: bool = True) -> pa.Array:
    """``texts`` without the byte ranges ``cuts`` (``list<int64>`` per text: flat, ascending, disjoint
    pairs; null or empty for none), with the separators left side by side folded (``kernels.text.
    cut_ranges``). A text with no cut is null when ``unchanged_null``, else itself. Returns ``string[n]``."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    if isinstance(cuts, pa.ChunkedArray):
        cuts = cuts.combine_chunks()
    has_cut = pc.fill_null(pc.greater(pc.list_value_length(cuts), 0), False)
    if not pc.any(has_cut).as_py():  # nothing to cut (most batches of most runs): no kernel, no copy
        return pa.nulls(len(texts), pa.string()) if unchanged_null else texts.cast(pa.string())
    offsets, data = arrow_buffers(texts)
    values = cuts.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
    lengths = pc.fill_null(pc.list_value_length(cuts), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    cut_offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    out = from_buffers(*cut_ranges(offsets - offsets[0], data[offsets[0]:], cut_offsets, values)).cast(pa.string())
    if unchanged_null:
        return pc.if_else(has_cut, out, pa.scalar(None, pa.string()))
    return pc.if_else(has_cut, out, texts.cast(pa.string()))


def output_annotations(annotations: pa.Table, texts: pa.Array) -> tuple[list, list]:
    """The annotation columns as the part files hold them, in ``ANNOTATION_COLUMNS`` order: the removal
    stages' byte ranges (``_paragraph_cuts``, ``_substring_cuts``, ``_strip_cuts``) become ``paragraph_text``
    (blank-line runs folded, as ``paragraphs.apply_cuts``), ``substring_text`` and ``removed_spans``, the
    union of all three. ``texts``: the original texts of the rows. Returns ``(names, columns)``."""
    from .paragraphs import apply_cuts
    n = annotations.num_rows
    cuts = [annotations.column(name).combine_chunks() for name in (PARAGRAPH_CUTS, SUBSTRING_CUTS, STRIP_CUTS)]
    paragraph, substring = cuts[0], cuts[1]
    made = {"paragraph_text": pa.nulls(n, pa.string()), "substring_text": pa.nulls(n, pa.string()),
            "removed_spans": pa.nulls(n, RANGES)}
    texts = texts.combine_chunks() if isinstance(texts, pa.ChunkedArray) else texts
    if paragraph.null_count < n:
        made["paragraph_text"] = apply_cuts(texts, paragraph)
    if substring.null_count < n:
        made["substring_text"] = cut_texts(texts, substring)
    used = [c for c in cuts if c.null_count < n]
    if len(used) == 1:  # one stage's ranges are already ascending and disjoint
        made["removed_spans"] = pc.if_else(pc.fill_null(pc.greater(pc.list_value_length(used[0]), 0), False),
                                           used[0], pa.scalar(None, RANGES)).cast(RANGES)
    elif used:
        made["removed_spans"] = pa.array([merge_ranges(*r) for r in zip(*(c.to_pylist() for c in used))], RANGES)
    names = ANNOTATION_COLUMNS + tuple(c for c in LANGUAGE_COLUMNS if c in annotations.column_names)
    return list(names), [made[name] if name in made else annotations.column(name) for name in names]
