"""Fuzzy stage: MinHash signatures -> LSH buckets -> candidate pairs -> exact-Jaccard verification ->
connected components -> one canonical per cluster.

Only the canonicals of the exact stage with non-empty text take part. Similarity is the Jaccard
index of the sets of shingles (``gpucurate.kernels.minhash``) of the normalized texts. With
``verify`` on, an edge joins two documents only if their exact Jaccard is at least the threshold;
clusters are the connected components of those edges (so two members of a cluster can be less
similar than the threshold through a chain).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..engine.backend import Backend
from ..errors import ConfigError
from ..config import FuzzyConfig
from ..engine.executor import Executor
from ..engine.partitions import Partitions
from ..kernels.hashing import permutations
from ..kernels.minhash import MODES
from ..kernels.pairs import index_of, pack_pairs
from .sketches import (FuzzyParams, Sketches, concat_csr, gather_sketches, optimal_bands_rows, remove_hashes,
                       signature_partition)
from ..engine.shuffle import by_bucket, exchange, to_owners
from ..engine.tasks import delayed
from .table import DocParts, DocTable, canonicals, own_rows_with, state_policy_key

log = logging.getLogger("gpucurate")


@dataclass
class FuzzyResult:
    """The stage's result. ``rows``, ``canon`` and ``similarity`` are empty after ``run_parts`` with the
    components on Dask: the canonicals are then only in the partitions' states."""
    rows: np.ndarray  # int64[m] table rows that took part (exact canonicals with text)
    canon: np.ndarray  # int64[m] table row of each participant's fuzzy canonical
    similarity: np.ndarray  # float64[m] Jaccard (or estimate) to the canonical; 1.0 for canonicals
    edge_i: np.ndarray  # int64[e] table rows of candidate pairs (i < j)
    edge_j: np.ndarray
    edge_score: np.ndarray  # float64[e]
    score_kind: str  # "jaccard" (verified), "minhash" (estimate) or "simhash" (1 - Hamming / 64)
    threshold: float  # edges have score >= threshold
    bands: int
    rows_per_band: int
    stats: dict
    boilerplate_hashes: np.ndarray | None = None  # uint64 sorted shingle hashes left out as boilerplate
    #: with components on Dask: the edges as a Dask DataFrame ``(i, j, score)`` in ``(i, j)`` order across
    #: its partitions (``edge_i``, ``edge_j`` and ``edge_score`` are then empty)
    edge_frames: object = None


class FuzzyDedup:
    """``run(ddf, table, participants, executor) -> FuzzyResult``; ``participants`` is a bool[n] mask of
    table rows to cluster (exact canonicals with non-empty text)."""

    name = "fuzzy"

    def __init__(self, cfg: FuzzyConfig, policy: str, backend: Backend):
        self.cfg, self.policy, self.backend = cfg, policy, backend
        if cfg.shingle == "auto" and backend is not None and backend.name != "cpu":
            raise ConfigError("fuzzy.shingle auto runs on the CPU backend (the device's text pass shingles every "
                              "text one way): set run.backend=cpu, or fuzzy.shingle word or char")
        if cfg.method == "simhash":  # k + 1 runs of bits: within distance k, two SimHashes share one
            self.bands = cfg.simhash_max_distance + 1
            self.rows_per_band = 64 // self.bands
        elif cfg.bands is not None:
            self.bands, self.rows_per_band = cfg.bands, cfg.rows
        else:
            if cfg.fp_weight is not None:
                weights = (cfg.fp_weight, cfg.fn_weight)
            else:  # verification removes false positives, so only then is recall cheap to buy
                weights = (0.02, 0.98) if cfg.verify else (0.5, 0.5)
            self.bands, self.rows_per_band = optimal_bands_rows(cfg.threshold, cfg.num_perm, *weights)

    def params(self) -> FuzzyParams:
        a, b = permutations(self.cfg.num_perm, self.cfg.seed)
        return FuzzyParams(MODES[self.cfg.shingle], self.cfg.ngram,
                           np.uint64(self.cfg.seed & ((1 << 64) - 1)), a, b, self.bands, self.rows_per_band,
                           keep_signatures=not self.cfg.verify, minhash_bands=self.cfg.method == "minhash")

    def sketch(self, ddf, table: DocTable, participants: np.ndarray, executor: Executor,
               boilerplate: np.ndarray | None = None, made: list | None = None) -> Sketches:
        """Band keys and shingle sets of the ``participants`` (bool[n]) rows, in row order; with
        ``fuzzy.boilerplate`` the given boilerplate hashes are removed, or those of these rows when None.
        ``made``: the partitions' ``HostSketch`` from the read pass, which the participants' are taken from; the
        list is emptied then, so that they are freed before the LSH."""
        params = self.params()
        offs = table.part_offsets
        masks = [participants[offs[p]:offs[p + 1]] for p in range(len(offs) - 1)]
        if made is not None:
            gathered = gather_sketches(made, masks, executor.local_threads)
            made.clear()
            return self.finish_sketches(gathered, boilerplate, executor.workers)
        params.threads = executor.threads_per_task(ddf.npartitions)
        tasks = [delayed(signature_partition)(part, mask, params, self.backend)
                 for part, mask in zip(ddf.to_delayed(), masks)]
        parts = executor.compute(tasks, "fuzzy: minhash")
        keys = np.concatenate([p[0] for p in parts]) if parts else np.empty((0, self.bands), np.uint64)
        csr_offsets, csr_values = concat_csr(parts, executor.local_threads)
        sigs = np.concatenate([p[3] for p in parts]) if params.keep_signatures else None
        return self.finish_sketches(Sketches(keys, csr_offsets, csr_values, sigs), boilerplate, executor.workers)

    def finish_sketches(self, sk: Sketches, boilerplate: np.ndarray | None, threads: int = 1) -> Sketches:
        """Remove the ``boilerplate`` hashes (sorted uint64) when given, and key SimHash bands when that is
        the method; ``boilerplate=None`` with ``fuzzy.boilerplate`` on finds them in ``sk`` itself."""
        params = self.params()
        if self.cfg.boilerplate:
            if boilerplate is None:
                sk.csr_offsets, sk.csr_values, sk.boilerplate, sk.boilerplate_stats = self._drop_boilerplate(
                    sk.csr_offsets, sk.csr_values, len(sk.keys))
            else:
                sk.csr_offsets, sk.csr_values = remove_hashes(sk.csr_offsets, sk.csr_values, boilerplate)
                sk.boilerplate = boilerplate
            sk.sigs = self.backend.minhash.set_signatures(sk.csr_offsets, sk.csr_values, params.perm_a,
                                                         params.perm_b, threads)
            sk.keys = self.backend.minhash.band_keys(sk.sigs, self.bands, self.rows_per_band, params.seed)
            if self.cfg.verify:
                sk.sigs = None
        if self.cfg.method == "simhash":  # bands of SimHash bits instead of MinHash bands
            sk.simhashes = self.backend.minhash.simhash64(sk.csr_offsets, sk.csr_values)
            sk.keys = self.backend.minhash.simhash_band_keys(sk.simhashes, self.bands, params.seed)
        return sk

    @property
    def score_threshold(self) -> float:
        """Edges need a score at least this (SimHash: ``1 - max_distance / 64``)."""
        return 1.0 - self.cfg.simhash_max_distance / 64.0 if self.cfg.method == "simhash" else self.cfg.threshold

    @property
    def score_kind(self) -> str:
        return "simhash" if self.cfg.method == "simhash" else "jaccard" if self.cfg.verify else "minhash"

    def scores(self, sk: Sketches, pi: np.ndarray, pj: np.ndarray, executor: Executor | None = None) -> np.ndarray:
        """float64[p] score of each pair of sketch indices (Jaccard, MinHash estimate or SimHash)."""
        if sk.simhashes is not None:
            return self.backend.minhash.hamming_similarity(sk.simhashes, pi, pj)
        if self.cfg.verify:
            if executor is None:
                return self.backend.pairs.jaccard_pairs(sk.csr_offsets, sk.csr_values, pi, pj)
            return self._parallel_jaccard(sk.csr_offsets, sk.csr_values, pi, pj, executor)
        return self.backend.pairs.signature_agreement(sk.sigs, pi, pj)

    def _on_dask(self, executor: Executor, quiet: bool = False) -> bool:
        """Whether the LSH runs on Dask (``fuzzy.lsh``; ``auto``: on a cluster)."""
        wanted = self.cfg.lsh == "dask" or (self.cfg.lsh == "auto" and executor.client is not None)
        if wanted and (self.cfg.method != "minhash" or not self.cfg.verify or self.cfg.boilerplate):
            if not quiet:
                log.info("fuzzy: LSH on the driver (fuzzy.lsh=dask needs method minhash, verify and no boilerplate)")
            return False
        return wanted

    def device_params(self, executor: Executor) -> FuzzyParams | None:
        """The params of the device-resident path (``device.resident``, and ``device.distributed`` for the
        LSH on Dask), or None when this configuration needs the host path: SimHash, boilerplate removal, or
        the LSH on the driver of a cluster (the sketches would have to come from the workers' devices)."""
        if self.cfg.method != "minhash" or self.cfg.boilerplate:
            return None
        if executor.client is not None and not self._on_dask(executor, quiet=True):
            return None
        return self.params()

    def run(self, ddf, table: DocTable, participants: np.ndarray, executor: Executor,
            made: list | None = None) -> FuzzyResult:
        """``made``: as ``sketch``'s."""
        pk = self.backend.pairs
        t0 = time.perf_counter()
        sk = self.sketch(ddf, table, participants, executor, made=made)
        steps = {"signatures": time.perf_counter() - t0}
        t0 = time.perf_counter()
        rows = np.flatnonzero(participants).astype(np.int64)
        m = len(rows)
        keys, csr_offsets = sk.keys, sk.csr_offsets
        threshold = self.score_threshold

        # LSH: documents sharing any band key are candidates; documents with no shingle left (only
        # boilerplate) have no key to share
        has_shingles = np.diff(csr_offsets) > 0
        lsh = (self.cfg.max_bucket_size, self.cfg.bucket_anchors, executor.local_threads)
        if has_shingles.all():
            pi, pj = pk.candidate_pairs(keys, *lsh)
        else:
            some = np.flatnonzero(has_shingles)
            pi, pj = pk.candidate_pairs(keys[some], *lsh)
            pi, pj = some[pi], some[pj]
        steps["lsh"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        scores = self.scores(sk, pi, pj, executor)
        steps["verify"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        edge = scores >= threshold - 1e-12
        labels = pk.components(m, pi[edge], pj[edge])
        key = table.policy_key(self.policy)[rows]
        canon_local = np.searchsorted(rows, canonicals(labels, rows, key))
        similarity = np.ones(m, dtype=np.float64)
        members = np.flatnonzero(canon_local != np.arange(m))
        if len(members):
            similarity[members] = self.scores(sk, members, canon_local[members])
        steps["cluster"] = time.perf_counter() - t0
        stats = {"documents": int(m), "method": self.cfg.method, "bands": self.bands, "rows": self.rows_per_band,
                 "bucket_entries": int(keys.size), "candidate_pairs": int(len(pi)),
                 "edges": int(edge.sum()), "step_seconds": {k: round(v, 4) for k, v in steps.items()},
                 "shingles": int(len(sk.csr_values)),
                 "clusters": int(len(np.unique(labels[members]))) if len(members) else 0,
                 "duplicates": int(len(members))}
        if sk.boilerplate_stats is not None:
            stats["boilerplate"] = sk.boilerplate_stats
        return FuzzyResult(rows, rows[canon_local], similarity, rows[pi], rows[pj], scores,
                           self.score_kind, threshold, self.bands, self.rows_per_band, stats, sk.boilerplate)

    def _run_resident(self, table: DocTable, participants: np.ndarray, resident, sketches: list) -> FuzzyResult:
        """Bucketing, verification, components and canonicals on the device (``ResidentCorpus.cluster`` of
        the partitions' ``sketches``); the same result as the host path."""
        t0 = time.perf_counter()
        rows = np.flatnonzero(participants).astype(np.int64)
        offs = table.part_offsets
        key = None if self.policy == "first" else table.policy_key(self.policy)[rows]
        r = resident.cluster(sketches, [participants[offs[p]:offs[p + 1]] for p in range(len(offs) - 1)], key,
                             self.score_threshold, self.cfg.verify, self.cfg.max_bucket_size, self.cfg.bucket_anchors)
        members = np.flatnonzero(r.canon != np.arange(len(rows)))
        n_edges = int((r.scores >= self.score_threshold - 1e-12).sum())
        stats = {"documents": int(len(rows)), "method": self.cfg.method, "bands": self.bands,
                 "rows": self.rows_per_band, "bucket_entries": r.bucket_entries, "candidate_pairs": int(len(r.pi)),
                 "edges": n_edges, "step_seconds": {"device": round(time.perf_counter() - t0, 4)},
                 "shingles": r.n_shingles, "clusters": int(len(np.unique(r.canon[members]))) if len(members) else 0,
                 "duplicates": int(len(members)), "device_resident": True}
        return FuzzyResult(rows, rows[r.canon], r.similarity, rows[r.pi], rows[r.pj], r.scores, self.score_kind,
                           self.score_threshold, self.bands, self.rows_per_band, stats, None)

    def run_parts(self, ddf, table: DocParts, participants: list, keys, executor: Executor,
                  resident=None, made=None) -> tuple[DocParts, FuzzyResult]:
        """The stage over a run's table; ``participants``: per partition, a (delayed) bool mask of its rows to
        cluster. Adds ``fuzzy_canon`` (int64 row of the canonical), ``fuzzy_sim`` and ``fuzzy_participant``
        to the partitions' states.

        With the LSH on Dask and the components there (``fuzzy.components``), nothing per document comes to
        this process: the components' labels go to the partitions of their rows, canonicals are chosen by an
        exchange on the label and the members' similarities are scored where their sets are. Otherwise the
        participants' masks, their policy keys (``keys``: ``RowKeys``) and the stage's arrays are here, and
        the canonicals are sent back to the partitions.

        ``resident`` (a ``ResidentCorpus`` with params): the states hold the partitions' device sketches
        (``sketch``), which the stage uses and then drops. ``made``: the sketches the read pass made on the
        CPU (``exact.HostSketching``), kept apart from the states (``fuzzy_exchange.ApartSketches``), which
        the exchanges use as they are and the driver's path gathers; the stage lets them go."""
        device = resident is not None and resident.params is not None
        if self._on_dask(executor):
            return self._run_dask(ddf, table, participants, keys, executor, resident if device else None,
                                  made=made)
        if device:  # in one process (``device_params``): the states' sketches are the Spillables themselves
            sketches = executor.compute(table.column("sketch"), "fuzzy: sketches")
            if self._sketches_exceed(sketches, resident):
                return self._run_dask(ddf, table, participants, keys, executor, resident)
            table = table.without(executor, "fuzzy: sketches", "sketch")
            result = self._run_resident(keys, _gathered(participants, executor), resident, sketches)
        elif self._sets_exceed(executor, made):
            return self._run_dask(ddf, table, participants, keys, executor, by_exchange=True, made=made)
        elif made is not None:  # gathered here, and let go by the store
            from .fuzzy_lsh import joined
            sketches = executor.compute([delayed(joined)(b, s) for b, s in zip(made.bands, made.sets)],
                                        "fuzzy: sketches")
            made.bands = made.sets = None
            result = self.run(ddf, keys, _gathered(participants, executor), executor, made=sketches)
        else:
            result = self.run(ddf, keys, _gathered(participants, executor), executor)
        return self._scatter(table, result, executor), result

    def _sets_exceed(self, executor: Executor, made) -> bool:
        """Whether the shingle sets and band keys the read pass made on the CPU (``made``) take more than half
        of ``run.memory_limit`` in this process: the LSH and verification then run by exchanges between the
        partition tasks (``fuzzy_exchange``), with the same result, instead of on all the sketches at once."""
        if executor.client is not None or self.backend.name != "cpu" or self.cfg.lsh != "auto" or \
                self.cfg.method != "minhash" or not self.cfg.verify or self.cfg.boilerplate:
            return False
        held = sum(made.sets_nbytes) + sum(made.bands_nbytes)
        if held <= executor.store.budget // 2:
            return False
        log.info("fuzzy: the shingle sets (%.0f MB) exceed half of run.memory_limit (%.0f MB): LSH and "
                 "verification by exchanges between the partitions", held / 1e6, executor.store.budget / 1e6)
        return True

    def host_sketching(self, threads: int = 1):
        """The ``exact.HostSketching`` of a run whose fuzzy sketches the read pass makes on the CPU backend
        (``run_parts``' ``made``), in one process or on a cluster's workers; else None."""
        from .exact import HostSketching
        if self.backend.name != "cpu":
            return None
        params = self.params()
        params.threads = threads
        return HostSketching(params, self.cfg.min_length, self.cfg.shingle != "word")

    def _sketches_exceed(self, sketches: list, resident) -> bool:
        """Whether the partitions' device ``sketches`` take more than half of ``run.device_memory``: the LSH
        on one device would then hold them all at once, so it runs by exchanges between the partition tasks
        (each holding about a partition's worth) instead, with the same result."""
        budget = resident.dev.store.budget
        if budget is None or self.cfg.lsh == "driver" or not self.cfg.verify:
            return False
        total = sum(s.nbytes for s in sketches)
        if total <= budget // 2:
            return False
        log.info("fuzzy: the sketches (%.1f MB) exceed half of run.device_memory (%.1f MB): LSH by exchanges "
                 "between the partitions", total / 1e6, budget / 1e6)
        return True

    @staticmethod
    def _scatter(table: DocParts, result: FuzzyResult, executor: Executor) -> DocParts:
        return table.scatter(executor, "fuzzy: canonicals", "fuzzy", result.rows, result.canon, result.similarity)

    def _run_dask(self, ddf, table: DocParts, participants: list, keys, executor: Executor, resident=None,
                  by_exchange: bool = False, made=None):
        """LSH, verification and the members' similarity by the engine's exchanges between the partition tasks
        (``fuzzy_exchange``; with ``resident``, between the states' device sketches, ``device.distributed``,
        dropped at the end): on a cluster, in this process past its budget (``by_exchange``:
        ``_sets_exceed``) or with ``fuzzy.lsh=dask``. The components run by exchanges too past the budget
        and on a cluster (``fuzzy.components: auto``, host sketches), else on Dask DataFrames (``dask``, or
        ``auto`` past ``fuzzy.driver_max_pairs`` candidate pairs) or on the driver's edge list."""
        from .fuzzy_lsh import gather_edges
        t0 = time.perf_counter()
        if resident is not None:
            from ..device.distributed import device_candidates
            scored, n_pairs, sets = device_candidates(table, participants, resident, self.cfg, executor)
        else:
            from .fuzzy_exchange import exchange_candidates
            scored, n_pairs, sets = exchange_candidates(table, participants, self.backend, self.cfg, executor, made)
        steps = {"lsh+verify": time.perf_counter() - t0}
        t0 = time.perf_counter()
        spilled = by_exchange
        by_exchange = spilled or (resident is None and executor.client is not None and self.cfg.components == "auto")
        on_dask = not by_exchange and (self.cfg.components == "dask" or (self.cfg.components == "auto" and (
            executor.client is not None or n_pairs > self.cfg.driver_max_pairs)))
        where = "exchanges" if by_exchange else "dask" if on_dask else "driver"
        log.info("fuzzy: %d candidate pairs (%.1f MB as an edge list); components %s", n_pairs, n_pairs * 24 / 1e6,
                 {"exchanges": "by exchanges between the partitions", "dask": "on Dask (min-label propagation)",
                  "driver": "on the driver"}[where])
        if by_exchange:
            table, result = self._cluster_by_exchange(scored, n_pairs, sets, table, participants, executor)
        elif on_dask:
            table, result = self._cluster_on_dask(scored, n_pairs, sets, table, participants, executor)
        else:
            rows = np.flatnonzero(_gathered(participants, executor)).astype(np.int64)
            pi, pj, scores = gather_edges(scored, executor)
            result = self._cluster_edges(table, keys, rows, pi, pj, scores, sets, executor)
            table = self._scatter(table, result, executor)
        if resident is not None:
            table = table.without(executor, "fuzzy: free sketches", "sketch")
            result.stats["device_resident"] = True
        steps["cluster"] = time.perf_counter() - t0
        result.stats.update(lsh="exchange" if spilled else "dask", components=where,
                            step_seconds={k: round(v, 4) for k, v in steps.items()})
        return table, result

    def _finish(self, table, rows: np.ndarray, labels: np.ndarray, n_pairs: int, n_edges: int,
                similarity_of) -> tuple[np.ndarray, np.ndarray, dict]:
        """Canonicals of the components ``labels`` (int[m] over the participants ``rows``) and each
        member's similarity to its canonical (``similarity_of(member_idx, canon_idx) -> float64[]``)."""
        m = len(rows)
        canon_local = np.searchsorted(rows, canonicals(labels, rows, table.policy_key(self.policy)[rows]))
        similarity = np.ones(m, dtype=np.float64)
        members = np.flatnonzero(canon_local != np.arange(m))
        if len(members):
            similarity[members] = similarity_of(members, canon_local[members])
        stats = self._cluster_stats(m, n_pairs, n_edges, int(len(np.unique(labels[members]))) if len(members) else 0,
                                    len(members))
        return canon_local, similarity, stats

    def _cluster_stats(self, documents: int, n_pairs: int, n_edges: int, clusters: int, duplicates: int) -> dict:
        return {"documents": int(documents), "method": self.cfg.method, "bands": self.bands,
                "rows": self.rows_per_band, "candidate_pairs": int(n_pairs), "edges": int(n_edges),
                "clusters": int(clusters), "duplicates": int(duplicates)}

    def _cluster_edges(self, parts: DocParts, table, rows, pi, pj, scores, sets, executor) -> FuzzyResult:
        """Components of the gathered edge list (table rows, sorted by ``(i, j)``); ``table`` the policy keys
        (``RowKeys``), ``sets`` the ``HostSets`` or ``DeviceSets`` of the run's table ``parts``."""
        pk = self.backend.pairs
        li, lj = np.searchsorted(rows, pi), np.searchsorted(rows, pj)
        edge = scores >= self.cfg.threshold - 1e-12
        labels = pk.components(len(rows), li[edge], lj[edge])
        candidates = pack_pairs(li, lj)  # for the members' stored scores, in half the bytes of li and lj
        del li, lj

        def similarity_of(members, canon):  # the stored score when the pair was a candidate, else joined
            out = np.empty(len(members))
            pos = index_of(candidates, pack_pairs(members, canon))
            out[pos >= 0] = scores[pos[pos >= 0]]
            miss = pos < 0
            out[miss] = sets.pair_scores(parts, executor, rows[members[miss]], rows[canon[miss]])
            return out
        canon_local, similarity, stats = self._finish(table, rows, labels, len(pi), int(edge.sum()), similarity_of)
        return FuzzyResult(rows, rows[canon_local], similarity, pi, pj, scores, self.score_kind,
                           self.score_threshold, self.bands, self.rows_per_band, stats, None)

    def _cluster_on_dask(self, scored, n_pairs, sets, table: DocParts, participants: list, executor: Executor):
        """Components by min-label propagation on Dask; the edges stay on the workers until ``edges.parquet``
        is written (``_canonicals`` does the rest). ``scored`` partition ``q`` holds the pairs whose ``i`` is
        in table partition ``q``, sorted by ``(i, j)``: read in order, the driver path's edge order."""
        from .components import component_labels, labels_by_owner
        from . import fuzzy_lsh
        n_parts = table.npartitions
        if isinstance(scored, Partitions):  # the host path's frames, as the Dask DataFrame the components take
            scored = scored.to_dask()
        edges = scored[scored["score"] >= self.score_threshold - 1e-12]
        n_edges = int(sum(executor.compute([delayed(len)(p) for p in edges.to_delayed()], "fuzzy: count edges")))
        labels = component_labels(edges, table.n, executor,
                                  max(1, min(n_parts, n_pairs // fuzzy_lsh.EDGES_PER_PARTITION + 1)))
        # each step is kept before the next takes its pieces, so a task's graph holds its own inputs only
        by_owner = executor.persist_tasks([delayed(labels_by_owner)(part, table.part_offsets)
                                           for part in labels.to_delayed()], "fuzzy: labels")
        return self._canonicals([[b[q] for b in by_owner] for q in range(n_parts)], n_pairs, n_edges, sets, table,
                                participants, executor, scored)

    def _cluster_by_exchange(self, scored: Partitions, n_pairs, sets, table: DocParts, participants: list,
                             executor: Executor):
        """Components by the engine's exchanges between the table's partitions (``exchange_components``),
        in one process within ``run.memory_limit``; ``scored`` holds each partition's pairs in ``(i, j)``
        order, and is written as ``edges.parquet`` as it is."""
        from .components import labels_by_exchanges
        labels, n_edges = labels_by_exchanges(scored.to_delayed(), self.score_threshold, table.part_offsets,
                                              n_pairs, executor)
        return self._canonicals(labels, n_pairs, n_edges, sets, table, participants, executor, scored)

    #: component members per bucket of the exchange by label
    members_per_bucket = 4_000_000

    def _canonicals(self, labels: list, n_pairs: int, n_edges: int, sets, table: DocParts, participants: list,
                    executor: Executor, edge_frames):
        """Each partition gets the component labels of its rows (``labels[q]``: ``(rows, labels)`` pieces),
        the canonical of each component is chosen by an exchange on the label, and each member's similarity
        to its canonical is scored where the member's shingle set is; nothing per document comes here."""
        from .components import label_column
        offs, n_parts = table.part_offsets, table.npartitions
        n_buckets = max(1, -(-2 * n_edges // self.members_per_bucket))
        labelled = table.update(executor, label_column, "fuzzy: labels", labels, name="fuzzy_component")
        pieces = exchange(executor, _members_by_label, labelled.state_rows(), n_buckets, self.policy,
                          desc="fuzzy: split")
        groups = executor.persist_tasks([delayed(_component_canonicals)(p, offs) for p in pieces],
                                        "fuzzy: canonicals")
        table = table.update(executor, _with_canonicals, "fuzzy: canonicals", participants,
                             [[g[q] for g in groups] for q in range(n_parts)])
        # partition q of the scores holds the pairs of q's members
        similarity = sets.scored(table, executor, table.map(_member_pairs))
        table = table.update(executor, _with_similarity, "fuzzy: similarity to canonicals", similarity)
        counts = executor.compute(table.map(_fuzzy_counts) + [g[n_parts] for g in groups], "fuzzy: count")
        per_part, clusters = counts[:n_parts], counts[n_parts:]
        stats = self._cluster_stats(sum(c[0] for c in per_part), n_pairs, n_edges, sum(clusters),
                                    sum(c[1] for c in per_part))
        empty = np.empty(0, np.int64)
        return table, FuzzyResult(empty, empty, np.empty(0), empty, empty, np.empty(0), self.score_kind,
                                  self.score_threshold, self.bands, self.rows_per_band, stats, None,
                                  edge_frames=edge_frames)

    def _drop_boilerplate(self, offsets: np.ndarray, values: np.ndarray, m: int):
        """Remove the shingles contained in more than ``boilerplate_max_df`` of the ``m`` documents.

        Each document's shingle hashes are distinct, so the run lengths of the sorted hashes are their
        exact document frequencies. Returns the filtered CSR, the sorted boilerplate hashes and the stats
        for summary.json.
        """
        max_df = self.cfg.boilerplate_max_df
        cut = max_df * m if max_df < 1 else max_df
        ordered = np.sort(values)
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if len(ordered) else np.empty(0, np.int64)
        df = np.diff(np.r_[starts, len(ordered)])
        common = ordered[starts][df > cut]  # sorted
        new_offsets, new_values = remove_hashes(offsets, values, common)
        stats = {"max_df": max_df, "cut_documents": round(float(cut), 3), "boilerplate_shingles": int(len(common)),
                 "shingles_removed": int(len(values) - len(new_values)), "shingles_kept": int(len(new_values)),
                 "documents_left_without_shingles": int(((np.diff(new_offsets) == 0) & (np.diff(offsets) > 0)).sum())}
        return new_offsets, new_values, common, stats

    def _parallel_jaccard(self, offsets, values, pi, pj, executor: Executor) -> np.ndarray:
        """Verify pairs in chunks on the local cores; chunks are cut where ``pi`` changes so each keeps
        the per-document hash-table reuse."""
        # one device call on the GPU; chunks on the local cores otherwise
        n_chunks = 1 if self.backend.name == "gpu" else max(1, min(executor.workers * 2, len(pi) // 50_000))
        cuts = [0]
        for c in range(1, n_chunks):
            cut = int(np.searchsorted(pi, pi[len(pi) * c // n_chunks]))
            if cut > cuts[-1]:
                cuts.append(cut)
        cuts.append(len(pi))
        chunks = [(a, b) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]
        jaccard_pairs = self.backend.pairs.jaccard_pairs
        results = executor.map_threads(lambda c: jaccard_pairs(offsets, values, pi[c[0]:c[1]], pj[c[0]:c[1]]),
                                       chunks)
        return np.concatenate(results) if results else np.empty(0, np.float64)


def _gathered(participants: list, executor: Executor) -> np.ndarray:
    """The participants' masks of every partition as one bool[n] array here (the driver's paths)."""
    return np.concatenate(executor.compute(participants, "fuzzy: participants") or [np.zeros(0, bool)])


def _members_by_label(state: dict, first_row: int, n_buckets: int, policy: str) -> tuple:
    """``(label, policy key, row)`` of the partition's rows that have an edge, one piece per bucket
    (``label % n_buckets``)."""
    local = np.flatnonzero(state["fuzzy_component"] >= 0)
    rows, labels = first_row + local.astype(np.int64), state["fuzzy_component"][local]
    key = state_policy_key(state, policy)[local]
    return by_bucket(labels % n_buckets, n_buckets, labels, key, rows)


def _component_canonicals(pieces: list, part_offsets: np.ndarray) -> tuple:
    """One bucket's components: ``(members, canonical rows)`` per table partition, and the number of
    components (each has at least two rows: an edge)."""
    labels, key, rows = (np.concatenate([p[k] for p in pieces]) for k in range(3))
    canon = canonicals(labels, rows, key)
    members = np.flatnonzero(canon != rows)
    order = members[np.argsort(rows[members], kind="stable")]
    return to_owners(rows[order], (canon[order],), part_offsets) + (int(len(np.unique(labels))),)


def _with_canonicals(state: dict, first_row: int, participants: np.ndarray, pieces: list) -> dict:
    return {"fuzzy_canon": own_rows_with(first_row, len(state["ord"]), pieces)[0],
            "fuzzy_participant": np.asarray(participants, bool)}


def _member_pairs(state: dict, first_row: int) -> pd.DataFrame:
    local = np.flatnonzero(state["fuzzy_canon"] != first_row + np.arange(len(state["ord"])))
    return pd.DataFrame({"i": first_row + local.astype(np.int64), "j": state["fuzzy_canon"][local]})


def _with_similarity(state: dict, first_row: int, scored: pd.DataFrame) -> dict:
    similarity = np.ones(len(state["ord"]))
    similarity[scored["i"].to_numpy(np.int64) - first_row] = scored["score"].to_numpy(np.float64)
    return {"fuzzy_sim": similarity}


def _fuzzy_counts(state: dict, first_row: int) -> tuple:
    members = state["fuzzy_canon"] != first_row + np.arange(len(state["ord"]))
    return int(state["fuzzy_participant"].sum()), int(members.sum())
