"""Tests for the built-in synthetic demo corpus (gpucurate.generators.demo)."""

from __future__ import annotations

import gzip
import itertools
import json
import re
import time
import unicodedata

import numpy as np
import pandas as pd
import pytest

from gpucurate.generators.demo import COLUMNS, KIND_FRACTIONS, generate_corpus, write_demo_corpus

CYRILLIC = re.compile(r"[\u0400-\u04FF]")
HANGUL = re.compile(r"[\uAC00-\uD7A3]")
HAN_OR_KANA = re.compile(r"[\u3040-\u30FF\u4E00-\u9FFF]")
TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")


def shingles(text: str, k: int = 5) -> set[str]:
    words = text.lower().split()
    return {" ".join(words[i:i + k]) for i in range(len(words) - k + 1)}


def jaccard(a: str, b: str) -> float:
    sa, sb = shingles(a), shingles(b)
    return len(sa & sb) / len(sa | sb) if sa | sb else 1.0


def normalized(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).lower().split())


@pytest.fixture(scope="module")
def corpus() -> pd.DataFrame:
    return generate_corpus(3000, seed=0, include_kind=True)


def test_columns_size_and_ids(corpus):
    assert list(corpus.columns) == COLUMNS + ["kind"]
    assert len(corpus) == 3000
    assert corpus["id"].is_unique
    assert corpus["id"].str.fullmatch(r"doc-\d{6}").all()
    assert isinstance(corpus.index, pd.RangeIndex)
    for column in COLUMNS:
        assert all(isinstance(value, str) for value in corpus[column])
    assert set(corpus["true_cluster"]) <= set(corpus["id"])
    assert list(generate_corpus(50).columns) == COLUMNS          # no "kind" column by default


@pytest.mark.parametrize("n_docs", [0, 1, 2, 7, 10, 37, 101, 1234])
def test_requested_size(n_docs):
    df = generate_corpus(n_docs, seed=5)
    assert len(df) == n_docs
    assert df["id"].is_unique
    assert set(df["true_cluster"]) <= set(df["id"])


def test_rejects_negative_size():
    with pytest.raises(ValueError):
        generate_corpus(-1)


def test_deterministic():
    a = generate_corpus(1500, seed=3, include_kind=True)
    b = generate_corpus(1500, seed=3, include_kind=True)
    pd.testing.assert_frame_equal(a, b)
    c = generate_corpus(1500, seed=4, include_kind=True)
    assert not a["text"].equals(c["text"])
    assert len(set(a["text"]) & set(c[c["kind"] == "unique"]["text"])) == 0


def test_kind_mix(corpus):
    counts = corpus["kind"].value_counts().to_dict()
    for kind, fraction in KIND_FRACTIONS.items():
        assert counts[kind] == int(fraction * 3000)
    assert 0.38 <= counts["unique"] / 3000 <= 0.45


def test_languages_and_scripts(corpus):
    langs = set(corpus["lang"])
    assert {"en", "ru", "ko", "de", "zh", "ja"} <= langs
    texts = corpus.groupby("lang")["text"].apply(list)
    assert all(CYRILLIC.search(t) for t in texts["ru"] if t.strip())
    assert all(HANGUL.search(t) for t in texts["ko"] if t.strip())
    assert all(re.search(r"[äöüßÄÖÜ]", t) for t in texts["de"] if len(t.split()) > 40)
    for lang in ("zh", "ja"):
        long = [t for t in texts[lang] if len(t) > 50]
        assert long and all(HAN_OR_KANA.search(t) and " " not in t for t in long)
    unique = corpus[corpus["kind"] == "unique"]
    assert unique["lang"].value_counts(normalize=True)["en"] > 0.35


def test_unique_documents_look_like_prose(corpus):
    unique = corpus[corpus["kind"] == "unique"]
    words = unique["text"].str.split().str.len()
    assert words.min() >= 60 and words.max() <= 440
    assert unique["text"].str.contains("\n\n").mean() > 0.8      # paragraphs separated by blank lines
    sample = unique["text"].tolist()[:200]
    assert max(jaccard(a, b) for a, b in zip(sample, sample[1:])) < 0.3


def test_exact_duplicates(corpus):
    nonempty = corpus[corpus["text"].str.strip() != ""]
    norm = nonempty["text"].map(normalized)
    groups = nonempty.groupby(norm)
    sizes = groups.size()
    assert (sizes >= 2).sum() > 100
    # ground truth is consistent: texts equal after normalization always share a cluster
    assert (groups["true_cluster"].nunique() == 1).all()
    # some copies differ only in case / whitespace / full-width digits / NBSP
    raw_variants = groups["text"].nunique()
    assert (raw_variants > 1).sum() > 20
    exact = corpus[corpus["kind"] == "exact"]
    assert exact["text"].str.contains("\u00a0").any()
    assert exact["text"].str.contains("[\uff10-\uff19]").any()
    by_cluster = corpus.assign(norm=corpus["text"].map(normalized)).groupby("true_cluster")["norm"].apply(list)
    for text, cluster in zip(exact["text"], exact["true_cluster"]):
        assert by_cluster[cluster].count(normalized(text)) >= 2


def test_template_copies_are_near_duplicates(corpus):
    template = corpus[corpus["kind"] == "template"]
    sizes = template.groupby("true_cluster").size()
    assert sizes.min() >= 2 and sizes.max() <= 30 and len(sizes) > 50
    assert {"en", "ru", "ko"} <= set(template["lang"])
    scores = []
    for _, group in template.groupby("true_cluster"):
        texts = group["text"].tolist()[:12]
        scores += [jaccard(a, b) for a, b in itertools.combinations(texts, 2)]
    scores = np.array(scores)
    assert (scores >= 0.8).mean() > 0.6                           # most pairs are close copies
    assert np.median(scores) >= 0.8
    assert (scores < 0.7).mean() > 0.02                           # but some copies were edited more
    assert (scores < 1.0).all()                                   # every copy changed something


def test_near_copies(corpus):
    text_of = dict(zip(corpus["id"], corpus["text"]))
    near = corpus[corpus["kind"] == "near"]
    scores = np.array([jaccard(text, text_of[root]) for text, root in zip(near["text"], near["true_cluster"])])
    assert (near["text"] != near["true_cluster"].map(text_of)).all()
    assert scores.min() > 0.4 and np.median(scores) > 0.7
    cjk = corpus[(corpus["kind"] == "cjk") & (corpus["id"] != corpus["true_cluster"])]
    assert len(cjk) > 0
    for text, root in zip(cjk["text"], cjk["true_cluster"]):
        original = text_of[root]
        assert text != original and abs(len(text) - len(original)) < 0.1 * len(original)


def test_short_and_empty(corpus):
    words = corpus["text"].str.split().str.len()
    assert ((words > 0) & (words < 5)).sum() >= 200
    empty = corpus[corpus["text"] == ""]
    assert 1 <= len(empty) <= 30 and empty["true_cluster"].nunique() == 1


def test_timestamps(corpus):
    assert corpus["timestamp"].str.match(TIMESTAMP.pattern).all()
    stamps = pd.to_datetime(corpus["timestamp"], utc=True)
    assert stamps.dt.year.nunique() >= 5
    ts_of = dict(zip(corpus["id"], stamps))
    copies = corpus[(corpus["id"] != corpus["true_cluster"]) & corpus["kind"].isin(["template", "exact", "near"])]
    assert len(copies) > 1000
    assert all(stamps[i] > ts_of[root] for i, root in zip(copies.index, copies["true_cluster"]))


def test_rows_are_shuffled(corpus):
    position = corpus.reset_index().groupby("true_cluster")["index"].agg(["min", "max", "size"])
    big = position[position["size"] >= 5]
    assert ((big["max"] - big["min"]) > 10 * big["size"]).mean() > 0.8


@pytest.mark.parametrize("fmt", ["jsonl", "jsonl.gz", "parquet"])
def test_write_demo_corpus_round_trips(tmp_path, fmt):
    paths = write_demo_corpus(tmp_path / "out", n_docs=400, seed=2, n_shards=3, fmt=fmt)
    assert [p.rsplit("/", 1)[-1] for p in paths] == [f"part-{i:03d}.{fmt}" for i in range(3)]
    if fmt == "parquet":
        parts = [pd.read_parquet(p) for p in paths]
    else:
        parts = [pd.read_json(p, lines=True, dtype=False) for p in paths]
    assert [len(p) for p in parts] == [134, 133, 133]
    pd.testing.assert_frame_equal(pd.concat(parts, ignore_index=True), generate_corpus(400, seed=2))


def test_jsonl_is_utf8_without_escapes(tmp_path):
    (path,) = write_demo_corpus(tmp_path, n_docs=300, seed=0, n_shards=1)
    with open(path, encoding="utf-8") as fh:
        raw = fh.read()
    assert "\\u04" not in raw and CYRILLIC.search(raw) and HANGUL.search(raw)
    records = [json.loads(line) for line in raw.splitlines()]
    assert len(records) == 300 and set(records[0]) == set(COLUMNS)


def test_gzip_output_is_reproducible(tmp_path):
    first = write_demo_corpus(tmp_path / "a", n_docs=200, n_shards=2, fmt="jsonl.gz")
    second = write_demo_corpus(tmp_path / "b", n_docs=200, n_shards=2, fmt="jsonl.gz")
    for a, b in zip(first, second):
        with open(a, "rb") as fa, open(b, "rb") as fb:
            assert fa.read() == fb.read()
        with gzip.open(a, "rt", encoding="utf-8") as fh:
            assert fh.readline().startswith('{"id": "doc-')


def test_write_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError):
        write_demo_corpus(tmp_path, n_docs=10, fmt="csv")
    with pytest.raises(ValueError):
        write_demo_corpus(tmp_path, n_docs=10, n_shards=0)


def test_generation_is_fast():
    start = time.perf_counter()
    df = generate_corpus(20_000, seed=1)
    assert len(df) == 20_000
    assert time.perf_counter() - start < 15
