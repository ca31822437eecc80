"""Compiled kernels. ``hashing`` holds the scalar hash functions shared by every backend;
the array kernels in ``minhash`` and ``pairs`` run on the CPU (numba, or their ahead-of-time build:
``jit``, ``aot``) over Arrow string buffers."""

import sys


def numba_without_blas() -> None:
    """Load numba's NumPy implementations without importing scipy.linalg (0.17 s of every run's start):
    numba imports it only to route ``np.dot`` to BLAS, which no kernel here uses. Left alone when
    either is loaded already."""
    if "numba.np.arraymath" in sys.modules or "scipy.linalg" in sys.modules:
        return
    sys.modules["scipy.linalg.cython_blas"] = None  # its import raises ImportError
    try:
        import numba.np.arraymath  # noqa: F401
    finally:
        del sys.modules["scipy.linalg.cython_blas"]

