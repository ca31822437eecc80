"""The exact-substring stage against two references on planted repeats: the rule written out in plain
Python (``reference_spans``) and a suffix array with its LCP array (``suffix_array_spans``, pydivsufsort)."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

import gpucurate
from gpucurate.kernels import substrings as kern
from gpucurate.stages.cuts import cut_texts
from gpucurate.stages.substrings import SubstringDedup, reference_spans, reference_units, suffix_array_spans

from conftest import read_annotations, write_jsonl

WORDS = ["alpha", "Beta", "gamma", "délta", "straße", "ΣΟΦΙΑ", "σοφια", "ﬁne", "naïve", "东京", "🙂ok", "x",
         "über", "İstanbul", "kafe\u0301", "café", "end.", "(note)", "42", "ΟΔΟΣ"]


def _words(rng: random.Random, n: int) -> list[str]:
    return [rng.choice(WORDS) + (str(rng.randrange(40)) if rng.random() < 0.5 else "") for _ in range(n)]


def planted_corpus(seed: int = 0, n: int = 60) -> list[str]:
    """Texts with planted repeats: a block pasted into several texts mid-paragraph, one that crosses a
    paragraph boundary, overlapping and adjacent copies, a text repeating itself, and case / NFKC variants
    of a block (the same units after normalization)."""
    rng = random.Random(seed)
    block = _words(rng, 14)
    other = _words(rng, 9)
    texts = []
    for i in range(n):
        head, tail = _words(rng, rng.randrange(3, 12)), _words(rng, rng.randrange(0, 8))
        kind = i % 7
        if kind == 0:
            body = head + block + tail
        elif kind == 1:  # across a paragraph boundary, with odd whitespace
            body = head + block[:6] + ["\n\n"] + block[6:] + tail
        elif kind == 2:  # overlapping: the block's second half then the whole block, adjacent to `other`
            body = block[7:] + block + other + tail
        elif kind == 3:  # the text repeats itself
            body = other + head + other
        elif kind == 4:  # case and compatibility forms: the same units after NFKC + lowercase
            body = head + [w.upper() if w.isascii() else w for w in block] + tail
        else:
            body = head + tail
        texts.append(" ".join(body).replace(" \n\n ", "\n\n"))
    return texts


def _run(tmp_path, texts: list[str], name: str = "o", **overrides) -> "object":
    src = tmp_path / f"{name}.jsonl"
    write_jsonl(src, [{"id": i, "text": t} for i, t in enumerate(texts)])
    settings = {"substrings.enabled": True, "substrings.min_tokens": 5, "fuzzy.enabled": False,
                "exact.enabled": False, "semantic.enabled": False, "substrings.min_doc_chars": 0}
    settings.update(overrides)
    summary = gpucurate.run(str(src), str(tmp_path / name), overrides=settings)
    return read_annotations(tmp_path / name).sort_values("id", kind="stable").reset_index(drop=True), summary


def _flat(v) -> list:
    return [] if v is None else [int(x) for x in v]


@pytest.mark.parametrize("keep", ["first", "none"])
def test_matches_both_references(tmp_path, keep):
    texts = planted_corpus()
    ann, summary = _run(tmp_path, texts, **{"substrings.keep": keep})
    ref = reference_spans(texts, 5, keep)
    assert ref == suffix_array_spans(texts, 5, keep)
    assert sum(bool(r[0]) for r in ref) > 20 and sum(bool(r[1]) for r in ref) > 10  # the repeats were planted
    assert [_flat(v) for v in ann.substring_spans] == [r[0] for r in ref]
    removed = pa.array([r[1] or None for r in ref], pa.list_(pa.int64()))
    expected = cut_texts(pa.array(texts), removed).to_pylist()
    assert [None if not isinstance(x, str) else x for x in ann.substring_text] == expected
    stats = summary["stages"]["substrings"]
    assert stats["documents_touched"] == sum(bool(r[0]) for r in ref)
    assert stats["removed_bytes"] == sum(b - a for r in ref for a, b in zip(r[1][0::2], r[1][1::2]))
    if keep == "first":  # the first holder of the block keeps it
        assert _flat(ann.substring_spans[0]) and not _flat(ann.removed_spans[0])


def test_spans_are_unit_bounds_of_the_original_bytes(tmp_path):
    texts = planted_corpus(1)
    ann, _ = _run(tmp_path, texts)
    for text, spans in zip(texts, ann.substring_spans):
        raw = text.encode("utf-8")
        bounds = reference_units(text)[1]
        starts, ends = {s for s, _ in bounds}, {e for _, e in bounds}
        for a, b in zip(_flat(spans)[0::2], _flat(spans)[1::2]):
            assert a in starts and b in ends
            raw[a:b].decode("utf-8")  # whole characters


def test_cjk_char_units(tmp_path):
    rng = random.Random(3)
    chars = [chr(c) for c in range(0x4E00, 0x4E00 + 300)]
    block = "".join(rng.choice(chars) for _ in range(25))
    texts = ["".join(rng.choice(chars) for _ in range(rng.randrange(5, 40))) + (block if i % 3 == 0 else "")
             + "。" + "".join(rng.choice(chars) for _ in range(10)) for i in range(30)]
    texts[4] = block[:12] + "\u3000" + block[12:]  # an ideographic space inside: whitespace is not a unit
    ann, summary = _run(tmp_path, texts, **{"substrings.unit": "char", "substrings.min_tokens": 20})
    ref = reference_spans(texts, 20, char_mode=True)
    assert ref == suffix_array_spans(texts, 20, char_mode=True)
    assert [_flat(v) for v in ann.substring_spans] == [r[0] for r in ref]
    assert _flat(ann.substring_spans[4]) == [0, len(texts[4].encode("utf-8"))]
    assert summary["stages"]["substrings"]["unit"] == "char"


def test_only_kept_documents_count(tmp_path):
    rng = random.Random(5)
    block = " ".join(_words(rng, 8))
    texts = [" ".join(_words(rng, 6)) + " " + block, "unrelated words only here and there now", None]
    texts[2] = texts[0]  # an exact duplicate: dropped by the exact stage, it repeats nothing
    ann, _ = _run(tmp_path, texts, **{"exact.enabled": True})
    assert ann.substring_spans.isna().all()
    texts.append(" ".join(_words(rng, 3)) + " " + block)
    ann, summary = _run(tmp_path, texts, "o2", **{"exact.enabled": True})
    assert _flat(ann.substring_spans[0]) and _flat(ann.substring_spans[3]) and ann.substring_spans[2] is None
    assert summary["stages"]["substrings"]["documents_touched"] == 2


def test_identical_across_partitions_buckets_and_budget(tmp_path, monkeypatch):
    texts = planted_corpus(2, 120)
    one, _ = _run(tmp_path, texts, "one")
    monkeypatch.setattr(SubstringDedup, "windows_per_bucket", 97)  # many buckets
    many, summary = _run(tmp_path, texts, "many", **{"input.partition_bytes": 2048, "run.memory_limit": "64KB"})
    assert summary["stages"]["substrings"]["buckets"] > 5 and summary["stages"]["input"]["partitions"] > 3
    for col in ("substring_spans", "substring_text", "substring_chars_removed", "removed_spans", "keep"):
        assert one[col].astype(str).tolist() == many[col].astype(str).tolist(), col


def test_min_doc_chars_drops_with_a_reason(tmp_path):
    rng = random.Random(7)
    block = " ".join(_words(rng, 12))
    texts = ["intro words " + block + " more text follows here", block + " ok"]
    ann, summary = _run(tmp_path, texts, **{"substrings.min_doc_chars": 10})
    assert ann.keep.tolist() == [True, False]
    assert ann.drop_stage[1] == "substrings" and "min_doc_chars 10" in ann.drop_reason[1]
    assert ann.substring_text[1] == " ok"[1:] and ann.substring_chars_removed[1] == len(block)
    assert summary["stages"]["substrings"]["dropped"] == 1 and summary["documents_kept"] == 1


def test_report_has_the_most_repeated_spans(tmp_path):
    texts = planted_corpus(4)
    _, summary = _run(tmp_path, texts)
    top = summary["stages"]["substrings"]["top_spans"]
    assert top and top == sorted(top, key=lambda t: -t["count"])
    assert all(t["sample"] and t["doc_id"] is not None for t in top)
    assert (tmp_path / "o" / "report.html").read_text().count("Repeated spans") == 1


def test_window_keys_roll_like_horner():
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 2**63, 40, dtype=np.uint64) * 2 + 1, rng.integers(0, 2**63, 40, dtype=np.uint64)
    cursor = np.array([0, 3, 40], np.int64)
    k = 7
    win = kern.window_counts(cursor, k)
    hi, lo = kern.window_hashes(a, b, cursor, win, k)
    mask = (1 << 64) - 1

    def horner(h, start, base):
        acc = 0
        for j in range(k):
            acc = (acc * int(base) + int(h[start + j])) & mask
        return acc
    from gpucurate.kernels.hashing import reference_fmix64
    assert list(win) == [0, 0, 31]
    for w in range(31):
        assert int(hi[w]) == reference_fmix64(horner(a, 3 + w, kern.BASE_A))
        assert int(lo[w]) == reference_fmix64(horner(b, 3 + w, kern.BASE_B))


def test_keys_compared_on_all_128_bits():
    hi = np.array([5, 5, 5, 9, 5], np.uint64)
    lo = np.array([1, 2, 1, 1, 2], np.uint64)  # equal hi, different lo: different windows
    index, removable, count, distinct = kern.repeated_windows(hi, lo)
    got = sorted(zip(index.tolist(), removable.tolist(), count.tolist()))
    assert got == [(0, False, 2), (1, False, 2), (2, True, 2), (4, True, 2)] and distinct == 3


def test_config_checks():
    from gpucurate.config import resolve_config
    from gpucurate.errors import ConfigError
    with pytest.raises(ConfigError, match="substrings.min_tokens"):
        resolve_config(None, {"substrings.min_tokens": 0})
    with pytest.raises(ConfigError, match="substrings.unit"):
        resolve_config(None, {"substrings.unit": "token"})


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # uint64 arithmetic wraps by design in the simulator
def test_device_bucket_work_matches_the_cpu_kernel():
    """The CUDA kernels (numba's simulator) and their glue find the same repeated windows as the CPU's."""
    from gpucurate.device import host_api
    from gpucurate.device.arrays import simulated_arrays
    host_api.bind(simulated_arrays())
    rng = np.random.default_rng(1)
    hi = rng.integers(0, 40, 3000).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    lo = rng.integers(0, 3, 3000).astype(np.uint64)
    cpu_hits = kern.repeated_windows(hi, lo)
    gpu_hits = host_api.repeated_windows(hi, lo)
    as_set = lambda h: sorted(zip(h[0].tolist(), h[1].tolist(), h[2].tolist()))  # noqa: E731
    assert as_set(gpu_hits) == as_set(cpu_hits) and gpu_hits[3] == cpu_hits[3] == 120
    a, b = rng.integers(0, 2**63, 500, dtype=np.uint64), rng.integers(0, 2**63, 500, dtype=np.uint64)
    cursor = np.array([0, 3, 200, 200, 500], np.int64)
    win = kern.window_counts(cursor, 9)
    for mine, theirs in zip(host_api.window_hashes(a, b, cursor, win, 9), kern.window_hashes(a, b, cursor, win, 9)):
        assert np.array_equal(mine, theirs)
