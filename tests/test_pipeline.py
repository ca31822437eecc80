"""End-to-end runs: output contract, invariants, determinism across files/partitions/workers."""

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpucurate
from gpucurate.errors import ConfigError
from gpucurate.review.evaluate import exact_similar_pairs
from gpucurate.stages.normalize import reference_normalize, reference_shingle_hashes

from conftest import ANNOTATION_COLUMNS, read_annotations, write_jsonl

Q = ["run.progress=false"]


def _records(frame: pd.DataFrame) -> list[dict]:
    return frame.to_dict(orient="records")


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory, demo_frame):
    d = tmp_path_factory.mktemp("demo")
    src = write_jsonl(d / "corpus.jsonl", _records(demo_frame))
    summary = gpucurate.run([str(src)], d / "out", overrides=Q + ["input.timestamp_field=timestamp"])
    return demo_frame, d / "out", summary


def test_output_directory_contract(demo_run):
    frame, out, summary = demo_run
    assert (out / "aliases.parquet").is_file() and (out / "edges.parquet").is_file()
    assert json.loads((out / "summary.json").read_text())["documents_in"] == len(frame)
    ann = read_annotations(out)
    for col in ANNOTATION_COLUMNS + list(frame.columns):
        assert col in ann.columns, col
    s = summary["stages"]
    assert summary["documents_kept"] == len(frame) - s["exact"]["duplicates"] - s["fuzzy"]["duplicates"]
    assert summary["lsh"]["bands"] * summary["lsh"]["rows"] <= 128
    for key in ("timings_s", "docs_per_s", "versions", "config", "backend"):
        assert key in summary
    # MB of text per second and core of each per-partition step, from the step's own time
    text_mb, cores = summary["stages"]["input"]["text_bytes"] / 1e6, summary["cores"]
    for step in ("read+normalize", "exact", "fuzzy", "write"):
        rate = summary["mb_per_s_per_core"][step]
        assert rate == pytest.approx(text_mb / summary["timings_s"][step] / cores, rel=0.02, abs=0.06)


def test_invariants(demo_run):
    frame, out, _ = demo_run
    ann = read_annotations(out)
    # every input row exactly once, passed-through columns untouched
    assert sorted(ann["id"]) == sorted(frame["id"]) and ann["doc_id"].is_unique
    merged = ann.merge(frame, on="id", suffixes=("", "_in"))
    for col in ("text", "lang", "source", "timestamp"):
        assert (merged[col].fillna("") == merged[col + "_in"].fillna("")).all()
    ids = set(ann["doc_id"])
    for col in ("dedup_id", "exact_group", "fuzzy_group"):
        assert set(ann[col]) <= ids
    canon = ann[ann.is_canonical]
    assert (canon.dedup_id == canon.doc_id).all() and canon.drop_stage.isna().all() and canon.keep.all()
    dropped = ann[~ann.is_canonical]
    assert set(dropped.drop_stage) <= {"exact", "fuzzy"} and dropped.drop_reason.notna().all()
    # a dedup_id is always a canonical, and cluster sizes add up
    assert set(dropped.dedup_id) <= set(canon.doc_id)
    sizes = ann.groupby("dedup_id").size()
    assert (ann.cluster_size == ann.dedup_id.map(sizes)).all()
    assert ((ann.weight == 1.0) == ann.is_canonical).all()
    aliases = pq.read_table(out / "aliases.parquet").to_pandas()
    assert len(aliases) == len(dropped) and set(aliases.alias_id) == set(dropped.doc_id)


def test_exact_and_fuzzy_groups_are_correct(demo_run):
    frame, out, _ = demo_run
    ann = read_annotations(out).set_index("doc_id")
    norm = {i: reference_normalize(t) for i, t in zip(frame["id"], frame["text"])}
    for doc, row in ann[ann.drop_stage == "exact"].iterrows():
        assert norm[doc] == norm[row.exact_group] and norm[doc] != ""
    # empty texts are never duplicates
    empty = [i for i, t in norm.items() if t == ""]
    assert ann.loc[empty, "is_canonical"].all()
    # verified edges: no edge under the threshold joins documents, and scores are exact
    sets = {i: reference_shingle_hashes(t, "word", 5, 42) for i, t in norm.items()}
    edges = pq.read_table(out / "edges.parquet").to_pandas()
    assert len(edges) > 0 and (edges.method == "jaccard").all()
    for a, b, score in edges[["id_a", "id_b", "score"]].itertuples(index=False):
        assert score == pytest.approx(len(sets[a] & sets[b]) / len(sets[a] | sets[b]))
    fuzzy = ann[ann.drop_stage == "fuzzy"]
    assert len(fuzzy) > 0
    for doc, row in fuzzy.iterrows():
        sa, sb = sets[doc], sets[row.dedup_id]
        assert row.similarity == pytest.approx(len(sa & sb) / len(sa | sb))


def test_clusters_match_brute_force_on_demo(demo_run):
    """Pairs co-clustered by the pipeline vs connected components of all pairs with Jaccard >= 0.8."""
    frame, out, _ = demo_run
    ann = read_annotations(out).set_index("doc_id").loc[list(frame["id"])]
    norm = [reference_normalize(t) for t in frame["text"]]
    exact_rep = {}
    reps = [exact_rep.setdefault(t, i) if t else i for i, t in enumerate(norm)]
    sets = [sorted(reference_shingle_hashes(t, "word", 5, 42)) if reps[i] == i else [] for i, t in enumerate(norm)]
    offsets = np.zeros(len(sets) + 1, np.int64)
    offsets[1:] = np.cumsum([len(s) for s in sets])
    values = np.array([v for s in sets for v in s], dtype=np.uint64)
    i, j, _ = exact_similar_pairs(offsets, values, 0.8)
    from gpucurate.review.evaluate import cluster_metrics
    true_i = np.concatenate([i, np.flatnonzero(np.array(reps) != np.arange(len(reps)))])
    true_j = np.concatenate([j, np.array(reps)[np.array(reps) != np.arange(len(reps))]])
    labels = pd.factorize(ann["dedup_id"])[0]
    m = cluster_metrics(labels, true_i, true_j, len(norm))
    assert m["pair_precision"] == 1.0 and m["false_merges"] == 0
    assert m["edge_recall"] >= 0.99 and m["pair_recall"] >= 0.99


def _ann_bytes(out) -> pd.DataFrame:
    ann = read_annotations(out)
    return ann[ANNOTATION_COLUMNS]


def test_a_jsonl_file_is_cut_into_pieces_the_threads_can_share(tmp_path, demo_frame, monkeypatch):
    """Planning cuts one JSON Lines file into a multiple of the threads in pieces of about equal size, every
    line in exactly one; the annotations do not depend on it."""
    from gpucurate.config import InputConfig
    from gpucurate.io import reader
    one = write_jsonl(tmp_path / "one.jsonl", _records(demo_frame))
    size = one.stat().st_size
    monkeypatch.setattr(reader, "MIN_SPLIT_BYTES", 0)
    for parallelism in (1, 2, 3, 4):
        specs = reader.plan_partitions([str(one)], InputConfig(partition_bytes=size // 2), {}, (), parallelism)
        assert len(specs) % parallelism == 0 and len(specs) >= 2
        sizes = [s.byte_end - s.byte_start for s in specs]
        assert specs[0].byte_start == 0 and specs[-1].byte_end == size
        assert all(a.byte_end == b.byte_start for a, b in zip(specs, specs[1:]))
        assert max(sizes) < 1.5 * size / len(specs)
    outs = [gpucurate.run([str(one)], tmp_path / f"w{w}", overrides=Q + [f"run.workers={w}",
                                                                         f"input.partition_bytes={size // 2 + 1}"])
            for w in (1, 3)]
    assert [o["stages"]["input"]["partitions"] for o in outs] == [2, 3]
    pd.testing.assert_frame_equal(_ann_bytes(tmp_path / "w3"), _ann_bytes(tmp_path / "w1"))


@pytest.mark.parametrize("row_group_size", [70, 1000, 100_000])
def test_a_parquet_file_is_cut_into_even_row_ranges_the_threads_can_share(tmp_path, demo_frame, monkeypatch,
                                                                          row_group_size):
    """A Parquet file is cut into a multiple of the threads in row ranges of about equal text, whatever its
    row groups (one, a few, many small ones), every row in exactly one range in order; a range spans row
    groups and slices them. The annotations do not depend on it."""
    from gpucurate.config import InputConfig
    from gpucurate.io import reader
    path = tmp_path / "one.parquet"
    pq.write_table(pa.Table.from_pandas(demo_frame, preserve_index=False), path, row_group_size=row_group_size)
    text_bytes = int(demo_frame["text"].str.encode("utf-8").str.len().sum())
    monkeypatch.setattr(reader, "MIN_SPLIT_BYTES", 0)
    cfg = InputConfig(partition_bytes=text_bytes // 3)
    for parallelism in (1, 2, 4, 5):
        specs = reader.plan_partitions([str(path)], cfg, {}, (), parallelism)
        assert len(specs) % parallelism == 0 and len(specs) >= 3
        parts = [reader.load_partition(s, cfg) for s in specs]
        assert np.array_equal(np.concatenate([p.records for p in parts]), np.arange(len(demo_frame)))
        sizes = [sum(len(t.encode()) for t in p.table.column("text").to_pylist()) for p in parts]
        if row_group_size != 1000:  # a row group of 1000 of the 1500 rows cannot be cut evenly by bytes
            assert max(sizes) < 1.6 * text_bytes / len(specs), sizes
    outs = [gpucurate.run([str(path)], tmp_path / f"w{w}", overrides=Q + [f"run.workers={w}",
                                                                          f"input.partition_bytes={text_bytes // 3}"])
            for w in (1, 4)]
    assert outs[0]["stages"]["input"]["partitions"] >= 3 and outs[1]["stages"]["input"]["partitions"] % 4 == 0
    pd.testing.assert_frame_equal(_ann_bytes(tmp_path / "w4"), _ann_bytes(tmp_path / "w1"))


def test_a_local_run_imports_no_cluster_plotting_or_gpu_library(tmp_path, demo_frame):
    """The fixed cost of a small run: a run on local threads loads neither Dask nor distributed, fsspec (for
    local files), tqdm (without progress bars), matplotlib, CuPy / numba.cuda (on a machine without a CUDA
    driver), torch, scikit-learn or scipy.linalg (which numba's first dispatch would import to look for BLAS:
    ``kernels.numba_without_blas``)."""
    import subprocess
    import sys
    src = write_jsonl(tmp_path / "d.jsonl", _records(demo_frame)[:50])
    heavy = ["dask", "distributed", "fsspec", "tqdm", "matplotlib", "torch", "sklearn", "transformers", "cupy", "scipy.linalg"]
    from gpucurate.engine.backend import _driver_library
    if not _driver_library():
        heavy.append("numba.cuda")
    code = (f"import sys, gpucurate; gpucurate.run([{str(src)!r}], {str(tmp_path / 'o')!r}, overrides="
            f"['run.progress=false', 'semantic.enabled=false']); print([m for m in {heavy!r} if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_same_annotations_whatever_the_split_and_workers(tmp_path, demo_frame):
    recs = _records(demo_frame)
    one = write_jsonl(tmp_path / "one.jsonl", recs)
    split_dir = tmp_path / "split"
    split_dir.mkdir()
    cuts = [0, 100, 101, 700, 1499, len(recs)]
    for n, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):
        write_jsonl(split_dir / f"part-{n:03d}.jsonl", recs[a:b], compress=[None, "gz", "zst"][n % 3])
    pq.write_table(pa.Table.from_pandas(demo_frame, preserve_index=False), tmp_path / "all.parquet",
                   row_group_size=128)
    pq.write_table(pa.Table.from_pandas(demo_frame, preserve_index=False), tmp_path / "one-group.parquet")
    ref = gpucurate.run([str(one)], tmp_path / "o1", overrides=Q + ["run.workers=1"])
    runs = [
        gpucurate.run([str(split_dir)], tmp_path / "o2", overrides=Q + ["run.workers=2"]),
        gpucurate.run([str(one)], tmp_path / "o3", overrides=Q + ["run.workers=2", "input.partition_bytes=20000"]),
        gpucurate.run([str(tmp_path / "all.parquet")], tmp_path / "o4",
                      overrides=Q + ["run.workers=2", "input.partition_rows=200"]),
        # one partition, two threads inside the task
        gpucurate.run([str(one)], tmp_path / "o5", overrides=Q + ["run.workers=2"]),
        # row groups joined up to partition_bytes of text, and one big row group read in row slices
        gpucurate.run([str(tmp_path / "all.parquet")], tmp_path / "o6",
                      overrides=Q + ["run.workers=2", "input.partition_bytes=700000"]),
        gpucurate.run([str(tmp_path / "one-group.parquet")], tmp_path / "o7",
                      overrides=Q + ["run.workers=2", "input.partition_bytes=200000"]),
    ]
    assert runs[1]["stages"]["input"]["partitions"] > 10 and runs[2]["stages"]["input"]["partitions"] > 5
    assert 1 < runs[4]["stages"]["input"]["partitions"] < 1500 / 128 and runs[5]["stages"]["input"]["partitions"] > 5
    expected = _ann_bytes(tmp_path / "o1")
    for name in ("o2", "o3", "o4", "o5", "o6", "o7"):
        pd.testing.assert_frame_equal(_ann_bytes(tmp_path / name), expected)
    assert ref["stages"]["fuzzy"]["duplicates"] == runs[0]["stages"]["fuzzy"]["duplicates"]


@pytest.mark.parametrize("policy", ["first", "earliest", "longest"])
def test_canonical_policies(tmp_path, policy):
    base = "the quarterly report shows strong growth in all regions and the board approved the new plan today"
    recs = [
        {"id": "a", "text": base + " final", "ts": "2021-05-01T00:00:00Z"},
        {"id": "b", "text": base + " final and more words here", "ts": "2020-01-01T00:00:00Z"},
        {"id": "c", "text": base + " finally", "ts": "2022-01-01T00:00:00Z"},
        {"id": "d", "text": "something else entirely with no overlap at all in this sentence ok", "ts": None},
    ]
    src = write_jsonl(tmp_path / "p.jsonl", recs)
    gpucurate.run([str(src)], tmp_path / "o", overrides=Q + [f"canonical.policy={policy}", "input.timestamp_field=ts",
                                                             "fuzzy.threshold=0.7"])
    ann = read_annotations(tmp_path / "o").set_index("doc_id")
    expected = {"first": "a", "earliest": "b", "longest": "b"}[policy]
    assert set(ann.loc[["a", "b", "c"], "dedup_id"]) == {expected}
    assert ann.loc["d", "is_canonical"]


def test_char_shingles_find_cjk_near_duplicates(tmp_path):
    base = "東京都は本日新しい交通計画を発表しました。市民の生活を改善するために多くの路線が追加されます。"
    recs = [{"id": 1, "text": base}, {"id": 2, "text": base.replace("本日", "昨日")},
            {"id": 3, "text": "大阪の天気は晴れで、気温は二十度まで上がる見込みです。"}]
    src = write_jsonl(tmp_path / "cjk.jsonl", recs)
    word = gpucurate.run([str(src)], tmp_path / "w", overrides=Q)
    char = gpucurate.run([str(src)], tmp_path / "c", overrides=Q + ["fuzzy.shingle=char", "fuzzy.ngram=3"])
    assert word["stages"]["fuzzy"]["duplicates"] == 0  # one "word" per text: only exact copies match
    ann = read_annotations(tmp_path / "c").set_index("doc_id")
    assert char["stages"]["fuzzy"]["duplicates"] == 1 and ann.loc[2, "dedup_id"] == 1
    assert ann.index.dtype == np.int64  # integer ids stay integers


def test_auto_shingles_each_text_by_its_script(tmp_path, demo_frame):
    """fuzzy.shingle auto on the multilingual demo: texts mostly in scripts without spaces (its Chinese and
    Japanese ones) by characters, the others by words. Each document's annotation is the char run's or the
    word run's accordingly, so the CJK near-copies that word shingles miss are found, and nothing else moves."""
    from gpucurate.kernels.minhash import char_texts
    from gpucurate.stages.normalize import arrow_buffers, normalize
    src = write_jsonl(tmp_path / "c.jsonl", _records(demo_frame))
    ann = {}
    for shingle in ("word", "char", "auto"):
        gpucurate.run([str(src)], tmp_path / shingle, overrides=Q + ["semantic.enabled=false",
                                                                     f"fuzzy.shingle={shingle}"])
        ann[shingle] = read_annotations(tmp_path / shingle).set_index("doc_id")
    frame = demo_frame.set_index("id").loc[ann["auto"].index]
    cjk = char_texts(*arrow_buffers(normalize(pa.array(frame.text.tolist(), pa.large_string()))))
    assert set(frame.lang[cjk]) == {"zh", "ja"} and not frame.lang[~cjk].isin(["zh", "ja"]).any()
    columns = ["dedup_id", "drop_stage", "drop_reason", "similarity", "cluster_size"]
    pd.testing.assert_frame_equal(ann["auto"].loc[cjk, columns], ann["char"].loc[cjk, columns])
    pd.testing.assert_frame_equal(ann["auto"].loc[~cjk, columns], ann["word"].loc[~cjk, columns])
    fuzzy = {k: int((a.loc[cjk, "drop_stage"] == "fuzzy").sum()) for k, a in ann.items()}
    assert fuzzy["auto"] == fuzzy["char"] > 0 == fuzzy["word"]


@pytest.mark.parametrize("over, message", [
    (["fuzzy.min_length=5"], "with fuzzy.shingle auto it must be 0"),
    (["substrings.enabled=true"], "substrings.unit must be word or char"),
    (["run.backend=gpu"], "fuzzy.shingle auto runs on the CPU backend"),  # numba's CUDA simulator
])
def test_auto_shingles_refuse_what_they_cannot_do(tmp_path, over, message):
    src = write_jsonl(tmp_path / "c.jsonl", [{"id": 1, "text": "a b c"}])
    with pytest.raises(ConfigError, match=message):
        gpucurate.run([str(src)], tmp_path / "o", overrides=Q + ["semantic.enabled=false", "fuzzy.shingle=auto",
                                                                 *over])


def test_unverified_mode_uses_minhash_estimates(tmp_path, demo_frame):
    src = write_jsonl(tmp_path / "c.jsonl", _records(demo_frame))
    s = gpucurate.run([str(src)], tmp_path / "o", overrides=Q + ["fuzzy.verify=false"])
    edges = pq.read_table(tmp_path / "o" / "edges.parquet").to_pandas()
    assert (edges.method == "minhash").all() and s["lsh"]["bands"] < 17
    assert s["stages"]["fuzzy"]["duplicates"] > 0
    ann = read_annotations(tmp_path / "o")
    assert ann.loc[ann.drop_stage == "fuzzy", "drop_reason"].str.contains("estimated jaccard").all()


def test_soft_and_size_weights(tmp_path, demo_frame):
    src = write_jsonl(tmp_path / "c.jsonl", _records(demo_frame.head(400)))
    gpucurate.run([str(src)], tmp_path / "soft", overrides=Q + ["output.weight=soft", "output.soft_weight=0.25"])
    gpucurate.run([str(src)], tmp_path / "size", overrides=Q + ["output.weight=size"])
    soft = read_annotations(tmp_path / "soft")
    assert set(soft.loc[~soft.is_canonical, "weight"]) == {0.25}
    size = read_annotations(tmp_path / "size")
    assert size.loc[size.is_canonical, "weight"].sum() == len(size)


def test_generated_ids_are_file_and_line(tmp_path):
    src = write_jsonl(tmp_path / "noid.jsonl", [{"text": "hello world"}, {"text": "hello world"}])
    gpucurate.run([str(src)], tmp_path / "o", overrides=Q + ["input.id_field=null"])
    ann = read_annotations(tmp_path / "o")
    assert list(ann.doc_id) == ["noid.jsonl:1", "noid.jsonl:2"]
    assert list(ann.dedup_id) == ["noid.jsonl:1", "noid.jsonl:1"]


def test_python_api_and_cli_agree(tmp_path, demo_frame):
    from gpucurate.cli import main
    src = write_jsonl(tmp_path / "c.jsonl", _records(demo_frame.head(300)))
    assert main(["run", "--input", str(src), "--output", str(tmp_path / "cli"), "--no-progress", "-q",
                 "--set", "fuzzy.threshold=0.7"]) == 0
    gpucurate.run(str(src), tmp_path / "api", overrides={"fuzzy.threshold": 0.7, "run.progress": False})
    pd.testing.assert_frame_equal(_ann_bytes(tmp_path / "cli"), _ann_bytes(tmp_path / "api"))
