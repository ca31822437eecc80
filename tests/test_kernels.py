"""Compiled kernels against their plain-Python specification."""

import numpy as np
import pyarrow as pa
import pytest
from numba import njit

from gpucurate.kernels import minhash, pairs
from gpucurate.kernels.hashing import (band_seed, hash_bytes, padded_words, permutations, reference_band_keys,
                                       reference_hash_bytes, reference_minhash)
from gpucurate.kernels.text import collapse_whitespace, nonblank_lines, word_and_char_counts
from gpucurate.stages.normalize import (arrow_buffers, from_buffers, normalize, reference_normalize,
                            reference_shingle_hashes, reference_shingles)


@njit
def _hash_span(words, start, end, seed):
    return hash_bytes(words, start, end, seed)


def test_hash_bytes_matches_reference_for_every_length_and_alignment():
    rng = np.random.default_rng(1)
    blob = rng.integers(0, 256, size=200, dtype=np.uint8)
    words = padded_words(blob)
    for start in range(0, 9):
        for length in range(0, 41):
            got = int(_hash_span(words, start, start + length, np.uint64(123)))
            assert got == reference_hash_bytes(blob[start:start + length].tobytes(), 123)


def test_hash_bytes_has_no_collisions_on_a_million_shingles():
    texts = pa.array([f"w{i} x{i * 7} y{i % 1000}" for i in range(1_000_000)], type=pa.large_string())
    offsets, data = arrow_buffers(texts)
    hashes = minhash.text_hashes(offsets, padded_words(data))
    assert len(np.unique(hashes)) == len(hashes)


WORDS_CASES = ["", "one", "a b", "a b c d", "a b c d e", "a b c d e f", "a b c d e f g h i j k l",
               "один два три четыре пять шесть семь", "한국어 텍스트 입니다 정말 좋은 날씨 오늘도",
               "日本語のテキストにはスペースがありません", "a a a a a a a a a a a a", "naïve café ﬁ ½ 𝔘𝔫𝔦"]


@pytest.mark.parametrize("mode,k", [("word", 5), ("word", 1), ("word", 3), ("char", 5), ("char", 1), ("char", 2)])
def test_shingle_hashes_and_signatures_match_reference(mode, k):
    texts = [reference_normalize(t) for t in WORDS_CASES]
    arr = normalize(pa.array(WORDS_CASES))
    assert arr.to_pylist() == texts
    offsets, data = arrow_buffers(arr)
    code = minhash.WORD if mode == "word" else minhash.CHAR
    _, cursor = minhash.unit_bounds(offsets, data, code)
    counts = minhash.shingle_counts(offsets, cursor, code, k)
    assert counts.tolist() == [len(reference_shingles(t, mode, k)) for t in texts]
    a, b = permutations(32, 7)
    sigs, csr_off, csr_val = minhash.signatures(offsets, data, code, k, np.uint64(7), a, b)
    for d, t in enumerate(texts):
        expected = reference_shingle_hashes(t, mode, k, 7)
        got = csr_val[csr_off[d]:csr_off[d + 1]]
        assert set(got.tolist()) == expected and len(got) == len(expected)
        assert np.array_equal(sigs[d], reference_minhash(sorted(expected), a, b))
    keys = minhash.band_keys(sigs, 4, 8, np.uint64(7))
    for d in range(len(texts)):
        assert np.array_equal(keys[d], reference_band_keys(sigs[d], 4, 8, 7))


def test_word_units_split_on_every_space_at_every_alignment():
    """The word scan reads eight bytes at a time: texts with runs of spaces, leading and trailing ones,
    words of 1 to 40 bytes, multi-byte characters and bytes 0x20 apart from a space (0xA0, '@'), at every
    offset in the buffer, give the reference's units (``str.split(" ")``), not the next text's spaces."""
    rng = np.random.default_rng(3)
    pieces = [" ", "  ", "a", "bc", "wordy", "x" * 9, "y" * 17, "z" * 40, "é", "日本", "@", "\xa0", "\t", "0"]
    texts = ["".join(rng.choice(pieces, rng.integers(0, 12))) for _ in range(3000)] + [" " * 20, "a" * 8]
    offsets, data = arrow_buffers(pa.array(texts, pa.large_string()))
    a, b = permutations(8, 5)
    for k in (1, 3):
        _, csr_off, csr_val = minhash.signatures(offsets, data, minhash.WORD, k, np.uint64(5), a, b)
        for d, t in enumerate(texts):
            got = csr_val[csr_off[d]:csr_off[d + 1]]
            assert set(got.tolist()) == reference_shingle_hashes(t, "word", k, 5), (k, t)


def test_auto_mode_sketches_each_text_as_its_own_mode_would():
    """Mode AUTO: a text mostly in scripts without spaces (kana, ideographs, Thai) by characters, any other by
    words (Hangul, Cyrillic and Latin are written with spaces; digits and punctuation count for neither);
    each text's signature and set equal its own mode's, whatever the rows asked and their order."""
    from gpucurate.kernels.text import spaceless_texts
    kinds = {"hello world this is a test": False, "日本語のテキストにはスペースがありません": True, "": False,
             "中文文本没有空格的句子在这里, ok": True, "中文文本 with some english words": False, "ภาษาไทย": True,
             "한국어 텍스트 입니다": False, "москва 北京": False, "123 ,,, 。": False, "東京 2024年": True}
    texts = list(kinds) * 7
    offsets, data = arrow_buffers(pa.array(texts, pa.large_string()))
    assert spaceless_texts(offsets, data).tolist() == [kinds[t] for t in texts]
    a, b = permutations(16, 3)
    sigs, csr_off, csr_val = minhash.signatures(offsets, data, minhash.AUTO, 3, np.uint64(3), a, b, batch_bytes=256)
    for d, t in enumerate(texts[:len(kinds)]):
        mode = minhash.CHAR if kinds[t] else minhash.WORD
        one_sig, _, one_set = minhash.signatures(offsets, data, mode, 3, np.uint64(3), a, b, rows=np.array([d]))
        assert np.array_equal(sigs[d], one_sig[0]) and np.array_equal(csr_val[csr_off[d]:csr_off[d + 1]], one_set)
    for rows in ([9, 1, 0, 5, 5, 2], [0, 3, 3], [1, 5], []):
        rows = np.array(rows, np.int64)
        got, got_off, got_val = minhash.signatures(offsets, data, minhash.AUTO, 3, np.uint64(3), a, b, rows=rows)
        assert np.array_equal(got, sigs[rows]) and np.array_equal(np.diff(got_off), np.diff(csr_off)[rows])
        assert got_val.tolist() == [v for r in rows for v in csr_val[csr_off[r]:csr_off[r + 1]].tolist()]


@pytest.mark.parametrize("num_perm", [1, 3, 13, 119])
def test_signatures_of_any_permutation_count_and_set_size_match_reference(num_perm):
    """The permutation loop takes four hashes at a time: sets of 1 to 9 shingles and counts that are not
    multiples of four (bands x rows) give the reference's values."""
    texts = [" ".join(f"w{i}" for i in range(n)) for n in range(1, 14)]
    arr = normalize(pa.array(texts))
    offsets, data = arrow_buffers(arr)
    a, b = permutations(num_perm, 11)
    sigs, csr_off, csr_val = minhash.signatures(offsets, data, minhash.WORD, 5, np.uint64(11), a, b)
    for d in range(len(texts)):
        assert np.array_equal(sigs[d], reference_minhash(csr_val[csr_off[d]:csr_off[d + 1]].tolist(), a, b))
    full_a, full_b = permutations(128, 11)
    head = minhash.signatures(offsets, data, minhash.WORD, 5, np.uint64(11), full_a[:num_perm], full_b[:num_perm])[0]
    assert np.array_equal(head, minhash.signatures(offsets, data, minhash.WORD, 5, np.uint64(11), full_a,
                                                   full_b)[0][:, :num_perm])


def test_empty_text_has_no_shingles_and_an_empty_signature():
    offsets, data = arrow_buffers(pa.array(["", "x y"], type=pa.large_string()))
    a, b = permutations(8, 1)
    sigs, csr_off, _ = minhash.signatures(offsets, data, minhash.WORD, 5, np.uint64(1), a, b)
    assert (sigs[0] == 0xFFFFFFFF).all() and np.diff(csr_off).tolist() == [0, 1]


def test_minhash_estimates_jaccard_without_bias():
    rng = np.random.default_rng(3)
    vocab = np.array([f"t{i}" for i in range(5000)])
    texts, truth = [], []
    for _ in range(200):
        base = list(rng.choice(vocab, 150))
        other = list(base)
        for pos in rng.choice(150, int(rng.integers(0, 60)), replace=False):
            other[pos] = str(rng.choice(vocab))
        texts += [" ".join(base), " ".join(other)]
        sa = reference_shingle_hashes(" ".join(base), "word", 5, 42)
        sb = reference_shingle_hashes(" ".join(other), "word", 5, 42)
        truth.append(len(sa & sb) / len(sa | sb))
    offsets, data = arrow_buffers(pa.array(texts, type=pa.large_string()))
    a, b = permutations(256, 42)
    sigs, _, _ = minhash.signatures(offsets, data, minhash.WORD, 5, np.uint64(42), a, b)
    est = pairs.signature_agreement(sigs, np.arange(0, 400, 2), np.arange(1, 400, 2))
    err = est - np.array(truth)
    assert abs(err.mean()) < 0.01
    assert np.sqrt((err ** 2).mean()) < 0.04  # ~ sqrt(J(1-J)/256)


SPACES = [" ", "\t", "\n", "\r", "\x0b", "\x0c", "\x1c", "\x1f", "\x85", "\xa0", "\u1680", "\u2000", "\u200a",
          "\u2028", "\u2029", "\u202f", "\u205f", "\u3000"]


def test_collapse_whitespace_equals_python_split_join():
    rng = np.random.default_rng(5)
    alphabet = list("ab é中") + ["ё", "가", "\u200b", "\u180e", "\u2060"] + SPACES
    texts = ["".join(rng.choice(alphabet, int(rng.integers(0, 30)))) for _ in range(3000)]
    offsets, data = arrow_buffers(pa.array(texts, type=pa.large_string()))
    out = from_buffers(*collapse_whitespace(offsets, data)).to_pylist()
    assert out == [" ".join(t.split()) for t in texts]


def test_nonblank_lines():
    data = np.frombuffer(b'{"a":1}\n\n  \n{"b":2}\r\n\t\n{"c":3}', dtype=np.uint8)
    starts, index = nonblank_lines(data)
    assert index.tolist() == [0, 3, 5]
    assert starts.tolist() == [0, 12, 23]


@pytest.mark.parametrize("nfkc,lowercase", [(True, True), (False, True), (True, False), (False, False)])
def test_normalize_mixes_ascii_and_unicode_texts_in_order(nfkc, lowercase):
    """ASCII texts take the one-pass path and the others Arrow's Unicode functions first; the result is
    in input order and equals the Python specification whatever the mix."""
    import unicodedata
    from gpucurate.config import NormalizeConfig
    from gpucurate.stages.normalize import reference_lower
    rng = np.random.default_rng(3)
    alphabet = list("aZ Q\tx\n") + ["é", "Ⅻ", "ﬁ", "Σ", "ς", "\u00a0", "\u3000", "Ａ"]
    texts = ["".join(rng.choice(alphabet if rng.random() < 0.4 else alphabet[:7], int(rng.integers(0, 12))))
             for _ in range(2000)] + [None]
    cfg = NormalizeConfig(nfkc=nfkc, lowercase=lowercase)
    got = normalize(pa.array(texts), cfg).to_pylist()

    def spec(t):
        t = unicodedata.normalize("NFKC", t or "") if nfkc else (t or "")
        return " ".join((reference_lower(t) if lowercase else t).split())
    assert got == [spec(t) for t in texts]


def test_nonblank_lines_equals_a_python_line_scan():
    """Every mix of blank, whitespace-led and empty lines, with and without a final newline."""
    rng = np.random.default_rng(11)
    for _ in range(3000):
        raw = bytes(rng.choice(list(b"ab \t\n\r{\x0b\x0c"), int(rng.integers(0, 30))))
        want, pos = [], 0
        for i, line in enumerate(raw.split(b"\n")):
            if line.strip(b" \t\r\x0b\x0c"):
                want.append((pos, i))
            pos += len(line) + 1
        starts, index = nonblank_lines(np.frombuffer(raw, dtype=np.uint8))
        assert list(zip(starts.tolist(), index.tolist())) == want, raw


def test_word_and_char_counts_of_normalized_texts():
    texts = ["", "a", "a b", "héllo wörld 中文", "ё " * 40 + "x", "가나 다"]
    offsets, data = arrow_buffers(normalize(pa.array(texts)))
    words, chars = word_and_char_counts(offsets, data)
    norm = [reference_normalize(t) for t in texts]
    assert words.tolist() == [len(t.split(" ")) if t else 0 for t in norm]
    assert chars.tolist() == [len(t) for t in norm]


def test_jaccard_pairs_and_components():
    sets = [{1, 2, 3, 4}, {2, 3, 4, 5}, {9}, set(), {1, 2, 3, 4}, {0, 7}]
    off = np.zeros(len(sets) + 1, np.int64)
    off[1:] = np.cumsum([len(s) for s in sets])
    vals = np.array([v for s in sets for v in sorted(s, reverse=True)], dtype=np.uint64)
    pi = np.array([0, 0, 0, 1, 2, 3, 5], dtype=np.int64)
    pj = np.array([1, 4, 5, 4, 3, 4, 0], dtype=np.int64)
    got = pairs.jaccard_pairs(off, vals, pi, pj)
    want = [len(sets[i] & sets[j]) / len(sets[i] | sets[j]) if sets[i] | sets[j] else 0.0 for i, j in zip(pi, pj)]
    assert np.allclose(got, want)
    labels = pairs.components(6, np.array([4, 1]), np.array([1, 0]))
    assert labels.tolist() == [0, 0, 2, 3, 0, 5]


def _lsh_pairs(keys, max_bucket=1000, anchors=8, threads=1):
    pi, pj = pairs.candidate_pairs(keys, max_bucket, anchors, threads)
    return list(zip(pi.tolist(), pj.tolist()))


def test_candidate_pairs_are_the_distinct_pairs_sharing_a_bucket():
    rng = np.random.default_rng(2)
    n, bands = 300, 6
    keys = rng.integers(0, 40, size=(n, bands)).astype(np.uint64) + (np.arange(bands, dtype=np.uint64) << 32)
    got = _lsh_pairs(keys)
    expected = sorted({(i, j) for i in range(n) for j in range(i + 1, n) if (keys[i] == keys[j]).any()})
    assert got == expected  # distinct, sorted by (i, j)


def test_candidate_pairs_in_a_large_bucket_go_through_anchors():
    keys = np.zeros((20, 1), dtype=np.uint64)
    got = set(_lsh_pairs(keys, max_bucket=5, anchors=2))
    # the two anchors pair with everyone after them, the rest with their successor: one component,
    # far fewer than all 190 pairs
    expected = {(a, y) for a in (0, 1) for y in range(a + 1, 20)} | {(y, y + 1) for y in range(19)}
    assert got == expected


def _reference_lsh_pairs(keys, max_bucket, anchors):
    buckets = {}
    for d, row in enumerate(keys.tolist()):
        for key in row:
            buckets.setdefault(key, []).append(d)
    out = set()
    for docs in buckets.values():
        docs.sort()
        if len(docs) <= max_bucket:
            out |= {(i, j) for x, i in enumerate(docs) for j in docs[x + 1:] if i != j}
        else:
            for y in range(1, len(docs)):
                out |= {(docs[x], docs[y]) for x in range(min(anchors, y))}
                out.add((docs[y - 1], docs[y]))
    return sorted(out)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_candidate_pairs_on_skewed_keys_whatever_the_threads(threads):
    """Keys that are not uniform hashes (small integers; the same value in two bands is one bucket), a bucket
    of 300 members (the anchor rule, and a radix bin sorted by the stable fallback), many entries (several
    radix bins split between the threads): the pairs are those of the plain bucket rule."""
    rng = np.random.default_rng(5)
    n, bands = 5000, 5
    keys = rng.integers(0, 3000, size=(n, bands)).astype(np.uint64)
    keys[rng.choice(n, 300, replace=False), 2] = 7_000_000  # one big bucket, once per member
    keys[:, 4] = rng.integers(0, 1 << 63, size=n).astype(np.uint64)  # spread keys, mostly singletons
    keys[100:110, 4] = keys[99, 4]
    for max_bucket, anchors in ((1000, 8), (50, 3)):
        assert _lsh_pairs(keys, max_bucket, anchors, threads) == _reference_lsh_pairs(keys, max_bucket, anchors)


def test_entry_pairs_are_the_bucket_rule_on_entries_in_any_order():
    """``entry_pairs`` (an exchange bucket's band entries, rows in any order, keys repeated across rows and
    bands, one bucket past the anchor bound): the distinct pairs of the plain bucket rule, sorted."""
    from gpucurate.kernels.pairs import entry_pairs
    rng = np.random.default_rng(11)
    n, bands = 4000, 4
    keys = rng.integers(0, 2500, size=(n, bands)).astype(np.uint64)
    keys[rng.choice(n, 200, replace=False), 1] = 9_000_000
    rows = 10 * np.arange(n, dtype=np.int64) + 3  # table rows, not 0..n-1
    flat, docs = keys.reshape(-1), np.repeat(rows, bands)
    shuffled = rng.permutation(len(flat))
    for max_bucket, anchors in ((1000, 8), (50, 3)):
        packed = entry_pairs(flat[shuffled], docs[shuffled], max_bucket, anchors)
        got = list(zip((packed >> np.uint64(32)).tolist(), (packed & np.uint64(0xFFFFFFFF)).tolist()))
        assert got == [(int(rows[i]), int(rows[j])) for i, j in _reference_lsh_pairs(keys, max_bucket, anchors)]
    assert len(entry_pairs(np.empty(0, np.uint64), np.empty(0, np.int64), 10, 2)) == 0


def test_band_seed_differs_per_band():
    seeds = {int(band_seed(np.uint64(42), j)) for j in range(64)}
    assert len(seeds) == 64


def test_signatures_do_not_depend_on_the_batch_size():
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(["a", "bb", "ccc", "d", "ё", "가"], rng.integers(0, 50))) for _ in range(3000)]
    offsets, data = arrow_buffers(normalize(pa.array(texts)))
    a, b = permutations(16, 1)
    whole = minhash.signatures(offsets, data, minhash.WORD, 3, np.uint64(1), a, b)
    for batch in (1, 100, 5000):
        for threads in (1, 2):
            parts = minhash.signatures(offsets, data, minhash.WORD, 3, np.uint64(1), a, b, batch_bytes=batch,
                                       threads=threads)
            assert all(np.array_equal(x, y) for x, y in zip(whole, parts))


@pytest.mark.parametrize("mode, k", [(minhash.WORD, 3), (minhash.CHAR, 4)])
def test_signatures_of_selected_rows_equal_those_of_the_rows_taken_out(mode, k):
    """``rows=`` gathers each batch's texts itself: the same signatures and sets as taking the rows out first,
    on a sliced array (offsets not from 0), with empty texts, in any order and whatever the batch size."""
    rng = np.random.default_rng(3)
    texts = [" ".join(rng.choice(["a", "bb", "ccc", "d", "ё", "가"], rng.integers(0, 40))) for _ in range(2000)]
    arr = normalize(pa.array(texts)).slice(37)
    offsets, data = arrow_buffers(arr)
    a, b = permutations(16, 1)
    for rows in (np.arange(0, len(arr), 3), rng.permutation(len(arr))[:700], np.array([5]), np.arange(len(arr))):
        rows = rows.astype(np.int64)
        t_offsets, t_data = arrow_buffers(arr.take(pa.array(rows)))
        want = minhash.signatures(t_offsets, t_data, mode, k, np.uint64(1), a, b)
        for batch, threads in ((1 << 22, 1), (500, 2), (1, 1)):
            got = minhash.signatures(offsets, data, mode, k, np.uint64(1), a, b, batch_bytes=batch, threads=threads,
                                     rows=rows)
            assert all(np.array_equal(x, y) for x, y in zip(want, got))


def test_a_cached_kernel_loads_without_the_compiler_start_up():
    """``kernels.jit``: in a fresh process a kernel found in the on-disk cache is loaded without numba
    refreshing its typing and lowering registries (which imports e.g. ``numba.typed.typeddict``), and
    computes the same as here, where it was compiled or loaded."""
    import json
    import subprocess
    import sys
    texts = ["", "a", "déjà vu", "x" * 100]
    offsets, data = arrow_buffers(pa.array(texts, pa.large_string()))
    want = minhash.text_hashes(offsets, padded_words(data)).tolist()  # the cache is warm from here on
    code = (
        "import json, sys\n"
        "import pyarrow as pa\n"
        "from gpucurate.kernels import minhash\n"
        "from gpucurate.kernels.hashing import padded_words\n"
        "from gpucurate.stages.normalize import arrow_buffers\n"
        f"offsets, data = arrow_buffers(pa.array({texts!r}, pa.large_string()))\n"
        "got = minhash.text_hashes(offsets, padded_words(data)).tolist()\n"
        "print(json.dumps({'got': got, 'hits': sum(minhash.text_hashes.stats.cache_hits.values()),\n"
        "                  'refreshed': 'numba.typed.typeddict' in sys.modules}))\n")
    out = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                    check=True).stdout)
    assert out == {"got": [int(h) for h in want], "hits": 1, "refreshed": False}


@pytest.mark.parametrize("keep_signatures", [False, True])
def test_sketches_of_the_read_pass_give_the_stage_its_participants_sketches(keep_signatures):
    """``sketch_distinct`` sketches each distinct eligible text once; ``gather_sketches`` of any participants
    (a later copy of a text included, over several partitions) equals ``signature_partition`` of them."""
    from gpucurate.engine.backend import select
    from gpucurate.stages.sketches import FuzzyParams, gather_sketches, signature_partition, sketch_distinct
    import pandas as pd
    rng = np.random.default_rng(5)
    backend = select("cpu")
    a, b = permutations(24, 2)
    params = FuzzyParams(minhash.WORD, 3, np.uint64(2), a, b, 4, 5, keep_signatures=keep_signatures)
    frames, made, masks, wanted = [], [], [], []
    for p in range(3):
        texts = [" ".join(rng.choice(["a", "bb", "ccc", "d", "ё"], rng.integers(0, 12))) for _ in range(300)]
        texts += texts[:40]  # copies of earlier texts in the same partition
        frame = pd.DataFrame({"_text": pd.arrays.ArrowExtensionArray(normalize(pa.array(texts)))})
        offsets, data = arrow_buffers(normalize(pa.array(texts)))
        hashes = minhash.text_hashes(offsets, padded_words(data))
        empty = np.diff(offsets) == 0
        eligible = ~empty & (rng.random(len(texts)) < 0.9)
        sketch = sketch_distinct(frame, eligible, hashes, params, backend)
        assert len(sketch.keys) == len(np.unique(hashes[eligible]))
        mask = eligible & (rng.random(len(texts)) < 0.7)
        made.append(sketch)
        masks.append(mask)
        wanted.append(signature_partition(frame, mask, params, backend))
    got = gather_sketches(made, masks, threads=2)
    keys = np.concatenate([w[0] for w in wanted])
    values = np.concatenate([w[2] for w in wanted])
    lengths = np.concatenate([np.diff(w[1]) for w in wanted])
    assert np.array_equal(got.keys, keys) and np.array_equal(got.csr_values, values)
    assert np.array_equal(np.diff(got.csr_offsets), lengths)
    if keep_signatures:
        assert np.array_equal(got.sigs, np.concatenate([w[3] for w in wanted]))
    else:
        assert got.sigs is None
    masks[1][np.flatnonzero(made[1].index < 0)[:1]] = True  # a row without a sketch: a bug, said so
    with pytest.raises(RuntimeError):
        gather_sketches(made, masks)


def test_distinct_pairs_and_bucket_order_equal_numpy():
    """``distinct_pairs`` (a counting sort by the first row) gives ``np.unique``'s sorted distinct pairs, and
    ``bucket_order`` a stable argsort by bucket; values out of range are errors, not memory written astray."""
    from gpucurate.kernels.pairs import bucket_order, distinct_pairs
    rng = np.random.default_rng(3)
    i = rng.integers(100, 150, 20_000).astype(np.uint64)
    j = rng.integers(0, 1 << 31, 20_000).astype(np.uint64) % np.uint64(300)
    packed = (i << np.uint64(32)) | j
    packed = np.concatenate([packed, packed[::3]])  # repeats, as a pair found under several band keys
    assert np.array_equal(distinct_pairs(packed, 100, 50), np.unique(packed))
    assert distinct_pairs(packed[:0], 100, 50).shape == (0,)
    with pytest.raises(ValueError):
        distinct_pairs(packed, 101, 50)
    bucket = rng.integers(0, 7, 5000)
    order, cuts = bucket_order(bucket, 9)  # two buckets empty
    assert np.array_equal(order, np.argsort(bucket, kind="stable"))
    assert np.array_equal(cuts, np.searchsorted(np.sort(bucket), np.arange(10)))
    with pytest.raises(ValueError):
        bucket_order(bucket, 6)
