"""Lookup tables that take seconds to make (every code point's classes), kept on disk under gpucurate's
cache (``kernels.aot.cache_root``) by a key of what they are made from, so that a process loads them in
milliseconds."""

from __future__ import annotations

import os

import numpy as np


def cached_arrays(kind: str, key: str, names: tuple, make) -> tuple:
    """The arrays ``names`` of ``<cache>/<kind>/<key>.npz``; made by ``make() -> tuple`` (in ``names``'s
    order) and saved there when absent or unreadable. With no writable cache they are made each time."""
    from .aot import cache_root
    path = cache_root() / kind / f"{key}.npz"
    try:
        with np.load(path) as saved:
            return tuple(saved[k] for k in names)
    except (OSError, KeyError, ValueError):
        pass
    arrays = make()
    staging = path.with_name(f".{path.name}.{os.getpid()}.npz")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(staging, **dict(zip(names, arrays)))
        os.replace(staging, path)  # whole or not at all: another process may be reading it
    except OSError:  # no writable cache, or a full disk: no half-written file left behind
        staging.unlink(missing_ok=True)
    return arrays
