"""The device-resident exact + fuzzy path of the GPU backend.

Each partition's normalized text goes up once (``text_pass``): its exact hashes and counts come back,
its MinHash sketches stay on the device, in the partition's state (``DocParts``; on a Dask cluster, in
the memory of the worker that holds the state). In one process ``cluster`` then selects the fuzzy
participants, buckets, verifies and labels them on the device; only the canonicals, similarities and
the scored candidate pairs come back. On a cluster (or with ``fuzzy.lsh=dask``) ``device.distributed``
buckets and verifies the sketches where they are. ``DeviceArrays.ledger`` counts every copy.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from ..kernels.minhash import WORD
from . import glue
from .arrays import DeviceArrays, Spillable

log = logging.getLogger("gpucurate")


@dataclass
class ClusterResult:
    """Host arrays over the ``m`` participants (local indices)."""
    canon: np.ndarray  # int64[m] canonical of each participant
    similarity: np.ndarray  # float64[m] score to the canonical (1.0 for canonicals)
    pi: np.ndarray  # int64[p] candidate pairs, sorted by (i, j)
    pj: np.ndarray
    scores: np.ndarray  # float64[p]
    n_shingles: int
    bucket_entries: int


class ResidentCorpus:
    """The device-resident exact + fuzzy path of a run (pickled into the partition tasks: on a worker it
    uses that process's device).

    Parameters
    ----------
    dev : the backend's ``DeviceArrays``.
    params : ``stages.sketches.FuzzyParams`` of the run's MinHash stage, or None to hash only.
    budget : bytes of device memory the sketches and exchange pieces (``Spillable``) of a process may hold
        before the least recently used go to host memory (``run.device_memory``); None: half of each
        process's device (no limit in the simulator).
    """

    def __init__(self, dev: DeviceArrays, params=None, budget: int | None = None):
        self.dev, self.params, self.budget = dev, params, budget
        self._perms = None
        self._set_budget()

    def __getstate__(self):  # a worker uploads its own permutations
        return {"dev": self.dev, "params": self.params, "budget": self.budget, "_perms": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._set_budget()  # on the worker's own device

    def _set_budget(self) -> None:
        memory = self.dev.memory_bytes()
        self.dev.store.budget = self.budget or (memory // 2 if memory else None)

    def _permutations(self):
        if self._perms is None:
            with self.dev.step("fuzzy: permutations"):
                self._perms = (self.dev.to_device(self.params.perm_a), self.dev.to_device(self.params.perm_b))
        return self._perms

    def text_pass(self, offsets: np.ndarray, data: np.ndarray):
        """A partition's texts up once: ``(hashes uint64[n], words int64[n], chars int64[n])`` back, and its
        ``glue.DeviceSketch`` on the device as a ``Spillable`` (None without fuzzy params)."""
        dev, xp = self.dev, self.dev.xp
        staged = glue.stage_texts(offsets, data)  # host work before the lock, host work after it
        with dev.lock:  # one partition's device work at a time
            with dev.step("upload text"):
                t = glue.upload_texts(dev, offsets, data, staged)
            char_mode = self.params is not None and self.params.mode != WORD
            units = glue.text_units(dev, t, char_mode)
            hashes = glue.text_hashes(dev, t)
            with dev.step("exact: hashes and counts"):
                out = (dev.to_host(hashes), dev.to_host(xp.astype(units.words, xp.int32)),
                       dev.to_host(xp.astype(units.chars, xp.int32)))
            sketch = None
            if self.params is not None:
                with dev.step("fuzzy: sketch"):
                    sketch = Spillable(dev, glue.sketch(dev, t, units, self.params, *self._permutations()))
        return out[0], out[1].astype(np.int64), out[2].astype(np.int64), sketch

    def cluster(self, sketches: list, masks: list[np.ndarray], key: np.ndarray | None, threshold: float,
                verify: bool, max_bucket: int, anchors: int) -> ClusterResult:
        """Clusters of the participants (``masks[p]``: bool over the rows of partition p, whose sketch is the
        ``Spillable`` ``sketches[p]``; the list is emptied as they are selected, so each is freed then);
        ``key`` int64[m]
        the canonical policy's key of each participant, None for input order."""
        dev, xp = self.dev, self.dev.xp
        p = self.params
        with dev.lock:
            with dev.step("fuzzy: participants"):
                parts = []
                for i, mask in enumerate(masks):
                    parts.append(glue.select(dev, sketches[i].get(), dev.to_device(mask)))
                    sketches[i] = None
                sk = glue.concat_sketches(dev, parts, p.bands, len(p.perm_a))
                key_dev = dev.to_device(key) if key is not None else None
            del parts
            m = sk.keys.shape[0]
            with dev.step("fuzzy: lsh"):
                has = (sk.set_offsets[1:] - sk.set_offsets[:-1]) > 0
                some = dev.nonzero(has)
                all_have = some.shape[0] == m
                pi, pj = glue.candidate_pairs(dev, sk.keys if all_have else xp.take(sk.keys, some, axis=0), max_bucket,
                                              anchors)
                if not all_have:
                    pi, pj = xp.take(some, pi), xp.take(some, pj)
            with dev.step("fuzzy: verify"):
                score = (lambda a, b: glue.jaccard(dev, sk.set_offsets, sk.set_values, a, b)) if verify else \
                    (lambda a, b: glue.signature_agreement(dev, sk.sigs, a, b))
                scores = score(pi, pj)
            with dev.step("fuzzy: components"):
                edge = scores >= threshold - 1e-12
                labels = glue.components(dev, m, *dev.compress(edge, pi, pj))
                canon = glue.canonicals(dev, labels, key_dev)
                local = xp.arange(m, dtype=xp.int64)
                similarity = xp.where(canon == local, xp.ones(m, dtype=xp.float64), score(local, canon))
            with dev.step("fuzzy: results"):
                result = ClusterResult(dev.to_host(canon), dev.to_host(similarity), dev.to_host(pi), dev.to_host(pj),
                                       dev.to_host(scores), int(sk.set_values.shape[0]), int(m * p.bands))
        return result
