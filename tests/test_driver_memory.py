"""The driver holds no per-document state: with the LSH and the components on Dask, what the partition tasks
send back to this process does not grow with the number of documents (issue 17)."""

import pytest

import gpucurate
from gpucurate.engine.executor import Executor

from conftest import read_annotations, write_jsonl


def _corpus(folder, docs: int):
    from gpucurate.generators.demo import generate_corpus
    recs = generate_corpus(n_docs=docs, seed=11).to_dict(orient="records")
    folder.mkdir()
    per_file = -(-len(recs) // 4)
    for n in range(4):  # four files: four partitions whatever their size
        write_jsonl(folder / f"part-{n}.jsonl", recs[n * per_file:(n + 1) * per_file])
    return [str(folder / "part-*.jsonl")], len(recs)


def _results_sent_back(monkeypatch, inputs, out, overrides) -> dict:
    """Bytes of the results each ``Executor.compute`` brought to this process, by step (largest call)."""
    from dask.sizeof import sizeof
    sizes: dict = {}
    compute = Executor.compute

    def recording(self, tasks, desc):
        results = compute(self, tasks, desc)
        sizes[desc] = max(sizes.get(desc, 0), sum(sizeof(r) for r in results))
        return results
    monkeypatch.setattr(Executor, "compute", recording)
    summary = gpucurate.run(inputs, out, overrides=overrides)
    monkeypatch.setattr(Executor, "compute", compute)
    return summary, sizes


@pytest.mark.slow
def test_results_sent_to_the_driver_do_not_grow_with_the_corpus(tmp_path, monkeypatch):
    import gpucurate.stages.annotate as annotate
    monkeypatch.setattr(annotate, "EDGE_BATCH", 64)  # edges.parquet streams its id lookups in small batches
    overrides = {"run.progress": False, "fuzzy.lsh": "dask", "fuzzy.components": "dask", "quality.min_words": 5,
                 "paragraphs.enabled": True, "canonical.policy": "longest"}
    runs = {}
    for docs in (400, 3200):
        inputs, n = _corpus(tmp_path / f"in{docs}", docs)
        runs[docs] = _results_sent_back(monkeypatch, inputs, tmp_path / f"out{docs}", overrides) + (inputs,)
    (small, small_sizes, _), (large, large_sizes, inputs) = runs[400], runs[3200]
    assert large["documents_in"] >= 7 * small["documents_in"]
    assert large["stages"]["fuzzy"]["components"] == "dask" and large["stages"]["fuzzy"]["duplicates"] > 100
    assert large["stages"]["exact"]["duplicates"] > small["stages"]["exact"]["duplicates"] > 0
    assert not any(desc.startswith("gather") for desc in large_sizes), sorted(large_sizes)
    grown = {desc: (small_sizes.get(desc), size) for desc, size in large_sizes.items()
             if size > 1.25 * small_sizes.get(desc, 0) + 4096}
    assert not grown, grown  # bytes with the small and the large corpus
    # the annotations are those of the driver's LSH and components
    reference = gpucurate.run(inputs, tmp_path / "ref", overrides={**overrides, "fuzzy.lsh": "driver"})
    assert reference["stages"]["fuzzy"]["duplicates"] == large["stages"]["fuzzy"]["duplicates"]
    assert read_annotations(tmp_path / "ref").equals(read_annotations(tmp_path / "out3200"))


def test_row_lookups_over_several_groups_of_partitions(tmp_path, monkeypatch):
    """The annotation's row lookups answered by one group of partitions or by several (requests cut by
    group, answers sent back and put in request order): the same annotations."""
    import gpucurate.engine.shuffle as shuffle
    inputs, _ = _corpus(tmp_path / "in", 600)
    overrides = {"run.progress": False, "fuzzy.lsh": "dask", "input.partition_bytes": 20_000}
    one = gpucurate.run(inputs, tmp_path / "one", overrides=overrides)
    monkeypatch.setattr(shuffle, "PARTS_PER_GROUP", 2)
    assert len(shuffle.owner_groups(one["stages"]["input"]["partitions"])) - 1 >= 3
    several = gpucurate.run(inputs, tmp_path / "several", overrides=overrides)
    assert several["stages"]["fuzzy"]["duplicates"] == one["stages"]["fuzzy"]["duplicates"] > 0
    assert read_annotations(tmp_path / "several").equals(read_annotations(tmp_path / "one"))
