"""The one place where the compute backend is chosen.

Stages ask ``select(name)`` for a ``Backend`` and call its kernels; they never import CuPy, cuDF or
cuML themselves. The CPU kernels (numba) are the reference; a GPU backend must reproduce them bit
for bit for the hash-based stages.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from types import ModuleType

from ..errors import ConfigError

log = logging.getLogger("gpucurate")


@dataclass(frozen=True)
class Backend:
    name: str
    minhash: ModuleType  # text_hashes, signatures, band_keys
    pairs: ModuleType  # bucket_pairs, jaccard_pairs, signature_agreement, components
    semantic: ModuleType  # kmeans_fit, assign, cluster_pairs, greedy_keep
    gates: ModuleType  # quality_stats, ngram_matches, paragraph_spans
    substrings: ModuleType  # window_hashes, repeated_windows
    torch_device: str = "cpu"
    #: the device's arrays and transfer ledger (GPU backend only)
    arrays: object = None


def select(name: str = "auto") -> Backend:
    """Resolve ``auto | cpu | gpu`` to a Backend.

    ``gpu`` runs the exact and fuzzy stages device-resident (``device.resident``; CuPy arrays, numba.cuda
    kernels) and Torch on CUDA; it is an error (exit 2) when ``device.arrays.probe_device`` fails.
    ``auto`` takes the GPU only when the probe passes, and otherwise logs the reason once and runs on the
    CPU. ``auto`` never picks numba's CUDA simulator.
    """
    from ..device import simulated
    from ..kernels import gates, minhash, pairs, semantic, substrings
    if name not in ("auto", "cpu", "gpu"):
        raise ConfigError(f"run.backend must be auto, cpu or gpu; got {name!r}")
    if name == "gpu" or (name == "auto" and not simulated() and _cuda_visible()):
        from ..device.arrays import probe_device
        try:
            dev = probe_device()
        except RuntimeError as exc:
            if name == "gpu":
                raise ConfigError(f"run.backend=gpu: {exc} (use --backend cpu)") from None
            log.warning("a GPU is visible but not usable, running on the CPU: %s", exc)
            return Backend("cpu", minhash, pairs, semantic, gates, substrings)
        from ..device import host_api
        host_api.bind(dev)
        return Backend("gpu", host_api, host_api, semantic, host_api, host_api, "cpu" if dev.simulated else "cuda", dev)
    return Backend("cpu", minhash, pairs, semantic, gates, substrings)


def _cuda_visible() -> bool:
    """A CUDA driver with at least one device (cheap; ``device.arrays.probe_device`` then checks it works)."""
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
