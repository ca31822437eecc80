#!/usr/bin/env bash
# The one command run on the lent GPU machine, from the repository root, after prepare.sh here:
#
#     bash benchmarks/device/run.sh        (device call: carry [".whl", "benchmarks/device/data",
#                                           "benchmarks/device/model"], timeout_s 420)
#
# It installs the carried wheels (.whl/) into a temporary folder put on PYTHONPATH, the way the device
# tool's notes say, then runs benchmarks/gpu_check.py unbuffered inside GPU_CHECK_BUDGET seconds (default
# 330: a first call with the machine's start and a second run fit in the 15 minutes of device time),
# writing gpu_check.json and its log into $OUT, and ends with gpu_check's table. Arguments go to
# gpu_check.py: proof.sh runs `run.sh --smoke` with numba's CUDA simulator on. Exit status: gpu_check's
# (1 when a parity check or a phase fails), 1 when the wheels do not install, 124 past the budget.
set -uo pipefail
cd "$(dirname "$0")/../.."
budget=${GPU_CHECK_BUDGET:-330}
out=${OUT:-benchmarks/results}
mkdir -p "$out"

shopt -s nullglob
wheels=(.whl/*.whl)
if [ ${#wheels[@]} -eq 0 ]; then
    echo "run.sh: no wheels in .whl/: run benchmarks/device/prepare.sh first and carry .whl" >&2
    exit 1
fi
site=$(mktemp -d "${TMPDIR:-/tmp}/gpucurate-site.XXXXXX")
trap 'rm -rf "$site"' EXIT
if ! python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
        "${wheels[@]}"; then
    echo "run.sh: the carried wheels did not install into $site" >&2
    exit 1
fi
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

# the phases' limits add up to the budget; the margin lets a phase left behind and the exit finish
timeout -k 10 $((budget + 45)) python3 benchmarks/gpu_check.py --budget "$budget" --out "$out/gpu_check.json" "$@" \
    2>&1 | tee "$out/gpu_check.log"
exit "${PIPESTATUS[0]}"
