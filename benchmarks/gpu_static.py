"""Static resources of every CUDA kernel, from the real compiler; no GPU needed.

Each kernel of ``gpucurate.kernels.cuda.KERNELS`` is compiled by numba-cuda's libNVVM with the
signature the glue launches it with and assembled by ``ptxas -v`` for sm_80 (A100) and sm_90 (H100/H200):
registers a thread, spill stores / loads, stack frame, shared memory, and the theoretical occupancy at
the launch block size (``gpucurate.kernels.cuda_build``). Exits 1 when a kernel does not build, spills,
or is a hot kernel under 0.5 occupancy on sm_90 without a note saying why.

    python benchmarks/gpu_static.py                    # sm_80 and sm_90
    python benchmarks/gpu_static.py --cc 9.0 --out /tmp/static.json

Writes benchmarks/results/gpu_static.json. ``static_rows()`` gives the table's rows (one a kernel) for
``gpu_check.py`` to print beside the measured times. Needs numba-cuda[cu12] (pip install -e '.[dev]').
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import print_table, write_json  # noqa: E402

from gpucurate.kernels import cuda_build as cb  # noqa: E402


def _arch(cc) -> str:
    return f"sm_{cc[0]}{cc[1]}"


def build(ccs=cb.DEFAULT_CCS) -> dict:
    """``cuda_build.build_all`` here, or in a subprocess when this process runs numba's CUDA simulator.
    Raises ``cuda_build.ToolchainMissing`` without numba-cuda / libNVVM / ptxas."""
    if cb._simulator_on():
        result = cb.run_build_subprocess(ccs)
        if "missing" in result:
            raise cb.ToolchainMissing(result["missing"])
        return result
    return cb.build_all(ccs)


def columns(ccs=cb.DEFAULT_CCS) -> list[str]:
    """The table's columns for ``ccs`` (the keys of ``static_rows``' rows)."""
    archs = [_arch(cc) for cc in ccs]
    return (["kernel", "hot", "threads"] + [f"regs_{a}" for a in archs]
            + ["spill_stores", "spill_loads", "stack_bytes", "shared_bytes"]
            + [f"occ_{a}" for a in archs] + [f"limit_{archs[-1]}", "note"])


def wide_rows(rows: list[dict], ccs=cb.DEFAULT_CCS) -> list[dict]:
    """One row a kernel from ``static_report``'s rows (one a kernel and arch): registers and occupancy
    per arch, spills / stack / shared memory the largest over the archs, the last arch's limit."""
    by_name: dict[str, dict] = {}
    archs = [_arch(cc) for cc in ccs]
    for r in rows:
        w = by_name.setdefault(r["name"], {"kernel": r["name"], "hot": "yes" if r["hot"] else "",
                                           "threads": r["threads"], "note": r["note"], "error": None})
        if r["error"]:
            w["error"] = f"{r['arch']}: {r['error'].splitlines()[0]}"
            continue
        w[f"regs_{r['arch']}"] = r["registers"]
        w[f"occ_{r['arch']}"] = r["occupancy"]
        if r["arch"] == archs[-1]:
            w[f"limit_{r['arch']}"] = r["limit"]
        for k in ("spill_stores", "spill_loads", "stack_bytes", "shared_bytes"):
            w[k] = max(w.get(k) or 0, r[k])
    return list(by_name.values())


def static_rows(ccs=cb.DEFAULT_CCS) -> list[dict]:
    """The table's rows, one a kernel (keys: ``columns(ccs)`` and ``error``)."""
    return wide_rows(build(ccs)["rows"], ccs)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cc", action="append", help="compute capability, e.g. 9.0 (repeatable; default 8.0 and 9.0)")
    p.add_argument("--out", default="benchmarks/results/gpu_static.json")
    args = p.parse_args(argv)
    ccs = tuple(tuple(int(x) for x in c.split(".")) for c in args.cc) if args.cc else cb.DEFAULT_CCS
    try:
        result = build(ccs)
    except cb.ToolchainMissing as exc:
        print(f"cannot build the CUDA kernels: {exc}", file=sys.stderr)
        return 2
    rows = wide_rows(result["rows"], ccs)
    cols = columns(ccs)
    if any(r["error"] for r in rows):
        cols.append("error")
    tc = result["toolchain"]
    print_table(rows, cols, f"CUDA kernels, static resources (numba-cuda {tc['numba_cuda']}, NVVM {tc['nvvm']}, "
                            f"ptxas {tc['ptxas_version']}; built in {result['seconds']} s)")
    findings = [(check, msg) for r in result["rows"] for check, msg in cb.row_findings(r).items()]
    findings += [("registry", f"kernel {n} is a cuda.jit kernel not declared with @kernel (not in KERNELS)")
                 for n in result["unregistered"]]
    for check, msg in findings:
        print(f"{'note' if check == 'exempt' else 'FAIL'} [{check}] {msg}")
    write_json({"toolchain": tc, "archs": [_arch(cc) for cc in ccs], "occupancy_target": cb.HOT_OCCUPANCY_TARGET,
                "seconds": result["seconds"], "kernels": rows, "rows": result["rows"],
                "unregistered": result["unregistered"],
                "findings": [{"check": c, "message": m} for c, m in findings]}, args.out)
    print(f"wrote {args.out}")
    return 1 if any(c != "exempt" for c, _ in findings) else 0


if __name__ == "__main__":
    sys.exit(main())
