"""``run.scheduler``: the same annotations when the partition tasks run on a Dask cluster."""

import pandas as pd
import pytest

import gpucurate

from conftest import ANNOTATION_COLUMNS, read_annotations, write_jsonl


@pytest.fixture(scope="module")
def cluster():
    import distributed
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  host="127.0.0.1") as c:
        yield c


@pytest.mark.parametrize("p2p", [False, True])
def test_scheduler_address_gives_identical_annotations(tmp_path, demo_frame, cluster, p2p, monkeypatch):
    """With ``p2p`` every exchange between partition tasks is a P2P shuffle (``engine.shuffle._shuffled``).
    A task may hold 4 KB: the partitions are read in pieces of 1 MB (the smallest), the fuzzy verification
    runs in blocks of one piece (a task per pair of them), and the LSH in a bucket per piece; the output is
    the one process's, which read the partitions whole."""
    import pyarrow.parquet as pq
    from gpucurate.engine import shuffle
    from gpucurate.engine.executor import Executor
    from gpucurate.stages import fuzzy_exchange
    monkeypatch.setattr(Executor, "_worker_task_bytes", lambda self: 4096)
    blocks = []
    real_blocks = fuzzy_exchange.verify_blocks
    monkeypatch.setattr(fuzzy_exchange, "verify_blocks", lambda *a: blocks.append(real_blocks(*a)) or blocks[-1])
    shuffled = []
    if p2p:
        monkeypatch.setattr(shuffle, "TASK_PIECES_MAX", 0)
        real = shuffle._shuffled
        monkeypatch.setattr(shuffle, "_shuffled", lambda split, *a: shuffled.append(split.__name__) or real(split, *a))
    recs = demo_frame.head(800).to_dict(orient="records")
    for n in range(4):
        write_jsonl(tmp_path / f"part-{n}.jsonl", recs[n * 200:(n + 1) * 200])
    inputs = [str(tmp_path / "part-*.jsonl")]
    settings = ["run.progress=false", "substrings.enabled=true", "substrings.min_tokens=8"]
    local = gpucurate.run(inputs, tmp_path / "local", overrides=settings)
    remote = gpucurate.run(inputs, tmp_path / "remote", overrides=settings + [f"run.scheduler={cluster.scheduler_address}"])
    assert remote["executor"].startswith("dask cluster")
    pd.testing.assert_frame_equal(read_annotations(tmp_path / "remote")[ANNOTATION_COLUMNS],
                                  read_annotations(tmp_path / "local")[ANNOTATION_COLUMNS])
    assert local["stages"]["fuzzy"]["duplicates"] == remote["stages"]["fuzzy"]["duplicates"] > 0
    assert pq.read_table(tmp_path / "remote" / "edges.parquet").equals(pq.read_table(tmp_path / "local" / "edges.parquet"))
    assert local["stages"]["substrings"]["documents_touched"] == remote["stages"]["substrings"]["documents_touched"] > 0
    assert ("_by_hash" in shuffled and "_members_by_label" in shuffled and "_windows_by_key" in shuffled) == p2p, \
        shuffled
    assert blocks and all(len(b) == remote["stages"]["input"]["read_pieces"] for b in blocks), blocks


def test_annotations_only_output_on_a_cluster(tmp_path, demo_frame, cluster):
    """``output.columns=annotations`` on the workers: the same annotation columns as in one process, each row's
    ``input_file`` and ``input_row`` its record's place, and its task seconds summed over the workers."""
    recs = demo_frame.head(600).to_dict(orient="records")
    for n in range(3):
        write_jsonl(tmp_path / f"part-{n}.jsonl", recs[n * 200:(n + 1) * 200])
    inputs = [str(tmp_path / "part-*.jsonl")]
    settings = ["run.progress=false", "output.columns=annotations"]
    gpucurate.run(inputs, tmp_path / "local", overrides=settings)
    remote = gpucurate.run(inputs, tmp_path / "remote", overrides=settings + [f"run.scheduler={cluster.scheduler_address}"])
    local_ann, remote_ann = read_annotations(tmp_path / "local"), read_annotations(tmp_path / "remote")
    pd.testing.assert_frame_equal(remote_ann[ANNOTATION_COLUMNS], local_ann[ANNOTATION_COLUMNS])
    where = remote_ann["input_file"].str.extract(r"part-(\d)\.jsonl$")[0].astype(int) * 200 + remote_ann["input_row"]
    assert (remote_ann["doc_id"].map({r["id"]: k for k, r in enumerate(recs)}) == where).all()
    assert remote["task_seconds"]["parse"] > 0 and remote["task_seconds"]["fuzzy: minhash"] > 0


def test_unreachable_scheduler_is_a_config_error(tmp_path):
    src = write_jsonl(tmp_path / "a.jsonl", [{"id": 1, "text": "x"}])
    with pytest.raises(gpucurate.ConfigError, match="127.0.0.1:9"):
        gpucurate.run([str(src)], tmp_path / "o", overrides=["run.progress=false", "run.scheduler=tcp://127.0.0.1:9"])


@pytest.mark.parametrize("p2p", [False, True])
def test_gates_and_paragraphs_on_a_cluster(tmp_path, demo_frame, cluster, p2p, monkeypatch):
    """The gates' per-partition results travel back from worker processes (partition attrs); with ``p2p``
    the paragraphs' exchanges are P2P shuffles."""
    from gpucurate.engine import shuffle
    if p2p:
        monkeypatch.setattr(shuffle, "TASK_PIECES_MAX", 0)
    recs = demo_frame.head(400).to_dict(orient="records")
    item = {"question": "A farmer has 17 sheep and all but 9 run away. How many sheep are left on the farm now?",
            "answer": "Nine sheep are left on the farm."}
    bench = write_jsonl(tmp_path / "bench.jsonl", [item])
    for r in recs[::50]:
        r["text"] = (r["text"] or "") + "\n\n" + item["question"] + " " + item["answer"]
    for r in recs[7::40]:  # the pattern, term and PII rules too
        r["text"] = (r["text"] or "") + " Write to ann@example.org or Müller GmbH, card 4111 1111 1111 1111."
    (tmp_path / "terms.txt").write_text("Müller GmbH\n", encoding="utf-8")
    for n in range(2):
        write_jsonl(tmp_path / f"part-{n}.jsonl", recs[n * 200:(n + 1) * 200])
    over = ["run.progress=false", "quality.min_words=5", "paragraphs.enabled=true", "contamination.action=strip",
            f"contamination.benchmarks=['b={bench}:question,answer']", "contamination.strip_min_chars=10",
            "contamination.pii=[{name: email, action: redact}, card]",
            f"contamination.terms=[{{name: firm, path: '{tmp_path / 'terms.txt'}', action: redact}}]"]
    inputs = [str(tmp_path / "part-*.jsonl")]
    local = gpucurate.run(inputs, tmp_path / "local", overrides=over)
    remote = gpucurate.run(inputs, tmp_path / "remote", overrides=over + [f"run.scheduler={cluster.scheduler_address}"])
    pd.testing.assert_frame_equal(read_annotations(tmp_path / "remote"), read_annotations(tmp_path / "local"))
    for key in ("contaminated_documents", "dropped", "stripped", "items", "redacted", "rules"):
        assert remote["stages"]["contamination"][key] == local["stages"]["contamination"][key], key
    assert remote["stages"]["contamination"]["contaminated_documents"] == 8 + 10
    assert remote["stages"]["contamination"]["redacted"] == 10
    assert (tmp_path / "remote" / "contamination_report.json").read_text() == \
        (tmp_path / "local" / "contamination_report.json").read_text()
    assert remote["stages"]["quality"]["dropped"] > 0 and remote["stages"]["paragraphs"]["documents_changed"] > 0


@pytest.mark.parametrize("extra", [{}, {"fuzzy.max_bucket_size": 3, "fuzzy.bucket_anchors": 2},
                                   {"canonical.policy": "longest", "fuzzy.threshold": 0.6},
                                   {"fuzzy.components": "dask"},
                                   {"fuzzy.driver_max_pairs": 0, "canonical.policy": "longest",
                                    "fuzzy.threshold": 0.6}])
def test_lsh_on_dask_equals_the_driver_path(tmp_path, demo_frame, extra, monkeypatch):
    """fuzzy.lsh=dask: buckets shuffled by key, pairs deduplicated by a second shuffle, verified after joins
    with the shingle sets; the same candidate pairs, scores and annotations as the driver path (also with
    buckets over max_bucket_size, where anchors decide the pairs)."""
    import pyarrow.parquet as pq
    from gpucurate.stages import fuzzy_lsh
    monkeypatch.setattr(fuzzy_lsh, "EDGES_PER_PARTITION", 100)  # edges and components in several partitions
    recs = demo_frame.head(900).to_dict(orient="records")
    for n in range(3):
        write_jsonl(tmp_path / f"part-{n}.jsonl", recs[n * 300:(n + 1) * 300])
    over = {"run.progress": False, "input.partition_bytes": 40_000, **extra}
    inputs = [str(tmp_path / "part-*.jsonl")]
    driver = gpucurate.run(inputs, tmp_path / "driver", overrides={**over, "fuzzy.lsh": "driver"})
    on_dask = gpucurate.run(inputs, tmp_path / "dask", overrides={**over, "fuzzy.lsh": "dask"})
    assert on_dask["stages"]["fuzzy"]["lsh"] == "dask" and driver["stages"]["input"]["partitions"] > 3
    dask_components = extra.get("fuzzy.components") == "dask" or extra.get("fuzzy.driver_max_pairs") == 0
    assert on_dask["stages"]["fuzzy"]["components"] == ("dask" if dask_components else "driver")
    pd.testing.assert_frame_equal(read_annotations(tmp_path / "dask"), read_annotations(tmp_path / "driver"))
    edges = [pq.read_table(tmp_path / name / "edges.parquet") for name in ("dask", "driver")]
    assert edges[0].equals(edges[1])
    assert on_dask["stages"]["fuzzy"]["duplicates"] == driver["stages"]["fuzzy"]["duplicates"] > 0


def test_lsh_on_dask_falls_back_for_simhash(tmp_path, demo_frame, caplog):
    recs = demo_frame.head(200).to_dict(orient="records")
    src = write_jsonl(tmp_path / "a.jsonl", recs)
    with caplog.at_level("INFO", logger="gpucurate"):
        s = gpucurate.run([str(src)], tmp_path / "o", overrides={"run.progress": False, "fuzzy.lsh": "dask",
                                                                 "fuzzy.method": "simhash"})
    assert "lsh" not in s["stages"]["fuzzy"] and "LSH on the driver" in caplog.text


def test_components_on_dask_equal_the_union_find():
    """Min-label propagation over Dask DataFrames: the same components as the driver's union-find on random
    graphs with long chains (several pointer-jumping rounds), isolated rows and one to many partitions;
    each label is the smallest row of its component."""
    import dask.dataframe as dd
    import numpy as np
    from gpucurate.engine.executor import Executor
    from gpucurate.kernels.pairs import components
    from gpucurate.stages.components import dask_components
    rng = np.random.default_rng(3)
    n = 3_000
    chain = rng.permutation(n)[:600]  # one path of 600 rows in random order: diameter 599
    i = np.concatenate([chain[:-1], rng.integers(0, n, 900)])
    j = np.concatenate([chain[1:], rng.integers(0, n, 900)])
    keep = i != j
    i, j = np.minimum(i, j)[keep], np.maximum(i, j)[keep]
    expected = components(n, i, j)
    with Executor(progress=False) as ex:
        for parts in (1, 4, 7):
            frame = dd.from_pandas(pd.DataFrame({"i": i.astype(np.int64), "j": j.astype(np.int64)}),
                                   npartitions=parts)
            nodes, labels = dask_components(frame, n, ex, parts)
            got = np.arange(n)
            got[nodes] = labels
            assert set(nodes) == set(i) | set(j)
            # the same partition of the rows, each labelled by its smallest row
            mins = pd.Series(np.arange(n)).groupby(expected).transform("min").to_numpy()
            assert np.array_equal(got, mins)


def _die():
    import os
    os._exit(1)


def test_a_worker_that_dies_is_an_environment_error(tmp_path, monkeypatch):
    """A worker killed under a task (as by the kernel's OOM killer) is one ``WorkerLostError`` (exit 1)
    naming the step and the workers' memory limit, not an internal error with a ``KilledWorker`` trace."""
    import dask
    import distributed
    from gpucurate.engine.executor import Executor
    from gpucurate.engine.tasks import delayed
    from gpucurate.errors import WorkerLostError
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}), \
            distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                                     host="127.0.0.1", memory_limit="1.5GB") as cluster, \
            Executor(cluster.scheduler_address, progress=False) as executor:
        for step in (executor.compute, executor.persist_tasks):
            with pytest.raises(WorkerLostError, match=r"a Dask worker died during 'dedup: boom' \(memory limit "
                                                      r"1\.50 GB per worker\): it was killed or ran out of memory"):
                step([delayed(_die)()], "dedup: boom")
    assert WorkerLostError.exit_code == 1
