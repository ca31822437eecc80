"""The persisted state of incremental ingestion: a directory that only ever changes by whole batches, read
by key and by row, never loaded whole.

Layout::

    STATE/
      LOCK                  held (flock) by the one ingest allowed at a time
      MANIFEST.json         the commit point: config, counters, the segments, and the runs of every index
      seg-000001/ ...       one immutable folder per committed batch:
        documents.rows        the batch's new documents, rows ``first_row ..`` (``DOC_RECORD``)
        ids.offsets/.values   their ids (UTF-8)
        strings.parquet       contamination labels and reasons of its contaminated documents
        items.rows            fuzzy items (distinct texts) first seen in the batch (``item_record``)
        sets.offsets/.values  their shingle sets
        vectors.rows          texts embedded in the batch (``vector_record``)
        index/NAME.keys/.fence/.values  this batch's run of each index (``INDEXES``), and runs merged at its
                              commit
        *.npz                 the RAG sink's chunk index pieces

The indexes (``io.sorted_runs``, key -> value): ``ids`` (hash of the document id -> row), ``texts`` (text hash
-> row), ``items`` (text hash -> fuzzy item), ``bands`` (LSH band key -> item), ``edges`` (item -> verified
neighbour and score), ``vectors`` (text hash -> embedded text, -1: not embeddable), ``vector_edges`` (the same
for cosine pairs), ``cells`` (IVF cell -> embedded text, once there are many: ``vector_index``),
``clusters`` (cluster -> row) and ``registry`` (row -> what its annotation is made of, ``REGISTRY_RECORD``;
the newest entry wins). A cluster is a connected set of documents under every relation the stages know
(same text, a fuzzy edge, a semantic edge); it is named by its smallest row. A batch reads the clusters it
touches and writes them again, whole, so that each stays a closed set.

A batch is committed by writing its segment under a temporary name (with the runs of any compaction),
renaming it, and finally replacing ``MANIFEST.json`` (an atomic rename). A crash before that last rename
leaves the old manifest, which does not list the new segment: the state is exactly as before the batch,
and the leftovers are removed by the next ingest. Committed files are never modified; the files of runs
that a compaction replaced are deleted after the manifest no longer names them.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ..config import LANGUAGE_COLUMNS
from ..errors import ConfigError, LockedError
from ..io.locks import FileLock
from ..engine.failpoints import failpoint
from ..io.row_store import RowFile, read_lists, read_rows, write_lists, write_rows
from ..io.sorted_runs import RUN_FILES, Run, SortedRuns, merge_runs, write_run

log = logging.getLogger("gpucurate")

FORMAT = 3
MANIFEST = "MANIFEST.json"


class StateLockedError(LockedError):
    exit_code = 4


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_bytes_durably(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)
    _fsync_dir(path.parent)


class StateLock(FileLock):
    """Exclusive lock of a state directory for one ingest; a second one fails at once with a clear error."""

    def __init__(self, root: Path):
        self.root = Path(root)
        super().__init__(self.root / "LOCK", f"{self.root}: the state is locked by another ingest ({{holder}}); "
                         "wait for it to finish", StateLockedError, "ingest")

    def __enter__(self) -> "StateLock":
        self.root.mkdir(parents=True, exist_ok=True)
        return super().__enter__()


#: what the state keeps of each document, by row
DOC_RECORD = np.dtype([("text_hash", np.uint64), ("timestamp", np.int64), ("nbytes", np.int64), ("words", np.int64),
                       ("chars", np.int64), ("quality_value", np.float64), ("ingested_at", np.int64),
                       ("batch", np.int64), ("quality_rule", np.int16), ("empty", np.bool_),
                       ("contaminated", np.bool_), ("contamination_drop", np.bool_), ("lang", np.int16),
                       ("lang_score", np.float32)])
#: what a document's annotation is made of (``stages.annotate.annotation_columns``): its cluster, the rows of
#: its exact canonical, of that one's fuzzy canonical and of the final canonical, the two similarities and
#: the final cluster's size
REGISTRY_RECORD = np.dtype([("cluster", np.int64), ("exact", np.int64), ("fuzzy", np.int64), ("final", np.int64),
                            ("fuzzy_similarity", np.float64), ("semantic_similarity", np.float64),
                            ("cluster_size", np.int64)])
#: the columns of a state's registry (``State.registry``), besides the batch and the ingestion time
REGISTRY_COLUMNS = ("doc_id", "dedup_id", "is_canonical", "keep", "drop_stage", "drop_reason", "similarity",
                    "cluster_size", "weight", "exact_group", "fuzzy_group", "semantic_group", "contaminated",
                    "contamination")
EDGE = np.dtype([("other", np.int64), ("score", np.float64)])
INDEXES = {"ids": np.dtype(np.int64), "texts": np.dtype(np.int64), "items": np.dtype(np.int64),
           "bands": np.dtype(np.int64), "edges": EDGE, "vectors": np.dtype(np.int64), "vector_edges": EDGE,
           "clusters": np.dtype(np.int64), "registry": REGISTRY_RECORD, "cells": np.dtype(np.int64)}
#: indexes whose newer entries replace the older ones of a key (a compaction keeps only the newest)
REPLACED = ("registry",)
#: the newest runs are merged into one when there are this many of about one size (the oldest of them at
#: most this many times the newest): runs grow like the digits of a base-4 counter, so an index has
#: O(log n) runs whatever the number of batches, and an entry is rewritten log4(n / batch) times
MERGE_FANIN = 4


def doc_quality(docs: np.ndarray, limits: dict):
    """``stages.quality.QualityResult`` of ``docs`` (DOC_RECORD[k]) under the gate's ``limits``, with their
    languages when the gate identifies them."""
    from ..stages.quality import QualityResult
    languages = (docs["lang"], docs["lang_score"]) if "language_labels" in limits else (None, None)
    return QualityResult(docs["quality_rule"], docs["quality_value"], limits, *languages)


def item_record(method: str, signatures: int = 0) -> np.dtype:
    """A fuzzy item's record: its text hash, and its SimHash or MinHash signature where the stage scores
    with them (``fuzzy.method: simhash``, or ``fuzzy.verify: false``)."""
    fields = [("hash", np.uint64)]
    if method == "simhash":
        fields.append(("simhash", np.uint64))
    if signatures:
        fields.append(("sig", np.uint32, (signatures,)))
    return np.dtype(fields)


def vector_record(dim: int) -> np.dtype:
    return np.dtype([("hash", np.uint64), ("vector", np.float32, (dim,))])


def id_keys(ids: np.ndarray) -> np.ndarray:
    """uint64 key of each document id in the ``ids`` index: a hash of its text (1 and "1" are one id, as
    when a state's integer ids meet string ones)."""
    return pd.util.hash_array(np.array([str(x) for x in ids], dtype=object), categorize=False)


@dataclass
class Segment:
    """What a batch adds: its new documents (rows ``first_row ..``), fuzzy items (``first_item ..``) and
    embedded texts (``first_vector ..``), one run per index, and the RAG sink's pieces."""
    first_row: int
    documents: np.ndarray  # DOC_RECORD[k]
    ids: np.ndarray  # [k] the new documents' ids
    strings: pa.Table | None = None  # row, contamination, contamination_reason of contaminated new documents
    first_item: int = 0
    items: np.ndarray | None = None  # item_record[m]
    sets: tuple | None = None  # (offsets int64[m + 1], values uint64)
    first_vector: int = 0
    vectors: np.ndarray | None = None  # vector_record[v]
    runs: dict = field(default_factory=dict)  # index -> (keys uint64[e], values INDEXES[index][e])
    centroids: np.ndarray | None = None  # float32[k, dim]: the embeddings' IVF cells, fit by this batch
    arrays: dict = field(default_factory=dict)  # file stem -> {name: ndarray} (npz)


class State:
    """Read access to a committed state and the commit of a new batch; open it under ``StateLock``."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        path = self.root / MANIFEST
        if path.is_file():
            self.manifest = json.loads(path.read_text(encoding="utf-8"))
            if self.manifest.get("format") != FORMAT:
                raise ConfigError(f"{self.root}: state format {self.manifest.get('format')} is not {FORMAT} (made by an "
                                  "earlier gpucurate); build a new state from the same batches, or from a run "
                                  "with ingest --from-run")
        else:
            if self.root.is_dir() and any(p.name not in ("LOCK",) and not p.name.endswith(".tmp")
                                          and not p.name.startswith("seg-") for p in self.root.iterdir()):
                raise ConfigError(f"{self.root}: not a gpucurate state (no {MANIFEST}) and not empty")
            self.manifest = {"format": FORMAT, "config": None, "segments": [], "layout": {}, "batches": [],
                             "rows": 0, "items": 0, "vectors": 0, "int_ids": True, "indexes": {},
                             "boilerplate_hashes": None}
        self._indexes: dict[str, SortedRuns] = {}

    @property
    def empty(self) -> bool:
        return not self.manifest["segments"]

    @property
    def config(self) -> dict | None:
        return self.manifest["config"]

    @property
    def n_rows(self) -> int:
        return self.manifest["rows"]

    @property
    def n_items(self) -> int:
        return self.manifest["items"]

    @property
    def n_vectors(self) -> int:
        return self.manifest["vectors"]

    def index(self, name: str) -> SortedRuns:
        if name not in self._indexes:
            runs = [Run(self.root / path, count, block) for path, count, block in self.manifest["indexes"].get(name, [])]
            self._indexes[name] = SortedRuns(runs, INDEXES[name])
        return self._indexes[name]

    def _files(self, kind: str, stem: str) -> list[RowFile]:
        out = []
        for seg in self.manifest["segments"]:
            first, count = self.manifest["layout"][seg][kind]
            if count:
                out.append(RowFile(self.root / seg / stem, first, count))
        return out

    # ---- by row -------------------------------------------------------------------------------------

    def records(self, rows: np.ndarray) -> np.ndarray:
        """DOC_RECORD of each of ``rows``."""
        return read_rows(self._files("rows", "documents"), DOC_RECORD, rows)

    def doc_ids(self, rows: np.ndarray) -> np.ndarray:
        """The ids of ``rows``: int64 while every id of the state is an integer, else str objects."""
        offsets, data = read_lists(self._files("rows", "ids"), np.uint8, rows)
        text = data.tobytes()
        ids = [text[a:b].decode() for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
        return np.array(ids, dtype=np.int64) if self.manifest["int_ids"] else np.array(ids, dtype=object)

    def doc_strings(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(contamination label, contamination reason)`` object[k] of ``rows`` (None where clean)."""
        rows = np.asarray(rows, np.int64)
        label, reason = np.full(len(rows), None, object), np.full(len(rows), None, object)
        for seg in self.manifest["segments"]:
            first, count = self.manifest["layout"][seg]["rows"]
            path = self.root / seg / "strings.parquet"
            inside = (rows >= first) & (rows < first + count)
            if not inside.any() or not path.is_file():
                continue
            t = pq.read_table(path).to_pandas().set_index("row")
            at = np.flatnonzero(inside)
            pos = t.index.get_indexer(rows[at])
            hit = pos >= 0
            label[at[hit]] = t["contamination"].to_numpy(object)[pos[hit]]
            reason[at[hit]] = t["contamination_reason"].to_numpy(object)[pos[hit]]
        return label, reason

    def item_records(self, items: np.ndarray, dtype: np.dtype) -> np.ndarray:
        return read_rows(self._files("items", "items"), dtype, items)

    def item_sets(self, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The shingle sets of ``items`` as CSR ``(offsets int64[k + 1], values uint64)``, in that order."""
        return read_lists(self._files("items", "sets"), np.uint64, items)

    def vector_files(self) -> list[RowFile]:
        return self._files("vectors", "vectors")

    def centroids(self) -> np.ndarray | None:
        """float32[k, dim] centroids of the embeddings' cells, once a batch fit them (``vector_index``)."""
        named = self.manifest.get("centroids")
        if not named:
            return None
        path, k, dim = named
        return np.fromfile(self.root / path, np.float32).reshape(k, dim)

    def arrays(self, stem: str) -> list[dict]:
        """``{name: ndarray}`` of ``seg-*/STEM.npz`` in segment order (empty dicts for segments without it)."""
        out = []
        for s in self.manifest["segments"]:
            path = self.root / s / f"{stem}.npz"
            if path.is_file():
                with np.load(path, allow_pickle=False) as data:
                    out.append({k: data[k] for k in data.files})
            else:
                out.append({})
        return out

    # ---- the annotations ----------------------------------------------------------------------------

    def annotations(self, rows: np.ndarray, cfg=None) -> pa.Table:
        """The current annotation columns of ``rows`` (int64[k], committed), as ``run`` writes them."""
        from ..config import load_config, flatten
        from ..stages.annotate import Gates, annotation_columns, with_languages
        from ..stages.fuzzy import FuzzyDedup
        from ..stages.quality import QualityGate
        cfg = cfg or load_config(None, flatten(self.config))
        rows = np.asarray(rows, np.int64)
        found, reg = self.index("registry").latest(rows)
        if not found.all():
            raise RuntimeError(f"row {int(rows[~found][0])} has no registry entry")  # a bug, not bad input
        docs = self.records(rows)
        canon = np.concatenate([reg["exact"], reg["fuzzy"], reg["final"]])
        distinct, inverse = np.unique(np.concatenate([rows, canon]), return_inverse=True)
        ids = self.doc_ids(distinct)[inverse]
        k = len(rows)
        gates = None
        quality = None
        if cfg.quality.enabled:
            quality = doc_quality(docs, QualityGate(cfg.quality).limits())
            gates = Gates(quality.failed, quality.reasons, None)
        if docs["contaminated"].any():
            label, reason = self.doc_strings(rows)
            gates = gates or Gates(np.zeros(k, bool), None, None)
            none = np.full(k, None, object)  # texts and spans are not kept in the state
            gates.contamination = (docs["contaminated"], label, none, docs["contamination_drop"], reason, none, none)
        kind = FuzzyDedup(cfg.fuzzy, cfg.canonical.policy, None).score_kind
        return with_languages(annotation_columns(
            rows, reg["exact"], reg["fuzzy"], reg["final"], ids[:k], ids[k:2 * k], ids[2 * k:3 * k], ids[3 * k:],
            reg["fuzzy_similarity"], reg["semantic_similarity"], reg["cluster_size"], gates, cfg.output,
            self.manifest["int_ids"], kind), quality)

    def registry(self) -> pd.DataFrame | None:
        """Every document's annotation (REGISTRY_COLUMNS of ``workflows.ingest``, and ``lang``, ``lang_score`` when
        the quality gate identifies languages), with its batch and ingestion time, in row order; None for an
        empty state. Reads the whole state: for export and tests."""
        if self.empty:
            return None
        rows = np.arange(self.n_rows, dtype=np.int64)
        annotations = self.annotations(rows)
        t = annotations.select([c for c in REGISTRY_COLUMNS + LANGUAGE_COLUMNS if c in annotations.column_names])
        t = t.to_pandas()
        docs = self.records(rows)
        t["batch"] = docs["batch"]
        t["ingested_at"] = pd.to_datetime(docs["ingested_at"], utc=True)
        return t

    # ---- leftovers and commit -----------------------------------------------------------------------

    def _run_paths(self) -> set[Path]:
        return {self.root / path for runs in self.manifest["indexes"].values() for path, *_ in runs}

    def remove_leftovers(self) -> list[str]:
        """Delete what a crashed ingest left: segments the manifest does not list, temporary files, and
        the runs of listed segments that no index names any more (replaced by a compaction)."""
        keep = set(self.manifest["segments"]) | {MANIFEST, "LOCK"}
        removed = []
        if not self.root.is_dir():
            return removed
        for p in sorted(self.root.iterdir()):
            if p.name in keep:
                continue
            if p.name.startswith("seg-") or p.name.endswith(".tmp"):
                shutil.rmtree(p) if p.is_dir() else p.unlink()
                removed.append(p.name)
        named = self._run_paths()
        for seg in self.manifest["segments"]:
            for keys in sorted((self.root / seg / "index").glob("*.keys")):
                stem = keys.with_suffix("")
                if stem not in named:
                    for suffix in RUN_FILES:
                        stem.with_name(f"{stem.name}.{suffix}").unlink(missing_ok=True)
                    removed.append(f"{seg}/index/{stem.name}")
        if removed:
            log.info("state: removed %d leftover(s) of an interrupted ingest: %s", len(removed), ", ".join(removed))
        return removed

    def commit(self, segment: Segment, batch: dict, config: dict, boilerplate_hashes: list | None,
               semantic_model: dict | None, int_ids: bool) -> str:
        """Write the batch's segment (with the runs of any compaction), then switch the manifest to it."""
        self.root.mkdir(parents=True, exist_ok=True)
        number = len(self.manifest["segments"]) + 1
        name = f"seg-{number:06d}"
        tmp = self.root / f"{name}.tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        k = len(segment.documents)
        write_rows(tmp / "documents", segment.first_row, segment.documents)
        encoded = [str(x).encode() for x in segment.ids]
        offsets = np.zeros(k + 1, np.int64)
        np.cumsum([len(e) for e in encoded], out=offsets[1:])
        write_lists(tmp / "ids", segment.first_row, offsets, np.frombuffer(b"".join(encoded), np.uint8))
        if segment.strings is not None and segment.strings.num_rows:
            pq.write_table(segment.strings, tmp / "strings.parquet")
        n_items = 0 if segment.items is None else len(segment.items)
        if n_items:
            write_rows(tmp / "items", segment.first_item, segment.items)
            write_lists(tmp / "sets", segment.first_item, *segment.sets)
        n_vectors = 0 if segment.vectors is None else len(segment.vectors)
        if n_vectors:
            write_rows(tmp / "vectors", segment.first_vector, segment.vectors)
        centroids = self.manifest.get("centroids")
        if segment.centroids is not None:
            _write_bytes_durably(tmp / "centroids.f32", np.ascontiguousarray(segment.centroids, np.float32).tobytes())
            centroids = [f"{name}/centroids.f32", *segment.centroids.shape]
        for stem, arrays in segment.arrays.items():
            with open(tmp / f"{stem}.npz", "wb") as fh:
                np.savez(fh, **arrays)
                fh.flush()
                os.fsync(fh.fileno())
        indexes = {n: list(runs) for n, runs in self.manifest["indexes"].items()}
        kept: set[Path] = set()
        for index, (keys, values) in segment.runs.items():
            if not len(keys):
                continue
            runs = [Run(self.root / p, c, b) for p, c, b in indexes.get(index, [])]
            (tmp / "index").mkdir(exist_ok=True)
            runs.append(write_run(tmp / "index" / index, keys, values))
            merged = 0
            while len(runs) >= MERGE_FANIN and runs[-MERGE_FANIN].count <= MERGE_FANIN * runs[-1].count:
                merged += 1
                failpoint("compacting")
                runs[-MERGE_FANIN:] = [merge_runs(runs[-MERGE_FANIN:], INDEXES[index],
                                                  tmp / "index" / f"{index}-merged{merged}",
                                                  latest=index in REPLACED)]
            indexes[index] = [[str(r.path.relative_to(self.root)).replace(tmp.name, name, 1), r.count, r.block]
                              for r in runs]
            kept.update(r.path for r in runs)
        for keys in sorted((tmp / "index").glob("*.keys")):  # this batch's runs that a merge took in
            if keys.with_suffix("") not in kept:
                for suffix in RUN_FILES:
                    keys.with_suffix(f".{suffix}").unlink(missing_ok=True)
        if (tmp / "index").is_dir():
            _fsync_dir(tmp / "index")
        _fsync_dir(tmp)
        failpoint("segment-written")
        tmp.rename(self.root / name)
        _fsync_dir(self.root)
        failpoint("before-manifest")
        layout = dict(self.manifest["layout"], **{name: {"rows": [segment.first_row, k],
                                                         "items": [segment.first_item, n_items],
                                                         "vectors": [segment.first_vector, n_vectors]}})
        manifest = dict(self.manifest, config=config, segments=self.manifest["segments"] + [name], layout=layout,
                        batches=self.manifest["batches"] + [dict(batch, segment=name)],
                        rows=segment.first_row + k, items=segment.first_item + n_items,
                        vectors=segment.first_vector + n_vectors, int_ids=int_ids, indexes=indexes,
                        centroids=centroids,
                        boilerplate_hashes=boilerplate_hashes,
                        semantic_model=semantic_model or self.manifest.get("semantic_model"))
        before = self._run_paths()
        _write_bytes_durably(self.root / MANIFEST, json.dumps(manifest, indent=1).encode())
        self.manifest = manifest
        self._indexes = {}
        failpoint("after-manifest")
        for stem in before - self._run_paths():  # merged into a newer run
            for suffix in RUN_FILES:
                stem.with_name(f"{stem.name}.{suffix}").unlink(missing_ok=True)
        return name
