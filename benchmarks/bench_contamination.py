"""Contamination gate on real data: GSM8K test items planted into Reuters news, four ways.

Every GSM8K test item (question + answer, 1,319) is planted into its own Reuters document in each of
four ways: appended verbatim; embedded in the middle of a longer news text (two Reuters bodies around
it); with 10% of its words replaced by random Reuters words, then appended; question only, appended.
The remaining Reuters bodies are left untouched. The pipeline runs with GSM8K configured (action flag)
and the script reports, per way, the recall (planted documents flagged with their own item) and the
number of untouched documents flagged (should be 0), plus the gate's documents/s.

    python benchmarks/bench_contamination.py
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED_DATA, print_table, reuters_bodies, write_json  # noqa: E402

import gpucurate  # noqa: E402

GSM8K = SHARED_DATA / "gsm8k" / "test.jsonl"
WAYS = ("verbatim", "embedded", "edited_10pct", "question_only")


def load_gsm8k() -> list[dict]:
    if not GSM8K.is_file():
        raise SystemExit(f"benchmark data not found: {GSM8K}")
    return [json.loads(line) for line in GSM8K.read_text(encoding="utf-8").splitlines() if line.strip()]


def edit_words(text: str, fraction: float, vocab: np.ndarray, rng: np.random.Generator) -> str:
    words = text.split()
    k = int(round(fraction * len(words)))
    for pos, word in zip(rng.choice(len(words), k, replace=False), rng.choice(vocab, k)):
        words[pos] = str(word)
    return " ".join(words)


def build_corpus(items: list[dict], bodies: list[str], seed: int) -> tuple[pd.DataFrame, int]:
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(bodies))
    need = len(items) * (len(WAYS) + 1)  # "embedded" takes two bodies
    if len(bodies) < need + 100:
        raise SystemExit(f"need at least {need + 100} Reuters bodies, have {len(bodies)}")
    vocab = np.array(sorted({w for b in bodies[:3000] for w in b.split() if w.isalpha()}))
    host = iter(order[:need].tolist())
    rows = []
    for i, item in enumerate(items):
        full = item["question"] + "\n" + item["answer"]
        rows.append((f"verbatim-{i}", bodies[next(host)] + "\n" + full, "verbatim", i))
        before, after = bodies[next(host)], bodies[next(host)]
        rows.append((f"embedded-{i}", before + "\n" + full + "\n" + after, "embedded", i))
        rows.append((f"edited-{i}", bodies[next(host)] + "\n" + edit_words(full, 0.10, vocab, rng), "edited_10pct", i))
        rows.append((f"question-{i}", bodies[next(host)] + "\n" + item["question"], "question_only", i))
    untouched = order[need:]
    rows += [(f"reuters-{j}", bodies[j], "untouched", -1) for j in untouched.tolist()]
    return pd.DataFrame(rows, columns=["id", "text", "way", "item"]), len(untouched)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default="benchmarks/results/contamination.json")
    args = ap.parse_args()

    items = load_gsm8k()
    bodies, _ = reuters_bodies()
    corpus, n_untouched = build_corpus(items, bodies, args.seed)
    result = {"items": len(items), "documents": len(corpus), "untouched": n_untouched}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "corpus.parquet"
        corpus.to_parquet(src, row_group_size=5000)
        overrides = {"run.progress": False, "semantic.enabled": False,
                     "contamination.benchmarks": [{"name": "gsm8k", "path": str(GSM8K),
                                                   "fields": ["question", "answer"]}]}
        t0 = time.perf_counter()
        base = gpucurate.run([str(src)], Path(tmp) / "plain", overrides={"run.progress": False,
                                                                         "semantic.enabled": False})
        t1 = time.perf_counter()
        summary = gpucurate.run([str(src)], Path(tmp) / "gated", overrides=overrides)
        t2 = time.perf_counter()
        ann = pd.concat([pq.read_table(f).to_pandas() for f in sorted((Path(tmp) / "gated" / "annotations")
                                                                      .glob("*.parquet"))])
        report = json.loads((Path(tmp) / "gated" / "contamination_report.json").read_text())
    hits = report["benchmarks"]["gsm8k"]["hits"]
    item_of_id = {f"test.jsonl:{k + 1}": k for k in range(len(items))}  # ids are file:line
    found = {}
    for h in hits:
        found.setdefault(h["doc_id"], set()).add(item_of_id[h["item_id"]])
    ann = ann.set_index("id")
    rows = []
    for way in WAYS + ("untouched",):
        docs = corpus[corpus.way == way]
        if way == "untouched":
            flagged = int(ann.loc[docs.id, "contaminated"].sum())
            rows.append({"way": way, "documents": len(docs), "flagged": flagged, "recall": None})
        else:
            own = sum(item in found.get(doc_id, ()) for doc_id, item in zip(docs.id, docs.item))
            rows.append({"way": way, "documents": len(docs), "flagged": int(ann.loc[docs.id, "contaminated"].sum()),
                         "recall": round(own / len(docs), 4)})
    stats = summary["stages"]["contamination"]
    result.update({"by_way": rows, "gate": stats, "wall_without_gate_s": round(t1 - t0, 3),
                   "wall_with_gate_s": round(t2 - t1, 3),
                   "gate_docs_per_s_per_core": stats["docs_per_s"],
                   "items_found": report["benchmarks"]["gsm8k"]["items_found"]})
    print_table(rows, ["way", "documents", "flagged", "recall"],
                f"GSM8K ({len(items):,} items) planted in Reuters: contamination gate, 13-grams, min_matches 1")
    print_table([{"measure": "gate docs/s per core (n-gram lookup in tasks)", "value": stats["docs_per_s"]},
                 {"measure": "index build s", "value": stats["index_build_seconds"]},
                 {"measure": "pipeline wall s without / with gate",
                  "value": f"{result['wall_without_gate_s']} / {result['wall_with_gate_s']}"},
                 {"measure": "documents", "value": len(corpus)}], ["measure", "value"], "speed")
    write_json(result, args.json)
    print(f"wrote {args.json}")
    del base


if __name__ == "__main__":
    main()
