"""``njit`` for the CPU kernels: a kernel runs its ahead-of-time build when there is one for the call's
argument types, and otherwise numba's dispatcher, which is only created (and numba imported) then.

Importing numba costs 0.27-0.3 s of every process and loading a cached kernel another 0.005-0.045 s
each, about 0.45 s of a small run in all. ``kernels.aot`` builds the kernels a run used into one
CPython extension module, which loads in under a millisecond without numba; a call whose argument
types that module lacks (or with no module built) goes to numba as before.

``numba.core.caching.Cache.load_overload`` refreshes the target context before it loads a kernel: that
imports and installs every typing and lowering registry of numba (0.1-0.15 s in each process, most of
the first call's cost). Loading machine code needs none of it, only numba's runtime (NRT), which the code
links to; ``_kernel_cache_class`` loads without it. A cache miss still compiles through numba's compiler.
"""

from __future__ import annotations

import functools
import importlib
import threading

from . import aot

#: every kernel made by ``njit``, in definition order
_KERNELS: list["Kernel"] = []
_LOCK = threading.RLock()


class Kernel:
    """A CPU kernel: ``py_func`` compiled by numba with ``options`` on first need, or its AOT build.

    Attributes other than calling (``stats``, ``signatures``, ``overloads``...) are the numba
    dispatcher's, which asking for them creates.
    """

    def __init__(self, py_func, options: dict, aot_signatures: tuple = ()):
        self.py_func, self.options = py_func, options
        self.aot_signatures = tuple(aot.declared_keys(s) for s in aot_signatures)
        self.name = f"{py_func.__module__}.{py_func.__qualname__}"
        self.__name__, self.__qualname__, self.__doc__ = py_func.__name__, py_func.__qualname__, py_func.__doc__
        self.__module__ = py_func.__module__
        self._dispatcher = None

    def __call__(self, *args, **kwargs):
        if not kwargs:
            fn = aot.function(self.name, args)
            if fn is not None:
                return fn(*args)
        return self.dispatcher(*args, **kwargs)

    @property
    def in_numba(self) -> bool:
        """Whether this process made numba's dispatcher of the kernel (a call or an attribute needed it)."""
        return self._dispatcher is not None

    @property
    def dispatcher(self):
        if self._dispatcher is None:
            _materialize()
        return self._dispatcher

    def __getattr__(self, name: str):
        if name.startswith("__") or name in ("py_func", "options", "aot_signatures", "name", "_dispatcher"):
            raise AttributeError(name)  # not set yet (unpickling) or a protocol probe
        return getattr(self.dispatcher, name)

    def __reduce__(self):
        """Pickled by name (tasks sent to Dask workers carry kernels): the worker's own ``Kernel``."""
        return _kernel_named, (self.__module__, self.name)

    def __repr__(self) -> str:
        return f"<Kernel {self.name}>"


def njit(aot: tuple = (), **options):
    """``numba.njit(**options)`` as a decorator, made lazy (``Kernel``). ``aot``: signatures every
    ahead-of-time build has (``kernels.aot.declared_keys``), whether or not a run called them yet."""
    def decorate(fn) -> Kernel:
        kernel = Kernel(fn, options, aot)
        _KERNELS.append(kernel)
        return kernel
    return decorate


def _kernel_named(module: str, name: str) -> Kernel:
    importlib.import_module(module)
    return next(k for k in _KERNELS if k.name == name)


def _materialize() -> None:
    """Create numba's dispatcher of every kernel, then point the kernels' globals and closure cells that
    hold a ``Kernel`` to its dispatcher, so that numba compiles kernel-to-kernel calls as it always did."""
    with _LOCK:
        pending = [k for k in _KERNELS if k._dispatcher is None]
        if not pending:
            return
        from . import numba_without_blas
        numba_without_blas()
        from numba import njit as numba_njit
        made = {}
        for kernel in pending:
            dispatcher = numba_njit(**kernel.options)(kernel.py_func)
            if kernel.options.get("cache") and _kernel_cache_class() is not None:
                dispatcher._cache = _kernel_cache_class()(dispatcher.py_func)
            made[id(kernel)] = dispatcher

        def numba_of(obj: Kernel):
            return made[id(obj)] if id(obj) in made else obj.dispatcher

        for kernel in pending:
            names = kernel.py_func.__globals__
            for name, obj in list(names.items()):
                if isinstance(obj, Kernel):
                    names[name] = numba_of(obj)
            for cell in kernel.py_func.__closure__ or ():
                if isinstance(cell.cell_contents, Kernel):
                    cell.cell_contents = numba_of(cell.cell_contents)
        # published last: another thread that finds a dispatcher may compile it, which needs the globals above
        for kernel in pending:
            kernel._dispatcher = made[id(kernel)]


def kernels() -> list["Kernel"]:
    """Every kernel defined so far (by module import)."""
    return list(_KERNELS)


def compiled_any() -> bool:
    """Whether this process compiled a kernel instead of loading it from numba's cache or the AOT build."""
    for kernel in _KERNELS:
        if kernel.in_numba and kernel.options.get("cache") and sum(kernel.dispatcher.stats.cache_misses.values()):
            return True
    return False


@functools.lru_cache(maxsize=None)
def _kernel_cache_class():
    """numba's ``FunctionCache`` loading without the compiler start-up; None when numba's private cache
    API differs (the kernels then use numba's own cache)."""
    from numba.core.caching import FunctionCache
    from numba.core.runtime import rtsys
    if not all(hasattr(FunctionCache, name) for name in ("_guard_against_spurious_io_errors", "_load_overload")):
        return None

    class KernelCache(FunctionCache):
        def load_overload(self, sig, target_context):
            rtsys.initialize(target_context)  # idempotent; the machine code calls NRT to allocate arrays
            with self._guard_against_spurious_io_errors():
                return self._load_overload(sig, target_context)
    return KernelCache
