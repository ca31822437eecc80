"""The LSH buckets of an ingest state, on disk: band key -> fuzzy item, in sorted runs.

A batch's new items are paired with the stored ones through the buckets they join, with the rule of a
full run (``kernels.pairs.bucket_pairs``) applied to each bucket's size after the batch: so the
candidate pairs that involve a new item are those a run over the whole collection would form. Only the
buckets the batch touches are read, and of a bucket larger than ``max_bucket`` only its first
``anchors`` members and its last.
"""

from __future__ import annotations

import numpy as np

from ..io.sorted_runs import SortedRuns, read_ranges
from ..kernels.pairs import new_bucket_pairs

ITEM = np.dtype(np.int64)


def bucket_entries(new_keys: np.ndarray, first_new: int, with_shingles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(keys uint64[e], items int64[e])``: the band keys of the new items ``first_new + i``
    (``new_keys`` uint64[k, bands]) that have shingles, items ascending within each key (the order a run
    of the index keeps)."""
    rows = np.flatnonzero(with_shingles)
    keys = np.ascontiguousarray(new_keys[rows]).ravel()
    items = np.repeat(first_new + rows.astype(np.int64), new_keys.shape[1])
    order = np.argsort(keys, kind="stable")  # items are ascending: equal keys keep them so
    return keys[order], items[order]


def stored_bucket_pairs(index: SortedRuns, keys: np.ndarray, items: np.ndarray, max_bucket: int,
                        anchors: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct candidate pairs ``(i, j)`` (``i < j``, sorted) that involve a new item, given the new
    bucket entries ``keys``/``items`` (sorted by key, then item; every new item larger than every stored
    one) and the stored ``index``.

    Per run and touched key the index is asked for the entries' range; a bucket that stays within
    ``max_bucket`` is read whole, a larger one only up to its first ``anchors + 1`` entries per run and its
    newest run's last entry."""
    new_start = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(keys) else np.empty(0, np.int64)
    distinct = keys[new_start]
    new_offsets = np.r_[new_start, len(keys)].astype(np.int64)
    n_new = np.diff(new_offsets)
    ranges = [index.bounds(run, distinct, present=True) for run in index.runs]
    old_count = sum((hi - lo for lo, hi in ranges), np.zeros(len(distinct), np.int64))
    whole = old_count + n_new <= max_bucket
    # per run: the entries to read of each key (all, or a head); the runs are oldest first, so their
    # entries of a key are ascending in item
    head = np.where(whole, old_count, anchors + 1)
    taken = [np.minimum(hi - lo, head) for lo, hi in ranges]
    old_of, old_item = [], []
    for run, (lo, hi), n in zip(index.runs, ranges, taken):
        if n.any():
            old_item.append(read_ranges(run.file("values"), ITEM, lo, lo + n))
            old_of.append(np.repeat(np.arange(len(distinct)), n))
    # a large bucket's last entry: in the newest run that has the key
    big = np.flatnonzero(~whole & (old_count > anchors + 1))
    last = np.zeros(len(big), np.int64)
    for run, (lo, hi) in zip(index.runs, ranges):
        has = hi[big] > lo[big]
        if has.any():
            last[has] = read_ranges(run.file("values"), ITEM, hi[big][has] - 1, hi[big][has])
    old_of = np.concatenate(old_of + [big])
    old_item = np.concatenate(old_item + [last]) if old_item or len(big) else np.empty(0, np.int64)
    # per key: its head entries from every run, in run order (= item order), cut to what the rule reads,
    # then the last entry of a large bucket
    order = np.argsort(old_of, kind="stable")
    old_of, old_item = old_of[order], old_item[order]
    is_last = order >= len(order) - len(big)
    rank = np.arange(len(old_of)) - np.searchsorted(old_of, old_of)
    keep_head = np.where(whole[old_of], True, rank < np.minimum(old_count, anchors + 1)[old_of])
    keep = np.where(is_last, True, keep_head)
    old_of, old_item = old_of[keep], old_item[keep]
    old_offsets = np.r_[0, np.cumsum(np.bincount(old_of, minlength=len(distinct)))].astype(np.int64)
    packed = np.unique(new_bucket_pairs(old_offsets, old_item, old_count, new_offsets, items.astype(np.int64),
                                        max_bucket, anchors))
    return (packed >> np.uint64(32)).astype(np.int64), (packed & np.uint64(0xFFFFFFFF)).astype(np.int64)
