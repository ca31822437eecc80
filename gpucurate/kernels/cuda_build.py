"""Build the CUDA kernels with the real compiler and report their static resources; no GPU needed.

Every kernel in ``gpucurate.kernels.cuda.KERNELS`` is compiled by numba-cuda's libNVVM to PTX with the
signature the glue launches it with (``compile_kernel``), the PTX is assembled by ``ptxas -v`` for the
target architecture (``ptxas_resources``: registers, spills, stack frame, shared and constant memory),
and the theoretical occupancy at the launch block size follows from the architecture's limits
(``occupancy``, the rules of CUDA's ``cuda_occupancy.h``). ``static_report`` does all of it, one row per
kernel and architecture; ``python -m gpucurate.kernels.cuda_build --json-out FILE`` writes the same as
JSON (``build_all``), which is how the tests and the benchmark run it from a process that has numba's
CUDA simulator on (the simulator cannot compile: ``run_build_subprocess`` starts a process without it).

Needs ``numba-cuda[cu12]`` (libNVVM and ptxas come from the ``nvidia-cuda-nvcc-cu12`` wheel); no driver,
no device, no CuPy. The driver assembles the same PTX with its own ptxas at load time, so the registers
on a device can differ slightly with the driver version.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

#: the architectures the report covers by default (A100, H100/H200)
DEFAULT_CCS = ((8, 0), (9, 0))
#: the occupancy a hot kernel must reach on sm_90 unless it carries a ``note``
HOT_OCCUPANCY_TARGET = 0.5


class ToolchainMissing(RuntimeError):
    """numba-cuda, libNVVM or ptxas is not installed (the message says which and how to install it)."""


class PtxasError(RuntimeError):
    """ptxas rejected the PTX (the message carries its output)."""


# --- toolchain ---------------------------------------------------------------------------------------

_INSTALL_HINT = ("pip install 'numba-cuda[cu12]' (or pip install -e '.[dev]'); for CUDA 13: "
                 "pip install 'numba-cuda[cu13]' 'cuda-toolkit[nvcc]==13.*'")
#: the Python packages whose ``bin`` holds ptxas: the CUDA 12 nvcc wheel's, then CUDA 13's (``nvidia/cu13``)
_PTXAS_PACKAGES = ("nvidia.cuda_nvcc", "nvidia.cu13")


def find_ptxas() -> str:
    """Path of ``ptxas``: the nvcc wheel's (``nvidia/cuda_nvcc/bin`` of CUDA 12, ``nvidia/cu13/bin`` of
    CUDA 13), then ``$CUDA_HOME/bin`` or ``$CUDA_PATH/bin``, then ``PATH``. Raises ``ToolchainMissing``
    otherwise."""
    tried = []
    exe = "ptxas.exe" if os.name == "nt" else "ptxas"
    for package in _PTXAS_PACKAGES:
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            tried.append(f"python package {package} (not installed)")
            continue
        for base in (spec.submodule_search_locations or []):
            candidate = Path(base) / "bin" / exe
            tried.append(str(candidate))
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidate = Path(os.environ[var]) / "bin" / exe
            tried.append(str(candidate))
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    found = shutil.which("ptxas")
    if found:
        return found
    tried.append("ptxas on PATH")
    raise ToolchainMissing(f"ptxas not found (tried: {', '.join(tried)}); it comes with the "
                           f"nvidia-cuda-nvcc-cu12 wheel (CUDA 13: nvidia-cuda-nvcc): {_INSTALL_HINT}")


def _simulator_on() -> bool:
    from numba import config
    return bool(config.ENABLE_CUDASIM)


def nvvm_location() -> dict:
    """Where numba-cuda finds libNVVM and libdevice: {"nvvm": path, "nvvm_found_by": ..., "libdevice":
    path} (a path is None, or a bare library name for the system loader, when the search found none)."""
    from numba.cuda.cuda_paths import get_cuda_paths
    paths = get_cuda_paths()
    return {"nvvm": paths["nvvm"].info, "nvvm_found_by": paths["nvvm"].by, "libdevice": paths["libdevice"].info}


def check_toolchain() -> dict:
    """Versions and paths of what the build needs: numba-cuda, libNVVM (loadable, with libdevice),
    ptxas. Raises ``ToolchainMissing`` naming what is not installed, ``RuntimeError`` when libNVVM is
    installed but does not load (a broken install fails, it is not "missing") or under the simulator."""
    if importlib.util.find_spec("numba_cuda") is None:
        raise ToolchainMissing(f"numba-cuda is not installed: {_INSTALL_HINT}")
    if _simulator_on():
        raise RuntimeError("NUMBA_ENABLE_CUDASIM=1: numba's CUDA simulator cannot compile kernels; build in a "
                           "process without it (cuda_build.run_build_subprocess)")
    from importlib.metadata import version
    found = nvvm_location()
    installed = all(found[k] and Path(found[k]).is_file() for k in ("nvvm", "libdevice"))
    try:
        from numba.cuda.cudadrv import nvvm
        nvvm_version = nvvm.NVVM().get_version()
    except Exception as exc:  # noqa: BLE001 - numba raises its own types for a library it cannot load
        reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        if installed:
            raise RuntimeError(f"libNVVM at {found['nvvm']} (found by {found['nvvm_found_by']}) does not load: "
                               f"{reason}") from exc
        raise ToolchainMissing(f"libNVVM is not installed ({reason}); it comes with the nvidia-cuda-nvcc-cu12 "
                               f"wheel (CUDA 13: nvidia-nvvm): {_INSTALL_HINT}") from exc
    ptxas = find_ptxas()
    out = subprocess.run([ptxas, "--version"], capture_output=True, text=True, timeout=60)
    release = re.search(r"release ([\d.]+), V([\d.]+)", out.stdout)
    return {"numba": version("numba"), "numba_cuda": version("numba-cuda"),
            "nvvm": ".".join(map(str, nvvm_version)), "nvvm_path": found["nvvm"], "ptxas": ptxas,
            "ptxas_version": release.group(2) if release else (out.stdout.strip().splitlines() or ["?"])[-1]}


# --- compile -----------------------------------------------------------------------------------------

#: dispatcher options that change the generated code, passed on to ``compile_ptx``
_CODEGEN_OPTIONS = ("debug", "lineinfo", "fastmath", "opt", "forceinline", "launch_bounds")


def compile_kernel(spec, cc: tuple[int, int] = (9, 0)) -> str:
    """PTX of ``spec`` (a ``KernelSpec``) for compute capability ``cc``, compiled by libNVVM with the
    signature it is launched with and the dispatcher's code-generation options. No device needed."""
    if _simulator_on():
        raise RuntimeError("NUMBA_ENABLE_CUDASIM=1: the CUDA simulator cannot compile kernels")
    from numba import cuda
    options = getattr(spec.dispatcher, "targetoptions", {}) or {}
    kwargs = {k: options[k] for k in _CODEGEN_OPTIONS if options.get(k) is not None}
    if "debug" in kwargs:
        kwargs["debug"] = bool(kwargs["debug"])
    ptx, _ = cuda.compile_ptx(spec.dispatcher.py_func, spec.signature, cc=tuple(cc), device=False, **kwargs)
    return ptx


# --- ptxas ---------------------------------------------------------------------------------------------

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FIELDS = {
    "stack_bytes": re.compile(r"(\d+) bytes stack frame"),
    "spill_stores": re.compile(r"(\d+) bytes spill stores"),
    "spill_loads": re.compile(r"(\d+) bytes spill loads"),
}
_USED = re.compile(r"Used (\d+) registers")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM = re.compile(r"(\d+) bytes cmem\[(\d+)\]")
_GMEM = re.compile(r"ptxas info\s*:\s*(\d+) bytes gmem")


def parse_ptxas(text: str) -> dict:
    """Resources from ``ptxas -v`` output of one kernel's PTX.

    registers, barriers, shared_bytes (smem) and const_bytes (sum of the cmem banks; ``cmem`` per bank)
    come from the entry function's ``Used ...`` line; stack_bytes from its ``Function properties``;
    spill_stores / spill_loads are summed over every function in the output (a non-inlined device
    function's spills count too). ``functions`` keeps each function's own properties. Fields missing
    from the output are 0 (ptxas 12.9 prints no cmem for sm_90). Raises ``ValueError`` without a
    ``Used N registers`` line.
    """
    functions: dict[str, dict] = {}
    entry = None
    current = None
    res = {"registers": None, "barriers": 0, "shared_bytes": 0, "const_bytes": 0, "cmem": {}, "gmem_bytes": 0}
    for line in text.splitlines():
        if m := _GMEM.search(line):
            res["gmem_bytes"] += int(m.group(1))
            continue
        if m := _ENTRY.search(line):
            entry = current = m.group(1)
            functions.setdefault(current, {})
            continue
        if m := _PROPS.search(line):
            current = m.group(1)
            functions.setdefault(current, {})
        target = functions.setdefault(current or "", {})
        for key, rx in _FIELDS.items():
            if f := rx.search(line):
                target[key] = int(f.group(1))
        if m := _USED.search(line):
            res["registers"] = int(m.group(1))
            if b := _BARRIERS.search(line):
                res["barriers"] = int(b.group(1))
            if s := _SMEM.search(line):
                res["shared_bytes"] = int(s.group(1))
            for size, bank in _CMEM.findall(line):
                res["cmem"][int(bank)] = int(size)
            res["const_bytes"] = sum(res["cmem"].values())
            current = entry  # the Used line closes the entry; later fields belong to it again
    if res["registers"] is None:
        raise ValueError(f"no 'Used N registers' line in the ptxas output:\n{text}")
    functions = {k: v for k, v in functions.items() if v or k == entry}
    own = functions.get(entry if entry is not None else "", {})
    res["stack_bytes"] = own.get("stack_bytes", 0)
    res["spill_stores"] = sum(f.get("spill_stores", 0) for f in functions.values())
    res["spill_loads"] = sum(f.get("spill_loads", 0) for f in functions.values())
    res["entry"] = entry
    res["functions"] = functions
    return res


def ptxas_resources(ptx: str, arch: str = "sm_90", ptxas: str | None = None) -> dict:
    """Assemble ``ptx`` with ``ptxas -v -arch=<arch> -o /dev/null`` and return ``parse_ptxas`` of its
    report. Raises ``PtxasError`` (with ptxas' output) when it fails, ``ToolchainMissing`` without ptxas."""
    ptxas = ptxas or find_ptxas()
    with tempfile.TemporaryDirectory(prefix="gpucurate-ptxas-") as tmp:
        src = Path(tmp) / "kernel.ptx"
        src.write_text(ptx)
        out = subprocess.run([ptxas, "-v", f"-arch={arch}", "-o", os.devnull, str(src)],
                             capture_output=True, text=True, timeout=300)
    text = out.stdout + out.stderr
    if out.returncode != 0:
        raise PtxasError(f"ptxas -arch={arch} failed (exit {out.returncode}):\n{text.strip()}")
    return parse_ptxas(text)


# --- occupancy -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ArchLimits:
    """Per-SM limits of one compute capability (CUDA programming guide, compute capabilities table)."""
    max_warps: int                  # resident warps per SM
    max_blocks: int                 # resident blocks per SM
    smem_per_sm: int                # shared memory per SM (bytes, largest carveout)
    smem_per_block: int             # largest shared memory of one block (opt-in), bytes
    regs_per_sm: int = 65536
    regs_per_block: int = 65536
    max_regs_per_thread: int = 255
    reg_granularity: int = 256      # registers are allocated per warp, in units of 256
    sub_partitions: int = 4         # the register file is split between the SM's 4 schedulers
    smem_reserved_per_block: int = 1024  # the driver reserves 1 KB per block since sm_80
    smem_granularity: int = 128
    max_threads_per_block: int = 1024
    warp_size: int = 32


ARCH_LIMITS: dict[tuple[int, int], ArchLimits] = {
    (8, 0): ArchLimits(max_warps=64, max_blocks=32, smem_per_sm=164 * 1024, smem_per_block=163 * 1024),
    (8, 6): ArchLimits(max_warps=48, max_blocks=16, smem_per_sm=100 * 1024, smem_per_block=99 * 1024),
    (8, 9): ArchLimits(max_warps=48, max_blocks=24, smem_per_sm=100 * 1024, smem_per_block=99 * 1024),
    (9, 0): ArchLimits(max_warps=64, max_blocks=32, smem_per_sm=228 * 1024, smem_per_block=227 * 1024),
}


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def occupancy_detail(registers: int, shared_bytes: int, threads: int, cc: tuple[int, int] = (9, 0)) -> dict:
    """Resident blocks and warps per SM of a kernel using ``registers`` per thread and ``shared_bytes``
    of shared memory per block, launched with ``threads`` per block, and what limits them.

    The rules of ``cuda_occupancy.h``: registers are allocated per warp in units of 256 and each of the
    SM's 4 sub-partitions holds ``regs_per_sm / 4 // regs_per_warp`` warps; a block's shared memory plus
    the 1 KB the driver reserves, rounded up to 128 bytes, divides the SM's shared memory; the SM holds
    at most ``max_warps`` warps and ``max_blocks`` blocks. Returns blocks, active_warps, occupancy
    (active warps / max warps), limit (the binding limits, joined by '+') and the per-limit block counts.
    """
    cc = tuple(cc)
    if cc not in ARCH_LIMITS:
        raise ValueError(f"no occupancy limits for compute capability {cc}; known: {sorted(ARCH_LIMITS)}")
    a = ARCH_LIMITS[cc]
    if threads <= 0 or registers < 0 or shared_bytes < 0:
        raise ValueError(f"invalid launch: {threads} threads, {registers} registers, {shared_bytes} bytes smem")
    warps = _ceil_div(threads, a.warp_size)
    big = 1 << 30
    # warps
    by_warps = 0 if threads > a.max_threads_per_block else a.max_warps // warps
    # registers
    regs_per_warp = _ceil_div(registers * a.warp_size, a.reg_granularity) * a.reg_granularity
    assumed_per_block = regs_per_warp * _ceil_div(warps, a.sub_partitions) * a.sub_partitions
    if (registers > a.max_regs_per_thread or assumed_per_block > a.regs_per_block
            or regs_per_warp * warps > a.regs_per_block):
        by_regs = 0
    elif regs_per_warp == 0:
        by_regs = big
    else:
        by_regs = (a.regs_per_sm // a.sub_partitions // regs_per_warp) * a.sub_partitions // warps
    # shared memory
    smem = _ceil_div(shared_bytes + a.smem_reserved_per_block, a.smem_granularity) * a.smem_granularity
    if smem > a.smem_per_block + a.smem_reserved_per_block:
        by_smem = 0
    else:
        by_smem = a.smem_per_sm // smem if smem else big
    limits = {"registers": by_regs, "shared": by_smem, "warps": by_warps, "blocks": a.max_blocks}
    blocks = min(limits.values())
    active = blocks * warps
    return {"blocks": blocks, "active_warps": active, "occupancy": active / a.max_warps,
            "limit": "+".join(k for k, v in limits.items() if v == blocks),
            "blocks_by": {k: (None if v == big else v) for k, v in limits.items()}}


def occupancy(registers: int, shared_bytes: int, threads: int, cc: tuple[int, int] = (9, 0)) -> float:
    """Theoretical occupancy (active warps / max warps per SM); see ``occupancy_detail``."""
    return occupancy_detail(registers, shared_bytes, threads, cc)["occupancy"]


# --- the kernels -------------------------------------------------------------------------------------

def _is_kernel_dispatcher(obj) -> bool:
    """A ``numba.cuda.jit`` kernel (not a device function), compiled for the device or the simulator."""
    try:
        from numba.cuda.dispatcher import CUDADispatcher
    except ImportError:  # pragma: no cover - simulator-only numba
        CUDADispatcher = ()
    if CUDADispatcher and isinstance(obj, CUDADispatcher):
        return not obj.targetoptions.get("device", False)
    try:
        from numba.cuda.simulator.kernel import FakeCUDAKernel
    except ImportError:  # pragma: no cover
        return False
    return isinstance(obj, FakeCUDAKernel) and not getattr(obj, "_device", False)


def unregistered_kernels(module=None) -> list[str]:
    """Names in ``module``'s namespace (default ``gpucurate.kernels.cuda``) bound to a CUDA kernel
    dispatcher that is not the dispatcher of any ``KERNELS`` entry (declared without ``@kernel``)."""
    if module is None:
        from . import cuda as module
    registered = {id(spec.dispatcher) for spec in module.KERNELS.values()}
    return sorted(name for name, obj in vars(module).items()
                  if _is_kernel_dispatcher(obj) and id(obj) not in registered)


def _arch(cc) -> str:
    return f"sm_{cc[0]}{cc[1]}"


#: the module whose ``KERNELS`` are built
KERNEL_MODULE = "gpucurate.kernels.cuda"


def build_all(ccs=DEFAULT_CCS, module: str = KERNEL_MODULE) -> dict:
    """Compile and assemble every kernel of ``module.KERNELS`` for every ``cc``; never raises for one
    kernel.

    Returns {"toolchain", "rows": static_report rows (``error`` set, resources None, when a kernel fails
    to compile or assemble), "unregistered": ``unregistered_kernels(module)``, "seconds"}. Raises
    ``ToolchainMissing`` when numba-cuda, libNVVM or ptxas is not installed.
    """
    start = time.perf_counter()
    toolchain = check_toolchain()
    import importlib
    kernels = importlib.import_module(module)
    rows = []
    for cc in ccs:
        for name, spec in kernels.KERNELS.items():
            row = {"name": name, "arch": _arch(cc), "signature": spec.signature, "hot": spec.hot,
                   "threads": spec.threads, "registers": None, "spill_stores": None, "spill_loads": None,
                   "stack_bytes": None, "shared_bytes": None, "const_bytes": None, "occupancy": None,
                   "blocks": None, "limit": None, "note": spec.note, "error": None}
            try:
                ptx = compile_kernel(spec, cc)
            except Exception as exc:  # noqa: BLE001 - reported per kernel
                row["error"] = f"compile: {type(exc).__name__}: {exc}"
                rows.append(row)
                continue
            try:
                res = ptxas_resources(ptx, _arch(cc), toolchain["ptxas"])
            except (PtxasError, ValueError, subprocess.TimeoutExpired) as exc:
                row["error"] = f"ptxas: {exc}"
                rows.append(row)
                continue
            occ = occupancy_detail(res["registers"], res["shared_bytes"], spec.threads, cc)
            row.update({k: res[k] for k in ("registers", "spill_stores", "spill_loads", "stack_bytes",
                                            "shared_bytes", "const_bytes")})
            row.update(occupancy=occ["occupancy"], blocks=occ["blocks"], limit=occ["limit"])
            rows.append(row)
    return {"toolchain": toolchain, "rows": rows, "unregistered": unregistered_kernels(kernels),
            "seconds": round(time.perf_counter() - start, 2)}


def run_build_subprocess(ccs=DEFAULT_CCS, timeout: float = 600, module: str = KERNEL_MODULE,
                         pythonpath=()) -> dict:
    """``build_all`` in a fresh Python with ``NUMBA_ENABLE_CUDASIM=0`` (from a process that has the
    simulator on, such as the test suite); ``pythonpath``: extra import directories for ``module``.
    Returns its result, or {"missing": reason} when the toolchain is not installed. Raises
    ``RuntimeError`` with the child's output when it fails otherwise."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    paths = [str(Path(__file__).resolve().parents[2]), *map(str, pythonpath)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    root = paths[0]
    with tempfile.TemporaryDirectory(prefix="gpucurate-build-") as tmp:
        out = Path(tmp) / "build.json"
        cmd = [sys.executable, "-m", "gpucurate.kernels.cuda_build", "--json-out", str(out), "--module", module]
        for cc in ccs:
            cmd += ["--cc", f"{cc[0]}.{cc[1]}"]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=root)
        if proc.returncode != 0 or not out.is_file():
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-40:])
            raise RuntimeError(f"kernel build subprocess failed (exit {proc.returncode}):\n{tail}")
        return json.loads(out.read_text())


def row_findings(row: dict, target: float = HOT_OCCUPANCY_TARGET, target_arch: str = "sm_90") -> dict:
    """What the checks find in one ``static_report`` row, by check (empty when it passes them all):
    "build" (it did not compile or assemble), "spill" (spill stores or loads), "occupancy" (a hot kernel
    under ``target`` on ``target_arch`` without a note), "exempt" (the same, with the note that exempts
    it). Each value is a message naming the kernel."""
    name, arch = row["name"], row["arch"]
    if row.get("error"):
        return {"build": f"kernel {name} ({row['signature']}) does not build for {arch}:\n{row['error']}"}
    found = {}
    if row["spill_stores"] or row["spill_loads"]:
        found["spill"] = (f"kernel {name} spills on {arch}: {row['spill_stores']} bytes stores, "
                          f"{row['spill_loads']} bytes loads ({row['registers']} registers, "
                          f"{row['stack_bytes']} bytes stack frame)")
    if row["hot"] and arch == target_arch and row["occupancy"] < target:
        msg = (f"hot kernel {name}: occupancy {row['occupancy']:.3f} on {arch} < {target} "
               f"({row['registers']} registers x {row['threads']} threads, {row['shared_bytes']} bytes smem; "
               f"limited by {row['limit']})")
        if row.get("note"):
            found["exempt"] = f"{msg}; exempt: {row['note']}"
        else:
            found["occupancy"] = msg + "; lower its registers or give it a note=... in @kernel saying why"
    return found


def static_report(ccs=DEFAULT_CCS) -> list[dict]:
    """One row per kernel per architecture: name, arch, signature, hot, threads, registers, spill_stores,
    spill_loads, stack_bytes, shared_bytes, const_bytes, occupancy (at ``threads``), blocks, limit, note,
    error (None unless the kernel failed to build). Runs in a subprocess when the simulator is on.
    Raises ``ToolchainMissing`` without numba-cuda / libNVVM / ptxas."""
    if _simulator_on():
        result = run_build_subprocess(ccs)
        if "missing" in result:
            raise ToolchainMissing(result["missing"])
        return result["rows"]
    return build_all(ccs)["rows"]


def _main(argv=None) -> int:
    import argparse
    p = argparse.ArgumentParser(description="compile every CUDA kernel with libNVVM + ptxas and report "
                                            "its resources (no GPU needed)")
    p.add_argument("--cc", action="append", help="compute capability, e.g. 9.0 (repeatable; default 8.0, 9.0)")
    p.add_argument("--json-out", help="write the build result as JSON to this file")
    p.add_argument("--module", default=KERNEL_MODULE, help="module whose KERNELS are built")
    args = p.parse_args(argv)
    ccs = tuple(tuple(int(x) for x in c.split(".")) for c in args.cc) if args.cc else DEFAULT_CCS
    try:
        result = build_all(ccs, args.module)
    except ToolchainMissing as exc:
        result = {"missing": str(exc)}
    text = json.dumps(result, indent=1)
    if args.json_out:
        Path(args.json_out).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
