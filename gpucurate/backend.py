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
    torch_device: str = "cpu"


def gpu_available() -> bool:
    """True when CuPy is importable and sees at least one CUDA device."""
    try:
        import cupy  # noqa: F401
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # ImportError, CUDARuntimeError, missing driver libraries
        return False


def select(name: str = "auto") -> Backend:
    """Resolve ``auto | cpu | gpu`` to a Backend; ``gpu`` without a usable device is an error."""
    from .kernels import minhash, pairs, semantic
    if name not in ("auto", "cpu", "gpu"):
        raise ConfigError(f"run.backend must be auto, cpu or gpu; got {name!r}")
    if name == "gpu":
        if not gpu_available():
            raise ConfigError("run.backend=gpu but no CUDA device is visible to CuPy "
                              "(install the gpu extra or use --backend cpu)")
        raise ConfigError("run.backend=gpu: the GPU kernels are not part of this version yet; use --backend cpu")
    return Backend("cpu", minhash, pairs, semantic)
