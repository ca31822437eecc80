"""quality.preset against datatrove's own filters: per-rule agreement and speed, side by side.

Corpus: the Reuters-21578 bodies (``common.reuters_bodies``, x ``--factor`` with ``common.enlarge``), or a
JSON Lines file (``--corpus``, field ``text``).

* datatrove: ``GopherQualityFilter``, ``GopherRepetitionFilter``, ``C4QualityFilter`` and
  ``FineWebQualityFilter`` (their defaults, English), run in the Python of ``--datatrove-python`` (a virtual
  environment with ``pip install datatrove spacy``). Each rule is decided on its own: the filter is built
  with that rule alone switched on (C4's and FineWeb's line rules stay, as they choose the lines the
  document rules read), so that a document failing several rules counts for each. Timed: each filter with
  all its rules over the corpus, one process.
* gpucurate: ``kernels.words.preset_stats`` over the corpus' Arrow strings in one thread (best of 3 after a
  warm call), each rule's comparison of ``stages.quality.PRESET_RULES`` on its column.

Reported per rule: documents datatrove drops, documents gpucurate drops, and the fraction of documents on
which the two agree (target: 0.999); a document on which datatrove raises (a division by zero on a text
without words when the rules before it are off) is left out of that rule and counted. Then seconds and
MB/s per core for each.

    python benchmarks/bench_quality.py [--factor 1] [--datatrove-python /tmp/dtenv/bin/python]
        [--corpus file.jsonl] [--out benchmarks/results/bench_quality.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import enlarge, print_table, reuters_bodies, write_json  # noqa: E402

from gpucurate.kernels.words import PRESET_STATS, preset_stats, word_tables  # noqa: E402
from gpucurate.stages.normalize import arrow_buffers  # noqa: E402
from gpucurate.stages.quality import PRESET_RULES  # noqa: E402

#: each rule alone: (filter, keyword arguments that leave only it on)
DATATROVE = r'''
import json, sys, time
from datatrove.data import Document
from datatrove.pipeline.filters import (C4QualityFilter, FineWebQualityFilter, GopherQualityFilter,
                                        GopherRepetitionFilter)
texts = [json.loads(line)["text"] for line in open(sys.argv[1], encoding="utf-8")]
OFF_Q = dict(min_doc_words=None, max_doc_words=None, min_avg_word_length=None, max_avg_word_length=None,
             max_symbol_word_ratio=None, max_bullet_lines_ratio=None, max_ellipsis_lines_ratio=None,
             max_non_alpha_words_ratio=None, min_stop_words=None)
OFF_R = dict(dup_line_frac=None, dup_para_frac=None, dup_line_char_frac=None, dup_para_char_frac=None,
             top_n_grams=(), dup_n_grams=())
OFF_C4 = dict(filter_lorem_ipsum=False, filter_curly_bracket=False, min_num_sentences=-1)
OFF_FW = dict(line_punct_thr=-1.0, short_line_thr=2.0, char_duplicates_ratio=1e18, new_line_ratio=1e18)
RULES = {
    "gopher_short_doc": (GopherQualityFilter, {**OFF_Q, "min_doc_words": 50}),
    "gopher_long_doc": (GopherQualityFilter, {**OFF_Q, "max_doc_words": 100000}),
    "gopher_below_avg_threshold": (GopherQualityFilter, {**OFF_Q, "min_avg_word_length": 3}),
    "gopher_above_avg_threshold": (GopherQualityFilter, {**OFF_Q, "max_avg_word_length": 10}),
    "gopher_too_many_hashes": (GopherQualityFilter, {**OFF_Q, "max_symbol_word_ratio": 0.1}),
    "gopher_too_many_ellipsis": (GopherQualityFilter, {**OFF_Q, "max_symbol_word_ratio": 0.1}),
    "gopher_too_many_bullets": (GopherQualityFilter, {**OFF_Q, "max_bullet_lines_ratio": 0.9}),
    "gopher_too_many_end_ellipsis": (GopherQualityFilter, {**OFF_Q, "max_ellipsis_lines_ratio": 0.3}),
    "gopher_below_alpha_threshold": (GopherQualityFilter, {**OFF_Q, "max_non_alpha_words_ratio": 0.8}),
    "gopher_enough_stop_words": (GopherQualityFilter, {**OFF_Q, "min_stop_words": 2}),
    "dup_para_frac": (GopherRepetitionFilter, {**OFF_R, "dup_para_frac": 0.3}),
    "dup_para_char_frac": (GopherRepetitionFilter, {**OFF_R, "dup_para_char_frac": 0.2}),
    "dup_line_frac": (GopherRepetitionFilter, {**OFF_R, "dup_line_frac": 0.3}),
    "dup_line_char_frac": (GopherRepetitionFilter, {**OFF_R, "dup_line_char_frac": 0.2}),
    **{f"top_{n}_gram": (GopherRepetitionFilter, {**OFF_R, "top_n_grams": ((n, f),)})
       for n, f in ((2, 0.2), (3, 0.18), (4, 0.16))},
    **{f"duplicated_{n}_n_grams": (GopherRepetitionFilter, {**OFF_R, "dup_n_grams": ((n, f),)})
       for n, f in zip(range(5, 11), (0.15, 0.14, 0.13, 0.12, 0.11, 0.10))},
    "lorem_ipsum": (C4QualityFilter, {**OFF_C4, "filter_lorem_ipsum": True}),
    "curly_bracket": (C4QualityFilter, {**OFF_C4, "filter_curly_bracket": True}),
    "too_few_sentences": (C4QualityFilter, {**OFF_C4, "min_num_sentences": 5}),
    "empty": (FineWebQualityFilter, OFF_FW),
    "line_punct_ratio": (FineWebQualityFilter, {**OFF_FW, "line_punct_thr": 0.12}),
    "short_line_ratio": (FineWebQualityFilter, {**OFF_FW, "short_line_thr": 0.67}),
    "char_dup_ratio": (FineWebQualityFilter, {**OFF_FW, "char_duplicates_ratio": 0.01}),
    "list_ratio": (FineWebQualityFilter, {**OFF_FW, "new_line_ratio": 0.3}),
}
out = {"rules": {}, "seconds": {}}
for cls in (GopherQualityFilter, GopherRepetitionFilter, C4QualityFilter, FineWebQualityFilter):
    f = cls()
    t0 = time.perf_counter()
    for i, t in enumerate(texts):
        try:
            f.filter(Document(text=t, id=str(i)))
        except Exception:
            pass
    out["seconds"][cls.__name__] = time.perf_counter() - t0
# the rules one at a time, each text's words and sentences made once (the same functions, memoized)
import functools
import datatrove.pipeline.filters.c4_filters as c4
import datatrove.pipeline.filters.fineweb_quality_filter as fw
import datatrove.pipeline.filters.gopher_quality_filter as gq
import datatrove.pipeline.filters.gopher_repetition_filter as gr
words = functools.lru_cache(maxsize=None)(gq.split_into_words)
for module in (gq, gr, fw):
    module.split_into_words = words
c4.split_into_sentences = functools.lru_cache(maxsize=None)(c4.split_into_sentences)
for name, (cls, kwargs) in RULES.items():
    f = cls(**kwargs)
    dropped, errors = [], []
    for i, t in enumerate(texts):
        try:
            r = f.filter(Document(text=t, id=str(i)))
        except Exception:
            errors.append(i)
            continue
        if r is not True and r[1] == name:
            dropped.append(i)
    out["rules"][name] = {"dropped": dropped, "errors": errors}
json.dump(out, open(sys.argv[2], "w"))
'''


def ours(texts: list[str]) -> tuple[dict, float]:
    """Per rule the indices gpucurate drops (each rule on its own), and the kernel's best seconds."""
    offsets, data = arrow_buffers(pa.array(texts, pa.large_string()))
    tables = word_tables().stats_arrays()
    preset_stats(offsets[:3], data, *tables)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        stats = preset_stats(offsets, data, *tables)
        best = min(best, time.perf_counter() - t0)
    dropped = {}
    for _, name, stat, op, limit in PRESET_RULES:
        col = stats[:, PRESET_STATS.index(stat)]
        bad = col < limit if op == "<" else col > limit
        dropped[name] = np.flatnonzero(bad)
    return dropped, best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--factor", type=int, default=1)
    ap.add_argument("--corpus", default=None, help="a JSON Lines file with a text field instead of Reuters")
    ap.add_argument("--datatrove-python", default="/tmp/dtenv/bin/python")
    ap.add_argument("--out", default="benchmarks/results/bench_quality.json")
    args = ap.parse_args()
    if args.corpus:
        texts = [json.loads(line)["text"] for line in open(args.corpus, encoding="utf-8")]
    else:
        texts = enlarge(reuters_bodies()[0], args.factor)
    mb = sum(len(t.encode()) for t in texts) / 1e6
    print(f"[quality] {len(texts):,} documents, {mb:.1f} MB", file=sys.stderr)
    mine, seconds = ours(texts)
    peer = None
    if Path(args.datatrove_python).exists():
        with tempfile.TemporaryDirectory() as tmp:
            src, dst = Path(tmp) / "in.jsonl", Path(tmp) / "dt.json"
            with open(src, "w", encoding="utf-8") as fh:
                for t in texts:
                    fh.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
            print("[quality] datatrove ...", file=sys.stderr)
            done = subprocess.run([args.datatrove_python, "-c", DATATROVE, str(src), str(dst)], capture_output=True,
                                  text=True)
            if done.returncode:
                print(f"datatrove: not run: {(done.stderr.strip().splitlines() or ['?'])[-1]}", file=sys.stderr)
            else:
                peer = json.loads(dst.read_text())
    else:
        print(f"datatrove: not run: no {args.datatrove_python} (see --datatrove-python)", file=sys.stderr)
    rows = []
    n = len(texts)
    for preset, name, stat, op, limit in PRESET_RULES:
        row = {"preset": preset, "rule": name, "limit": f"{op} {limit:g}", "gpucurate_drops": len(mine[name])}
        if peer is not None:
            theirs = peer["rules"][name]
            errors = set(theirs["errors"])
            a = np.zeros(n, bool)
            a[mine[name]] = True
            b = np.zeros(n, bool)
            b[theirs["dropped"]] = True
            keep = np.ones(n, bool)
            keep[list(errors)] = False
            row.update(datatrove_drops=int(b.sum()), datatrove_errors=len(errors),
                       agreement=round(float((a == b)[keep].mean()), 5), differ=int((a != b)[keep].sum()))
        rows.append(row)
    print_table(rows, list(dict.fromkeys(k for r in rows for k in r)), "quality.preset against datatrove, each rule on its own")
    speed = [{"tool": "gpucurate preset_stats (all presets, one thread)", "seconds": round(seconds, 3),
              "mb_s_core": round(mb / seconds, 2)}]
    if peer is not None:
        for cls, s in peer["seconds"].items():
            speed.append({"tool": f"datatrove {cls}", "seconds": round(s, 3), "mb_s_core": round(mb / s, 3)})
        total = sum(peer["seconds"].values())
        speed.append({"tool": "datatrove, the four filters", "seconds": round(total, 3),
                      "mb_s_core": round(mb / total, 3)})
    print_table(speed, ["tool", "seconds", "mb_s_core"], "speed")
    write_json({"benchmark": "bench_quality", "documents": n, "text_mb": round(mb, 2), "rules": rows, "speed": speed},
               args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
