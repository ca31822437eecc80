"""The orchestration between the CUDA kernels, written once against an array namespace.

Every function takes a ``DeviceArrays`` (``dev``: CuPy on a GPU; NumPy or the strict array-API
namespace with the kernels in numba's CUDA simulator in the tests) and device arrays, and returns
device arrays. Only ``xp`` functions of the array-API standard are used (no ``lexsort``, no ``repeat``
with counts, no integer-array assignment): sorts are stable ``argsort``s, segment ids come from
``searchsorted`` over offsets, scatters are a kernel. Sizes that shape a new array are the only values
read back (``dev.scalar``, and the count of every ``dev.nonzero`` / ``dev.compress``: 8 bytes each,
counted in the ledger; the glue indexes with no boolean mask of its own).

Results are bit-identical to the CPU kernels (``kernels.minhash``, ``kernels.pairs``): the same hash
definitions, the same bucket rule, the same component labels (smallest member index).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..kernels.cuda import NO_PAIR
from ..kernels.minhash import WORD


@dataclass
class DeviceTexts:
    """A partition's normalized texts on the device: ``offsets int64[n + 1]`` from 0, ``words`` the bytes
    as little-endian ``uint64`` (``hashing.padded_words``), ``nbytes`` their count."""
    offsets: object
    words: object
    nbytes: int

    @property
    def n(self) -> int:
        return self.offsets.shape[0] - 1


@dataclass
class DeviceSketch:
    """MinHash sketches of ``n`` texts: ``keys uint64[n, bands]``, distinct shingle hashes sorted within each
    text (``set_offsets int64[n + 1]``, ``set_values uint64[...]``), and ``sigs uint32[n, P]`` or None."""
    keys: object
    set_offsets: object
    set_values: object
    sigs: object = None


def stage_texts(offsets: np.ndarray, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The host side of ``upload_texts``: ``(offsets from 0, as int32 when they fit, the bytes they cover)``;
    work that needs no device, done before taking its lock."""
    start, stop = int(offsets[0]), int(offsets[-1])
    local = offsets - offsets[0]
    return (local.astype(np.int32) if stop - start < 2 ** 31 else local.astype(np.int64)), data[start:stop]


def upload_texts(dev, offsets: np.ndarray, data: np.ndarray, staged: tuple | None = None) -> DeviceTexts:
    """Copy one partition's Arrow string buffers up once. The offsets may start anywhere (a sliced Arrow
    array); only the bytes they cover go up, and the offsets as int32 when they fit (4 bytes a text).
    ``staged``: ``stage_texts(offsets, data)`` when already made."""
    local, covered = staged if staged is not None else stage_texts(offsets, data)
    xp = dev.xp
    dev_offsets = dev.to_device(local)
    words = dev.to_device_words(covered)
    return DeviceTexts(xp.astype(dev_offsets, xp.int64), words, len(covered))


def segment_ids(xp, seg_offsets, total: int):
    """int64[total]: the segment of each element of segments ``seg_offsets`` (int64[k + 1], from 0)."""
    return xp.searchsorted(seg_offsets[1:], xp.arange(total, dtype=xp.int64), side="right")


def _exclusive_cumsum(xp, counts):
    return xp.concat([xp.zeros(1, dtype=xp.int64), xp.cumulative_sum(xp.astype(counts, xp.int64))])


def lexsort_order(xp, primary, secondary):
    """int64 permutation sorting by ``primary``, then ``secondary`` (``np.lexsort((secondary, primary))``):
    a stable sort by the secondary key, then a stable sort by the primary one."""
    by_secondary = xp.argsort(secondary, stable=True)
    return xp.take(by_secondary, xp.argsort(xp.take(primary, by_secondary), stable=True))


def run_starts(xp, sorted_values):
    """bool[m]: where a run of equal values starts."""
    if sorted_values.shape[0] == 0:
        return xp.zeros(0, dtype=xp.bool)
    return xp.concat([xp.ones(1, dtype=xp.bool), sorted_values[1:] != sorted_values[:-1]])


@dataclass
class TextUnits:
    """Where the units (words or code points) of each text are: ``bounds`` (byte offsets of the spaces, or
    of the code point starts), ``cursor int64[n + 1]`` (text d owns ``bounds[cursor[d]:cursor[d + 1]]``),
    ``words`` and ``chars`` per text (int64[n])."""
    spaces: object
    space_cursor: object
    words: object
    chars: object
    cp_starts: object = None
    cp_cursor: object = None


def text_units(dev, t: DeviceTexts, char_mode: bool) -> TextUnits:
    """Spaces and code points of every text (``minhash.unit_bounds`` and the exact stage's counts)."""
    xp = dev.xp
    space = dev.empty(t.nbytes, xp.uint8)
    cont = dev.empty(t.nbytes, xp.uint8)
    dev.launch("byte_flags", t.nbytes, t.words, t.nbytes, space, cont)
    spaces = dev.nonzero(space)
    cursor = xp.searchsorted(spaces, t.offsets)
    lengths = t.offsets[1:] - t.offsets[:-1]
    words = xp.where(lengths > 0, cursor[1:] - cursor[:-1] + 1, 0)
    continuation = xp.searchsorted(dev.nonzero(cont), t.offsets)
    chars = lengths - (continuation[1:] - continuation[:-1])
    units = TextUnits(spaces, cursor, words, chars)
    if char_mode:
        units.cp_starts = dev.nonzero(cont == 0)
        units.cp_cursor = xp.searchsorted(units.cp_starts, t.offsets)
    return units


def text_hashes(dev, t: DeviceTexts):
    """uint64[n] exact-stage hash of each text (``minhash.text_hashes``)."""
    out = dev.empty(t.n, dev.xp.uint64)
    dev.launch("text_hashes", t.n, t.words, t.offsets, out)
    return out


def unit_hashes(dev, t: DeviceTexts, bounds, cursor, mode: int, seed):
    """Hash of every unit of every text and ``unit_first int64[n + 1]`` (text d's units)."""
    xp = dev.xp
    lengths = t.offsets[1:] - t.offsets[:-1]
    spans = cursor[1:] - cursor[:-1]
    units = xp.where(lengths > 0, spans + 1, 0) if mode == WORD else spans
    unit_first = _exclusive_cumsum(xp, units)
    total = dev.scalar(unit_first[-1])
    out = dev.empty(total, xp.uint64)
    dev.launch("unit_hashes", total, t.words, t.offsets, bounds, cursor, unit_first, segment_ids(xp, unit_first, total),
               mode, np.uint64(seed), out)
    return out, unit_first


def shingle_sets(dev, unit_hash, unit_first, k: int, seed):
    """Distinct shingle hashes of every text, sorted within the text: ``(set_offsets, set_values)``."""
    xp = dev.xp
    units = unit_first[1:] - unit_first[:-1]
    counts = xp.where(units > k, units - k + 1, xp.minimum(units, 1))
    sh_first = _exclusive_cumsum(xp, counts)
    total = dev.scalar(sh_first[-1])
    sh_doc = segment_ids(xp, sh_first, total)
    hashes = dev.empty(total, xp.uint64)
    dev.launch("shingle_hashes", total, unit_hash, unit_first, sh_first, sh_doc, k, np.uint64(seed), hashes)
    hashes = xp.take(hashes, lexsort_order(xp, sh_doc, hashes))  # by (text, hash); sh_doc stays in order
    first = run_starts(xp, hashes)
    if total:
        first = first | run_starts(xp, sh_doc)
    values, kept_doc = dev.compress(first, hashes, sh_doc)
    n = units.shape[0]
    return xp.searchsorted(kept_doc, xp.arange(n + 1, dtype=xp.int64)), values


def minhash_signatures(dev, set_offsets, set_values, perm_a, perm_b):
    """uint32[n, P] MinHash signatures of the sets (``EMPTY_SIG`` rows for empty sets)."""
    n, p = set_offsets.shape[0] - 1, perm_a.shape[0]
    sigs = dev.empty((n, p), dev.xp.uint32)
    dev.launch("minhash", n * p, set_offsets, _nonempty(dev, set_values), perm_a, perm_b, sigs)
    return sigs


def band_keys(dev, sigs, bands: int, rows: int, seed):
    out = dev.empty((sigs.shape[0], bands), dev.xp.uint64)
    dev.launch("band_keys", sigs.shape[0] * bands, sigs, bands, rows, np.uint64(seed), out)
    return out


def _nonempty(dev, values):
    """A zero-size array as one unused element (kernels cannot take zero-size buffers on every driver)."""
    return values if values.shape[0] else dev.zeros(1, values.dtype)


def sketch(dev, t: DeviceTexts, units: TextUnits, params, perm_a, perm_b) -> DeviceSketch:
    """Band keys, sorted distinct shingle sets and (``params.keep_signatures``) signatures of every text."""
    bounds, cursor = (units.spaces, units.space_cursor) if params.mode == WORD else (units.cp_starts, units.cp_cursor)
    unit_hash, unit_first = unit_hashes(dev, t, bounds, cursor, params.mode, params.seed)
    set_offsets, set_values = shingle_sets(dev, unit_hash, unit_first, params.k, params.seed)
    sigs = minhash_signatures(dev, set_offsets, set_values, perm_a, perm_b)
    keys = band_keys(dev, sigs, params.bands, params.rows, params.seed)
    return DeviceSketch(keys, set_offsets, set_values, sigs if params.keep_signatures else None)


def select(dev, sk: DeviceSketch, mask) -> DeviceSketch:
    """The sketches of the texts where ``mask`` (bool[n], on the device) is true, in order."""
    xp = dev.xp
    lengths, keys, *sigs = dev.compress(mask, sk.set_offsets[1:] - sk.set_offsets[:-1], sk.keys,
                                        *([sk.sigs] if sk.sigs is not None else []))
    owner = segment_ids(xp, sk.set_offsets, sk.set_values.shape[0])
    values = dev.compress(xp.take(mask, owner), sk.set_values)[0] if sk.set_values.shape[0] else sk.set_values
    return DeviceSketch(keys, _exclusive_cumsum(xp, lengths), values, sigs[0] if sigs else None)


def concat_sketches(dev, parts: list[DeviceSketch], bands: int, n_perm: int) -> DeviceSketch:
    xp = dev.xp
    if not parts:
        return DeviceSketch(dev.empty((0, bands), xp.uint64), dev.zeros(1, xp.int64), dev.empty(0, xp.uint64))
    lengths = xp.concat([p.set_offsets[1:] - p.set_offsets[:-1] for p in parts])
    sigs = xp.concat([p.sigs for p in parts], axis=0) if parts[0].sigs is not None else None
    return DeviceSketch(xp.concat([p.keys for p in parts], axis=0), _exclusive_cumsum(xp, lengths),
                        xp.concat([p.set_values for p in parts]), sigs)


def candidate_pairs(dev, keys, max_bucket: int, anchors: int):
    """Distinct LSH candidate pairs ``(pi, pj)`` (int64, ``i < j``, sorted by ``(i, j)``) of the rows of
    ``keys uint64[m, bands]``: ``pairs.candidate_pairs`` on the device."""
    xp = dev.xp
    m, bands = keys.shape
    flat = xp.reshape(keys, (-1,))
    if flat.shape[0] == 0:
        return dev.empty(0, xp.int64), dev.empty(0, xp.int64)
    order = xp.argsort(flat, stable=True)  # within a bucket, by document (entries are in document order)
    packed = unique_pairs(dev, bucket_pairs(dev, xp.take(flat, order), order // bands, max_bucket, anchors))
    return unpack_pairs(dev, packed)


def bucket_pairs(dev, sorted_keys, docs, max_bucket: int, anchors: int):
    """uint64 packed pairs ``min << 32 | max`` of the LSH bucket entries ``(sorted_keys, docs)``, sorted by
    key and, within a key, by document (``pairs.bucket_pairs``' rule), with repeats and ``NO_PAIR``."""
    xp = dev.xp
    total_entries = sorted_keys.shape[0]
    if total_entries == 0:
        return dev.empty(0, xp.uint64)
    starts = run_starts(xp, sorted_keys)
    run_start = dev.nonzero(starts)
    run_end = xp.concat([run_start[1:], xp.full(1, total_entries, dtype=xp.int64)])
    entry_run = xp.cumulative_sum(xp.astype(starts, xp.int64)) - 1
    a, b = xp.take(run_start, entry_run), xp.take(run_end, entry_run)
    x = xp.arange(total_entries, dtype=xp.int64)
    lim = xp.minimum(a + anchors, x)
    large = xp.where(x > a, (lim - a) + xp.astype(x - 1 >= lim, xp.int64), 0)
    counts = xp.where(b - a <= max_bucket, b - 1 - x, large)
    emit_at = _exclusive_cumsum(xp, counts)
    total = dev.scalar(emit_at[-1])
    packed = dev.empty(total, xp.uint64)
    dev.launch("emit_bucket_pairs", total_entries, docs, entry_run, run_start, run_end, emit_at[:-1], max_bucket,
               anchors, packed)
    return packed


def unique_pairs(dev, packed):
    """The distinct packed pairs, sorted, without ``NO_PAIR``."""
    xp = dev.xp
    packed = xp.sort(packed)
    return dev.compress(run_starts(xp, packed) & (packed != int(NO_PAIR)), packed)[0]


def unpack_pairs(dev, packed):
    """``(i, j)`` int64 of packed pairs ``i << 32 | j``."""
    xp = dev.xp
    return xp.astype(packed >> 32, xp.int64), xp.astype(packed & 0xFFFFFFFF, xp.int64)


def by_bucket(dev, bucket, n_buckets: int, *columns) -> tuple:
    """``n_buckets`` pieces of an exchange's split (``engine.shuffle.by_bucket`` on the device): piece ``b``
    holds, for each of ``columns``, its elements whose ``bucket`` (int64) is ``b``, in their order. The cut
    points come to the host (8 bytes a bucket) to slice the pieces."""
    return by_buckets(dev, n_buckets, (bucket, *columns))[0]


def by_buckets(dev, n_buckets: int, *groups) -> list[tuple]:
    """``by_bucket`` of several groups ``(bucket, *columns)`` at once, their cut points in one copy."""
    xp = dev.xp
    orders = [xp.argsort(g[0], stable=True) for g in groups]
    bounds = xp.arange(n_buckets + 1, dtype=xp.int64)
    cuts = dev.to_host(xp.concat([xp.searchsorted(xp.take(g[0], order), bounds) for g, order in zip(groups, orders)]))
    out = []
    for k, (g, order) in enumerate(zip(groups, orders)):
        cut = cuts[k * (n_buckets + 1):(k + 1) * (n_buckets + 1)]
        ordered = [xp.take(c, order, axis=0) for c in g[1:]]
        out.append(tuple(tuple(c[int(cut[b]):int(cut[b + 1])] for c in ordered) for b in range(n_buckets)))
    return out


def owners(dev, part_offsets, rows):
    """int64: the partition of each table row (``part_offsets`` int64[P + 1] on the device)."""
    xp = dev.xp
    return xp.searchsorted(part_offsets[1:], rows, side="right")


def take_sets(dev, set_offsets, set_values, index):
    """The sets ``index`` (int64) of a CSR, in that order: ``(offsets int64[k + 1], values)``."""
    xp = dev.xp
    lengths = xp.take(set_offsets[1:] - set_offsets[:-1], index)
    offsets = _exclusive_cumsum(xp, lengths)
    total = dev.scalar(offsets[-1])
    if total == 0:
        return offsets, dev.empty(0, set_values.dtype)
    seg = segment_ids(xp, offsets, total)
    source = xp.take(xp.take(set_offsets, index), seg) + (xp.arange(total, dtype=xp.int64) - xp.take(offsets, seg))
    return offsets, xp.take(set_values, source)


def jaccard(dev, set_offsets, set_values, pi, pj):
    """float64[p] exact Jaccard of each pair of sorted sets."""
    out = dev.empty(pi.shape[0], dev.xp.float64)
    dev.launch("jaccard_sorted", pi.shape[0], set_offsets, _nonempty(dev, set_values), pi, pj, out)
    return out


def signature_agreement(dev, sigs, pi, pj):
    out = dev.empty(pi.shape[0], dev.xp.float64)
    dev.launch("signature_agreement", pi.shape[0], sigs, pi, pj, out)
    return out


def components(dev, m: int, pi, pj):
    """int64[m] component label of each node, its smallest member (``pairs.components``): min-label
    hooking and pointer jumping until no edge joins two labels."""
    xp = dev.xp
    labels = xp.arange(m, dtype=xp.int64)
    while pi.shape[0]:
        changed = dev.zeros(1, xp.int32)
        dev.launch("hook_min", pi.shape[0], pi, pj, labels, changed)
        dev.launch("compress_labels", m, labels)
        if not dev.scalar(changed):
            break
    return labels


def canonicals(dev, labels, key=None):
    """int64[m] index of each element's canonical: the element of its group with the smallest ``key``
    (int64[m], smaller wins), ties to the smallest index (``table.canonicals`` over rows in order).
    Without a key that is the group's smallest index: the label itself, for labels from ``components``."""
    if key is None:
        return labels
    xp = dev.xp
    m = labels.shape[0]
    order = lexsort_order(xp, labels, key)
    starts = run_starts(xp, xp.take(labels, order))
    group = xp.cumulative_sum(xp.astype(starts, xp.int64)) - 1
    canon_sorted = xp.take(order, xp.take(dev.nonzero(starts), group))
    out = dev.empty(m, xp.int64)
    dev.launch("scatter", m, order, canon_sorted, out)
    return out


def window_keys(dev, a, b, cursor, win_cursor, k: int):
    """``(hi, lo)`` uint64 keys of every window (``kernels.substrings.window_hashes``): text d's windows are
    ``win_cursor[d]:win_cursor[d + 1]``, its units ``cursor[d]:cursor[d + 1]`` with hashes ``a``, ``b``."""
    xp = dev.xp
    total = dev.scalar(win_cursor[-1])
    hi, lo = dev.empty(total, xp.uint64), dev.empty(total, xp.uint64)
    dev.launch("window_keys", total, a, b, cursor, win_cursor, segment_ids(xp, win_cursor, total), k, hi, lo)
    return hi, lo


def repeated_windows(dev, hi, lo):
    """``kernels.substrings.repeated_windows`` of one bucket (windows in corpus order): a stable sort by
    ``(hi, lo)`` keeps each key's occurrences in corpus order, so a run's first element is the first
    occurrence. Returns ``(index, removable, count, distinct)``: the hits in sorted order (the CPU kernel's
    come in another order; what is made of them does not depend on it) and the number of keys."""
    xp = dev.xp
    m = hi.shape[0]
    if m == 0:
        return dev.empty(0, xp.int64), dev.empty(0, xp.bool), dev.empty(0, xp.int32), 0
    order = lexsort_order(xp, hi, lo)
    start = dev.empty(m, xp.uint8)
    dev.launch("key_run_starts", m, xp.take(hi, order), xp.take(lo, order), start)
    begins = dev.nonzero(start == 1)
    lengths = xp.concat([begins[1:], xp.full(1, m, dtype=xp.int64)]) - begins
    run = xp.cumulative_sum(xp.astype(start, xp.int64)) - 1
    count = xp.take(lengths, run)
    index, first, count = dev.compress(count >= 2, order, start, count)
    return index, first == 0, xp.astype(count, xp.int32), begins.shape[0]
