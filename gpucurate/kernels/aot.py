"""Ahead-of-time builds of the CPU kernels: one CPython extension module that needs no numba to load.

After a command whose kernels went through numba, ``refresh`` builds every signature the process used,
plus those of the previous build, into ``gpucurate_kernels`` with numba's ``pycc`` and a C compiler
(once per new set of signatures: 10-60 s; a failed build is not retried for a day, see
``<build>.failed``). Later processes load it in under a millisecond and call it when a call's argument
types match a built signature exactly: C-contiguous, aligned arrays of the built dtype, rank and
writeability, and scalars of the built type. Anything else goes to numba (pycc's functions do not check
their arguments: a wrong type would crash the process).

The build lives under ``$GPUCURATE_CACHE_DIR`` (default ``$XDG_CACHE_HOME/gpucurate`` or
``~/.cache/gpucurate``), in a folder named by a hash of the kernels' source files, the Python and NumPy
versions and the CPU, so an edited kernel or another machine never uses a stale build; it is put in
place by a rename, complete. A build deletes the other builds there that no process loaded for 30 days.
``GPUCURATE_AOT=0`` turns loading and building off.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.machinery
import importlib.util
import json
import logging
import os
import platform
import re
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

log = logging.getLogger("gpucurate")

MODULE = "gpucurate_kernels"
MANIFEST = "manifest.json"
#: the files whose kernels are built (their contents name the build)
SOURCES = ("kernels/hashing.py", "kernels/text.py", "kernels/minhash.py", "kernels/pairs.py", "kernels/gates.py",
           "kernels/semantic.py", "kernels/bloom.py", "kernels/substrings.py", "kernels/patterns.py",
           "kernels/langid.py", "kernels/words.py", "kernels/wordpiece.py", "kernels/jit.py", "kernels/aot.py",
           "review/evaluate.py")

#: the modules whose kernels declare the signatures every build has (``njit(aot=...)``)
_KERNEL_MODULES = ("gpucurate.kernels.hashing", "gpucurate.kernels.text", "gpucurate.kernels.minhash",
                   "gpucurate.kernels.pairs", "gpucurate.kernels.gates", "gpucurate.kernels.semantic",
                   "gpucurate.kernels.bloom", "gpucurate.kernels.substrings", "gpucurate.kernels.patterns")
#: a failed build is tried again after this long (the compiler may have been installed, or disk freed)
RETRY_FAILED_S = 24 * 3600
#: builds of other sources or machines that no process loaded for this long are deleted by the next build
UNUSED_BUILD_S = 30 * 24 * 3600
#: how often loading a build updates its date (a write a day at most)
_USE_DATED_EVERY_S = 24 * 3600
#: a staging folder left this long is a build that was killed
STALE_STAGING_S = 3600
_LOCK = threading.Lock()
_loaded: dict | None = None  # kernel name -> [(argument keys, function)], once looked for


def enabled() -> bool:
    return os.environ.get("GPUCURATE_AOT", "1").strip().lower() not in ("0", "off", "false", "no")


def cache_root() -> Path:
    """gpucurate's cache on this machine: ``$GPUCURATE_CACHE_DIR``, else ``$XDG_CACHE_HOME/gpucurate`` or
    ``~/.cache/gpucurate``."""
    return Path(os.environ.get("GPUCURATE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "gpucurate"))


def build_dir() -> Path:
    """Where this machine's build of the current kernel sources is (or would be)."""
    return cache_root() / "aot" / _build_name()


@functools.lru_cache(maxsize=None)
def _build_name() -> str:
    """The hash that names the build (the sources and the machine do not change while a process runs)."""
    package = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for rel in SOURCES:
        digest.update(rel.encode() + b"\0" + (package / rel).read_bytes())
    digest.update(f"{sys.version}|{np.__version__}|{platform.machine()}|{_cpu_flags()}".encode())
    return digest.hexdigest()[:20]


def _cpu_flags() -> str:
    """The CPU's feature flags (Linux) or its name: a build uses the host CPU's instructions."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def arg_key(x) -> tuple:
    """What a built signature must match for ``x``: ``("a", dtype, ndim)`` for a C-contiguous, aligned,
    writeable native array (``"r"`` for a read-only one), ``("s", dtype)`` for a scalar (numba's types of
    Python values), else a key no signature has."""
    if isinstance(x, np.ndarray):
        f = x.flags
        if f.c_contiguous and f.aligned and x.dtype.isnative:
            return ("a" if f.writeable else "r", x.dtype.str, x.ndim)
        return ("other",)
    if isinstance(x, (bool, np.bool_)):
        return ("s", "|b1")
    if isinstance(x, int):
        return ("s", "<i8") if -(1 << 63) <= x < (1 << 63) else ("s", "<u8")
    if isinstance(x, float):
        return ("s", "<f8")
    if isinstance(x, np.generic):
        return ("s", x.dtype.str)
    return ("other",)


def declared_keys(text: str) -> tuple:
    """``arg_key``s of a declared signature: ``"i8[:], u1[:], b1"`` is an int64 and a uint8 C-contiguous
    array and a bool (NumPy type codes; ``[:, :]`` for two dimensions)."""
    keys = []
    for code, dims in _DECLARED.findall(text):
        dtype = np.dtype(code).str
        keys.append(("a", dtype, dims.count(":")) if dims else ("s", dtype))
    return tuple(keys)


_DECLARED = re.compile(r"([a-z]\d+)(\[[:,\s]*\])?")


def function(name: str, args: tuple):
    """The built function of kernel ``name`` for these arguments, or None."""
    table = _loaded if _loaded is not None else _load()
    entries = table.get(name)
    if entries:
        key = tuple(arg_key(a) for a in args)
        for keys, fn in entries:
            if keys == key:
                return fn
    return None


def loaded_kernels() -> int:
    """How many kernels this process has from an ahead-of-time build (0 before the first kernel call)."""
    return len(_loaded or {})


def _load() -> dict:
    global _loaded
    with _LOCK:
        if _loaded is None:
            _loaded = _read_build(build_dir()) if enabled() else {}
    return _loaded


def _read_build(folder: Path) -> dict:
    try:
        manifest_path = folder / MANIFEST
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        path = folder / manifest["file"]
        loader = importlib.machinery.ExtensionFileLoader(MODULE, str(path))
        spec = importlib.util.spec_from_file_location(MODULE, str(path), loader=loader)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        # the export names say the kernel and its signature (``_export_name``): a module that a concurrent
        # build put in place after the manifest was read lacks a name rather than mapping it to another kernel
        table = {name: [(tuple(tuple(k) for k in keys), getattr(module, export)) for export, keys in entries]
                 for name, entries in manifest["kernels"].items()}
    except FileNotFoundError:
        return {}
    except Exception as exc:  # a damaged or foreign build: numba serves every call
        log.warning("ahead-of-time kernels in %s not loaded (%s); using numba", folder, exc)
        return {}
    _mark_used(manifest_path)
    return table


def _export_name(kernel: str, keys: tuple) -> str:
    """The module's name of a kernel's build for one signature: the same in every build of one folder."""
    return "k_" + hashlib.sha256(repr((kernel, keys)).encode()).hexdigest()[:24]


def _mark_used(manifest: Path) -> None:
    """Date the build as used (at most once a day), so that pruning keeps the builds that other Python or
    NumPy versions on this machine still load."""
    try:
        if _age(manifest) > _USE_DATED_EVERY_S:
            os.utime(manifest)
    except OSError:  # a read-only cache: the build may be pruned one day and then built again
        pass


def _prune(root: Path, keep: str) -> None:
    """Delete what the ``aot`` folder holds that no process needs: other builds unused for
    ``UNUSED_BUILD_S`` with their failure markers, and staging folders of builds killed midway."""
    for entry in root.iterdir():
        try:
            if entry.name.startswith((".build-", ".old-")):
                stale = _age(entry) > STALE_STAGING_S
            elif entry.name.startswith(keep):
                continue
            elif entry.name.endswith(".failed"):
                stale = _age(entry) > UNUSED_BUILD_S
            else:
                stale = _age(entry / MANIFEST) > UNUSED_BUILD_S
        except OSError:  # no manifest: not a build of ours
            continue
        if stale:
            log.debug("deleting %s (unused)", entry)
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


def _age(path: Path) -> float:
    """Seconds since ``path`` was last modified (``OSError`` when it is not there)."""
    return time.time() - path.stat().st_mtime


def _failed_marker() -> Path:
    folder = build_dir()
    return folder.parent / f"{folder.name}.failed"


def _type_key(t) -> tuple | None:
    """``arg_key`` of a numba type, None when builds do not take it."""
    from numba.core import types
    from numba.np.numpy_support import as_dtype
    if isinstance(t, types.Array):
        if t.layout != "C" or not t.aligned:
            return None
        return ("a" if t.mutable else "r", as_dtype(t.dtype).str, t.ndim)
    if isinstance(t, (types.Integer, types.Float, types.Boolean)):
        return ("s", as_dtype(t).str)
    return None


def _numba_type(key: tuple):
    import numba
    if key[0] in ("a", "r"):
        return numba.types.Array(numba.from_dtype(np.dtype(key[1])), key[2], "C", readonly=key[0] == "r")
    return numba.from_dtype(np.dtype(key[1]))


def refresh(kernels) -> Path | None:
    """Build the kernels again when this process called numba for a signature a build can take that the
    current build lacks; returns the new build's folder (None: nothing to do, or no C compiler).
    ``kernels()``: every ``jit.Kernel`` defined (``jit.kernels``)."""
    if not enabled():
        return None
    # every kernel numba served, whether called directly or from a module whose globals point to numba
    used = [k for k in kernels() if k.in_numba and k.options.get("cache")]
    if not used:
        return None
    built = _load()
    # the modules whose kernels declare signatures, and those of the previous build's kernels (which the
    # new build keeps), so that every kernel is defined here
    for module in set(_KERNEL_MODULES) | {name.rsplit(".", 1)[0] for name in built}:
        importlib.import_module(module)
    wanted: dict = {k.name: {keys for keys, _ in built.get(k.name, [])} | set(k.aot_signatures)
                    for k in kernels() if k.options.get("cache")}
    for kernel in used:
        for args in kernel.dispatcher.signatures:
            keys = tuple(_type_key(t) for t in args)
            if None not in keys:
                wanted[kernel.name].add(keys)
    have = {name: {keys for keys, _ in entries} for name, entries in built.items()}
    if all(keys <= have.get(name, set()) for name, keys in wanted.items()):
        return None
    try:
        failed_recently = _age(_failed_marker()) < RETRY_FAILED_S
    except OSError:  # no marker: no build of these sources failed
        failed_recently = False
    if failed_recently:
        log.debug("a build of these kernels failed within a day (%s): not retried yet", _failed_marker())
        return None
    if shutil.which(os.environ.get("CC", "cc")) is None and shutil.which("gcc") is None:
        log.debug("no C compiler: the kernels are not built ahead of time")
        return None
    return build({name: keys for name, keys in wanted.items() if keys}, kernels)


def build(wanted: dict, kernels) -> Path | None:
    """Build ``wanted`` (kernel name -> set of argument-key tuples; their modules imported) into
    ``build_dir()``; ``kernels()`` as for ``refresh``."""
    from numba.pycc import CC
    by_name = {k.name: k for k in kernels()}
    folder = build_dir()
    n = sum(len(v) for v in wanted.values())
    log.info("building %d CPU kernel signature(s) ahead of time for later runs (once; %s)", n, folder)
    staging = None
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".build-", dir=folder.parent))
        cc = CC(MODULE)
        cc.output_dir = str(staging)
        cc.target_cpu = "host"
        manifest: dict = {}
        for name, key_set in sorted(wanted.items()):
            kernel = by_name.get(name)
            if kernel is None:
                continue
            for keys in sorted(key_set):
                argtypes = tuple(_numba_type(k) for k in keys)
                kernel.dispatcher.compile(argtypes)  # from numba's cache: gives the return type
                export = _export_name(name, keys)
                cc.export(export, kernel.dispatcher.overloads[argtypes].signature)(kernel.py_func)
                manifest.setdefault(name, []).append([export, [list(k) for k in keys]])
        with _gil_released_wrappers(), _quiet("", "numba"):
            cc.compile()
        files = [p.name for p in staging.iterdir() if p.name.startswith(MODULE)]
        if len(files) != 1:
            raise RuntimeError(f"pycc wrote {files}")
        (staging / MANIFEST).write_text(json.dumps({"file": files[0], "kernels": manifest}), encoding="utf-8")
        _replace(folder, staging)
        _failed_marker().unlink(missing_ok=True)
        _prune(folder.parent, keep=folder.name)
        return folder
    except Exception as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        where = "GPUCURATE_CACHE_DIR names a writable folder for it, " if isinstance(exc, OSError) else ""
        log.warning("the kernels were not built ahead of time (%s); numba serves them (%sGPUCURATE_AOT=0 turns "
                    "the build off)", reason, where)
        try:
            _failed_marker().write_text(f"{type(exc).__name__}: {exc}\n", encoding="utf-8")
        except OSError:
            pass
        return None
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)


def _replace(folder: Path, staging: Path) -> None:
    """Put ``staging`` in place of ``folder``. A previous build there is moved aside first (this one has its
    signatures too); another process may be doing the same, so the rename is tried again."""
    old = folder.parent / f".old-{staging.name}"
    for _ in range(5):
        try:
            staging.rename(folder)
            return
        except OSError:
            try:
                folder.rename(old)
            except FileNotFoundError:  # the other process moved it; its build is not in place yet
                continue
            # removed at once: a second round (another build put in place meanwhile) moves that one here too
            shutil.rmtree(old, ignore_errors=True)
    raise OSError(f"could not put the build in place of {folder}")


class _quiet:
    """The C compiler's command lines kept off stderr: distutils, which pycc builds with, logs them at
    INFO on the root logger (``""``)."""

    def __init__(self, *names: str):
        self.loggers = [logging.getLogger(n) for n in names]

    def __enter__(self):
        self.levels = [lg.level for lg in self.loggers]
        for lg in self.loggers:
            lg.setLevel(logging.WARNING)

    def __exit__(self, *exc):
        for lg, level in zip(self.loggers, self.levels):
            lg.setLevel(level)


class _gil_released_wrappers:
    """pycc compiles its Python wrappers holding the GIL; the kernels are ``nogil`` and run on threads, so
    the wrappers are compiled with numba's ``release_gil`` flag (pycc makes its ``Flags`` per build)."""

    def __enter__(self):
        import numba.pycc.compiler as pycc_compiler
        from numba.core.compiler import Flags

        class GilReleasingFlags(Flags):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                self.release_gil = True
        self.module, self.saved = pycc_compiler, pycc_compiler.Flags
        pycc_compiler.Flags = GilReleasingFlags

    def __exit__(self, *exc):
        self.module.Flags = self.saved
