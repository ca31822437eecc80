"""Reuters-21578 against the exact answer (all pairs with exact Jaccard >= 0.8 on the same shingles)."""

import gzip
import json

import numpy as np
import pandas as pd
import pytest

import gpucurate
from gpucurate.review.evaluate import cluster_metrics, exact_similar_pairs
from gpucurate.stages.normalize import reference_normalize, reference_shingle_hashes

from conftest import SHARED_DATA, read_annotations

pytestmark = pytest.mark.realdata
REUTERS = SHARED_DATA / "reuters21578" / "reuters21578.jsonl.gz"


def test_reuters_clusters_match_exact_jaccard(tmp_path):
    summary = gpucurate.run([str(REUTERS)], tmp_path / "o",
                            overrides=["run.progress=false", "input.text_field=body", "input.id_field=newid"])
    ann = read_annotations(tmp_path / "o")
    with gzip.open(REUTERS, "rt", encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh]
    assert summary["documents_in"] == len(records) == len(ann) == 21578
    ids = [r["newid"] for r in records]
    # ground truth from the plain-Python specification of normalization and shingling
    sets = [sorted(reference_shingle_hashes(reference_normalize(r.get("body")), "word", 5, 42)) for r in records]
    offsets = np.zeros(len(sets) + 1, np.int64)
    offsets[1:] = np.cumsum([len(s) for s in sets])
    values = np.array([v for s in sets for v in s], dtype=np.uint64)
    true_i, true_j, _ = exact_similar_pairs(offsets, values, 0.8)
    labels = pd.factorize(ann.set_index("doc_id").loc[ids, "dedup_id"])[0]
    m = cluster_metrics(labels, true_i, true_j, len(ids))
    print(f"\nReuters: {m['true_edges']} true pairs, edge recall {m['edge_recall']:.4f}, pair precision "
          f"{m['pair_precision']:.4f}, pair recall {m['pair_recall']:.4f}, false merges {m['false_merges']}")
    assert m["false_merges"] == 0 and m["pair_precision"] == 1.0
    assert m["edge_recall"] >= 0.99 and m["pair_recall"] >= 0.99
