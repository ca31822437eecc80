"""Sorted runs on disk: the log-structured key index of the ingest state.

A *run* is an immutable set of files of entries ``(key uint64, value)``, sorted by key and, for equal keys,
kept in the order they were written:

    NAME.keys    uint64[n] raw (native byte order)
    NAME.fence   uint64[ceil(n / BLOCK)]: the first key of every block of ``BLOCK`` entries
    NAME.values  the values, raw fixed-width records of the index's dtype
    NAME.bloom   a blocked Bloom filter of the keys (``kernels.bloom``, ``BLOOM_BITS`` per entry)

An index is a list of runs, oldest first (the state's manifest names them). A lookup reads each run's
fence, then only the blocks of keys that can hold the keys asked for (neighbouring blocks in one read),
then only the values of the entries found. What it holds and reads grows with the keys asked and the
entries found, not with the index; and a key the run's Bloom filter rules out costs one 64-byte read. New entries are a new run; ``merge_runs`` merges runs into one, a key
range at a time, so that lookups open few runs whatever the number of batches (an LSM tree's compaction).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..kernels.bloom import BLOCK_WORDS, bloom_add, bloom_blocks, bloom_check

#: entries a fence key stands for in the runs written: a lookup reads a block (1 KB of keys) per run and key
#: that its Bloom filter lets through (each run records its own)
BLOCK = 128
#: bytes between two wanted records that a read goes through rather than seeking past them (about what
#: one more read call costs), and the most a read holds at once
GAP_BYTES = 64 << 10
PIECE_BYTES = 4 << 20
#: keys a lookup looks for at once (their blocks of keys are what it holds: 8 MB at most)
LOOKUP_KEYS = 8192
#: entries a merge holds at once (per key range), about 16 MB of keys and values
MERGE_ENTRIES = 1 << 20
#: bits of a run's Bloom filter per entry (about 1% of absent keys pass); 0: no filter
BLOOM_BITS = 10


#: the files of a run (suffixes)
RUN_FILES = ("keys", "fence", "values", "bloom")


@dataclass(frozen=True)
class Run:
    """One run: ``path`` (without suffix), its number of entries, and the entries of its fence's blocks."""
    path: Path
    count: int
    block: int = BLOCK

    def file(self, suffix: str) -> Path:
        return self.path.with_name(f"{self.path.name}.{suffix}")


class _RunWriter:
    """Appends sorted entries to a new run's files, with its fence."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.count = 0
        self.block = BLOCK
        self.files = {s: open(self.path.with_name(f"{self.path.name}.{s}"), "wb") for s in ("keys", "fence", "values")}

    def append(self, keys: np.ndarray, values: np.ndarray) -> None:
        keys = np.ascontiguousarray(keys, np.uint64)
        first = (-self.count) % self.block  # the next block's first entry within these keys
        self.files["fence"].write(np.ascontiguousarray(keys[first::self.block]).tobytes())
        self.files["keys"].write(keys.tobytes())
        self.files["values"].write(np.ascontiguousarray(values).tobytes())
        self.count += len(keys)

    def close(self) -> Run:
        for fh in self.files.values():
            fh.flush()
            os.fsync(fh.fileno())
            fh.close()
        run = Run(self.path, self.count, self.block)
        if BLOOM_BITS and self.count:  # its bits: the filter, 1/50 of the keys' bytes at 10 bits per entry
            n_blocks = max(1, -(-self.count * BLOOM_BITS // (64 * BLOCK_WORDS)))
            words = np.zeros(n_blocks * BLOCK_WORDS, np.uint64)
            for start in range(0, self.count, MERGE_ENTRIES):
                bloom_add(words, _read(run.file("keys"), np.dtype(np.uint64), start,
                                       min(self.count, start + MERGE_ENTRIES)), n_blocks)
            with open(run.file("bloom"), "wb") as fh:
                fh.write(words.tobytes())
                fh.flush()
                os.fsync(fh.fileno())
        return run


def write_run(path: Path, keys: np.ndarray, values: np.ndarray) -> Run:
    """A run of ``keys`` (uint64[n]) and ``values`` ([n] records), sorted by key (stable: equal keys keep
    their order here); fsynced."""
    order = np.argsort(keys, kind="stable")
    writer = _RunWriter(path)
    writer.append(keys[order], values[order])
    return writer.close()


def _read(path: Path, dtype: np.dtype, start: int, stop: int) -> np.ndarray:
    with open(path, "rb") as fh:
        fh.seek(start * dtype.itemsize)
        return np.fromfile(fh, dtype, stop - start)


def read_ranges(path: Path, dtype: np.dtype, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The records ``lo[i]:hi[i]`` of the file ``path``, concatenated in that order (``lo`` ascending).

    Ranges less than ``GAP_BYTES`` apart are read in one piece (reading through a gap costs less than
    another read), pieces are at most ``PIECE_BYTES`` (beyond what is asked), and each piece is cut to its
    ranges at once: what is held beyond the result is one piece."""
    keep = hi > lo
    lo, hi = lo[keep].astype(np.int64), hi[keep].astype(np.int64)
    if not len(lo):
        return np.empty(0, dtype)
    gap, cap = max(1, GAP_BYTES // dtype.itemsize), max(1, PIECE_BYTES // dtype.itemsize)
    reach = np.maximum.accumulate(hi)
    span = np.cumsum(np.r_[True, lo[1:] - reach[:-1] > gap]) - 1
    span_lo = lo[np.r_[0, np.flatnonzero(np.diff(span)) + 1]]
    # a long span is cut where its ranges cross a multiple of ``cap`` records from its start
    piece = np.cumsum(np.r_[True, (span[1:] != span[:-1])
                            | ((lo[1:] - span_lo[span[1:]]) // cap != (lo[:-1] - span_lo[span[:-1]]) // cap)]) - 1
    starts = np.r_[0, np.flatnonzero(np.diff(piece)) + 1]
    stops = np.r_[starts[1:], len(lo)]
    out = np.empty(int((hi - lo).sum()), dtype)
    written = 0
    with open(path, "rb") as fh:
        for a, b in zip(starts.tolist(), stops.tolist()):
            first, last = int(lo[a]), int(reach[b - 1])
            fh.seek(first * dtype.itemsize)
            got = np.fromfile(fh, dtype, last - first)
            take = got[aranges(lo[a:b] - first, hi[a:b] - lo[a:b])]
            out[written:written + len(take)] = take
            written += len(take)
    return out


def aranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``concatenate([arange(s, s + n) for s, n in zip(starts, lengths)])`` without a Python loop."""
    lengths = np.asarray(lengths, np.int64)
    total = int(lengths.sum())
    if not total:
        return np.empty(0, np.int64)
    nonzero = lengths > 0
    starts, lengths = np.asarray(starts, np.int64)[nonzero], lengths[nonzero]
    steps = np.ones(total, np.int64)
    first = np.zeros(len(lengths), np.int64)
    np.cumsum(lengths[:-1], out=first[1:])
    steps[0] = starts[0]
    steps[first[1:]] = starts[1:] - (starts[:-1] + lengths[:-1] - 1)
    return np.cumsum(steps)


class SortedRuns:
    """A multimap ``uint64 key -> value`` held in sorted runs on disk (oldest first).

    Parameters
    ----------
    runs : the runs, oldest first; dtype : the values' record dtype.
    """

    def __init__(self, runs: list[Run], dtype):
        self.runs = list(runs)
        self.dtype = np.dtype(dtype)
        self._fences: dict[Path, np.ndarray] = {}

    def __len__(self) -> int:
        return sum(r.count for r in self.runs)

    def _fence(self, run: Run) -> np.ndarray:
        if run.path not in self._fences:  # ceil(n / block) keys: 1/128 of the run's keys
            self._fences[run.path] = np.fromfile(run.file("fence"), np.uint64)
        return self._fences[run.path]

    def maybe(self, run: Run, keys: np.ndarray) -> np.ndarray:
        """bool[k]: the keys the run's Bloom filter lets through (all, without a filter)."""
        path = run.file("bloom")
        if not len(keys) or not path.is_file():
            return np.ones(len(keys), bool)
        n_blocks = path.stat().st_size // (8 * BLOCK_WORDS)
        block = bloom_blocks(keys, n_blocks)
        if len(keys) * 8 > n_blocks:  # keys in most blocks: the whole filter (1/50 of the keys' bytes) in a read
            return bloom_check(np.fromfile(path, np.uint64), block, keys)
        touched = np.unique(block)
        words = read_ranges(path, np.dtype(np.uint64), touched * BLOCK_WORDS, (touched + 1) * BLOCK_WORDS)
        return bloom_check(words, np.searchsorted(touched, block), keys)

    def bounds(self, run: Run, keys: np.ndarray, present: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """``(lo, hi)`` int64[k]: where the entries of each of ``keys`` (uint64[k], ascending) lie in ``run``
        (``np.searchsorted`` left and right of its keys), reading only the blocks of keys that hold them.
        ``present``: only the keys in the run matter (an absent key gets an empty range anywhere), so the
        keys the Bloom filter rules out are not looked for."""
        keys = np.asarray(keys, np.uint64)
        if not run.count or not len(keys):
            return np.zeros(len(keys), np.int64), np.zeros(len(keys), np.int64)
        if present:
            lo, hi = np.zeros(len(keys), np.int64), np.zeros(len(keys), np.int64)
            maybe = self.maybe(run, keys)
            if maybe.any():
                lo[maybe], hi[maybe] = self.bounds(run, keys[maybe])
            return lo, hi
        if len(keys) > LOOKUP_KEYS:
            parts = [self.bounds(run, keys[a:a + LOOKUP_KEYS]) for a in range(0, len(keys), LOOKUP_KEYS)]
            return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
        fence = self._fence(run)
        # an answer lies in the block whose first key is the last one before (left) or at (right) the key,
        # or at that block's end
        blocks = [np.maximum(np.searchsorted(fence, keys, side) - 1, 0) for side in ("left", "right")]
        touched = np.unique(np.concatenate(blocks))
        starts = touched * run.block
        stops = np.minimum(starts + run.block, run.count)
        keys_read = read_ranges(run.file("keys"), np.dtype(np.uint64), starts, stops)
        base = np.zeros(len(touched), np.int64)  # where each touched block begins in keys_read
        np.cumsum((stops - starts)[:-1], out=base[1:])
        out = []
        for side, block in zip(("left", "right"), blocks):
            at = np.searchsorted(touched, block)
            within = np.searchsorted(keys_read, keys, side) - base[at]  # keys_read is sorted: blocks in order
            out.append(block * run.block + np.clip(within, 0, (stops - starts)[at]))
        return out[0], out[1]

    def positions(self, run: Run, keys: np.ndarray, side: str) -> np.ndarray:
        """int64[k] ``np.searchsorted(run's keys, keys, side)`` for ``keys`` (uint64[k], ascending)."""
        return self.bounds(run, keys)[0 if side == "left" else 1]

    def find(self, keys: np.ndarray, values: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every entry whose key is one of ``keys`` (uint64[k], distinct, any order).

        Returns ``(which int64[m], run int64[m], values [m])``: the position in ``keys`` of each entry's key,
        the run it came from, and its value; ordered by key, then run (oldest first), then position in
        the run. ``values=False`` skips reading the values (an empty array is returned for them)."""
        keys = np.asarray(keys, np.uint64)
        order = np.argsort(keys)
        distinct = keys[order]
        if len(distinct) > 1 and not (distinct[1:] != distinct[:-1]).all():
            raise ValueError("find: the keys must be distinct")
        found_key, found_run, found_values = [], [], []
        for r, run in enumerate(self.runs):
            lo, hi = self.bounds(run, distinct, present=True)
            hit = hi > lo
            if not hit.any():
                continue
            lo, hi = lo[hit], hi[hit]
            found_key.append(np.repeat(np.flatnonzero(hit), hi - lo))
            found_run.append(np.full(len(found_key[-1]), r, np.int64))
            if values:
                found_values.append(read_ranges(run.file("values"), self.dtype, lo, hi))
        if not found_key:
            return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, self.dtype)
        key_of = np.concatenate(found_key)
        by_key = np.argsort(key_of, kind="stable")  # the runs were appended oldest first
        out = np.concatenate(found_values)[by_key] if values else np.empty(0, self.dtype)
        return order[key_of[by_key]], np.concatenate(found_run)[by_key], out

    def latest(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For a map whose newer runs replace older entries: ``(found bool[k], values [k])``, the newest
        entry of each key (values of keys not found are zeros)."""
        keys = np.asarray(keys, np.uint64)
        which, _, values = self.find(keys)
        out = np.zeros(len(keys), self.dtype)
        found = np.zeros(len(keys), bool)
        if len(which):
            last = np.r_[which[1:] != which[:-1], True]  # per asked key, entries run oldest to newest
            out[which[last]] = values[last]
            found[which[last]] = True
        return found, out


def merge_runs(runs: list[Run], dtype, path: Path, latest: bool = False,
               max_entries: int = MERGE_ENTRIES) -> Run:
    """One run of every entry of ``runs`` (oldest first), in key order and, for equal keys, oldest run first.
    ``latest``: keep only each key's newest entry. Works a key range at a time (about ``max_entries``
    entries, cut at fence keys), so it holds one range of every run, not the runs."""
    index = SortedRuns(runs, dtype)
    fences = np.sort(np.concatenate([index._fence(r) for r in runs])) if runs else np.empty(0, np.uint64)
    cuts = np.unique(fences[::max(1, max_entries // max((r.block for r in runs), default=BLOCK))])
    writer = _RunWriter(path)
    bounds = [np.zeros(len(runs), np.int64)]
    for cut in cuts[1:]:
        bounds.append(np.array([index.positions(r, np.array([cut], np.uint64), "left")[0] for r in runs], np.int64))
    bounds.append(np.array([r.count for r in runs], np.int64))
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        keys = [_read(r.file("keys"), np.dtype(np.uint64), a, b) for r, a, b in zip(runs, lo, hi)]
        values = [_read(r.file("values"), index.dtype, a, b) for r, a, b in zip(runs, lo, hi)]
        if not sum(len(k) for k in keys):
            continue
        keys, values = np.concatenate(keys), np.concatenate(values)
        order = np.argsort(keys, kind="stable")  # runs were concatenated oldest first
        keys, values = keys[order], values[order]
        if latest:
            last = np.r_[keys[1:] != keys[:-1], True]
            keys, values = keys[last], values[last]
        writer.append(keys, values)
    return writer.close()
