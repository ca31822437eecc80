"""Boilerplate-aware fuzzy dedup on the templated archive generator."""

import itertools
from collections import Counter

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from conftest import read_annotations, write_jsonl
from gpucurate.generators.archive import generate_archive
from gpucurate.workflows.run import run
from gpucurate.stages.normalize import reference_normalize, reference_shingles

Q = {"run.progress": False}


@pytest.fixture(scope="module")
def archive():
    return generate_archive(400, seed=3)


def test_generator_is_deterministic_and_labelled(archive):
    again = generate_archive(400, seed=3)
    pd.testing.assert_frame_equal(archive, again)
    assert len(archive) == 400 and archive.id.is_unique
    assert set(archive.kind) == {"original", "copy", "unique"} and set(archive.lang) == {"en", "ru"}
    originals = archive[archive.kind == "original"]
    assert (originals.true_cluster == originals.id).all()
    copies = archive[archive.kind == "copy"]
    assert copies.true_cluster.isin(originals.id).all()
    # every document of a company carries its footer
    for company, group in archive.groupby("company"):
        tails = {t[-200:] for t in group.text}
        assert len(tails) == 1, company


def pairs(labels):
    out = set()
    for _, idx in pd.Series(range(len(labels))).groupby(np.asarray(labels)):
        out.update(itertools.combinations(idx.tolist(), 2))
    return out


def test_boilerplate_removes_template_merges_and_keeps_recall(tmp_path, archive):
    src = write_jsonl(tmp_path / "a.jsonl", archive.to_dict(orient="records"))
    truth = pairs(archive.true_cluster)
    run([str(src)], tmp_path / "off", overrides={**Q, "fuzzy.threshold": 0.7})
    # 400 documents: 1% would be 4, fewer than the largest near-copy cluster (8), so give a count
    summary = run([str(src)], tmp_path / "on", config="configs/rag-archive.yaml",
                  overrides={**Q, "input.timestamp_field": None, "canonical.policy": "first",
                             "fuzzy.boilerplate_max_df": 20})
    off = read_annotations(tmp_path / "off").set_index("id").loc[archive.id]
    on = read_annotations(tmp_path / "on").set_index("id").loc[archive.id]
    off_pairs, on_pairs = pairs(off.dedup_id), pairs(on.dedup_id)
    assert off_pairs - truth, "whole-text Jaccard merges letters that share only the template"
    assert not on_pairs - truth, "with boilerplate removed, no false merge"
    assert len(on_pairs & truth) >= len(off_pairs & truth)
    bp = summary["stages"]["fuzzy"]["boilerplate"]
    assert bp["max_df"] == 20 and bp["cut_documents"] == 20
    assert bp["boilerplate_shingles"] > 100 and bp["shingles_removed"] > 0


def test_boilerplate_document_frequencies_are_exact(tmp_path):
    """Shingles in more than max_df documents are removed, the rest kept, and the edge scores are the
    Jaccard of what is left (checked in plain Python)."""
    footer = "this message is confidential and intended only for the addressee please delete it if received in error"
    bodies = ["the quick brown fox jumps over the lazy dog near the river bank",
              "the quick brown fox jumps over the lazy dog near the river bend",
              "a completely different letter about invoices and payments due next month for the order",
              "another unrelated note about meeting times and the agenda for the board on friday"]
    texts = [b + " " + footer for b in bodies] + [footer, footer + " ok"]
    src = write_jsonl(tmp_path / "d.jsonl", [{"id": i, "text": t} for i, t in enumerate(texts)])
    summary = run([str(src)], tmp_path / "out", overrides={**Q, "fuzzy.boilerplate": True,
                                                            "fuzzy.boilerplate_max_df": 3, "fuzzy.threshold": 0.4})
    sets = [set(reference_shingles(reference_normalize(t), "word", 5)) for t in texts]
    df = Counter(s for x in sets for s in x)
    left = [{s for s in x if df[s] <= 3} for x in sets]
    bp = summary["stages"]["fuzzy"]["boilerplate"]
    assert bp["boilerplate_shingles"] == sum(1 for v in df.values() if v > 3)
    assert bp["shingles_removed"] == sum(len(x) - len(y) for x, y in zip(sets, left))
    assert bp["documents_left_without_shingles"] == 1  # the bare footer
    ann = read_annotations(tmp_path / "out").set_index("doc_id")
    assert ann.loc[1].dedup_id == 0 and ann.loc[1].similarity == pytest.approx(
        len(left[0] & left[1]) / len(left[0] | left[1]))
    assert ann.loc[4].keep and ann.loc[4].dedup_id == 4, "a document that is only boilerplate joins nothing"
    assert ann.loc[2].keep and ann.loc[3].keep
    edges = pq.read_table(tmp_path / "out" / "edges.parquet").to_pandas()
    for r in edges.itertuples():
        a, b = left[int(r.id_a)], left[int(r.id_b)]
        assert r.score == pytest.approx(len(a & b) / len(a | b))
