"""SimHash as an alternative fuzzy method."""

import itertools

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import read_annotations, write_jsonl
from gpucurate.kernels.minhash import hamming_similarity, simhash64, simhash_band_keys
from gpucurate.workflows.run import run


def reference_simhash(values):
    out = 0
    for b in range(64):
        score = sum(1 if (int(v) >> b) & 1 else -1 for v in values)
        out |= (score > 0) << b
    return out


def test_simhash_matches_reference():
    rng = np.random.default_rng(0)
    sizes = [0, 1, 2, 7, 50]
    values = rng.integers(0, 2**63, sum(sizes), dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    got = simhash64(offsets, values)
    for d in range(len(sizes)):
        assert int(got[d]) == reference_simhash(values[offsets[d]:offsets[d + 1]])


@pytest.mark.parametrize("k", [0, 3, 6])
def test_band_keys_guarantee_candidates_within_distance(k):
    rng = np.random.default_rng(k)
    base = rng.integers(0, 2**63, 40, dtype=np.uint64)
    sims = [base]
    for flips in range(k + 3):  # copies with `flips` random bits flipped
        x = base.copy()
        for i in range(len(x)):
            for b in rng.choice(64, flips, replace=False):
                x[i] ^= np.uint64(1) << np.uint64(int(b))
        sims.append(x)
    sims = np.concatenate(sims)
    keys = simhash_band_keys(sims, k + 1, np.uint64(9))
    for i, j in itertools.combinations(range(0, len(sims), 40), 2):
        d = 64 - round(hamming_similarity(sims, np.array([i]), np.array([j]))[0] * 64)
        if d <= k:
            assert set(keys[i]) & set(keys[j]), (i, j, d)


def test_simhash_method_in_the_pipeline(tmp_path):
    base = " ".join(f"word{i}" for i in range(120))
    records = [{"id": 1, "text": base}, {"id": 2, "text": base + " extra"},
               {"id": 3, "text": " ".join(f"other{i}" for i in range(120))}]
    src = write_jsonl(tmp_path / "s.jsonl", records)
    summary = run([str(src)], tmp_path / "out", overrides={"run.progress": False, "fuzzy.method": "simhash",
                                                            "fuzzy.simhash_max_distance": 6})
    fz = summary["stages"]["fuzzy"]
    assert fz["method"] == "simhash" and fz["bands"] == 7 and fz["rows"] == 9
    ann = read_annotations(tmp_path / "out").set_index("doc_id")
    assert ann.loc[2].dedup_id == 1 and ann.loc[2].drop_reason.startswith("near-duplicate of 1 (simhash similarity")
    assert ann.loc[2].similarity >= 1 - 6 / 64 and ann.loc[3].keep
    edges = pq.read_table(tmp_path / "out" / "edges.parquet").to_pandas()
    assert set(edges.method) == {"simhash"}
    assert (edges.above_threshold == (edges.score >= 1 - 6 / 64)).all()
