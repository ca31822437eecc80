"""Quality and contamination gates: kernels against plain Python, and the gates in the pipeline."""

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from conftest import read_annotations, write_jsonl
from gpucurate.cli import main
from gpucurate.config import load_config
from gpucurate.errors import ConfigError
from gpucurate.kernels import gates
from gpucurate.kernels.hashing import padded_words
from gpucurate.workflows.run import run
from gpucurate.stages.contamination import MATCH_NORMALIZE, parse_benchmarks, strip_spans
from gpucurate.stages.normalize import arrow_buffers, normalize

Q = {"run.progress": False}


def stats_of(texts):
    offsets, data = arrow_buffers(pa.array(texts, pa.large_string()))
    return [dict(zip(gates.QUALITY_STATS, row)) for row in gates.quality_stats(offsets, data, padded_words(data))]


def reference_stats(text):
    """Plain-Python version of the quality statistics (same definitions as the kernel)."""
    words = text.replace("\u00a0", " ").split()
    lines = [ln.strip() for ln in text.split("\n") if ln.strip()]
    out = {"words": len(words), "mean_word_length": np.mean([len(w) for w in words]) if words else 0.0,
           "symbol_word_ratio": (text.count("#") + text.count("...") + text.count("\u2026")) / len(words)
           if words else 0.0,
           "ellipsis_line_fraction": sum(ln.endswith(("...", "\u2026")) for ln in lines) / len(lines) if lines else 0,
           "bullet_line_fraction": sum(ln.startswith(("-", "*", "\u2022", "\u2023", "\u25e6", "\u25aa", "\u25cf"))
                                       for ln in lines) / len(lines) if lines else 0,
           "duplicate_line_fraction": (len(lines) - len(set(lines))) / len(lines) if lines else 0,
           "alpha_word_fraction": sum(any(c.isascii() and c.isalpha() or not c.isascii() for c in w)
                                      for w in words) / len(words) if words else 0.0}
    chars = sum(len(w) for w in words)
    for n in (2, 3, 4):
        grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
        counts = pd.Series(grams, dtype=object).value_counts(sort=False) if grams else pd.Series(dtype=int)
        best = counts.max() if len(counts) else 0
        if best >= 2:
            top = next(g for g in grams if counts[g] == best)  # first in text order among the most frequent
            out[f"top_{n}gram_fraction"] = min(1.0, best * sum(len(w) for w in top) / chars)
        else:
            out[f"top_{n}gram_fraction"] = 0.0
    return out


QUALITY_TEXTS = [
    "Hello world hello world hello world",
    "line one...\nline two\u2026\n- bullet\n\u2022 bullet two\nline one...\n\n",
    "",
    "# tag # tag ... end",
    "Привет мир, как дела? Всё хорошо.\u00a0Да",
    "12 34 56 !!! ??",
    "the cat sat on the mat the cat sat on the mat the cat sat",
]


@pytest.mark.parametrize("text", QUALITY_TEXTS)
def test_quality_stats_match_reference(text):
    got = stats_of([text])[0]
    ref = reference_stats(text)
    for key, value in ref.items():
        assert got[key] == pytest.approx(value, abs=1e-9), key


def test_quality_rules_in_the_pipeline(tmp_path):
    good = "the annual report describes steady growth in every region and a plan for next year"
    records = [{"id": 1, "text": good}, {"id": 2, "text": "too short"}, {"id": 3, "text": "too short"},
               {"id": 4, "text": "buy now " * 20}, {"id": 5, "text": good}]
    src = write_jsonl(tmp_path / "q.jsonl", records)
    summary = run([str(src)], tmp_path / "out", overrides={
        **Q, "quality.min_words": 5, "quality.max_top_2gram_fraction": 0.3})
    ann = read_annotations(tmp_path / "out").set_index("doc_id")
    assert ann.loc[2].drop_stage == "quality" and not ann.loc[2].keep
    assert ann.loc[2].drop_reason == "quality: word_count 2 < min_words 5"
    # quality failures take no part in dedup: the identical texts 2 and 3 are both their own canonical
    assert ann.loc[3].drop_stage == "quality" and ann.loc[3].dedup_id == 3 and ann.loc[3].is_canonical
    assert ann.loc[4].drop_reason.startswith("quality: top_2gram 1 > max_top_2gram_fraction 0.3")
    assert ann.loc[1].keep and ann.loc[5].drop_stage == "exact" and ann.loc[5].dedup_id == 1
    assert ann.loc[[2, 3, 4]].weight.eq(0).all()
    q = summary["stages"]["quality"]
    assert q["dropped"] == 3 and q["by_rule"] == {"min_words": 2, "max_top_2gram_fraction": 1}
    assert summary["stages"]["exact"]["duplicates"] == 1 and summary["documents_kept"] == 1


def test_web_crawl_config_and_fuzzy_min_length(tmp_path):
    cfg = load_config("configs/web-crawl.yaml")
    assert cfg.quality.min_words == 50 and cfg.fuzzy.min_length == 50
    base = "alpha beta gamma delta epsilon zeta eta theta iota kappa"
    records = [{"id": 1, "text": base}, {"id": 2, "text": base + " lambda"}]
    src = write_jsonl(tmp_path / "f.jsonl", records)
    run([str(src)], tmp_path / "a", overrides={**Q, "fuzzy.threshold": 0.5})
    assert read_annotations(tmp_path / "a").set_index("doc_id").loc[2].drop_stage == "fuzzy"
    summary = run([str(src)], tmp_path / "b", overrides={**Q, "fuzzy.threshold": 0.5, "fuzzy.min_length": 20})
    assert read_annotations(tmp_path / "b").keep.all() and summary["stages"]["fuzzy"]["documents"] == 0


# --- contamination -------------------------------------------------------------------------------------

ITEMS = [
    {"question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
                 "How many clips did Natalia sell altogether in April and May?",
     "answer": "Natalia sold 48/2 = 24 clips in May. Natalia sold 48+24 = 72 clips altogether. #### 72"},
    {"question": "Сколько будет два плюс два?", "answer": "Четыре."},  # shorter than 13 words
    {"question": "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. "
                 "How much did she earn?", "answer": "Weng earns 12/60 = $0.2 per minute. She earned $10. #### 10"},
]
NEWS = ("The central bank kept its key rate unchanged on Thursday, saying inflation was moving back toward its "
        "target while growth in the region remained uneven across the larger economies. ") * 4


def item_text(i):
    return ITEMS[i]["question"] + "\n" + ITEMS[i]["answer"]


@pytest.fixture
def bench_file(tmp_path):
    return write_jsonl(tmp_path / "bench.jsonl", ITEMS)


def bench_overrides(path, **more):
    return {**Q, "contamination.benchmarks": [{"name": "mini", "path": str(path), "fields": ["question", "answer"]}],
            **{f"contamination.{k}": v for k, v in more.items()}}


def test_ngram_kernels_match_reference():
    texts = ["The cat, sat on the MAT!", "short", "", "один два три четыре"]
    norm = normalize(pa.array(texts), MATCH_NORMALIZE)
    assert norm.to_pylist() == ["the cat sat on the mat", "short", "", "один два три четыре"]
    offsets, data = arrow_buffers(norm)
    doc, hashes, length = gates.ngram_hashes(offsets, data, padded_words(data), 3)
    expected = []
    for d, t in enumerate(norm.to_pylist()):
        w = [x.encode() for x in t.split(" ") if x]
        m = min(3, len(w))
        expected += [(d, gates.reference_ngram_hash(w[i:i + m]), m) for i in range(len(w) - m + 1)] if w else []
    assert list(zip(doc.tolist(), hashes.tolist(), length.tolist())) == expected
    table = np.sort(hashes[doc == 3])
    rows, where, s, e = gates.ngram_matches(offsets, data, padded_words(data), np.array([3]), table)
    assert rows.tolist() == [3, 3] and (table[where] == hashes[doc == 3]).all()
    assert data[s[0]:e[0]].tobytes().decode() == "один два три"


def test_contamination_flag_report_and_unicode(tmp_path, bench_file):
    records = [
        {"id": "clean", "text": NEWS},
        {"id": "verbatim", "text": item_text(0)},
        {"id": "embedded", "text": NEWS + " " + item_text(2).upper() + " " + NEWS},  # case changes
        {"id": "short-item", "text": "Вопрос дня: СКОЛЬКО будет два-плюс-два?! ЧЕТЫРЕ. Конец."},  # < 13 words
        {"id": "partial", "text": "Natalia sold clips to 48 of her friends in April and then"},  # 12 words only
    ]
    src = write_jsonl(tmp_path / "docs.jsonl", records)
    summary = run([str(src)], tmp_path / "out", overrides=bench_overrides(bench_file))
    ann = read_annotations(tmp_path / "out").set_index("doc_id")
    assert ann.contaminated.to_dict() == {"clean": False, "embedded": True, "partial": False, "short-item": True,
                                          "verbatim": True}
    assert ann.keep.all(), "flag does not drop"
    assert ann.loc["short-item"].contamination.startswith("mini:bench.jsonl:2 (")
    report = json.loads((tmp_path / "out" / "contamination_report.json").read_text())["benchmarks"]["mini"]
    assert report["items"] == 3 and report["items_found"] == 3 and report["contaminated_documents"] == 3
    hits = {h["doc_id"]: h for h in report["hits"]}
    assert hits["embedded"]["item_id"] == "bench.jsonl:3"
    assert "weng earns $12 an hour" in hits["embedded"]["matched_text"]
    assert hits["short-item"]["matched_text"] == "сколько будет два плюс два четыре"
    assert summary["stages"]["contamination"]["contaminated_documents"] == 3


def test_contaminated_duplicates_are_checked_and_drop(tmp_path, bench_file):
    records = [{"id": 1, "text": NEWS + item_text(0)}, {"id": 2, "text": NEWS + item_text(0)},
               {"id": 3, "text": NEWS}]
    src = write_jsonl(tmp_path / "docs.jsonl", records)
    run([str(src)], tmp_path / "out", overrides=bench_overrides(bench_file, action="drop"))
    ann = read_annotations(tmp_path / "out").set_index("doc_id")
    assert ann.loc[1].drop_stage == "contamination" and not ann.loc[1].keep
    assert ann.loc[1].drop_reason.startswith("contaminated: mini:bench.jsonl:1")
    assert ann.loc[2].drop_stage == "exact" and ann.loc[2].contaminated, "a dropped duplicate is still checked"
    assert ann.loc[3].keep and not ann.loc[3].contaminated


def test_strip_keeps_the_uncontaminated_remainder(tmp_path, bench_file):
    prefix = "Quarterly results were published today by the board of directors after a long meeting. " * 5
    suffix = " Analysts expect the shares to open higher on Monday morning in all the main markets." * 5
    records = [{"id": 1, "text": prefix + item_text(0) + suffix}, {"id": 2, "text": "Intro. " + item_text(2)}]
    src = write_jsonl(tmp_path / "docs.jsonl", records)
    run([str(src)], tmp_path / "out", overrides=bench_overrides(bench_file, action="strip", strip_window=10,
                                                                  strip_min_chars=100))
    ann = read_annotations(tmp_path / "out").set_index("doc_id")
    stripped = ann.loc[1].stripped_text
    assert ann.loc[1].keep and "clips" not in stripped and "Natalia" not in stripped
    assert stripped.startswith(prefix[:len(prefix) - 11]) and stripped.endswith(suffix[11:])
    assert len(stripped) >= len(prefix) + len(suffix) - 2 * 10 - 2
    assert ann.loc[1].text == prefix + item_text(0) + suffix, "the stored text is never changed"
    # nothing long enough is left of document 2: dropped, with the reason
    assert not ann.loc[2].keep and ann.loc[2].drop_stage == "contamination"
    assert "characters left after strip < strip_min_chars 100" in ann.loc[2].drop_reason


def test_strip_spans_maps_back_to_the_original_text():
    from gpucurate.kernels.gates import reference_ngram_hash
    table = np.array(sorted([reference_ngram_hash([b"zwei", b"drei"])]), np.uint64)
    text, removed, _ = strip_spans("Eins, ZWEI — drei; vier", table, np.array([2]), window=0)
    assert removed == 1 and text == "Eins, ; vier"


def test_common_ngrams_and_min_matches(tmp_path, bench_file):
    common = item_text(1)  # the short item, planted in many documents
    records = [{"id": i, "text": f"document {i} says: {common}"} for i in range(5)]
    records.append({"id": 9, "text": NEWS + item_text(0)})
    src = write_jsonl(tmp_path / "docs.jsonl", records)
    summary = run([str(src)], tmp_path / "out", overrides=bench_overrides(bench_file, max_doc_frequency=3))
    ann = read_annotations(tmp_path / "out").set_index("doc_id")
    assert not ann.loc[[0, 1, 2, 3, 4]].contaminated.any() and ann.loc[9].contaminated
    assert summary["stages"]["contamination"]["ignored_common_ngrams"] == 1
    # about one document a partition: the documents of an n-gram are counted across partitions
    padded = [dict(r, text=r["text"] + " " + " ".join(f"w{r['id']}x{k}" for k in range(150))) for r in records]
    over = dict(bench_overrides(bench_file, max_doc_frequency=3), **{"input.partition_bytes": 1024})
    whole = run([str(write_jsonl(tmp_path / "padded.jsonl", padded))], tmp_path / "whole",
                overrides=bench_overrides(bench_file, max_doc_frequency=3))
    split = run([str(tmp_path / "padded.jsonl")], tmp_path / "split", overrides=over)
    assert split["stages"]["input"]["partitions"] >= 5 and whole["stages"]["input"]["partitions"] == 1
    assert split["stages"]["contamination"]["ignored_common_ngrams"] == 1
    pd.testing.assert_frame_equal(read_annotations(tmp_path / "split"), read_annotations(tmp_path / "whole"))
    assert not read_annotations(tmp_path / "split").set_index("doc_id").loc[[0, 1, 2, 3, 4]].contaminated.any()
    # one shared 13-gram is not enough when two are required
    one_gram = " ".join(item_text(0).split()[:13])
    src2 = write_jsonl(tmp_path / "d2.jsonl", [{"id": 1, "text": one_gram}, {"id": 2, "text": item_text(0)}])
    run([str(src2)], tmp_path / "o2", overrides=bench_overrides(bench_file, min_matches=2))
    ann2 = read_annotations(tmp_path / "o2").set_index("doc_id")
    assert not ann2.loc[1].contaminated and ann2.loc[2].contaminated


def test_benchmark_errors_are_clear(tmp_path, capsys):
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"question": "q one", "answer": "a"}, {"question": "q two"}])
    src = write_jsonl(tmp_path / "docs.jsonl", [{"id": 1, "text": "hello"}])
    code = main(["run", "--input", str(src), "--output", str(tmp_path / "o"), "--no-progress", "-q",
                 "--set", "contamination.benchmarks=['gsm=" + str(bad) + ":question,answer']"])
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1
    assert "bad.jsonl:2" in err and "answer" in err and "missing field" in err
    with pytest.raises(ConfigError, match="fields"):
        parse_benchmarks([{"name": "x", "path": "p"}])
    with pytest.raises(ConfigError, match="unique"):
        parse_benchmarks(["a=p:q", "a=r:q"])
    assert parse_benchmarks(["gsm=dir/test.jsonl:question,answer"])[0].fields == ("question", "answer")


def test_benchmark_directory_and_parquet(tmp_path):
    folder = tmp_path / "benches"
    folder.mkdir()
    pd.DataFrame(ITEMS[:1]).to_parquet(folder / "a.parquet")
    write_jsonl(folder / "b.jsonl", ITEMS[2:])
    src = write_jsonl(tmp_path / "docs.jsonl", [{"id": 1, "text": item_text(0)}, {"id": 2, "text": item_text(2)},
                                               {"id": 3, "text": NEWS}])
    summary = run([str(src)], tmp_path / "out", overrides=bench_overrides(folder))
    assert summary["stages"]["contamination"]["items"] == 2
    ann = read_annotations(tmp_path / "out").set_index("doc_id")
    assert ann.contaminated.tolist() == [True, True, False]


def test_gates_do_not_depend_on_partitioning(tmp_path, bench_file, demo_frame):
    records = demo_frame.head(300).to_dict(orient="records")
    records[10]["text"] = NEWS + item_text(0)
    records[200]["text"] = item_text(2) + " " + NEWS
    src = write_jsonl(tmp_path / "docs.jsonl", records)
    over = bench_overrides(bench_file, action="strip", strip_window=5, strip_min_chars=10)
    over.update({"quality.min_words": 8, "quality.max_top_3gram_fraction": 0.3})
    run([str(src)], tmp_path / "one", overrides=over)
    run([str(src)], tmp_path / "many", overrides={**over, "input.partition_bytes": 4096, "run.workers": 1})
    one, many = read_annotations(tmp_path / "one"), read_annotations(tmp_path / "many")
    pd.testing.assert_frame_equal(one, many)
    assert one.contaminated.sum() == 2 and (one.drop_stage == "quality").sum() > 0
    assert (tmp_path / "one" / "contamination_report.json").read_text() == \
        (tmp_path / "many" / "contamination_report.json").read_text()
