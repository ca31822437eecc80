"""The static encoder against the transformer it is distilled from: quality on labelled paraphrase pairs,
and speed, with the peers side by side.

Quality: the test splits of MRPC and PAN (both sentences of each labelled pair). For each encoder, the
cosine of every pair is swept over thresholds (``gpucurate.review.calibrate.sweep``): best F1 and its
threshold, the recall where precision first reaches 0.95, and precision, recall and pairs found at the
encoder's default ``semantic.threshold``. Encoders:

* ``transformer``: all-MiniLM-L6-v2 (gpucurate's Encoder, the default);
* ``static``: gpucurate's static vectors (``semantic.encoder: static``: PCA whitened to 256 dims, SIF);
* ``static, model2vec's recipe``: the same distillation without whitening, as model2vec publishes it.

Speed: documents/s and MB/s of text of each encoder on Reuters bodies and on the PAN sentences, in this
process, one after the other: gpucurate's transformer and sentence-transformers' ``encode`` (on a sample:
they run at tens of documents/s on a CPU), gpucurate's static encoder and model2vec's ``StaticModel.encode``
(PyPI model2vec, the encoder of semhash) on the same vectors and tokenizer; their largest difference is
printed too.

    python benchmarks/bench_static.py                 # about 4 minutes on 2 cores
    python benchmarks/bench_static.py --sample 200    # fewer texts for the transformers' speed
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED_DATA, print_table, reuters_bodies, write_json  # noqa: E402

from gpucurate.config import SEMANTIC_THRESHOLDS  # noqa: E402
from gpucurate.review.calibrate import PRESETS, load_pairs, sweep  # noqa: E402
from gpucurate.stages import static_encoder  # noqa: E402
from gpucurate.stages.encoder import Encoder, resolve_model_path  # noqa: E402
from gpucurate.stages.static_encoder import StaticEncoder  # noqa: E402

PAIR_SETS = {"mrpc": ("mrpc/msr-para-test.tsv", "mrpc"), "pan": ("pan_paraphrase/pairs_test.tsv", "pan")}
THRESHOLDS = np.round(np.arange(0.30, 1.0, 0.01), 2)


def quality(name: str, encode, default: float, pairs) -> dict:
    a, b = encode(pairs.a.tolist()), encode(pairs.b.tolist())
    table = sweep(np.sum(a * b, axis=1), pairs.label.to_numpy(), THRESHOLDS)
    best = table.loc[table.f1.idxmax()]
    precise = table[table.precision >= 0.95]
    at = table.loc[(table.threshold - default).abs().idxmin()]
    return {"encoder": name, "best_f1": round(best.f1, 4), "at": best.threshold,
            "recall_at_p95": round(precise.iloc[0].recall, 4) if len(precise) else 0.0,
            "p95_threshold": precise.iloc[0].threshold if len(precise) else None, "default": default,
            "precision": round(at.precision, 4), "recall": round(at.recall, 4), "found": int(at.true_positives)}


def speed(name: str, encode, texts: list[str]) -> dict:
    encode(texts[:32])  # warm: compiled kernels, first-call allocations
    t0 = time.perf_counter()
    x = encode(texts)
    seconds = time.perf_counter() - t0
    mb = sum(len(t.encode()) for t in texts) / 1e6
    return {"encoder": name, "texts": len(texts), "seconds": round(seconds, 3),
            "docs_per_s": round(len(texts) / seconds, 1), "mb_per_s": round(mb / seconds, 3), "vectors": x}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sample", type=int, default=500, help="texts for the transformers' speed (default 500)")
    ap.add_argument("--json", default="benchmarks/results/static.json")
    args = ap.parse_args()
    threads = os.cpu_count() or 1
    transformer = Encoder(threads=threads)
    static = StaticEncoder(threads=threads)
    recipe = dict(static_encoder.RECIPE, whiten=False)
    plain = StaticEncoder(threads=threads)
    plain.vectors = static_encoder.distill(resolve_model_path(None), recipe)

    rows = []
    for set_name, (path, preset) in PAIR_SETS.items():
        pairs = load_pairs(SHARED_DATA / path, *PRESETS[preset])
        for name, enc, default in (("transformer", transformer, SEMANTIC_THRESHOLDS["transformer"]),
                                   ("static", static, SEMANTIC_THRESHOLDS["static"]),
                                   ("static, model2vec's recipe", plain, SEMANTIC_THRESHOLDS["static"])):
            rows.append({"pairs": f"{set_name} test ({len(pairs):,})", **quality(name, enc.encode, default, pairs)})
    print_table(rows, ["pairs", "encoder", "best_f1", "at", "recall_at_p95", "p95_threshold", "default",
                       "precision", "recall", "found"], "paraphrase pairs: each encoder's cosine")

    corpora = {"reuters": reuters_bodies()[0]}
    pan = load_pairs(SHARED_DATA / PAIR_SETS["pan"][0], *PRESETS["pan"])
    corpora["pan sentences"] = pan.a.tolist() + pan.b.tolist()
    timings = []
    for corpus, texts in corpora.items():
        sample = texts[:args.sample]
        found = [speed("gpucurate transformer", transformer.encode, sample)]
        try:
            from sentence_transformers import SentenceTransformer
            st = SentenceTransformer(str(resolve_model_path(None)), device="cpu")
            found.append(speed("sentence-transformers", lambda t: st.encode(
                t, batch_size=32, normalize_embeddings=True, show_progress_bar=False), sample))
        except ImportError:
            pass
        found.append(speed("gpucurate static", static.encode, texts))
        try:
            from model2vec import StaticModel
            peer = StaticModel(static.vectors, static.text_tokenizer.backend, normalize=True)
            found.append(speed("model2vec StaticModel, same vectors", lambda t: peer.encode(
                t, max_length=static.max_tokens, use_multiprocessing=False), texts))
            found[-1]["max_abs_difference"] = float(np.abs(found[-1]["vectors"] - found[-2]["vectors"]).max())
        except ImportError:
            pass
        for f in found:
            f.pop("vectors")
            timings.append({"corpus": corpus, **f})
    print_table(timings, ["corpus", "encoder", "texts", "seconds", "docs_per_s", "mb_per_s", "max_abs_difference"],
                f"encoding speed on this machine ({threads} threads)")
    write_json({"quality": rows, "speed": timings, "threads": threads, "recipe": static_encoder.RECIPE}, args.json)


if __name__ == "__main__":
    main()
