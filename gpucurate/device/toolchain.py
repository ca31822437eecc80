"""Whether the CUDA driver can load what the GPU backend's compiler emits.

numba-cuda compiles the kernels with libNVVM (found by numba-cuda: a CUDA 12 or 13 wheel, ``CUDA_HOME``,
the system toolkit) to PTX, which the driver assembles when the kernel loads. A PTX ISA newer than the
driver's CUDA version does not load (``CUDA_ERROR_UNSUPPORTED_PTX_VERSION``): CUDA 13 wheels on a
CUDA 12 driver, or a newer CUDA 13 minor than the driver's. ``probe_device`` names this when its launch
fails, so that ``--backend auto`` falls back to the CPU with a warning that says what to install.
"""

from __future__ import annotations

import re

#: the CUDA release that introduced each PTX ISA of CUDA 12 (PTX ISA release notes); ISA 9.m is CUDA 13.m
_PTX_ISA_CUDA_12 = {(8, 0): (12, 0), (8, 1): (12, 1), (8, 2): (12, 2), (8, 3): (12, 3), (8, 4): (12, 4),
                    (8, 5): (12, 5), (8, 6): (12, 7), (8, 7): (12, 8), (8, 8): (12, 9)}


def ptx_isa(ptx: str) -> tuple[int, int] | None:
    """The ``.version`` of PTX text, e.g. (9, 0)."""
    found = re.search(r"^\s*\.version\s+(\d+)\.(\d+)", ptx, re.M)
    return (int(found.group(1)), int(found.group(2))) if found else None


def cuda_for_ptx_isa(isa: tuple[int, int]) -> tuple[int, int] | None:
    """The oldest CUDA version whose driver loads PTX ISA ``isa`` (None when unknown)."""
    if isa[0] == 9:
        return 13, isa[1]
    return _PTX_ISA_CUDA_12.get(tuple(isa))


def describe(isa: tuple[int, int] | None, driver: tuple[int, int] | None, nvvm_path: str | None,
             found_by: str | None) -> str:
    """One line: the PTX ISA, where libNVVM was found and the driver's CUDA version, and, when the driver
    is too old for that PTX, what to install."""
    fmt = lambda v: "?" if v is None else f"{v[0]}.{v[1]}"  # noqa: E731
    text = f"PTX ISA {fmt(isa)} from libNVVM at {nvvm_path} (found by {found_by}), CUDA driver {fmt(driver)}"
    needs = cuda_for_ptx_isa(isa) if isa else None
    if needs and driver and needs > tuple(driver):
        text += (f": that PTX needs a CUDA {fmt(needs)} driver; install the toolkit wheels of the driver's "
                 f"CUDA version (pip install 'cuda-toolkit[nvvm]=={driver[0]}.{driver[1]}.*'), or a newer driver")
    return text


def diagnose() -> str:
    """``describe`` of this process' toolchain and driver, for a probe that failed on a real device; ''
    when they cannot be read (no driver, no libNVVM: the probe's own error says enough then)."""
    try:
        from numba import cuda
        from numba.cuda.cudadrv.driver import driver

        from ..kernels.cuda import KERNELS
        from ..kernels.cuda_build import compile_kernel, nvvm_location
        where = nvvm_location()
        version = driver.get_version()
        isa = ptx_isa(compile_kernel(KERNELS["probe"], cuda.get_current_device().compute_capability))
    except Exception:  # noqa: BLE001 - a diagnosis must not replace the probe's error
        return ""
    return describe(isa, version, where["nvvm"], where["nvvm_found_by"])
