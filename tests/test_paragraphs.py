"""Paragraph-level dedup: span detection against plain Python, and the stage in the pipeline."""

import pandas as pd
import pyarrow as pa
import pytest

from conftest import read_annotations, write_jsonl
from gpucurate.kernels.gates import paragraph_spans
from gpucurate.stages.paragraphs import ParagraphDedup
from gpucurate.workflows.run import run
from gpucurate.stages.normalize import arrow_buffers

Q = {"run.progress": False, "paragraphs.enabled": True}

DISCLAIMER = ("This answer is provided for information only and does not constitute legal advice; consult a "
              "qualified professional before acting on it.")
QA = "Q: How do I reset the router?\nA: Hold the reset button for ten seconds until the lights blink twice."


def reference_paragraphs(text):
    """Plain-Python paragraphs: runs of non-blank lines; a blank or indented line starts a new one."""
    out, current = [], []
    for line in text.split("\n"):
        indented = line.startswith(("  ", "\t")) and line.strip()
        if (not line.strip() or indented) and current:
            out.append("\n".join(current).strip())
            current = []
        if line.strip():
            current.append(line)
    if current:
        out.append("\n".join(current).strip())
    return out


@pytest.mark.parametrize("text", ["one\ntwo\n\nthree", "", "\n\n  \n", "a\n    b\n\tc\n\n\nd  ",
                                  "Ünïcödé pára\n\n日本語の段落", "solo"])
def test_paragraph_spans_match_reference(text):
    offsets, data = arrow_buffers(pa.array([text], pa.large_string()))
    _, s, e = paragraph_spans(offsets, data, 0)
    got = [data[a:b].tobytes().decode() for a, b in zip(s, e)]
    assert got == reference_paragraphs(text)


def test_sentence_groups():
    text = "One. Two! Three? Four. Five.\n\nSix。Seven。"
    offsets, data = arrow_buffers(pa.array([text], pa.large_string()))
    _, s, e = paragraph_spans(offsets, data, 2)
    assert [data[a:b].tobytes().decode() for a, b in zip(s, e)] == ["One. Two!", "Three? Four.", "Five.",
                                                                   "Six。Seven。"]


def corpus():
    return [
        {"id": 1, "text": "Intro about routers and networks for home users.\n\n" + QA + "\n\n" + DISCLAIMER},
        {"id": 2, "text": "A different article about printers, toner and paper jams in offices.\n\n" + QA + "\n\n"
                          + DISCLAIMER},
        {"id": 3, "text": "A third text on keyboards, mice and ergonomic desks for programmers.\n\n" + DISCLAIMER},
        {"id": 4, "text": DISCLAIMER},  # only the repeated span: nothing left
        {"id": 5, "text": "Intro about routers and networks for home users.\n\n" + QA + "\n\n" + DISCLAIMER},  # = 1
        {"id": 6, "text": "Short line\n\nThanks!\n\nAnother original paragraph about gardening and tomatoes.\n\n"
                          "Thanks!"},
        {"id": 7, "text": "Unrelated text about cooking pasta with garlic and olive oil.\n\nThanks!"},
    ]


def test_repeated_spans_are_removed_from_all_but_the_first(tmp_path):
    src = write_jsonl(tmp_path / "p.jsonl", corpus())
    summary = run([str(src)], tmp_path / "out", overrides=Q)
    ann = read_annotations(tmp_path / "out").set_index("doc_id")
    assert pd.isna(ann.loc[1].paragraph_text) and ann.loc[1].paragraph_chars_removed == 0  # first holder
    assert ann.loc[2].paragraph_text == "A different article about printers, toner and paper jams in offices."
    assert ann.loc[2].paragraph_chars_removed == len(QA) + len(DISCLAIMER)
    assert ann.loc[3].paragraph_text == "A third text on keyboards, mice and ergonomic desks for programmers."
    assert not ann.loc[4].keep and ann.loc[4].drop_stage == "paragraphs"
    assert "< min_doc_chars 50" in ann.loc[4].drop_reason
    # the exact copy is dropped by the exact stage and does not count as an occurrence
    assert ann.loc[5].drop_stage == "exact" and ann.loc[5].paragraph_chars_removed == 0
    # "Thanks!" is shorter than min_span_chars: never removed
    assert ann.loc[6].paragraph_chars_removed == 0 and ann.loc[7].paragraph_chars_removed == 0
    assert ann.loc[1].text == corpus()[0]["text"], "the stored text is never changed"
    st = summary["stages"]["paragraphs"]
    assert st["repeated_spans"] == 2 and st["documents_changed"] == 3 and st["dropped"] == 1
    assert st["chars_removed"] == int(ann.paragraph_chars_removed.sum())


def test_keep_none_and_max_occurrences(tmp_path):
    src = write_jsonl(tmp_path / "p.jsonl", corpus())
    run([str(src)], tmp_path / "none", overrides={**Q, "paragraphs.keep": "none"})
    ann = read_annotations(tmp_path / "none").set_index("doc_id")
    assert ann.loc[1].paragraph_text == "Intro about routers and networks for home users."
    run([str(src)], tmp_path / "max3", overrides={**Q, "paragraphs.max_occurrences": 3})
    ann = read_annotations(tmp_path / "max3").set_index("doc_id")
    # the disclaimer is in 4 kept documents (> 3): removed; the Q/A block in 2: kept
    assert ann.loc[2].paragraph_text.endswith(QA) and DISCLAIMER not in ann.loc[2].paragraph_text


def test_sentence_unit_and_partition_invariance(tmp_path, demo_frame, monkeypatch):
    records = demo_frame.head(400).to_dict(orient="records")
    for r in records[::7]:
        r["text"] = (r["text"] or "") + "\n\n" + DISCLAIMER + " " + QA.replace("\n", " ")
    src = write_jsonl(tmp_path / "d.jsonl", records)
    over = {**Q, "paragraphs.unit": "sentences", "paragraphs.sentences": 2}
    s1 = run([str(src)], tmp_path / "one", overrides=over)
    run([str(src)], tmp_path / "many", overrides={**over, "input.partition_bytes": 4096, "run.workers": 1})
    one, many = read_annotations(tmp_path / "one"), read_annotations(tmp_path / "many")
    pd.testing.assert_frame_equal(one, many)
    # the exchange by span hash in many buckets: the same cuts and counts
    monkeypatch.setattr(ParagraphDedup, "spans_per_bucket", 50)
    s3 = run([str(src)], tmp_path / "buckets", overrides={**over, "input.partition_bytes": 4096})
    pd.testing.assert_frame_equal(read_annotations(tmp_path / "buckets"), one)
    assert s1["stages"]["paragraphs"]["buckets"] == 1 and s3["stages"]["paragraphs"]["buckets"] > 10
    assert {k: v for k, v in s3["stages"]["paragraphs"].items() if k not in ("buckets", "seconds")} == \
        {k: v for k, v in s1["stages"]["paragraphs"].items() if k not in ("buckets", "seconds")}
    assert sorted(one["id"]) == sorted(r["id"] for r in records) and one.doc_id.is_unique
    changed = one[one.paragraph_chars_removed > 0]
    assert len(changed) >= 40 and s1["stages"]["paragraphs"]["unit"] == "sentences"
    assert not changed.paragraph_text.str.contains("does not constitute legal advice", regex=False).any()
    assert (one.paragraph_chars_removed[~one.keep & (one.drop_stage != "paragraphs")] == 0).all()
