"""CUDA kernels (numba.cuda) of the hash-based stages, bit-identical to the CPU kernels.

Kernels only: device arrays in, device arrays out, no host copies and no orchestration. The glue
between them (sorts, scans, masks) is ``gpucurate.device.glue``, written once against an array
namespace; it launches these kernels through ``DeviceArrays.launch``. The hash functions are the
CPU ones' source compiled as CUDA device functions (``hashing.define_hash_functions``).

Every kernel is declared with ``@kernel(signature, hot=...)``: the signature is the one the glue
launches it with (checked at every launch in the simulator tests), so the real-compiler test
(``tests/test_cuda_compile.py``) and ``benchmarks/gpu_static.py`` build exactly what runs, for every
kernel in ``KERNELS``. With ``NUMBA_ENABLE_CUDASIM=1`` numba runs them in its CUDA simulator.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# numba-cuda 0.30 overloads np.row_stack when its first kernel compiles, and NumPy 2.5 removed that alias
# of np.vstack: on such an image (the lent H200's) every compile failed with an AttributeError
if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack

from numba import cuda  # noqa: E402

from .hashing import EXACT_SEED, M2, U64, define_hash_functions
from .minhash import EMPTY_SIG, WORD
from .substrings import BASE_A, BASE_B, define_window_functions

fmix64, _mix, _load, hash_bytes, minhash_value, band_seed, fold = define_hash_functions(
    cuda.jit(device=True, inline=True))
window_lane = define_window_functions(cuda.jit(device=True, inline=True))

#: threads per block of every launch
THREADS = 128
#: sentinel pair key (``bucket_pairs`` never emits it: ``i < j < 2**32``)
NO_PAIR = np.uint64(0xFFFFFFFFFFFFFFFF)


@dataclass(frozen=True)
class KernelSpec:
    """A kernel and how the glue launches it.

    name : the Python function's name; dispatcher : the ``cuda.jit`` dispatcher.
    signature : numba signature string of the launch (array layouts included).
    threads : threads per block; hot : on the exact + fuzzy hot path (its occupancy target applies).
    note : why a kernel is exempt from a resource target, when it is.
    """
    name: str
    dispatcher: object
    signature: str
    threads: int = THREADS
    hot: bool = False
    note: str | None = None


#: every kernel of the GPU backend, by name
KERNELS: dict[str, KernelSpec] = {}


def kernel(signature: str, hot: bool = False, note: str | None = None):
    """Declare a CUDA kernel with the signature it is launched with (registers it in ``KERNELS``)."""
    def wrap(fn):
        # on-disk cache (numba-cuda): a later process, e.g. each worker of a multi-GPU node, loads the
        # compiled kernel for its compute capability instead of running NVVM again
        dispatcher = cuda.jit(fn, cache=True)
        KERNELS[fn.__name__] = KernelSpec(fn.__name__, dispatcher, signature, THREADS, hot, note)
        return dispatcher
    return wrap


# --- text: bytes, units, hashes ----------------------------------------------------------------------

@kernel("void(uint64[::1], int64, uint8[::1], uint8[::1])")
def byte_flags(words, nbytes, space, cont):
    """space[i] = byte i is a space (32); cont[i] = byte i is a UTF-8 continuation byte."""
    i = cuda.grid(1)
    if i < nbytes:
        b = (words[i >> 3] >> U64((i & 7) * 8)) & U64(0xFF)
        space[i] = 1 if b == U64(32) else 0
        cont[i] = 1 if (b & U64(0xC0)) == U64(0x80) else 0


@kernel("void(uint64[::1], int64[::1], uint64[::1])", hot=True)
def text_hashes(words, offsets, out):
    """out[d] = hash_bytes(text d, EXACT_SEED): the exact-stage key."""
    d = cuda.grid(1)
    if d < out.shape[0]:
        out[d] = hash_bytes(words, offsets[d], offsets[d + 1], EXACT_SEED)


@kernel("void(uint64[::1], int64[::1], int64[::1], int64[::1], int64[::1], int64[::1], int64, uint64, "
        "uint64[::1])", hot=True)
def unit_hashes(words, offsets, bounds, cursor, unit_first, unit_doc, mode, seed, out):
    """Hash of unit t (a word or a code point) of every non-empty text, in text order.

    ``bounds``: byte offsets of the spaces (word mode) or of the code point starts (char mode);
    text d owns ``bounds[cursor[d]:cursor[d + 1]]`` and its units are ``unit_first[d]:unit_first[d + 1]``.
    A word runs from the text start or after a space to the next space or the text end.
    """
    t = cuda.grid(1)
    if t < out.shape[0]:
        d = unit_doc[t]
        u = t - unit_first[d]
        last = unit_first[d + 1] - 1
        if mode == WORD:
            start = offsets[d] if u == 0 else bounds[cursor[d] + u - 1] + 1
            end = offsets[d + 1] if t == last else bounds[cursor[d] + u]
        else:
            start = bounds[cursor[d] + u]
            end = offsets[d + 1] if t == last else bounds[cursor[d] + u + 1]
        out[t] = hash_bytes(words, start, end, seed)


@kernel("void(uint64[::1], int64[::1], int64[::1], int64[::1], int64, uint64, uint64[::1])", hot=True)
def shingle_hashes(unit_hash, unit_first, sh_first, sh_doc, k, seed, out):
    """Shingle s of text d starts at its unit ``s - sh_first[d]`` and folds up to ``k`` units:
    ``fmix64(fold(seed ^ M2, unit hashes))`` (a text of fewer than k units is one shingle)."""
    s = cuda.grid(1)
    if s < out.shape[0]:
        d = sh_doc[s]
        t0 = unit_first[d] + s - sh_first[d]
        t1 = min(t0 + k, unit_first[d + 1])
        h = seed ^ M2
        for t in range(t0, t1):
            h = fold(h, unit_hash[t])
        out[s] = fmix64(h)


@kernel("void(uint64[::1], int64[::1], int64[::1], uint64[::1], uint64[::1])",
        note="contamination n-grams: fold of word hashes with a per-gram seed (not on the dedup hot path)")
def fold_runs(unit_hash, first_unit, length, seeds, out):
    """out[s] = fmix64(fold of unit_hash[first_unit[s] : first_unit[s] + length[s]] into seeds[s])."""
    s = cuda.grid(1)
    if s < out.shape[0]:
        h = seeds[s]
        for t in range(first_unit[s], first_unit[s] + length[s]):
            h = fold(h, unit_hash[t])
        out[s] = fmix64(h)


# --- MinHash and LSH -----------------------------------------------------------------------------------

@kernel("void(int64[::1], uint64[::1], uint64[::1], uint64[::1], uint32[:, ::1])", hot=True)
def minhash(set_offsets, set_values, perm_a, perm_b, sigs):
    """sigs[d, i] = min over text d's shingle hashes h of minhash_value(a_i, b_i, h); one thread a cell,
    so the threads of a warp read the same shingle (a broadcast) under consecutive permutations."""
    cell = cuda.grid(1)
    n_perm = perm_a.shape[0]
    if cell < sigs.shape[0] * n_perm:
        d = cell // n_perm
        i = cell - d * n_perm
        best = EMPTY_SIG
        a = perm_a[i]
        b = perm_b[i]
        for r in range(set_offsets[d], set_offsets[d + 1]):
            v = minhash_value(a, b, set_values[r])
            if v < best:
                best = v
        sigs[d, i] = best


@kernel("void(uint32[:, ::1], int64, int64, uint64, uint64[:, ::1])", hot=True)
def band_keys(sigs, bands, rows, seed, out):
    """out[d, j] = fmix64 of band j's ``rows`` signature values folded into ``band_seed(seed, j)``."""
    cell = cuda.grid(1)
    if cell < sigs.shape[0] * bands:
        d = cell // bands
        j = cell - d * bands
        h = band_seed(seed, j)
        for r in range(j * rows, (j + 1) * rows):
            h = fold(h, sigs[d, r])
        out[d, j] = fmix64(h)


@kernel("void(int64[::1], int64[::1], int64[::1], int64[::1], int64[::1], int64, int64, uint64[::1])", hot=True)
def emit_bucket_pairs(docs, entry_run, run_start, run_end, emit_at, max_bucket, anchors, out):
    """The pairs of LSH bucket entry x (entries sorted by (key, doc); ``pairs.bucket_pairs``' rule).

    A bucket of at most ``max_bucket`` entries pairs x with every later entry (``min << 32 | max``,
    ``NO_PAIR`` when both are one document); in a larger one entry y pairs with the first ``anchors``
    entries before it and with its predecessor. Entry x writes from ``emit_at[x]``.
    """
    x = cuda.grid(1)
    if x < docs.shape[0]:
        r = entry_run[x]
        a = run_start[r]
        b = run_end[r]
        w = emit_at[x]
        dx = docs[x]
        if b - a <= max_bucket:
            for y in range(x + 1, b):
                dy = docs[y]
                if dx == dy:
                    out[w] = NO_PAIR
                else:
                    out[w] = (U64(min(dx, dy)) << U64(32)) | U64(max(dx, dy))
                w += 1
        elif x > a:
            lim = min(a + anchors, x)
            for z in range(a, lim):
                out[w] = (U64(docs[z]) << U64(32)) | U64(dx)
                w += 1
            if x - 1 >= lim:
                out[w] = (U64(docs[x - 1]) << U64(32)) | U64(dx)


# --- verification, components ------------------------------------------------------------------------

@kernel("void(int64[::1], uint64[::1], int64[::1], int64[::1], float64[::1])", hot=True)
def jaccard_sorted(offsets, values, pi, pj, out):
    """Exact Jaccard of two sorted distinct sets by a merge; 0 when both are empty."""
    t = cuda.grid(1)
    if t < out.shape[0]:
        a0, a1 = offsets[pi[t]], offsets[pi[t] + 1]
        b0, b1 = offsets[pj[t]], offsets[pj[t] + 1]
        inter = 0
        while a0 < a1 and b0 < b1:
            x, y = values[a0], values[b0]
            if x == y:
                inter += 1
                a0 += 1
                b0 += 1
            elif x < y:
                a0 += 1
            else:
                b0 += 1
        union = (offsets[pi[t] + 1] - offsets[pi[t]]) + (offsets[pj[t] + 1] - offsets[pj[t]]) - inter
        out[t] = inter / union if union > 0 else 0.0


@kernel("void(uint32[:, ::1], int64[::1], int64[::1], float64[::1])")
def signature_agreement(sigs, pi, pj, out):
    """MinHash Jaccard estimate of each pair: the fraction of equal signature positions."""
    t = cuda.grid(1)
    if t < out.shape[0]:
        eq = 0
        for r in range(sigs.shape[1]):
            if sigs[pi[t], r] == sigs[pj[t], r]:
                eq += 1
        out[t] = eq / sigs.shape[1]


@kernel("void(int64[::1], int64[::1], int64[::1], int32[::1])")
def hook_min(pi, pj, labels, changed):
    """One round of min-label hooking: for each edge whose ends have different labels (roots after
    ``compress_labels``), the larger root takes the smaller label."""
    t = cuda.grid(1)
    if t < pi.shape[0]:
        a = labels[pi[t]]
        b = labels[pj[t]]
        if a != b:
            lo, hi = min(a, b), max(a, b)
            old = cuda.atomic.min(labels, hi, lo)
            if old != lo:
                changed[0] = 1


@kernel("void(int64[::1])")
def compress_labels(labels):
    """Pointer jumping to the root: labels only ever point to smaller nodes of the same component, so
    concurrent updates stay valid."""
    x = cuda.grid(1)
    if x < labels.shape[0]:
        r = labels[x]
        while labels[r] != r:
            r = labels[r]
        labels[x] = r


@kernel("void(int64[::1], int64[::1], int64[::1])")
def scatter(index, values, out):
    """out[index[i]] = values[i] (a permutation's inverse)."""
    i = cuda.grid(1)
    if i < index.shape[0]:
        out[index[i]] = values[i]


@kernel("void(uint64[::1], uint64[::1], int64[::1])",
        note="contamination lookup (binary search): not on the dedup hot path")
def sorted_lookup(hashes, table, out):
    """out[i] = index of the first table entry equal to hashes[i], or -1 (binary search)."""
    i = cuda.grid(1)
    if i < hashes.shape[0]:
        h = hashes[i]
        lo = 0
        hi = table.shape[0]
        while lo < hi:
            mid = (lo + hi) >> 1
            if table[mid] < h:
                lo = mid + 1
            else:
                hi = mid
        out[i] = lo if lo < table.shape[0] and table[lo] == h else -1


# --- substrings: window keys and the runs of equal keys of a sorted bucket -------------------------------

@kernel("void(uint64[::1], uint64[::1], int64[::1], int64[::1], int64[::1], int64, uint64[::1], uint64[::1])")
def window_keys(a, b, cursor, win_cursor, win_doc, k, hi, lo):
    """Key of window w (``substrings.window_hashes``): its two lanes by Horner's rule over the ``k`` unit
    hashes from unit ``cursor[d] + w - win_cursor[d]`` of its text d, each through ``fmix64``."""
    w = cuda.grid(1)
    if w < hi.shape[0]:
        d = win_doc[w]
        start = cursor[d] + w - win_cursor[d]
        hi[w] = fmix64(window_lane(a, start, k, BASE_A))
        lo[w] = fmix64(window_lane(b, start, k, BASE_B))


@kernel("void(uint64[::1], uint64[::1], uint8[::1])")
def key_run_starts(hi, lo, start):
    """start[i] = 1 where a run of equal 128-bit keys ``(hi, lo)`` (sorted) begins."""
    i = cuda.grid(1)
    if i < hi.shape[0]:
        start[i] = 1 if i == 0 or hi[i] != hi[i - 1] or lo[i] != lo[i - 1] else 0


@kernel("void(int64[::1])")
def probe(out):
    """The kernel ``backend.select`` compiles and launches before it picks the GPU."""
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = i * 3 + 1
