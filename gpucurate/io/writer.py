"""The output directory: annotated records, alias and edge tables, summary.json.

A run (and an in-place ``rethreshold``) never writes into the output directory itself: it writes a
staging directory next to it, ``<parent>/.<name>.staging-<pid>-<random>`` (same filesystem, so the
final rename is atomic), and only when every file is written and fsynced, and the completion marker
``_SUCCESS`` (a small JSON, written last and fsynced) is in it, puts it in place: the old output is
renamed aside to ``<parent>/.<name>.old-<pid>-<random>``, the staging directory is renamed to the
output's name, and the old one is deleted. Readers (``rethreshold``, ``report``, ``ingest --from-run``)
refuse a directory without the marker. The whole time the writer holds an exclusive ``flock`` of
``<parent>/.<name>.lock``, so a second writer of the same directory fails at once (exit 4) naming the
holder; the kernel releases it when the holder dies.

The one window: between the two renames there is no directory under the output's name (microseconds).
A process killed exactly there leaves the old output in its ``.old-`` directory; the next writer of
that directory (under the lock) renames it back before it starts. Every other leftover of a dead writer
(staging and ``.old-`` directories) is deleted by the next writer, so none ever blocks a retry.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import stat
import time
from contextlib import contextmanager
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..config import Config, annotation_names
from ..errors import ConfigError, InputError, LockedError, OutputError
from ..engine.failpoints import failpoint
from .reader import LoadedPartition, PartitionSpec, check_annotation_clash, load_partition, order_keys, run_id_column

ANNOTATIONS_DIR = "annotations"
#: the completion marker of an output directory, written last (pyarrow.dataset ignores ``_`` names)
MARKER = "_SUCCESS"
#: schema metadata of the annotation table: the type (``int64``/``string``) of the user's id column in every
#: part file, decided for the whole run (``table.unify_ids``)
ID_TYPE_KEY = b"gpucurate.id_type"
OUTPUT_ITEMS = (ANNOTATIONS_DIR, "aliases.parquet", "edges.parquet", "summary.json", "embeddings",
                "contamination_report.json", "report.html", "run_index.parquet")


@dataclass(frozen=True)
class Layout:
    """The kind of directory a ``StagedOutput`` writes. ``items``: glob patterns of the names it holds
    besides the marker (an existing directory holding anything else is not replaced); ``folders``: made
    empty in the staging directory; ``overwrite``: the option that lets a user replace one, for messages."""

    items: tuple = OUTPUT_ITEMS
    folders: tuple = (ANNOTATIONS_DIR,)
    overwrite: str = "output.overwrite=true"


#: a run's (and rethreshold's, ingest --output's) output directory
RUN_LAYOUT = Layout()


def _reason(exc: OSError) -> str:
    return f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc.strerror or exc)


def _fsync(path: Path, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            _fsync(Path(dirpath) / name)
        _fsync(Path(dirpath), directory=True)


def _remove(path: Path) -> None:
    """Delete a directory tree or a file as far as possible; never raises (a rest is a leftover that the
    next writer of the directory deletes)."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    except OSError:
        pass


def is_complete(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a complete output directory (it holds the completion marker)."""
    return (Path(path) / MARKER).is_file()


def lock_output(path: str | os.PathLike, command: str):
    """The exclusive lock of the output directory ``path`` (``<parent>/.<name>.lock``), not yet taken:
    ``with lock_output(path, "report"):``. A held one raises LockedError (exit 4) naming the holder."""
    from .locks import FileLock
    target = Path(os.path.realpath(path))
    return FileLock(target.parent / f".{target.name}.lock",
                    f"{path}: the output directory is being written by another gpucurate process ({{holder}}); "
                    "wait for it to finish", command=f"{command} {target}")


@contextmanager
def _run_file(path: Path):
    """Errors reading a Parquet file of a run directory as an OutputError (exit 1) naming it: missing, truncated
    or unreadable."""
    try:
        yield
    except FileNotFoundError:
        raise OutputError("missing (the run directory is incomplete)", path) from None
    except (OSError, pa.ArrowException) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise OutputError(f"unreadable Parquet file ({first})", path) from None


def read_run_table(path: Path, columns: list[str] | None = None) -> pa.Table:
    """A Parquet file of a run directory; a missing, truncated or unreadable one is an OutputError (exit 1)."""
    with _run_file(path):
        return pq.read_table(path, columns=columns)


def read_run_metadata(path: Path) -> pq.FileMetaData:
    """The footer of a Parquet file of a run directory (schema, rows, row groups); errors as ``read_run_table``."""
    with _run_file(path):
        return pq.read_metadata(path)


def iter_run_table(path: Path, columns: list[str] | None = None, batch_size: int = 65536):
    """``read_run_table`` a record batch (of at most ``batch_size`` rows) at a time, for files too large to
    hold at once."""
    with _run_file(path):
        yield from pq.ParquetFile(path).iter_batches(batch_size=batch_size, columns=columns)


def read_run_json(path: Path) -> dict:
    """A JSON file of a run directory (``summary.json``); missing or invalid is an OutputError (exit 1)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise OutputError("missing (the run directory is incomplete)", path) from None
    except (OSError, ValueError) as exc:
        raise OutputError(f"unreadable JSON ({exc})", path) from None


def require_complete(path: str | os.PathLike, command: str, locked: bool = False) -> Path:
    """``path`` as a Path if it is a complete output directory; otherwise an OutputError (exit 1).
    A directory left aside by a writer killed mid-swap is put back first (``locked``: the caller holds
    the directory's lock)."""
    run = Path(path)
    if not run.exists():
        if locked:
            StagedOutput(run, overwrite=False)._recover()
        else:
            repair_output(run)
    if not run.is_dir():
        raise OutputError(f"no such run directory ({command} needs the output directory of a finished run)", run)
    if not is_complete(run):
        raise OutputError(f"not a complete gpucurate run: no {MARKER} marker, so the run failed, was interrupted "
                          f"or is still being written (or an older gpucurate wrote it); {command} needs a finished "
                          "run: run it again", run)
    return run


def repair_output(path: str | os.PathLike) -> None:
    """Put back an output directory whose writer was killed between its two renames (it is in a
    ``.<name>.old-*`` directory), and delete dead writers' leftovers; only when no writer holds the lock
    (otherwise nothing is done)."""
    staged = StagedOutput(path, overwrite=False)
    try:
        if not staged.target.name or not (staged._leftovers("old") or staged._leftovers("staging")):
            return
        with lock_output(path, "repair"):
            staged._recover()
    except (LockedError, OSError):
        pass


class StagedOutput:
    """Write an output directory aside and put it in place only when it is complete (module docstring).

    ``with StagedOutput(path, overwrite) as staged:`` write everything into ``staged.path``, then call
    ``staged.commit()``. Leaving the block without a commit (an error, Ctrl-C, SIGTERM) deletes the
    staging directory and leaves the previous output exactly as it was. The lock is held from the start
    of the block to its end.

    Parameters
    ----------
    path : the output directory (a symlink to one is followed; its parent is created).
    overwrite : replace an existing non-empty output directory; without it that is a ConfigError. Only
        a gpucurate output directory is replaced: one that holds other files too is refused, unless
        ``foreign_ok`` (an in-place ``rethreshold``, which carries every other file over).
    command : what the lock file and the marker name as the writer.
    layout : what the directory holds (default ``RUN_LAYOUT``: a run's output directory).
    """

    def __init__(self, path: str | os.PathLike, overwrite: bool, command: str = "run", foreign_ok: bool = False,
                 layout: Layout = RUN_LAYOUT):
        self.requested = Path(path)
        self.target = Path(os.path.realpath(path))
        self.overwrite, self.command, self.foreign_ok, self.layout = overwrite, command, foreign_ok, layout
        self.path: Path | None = None
        self.committed = False
        self._lock = None

    def __enter__(self) -> "StagedOutput":
        target = self.target
        if not target.name:
            raise ConfigError(f"{self.requested}: the output cannot be the filesystem root")
        try:
            if target.exists() and not target.is_dir():
                raise ConfigError(f"{self.requested}: output exists and is not a directory")
            self._make_parent()
            self._lock = lock_output(self.requested, self.command)
            self._lock.__enter__()
        except OSError as exc:
            self._lock = None
            raise OutputError(f"cannot write the output directory ({_reason(exc)})", self.requested) from None
        try:
            self._recover()
            self._check()
            self.path = target.parent / f".{target.name}.staging-{os.getpid()}-{secrets.token_hex(4)}"
            self.path.mkdir()
            for folder in self.layout.folders:
                (self.path / folder).mkdir()
        except OSError as exc:
            self.__exit__(None, None, None)
            raise OutputError(f"cannot write the output directory ({_reason(exc)})", self.requested) from None
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _make_parent(self) -> None:
        parent = self.target.parent
        existing = parent
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            raise OutputError(f"cannot create the output directory: {existing} is a file, not a directory",
                              self.requested)
        parent.mkdir(parents=True, exist_ok=True)

    def _leftovers(self, kind: str) -> list[Path]:
        import glob
        return sorted(self.target.parent.glob(f".{glob.escape(self.target.name)}.{kind}-*"))

    def _recover(self) -> None:
        """Under the lock, every staging or ``.old-`` directory of this output is a dead writer's: put an
        old output back that a kill between the two renames left aside, delete the rest."""
        import logging
        log = logging.getLogger("gpucurate")
        olds = self._leftovers("old")
        if olds and not self.target.exists():
            back = max(olds, key=lambda p: (is_complete(p), p.stat().st_mtime))
            os.rename(back, self.target)
            log.warning("%s: restored the previous output from %s (its writer was killed while replacing it)",
                        self.requested, back.name)
        for p in self._leftovers("staging") + self._leftovers("old"):
            log.info("%s: deleting %s, left by an interrupted gpucurate process", self.requested, p.name)
            _remove(p)

    def _check(self) -> None:
        target = self.target
        if not target.is_dir():
            return
        if os.path.ismount(target):
            raise ConfigError(f"{self.requested}: the output directory is a mount point, which cannot be replaced "
                              "as a whole; write to a directory inside it")
        items = sorted(p.name for p in target.iterdir())
        if not items:
            return
        option = self.layout.overwrite
        if not self.overwrite:
            raise ConfigError(f"{self.requested}: output directory is not empty (use {option} to replace it)")
        foreign = [n for n in items if n != MARKER and not any(fnmatch(n, item) for item in self.layout.items)]
        if foreign and not self.foreign_ok:
            raise ConfigError(f"{self.requested}: {option} replaces a whole gpucurate output directory, and "
                              f"this one also holds {', '.join(foreign[:3])}{' ...' if len(foreign) > 3 else ''}; "
                              "move them away or write to another directory")

    def commit(self) -> Path:
        """Fsync everything, write the marker (fsynced), and swap the staging directory into place."""
        staging, target = self.path, self.target
        failpoint("output-written")
        try:
            _fsync_tree(staging)
            marker = {"complete": True, "command": self.command, "gpucurate_version": _version(),
                      "completed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                      "pid": os.getpid(), "host": socket.gethostname()}
            with open(staging / MARKER, "w", encoding="utf-8") as fh:
                fh.write(json.dumps(marker, indent=1) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            _fsync(staging, directory=True)
            failpoint("output-marked")
            self._check()  # nothing but gpucurate writes here under the lock; a stranger may have
            aside = None
            if target.is_dir():
                os.chmod(staging, stat.S_IMODE(target.stat().st_mode))
            old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            try:
                if target.is_dir():
                    aside = target.parent / f".{target.name}.old-{os.getpid()}-{secrets.token_hex(4)}"
                    os.rename(target, aside)
                    failpoint("output-aside")
                try:
                    os.rename(staging, target)
                except OSError:
                    if aside is not None:  # put the old one back
                        os.rename(aside, target)
                        aside = None
                    raise
                self.committed = True
                _fsync(target.parent, directory=True)
            finally:
                try:
                    signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)  # a pending Ctrl-C is raised here
                finally:
                    if aside is not None and self.committed:
                        _remove(aside)
        except OSError as exc:
            raise OutputError(f"cannot write the output directory ({_reason(exc)})", self.requested) from None
        return target

    def __exit__(self, *exc) -> bool:
        try:
            if not self.committed and self.path is not None:
                _remove(self.path)
        finally:
            if self._lock is not None:
                self._lock.__exit__(None, None, None)
                self._lock = None
        return False


def _version() -> str:
    from .._version import __version__
    return __version__


def _compression(cfg: Config):
    return None if cfg.output.compression == "none" else cfg.output.compression


#: the columns that say where each record of an ``output.columns: annotations`` part file is in the input
LOCATION_COLUMNS = ("input_file", "input_row")


def needs_texts(annotations: pa.Table) -> bool:
    """Whether the annotation columns of a part file are made from the original texts too: a removal stage
    (paragraphs, substrings) cut some of them (``stages.cuts.output_annotations``)."""
    from ..stages.cuts import PARAGRAPH_CUTS, SUBSTRING_CUTS
    return any(annotations.column(name).null_count < annotations.num_rows for name in (PARAGRAPH_CUTS, SUBSTRING_CUTS))


def input_locations(spec: PartitionSpec, ords: np.ndarray) -> tuple[pa.Array, pa.Array]:
    """``(input_file string[m], input_row int64[m])`` of a partition's rows from their order keys: the file as
    the run was given it, and the record's 0-based index in it (a JSON Lines file's line number minus one, a
    Parquet file's row)."""
    from .reader import ROW_BITS
    paths = {m.file_index: m.path for m in spec.parts()}
    file_index = ords >> np.int64(ROW_BITS)
    known = np.array(sorted(paths), dtype=np.int64)
    codes = np.searchsorted(known, file_index).astype(np.int32)
    files = pa.DictionaryArray.from_arrays(pa.array(codes), pa.array([paths[int(k)] for k in known], pa.string()))
    return files.dictionary_decode(), pa.array(ords & np.int64((1 << ROW_BITS) - 1), pa.int64())


#: schema metadata of an ``output.columns: annotations`` part file: its partition (``PartitionSpec.to_dict``) and
#: the directory the run was started in, from which the commands that need the input's columns read them back
#: (``io.readback``)
INPUT_SPEC_KEY = b"gpucurate.input"


def write_annotations(spec: PartitionSpec, cfg: Config, annotations: pa.Table, ords: np.ndarray, out_dir: str,
                      texts: pa.Array | None = None) -> str:
    """An ``output.columns: annotations`` part file: ``input_file``, ``input_row`` and the annotation columns,
    no input column. ``texts`` (the rows' original texts) only when ``needs_texts``."""
    from ..stages.cuts import output_annotations
    if texts is None:
        texts = pa.nulls(annotations.num_rows, pa.string())
    names, columns = output_annotations(annotations, texts)
    prefix = cfg.output.annotation_prefix
    table = pa.table(dict(zip(LOCATION_COLUMNS, input_locations(spec, ords)),
                          **{prefix + name: column for name, column in zip(names, columns)}),
                     metadata=(annotations.schema.metadata or {}) | {INPUT_SPEC_KEY: json.dumps(
                         {"spec": spec.to_dict(), "cwd": os.getcwd()}).encode()})
    path = os.path.join(out_dir, ANNOTATIONS_DIR, f"part-{spec.index:05d}.parquet")
    pq.write_table(table, path, compression=_compression(cfg))
    return path


def integer_ids(schema: pa.Schema, doc_id: str = "doc_id") -> bool:
    """Whether the run writes the user's id column as int64 (else string), from the annotation table's
    ``schema`` (a part file's, whose id annotation is named ``doc_id``)."""
    id_type = (schema.metadata or {}).get(ID_TYPE_KEY)
    return id_type == b"int64" if id_type is not None else pa.types.is_integer(schema.field(doc_id).type)


def input_columns(spec: PartitionSpec, cfg: Config, part: LoadedPartition, integer: bool) -> pa.Table:
    """The partition's input columns as every part file of the run holds them: the user's id column in the
    run's one type (``integer``: int64, else string; ``table.unify_ids``), none named like an annotation."""
    table = part.table
    check_annotation_clash(spec.path, table.column_names,
                           annotation_names(cfg.output.annotation_prefix, cfg.quality.language_id))
    if cfg.input.id_field in table.column_names:
        i = table.schema.get_field_index(cfg.input.id_field)
        table = table.set_column(i, cfg.input.id_field, run_id_column(spec, part, cfg.input, integer))
    return table


def write_partition(spec: PartitionSpec, cfg: Config, annotations: pa.Table, ords: np.ndarray, out_dir: str,
                    part: LoadedPartition | None = None) -> str:
    """The partition with all its columns (``part``: its parse by the read pass, else it is read again) and
    the annotation columns appended, as one Parquet file."""
    part = part or load_partition(spec, cfg.input)
    if part.table.num_rows != annotations.num_rows or not np.array_equal(order_keys(spec, part.records), ords):
        raise InputError("the file changed while it was being processed (rows differ between reads)", spec.path)
    # one chunk per column: Parquet's pages follow the chunks, and a parse's chunks depend on how it was read
    table = input_columns(spec, cfg, part, integer_ids(annotations.schema)).combine_chunks()
    from ..stages.cuts import output_annotations
    for name, column in zip(*output_annotations(annotations, table.column(cfg.input.text_field))):
        table = table.append_column(cfg.output.annotation_prefix + name, column)
    path = os.path.join(out_dir, ANNOTATIONS_DIR, f"part-{spec.index:05d}.parquet")
    pq.write_table(table, path, compression=_compression(cfg))
    return path


def write_table(table: pa.Table, path: Path, cfg: Config) -> None:
    pq.write_table(table, path, compression=_compression(cfg))


def write_batches(batches, path: Path, cfg: Config) -> None:
    """One Parquet file from an iterable of Arrow tables of one schema (empty ones add no row group)."""
    writer = None
    try:
        for batch in batches:
            if writer is None:
                writer = pq.ParquetWriter(path, batch.schema, compression=_compression(cfg))
            if batch.num_rows:
                writer.write_table(batch)
    finally:
        if writer is not None:
            writer.close()


def write_json(data: dict, path: Path) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)
