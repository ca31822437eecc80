"""The one place where the compute backend is chosen.

Stages ask ``select(name)`` for a ``Backend`` and call its kernels; they never import CuPy, cuDF or
cuML themselves. The CPU kernels (numba) are the reference; a GPU backend must reproduce them bit
for bit for the hash-based stages.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from .errors import ConfigError


@dataclass(frozen=True)
class Backend:
    name: str
    minhash: ModuleType  # text_hashes, signatures, band_keys
    pairs: ModuleType  # bucket_pairs, jaccard_pairs, signature_agreement, components
    semantic: ModuleType  # kmeans_fit, assign, cluster_pairs, greedy_keep
    gates: ModuleType  # quality_stats, ngram_matches, paragraph_spans
    torch_device: str = "cpu"


def gpu_available() -> bool:
    """True when CuPy is importable and sees at least one CUDA device."""
    try:
        import cupy  # noqa: F401
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # ImportError, CUDARuntimeError, missing driver libraries
        return False


def _simulated() -> bool:
    """numba runs CUDA kernels in its simulator (tests): only an explicit ``gpu`` uses it."""
    import os
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def _cuda_kernels_usable() -> bool:
    """numba.cuda has a device, or runs its simulator (NUMBA_ENABLE_CUDASIM=1, for tests)."""
    try:
        from numba import cuda
        return bool(cuda.is_available())
    except Exception:
        return False


def select(name: str = "auto") -> Backend:
    """Resolve ``auto | cpu | gpu`` to a Backend; ``gpu`` without a usable device is an error.

    The GPU backend runs the hash kernels with numba.cuda on device copies of the partitions' Arrow
    buffers (``kernels.cuda``), the bucketing and components on the CPU kernels, and Torch on CUDA.
    """
    from .kernels import gates, minhash, pairs, semantic
    if name not in ("auto", "cpu", "gpu"):
        raise ConfigError(f"run.backend must be auto, cpu or gpu; got {name!r}")
    if name == "gpu" or (name == "auto" and gpu_available() and not _simulated()):
        if not _cuda_kernels_usable():
            raise ConfigError("run.backend=gpu but numba.cuda sees no CUDA device "
                              "(install the gpu extra and a CUDA driver, or use --backend cpu)")
        from numba import config as numba_config
        from .kernels import cuda as cuda_kernels
        torch_device = "cpu" if numba_config.ENABLE_CUDASIM else "cuda"
        return Backend("gpu", cuda_kernels, cuda_kernels, semantic, cuda_kernels, torch_device)
    return Backend("cpu", minhash, pairs, semantic, gates)
