"""Hash-partitioned exchange between partition tasks (``engine.tasks``): the same graph runs on the local
threads and on a Dask cluster, where the pieces move between workers and never through this process.

A stage that needs all records of a key together (a cluster's points, a span hash's occurrences) splits
each partition's records into ``n_buckets`` pieces by key; each bucket task then gets its pieces from
every partition, in partition order, so what it sees does not depend on where the work ran.
"""

from __future__ import annotations

import math

import numpy as np

from .tasks import delayed


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
    else:
        split_parts = [delayed(split, nout=n_buckets)(*item, n_buckets, *args) for item in inputs]
    return [[part[b] for part in split_parts] for b in range(n_buckets)]


def _split_kept(store, split, item: tuple, n_buckets: int, args: tuple) -> list:
    """``split``'s pieces of one item, each kept in ``store`` (``SpillStore``): tasks that load them."""
    return [store.keep(piece) for piece in split(*item, n_buckets, *args)]


def by_bucket(bucket: np.ndarray, n_buckets: int, *columns) -> tuple:
    """``n_buckets`` pieces of an ``exchange``'s split: piece ``b`` holds, for each of ``columns`` (arrays of
    one length), its rows whose ``bucket`` (int array) is ``b``, in their order."""
    order = np.argsort(bucket, kind="stable")
    cuts = np.searchsorted(bucket[order], np.arange(n_buckets + 1))
    return tuple(tuple(c[order[cuts[b]:cuts[b + 1]]] for c in columns) for b in range(n_buckets))


#: partitions whose rows one task of a row lookup answers for
PARTS_PER_GROUP = 64


def owner_groups(n_parts: int) -> np.ndarray:
    """int64[g + 1] bounds of ``g = ceil(n_parts / PARTS_PER_GROUP)`` groups of consecutive partitions: a row
    lookup has one task per group, so it makes ``2 n_parts g`` pieces instead of ``n_parts ** 2`` (each piece
    is a task of the graph: the graph's size, not the data, is what grows with many small groups)."""
    groups = max(1, math.ceil(n_parts / PARTS_PER_GROUP))
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
    executor : ``engine.executor.Executor``; each step's results are kept where they were computed.
    requests : per asking task ``p`` (usually one per partition), a (delayed) int64 array of global rows it
        asks about (repeats allowed).
    owners : per partition ``q``, a (delayed) object with what ``answer`` needs of its rows.
    part_offsets : int64[P + 1]: partition ``q`` holds rows ``part_offsets[q]:part_offsets[q + 1]``.
    answer : ``answer(owner_q, local_rows, counts) -> tuple of arrays`` aligned with ``local_rows`` (int64,
        unique, ascending, relative to ``q``); ``counts[k]``: how many requests of all partitions asked for
        that row (what a group-by count needs).

    Returns
    -------
    Per asking task ``p``, a delayed tuple of arrays aligned with ``requests[p]``.
    """
    groups = owner_groups(len(part_offsets) - 1)
    row_bounds = part_offsets[groups]
    # each step is kept before the next takes its pieces: a task's graph then holds its own inputs only
    split = executor.persist_tasks([delayed(_split_requests)(r, row_bounds) for r in requests], desc)
    answered = executor.persist_tasks([delayed(_answer_group)(
        [s[g] for s in split], owners[groups[g]:groups[g + 1]], part_offsets[groups[g]:groups[g + 1] + 1], answer)
        for g in range(len(groups) - 1)], desc)
    return executor.persist_tasks([delayed(_merge_answers)(r, [a[p] for a in answered])
                                   for p, r in enumerate(requests)], desc)


def answer_columns(owner: tuple, local: np.ndarray, counts: np.ndarray) -> tuple:
    """A ``lookup`` answer: the owner's columns (a tuple of arrays) at the rows asked for."""
    return tuple(column[local] for column in owner)


def _split_requests(rows: np.ndarray, row_bounds: np.ndarray) -> tuple:
    unique, counts = np.unique(np.asarray(rows, np.int64), return_counts=True)
    cuts = np.searchsorted(unique, row_bounds)
    return tuple((unique[cuts[g]:cuts[g + 1]], counts[cuts[g]:cuts[g + 1]]) for g in range(len(row_bounds) - 1))


def _answer_group(pieces: list, owners: list, offsets: np.ndarray, answer) -> tuple:
    """One group's answers to every partition's requests of its rows, one piece per requesting partition."""
    asked = np.concatenate([p[0] for p in pieces])
    unique, inverse = np.unique(asked, return_inverse=True)
    counts = np.bincount(inverse, weights=np.concatenate([p[1] for p in pieces]), minlength=len(unique))
    cuts = np.searchsorted(unique, offsets)
    parts = [answer(owner, unique[cuts[q]:cuts[q + 1]] - offsets[q], counts[cuts[q]:cuts[q + 1]].astype(np.int64))
             for q, owner in enumerate(owners)]
    columns = tuple(np.concatenate([p[k] for p in parts]) for k in range(len(parts[0]))) if parts else ()
    # each piece's rows are unique and ascending: a sorted subset of ``unique``
    return tuple(tuple(c[np.searchsorted(unique, p[0])] for c in columns) for p in pieces)


def _merge_answers(rows: np.ndarray, pieces: list) -> tuple:
    """A partition's answers in the order of its requests (pieces come in group order, i.e. row order)."""
    _, inverse = np.unique(np.asarray(rows, np.int64), return_inverse=True)
    return tuple(np.concatenate([p[k] for p in pieces])[inverse] for k in range(len(pieces[0])))
