"""Hash-partitioned exchange between partition tasks, on ``dask.delayed``: the same graph runs on the local
threads and on a Dask cluster, where the pieces move between workers and never through this process.

A stage that needs all records of a key together (a cluster's points, a span hash's occurrences) splits
each partition's records into ``n_buckets`` pieces by key; each bucket task then gets its pieces from
every partition, in partition order, so what it sees does not depend on where the work ran.
"""

from __future__ import annotations

import dask


def exchange(split, inputs: list, n_buckets: int, *args) -> list[list]:
    """Delayed pieces grouped by bucket.

    Parameters
    ----------
    split : ``split(*item, n_buckets, *args) -> tuple`` of ``n_buckets`` pieces (run once per item).
    inputs : one tuple of (delayed) arguments per partition.

    Returns
    -------
    ``pieces[b]``: the ``b``-th piece of every item, in input order (a list of delayed objects).
    """
    split_parts = [dask.delayed(split, nout=n_buckets)(*item, n_buckets, *args) for item in inputs]
    return [[part[b] for part in split_parts] for b in range(n_buckets)]
