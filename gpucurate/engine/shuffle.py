"""Hash-partitioned exchange between partition tasks (``engine.tasks``): the same graph runs on the local
threads and on a Dask cluster, where the pieces move between workers and never through this process.

A stage that needs all records of a key together (a cluster's points, a span hash's occurrences) splits
each partition's records into ``n_buckets`` pieces by key; each bucket task then gets its pieces from
every partition, in partition order, so what it sees does not depend on where the work ran.

On a cluster, a small exchange is a task per piece; past ``TASK_PIECES_MAX`` pieces it is one Dask P2P
shuffle (``_shuffled``), whose graph grows with the partitions plus the buckets, not their product, and
whose pieces wait on the workers' disks rather than in their memory.
"""

from __future__ import annotations

import math
import pickle

import numpy as np
import pyarrow as pa

from .tasks import delayed, to_dask

#: partitions x buckets up to which a cluster exchange is a task per piece (the scheduler holds each)
TASK_PIECES_MAX = 4096


def exchange(executor, split, inputs: list, n_buckets: int, *args, desc: str = "exchange") -> list[list]:
    """The pieces of every input grouped by bucket.

    Parameters
    ----------
    executor : the run's ``Executor``. In one process the splits are computed first and their pieces kept
        by the executor's ``SpillStore`` (in memory within ``run.memory_limit``, else on disk until a bucket
        task takes them): built from lazy splits, every bucket task's graph merged and culled all the
        splits' graphs (this dask does that for each delayed call), which took minutes at 150 partitions x
        94 buckets. On a cluster the splits stay lazy tasks of the bucket tasks' graphs.
    split : ``split(*item, n_buckets, *args) -> tuple`` of ``n_buckets`` pieces (run once per item).
    inputs : one tuple of (delayed) arguments per partition.

    Returns
    -------
    ``pieces[b]``: the ``b``-th piece of every item, in input order (tasks that load the kept pieces in
    one process, delayed objects on a cluster).
    """
    if executor.client is None:  # each split's pieces kept as it finishes: within run.memory_limit, or on disk
        split_parts = executor.values_here([delayed(_split_kept)(executor.store, split, item, n_buckets, args)
                                            for item in inputs], desc)
    elif len(inputs) * n_buckets > TASK_PIECES_MAX:
        return _shuffled(split, inputs, n_buckets, args)
    else:
        split_parts = [delayed(split, nout=n_buckets)(*item, n_buckets, *args) for item in inputs]
    return [[part[b] for part in split_parts] for b in range(n_buckets)]


def _shuffled(split, inputs: list, n_buckets: int, args: tuple) -> list:
    """``exchange`` on a cluster as one P2P shuffle: each split's pieces are rows ``(bucket, input, pickled
    piece)`` of a Dask DataFrame partitioned by bucket; ``pieces[b]`` is a task of bucket ``b``'s pieces."""
    import dask.dataframe as dd
    import pandas as pd
    import pyarrow as pa
    meta = pd.DataFrame({"bucket": pd.Series([], dtype=np.int64), "input": pd.Series([], dtype=np.int64),
                         "piece": pd.Series([], dtype=pd.ArrowDtype(pa.large_binary()))})
    frames = dd.from_delayed(to_dask([delayed(_split_rows)(split, item, k, n_buckets, args)
                                      for k, item in enumerate(inputs)]), meta=meta, verify_meta=False)
    buckets = frames.set_index("bucket", divisions=tuple(range(n_buckets + 1))).to_delayed()
    return [delayed(_bucket_pieces)(part, b, len(inputs)) for b, part in enumerate(buckets)]


def _split_rows(split, item: tuple, k: int, n_buckets: int, args: tuple):
    """The pieces of input ``k`` as rows ``(bucket, input, pickled piece)``; an empty piece is left out,
    except input 0's (``_bucket_pieces`` makes the missing ones from it)."""
    import pandas as pd
    import pyarrow as pa
    pieces = [(b, pickle.dumps(piece, protocol=5)) for b, piece in enumerate(split(*item, n_buckets, *args))
              if k == 0 or not _is_empty(piece)]
    return pd.DataFrame({"bucket": np.array([b for b, _ in pieces], np.int64), "input": np.full(len(pieces), k),
                         "piece": pd.arrays.ArrowExtensionArray(pa.array([p for _, p in pieces], pa.large_binary()))})


def _bucket_pieces(frame, b: int, n_inputs: int) -> list:
    """Bucket ``b``'s pieces of every input, in input order (a piece left out is input 0's, emptied)."""
    if len(frame) and not (frame.index.to_numpy() == b).all():  # a bug, not bad input
        raise RuntimeError(f"pieces of bucket {b} were shuffled to another bucket")
    inputs = frame["input"].to_numpy()
    blobs = frame["piece"].array._pa_array.combine_chunks() if len(frame) else []
    got = {int(k): pickle.loads(blobs[int(r)].as_py()) for r, k in enumerate(inputs)}
    empty = _emptied(got[0]) if len(got) < n_inputs else None
    return [got.get(k, empty) for k in range(n_inputs)]


def _is_empty(piece) -> bool:
    """Whether ``piece`` (an array, a frame, or a tuple of them) has no rows; other objects never are."""
    if isinstance(piece, tuple):
        return all(_is_empty(p) for p in piece)
    return hasattr(piece, "__len__") and hasattr(piece, "shape") and len(piece) == 0


def _emptied(piece):
    """``piece`` with no rows (a piece ``_is_empty`` judged empty looks like this)."""
    return tuple(_emptied(p) for p in piece) if isinstance(piece, tuple) else piece[:0]


def _split_kept(store, split, item: tuple, n_buckets: int, args: tuple) -> list:
    """``split``'s pieces of one item, each kept in ``store`` (``SpillStore``): tasks that load them."""
    return [store.keep(piece) for piece in split(*item, n_buckets, *args)]


def by_bucket(bucket: np.ndarray, n_buckets: int, *columns) -> tuple:
    """``n_buckets`` pieces of an ``exchange``'s split: piece ``b`` holds, for each of ``columns`` (arrays of
    one length), its rows whose ``bucket`` (int array) is ``b``, in their order."""
    from ..kernels.pairs import bucket_order
    order, cuts = bucket_order(np.asarray(bucket, np.int64), n_buckets)
    return tuple(tuple(c[order[cuts[b]:cuts[b + 1]]] for c in columns) for b in range(n_buckets))


#: partitions whose rows one task of a row lookup answers for
PARTS_PER_GROUP = 64


def owner_groups(n_parts: int, threads: int = 1) -> np.ndarray:
    """int64[g + 1] bounds of ``g = ceil(n_parts / PARTS_PER_GROUP)`` groups of consecutive partitions, and at
    least ``threads`` (each group's answer is one task: one group made 64 partitions' answers wait on one
    thread): a row lookup has one task per group, so its two exchanges make ``2 n_parts g`` pieces instead
    of ``2 n_parts ** 2`` (with many small pieces, their number costs more than their bytes)."""
    groups = max(1, math.ceil(n_parts / PARTS_PER_GROUP), min(n_parts, threads))
    return np.unique(np.linspace(0, n_parts, groups + 1).round().astype(np.int64))


def owner_of(part_offsets: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The partition holding each of ``rows`` (partition ``p`` holds ``part_offsets[p]:part_offsets[p + 1]``)."""
    return np.searchsorted(part_offsets, rows, side="right") - 1


def to_owners(rows: np.ndarray, columns: tuple, part_offsets: np.ndarray) -> tuple:
    """Split ``rows`` (global, ascending) and the arrays ``columns`` aligned with them by the partition that
    holds each row: one ``(rows, *columns)`` piece per partition."""
    cuts = np.searchsorted(rows, part_offsets)
    return tuple((rows[cuts[p]:cuts[p + 1]],) + tuple(c[cuts[p]:cuts[p + 1]] for c in columns)
                 for p in range(len(part_offsets) - 1))


def lookup(executor, requests: list, owners: list, part_offsets: np.ndarray, answer, desc: str) -> list:
    """Answers about rows, computed by the partitions that hold them; nothing passes through this process.

    Parameters
    ----------
    executor : ``engine.executor.Executor``: two ``exchange``s, requests to the groups of owners and answers
        back; the answers are kept where they were computed.
    requests : per asking task ``p`` (usually one per partition), a (delayed) int64 array of global rows it
        asks about (repeats allowed).
    owners : per partition ``q``, a (delayed) object with what ``answer`` needs of its rows.
    part_offsets : int64[P + 1]: partition ``q`` holds rows ``part_offsets[q]:part_offsets[q + 1]``.
    answer : ``answer(owner_q, local_rows, counts) -> tuple of arrays`` (NumPy or Arrow) aligned with
        ``local_rows`` (int64, unique, ascending, relative to ``q``); ``counts[k]``: how many requests of all
        partitions asked for that row (what a group-by count needs).

    Returns
    -------
    Per asking task ``p``, a delayed tuple of arrays aligned with ``requests[p]``.
    """
    groups = owner_groups(len(part_offsets) - 1, executor.workers)
    n_groups = len(groups) - 1
    asked = exchange(executor, _split_requests, [(r,) for r in requests], n_groups, part_offsets[groups], desc=desc)
    answered = exchange(executor, _answer_group, [
        (asked[g], owners[groups[g]:groups[g + 1]], part_offsets[groups[g]:groups[g + 1] + 1], answer)
        for g in range(n_groups)], len(requests), desc=desc)
    return executor.persist_tasks([delayed(_merge_answers)(r, answered[p]) for p, r in enumerate(requests)], desc)


def answer_columns(owner: tuple, local: np.ndarray, counts: np.ndarray) -> tuple:
    """A ``lookup`` answer: the owner's columns (a tuple of arrays) at the rows asked for."""
    return tuple(_taken(column, local) for column in owner)


def _split_requests(rows: np.ndarray, n_groups: int, row_bounds: np.ndarray) -> tuple:
    unique, counts = np.unique(np.asarray(rows, np.int64), return_counts=True)
    cuts = np.searchsorted(unique, row_bounds)
    return tuple((unique[cuts[g]:cuts[g + 1]], counts[cuts[g]:cuts[g + 1]]) for g in range(n_groups))


def _answer_group(pieces: list, owners: list, offsets: np.ndarray, answer, n_requesters: int) -> tuple:
    """One group's answers to every partition's requests of its rows, one piece per requesting partition."""
    asked = np.concatenate([p[0] for p in pieces])
    unique, inverse = np.unique(asked, return_inverse=True)
    counts = np.bincount(inverse, weights=np.concatenate([p[1] for p in pieces]), minlength=len(unique))
    cuts = np.searchsorted(unique, offsets)
    parts = [answer(owner, unique[cuts[q]:cuts[q + 1]] - offsets[q], counts[cuts[q]:cuts[q + 1]].astype(np.int64))
             for q, owner in enumerate(owners)]
    columns = tuple(_joined([p[k] for p in parts]) for k in range(len(parts[0]))) if parts else ()
    # each piece's rows are unique and ascending: a sorted subset of ``unique``
    return tuple(tuple(_taken(c, np.searchsorted(unique, p[0])) for c in columns) for p in pieces)


def _merge_answers(rows: np.ndarray, pieces: list) -> tuple:
    """A partition's answers in the order of its requests (pieces come in group order, i.e. row order)."""
    _, inverse = np.unique(np.asarray(rows, np.int64), return_inverse=True)
    return tuple(_taken(_joined([p[k] for p in pieces]), inverse) for k in range(len(pieces[0])))


def _joined(columns: list):
    """One answer column of NumPy or Arrow arrays (text answers are Arrow: no object per value to copy,
    pickle or keep)."""
    if columns and isinstance(columns[0], pa.Array):
        return pa.concat_arrays(columns)
    return np.concatenate(columns)


def _taken(column, at: np.ndarray):
    return column.take(pa.array(at)) if isinstance(column, pa.Array) else column[at]
