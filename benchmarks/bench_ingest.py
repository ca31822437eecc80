"""Incremental ingestion into PostgreSQL + pgvector: Reuters-21578 in 10 batches in date order.

Per batch: documents in, new canonicals, aliases by stage, embeddings computed and saved, chunks in and
unique, seconds. Then search latency at k=20 over the deduplicated index (canonical documents) and over
an index of every document (``documents_all``, each with its own embedding), with the share of the top-20
slots that copies of an earlier hit take without deduplication.

The PostgreSQL server is the tests' (pgserver's binaries on 127.0.0.1, started and stopped here).

    python benchmarks/bench_ingest.py [--batches 10] [--queries 200] [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from common import REUTERS, print_table, write_json  # noqa: E402
from pg_server import start_postgres  # noqa: E402

from gpucurate.workflows.ingest import ingest  # noqa: E402
from gpucurate.rag.payload import RagSink, encoder_for  # noqa: E402
from gpucurate.rag.sinks.pgvector import PgvectorSink  # noqa: E402
from gpucurate.workflows.state import State  # noqa: E402


def reuters_batches(folder: Path, n_batches: int) -> list[str]:
    """All 21,578 records sorted by date, cut into ``n_batches`` JSON Lines files."""
    rows = []
    with gzip.open(REUTERS, "rt", encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            rows.append({"id": int(r["newid"]), "text": r.get("body") or "", "title": r.get("title") or "",
                         "date": pd.to_datetime(r["date"].strip(), format="%d-%b-%Y %H:%M:%S.%f", errors="coerce"),
                         "topics": r.get("topics")})
    df = pd.DataFrame(rows)
    df["date"] = df["date"].fillna(df["date"].min())
    df = df.sort_values(["date", "id"], kind="stable").reset_index(drop=True)
    df["date"] = df["date"].dt.strftime("%Y-%m-%dT%H:%M:%SZ")
    files = []
    for k, part in enumerate(np.array_split(np.arange(len(df)), n_batches)):
        path = folder / f"batch-{k:02d}.jsonl"
        df.iloc[part].to_json(path, orient="records", lines=True, force_ascii=False)
        files.append(str(path))
    return files


def archive_batches(folder: Path, n_batches: int, n_docs: int) -> list[str]:
    """The templated business archive (gpucurate.generators.archive: letters and offers sent to many clients with
    names, sums and dates changed), in ``n_batches`` files; ``title`` is the letter's first line."""
    from gpucurate.generators.archive import generate_archive
    df = generate_archive(n_docs, seed=11)
    df["title"] = [t.split("\n", 1)[0][:80] for t in df.text]
    files = []
    for k, part in enumerate(np.array_split(np.arange(len(df)), n_batches)):
        path = folder / f"batch-{k:02d}.jsonl"
        df.iloc[part][["id", "text", "title", "company", "kind"]].to_json(path, orient="records", lines=True,
                                                                       force_ascii=False)
        files.append(str(path))
    return files


def latency(db: PgvectorSink, queries: np.ndarray, k: int, use_dedup: bool) -> tuple[dict, list]:
    for q in queries[:3]:  # warm the index pages
        db.search(q, k, use_dedup=use_dedup)
    times, results = [], []
    for q in queries:
        t = time.perf_counter()
        hits = db.search(q, k, use_dedup=use_dedup)
        times.append(time.perf_counter() - t)
        results.append(hits.doc_id.tolist())
    ms = np.array(times) * 1000
    return {"p50_ms": round(float(np.median(ms)), 2), "p95_ms": round(float(np.percentile(ms, 95)), 2),
            "mean_ms": round(float(ms.mean()), 2)}, results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--dtype", default="bfloat16", help="encoder dtype (bfloat16 is ~2x faster on AMX CPUs)")
    ap.add_argument("--archive", type=int, default=0, metavar="N",
                    help="use N documents of the templated archive generator instead of Reuters")
    ap.add_argument("--out", default=None, help="JSON output (default benchmarks/results/ingest[-archive].json)")
    args = ap.parse_args()
    if not REUTERS.is_file():
        raise SystemExit(f"benchmark data not found: {REUTERS}")
    overrides = {"run.progress": False, "semantic.enabled": True, "semantic.dtype": args.dtype}
    if args.archive:  # configs/rag-archive.yaml without a date column (semantic stage off: see there)
        overrides.update({"fuzzy.threshold": 0.3, "fuzzy.boilerplate": True, "semantic.enabled": False})
        name = f"templated archive ({args.archive:,} documents)"
    else:
        overrides["input.timestamp_field"] = "date"
        name = "Reuters-21578"
    out = args.out or f"benchmarks/results/ingest{'-archive' if args.archive else ''}.json"
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        files = archive_batches(tmp, args.batches, args.archive) if args.archive else reuters_batches(tmp, args.batches)
        dsn, stop = start_postgres(tmp / "pg")
        try:
            rows = []
            for k, f in enumerate(files):
                sink = RagSink(dsn)
                t = time.perf_counter()
                s = ingest([f], tmp / "state", overrides=overrides, sink=sink)
                seconds = time.perf_counter() - t
                sink.close()
                by = s["new_aliases_by_stage"]
                rows.append({"batch": k + 1, "documents": s["documents_in"], "new_canonicals": s["new_canonicals"],
                             "exact": by.get("exact", 0), "fuzzy": by.get("fuzzy", 0),
                             "semantic": by.get("semantic", 0), "embeddings_computed": s["embeddings_computed"],
                             "embeddings_saved": s["embeddings_saved"], "chunks_in": s["chunks_in"],
                             "unique_chunks": s["unique_chunks"], "seconds": round(seconds, 2)})
                print(json.dumps(rows[-1]), file=sys.stderr)
            print_table(rows, list(rows[0]), f"{name} in {args.batches} batches into pgvector")
            total = pd.DataFrame(rows).sum()
            without_embedding = int(total["exact"] + total["fuzzy"])
            summary = {"documents": int(total["documents"]), "aliases": int(total["exact"] + total["fuzzy"]
                                                                            + total["semantic"]),
                       "aliases_without_embedding": without_embedding,
                       "fraction_aliases_without_embedding": round(without_embedding / total["documents"], 4),
                       "fraction_aliases": round(float(total["exact"] + total["fuzzy"] + total["semantic"])
                                                 / total["documents"], 4),
                       "chunks_in": int(total["chunks_in"]), "unique_chunks": int(total["unique_chunks"]),
                       "embeddings_computed": int(total["embeddings_computed"]),
                       "embeddings_saved": int(total["embeddings_saved"]),
                       "ingest_seconds_per_batch": [r["seconds"] for r in rows]}

            # the no-dedup index: every non-empty document with its own embedding
            state = State(tmp / "state")
            docs = state.documents().to_pandas()
            reg = state.registry()
            cfg_sem = {**overrides}
            from gpucurate.config import load_config
            cfg = load_config(None, cfg_sem)
            encoder = encoder_for(cfg, "cpu")
            stored = [p for p in state.arrays("semantic") if p and len(p["embeddings"])]
            hashes = np.concatenate([p["item_hash"] for p in stored]) if stored else np.empty(0, np.uint64)
            vectors = np.concatenate([p["embeddings"] for p in stored]) if stored \
                else np.empty((0, encoder.dim), np.float32)
            by_hash = dict(zip(hashes.tolist(), range(len(hashes))))
            texts = pd.concat([pd.read_json(f, lines=True) for f in files], ignore_index=True).set_index("id")
            nonempty = docs[~docs["empty"]]
            emb = np.zeros((len(nonempty), vectors.shape[1]), np.float32)
            missing = []
            for i, h in enumerate(nonempty["text_hash"].tolist()):
                j = by_hash.get(h)
                if j is None:
                    missing.append(i)
                else:
                    emb[i] = vectors[j]
            if missing:
                emb[missing] = encoder.encode([texts.loc[nonempty["doc_id"].iloc[i], "text"] for i in missing])
            summary["no_dedup_index_extra_embeddings"] = len(missing)
            with PgvectorSink(dsn) as db:
                t = time.perf_counter()
                db.upsert_all_documents(pd.DataFrame({"doc_id": nonempty["doc_id"].astype(str).to_numpy(),
                                                      "text": [texts.loc[i, "text"] for i in nonempty["doc_id"]],
                                                      "embedding": list(emb)}))
                summary["no_dedup_index_build_s"] = round(time.perf_counter() - t, 2)
                counts = db.counts()
                rng = np.random.default_rng(0)
                titles = texts.loc[rng.choice(nonempty["doc_id"].to_numpy(), args.queries, replace=False), "title"]
                queries = encoder.encode([t or "market" for t in titles.tolist()])
                with_dedup, _ = latency(db, queries, args.k, True)
                without, results = latency(db, queries, args.k, False)
            dedup_of = reg.set_index(reg["doc_id"].astype(str)).dedup_id.astype(str)
            repeated = [1 - len(set(dedup_of.loc[r])) / max(len(r), 1) for r in results]
            summary["search"] = {"k": args.k, "queries": args.queries,
                                 "dedup": dict(with_dedup, rows=counts["documents"]),
                                 "no_dedup": dict(without, rows=counts.get("documents_all", 0)),
                                 "no_dedup_share_of_top_k_that_are_copies": round(float(np.mean(repeated)), 4)}
            print_table([{"index": "deduplicated (documents)", "rows": counts["documents"], **with_dedup},
                         {"index": "every document (documents_all)", "rows": counts.get("documents_all", 0),
                          **without}], ["index", "rows", "p50_ms", "p95_ms", "mean_ms"],
                        f"{name}: search latency, k={args.k}, {args.queries} queries")
            print(json.dumps(summary, indent=1))
            write_json({"corpus": name, "batches": rows, "summary": summary}, out)
        finally:
            stop()


if __name__ == "__main__":
    main()
