"""The Dask DataFrame API: frames in, the same frames with annotation columns out."""

import dask.dataframe as dd
import pandas as pd

import gpucurate

from conftest import ANNOTATION_COLUMNS, read_annotations, write_jsonl

Q = {"run.progress": False}


def test_dedup_on_a_user_dask_frame_matches_the_cli_run(tmp_path, demo_frame):
    frame = demo_frame.head(600).reset_index(drop=True)
    ddf = dd.from_pandas(frame, npartitions=3)
    annotated = gpucurate.dedup(ddf, overrides=Q)
    got = annotated.compute()
    assert list(got.columns) == list(frame.columns) + list(ANNOTATION_COLUMNS)
    pd.testing.assert_frame_equal(got[frame.columns], ddf.compute())  # user columns untouched
    src = write_jsonl(tmp_path / "c.jsonl", frame.to_dict(orient="records"))
    gpucurate.run([str(src)], tmp_path / "o", overrides=Q)
    expected = read_annotations(tmp_path / "o")[ANNOTATION_COLUMNS].reset_index(drop=True)
    got = got.sort_values("doc_id", kind="stable")[ANNOTATION_COLUMNS].reset_index(drop=True)
    pd.testing.assert_frame_equal(got, expected, check_dtype=False)


def test_read_then_stage_functions(tmp_path, demo_frame):
    src = write_jsonl(tmp_path / "c.jsonl", demo_frame.head(400).to_dict(orient="records"))
    ddf = gpucurate.read(str(src))
    exact = gpucurate.exact_dedup(ddf, overrides=Q).compute()
    both = gpucurate.dedup(ddf, overrides=Q).compute()
    fuzzy_only = gpucurate.fuzzy_dedup(ddf, overrides=Q).compute()
    assert set(exact.drop_stage.dropna()) == {"exact"}
    assert (~exact.keep).sum() < (~both.keep).sum()
    # without the exact stage identical texts are found by the fuzzy stage (Jaccard 1.0) instead
    assert set(fuzzy_only.drop_stage.dropna()) == {"fuzzy"} and (~fuzzy_only.keep).sum() == (~both.keep).sum()


def test_dedup_of_a_user_frame_honours_the_timestamp_column():
    base = "the quarterly report shows strong growth in all regions and the board approved the plan"
    frame = pd.DataFrame({"id": ["a", "b"], "text": [base, base + " today"],
                          "ts": ["2022-01-01T00:00:00Z", "2020-01-01T00:00:00Z"]})
    got = gpucurate.dedup(dd.from_pandas(frame, npartitions=1),
                          overrides={**Q, "input.timestamp_field": "ts", "canonical.policy": "earliest",
                                     "fuzzy.threshold": 0.7}).compute().set_index("doc_id")
    assert got.loc["a", "dedup_id"] == "b" and got.loc["b", "is_canonical"]
