"""The GPU path: ``arrays`` (the namespace ``xp``, kernel launches, the transfer ledger, the device
probe), ``glue`` (kernel orchestration written once against ``xp``), ``resident`` (the exact + fuzzy
stages on the device), ``host_api`` (the GPU kernels behind the CPU kernels' host signatures) and
``toolchain`` (whether the driver loads the PTX that libNVVM emits; the probe's diagnosis).

Nothing here is imported on a CPU run; this module itself is light (no numba.cuda, no CuPy).
"""

import os


def simulated() -> bool:
    """numba runs CUDA kernels in its simulator (tests): only an explicit ``gpu`` uses it."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
