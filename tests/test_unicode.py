"""Normalization over the whole of Unicode: the compiled path (``text.normalize``) against the plain-Python
reference, Greek final sigma, and what it means for exact duplicates."""

import sys
import unicodedata

import numpy as np
import pyarrow as pa
import pytest

import gpucurate
from gpucurate.config import NormalizeConfig
from gpucurate.kernels.hashing import padded_words
from gpucurate.kernels.minhash import text_hashes
from gpucurate.stages.contamination import MATCH_NORMALIZE, strip_spans
from gpucurate.stages.normalize import arrow_buffers, normalize, reference_lower, reference_normalize

from conftest import read_annotations, write_jsonl

CODE_POINTS = [c for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF]


def _disagreements(texts: list[str]) -> list[int]:
    got = normalize(pa.array(texts, pa.large_string())).to_pylist()
    return [i for i, (t, g) in enumerate(zip(texts, got)) if g != reference_normalize(t)]


def _unassigned(ch: str) -> bool:
    """Unassigned in Python's Unicode database (pyarrow's utf8proc may know it: a newer Unicode)."""
    return all(unicodedata.category(c) == "Cn" for c in ch)


def test_every_code_point_agrees_with_the_reference():
    chars = [chr(c) for c in CODE_POINTS]
    bad = [chars[i] for i in _disagreements(chars)]
    # only characters newer than Python's Unicode database may differ (the reference leaves them alone)
    assert [f"U+{ord(c):04X}" for c in bad if not _unassigned(c)] == [], unicodedata.unidata_version
    assert len(bad) < 1000


def _cased() -> list[str]:
    return [chr(c) for c in CODE_POINTS if chr(c).lower() != chr(c) or chr(c).upper() != chr(c)
            or unicodedata.category(chr(c)) == "Lt"]


def test_final_sigma_contexts_for_every_cased_code_point():
    cased = [c for c in _cased() if not _unassigned(c)]
    assert len(cased) > 2500
    # final position, medial, initial, after case-ignorable marks, before punctuation and digits
    patterns = ["{c}Σ", "Σ{c}", "{c}Σ{c}", "{c}Σ {c}", "{c}\u0301Σ", "{c}'Σ", "{c}Σ.", "{c}Σ1", "{c}ς",
                "{c}σ"]
    texts = [p.format(c=c) for c in cased for p in patterns]
    assert _disagreements(texts) == []
    got = normalize(pa.array(texts, pa.large_string())).to_pylist()
    assert not any("ς" in g for g in got)


@pytest.mark.parametrize("a,b", [("ΟΔΟΣ ΚΟΣΜΟΣ", "οδος κοσμος"), ("ΟΔΟΣ ΚΟΣΜΟΣ", "οδοσ κοσμοσ"),
                                 ("Ὀδυσσεύς", "ὈΔΥΣΣΕΎΣ"), ("İstanbul", "istanbul"), ("𝚺𝚺", "σς")])
def test_spellings_that_normalize_alike(a, b):
    got = normalize(pa.array([a, b])).to_pylist()
    assert got[0] == got[1] == reference_normalize(a) == reference_normalize(b)
    offsets, data = arrow_buffers(normalize(pa.array([a, b])))
    h = text_hashes(offsets, padded_words(data))
    assert h[0] == h[1]


def test_final_sigma_kept_without_lowercase_and_sliced_arrays():
    arr = pa.array(["x", None, "ΟΔΟΣ ς", "λόγος"], pa.large_string())
    assert normalize(arr, NormalizeConfig(lowercase=False)).to_pylist() == ["x", "", "ΟΔΟΣ ς", "λόγος"]
    assert normalize(arr.slice(2)).to_pylist() == ["οδοσ σ", "λόγοσ"]
    assert arr.to_pylist()[2] == "ΟΔΟΣ ς"  # the input buffers are never written
    assert normalize(pa.array(["no greek here"])).to_pylist() == ["no greek here"]
    assert reference_lower("ΣΑΣ") == "σασ"


def test_contamination_strip_uses_the_same_lowercase():
    # the per-character normalization of strip_spans must give the partition pass's n-grams
    raw = "ΕΝΑΣ δρόμος ΚΑΙ ένας κόσμος İ"
    norm = normalize(pa.array([raw]), MATCH_NORMALIZE).to_pylist()[0]
    assert norm == "ενασ δρόμοσ και ένασ κόσμοσ i"
    from gpucurate.kernels.gates import ngram_hashes
    offsets, data = arrow_buffers(pa.array([norm], pa.large_string()))
    _, hashes, _ = ngram_hashes(offsets, data, padded_words(data), 3)
    text, spans, ranges = strip_spans(raw, np.unique(hashes), np.array([3], np.int64), 0)
    assert spans > 0 and text.strip() == ""
    kept = raw.encode("utf-8")  # the byte ranges remove exactly what went
    for a, b in reversed(list(zip(ranges[0::2], ranges[1::2]))):
        kept = kept[:a] + kept[b:]
    assert kept.decode("utf-8") == text


def test_greek_exact_duplicates_in_a_run(tmp_path):
    path = write_jsonl(tmp_path / "g.jsonl", [{"id": 1, "text": "ΟΔΟΣ ΚΟΣΜΟΣ"}, {"id": 2, "text": "οδος κοσμος"},
                                              {"id": 3, "text": "İSTANBUL"}, {"id": 4, "text": "istanbul"}])
    s = gpucurate.run([str(path)], tmp_path / "o", overrides=["run.progress=false", "fuzzy.enabled=false"])
    ann = read_annotations(tmp_path / "o")
    assert s["stages"]["exact"]["duplicates"] == 2
    assert ann.set_index("doc_id").dedup_id.to_dict() == {1: 1, 2: 1, 3: 3, 4: 3}
