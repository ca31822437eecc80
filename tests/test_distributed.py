"""``run.scheduler``: the same annotations when the partition tasks run on a Dask cluster."""

import pandas as pd
import pytest

import gpucurate

from conftest import ANNOTATION_COLUMNS, read_annotations, write_jsonl


@pytest.fixture(scope="module")
def cluster():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  host="127.0.0.1") as c:
        yield c


def test_scheduler_address_gives_identical_annotations(tmp_path, demo_frame, cluster):
    recs = demo_frame.head(800).to_dict(orient="records")
    for n in range(4):
        write_jsonl(tmp_path / f"part-{n}.jsonl", recs[n * 200:(n + 1) * 200])
    inputs = [str(tmp_path / "part-*.jsonl")]
    local = gpucurate.run(inputs, tmp_path / "local", overrides=["run.progress=false"])
    remote = gpucurate.run(inputs, tmp_path / "remote",
                           overrides=["run.progress=false", f"run.scheduler={cluster.scheduler_address}"])
    assert remote["executor"].startswith("dask cluster")
    pd.testing.assert_frame_equal(read_annotations(tmp_path / "remote")[ANNOTATION_COLUMNS],
                                  read_annotations(tmp_path / "local")[ANNOTATION_COLUMNS])
    assert local["stages"]["fuzzy"]["duplicates"] == remote["stages"]["fuzzy"]["duplicates"] > 0


def test_unreachable_scheduler_is_a_config_error(tmp_path):
    src = write_jsonl(tmp_path / "a.jsonl", [{"id": 1, "text": "x"}])
    with pytest.raises(gpucurate.ConfigError, match="127.0.0.1:9"):
        gpucurate.run([str(src)], tmp_path / "o", overrides=["run.progress=false", "run.scheduler=tcp://127.0.0.1:9"])


def test_gates_and_paragraphs_on_a_cluster(tmp_path, demo_frame, cluster):
    """The gates' per-partition results travel back from worker processes (partition attrs)."""
    recs = demo_frame.head(400).to_dict(orient="records")
    item = {"question": "A farmer has 17 sheep and all but 9 run away. How many sheep are left on the farm now?",
            "answer": "Nine sheep are left on the farm."}
    bench = write_jsonl(tmp_path / "bench.jsonl", [item])
    for r in recs[::50]:
        r["text"] = (r["text"] or "") + "\n\n" + item["question"] + " " + item["answer"]
    for n in range(2):
        write_jsonl(tmp_path / f"part-{n}.jsonl", recs[n * 200:(n + 1) * 200])
    over = ["run.progress=false", "quality.min_words=5", "paragraphs.enabled=true", "contamination.action=strip",
            f"contamination.benchmarks=['b={bench}:question,answer']", "contamination.strip_min_chars=10"]
    inputs = [str(tmp_path / "part-*.jsonl")]
    local = gpucurate.run(inputs, tmp_path / "local", overrides=over)
    remote = gpucurate.run(inputs, tmp_path / "remote", overrides=over + [f"run.scheduler={cluster.scheduler_address}"])
    pd.testing.assert_frame_equal(read_annotations(tmp_path / "remote"), read_annotations(tmp_path / "local"))
    for key in ("contaminated_documents", "dropped", "stripped", "items"):
        assert remote["stages"]["contamination"][key] == local["stages"]["contamination"][key], key
    assert remote["stages"]["contamination"]["contaminated_documents"] == 8
    assert remote["stages"]["quality"]["dropped"] > 0 and remote["stages"]["paragraphs"]["documents_changed"] > 0
