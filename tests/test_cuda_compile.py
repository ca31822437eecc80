"""Every CUDA kernel built by the real compiler, no GPU needed.

numba-cuda's libNVVM compiles each kernel of ``KERNELS`` to PTX with the signature the glue launches it
with, for sm_80 and sm_90, and ptxas assembles it (``-v``): a compile error, a spill, or a hot kernel
under the sm_90 occupancy target fails here instead of on a device. The simulator tests check what
the kernels compute; these check that they build and what they cost in registers.

conftest turns numba's CUDA simulator on, and the simulator cannot compile, so the build runs once,
for all kernels, in a subprocess with ``NUMBA_ENABLE_CUDASIM=0`` (``cuda_build.run_build_subprocess``).
Skipped only when numba-cuda, libNVVM or ptxas is not installed (``pip install -e '.[dev]'`` brings them;
under CI that skip fails, conftest's skip policy); a libNVVM that is installed but does not load fails.
"""

import importlib.util
import sys
import warnings
from pathlib import Path

import pytest

from gpucurate.kernels import cuda as cuda_kernels
from gpucurate.kernels import cuda_build as cb

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import gpu_static  # noqa: E402

CCS = ((8, 0), (9, 0))
ARCHS = [f"sm_{a}{b}" for a, b in CCS]
NAMES = sorted(cuda_kernels.KERNELS)


class KernelResourceNote(UserWarning):
    """A hot kernel under the occupancy target that is exempt by its ``note``."""


@pytest.fixture(scope="module")
def build():
    """The build result of every kernel on every arch (one subprocess for the module)."""
    if importlib.util.find_spec("numba_cuda") is None:
        pytest.skip(f"numba-cuda is not installed: {cb._INSTALL_HINT}")
    result = cb.run_build_subprocess(CCS, timeout=600)
    if "missing" in result:
        pytest.skip(result["missing"])
    return result


@pytest.fixture(scope="module")
def rows(build):
    return {(r["name"], r["arch"]): r for r in build["rows"]}


def _first_lines(text: str, n: int = 12) -> str:
    lines = text.strip().splitlines()
    return "\n".join(lines[:n] + ([f"... ({len(lines) - n} more lines)"] if len(lines) > n else []))


# --- the build -----------------------------------------------------------------------------------------

def test_every_kernel_is_built_for_every_arch(build):
    assert sorted({r["name"] for r in build["rows"]}) == NAMES
    assert sorted((r["name"], r["arch"]) for r in build["rows"]) == sorted((n, a) for n in NAMES for a in ARCHS)
    print(f"built {len(NAMES)} kernels for {', '.join(ARCHS)} in {build['seconds']} s with {build['toolchain']}")


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", NAMES)
def test_kernel_compiles(rows, name, arch):
    row = rows[(name, arch)]
    assert row["signature"] == cuda_kernels.KERNELS[name].signature
    if "build" in cb.row_findings(row):
        pytest.fail(_first_lines(cb.row_findings(row)["build"]), pytrace=False)
    assert row["registers"] > 0


def test_every_dispatcher_is_registered(build):
    """Every kernel dispatcher in the module is declared with ``@kernel`` (so it is built here), in the
    compiling process and in this (simulator) one."""
    assert build["unregistered"] == [], f"CUDA kernels not in KERNELS (declare them with @kernel): " \
                                        f"{build['unregistered']}"
    assert cb.unregistered_kernels(cuda_kernels) == []
    for name, spec in cuda_kernels.KERNELS.items():
        assert spec.name == name and getattr(cuda_kernels, name) is spec.dispatcher


def _built(row):
    if row["error"]:
        pytest.fail(f"kernel {row['name']} does not build for {row['arch']} (see test_kernel_compiles)",
                    pytrace=False)
    return cb.row_findings(row)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", NAMES)
def test_kernel_does_not_spill(rows, name, arch):
    found = _built(rows[(name, arch)])
    assert "spill" not in found, found.get("spill")


@pytest.mark.parametrize("name", [n for n in NAMES if cuda_kernels.KERNELS[n].hot])
def test_hot_kernel_occupancy_on_sm90(rows, name):
    found = _built(rows[(name, "sm_90")])
    if "exempt" in found:
        warnings.warn(KernelResourceNote(found["exempt"]), stacklevel=1)
    if "occupancy" in found:
        pytest.fail(found["occupancy"], pytrace=False)


def test_exempt_kernels_are_reported(build, rows):
    """A kernel's ``note`` (why it is exempt from a resource target) reaches the static report: every build
    row carries it, ``benchmarks/gpu_static.py``'s table shows it beside the kernel's sm_90 resources, and
    a hot kernel under the occupancy target is reported as exempt, naming the note, instead of failing."""
    noted = {name: spec.note for name, spec in cuda_kernels.KERNELS.items() if spec.note}
    assert noted, "no kernel carries a note: the exemption path is untested"
    assert all(r["note"] == cuda_kernels.KERNELS[r["name"]].note for r in build["rows"])
    table = {w["kernel"]: w for w in gpu_static.wide_rows(build["rows"], CCS)}
    for name, note in noted.items():
        shown = table[name]
        assert shown["note"] == note and shown["error"] is None
        assert shown["regs_sm_90"] > 0 and 0 < shown["occ_sm_90"] <= 1
        found = cb.row_findings(dict(rows[(name, "sm_90")], hot=True, occupancy=cb.HOT_OCCUPANCY_TARGET / 2))
        assert found.get("exempt", "").endswith(f"exempt: {note}") and "occupancy" not in found


BAD_KERNELS = """
from numba import cuda
from gpucurate.kernels.cuda import KernelSpec

KERNELS = {}


def kernel(signature, hot=False, note=None, **options):
    def wrap(fn):
        dispatcher = cuda.jit(**options)(fn)
        KERNELS[fn.__name__] = KernelSpec(fn.__name__, dispatcher, signature, 128, hot, note)
        return dispatcher
    return wrap


@kernel("void(int64[::1])")
def broken(out):
    out[cuda.grid(1)] = undefined_name + 1


# 16 live uint64 values through a loop, at most 32 registers a thread (1024 threads x 2 blocks an SM)
@kernel("void(uint64[::1], uint64[::1])", launch_bounds=(1024, 2))
def spilling(x, out):
    i = cuda.grid(1)
    a0 = x[i]; a1 = x[i + 1]; a2 = x[i + 2]; a3 = x[i + 3]; a4 = x[i + 4]; a5 = x[i + 5]; a6 = x[i + 6]
    a7 = x[i + 7]; b0 = x[i + 8]; b1 = x[i + 9]; b2 = x[i + 10]; b3 = x[i + 11]; b4 = x[i + 12]
    b5 = x[i + 13]; b6 = x[i + 14]; b7 = x[i + 15]
    for r in range(x.shape[0]):
        v = x[r]
        a0 = a0 * v + b7; a1 = a1 * a0 + b6; a2 = a2 * a1 + b5; a3 = a3 * a2 + b4
        a4 = a4 * a3 + b3; a5 = a5 * a4 + b2; a6 = a6 * a5 + b1; a7 = a7 * a6 + b0
        b0 = b0 ^ a7; b1 = b1 ^ a6; b2 = b2 ^ a5; b3 = b3 ^ a4; b4 = b4 ^ a3; b5 = b5 ^ a2; b6 = b6 ^ a1
        b7 = b7 ^ a0
    out[i] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + b0 + b1 + b2 + b3 + b4 + b5 + b6 + b7



@cuda.jit
def forgotten(out):
    out[0] = 1
"""


def test_the_checks_find_bad_kernels(build, tmp_path):
    """The same build and checks on a module with a kernel that does not compile, one that spills and
    one declared without @kernel: each is found and named."""
    (tmp_path / "bad_cuda_kernels.py").write_text(BAD_KERNELS)
    bad = cb.run_build_subprocess(((9, 0),), timeout=300, module="bad_cuda_kernels", pythonpath=[tmp_path])
    found = {r["name"]: cb.row_findings(r) for r in bad["rows"]}
    assert "undefined_name" in found["broken"]["build"] and "kernel broken" in found["broken"]["build"]
    assert found["spilling"]["spill"].startswith("kernel spilling spills on sm_90")
    assert bad["unregistered"] == ["forgotten"]
    # a hot kernel under the target fails, unless a note exempts it
    row = dict(next(r for r in bad["rows"] if r["name"] == "spilling"), hot=True, occupancy=0.25)
    assert "occupancy" in cb.row_findings(row) and "exempt" not in cb.row_findings(row)
    assert cb.row_findings(dict(row, note="why")).get("exempt", "").endswith("exempt: why")


# --- the parser and the occupancy rules (no compiler needed) ------------------------------------------

def test_parse_ptxas_canned_lines():
    res = cb.parse_ptxas(
        "ptxas info    : Used 32 registers, used 0 barriers, 8 bytes stack frame, 360 bytes cmem[0]\n"
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n")
    assert (res["registers"], res["barriers"], res["const_bytes"], res["shared_bytes"]) == (32, 0, 360, 0)
    assert (res["spill_stores"], res["spill_loads"]) == (0, 0)
    assert res["stack_bytes"] == 0  # the later line wins (ptxas prints the stack frame on that one only)
    res = cb.parse_ptxas("ptxas info    : Used 32 registers, used 0 barriers, 8 bytes stack frame, "
                         "360 bytes cmem[0]\n")
    assert (res["registers"], res["stack_bytes"], res["const_bytes"], res["spill_stores"]) == (32, 8, 360, 0)


def test_parse_ptxas_full_output():
    """A full ``ptxas -v`` report: entry function, a non-inlined device function that spills, smem and
    two constant banks (the pre-12.x layout) and gmem."""
    used = ("ptxas info    : Used 255 registers, used 1 barriers, 40 bytes cumulative stack size, 4096 bytes smem, "
            "368 bytes cmem[0], 16 bytes cmem[2]")
    text = f"""\
ptxas info    : 8 bytes gmem
ptxas info    : Function properties for _Z6helperPy
    24 bytes stack frame, 16 bytes spill stores, 12 bytes spill loads
ptxas info    : Compiling entry function '_Z4kernPy' for 'sm_80'
ptxas info    : Function properties for _Z4kernPy
    40 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
{used}
ptxas info    : Compile time = 1.000 ms
"""
    res = cb.parse_ptxas(text)
    assert res["entry"] == "_Z4kernPy"
    assert (res["registers"], res["barriers"], res["shared_bytes"]) == (255, 1, 4096)
    assert res["cmem"] == {0: 368, 2: 16} and res["const_bytes"] == 384 and res["gmem_bytes"] == 8
    assert res["stack_bytes"] == 40
    assert (res["spill_stores"], res["spill_loads"]) == (24, 20)  # entry + device function
    assert res["functions"]["_Z6helperPy"] == {"stack_bytes": 24, "spill_stores": 16, "spill_loads": 12}
    # ptxas 12.9 for sm_90: no cmem on the Used line
    res = cb.parse_ptxas("ptxas info    : Compiling entry function 'k' for 'sm_90'\n"
                         "ptxas info    : Function properties for k\n"
                         "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
                         "ptxas info    : Used 12 registers, used 0 barriers\n")
    assert (res["registers"], res["const_bytes"], res["stack_bytes"], res["spill_stores"]) == (12, 0, 0, 0)
    with pytest.raises(ValueError, match="Used N registers"):
        cb.parse_ptxas("ptxas fatal   : Unresolved extern function 'f'\n")


@pytest.mark.parametrize("registers, shared, threads, cc, expected", [
    # 128 threads = 4 warps. Registers per warp = ceil(r*32 / 256) * 256; each of the 4 sub-partitions
    # holds 16384 // that many warps. 32 regs: 1024 -> 16 x 4 = 64 warps = 16 blocks (also the warp limit)
    (32, 0, 128, (9, 0), 1.0),
    (64, 0, 128, (9, 0), 0.5),      # 2048 per warp -> 8 x 4 = 32 warps = 8 blocks
    (40, 0, 128, (9, 0), 0.75),     # 1280 -> 12 x 4 = 48 warps = 12 blocks
    (128, 0, 128, (9, 0), 0.25),    # 4096 -> 4 x 4 = 16 warps = 4 blocks
    (255, 0, 128, (9, 0), 0.125),   # 8160 -> 8192 -> 2 x 4 = 8 warps = 2 blocks
    (256, 0, 128, (9, 0), 0.0),     # over 255 registers a thread: does not launch
    (32, 0, 128, (8, 0), 1.0),
    (128, 0, 128, (8, 0), 0.25),
    # 48 regs, 3-warp blocks: 1536 -> 10 x 4 = 40 warps (not 65536 // 1536 = 42) -> 13 blocks = 39 warps
    (48, 0, 96, (9, 0), 39 / 64),
    # 16 regs, 1-warp blocks: the 32 blocks/SM limit -> 32 warps
    (16, 0, 32, (9, 0), 0.5),
    # 1024 threads = 32 warps: 64 regs -> 32 warps by registers = 1 block
    (64, 0, 1024, (9, 0), 0.5),
    (32, 0, 1024, (9, 0), 1.0),
    # 48 KB static smem + 1 KB reserved = 50176 bytes a block: 233472 // 50176 = 4 blocks (sm_90),
    # 167936 // 50176 = 3 blocks (sm_80)
    (32, 48 * 1024, 128, (9, 0), 0.25),
    (32, 48 * 1024, 128, (8, 0), 0.1875),
    # more smem than a block may have: does not launch
    (32, 228 * 1024, 128, (9, 0), 0.0),
])
def test_occupancy_rules(registers, shared, threads, cc, expected):
    assert cb.occupancy(registers, shared, threads, cc) == pytest.approx(expected)


def test_occupancy_detail_names_the_limit():
    d = cb.occupancy_detail(128, 0, 128, (9, 0))
    assert (d["blocks"], d["active_warps"], d["limit"]) == (4, 16, "registers")
    assert cb.occupancy_detail(16, 0, 128, (9, 0))["limit"] == "warps"
    assert cb.occupancy_detail(16, 0, 32, (9, 0))["limit"] == "blocks"
    assert cb.occupancy_detail(32, 48 * 1024, 128, (9, 0))["limit"] == "shared"
    with pytest.raises(ValueError, match="compute capability"):
        cb.occupancy(32, 0, 128, (7, 5))


def test_missing_ptxas_is_named(monkeypatch):
    monkeypatch.setattr(cb.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(cb.shutil, "which", lambda name: None)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    with pytest.raises(cb.ToolchainMissing, match="ptxas not found.*nvidia-cuda-nvcc-cu12"):
        cb.find_ptxas()


def test_simulator_cannot_compile():
    from numba import config
    if not config.ENABLE_CUDASIM:
        pytest.skip("the simulator is off in this process")
    with pytest.raises(RuntimeError, match="simulator"):
        cb.compile_kernel(cuda_kernels.KERNELS["probe"])
