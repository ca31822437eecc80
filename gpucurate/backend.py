"""The one place where the compute backend is chosen.

Stages ask ``select(name)`` for a ``Backend`` and call its kernels; they never import CuPy, cuDF or
cuML themselves. The CPU kernels (numba) are the reference; a GPU backend must reproduce them bit
for bit for the hash-based stages.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import logging

from .errors import ConfigError

log = logging.getLogger("gpucurate")


@dataclass(frozen=True)
class Backend:
    name: str
    minhash: ModuleType  # text_hashes, signatures, band_keys
    pairs: ModuleType  # bucket_pairs, jaccard_pairs, signature_agreement, components
    semantic: ModuleType  # kmeans_fit, assign, cluster_pairs, greedy_keep
    gates: ModuleType  # quality_stats, ngram_matches, paragraph_spans
    torch_device: str = "cpu"
    #: the device's arrays and transfer ledger (GPU backend only)
    arrays: object = None


def _simulated() -> bool:
    """numba runs CUDA kernels in its simulator (tests): only an explicit ``gpu`` uses it."""
    import os
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def probe_device():
    """``DeviceArrays`` of the first GPU after compiling and launching a tiny kernel there; raises
    ``RuntimeError`` with the reason when that fails (no CuPy, no device, no libNVVM, a driver older than
    the PTX)."""
    from .device.arrays import cupy_arrays, simulated_arrays
    if _simulated():  # tests: NumPy, or the strict array-API namespace, in numba's CUDA simulator
        import os
        dev = simulated_arrays(strict=os.environ.get("GPUCURATE_SIM_XP") == "strict")
    else:
        try:
            import cupy
            if cupy.cuda.runtime.getDeviceCount() < 1:
                raise RuntimeError("CuPy sees no CUDA device")
            dev = cupy_arrays()
        except ImportError as exc:
            raise RuntimeError(f"CuPy is not installed ({exc}); pip install -e '.[gpu]'") from None
        except Exception as exc:
            raise RuntimeError(f"no usable CUDA device: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") \
                from None
    import numpy as np
    try:
        out = dev.empty(64, dev.xp.int64)
        dev.launch("probe", 64, out)
        got = dev.to_host(out)
    except Exception as exc:  # numba's NvvmError, CudaAPIError (PTX newer than the driver), ...
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RuntimeError(f"compiling or launching a CUDA kernel failed: {type(exc).__name__}: {first}") from None
    if not np.array_equal(got, np.arange(64) * 3 + 1):
        raise RuntimeError("the probe kernel ran but returned wrong values")
    dev.ledger.__init__()  # the probe's copies are not the run's
    return dev


def select(name: str = "auto") -> Backend:
    """Resolve ``auto | cpu | gpu`` to a Backend.

    ``gpu`` runs the exact and fuzzy stages device-resident (``device.resident``; CuPy arrays, numba.cuda
    kernels) and Torch on CUDA; it is an error (exit 2) when ``probe_device`` fails. ``auto`` takes the GPU
    only when the probe passes, and otherwise logs the reason once and runs on the CPU. ``auto`` never
    picks numba's CUDA simulator.
    """
    from .kernels import gates, minhash, pairs, semantic
    if name not in ("auto", "cpu", "gpu"):
        raise ConfigError(f"run.backend must be auto, cpu or gpu; got {name!r}")
    if name == "gpu" or (name == "auto" and not _simulated() and _cuda_visible()):
        try:
            dev = probe_device()
        except RuntimeError as exc:
            if name == "gpu":
                raise ConfigError(f"run.backend=gpu: {exc} (use --backend cpu)") from None
            log.warning("a GPU is visible but not usable, running on the CPU: %s", exc)
            return Backend("cpu", minhash, pairs, semantic, gates)
        from .device import host_api
        host_api.bind(dev)
        return Backend("gpu", host_api, host_api, semantic, host_api, "cpu" if dev.simulated else "cuda", dev)
    return Backend("cpu", minhash, pairs, semantic, gates)


def _cuda_visible() -> bool:
    """A CUDA driver with at least one device (cheap; ``probe_device`` then checks it works)."""
    if not _driver_library():
        return False  # no driver: skip importing CuPy / numba.cuda (most of a second of start-up)
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # ImportError, CUDARuntimeError, missing driver libraries
        try:
            from numba import cuda
            return bool(cuda.is_available())
        except Exception:
            return False


def _driver_library() -> bool:
    """Whether the CUDA driver library (``libcuda``) can be loaded: without it nothing can run on a GPU."""
    import ctypes
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            ctypes.CDLL(name)
            return True
        except OSError:
            continue
    return False
