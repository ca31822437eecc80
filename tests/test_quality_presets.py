"""quality.preset: the English words datatrove counts (spaCy 3's tokenizer) and the values of its Gopher,
C4 and FineWeb filters, against what datatrove 0.10 and spaCy 3.8 give (recorded from them: the benchmark
environment has them, CI does not), and the presets in runs."""

import numpy as np
import pyarrow as pa
import pytest

from conftest import SHARED_DATA, read_annotations, write_jsonl
from gpucurate.cli import main
from gpucurate.kernels.words import PRESET_STATS, preset_stats, word_spans, word_tables
from gpucurate.stages.normalize import arrow_buffers
from gpucurate.stages.quality import PRESET_RULES
from gpucurate.workflows.run import run

nan = float("nan")
Q = {"run.progress": False, "semantic.enabled": False}

#: texts and spaCy's English tokens (datatrove's split_into_words) of each
TOKENS = [
    ("Shr 40 cts vs 35 cts, U.S. don't well-known 1986/87 $5 mln. dlrs.\nNew line...",
     ['Shr', '40', 'cts', 'vs', '35', 'cts', ',', 'U.S.', 'do', "n't", 'well', '-', 'known', '1986/87', '$', '5', 'mln', '.', 'dlrs', '.', 'New', 'line', '...']),
    ('“Quoted” — dash… emoji 🙂 x²+y² 50% $5 US$10 €3 10km 5kg 3.5GB 1,000',
     ['“', 'Quoted', '”', '—', 'dash', '…', 'emoji', '🙂', 'x²+y²', '50', '%', '$', '5', 'US$', '10', '€', '3', '10', 'km', '5', 'kg', '3.5', 'GB', '1,000']),
    ('e.g. U.S.A. http://x.com/a?b=c www.a.org a@b.com #tag @user (a) [b] {c}',
     ['e.g.', 'U.S.A.', 'http://x.com/a?b=c', 'www.a.org', 'a@b.com', '#', 'tag', '@user', '(', 'a', ')', '[', 'b', ']', '{', 'c', '}']),
    ('\'x\' "y" ‘z’ «w» 1-2 3+4 a/b and/or x:y a,b A.B a.B',
     ["'", 'x', "'", '"', 'y', '"', '‘', 'z', '’', '«', 'w', '»', '1', '-', '2', '3', '+', '4', 'a', '/', 'b', 'and/or', 'x', ':', 'y', 'a', ',', 'b', 'A.B', 'a.', 'B']),
    ("Mr. Smith's dog wasn't there; I'm sure they'll go, can't they? It's 5 o'clock... Wait—what?! Yes…no",
     ['Mr.', 'Smith', "'s", 'dog', 'was', "n't", 'there', ';', 'I', "'m", 'sure', 'they', "'ll", 'go', ',', 'ca', "n't", 'they', '?', 'It', "'s", '5', "o'clock", '...', 'Wait', '—', 'what', '?', '!', 'Yes', '…', 'no']),
    ('Dole (R-Kan.), said Oct/Dec. and Dedham, Mass.,-based cannot dont',
     ['Dole', '(', 'R', '-', 'Kan.', ')', ',', 'said', 'Oct', '/', 'Dec.', 'and', 'Dedham', ',', 'Mass.', ',-based', 'can', 'not', 'do', 'nt']),
    ('gnome-session.target partman-auto-recipe.txt bug-diffutils@gnu.org http.us.debian.org/debian',
     ['gnome-session.target', 'partman-auto-recipe.txt', 'bug-diffutils@gnu.org', 'http.us.debian.org/debian']),
    ('할인이 적용됩니다. 저희는 ISO ９００１. 提供 2019-12-08 의 (8) :) ):',
     ['할인이', '적용됩니다', '.', '저희는', 'ISO', '９００１.', '提供', '2019', '-', '12', '-', '08', '의', '(', '8)', ':)', '):']),
    ('CORP. Corp. Inc., co. 12a.m. 3pm 10°C. ----- a--b a---b x~y',
     ['CORP', '.', 'Corp.', 'Inc.', ',', 'co.', '12', 'a.m.', '3', 'pm', '10', '°', 'C', '.', '-----', 'a', '--', 'b', 'a', '---', 'b', 'x', '~', 'y']),
    ('',
     []),
    ('   \n\t  ',
     []),
]

#: texts and datatrove's values of each (kernels.words.PRESET_STATS order)
VALUES = [
    ('The cat sat on the mat with the dog and that was all. The cat sat on the mat with the dog and that was all. The cat sat on the mat with the dog and that was all. The cat sat on the mat with the dog and that was all. The cat sat on the mat with the dog and that was all. The cat sat on the mat with the dog and that was all. The cat sat on the mat with the dog and that was all. The cat sat on the mat with the dog and that was all. The cat sat on the mat with the dog and that was all. The cat sat on the mat with the dog and that was all. The cat sat on the mat with the dog and that was all. The cat sat on the mat with the dog and that was all. ',
     [156, 3.076923076923077, 0.0, 0.0, 0.0, 0.0, 0.9285714285714286, 4, 0.0, 0.0, 0.0, 0.0, 0.12962962962962962, 0.2037037037037037, 0.25925925925925924, 0.6790123456790124, 0.6790123456790124, 0.6959876543209876, 0.6898148148148148, 0.6944444444444444, 0.6790123456790124, 1, 0.0, 0.0, 0.0, 0.0, 12, 0.0, 0.0]),
    ('- item one\n- item two\n- item three\n• bullet\nplain line...\nanother …\n#tag #tag',
     [13, 4.0, 0.1, 0.1, 0.5714285714285714, 0.2857142857142857, 0.6, 0, 0.0, 0.0, 0.0, 0.0, 0.23376623376623376, 0.12987012987012986, 0.15584415584415584, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 7, 0.14285714285714285, 1.0, 0.0, 0.3, 0, 0.0, 0.0]),
    ('Same line here.\nSame line here.\nSame line here.\nOther line.\n\nPara one.\n\nPara one.\n\nPara two.',
     [17, 3.8823529411764706, 0.0, 0.0, 0.0, 0.0, 0.7083333333333334, 0, 0.25, 0.09782608695652174, 0.42857142857142855, 0.42391304347826086, 0.29347826086956524, 0.45652173913043476, 0.5217391304347826, 0.32608695652173914, 0.22826086956521738, 0.2717391304347826, 0.2826086956521739, 0.0, 0.0, 7, 1.0, 1.0, 0.46987951807228917, 0.375, 3, 0.0, 0.0]),
    ('Lorem ipsum dolor sit amet, consectetur adipiscing elit.\nThe second line ends here.',
     [13, 5.230769230769231, 0.0, 0.0, 0.0, 0.0, 0.8125, 0, 0.0, 0.0, 0.0, 0.0, 0.13253012048192772, 0.20481927710843373, 0.25301204819277107, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2, 1.0, 0.5, 0.0, 0.0625, 0, 1.0, 0.0]),
    ('This line has a {curly} bracket in it.\nAnother good line is here.',
     [13, 3.769230769230769, 0.0, 0.0, 0.0, 0.0, 0.7647058823529411, 0, 0.0, 0.0, 0.0, 0.0, 0.13846153846153847, 0.2, 0.23076923076923078, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2, 1.0, 0.5, 0.0, 0.058823529411764705, 0, 0.0, 1.0]),
    ('We use cookies on this site to improve it.\nPlease enable JavaScript to view this page.\nThe first real sentence is here. The second one follows it.\nA third line with text ends well.\nCited fact here [12]\nShort.\nA fine line that is kept! And another sentence? Yes indeed.',
     [50, 4.16, 0.0, 0.0, 0.0, 0.0, 0.8032786885245902, 3, 0.0, 0.0, 0.0, 0.0, 0.029850746268656716, 0.05223880597014925, 0.06343283582089553, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 7, 0.8571428571428571, 0.2857142857142857, 0.0, 0.09836065573770492, 6, 0.0, 0.0]),
    ('one two three four five one two three four five one two three four five six seven',
     [17, 3.823529411764706, 0.0, 0.0, 0.0, 0.0, 1.0, 0, 0.0, 0.0, 0.0, 0.0, 0.25925925925925924, 0.48148148148148145, 0.6666666666666666, 0.4691358024691358, 0.2716049382716049, 0.30864197530864196, 0.37037037037037035, 0.41975308641975306, 0.4691358024691358, 1, 0.0, 0.0, 0.0, 0.0, 0, 0.0, 0.0]),
    ('Short\nlines\nonly\nhere\n\n\nand more\n',
     [6, 4.166666666666667, 0.0, 0.0, 0.0, 0.0, 1.0, 1, 0.0, 0.0, 0.0, 0.0, 0.3333333333333333, 0.48484848484848486, 0.6363636363636364, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 5, 0.0, 1.0, 0.0, 1.1666666666666667, 0, 0.0, 0.0]),
    ('',
     [0, nan, nan, nan, nan, nan, nan, 0, 0.0, nan, 0.0, nan, 0.0, 0.0, 0.0, nan, nan, nan, nan, nan, nan, 0, nan, nan, nan, nan, 0, 0.0, 0.0]),
    ('no newline at all but many words in one line without terminal punctuation',
     [13, 4.6923076923076925, 0.0, 0.0, 0.0, 0.0, 1.0, 0, 0.0, 0.0, 0.0, 0.0, 0.136986301369863, 0.1780821917808219, 0.2328767123287671, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1, 0.0, 0.0, 0.0, 0.0, 0, 0.0, 0.0]),
]


#: datatrove 0.10.1's drops per rule on Reuters-21578 (benchmarks/bench_quality.py)
REUTERS_DROPS = {
    'gopher_short_doc': 3999,
    'gopher_long_doc': 0,
    'gopher_below_avg_threshold': 18,
    'gopher_above_avg_threshold': 0,
    'gopher_too_many_hashes': 0,
    'gopher_too_many_ellipsis': 5,
    'gopher_too_many_bullets': 0,
    'gopher_too_many_end_ellipsis': 1,
    'gopher_below_alpha_threshold': 4677,
    'gopher_enough_stop_words': 2688,
    'dup_para_frac': 0,
    'dup_para_char_frac': 0,
    'dup_line_frac': 5,
    'dup_line_char_frac': 8,
    'top_2_gram': 141,
    'top_3_gram': 345,
    'top_4_gram': 1138,
    'duplicated_5_n_grams': 41,
    'duplicated_6_n_grams': 35,
    'duplicated_7_n_grams': 33,
    'duplicated_8_n_grams': 32,
    'duplicated_9_n_grams': 27,
    'duplicated_10_n_grams': 29,
    'lorem_ipsum': 0,
    'curly_bracket': 1,
    'too_few_sentences': 13664,
    'empty': 0,
    'line_punct_ratio': 2349,
    'short_line_ratio': 673,
    'char_dup_ratio': 135,
    'list_ratio': 4,
}


def _tokens(texts):
    offsets, data = arrow_buffers(pa.array(texts, pa.large_string()))
    counts, starts, ends = word_spans(offsets, data, *word_tables().arrays())
    raw, out, t = data.tobytes(), [], 0
    for c in counts:
        out.append([raw[a:b].decode() for a, b in zip(starts[t:t + c], ends[t:t + c])])
        t += c
    return out


def test_words_are_spacys():
    texts, expected = zip(*TOKENS)
    assert _tokens(list(texts)) == list(expected)


def test_the_character_classes_come_from_the_cache_once_made(tmp_path, monkeypatch):
    from gpucurate.kernels import words
    monkeypatch.setenv("GPUCURATE_CACHE_DIR", str(tmp_path))
    made = words._character_flags()
    (saved,) = (tmp_path / "words").glob("flags-*.npz")
    assert (words._character_flags() == made).all() and (made == words._make_character_flags()).all()
    saved.write_bytes(b"not an npz")  # a damaged file is made again, and replaced
    assert (words._character_flags() == made).all()
    with np.load(saved) as again:
        assert (again["flags"] == made).all()


def test_a_table_that_cannot_be_saved_leaves_no_file(tmp_path, monkeypatch):
    from gpucurate.kernels import tables

    def full_disk(*args):
        raise OSError(28, "No space left on device")
    monkeypatch.setenv("GPUCURATE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tables.os, "replace", full_disk)
    (made,) = tables.cached_arrays("words", "t", ("a",), lambda: (np.arange(5),))
    assert made.tolist() == [0, 1, 2, 3, 4] and list((tmp_path / "words").iterdir()) == []


def test_a_repeated_chunk_splits_as_it_did_the_first_time():
    # the second and third times a chunk comes, its tokens come from the kernel's cache: seven of them at most
    # (a chunk of seven tokens fills the cache's slot), of at most 16 Latin-1 characters
    chunks = ['"a,b,c"', '"a,b,c,d"', "(U.S.)", "don't", "e.g.,", "1,000km", "x" * 16 + ".", "Grüße!", "日本語.", "-_-"]
    alone = _tokens(chunks)
    assert [len(t) for t in alone[:2]] == [7, 9]
    assert _tokens([" ".join(chunks * 3)]) == [[t for tokens in alone for t in tokens] * 3]


def test_values_are_datatroves():
    texts, expected = zip(*VALUES)
    offsets, data = arrow_buffers(pa.array(list(texts), pa.large_string()))
    got = preset_stats(offsets, data, *word_tables().stats_arrays())
    np.testing.assert_allclose(got, np.array(expected, float), rtol=1e-12, equal_nan=True)
    assert got.shape[1] == len(PRESET_STATS)


def test_presets_in_a_run(tmp_path):
    texts = [t for t, _ in VALUES] + ["A long enough text about markets. " * 30]
    src = write_jsonl(tmp_path / "in.jsonl", [{"id": i, "text": t} for i, t in enumerate(texts)])
    summary = run([str(src)], tmp_path / "o", overrides={**Q, "quality.preset": ["gopher", "c4", "fineweb"]})
    ann = read_annotations(tmp_path / "o").set_index("doc_id")
    quality = summary["stages"]["quality"]
    dropped = ann[ann["drop_stage"] == "quality"]
    assert quality["dropped"] == len(dropped) == sum(quality["by_rule"].values()) > 0
    names = {name for _, name, *_ in PRESET_RULES}
    assert set(quality["by_rule"]) <= names
    # the first failing rule in datatrove's order, with its value and limit
    assert ann.loc[len(texts) - 2, "drop_reason"].startswith("quality: gopher_short_doc")  # a text without words
    assert ann.loc[3, "drop_reason"] == f"quality: gopher_short_doc {VALUES[3][1][0]:g} < 50 (preset gopher)"
    assert all(r.startswith("quality: ") and "(preset " in r for r in dropped["drop_reason"])
    # one report per rule: its drops, the histogram of its value over the documents, the first dropped texts
    rules = {r["rule"]: r for r in quality["rules"]}
    assert set(rules) == names
    for name, r in rules.items():
        assert r["dropped"] == quality["by_rule"].get(name, 0)
        assert len(r["histogram"]["counts"]) == 40 and sum(r["histogram"]["counts"]) <= len(texts)
        ids = [x["doc_id"] for x in r["samples"]]
        assert len(ids) == min(3, r["dropped"])
        assert all(dropped.loc[int(i), "drop_reason"].startswith(f"quality: {name} ") for i in ids)
        assert all(texts[int(x["doc_id"])].startswith(x["text"]) for x in r["samples"])
    assert sum(rules["gopher_short_doc"]["histogram"]["counts"]) == len(texts)  # every text has a word count
    html = (tmp_path / "o" / "report.html").read_text()
    assert "<h2>Quality rules</h2>" in html and "<h3>gopher_short_doc (preset gopher)" in html
    run([str(src)], tmp_path / "c4", overrides={**Q, "quality.preset": ["c4"]})
    c4 = read_annotations(tmp_path / "c4").set_index("doc_id")
    assert c4.loc[3, "drop_reason"] == "quality: lorem_ipsum 1 > 0.5 (preset c4)"
    assert c4.loc[4, "drop_reason"] == "quality: curly_bracket 1 > 0.5 (preset c4)"
    sentences = PRESET_STATS.index("c4_sentences")
    assert VALUES[0][1][sentences] >= 5 and c4.loc[0, "keep"] and VALUES[5][1][sentences] >= 5 and c4.loc[5, "keep"]
    assert c4.loc[1, "drop_reason"] == f"quality: too_few_sentences {VALUES[1][1][sentences]:g} < 5 (preset c4)"
    # the same decisions whatever the partitions
    run([str(src)], tmp_path / "p", overrides={**Q, "quality.preset": ["gopher", "c4", "fineweb"],
                                                "input.partition_bytes": 1024})
    assert read_annotations(tmp_path / "p").equals(read_annotations(tmp_path / "o"))


def test_preset_limits_change_a_rule_s_limit_or_turn_it_off(tmp_path):
    texts = ["A long enough text about markets. " * 30, "Too short a text here.", "word word word word word " * 20]
    src = write_jsonl(tmp_path / "in.jsonl", [{"id": i, "text": t} for i, t in enumerate(texts)])
    limits = {"gopher_short_doc": 3, "gopher_enough_stop_words": None, "top_2_gram": 0.5}
    summary = run([str(src)], tmp_path / "o", overrides={**Q, "quality.preset": ["gopher"],
                                                           "quality.preset_limits": limits})
    stats = preset_stats(*arrow_buffers(pa.array(texts, pa.large_string())), *word_tables().stats_arrays())
    top2 = stats[2, PRESET_STATS.index("top_2_gram")]
    assert stats[1, PRESET_STATS.index("gopher_words")] == 5 and top2 > 0.5
    reasons = read_annotations(tmp_path / "o").set_index("doc_id")["drop_reason"]
    # 5 words pass a limit of 3 (the default is 50), no stop word is no longer a reason, a limit of 0.5
    assert not reasons[1].startswith("quality: gopher_short_doc") and "stop_words" not in "".join(reasons)
    assert reasons[2] == f"quality: top_2_gram {top2:.4g} > 0.5 (preset gopher)"
    rules = {r["rule"]: r for r in summary["stages"]["quality"]["rules"]}
    assert "gopher_enough_stop_words" not in rules
    assert (rules["gopher_short_doc"]["fails_when"], rules["top_2_gram"]["limit"]) == ("< 3", 0.5)
    assert rules["top_3_gram"]["limit"] == 0.18  # the others keep datatrove's


@pytest.mark.parametrize("value, says", [("{nope: 3}", "no such rule"), ("{too_few_sentences: 3}", "preset c4"),
                                         ("{top_2_gram: high}", "a number or null"), ("[1]", "a mapping")])
def test_a_bad_preset_limit_is_one_line(tmp_path, capsys, value, says):
    src = write_jsonl(tmp_path / "in.jsonl", [{"id": 1, "text": "hello"}])
    assert main(["run", "-i", str(src), "--output", str(tmp_path / "o"), "-q", "--set", "quality.preset=[gopher]",
                 "--set", f"quality.preset_limits={value}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "quality.preset_limits" in err and says in err


@pytest.mark.parametrize("value", ["gopher", "[gopher,nope]", "[]"])
def test_a_bad_preset_is_one_line(tmp_path, capsys, value):
    src = write_jsonl(tmp_path / "in.jsonl", [{"id": 1, "text": "hello"}])
    assert main(["run", "-i", str(src), "--output", str(tmp_path / "o"), "-q", "--set", f"quality.preset={value}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "quality.preset" in err


@pytest.mark.realdata
def test_reuters_decisions_equal_datatroves_recorded_counts():
    """On Reuters-21578 (19,043 bodies) every rule drops as many documents as datatrove's filter (each rule
    alone; recorded with benchmarks/bench_quality.py)."""
    import gzip
    import json
    path = SHARED_DATA / "reuters21578" / "reuters21578.jsonl.gz"
    with gzip.open(path, "rt") as fh:
        texts = [r["body"] for r in map(json.loads, fh) if r.get("body")]
    offsets, data = arrow_buffers(pa.array(texts, pa.large_string()))
    stats = preset_stats(offsets, data, *word_tables().stats_arrays())
    counts = {}
    for _, name, stat, op, limit in PRESET_RULES:
        col = stats[:, PRESET_STATS.index(stat)]
        counts[name] = int((col < limit).sum() if op == "<" else (col > limit).sum())
    assert counts == REUTERS_DROPS
