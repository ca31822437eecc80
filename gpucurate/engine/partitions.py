"""An in-process partitioned frame: the part of the Dask DataFrame API the stages use, without Dask.

The stages need from their input only ``npartitions``, ``map_partitions(fn, *args, meta=)``,
``to_delayed()``, ``_meta`` and a persist (``Executor.persist``). A Dask DataFrame has all of them and
is what runs on a cluster and what ``gpucurate.read`` returns; a local run reads into ``Partitions``
instead, because importing Dask costs a tenth of a small run (``dask.dataframe`` more than a second).
Both go through the same stage code; here the partitions are ``engine.tasks`` tasks.
"""

from __future__ import annotations

from .tasks import delayed, to_dask


class Partitions:
    """``npartitions`` pandas DataFrames, each a task (``engine.tasks.Task``; a known value after
    ``Executor.persist``), in order. ``meta``: an empty frame with the partitions' columns and dtypes."""

    def __init__(self, parts: list, meta):
        self._parts = list(parts)
        self._meta = meta

    @classmethod
    def from_map(cls, fn, items, meta, **kwargs) -> "Partitions":
        """One partition ``fn(item, **kwargs)`` per item (``dask.dataframe.from_map``)."""
        return cls([delayed(fn)(item, **kwargs) for item in items], meta)

    @property
    def npartitions(self) -> int:
        return len(self._parts)

    def map_partitions(self, fn, *args, meta=None, **kwargs) -> "Partitions":
        """``fn(partition, *args, **kwargs)`` for every partition, lazily."""
        return Partitions([delayed(fn)(p, *args, **kwargs) for p in self._parts], self._meta if meta is None else meta)

    def to_delayed(self) -> list:
        return list(self._parts)

    def to_dask(self):
        """The partitions as a Dask DataFrame (for the steps written for one)."""
        import dask.dataframe as dd
        return dd.from_delayed(to_dask(self._parts), meta=self._meta, verify_meta=False)


class Carried(dict):
    """A stage's arrays carried in a partition's ``attrs`` from the read pass to the stage's collect. pandas
    deep-copies ``attrs`` at every column access and copy of the frame (0.4 s of a 16 MB run with the
    substring units); these arrays are never modified, so a copy is the same object."""

    def __deepcopy__(self, memo):
        return self
