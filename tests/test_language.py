"""Language identification: the kernel against fastText itself (fasttext-predict, the model's own code), and
the language rule in runs (lang and lang_score columns, drop reasons, summary counts, rethreshold, errors)."""

import gzip
import itertools
import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from conftest import SHARED_DATA, read_annotations, write_jsonl
from gpucurate.cli import main
from gpucurate.errors import ConfigError
from gpucurate.workflows.run import run

language = pytest.importorskip("gpucurate.stages.language")
fasttext = pytest.importorskip("fasttext")

Q = {"run.progress": False, "semantic.enabled": False}
REUTERS = SHARED_DATA / "reuters21578" / "reuters21578.jsonl.gz"

TEXTS = ["The quick brown fox jumps over the lazy dog and runs into the forest to find its friends.",
         "Der schnelle braune Fuchs springt über den faulen Hund und läuft in den Wald.",
         "这是一个关于语言识别的中文句子，用来测试系统。",
         "これは言語識別のための日本語の文章です。",
         "한국어 문장은 띄어쓰기를 합니다. 언어 식별을 시험합니다.",
         "Быстрая коричневая лиса прыгает через ленивую собаку.",
         "El rápido zorro marrón salta sobre el perro perezoso.",
         "ok 123", "tab\tseparated\vwords\fand\rreturns\x00zero", "__label__en is not a word here",
         "emoji 🙂 and accents: café naïve façade", "a" * 3000]


def reference(texts):
    """fastText's own prediction (label, probability) of each text read as one line."""
    model = fasttext.load_model(language.default_model_path()).f
    out = []
    for t in texts:
        (prob, label), = model.predict(t.replace("\n", " ") + "\n", 1, 0.0, "strict")
        out.append((label[len("__label__"):], prob))
    return out


def test_the_kernel_predicts_what_fasttext_does(demo_frame):
    texts = TEXTS + demo_frame["text"].tolist()[:600]
    if REUTERS.is_file():
        with gzip.open(REUTERS, "rt") as fh:
            texts += [json.loads(line)["body"] for line in itertools.islice(fh, 1500)]
    model = language.load_model()
    labels, scores = language.identify_texts(model, pa.array(texts, pa.large_string()))
    worded = np.array([bool(t.replace("\0", " ").split()) for t in texts])  # fastText labels "" too: we do not
    assert (labels[~worded] == -1).all() and worded.sum() > 1000
    expected = reference([t for t, w in zip(texts, worded) if w])
    got = [model.labels[k] for k in labels[worded]]
    assert got == [label for label, _ in expected]
    np.testing.assert_allclose(scores[worded], [p for _, p in expected], atol=1e-5)
    assert {"en", "de", "zh", "ja", "ko", "ru", "es"} <= set(got)


def test_texts_without_words_have_no_language():
    model = language.load_model()
    labels, scores = language.identify_texts(model, pa.array(["", "  \n\t", None, "word"], pa.large_string()))
    assert labels[:3].tolist() == [-1, -1, -1] and scores[:3].tolist() == [0, 0, 0] and labels[3] >= 0


def test_the_language_rule_in_a_run(tmp_path):
    records = [{"id": i, "text": t} for i, t in enumerate(TEXTS[:8] + ["", TEXTS[0]])]
    src = write_jsonl(tmp_path / "in.jsonl", records)
    summary = run([str(src)], tmp_path / "o", overrides={**Q, "quality.languages": ["en", "de"]})
    ann = read_annotations(tmp_path / "o").set_index("doc_id")
    expected = dict(zip(range(8), (label for label, _ in reference(TEXTS[:8]))))
    assert ann.loc[list(range(8)), "lang"].tolist() == [expected[i] for i in range(8)]
    assert pd.isna(ann.loc[8, "lang"]) and np.isnan(ann.loc[8, "lang_score"])
    assert ann.loc[0, "keep"] and ann.loc[1, "keep"]
    assert ann.loc[2, "drop_reason"].startswith("quality: language zh 1.000 not in languages [en, de]")
    assert ann.loc[7, "drop_reason"] == f"quality: language en {ann.loc[7, 'lang_score']:.3f} < min_language_score 0.65"
    assert ann.loc[8, "drop_reason"] == "quality: language none 0.000 not in languages [en, de]"
    assert ann.loc[9, "drop_stage"] == "exact" and ann.loc[9, "lang"] == "en"  # annotated, then deduplicated
    quality = summary["stages"]["quality"]
    assert quality["by_rule"] == {"languages": int((~ann["keep"] & (ann["drop_stage"] == "quality")).sum())}
    assert sum(quality["languages"].values()) == 10 and quality["languages"]["none"] == 1
    assert quality["language_model"]["file"] == "lid.176.ftz"
    # identification alone drops nothing; without it there are no language columns
    run([str(src)], tmp_path / "i", overrides={**Q, "quality.identify_language": True})
    ident = read_annotations(tmp_path / "i").set_index("doc_id")
    assert ident["lang"].tolist() == ann["lang"].tolist() and (ident["drop_stage"] != "quality").all()
    run([str(src)], tmp_path / "n", overrides=Q)
    assert "lang" not in read_annotations(tmp_path / "n").columns


def test_languages_do_not_depend_on_partitions_and_survive_rethreshold(tmp_path, demo_frame):
    src = write_jsonl(tmp_path / "in.jsonl", [{"id": i, "text": t} for i, t in enumerate(demo_frame["text"][:800])])
    cfg = {**Q, "quality.languages": ["en", "ru"], "quality.min_language_score": 0.5}
    run([str(src)], tmp_path / "a", overrides=cfg)
    run([str(src)], tmp_path / "b", overrides={**cfg, "input.partition_bytes": 16 * 1024})
    a, b = read_annotations(tmp_path / "a"), read_annotations(tmp_path / "b")
    assert a.equals(b) and a["lang"].nunique() >= 4 and (~a["keep"]).any()
    assert main(["rethreshold", "--run", str(tmp_path / "a"), "--set", "fuzzy.threshold=0.9",
                 "--output", str(tmp_path / "r"), "-q"]) == 0
    r = read_annotations(tmp_path / "r")
    assert r["lang"].equals(a["lang"]) and r["lang_score"].equals(a["lang_score"])
    assert r.loc[r["drop_stage"] == "quality", "drop_reason"].equals(a.loc[a["drop_stage"] == "quality", "drop_reason"])


def test_language_errors_are_one_line(tmp_path, capsys, monkeypatch):
    src = write_jsonl(tmp_path / "in.jsonl", [{"id": 1, "text": "hello world"}])
    out = str(tmp_path / "o")
    assert main(["run", "-i", str(src), "--output", out, "-q", "--set", "quality.languages=[en,xx]"]) == 2
    assert "quality.languages: xx not among the model's 176 language codes" in capsys.readouterr().err
    assert main(["run", "-i", str(src), "--output", out, "-q", "--set", "quality.min_language_score=2"]) == 2
    assert "quality.min_language_score must be in [0, 1]" in capsys.readouterr().err
    assert main(["run", "-i", str(src), "--output", out, "-q", "--set", "quality.languages=[]"]) == 2
    capsys.readouterr()
    monkeypatch.setattr(language, "MODEL_RESOURCE", ("no_such_package_here", "x.ftz"))
    language.load_model.cache_clear()
    try:
        assert main(["run", "-i", str(src), "--output", out, "-q", "--set", "quality.languages=[en]"]) == 2
        assert "pip install 'gpucurate[lang]'" in capsys.readouterr().err
    finally:
        language.load_model.cache_clear()
    # an input column named like a language annotation clashes only when languages are identified
    clash = write_jsonl(tmp_path / "lang.jsonl", [{"id": 1, "text": "hello world", "lang": "en"}])
    assert main(["run", "-i", str(clash), "--output", out, "-q", "--set", "semantic.enabled=false"]) == 0
    assert main(["run", "-i", str(clash), "--output", out, "-q", "--set", "output.overwrite=true",
                 "--set", "quality.identify_language=true"]) != 0
    assert "lang" in capsys.readouterr().err


def test_a_model_file_that_is_not_fasttext_is_an_input_error(tmp_path):
    bad = tmp_path / "bad.ftz"
    bad.write_bytes(b"\0" * 64)
    with pytest.raises(Exception, match="not a fastText model file"):
        language.LanguageModel.read(str(bad))
    with pytest.raises(ConfigError):
        from gpucurate.config import load_config
        load_config(None, {"quality.languages": "en"})
