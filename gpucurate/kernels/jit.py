"""``njit`` for the CPU kernels: numba's, except that a kernel found in the on-disk cache loads without
numba's compiler start-up.

``numba.core.caching.Cache.load_overload`` refreshes the target context before it loads a kernel: that
imports and installs every typing and lowering registry of numba (0.1-0.15 s in each process, most of
the first call's cost). Loading machine code needs none of it, only numba's runtime (NRT), which the code
links to. A cache miss still compiles through numba's compiler, which refreshes the context itself.
"""

from __future__ import annotations

from numba import njit as _numba_njit
from numba.core.caching import FunctionCache
from numba.core.runtime import rtsys


class _KernelCache(FunctionCache):
    def load_overload(self, sig, target_context):
        rtsys.initialize(target_context)  # idempotent; the machine code calls NRT to allocate arrays
        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)


#: numba's private cache API, checked once: without it the kernels use numba's own cache
_PATCHABLE = all(hasattr(FunctionCache, name) for name in ("_guard_against_spurious_io_errors", "_load_overload"))


def njit(*args, **kwargs):
    """``numba.njit`` with the same arguments; a ``cache=True`` kernel loads through ``_KernelCache``."""
    compiled = _numba_njit(*args, **kwargs)
    if not (kwargs.get("cache") and _PATCHABLE):
        return compiled

    def decorate(fn):
        dispatcher = compiled(fn)
        dispatcher._cache = _KernelCache(dispatcher.py_func)
        return dispatcher
    return decorate
