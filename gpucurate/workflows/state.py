"""The persisted state of incremental ingestion: a directory that only ever changes by whole batches.

Layout::

    STATE/
      LOCK                      held (flock) by the one ingest allowed at a time
      MANIFEST.json             the commit point: config, the committed segments, the current registry
      seg-000001/ ...           one immutable folder per committed batch:
        documents.parquet         the batch's new documents (ids, timestamps, text hashes, gate results)
        fuzzy.npz                 fuzzy items first seen in the batch (distinct normalized texts): their
                                  text hash, LSH band keys, shingle sets (CSR), SimHashes or signatures
        fuzzy_edges.npz           candidate pairs of items verified in the batch, with their scores
        semantic.npz              texts embedded in the batch (hash, vector); texts never to embed
        semantic_edges.npz        pairs of embedded texts with cosine >= the threshold found in the batch
        chunks.npz, chunk_edges.npz  the same for the chunks of canonical documents (RAG sink)
      registry-000001.parquet   every document's current annotation (canonical, stage, similarity, ...)

A batch is committed by writing its segment under a temporary name, renaming it, writing the new
registry, and finally replacing ``MANIFEST.json`` (an atomic rename). A crash before that last rename
leaves the old manifest, which does not list the new segment: the state is exactly as before the
batch, and the leftovers are removed by the next ingest. Segments are never modified, so a committed
state is never partially rewritten.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import ConfigError, LockedError
from ..engine.failpoints import failpoint

log = logging.getLogger("gpucurate")

FORMAT = 1
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


class FileLock:
    """Exclusive ``flock`` of the file ``path``, held by one process at a time; a second one fails at once
    with ``error`` naming the holder (pid, host, start time, as the holder wrote them into the file).

    The kernel releases the lock when the holder dies (even by SIGKILL), so a stale lock file never
    blocks. The file itself stays: deleting it would let two processes lock two different inodes.
    ``message`` is formatted with ``holder``.
    """

    def __init__(self, path: Path, message: str, error: type = LockedError, command: str = "gpucurate"):
        self.path, self.message, self.error, self.command = Path(path), message, error, command
        self.fh = None

    def __enter__(self) -> "FileLock":
        self.fh = open(self.path, "a+")
        try:
            fcntl.flock(self.fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.fh.seek(0)
            holder = self.fh.read().strip() or "another process"
            self.fh.close()
            self.fh = None
            raise self.error(self.message.format(holder=holder)) from None
        self.fh.seek(0)
        self.fh.truncate()
        self.fh.write(f"pid {os.getpid()} on {socket.gethostname()} since "
                      f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}: {self.command}\n")
        self.fh.flush()
        return self

    def __exit__(self, *exc) -> None:
        if self.fh is not None:
            fcntl.flock(self.fh, fcntl.LOCK_UN)
            self.fh.close()
            self.fh = None


class StateLock(FileLock):
    """Exclusive lock of a state directory for one ingest; a second one fails at once with a clear error."""

    def __init__(self, root: Path):
        self.root = Path(root)
        super().__init__(self.root / "LOCK", f"{self.root}: the state is locked by another ingest ({{holder}}); "
                         "wait for it to finish", StateLockedError, "ingest")

    def __enter__(self) -> "StateLock":
        self.root.mkdir(parents=True, exist_ok=True)
        return super().__enter__()


@dataclass
class Segment:
    """A batch's new data, as written to (or read from) ``seg-NNNNNN/``."""
    documents: pa.Table
    arrays: dict = field(default_factory=dict)  # file stem -> {name: ndarray}


class State:
    """Read access to a committed state and the commit of a new batch; open it under ``StateLock``."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        path = self.root / MANIFEST
        if path.is_file():
            self.manifest = json.loads(path.read_text(encoding="utf-8"))
            if self.manifest.get("format") != FORMAT:
                raise ConfigError(f"{self.root}: state format {self.manifest.get('format')} is not {FORMAT}")
        else:
            if self.root.is_dir() and any(p.name not in ("LOCK",) and not p.name.endswith(".tmp")
                                          and not p.name.startswith(("seg-", "registry-"))
                                          for p in self.root.iterdir()):
                raise ConfigError(f"{self.root}: not a gpucurate state (no {MANIFEST}) and not empty")
            self.manifest = {"format": FORMAT, "config": None, "segments": [], "registry": None, "batches": [],
                             "boilerplate_hashes": None}

    @property
    def empty(self) -> bool:
        return not self.manifest["segments"]

    @property
    def config(self) -> dict | None:
        return self.manifest["config"]

    def remove_leftovers(self) -> list[str]:
        """Delete what a crashed ingest left: segments and registries the manifest does not list."""
        keep = set(self.manifest["segments"]) | {self.manifest["registry"], MANIFEST, "LOCK"}
        removed = []
        if not self.root.is_dir():
            return removed
        for p in sorted(self.root.iterdir()):
            if p.name in keep:
                continue
            if p.name.startswith(("seg-", "registry-")) or p.name.endswith(".tmp"):
                shutil.rmtree(p) if p.is_dir() else p.unlink()
                removed.append(p.name)
        if removed:
            log.info("state: removed %d leftover(s) of an interrupted ingest: %s", len(removed), ", ".join(removed))
        return removed

    def documents(self) -> pa.Table | None:
        """Every committed document, in ingestion order (the concatenated ``documents.parquet``)."""
        tables = [pq.read_table(self.root / s / "documents.parquet") for s in self.manifest["segments"]]
        if not tables:
            return None
        if len({t.schema.field("doc_id").type for t in tables}) > 1:  # int ids first, strings later: all strings
            tables = [t.set_column(0, "doc_id", t.column("doc_id").cast(pa.string())) for t in tables]
        return pa.concat_tables(tables, promote_options="permissive")

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

    def registry(self) -> pd.DataFrame | None:
        if not self.manifest["registry"]:
            return None
        return pq.read_table(self.root / self.manifest["registry"]).to_pandas()

    def commit(self, segment: Segment, registry: pa.Table, batch: dict, config: dict,
               boilerplate_hashes: list | None) -> str:
        """Write the batch's segment and the new registry, then switch the manifest to them (atomic)."""
        self.root.mkdir(parents=True, exist_ok=True)
        number = len(self.manifest["segments"]) + 1
        name = f"seg-{number:06d}"
        tmp = self.root / f"{name}.tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        pq.write_table(segment.documents, tmp / "documents.parquet")
        for stem, arrays in segment.arrays.items():
            with open(tmp / f"{stem}.npz", "wb") as fh:
                np.savez(fh, **arrays)
        for f in tmp.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        failpoint("segment-written")
        tmp.rename(self.root / name)
        registry_name = f"registry-{number:06d}.parquet"
        pq.write_table(registry, self.root / registry_name)
        with open(self.root / registry_name, "rb") as fh:
            os.fsync(fh.fileno())
        _fsync_dir(self.root)
        failpoint("before-manifest")
        old_registry = self.manifest["registry"]
        manifest = dict(self.manifest, config=config, segments=self.manifest["segments"] + [name],
                        registry=registry_name, batches=self.manifest["batches"] + [dict(batch, segment=name)],
                        boilerplate_hashes=boilerplate_hashes)
        _write_bytes_durably(self.root / MANIFEST, json.dumps(manifest, indent=1).encode())
        self.manifest = manifest
        failpoint("after-manifest")
        if old_registry and (self.root / old_registry).exists():
            (self.root / old_registry).unlink()
        return name
