"""An in-process partitioned frame: the part of the Dask DataFrame API the stages use, without
``dask.dataframe``.

The stages need from their input only ``npartitions``, ``map_partitions(fn, *args, meta=)``,
``to_delayed()``, ``_meta`` and a persist (``Executor.persist``). A Dask DataFrame has all of them and
is what runs on a cluster and what ``gpucurate.read`` returns; a local run reads into ``Partitions``
instead, because importing ``dask.dataframe`` costs more than a second of start-up (a quarter of a
small run). Both go through the same stage code and the same task graphs (``dask.delayed``).
"""

from __future__ import annotations

import dask


class Partitions:
    """``npartitions`` pandas DataFrames, each a ``dask.delayed`` (or already computed, after
    ``persist``), in order. ``meta``: an empty frame with the partitions' columns and dtypes."""

    def __init__(self, parts: list, meta):
        self._parts = list(parts)
        self._meta = meta

    @classmethod
    def from_map(cls, fn, items, meta, **kwargs) -> "Partitions":
        """One partition ``fn(item, **kwargs)`` per item (``dask.dataframe.from_map``)."""
        return cls([dask.delayed(fn, pure=False)(item, **kwargs) for item in items], meta)

    @property
    def npartitions(self) -> int:
        return len(self._parts)

    def map_partitions(self, fn, *args, meta=None, **kwargs) -> "Partitions":
        """``fn(partition, *args, **kwargs)`` for every partition, lazily."""
        return Partitions([dask.delayed(fn, pure=False)(p, *args, **kwargs) for p in self._parts],
                          self._meta if meta is None else meta)

    def to_delayed(self) -> list:
        return list(self._parts)

    def persist(self, scheduler, num_workers: int) -> "Partitions":
        """Compute every partition (on ``scheduler``) and keep the frames in this process."""
        frames = dask.compute(*self._parts, scheduler=scheduler, num_workers=num_workers)
        return Partitions([dask.delayed(f, pure=False) for f in frames], self._meta)
