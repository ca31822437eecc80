"""The CUDA kernels against the CPU kernels, element by element.

In CI they run in numba's CUDA simulator (conftest sets NUMBA_ENABLE_CUDASIM=1), on small inputs; on
a GPU machine ``GPUCURATE_REAL_GPU=1 pytest tests/test_cuda_kernels.py`` runs them on the device.
"""

import warnings

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from conftest import read_annotations, write_jsonl
from gpucurate.kernels import gates, minhash, pairs
from gpucurate.kernels.hashing import padded_words, permutations
from gpucurate.stages.contamination import MATCH_NORMALIZE
from gpucurate.text import arrow_buffers, normalize

cuda_kernels = pytest.importorskip("gpucurate.kernels.cuda")

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


def buffers(texts, cfg=None):
    return arrow_buffers(normalize(pa.array(texts, pa.large_string()), cfg))


def test_text_hashes_cross_blocks():
    texts = TEXTS * 15  # 165 texts: more than one block of 128 threads
    offsets, data = buffers(texts)
    words = padded_words(data)
    assert np.array_equal(cuda_kernels.text_hashes(offsets, words), minhash.text_hashes(offsets, words))
    # a slice whose offsets do not start at 0
    arr = normalize(pa.array(texts, pa.large_string())).slice(7, 50)
    off2, data2 = arrow_buffers(arr)
    assert np.array_equal(cuda_kernels.text_hashes(off2, padded_words(data2)),
                          minhash.text_hashes(off2, padded_words(data2)))


@pytest.mark.parametrize("mode", [minhash.WORD, minhash.CHAR])
def test_signatures_sets_and_band_keys(mode):
    offsets, data = buffers(TEXTS * 3)
    a, b = permutations(16, 7)
    seed = np.uint64(7)
    g_sigs, g_off, g_val = cuda_kernels.signatures(offsets, data, mode, K, seed, a, b)
    c_sigs, c_off, c_val = minhash.signatures(offsets, data, mode, K, seed, a, b)
    assert np.array_equal(g_sigs, c_sigs)
    assert np.array_equal(np.diff(g_off), np.diff(c_off))
    for d in range(len(offsets) - 1):
        assert sorted(g_val[g_off[d]:g_off[d + 1]].tolist()) == sorted(c_val[c_off[d]:c_off[d + 1]].tolist())
    assert np.array_equal(cuda_kernels.band_keys(g_sigs, 4, 4, seed), minhash.band_keys(c_sigs, 4, 4, seed))
    assert np.array_equal(cuda_kernels.set_signatures(c_off, c_val, a, b), minhash.set_signatures(c_off, c_val, a, b))


def test_jaccard_pairs_match():
    offsets, data = buffers(["a b c d e f g h", "a b c d e f g x", "q r s t u v w", "", "a b c d e f g h i"])
    a, b = permutations(8, 1)
    _, off, val = minhash.signatures(offsets, data, minhash.WORD, 3, np.uint64(1), a, b)
    pi = np.array([0, 0, 0, 1, 2, 3, 0], np.int64)
    pj = np.array([1, 2, 4, 4, 3, 3, 0], np.int64)
    assert np.array_equal(cuda_kernels.jaccard_pairs(off, val, pi, pj), pairs.jaccard_pairs(off, val, pi, pj))


def test_ngram_hashes_and_lookup_match():
    texts = ["The cat, sat on the MAT!", "short", "", "один два три четыре пять шесть"] * 40
    offsets, data = buffers(texts, MATCH_NORMALIZE)
    words = padded_words(data)
    for n in (1, 3, 13):
        got = cuda_kernels.ngram_hashes(offsets, data, words, n)
        ref = gates.ngram_hashes(offsets, data, words, n)
        for g, r in zip(got, ref):
            assert np.array_equal(g, r)
    table = np.sort(gates.ngram_hashes(offsets, data, words, 3)[1][::3])
    probe = gates.ngram_hashes(offsets, data, words, 3)[1]
    pos = np.searchsorted(table, probe)
    expected = np.where((pos < len(table)) & (table[np.minimum(pos, len(table) - 1)] == probe), pos, -1)
    assert np.array_equal(cuda_kernels.lookup(probe, table), expected)


def test_gpu_backend_pipeline_matches_cpu(tmp_path):
    """The whole run with ``run.backend=gpu`` (simulated here) writes the same annotations as the CPU."""
    from gpucurate.pipeline import run
    base = "the board approved the plan for the new factory in the north of the country next year"
    records = [{"id": i, "text": t} for i, t in enumerate(
        [base, base + " again", base.upper(), "Совсем другой текст о погоде и море летом", "", "x",
         base.replace("north", "south"), "the quick brown fox jumps over the lazy dog " * 3])]
    src = write_jsonl(tmp_path / "d.jsonl", records)
    over = {"run.progress": False, "fuzzy.num_perm": 16, "fuzzy.threshold": 0.7, "paragraphs.enabled": True,
            "contamination.benchmarks": [f"b={src}:text"]}
    cpu = run([str(src)], tmp_path / "cpu", overrides={**over, "run.backend": "cpu"})
    gpu = run([str(src)], tmp_path / "gpu", overrides={**over, "run.backend": "gpu"})
    assert gpu["backend"] == "gpu" and cpu["backend"] == "cpu"
    pd.testing.assert_frame_equal(read_annotations(tmp_path / "gpu"), read_annotations(tmp_path / "cpu"))
    assert (tmp_path / "gpu" / "edges.parquet").read_bytes() == (tmp_path / "cpu" / "edges.parquet").read_bytes()


def test_ngram_matches_match():
    texts = ["The cat, sat on the MAT!", "short", "", "один два три четыре пять шесть"] * 40
    offsets, data = buffers(texts, MATCH_NORMALIZE)
    words = padded_words(data)
    table = np.sort(np.concatenate([gates.ngram_hashes(offsets, data, words, n)[1][::5] for n in (1, 3)]))
    lengths = np.array([3, 1], np.int64)
    got = cuda_kernels.ngram_matches(offsets, data, words, lengths, table)
    ref = gates.ngram_matches(offsets, data, words, lengths, table)
    assert len(ref[0]) > 0
    for g, r in zip(got, ref):
        assert np.array_equal(g, r)
