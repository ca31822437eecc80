"""Incremental ingestion into PostgreSQL + pgvector: Reuters-21578 in 10 batches in date order.

Per batch: documents in, new canonicals, aliases by stage, embeddings computed and saved, chunks in and
unique, seconds. Then search latency at k=20 over the deduplicated index (canonical documents) and over
an index of every document (``documents_all``, each with its own embedding), with the share of the top-20
slots that copies of an earlier hit take without deduplication.

The PostgreSQL server is the tests' (pgserver's binaries on 127.0.0.1, started and stopped here).

    python benchmarks/bench_ingest.py [--batches 10] [--queries 200] [--dtype bfloat16]

``--scale`` measures a batch against states of several sizes instead (no sink, semantic stage off, the CLI
as a user runs it under GNU time). Each state holds one near-copy of every Reuters body, then distinct
pseudo-sources (30% of a body's words replaced) up to its size, built by ingests of ``--build-batch``
documents; the batch is 2,000 new versions of stored near-copies (the last word changed), so each of its documents
matches about one stored document at every size. Per size: the batch's wall time and peak RSS, the state's bytes on
disk per document (shingle sets apart), and the time to build the state (against one ``run`` over the
same documents, for the largest):

    python benchmarks/bench_ingest.py --scale 19043 190430 1904300
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from common import REUTERS, print_table, reuters_bodies, time_command, write_json  # noqa: E402
from pg_server import start_postgres  # noqa: E402

from gpucurate.workflows.ingest import ingest  # noqa: E402
from gpucurate.rag.payload import RagSink, encoder_for  # noqa: E402
from gpucurate.rag.sinks.pgvector import PgvectorSink  # noqa: E402
from gpucurate.io.row_store import read_rows  # noqa: E402
from gpucurate.workflows.state import State, vector_record  # noqa: E402


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


QUIET = ["-q", "--no-progress", "--set", "semantic.enabled=false"]


def _near_copy(words: list[str], rng, edit: float = 0.02) -> str:
    copy = list(words)
    for i in rng.choice(len(copy), max(1, int(round(edit * len(copy)))), replace=False):
        copy[i] = f"e{rng.integers(1 << 30)}"
    return " ".join(copy)


def write_scale_corpus(folder: Path, size: int, per_file: int, batch: int, seed: int = 0) -> tuple[list[Path], Path]:
    """The state's documents in files of ``per_file`` (a near-copy of every Reuters body, then distinct
    pseudo-sources up to ``size``), and the batch file: new versions of ``batch`` of the stored near-copies
    (their last word changed)."""
    words = [t.split() for t in reuters_bodies()[0]]
    rng = np.random.default_rng(seed)
    chosen = set(np.random.default_rng(seed + 1).choice(len(words), batch, replace=False).tolist())
    versions, files, fh = [], [], None
    for d in range(size):
        if d % per_file == 0:
            if fh:
                fh.close()
            files.append(folder / f"state-{len(files):03d}.jsonl")
            fh = open(files[-1], "w", encoding="utf-8")
        if d < len(words):
            doc = {"id": f"r{d}", "text": _near_copy(words[d], rng)}
            if d in chosen:
                versions.append(doc["text"].rsplit(" ", 1)[0] + f" v{rng.integers(1 << 30)}")
        else:
            base = list(words[d % len(words)])
            for i in rng.choice(len(base), max(1, int(0.3 * len(base))), replace=False):
                base[i] = f"s{d}x{rng.integers(1 << 20)}"
            doc = {"id": f"p{d}", "text": " ".join(base)}
        fh.write(json.dumps(doc) + "\n")
    fh.close()
    path = folder / "batch.jsonl"
    with open(path, "w", encoding="utf-8") as out:
        for i, text in enumerate(versions):
            out.write(json.dumps({"id": f"b{i}", "text": text}) + "\n")
    return files, path


def state_bytes(state: Path) -> tuple[int, int]:
    """(bytes of the state without the shingle sets, bytes of the shingle sets)."""
    files = [p for p in state.rglob("*") if p.is_file()]
    sets = sum(p.stat().st_size for p in files if p.name.startswith("sets."))
    return sum(p.stat().st_size for p in files) - sets, sets


def scale(sizes: list[int], per_file: int, batch: int, work: Path, out: str) -> None:
    gpucurate = [sys.executable, "-m", "gpucurate"]
    rows = []
    for size in sizes:
        folder = work / f"n{size}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        files, batch_file = write_scale_corpus(folder, size, per_file, batch)
        state = folder / "state"
        build = [time_command([*gpucurate, "ingest", "--state", str(state), "--input", str(f), *QUIET]) for f in files]
        measured = time_command([*gpucurate, "ingest", "--state", str(state), "--input", str(batch_file), *QUIET])
        summary = json.loads((state / "MANIFEST.json").read_text())["batches"][-1]
        other, sets = state_bytes(state)
        n_state = size + summary["new_documents"]
        row = {"state_documents": size, "batch_documents": batch, "batch_new_aliases": summary["new_aliases"],
               "batch_seconds": measured["seconds"], "batch_peak_rss_mib": measured["peak_rss_mib"],
               "state_bytes_per_doc": round(other / n_state), "shingle_set_bytes_per_doc": round(sets / n_state),
               "build_ingests": len(files), "build_seconds": round(sum(b["seconds"] for b in build), 1),
               "build_peak_rss_mib": max(b["peak_rss_mib"] for b in build)}
        if size == max(sizes):  # one run over the same documents
            run = time_command([*gpucurate, "run", "--input", *map(str, files), "--output", str(folder / "run"), *QUIET])
            row["run_seconds"] = run["seconds"]
            row["build_over_run"] = round(row["build_seconds"] / run["seconds"], 2)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
        shutil.rmtree(folder)
    first, last = rows[0], rows[-1]
    targets = {"batch_wall_ratio": round(last["batch_seconds"] / first["batch_seconds"], 2),
               "batch_rss_ratio": round(last["batch_peak_rss_mib"] / first["batch_peak_rss_mib"], 2)}
    print_table(rows, list(rows[-1]), f"a {batch:,}-document batch into states of {', '.join(f'{s:,}' for s in sizes)}"
                " documents (CLI, exact + fuzzy)")
    print(json.dumps(targets), file=sys.stderr)
    write_json({"rows": rows, "ratios": targets}, out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--dtype", default="bfloat16", help="encoder dtype (bfloat16 is ~2x faster on AMX CPUs)")
    ap.add_argument("--archive", type=int, default=0, metavar="N",
                    help="use N documents of the templated archive generator instead of Reuters")
    ap.add_argument("--out", default=None, help="JSON output (default benchmarks/results/ingest[-archive].json)")
    ap.add_argument("--scale", type=int, nargs="+", metavar="DOCUMENTS",
                    help="measure a batch against states of these sizes (see above)")
    ap.add_argument("--build-batch", type=int, default=100_000, help="documents per ingest building a --scale state")
    ap.add_argument("--batch", type=int, default=2000, help="documents of the --scale batch")
    ap.add_argument("--work", default=None, help="folder for the --scale corpora and states (default: temporary)")
    args = ap.parse_args()
    if args.scale:
        with tempfile.TemporaryDirectory() as d:
            scale(sorted(args.scale), args.build_batch, args.batch, Path(args.work or d),
                  args.out or "benchmarks/results/ingest-scale.json")
        return
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
            reg = state.registry()
            every = np.arange(state.n_rows)
            records = state.records(every)
            cfg_sem = {**overrides}
            from gpucurate.config import load_config
            cfg = load_config(None, cfg_sem)
            encoder = encoder_for(cfg, "cpu")
            stored = read_rows(state.vector_files(), vector_record(encoder.dim), np.arange(state.n_vectors))
            vectors = stored["vector"]
            by_hash = dict(zip(stored["hash"].tolist(), range(len(stored))))
            docs = pd.DataFrame({"doc_id": state.doc_ids(every), "text_hash": records["text_hash"],
                                 "empty": records["empty"]})
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
