#!/usr/bin/env bash
# Proof, without a GPU, that the device run works on the device image's package set (.ci/run runs it):
#  1. a Python 3.12 virtual environment (.venv-device/) holds only the image's packages that matter
#     (image-requirements.txt: numba-cuda with CUDA 13.0's libNVVM and ptxas, no Dask, orjson, zstandard
#     or array-api-compat), reused while that file is unchanged;
#  2. prepare.sh downloads the carried wheels, and run.sh installs them its own way and runs
#     `gpu_check.py --smoke` in numba's CUDA simulator: an import that neither the image nor the bundle
#     covers fails a phase, and so the proof;
#  3. tests/test_cuda_compile.py builds every kernel there with CUDA 13.0's libNVVM and ptxas.
# Where no Python 3.12 is found it says so and uses python3 with the same package set.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
here=benchmarks/device
venv=.venv-device

py=""
for candidate in python3.12 "$(command -v pyenv >/dev/null && echo "$(pyenv root)/versions/3.12"*/bin/python3.12 | tail -n 1)"; do
    if [ -n "$candidate" ] && "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
        py=$candidate
        break
    fi
done
if [ -z "$py" ]; then
    py=python3
    echo "proof.sh: no Python 3.12 here (the device has 3.12); using $($py --version) with the same packages" >&2
fi

stamp=$(cat "$here/image-requirements.txt" <("$py" --version) | sha256sum | cut -c1-16)
if [ "$(cat "$venv/.stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$venv"
    "$py" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip
    "$venv/bin/python" -m pip install -q -r "$here/image-requirements.txt"
    echo "$stamp" > "$venv/.stamp"
fi
for absent in dask distributed orjson zstandard array_api_compat; do
    if "$venv/bin/python" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$absent') is None)"; then
        echo "proof.sh: $absent is importable in $venv, so the proof would not show that the bundle covers it" >&2
        exit 1
    fi
done

bash "$here/prepare.sh"
out=$(mktemp -d "${TMPDIR:-/tmp}/gpucurate-proof.XXXXXX")
trap 'rm -rf "$out"' EXIT
# the simulator is slow, and slower on a busy machine: no budget scaling, and more time for the parity
PATH="$root/$venv/bin:$PATH" OUT="$out" NUMBA_ENABLE_CUDASIM=1 GPU_CHECK_BUDGET=900 bash "$here/run.sh" --smoke \
    --timeout-b 240
"$venv/bin/python" - "$out/gpu_check.json" <<'EOF'
import json, sys
result = json.load(open(sys.argv[1]))
phases = {k: v["status"] for k, v in result["phases"].items()}
assert result["simulated"] and set(phases) == set("abcde"), phases
assert all(s == "ok" for k, s in phases.items() if k in "abcd") and result["parity_ok"], phases
print(f"proof.sh: gpu_check --smoke passed on the image's packages + the bundle: {phases}")
EOF
PYTHONPATH="$root" "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/test_cuda_compile.py
# the image's driver is CUDA 13.0: the PTX that its toolkit's libNVVM emits must load there
NUMBA_ENABLE_CUDASIM=0 PYTHONPATH="$root" "$venv/bin/python" - <<'EOF2'
from gpucurate.device import toolchain
from gpucurate.kernels.cuda import KERNELS
from gpucurate.kernels.cuda_build import compile_kernel, nvvm_location
where = nvvm_location()
line = toolchain.describe(toolchain.ptx_isa(compile_kernel(KERNELS["probe"], (9, 0))), (13, 0), where["nvvm"],
                          where["nvvm_found_by"])
assert "needs" not in line and "cu13" in where["nvvm"], line
print(f"proof.sh: {line}")
EOF2
