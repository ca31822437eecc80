"""PgvectorSink against a real PostgreSQL 16 + pgvector server (tests/pg_server.py, started once per session).

Skips when pgserver, psycopg or pgvector are not installed; fails (with the server log) when they are but the
server does not start. Every test works in its own schema.
"""
import datetime as dt
import os
import re

import numpy as np
import pandas as pd
import pytest


UTC = dt.timezone.utc


@pytest.fixture
def schema(request):
    return "t_" + re.sub(r"\W", "_", request.node.name).lower()[:50]


@pytest.fixture
def sink(pg_dsn, schema):
    from gpucurate.rag.sinks import PgvectorSink
    s = PgvectorSink(pg_dsn, dim=4, schema=schema)
    yield s
    s.close()


def vec(*xs):
    return np.array(xs, dtype=np.float32)


def as_np(v):
    """A vector read back by psycopg (pgvector.Vector in pgvector >= 0.4, a NumPy array before)."""
    return np.asarray(v.to_numpy() if hasattr(v, "to_numpy") else v, dtype=np.float32)


def ts(s):
    return pd.Timestamp(s, tz="UTC")


def rows(db, schema, table, order):
    return db.execute(f"SELECT * FROM {schema}.{table} ORDER BY {order}").fetchall()


def docs_frame(**over):
    df = pd.DataFrame({
        "doc_id": ["a", "b", "c"],
        "text": ["alpha text", "beta text", "gamma text"],
        "metadata": [{"src": "x", "n": 1}, '{"src": "y"}', None],
        "embedding": [vec(1, 0, 0, 0), vec(0, 1, 0, 0), None],
        "cluster_size": [2, 1, 1],
        "first_seen": [ts("2026-01-10"), "2026-01-11T00:00:00Z", pd.Timestamp("2026-01-12")],  # naive = UTC
        "last_seen": [ts("2026-02-10"), ts("2026-02-11"), ts("2026-02-12")],
    })
    for k, v in over.items():
        df[k] = v
    return df


# ---------------------------------------------------------------------------------------------------------
# the server

def test_server_is_local_tcp_non_root_with_pgvector(db):
    assert db.execute("SHOW listen_addresses").fetchone()[0] == "127.0.0.1"
    assert db.execute("SHOW unix_socket_directories").fetchone()[0] == ""
    assert str(db.execute("SELECT inet_server_addr()").fetchone()[0]) == "127.0.0.1"
    db.execute("CREATE EXTENSION IF NOT EXISTS vector")
    assert db.execute("SELECT '[1,0]'::vector <=> '[0,1]'::vector").fetchone()[0] == pytest.approx(1.0)
    backend = db.execute("SELECT pg_backend_pid()").fetchone()[0]
    if os.path.exists(f"/proc/{backend}"):
        uid = os.stat(f"/proc/{backend}").st_uid
        assert uid != 0
        if os.geteuid() != 0:
            assert uid == os.geteuid()


# ---------------------------------------------------------------------------------------------------------
# schema

def test_ensure_schema_idempotent_with_hnsw_indexes(sink, db, schema, pg_dsn):
    from gpucurate.rag.sinks.pgvector import PgvectorSink
    sink.ensure_schema(4)
    sink.ensure_schema(4)
    tables = {r[0] for r in db.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", [schema])}
    assert tables == {"documents", "document_aliases", "chunks", "document_chunks"}  # documents_all: on use
    indexes = dict(db.execute("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s", [schema]).fetchall())
    for name, table in [("documents_embedding_hnsw", "documents"), ("chunks_embedding_hnsw", "chunks")]:
        assert f"ON {schema}.{table} USING hnsw (embedding vector_cosine_ops)" in indexes[name]
    assert "(canonical_id, ingested_at)" in indexes["document_aliases_canonical_idx"]
    assert db.execute("SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = %s::regclass "
                      "AND attname = 'embedding'", [f"{schema}.documents"]).fetchone()[0] == "vector(4)"
    assert sink.counts() == {"documents": 0, "document_aliases": 0, "chunks": 0, "document_chunks": 0}
    # a fresh sink without dim reads it from the tables
    other = PgvectorSink(pg_dsn, schema=schema)
    assert other.search(vec(1, 0, 0, 0)).empty and other.dim == 4
    other.close()


def test_dim_mismatch_is_a_clear_error(sink, schema, pg_dsn):
    from gpucurate.errors import GpucurateError, SinkError
    from gpucurate.rag.sinks.pgvector import PgvectorSink
    sink.ensure_schema(4)
    other = PgvectorSink(pg_dsn, schema=schema)
    with pytest.raises(SinkError, match=rf"{schema}\.documents holds 4-dimensional embeddings, not 8"):
        other.ensure_schema(8)
    with pytest.raises(SinkError, match="opened with dim=4"):
        sink.ensure_schema(5)
    with pytest.raises(SinkError, match=r"row 1 \(id 'b'\): embedding has shape \(3,\), expected \(4,\)"):
        sink.upsert_documents(docs_frame(embedding=[vec(1, 0, 0, 0), vec(1, 0, 0), None]))
    with pytest.raises(SinkError, match=r"query embedding has shape \(5,\)"):
        sink.search(np.ones(5))
    assert issubclass(SinkError, GpucurateError) and SinkError.exit_code == 1
    other.close()


# ---------------------------------------------------------------------------------------------------------
# writes

def test_upsert_documents_idempotent_and_merge_rules(sink, db, schema):
    first = docs_frame()
    assert sink.upsert_documents(first) == 3
    snapshot = rows(db, schema, "documents", "doc_id")
    assert sink.upsert_documents(first) == 0  # nothing changed, nothing rewritten
    assert rows(db, schema, "documents", "doc_id") == snapshot
    assert sink.counts()["documents"] == 3

    doc = {r[0]: r for r in db.execute(f"SELECT doc_id, text, metadata, embedding, cluster_size, first_seen, "
                                       f"last_seen FROM {schema}.documents")}
    assert doc["a"][2] == {"src": "x", "n": 1} and doc["b"][2] == {"src": "y"} and doc["c"][2] is None
    assert np.array_equal(as_np(doc["a"][3]), vec(1, 0, 0, 0)) and doc["c"][3] is None
    assert doc["b"][5] == dt.datetime(2026, 1, 11, tzinfo=UTC)
    assert doc["c"][5] == dt.datetime(2026, 1, 12, tzinfo=UTC)  # naive timestamp taken as UTC

    second = pd.DataFrame({
        "doc_id": ["a", "b", "c", "d"],
        "text": ["alpha v2", "beta text", "gamma text", "delta"],
        "metadata": [{"src": "x2"}, '{"src": "y"}', None, None],
        "embedding": [None, vec(0, 0, 1, 0), vec(0, 0, 0, 1), vec(1, 1, 0, 0)],
        "cluster_size": [5, 1, 3, 1],
        # a: earlier first_seen, later last_seen -> both move; b: later first, earlier last -> neither moves
        "first_seen": [ts("2025-12-01"), ts("2026-03-01"), None, ts("2026-04-01")],
        "last_seen": [ts("2026-05-01"), ts("2026-01-20"), None, ts("2026-04-02")],
    })
    assert sink.upsert_documents(second) == 4
    doc = {r[0]: r for r in db.execute(f"SELECT doc_id, text, metadata, embedding, cluster_size, first_seen, "
                                       f"last_seen FROM {schema}.documents")}
    assert doc["a"][1:3] == ("alpha v2", {"src": "x2"}) and doc["a"][4] == 5
    assert np.array_equal(as_np(doc["a"][3]), vec(1, 0, 0, 0))  # None keeps the stored embedding
    assert (doc["a"][5], doc["a"][6]) == (dt.datetime(2025, 12, 1, tzinfo=UTC), dt.datetime(2026, 5, 1, tzinfo=UTC))
    assert np.array_equal(as_np(doc["b"][3]), vec(0, 0, 1, 0))  # a new embedding replaces the old one
    assert (doc["b"][5], doc["b"][6]) == (dt.datetime(2026, 1, 11, tzinfo=UTC), dt.datetime(2026, 2, 11, tzinfo=UTC))
    assert (doc["c"][5], doc["c"][6]) == (dt.datetime(2026, 1, 12, tzinfo=UTC), dt.datetime(2026, 2, 12, tzinfo=UTC))
    assert np.array_equal(as_np(doc["c"][3]), vec(0, 0, 0, 1)) and doc["c"][4] == 3
    snapshot = rows(db, schema, "documents", "doc_id")
    assert sink.upsert_documents(second) == 0
    assert rows(db, schema, "documents", "doc_id") == snapshot
    assert sink.counts()["documents"] == 4


def test_upsert_values_are_cleaned_and_validated(sink, db, schema):
    from gpucurate.errors import SinkError
    df = docs_frame(text=["nul\x00inside", "b", "c"], metadata=[{"k": "v\x00", "n": np.int64(3)}, None, "[1, 2]"])
    sink.upsert_documents(df)
    got = dict(db.execute(f"SELECT doc_id, text FROM {schema}.documents").fetchall())
    assert got["a"] == "nul\ufffdinside"
    meta = dict(db.execute(f"SELECT doc_id, metadata FROM {schema}.documents").fetchall())
    assert meta["a"] == {"k": "v\ufffd", "n": 3} and meta["c"] == [1, 2]
    bad = [
        (docs_frame(doc_id=["a", "b", "a"]), "doc_id must be unique.*'a'"),
        (docs_frame(metadata=[None, "{not json", None]), r"row 1 \(id 'b'\): metadata is not valid JSON"),
        (docs_frame(embedding=[None, vec(np.nan, 0, 0, 0), None]), "NaN or infinity"),
        (docs_frame(embedding=[None, vec(0, 0, 0, 0), None]), "all zeros"),
        (docs_frame(first_seen=["2026-01-01", "yesterday", None]), "first_seen: not a timestamp"),
        (docs_frame(cluster_size=[1, 2.5, 1]), "cluster_size=2.5 is not a 32-bit integer"),
        (docs_frame(text=["x", None, "z"]), r"row 1 \(id 'b'\): text is null"),
        (docs_frame().drop(columns=["text"]), "missing column.*text"),
    ]
    before = rows(db, schema, "documents", "doc_id")
    for frame, message in bad:
        with pytest.raises(SinkError, match=message):
            sink.upsert_documents(frame)
    assert rows(db, schema, "documents", "doc_id") == before


def test_upsert_aliases_idempotent(sink, db, schema):
    from gpucurate.errors import SinkError
    sink.upsert_documents(docs_frame())
    aliases = pd.DataFrame({
        "alias_id": ["a1", "a2", "b1"],
        "canonical_id": ["a", "a", "b"],
        "stage": ["exact", "fuzzy", "semantic"],
        "similarity": [1.0, 0.91, np.nan],
        "metadata": [None, {"why": "near"}, None],
        "ingested_at": [ts("2026-03-01"), ts("2026-03-05"), None],
    })
    assert sink.upsert_aliases(aliases) == 3
    snapshot = rows(db, schema, "document_aliases", "alias_id")
    assert snapshot[2][3] is None  # NaN similarity -> NULL
    b1_at = snapshot[2][5]
    assert sink.upsert_aliases(aliases) == 0
    assert rows(db, schema, "document_aliases", "alias_id") == snapshot  # None ingested_at keeps the stored time
    changed = aliases.assign(canonical_id=["a", "b", "b"], similarity=[1.0, 0.88, 0.8])
    assert sink.upsert_aliases(changed) == 2
    got = {r[0]: r for r in rows(db, schema, "document_aliases", "alias_id")}
    assert got["a2"][1:4] == ("b", "fuzzy", pytest.approx(0.88)) and got["b1"][3] == pytest.approx(0.8)
    assert got["b1"][5] == b1_at and sink.counts()["document_aliases"] == 3
    with pytest.raises(SinkError, match="stage 'minhash' is not one of exact, fuzzy, semantic"):
        sink.upsert_aliases(aliases.assign(stage=["exact", "minhash", "fuzzy"]))
    sink.refresh_cluster_sizes()
    sizes = dict(db.execute(f"SELECT doc_id, cluster_size FROM {schema}.documents").fetchall())
    assert sizes == {"a": 2, "b": 3, "c": 1}


def test_failed_batch_leaves_tables_unchanged(sink, db, schema):
    from gpucurate.errors import SinkError
    rng = np.random.default_rng(1)
    n = 200
    good = pd.DataFrame({"doc_id": [f"d{i:03d}" for i in range(n)], "text": [f"t{i}" for i in range(n)],
                         "embedding": list(rng.standard_normal((n, 4)).astype(np.float32))})
    sink.upsert_documents(good.iloc[:50])
    before = rows(db, schema, "documents", "doc_id")
    # a row with the wrong dimension in the middle of a batch that also updates existing rows
    bad = good.assign(text=[f"new{i}" for i in range(n)])
    bad.at[120, "embedding"] = np.ones(3, np.float32)
    with pytest.raises(SinkError, match=r"row 120 \(id 'd120'\)"):
        sink.upsert_documents(bad)
    assert rows(db, schema, "documents", "doc_id") == before

    # a failure inside the database half-way through one call: the chunks are merged first, then a link
    # to an unknown chunk violates the foreign key -> the chunk rows written before must be rolled back too
    chunks = pd.DataFrame({"chunk_id": ["k1", "k2"], "text": ["one", "two"], "token_count": [1, 1],
                           "embedding": [vec(1, 0, 0, 0), vec(0, 1, 0, 0)], "occurrences": [1, 1]})
    links = pd.DataFrame({"doc_id": ["d000", "d001"], "position": [0, 0], "chunk_id": ["k1", "k2"]})
    assert sink.upsert_chunks(chunks, links) == (2, 2)
    before_chunks = rows(db, schema, "chunks", "chunk_id")
    before_links = rows(db, schema, "document_chunks", "doc_id, position")
    more = pd.DataFrame({"chunk_id": ["k1", "k3"], "text": ["one", "three"], "token_count": [1, 1],
                         "embedding": [None, vec(0, 0, 1, 0)], "occurrences": [7, 1]})
    bad_links = pd.DataFrame({"doc_id": ["d002", "d002", "d003"], "position": [0, 1, 0],
                              "chunk_id": ["k3", "missing", "k1"]})
    with pytest.raises(SinkError, match="upsert_chunks failed, nothing was written.*foreign key"):
        sink.upsert_chunks(more, bad_links)
    assert rows(db, schema, "chunks", "chunk_id") == before_chunks
    assert rows(db, schema, "document_chunks", "doc_id, position") == before_links
    # the connection is usable afterwards
    assert sink.upsert_chunks(more, bad_links.iloc[[0, 2]]) == (2, 2)


def test_backend_killed_mid_write_leaves_tables_unchanged(sink, db, schema, monkeypatch):
    from gpucurate.errors import SinkError
    chunks = pd.DataFrame({"chunk_id": ["k1"], "text": ["one"], "token_count": [1], "embedding": [vec(1, 0, 0, 0)]})
    sink.upsert_chunks(chunks, pd.DataFrame({"doc_id": ["d"], "position": [0], "chunk_id": ["k1"]}))
    before = (rows(db, schema, "chunks", "chunk_id"), rows(db, schema, "document_chunks", "doc_id, position"))
    pid = sink._connection().info.backend_pid
    original = type(sink)._copy_stage

    def crash_before_links(self, conn, name, columns, data):
        if name == "gpucurate_stage_document_chunks":  # the chunks are already merged in this transaction
            db.execute("SELECT pg_terminate_backend(%s)", [pid])
        return original(self, conn, name, columns, data)
    monkeypatch.setattr(type(sink), "_copy_stage", crash_before_links)
    more = pd.DataFrame({"chunk_id": ["k1", "k2"], "text": ["one", "two"], "token_count": [1, 1],
                         "embedding": [vec(1, 0, 0, 0), vec(0, 1, 0, 0)], "occurrences": [9, 1]})
    links = pd.DataFrame({"doc_id": ["d", "e"], "position": [1, 0], "chunk_id": ["k2", "k2"]})
    with pytest.raises(SinkError, match="upsert_chunks failed, nothing was written"):
        sink.upsert_chunks(more, links)
    assert (rows(db, schema, "chunks", "chunk_id"), rows(db, schema, "document_chunks", "doc_id, position")) == before
    monkeypatch.undo()
    assert sink.upsert_chunks(more, links) == (2, 2)  # reconnects; the same call now goes through
    assert sink.counts()["chunks"] == 2 and sink.counts()["document_chunks"] == 3


def test_bulk_batch_rebuilds_hnsw_and_reruns_are_cheap(pg_dsn, db, schema):
    from gpucurate.rag.sinks.pgvector import PgvectorSink
    rng = np.random.default_rng(2)
    n, d = 1500, 16
    emb = rng.standard_normal((n, d)).astype(np.float32)
    df = pd.DataFrame({"doc_id": [f"d{i}" for i in range(n)], "text": ["x" * 100] * n, "embedding": list(emb),
                       "first_seen": [ts("2026-01-01")] * n, "last_seen": [ts("2026-01-02")] * n})
    with PgvectorSink(pg_dsn, schema=schema) as s:  # dim taken from the first embedding
        assert s.upsert_documents(df) == n and s.dim == d
        assert s.upsert_documents(df) == 0
        # a small second batch goes through the existing index
        extra = df.iloc[:10].assign(doc_id=[f"e{i}" for i in range(10)])
        assert s.upsert_documents(extra) == 10
        assert s.counts()["documents"] == n + 10
        hits = s.search(emb[7], k=5)
        assert hits["doc_id"].iloc[0] == "d7" and hits["score"].iloc[0] == pytest.approx(1.0, abs=1e-5)
    assert db.execute("SELECT count(*) FROM pg_indexes WHERE schemaname = %s AND indexname = "
                      "'documents_embedding_hnsw'", [schema]).fetchone()[0] == 1


# ---------------------------------------------------------------------------------------------------------
# search

def _search_fixture(sink):
    # canonical documents at known angles around the query direction (1, 0, 0, 0)
    docs = pd.DataFrame({
        "doc_id": ["near", "mid", "far", "opposite", "noemb"],
        "text": ["N" * 1000, "mid", "far", "opposite", "no embedding"],
        "embedding": [vec(1, 0.1, 0, 0), vec(1, 1, 0, 0), vec(0, 1, 0.2, 0), vec(-1, 0, 0, 0), None],
        "last_seen": [ts("2026-06-01")] * 5,
    })
    sink.upsert_documents(docs)
    sink.upsert_aliases(pd.DataFrame({
        "alias_id": ["n1", "n2", "n3", "m1"],
        "canonical_id": ["near", "near", "near", "mid"],
        "stage": ["exact", "fuzzy", "semantic", "fuzzy"],
        "similarity": [1.0, 0.9, 0.95, 0.85],
        "ingested_at": [ts("2026-05-01"), ts("2026-07-01"), ts("2026-06-01"), ts("2026-05-02")],
    }))
    return docs


def test_search_returns_nearest_canonicals_with_alias_stats(sink):
    docs = _search_fixture(sink)
    q = np.array([1.0, 0.05, 0.0, 0.0])
    hits = sink.search(q, k=10)
    embs = {r.doc_id: r.embedding for r in docs.itertuples() if r.embedding is not None}
    qn = q / np.linalg.norm(q)
    expected = sorted(embs, key=lambda k: -float(embs[k] @ qn / np.linalg.norm(embs[k])))
    assert list(hits["doc_id"]) == expected == ["near", "mid", "far", "opposite"]  # no NULL embeddings
    for row in hits.itertuples():
        e = embs[row.doc_id]
        assert row.score == pytest.approx(float(e @ qn / np.linalg.norm(e)), abs=1e-5)
    by = hits.set_index("doc_id")
    assert by.loc["near", "alias_count"] == 3 and by.loc["near", "newest_alias_id"] == "n2"
    assert by.loc["near", "newest_alias_at"] == ts("2026-07-01")
    assert by.loc["mid", "alias_count"] == 1 and by.loc["mid", "newest_alias_id"] == "m1"
    assert by.loc["far", "alias_count"] == 0 and pd.isna(by.loc["far", "newest_alias_id"])
    assert pd.isna(by.loc["far", "newest_alias_at"]) and by.loc["far", "last_seen"] == ts("2026-06-01")
    assert len(by.loc["near", "text"]) == sink.SNIPPET_CHARS
    assert list(sink.search(q, k=2)["doc_id"]) == ["near", "mid"]


def test_search_plan_uses_hnsw_and_k_above_ef_search(sink, schema):
    rng = np.random.default_rng(3)
    n = 300
    sink.upsert_documents(pd.DataFrame({"doc_id": [f"d{i}" for i in range(n)], "text": ["t"] * n,
                                        "embedding": list(rng.standard_normal((n, 4)).astype(np.float32))}))
    conn = sink._connection()
    conn.execute("SET enable_seqscan = off")  # small table: make the planner show the index path
    plan = "\n".join(r[0] for r in conn.execute(
        b"EXPLAIN " + sink.search_sql().as_bytes(conn), {"q": vec(1, 0, 0, 0), "k": 100, "snip": 10}))
    assert "Index Scan using documents_embedding_hnsw" in plan
    assert "document_aliases_canonical_idx" in plan
    # HNSW returns at most hnsw.ef_search (default 40) rows; search raises it to k
    assert len(sink.search(vec(1, 0, 0, 0), k=100)) == 100
    conn.execute("RESET enable_seqscan")


def test_search_without_dedup_uses_documents_all(sink):
    from gpucurate.errors import SinkError
    _search_fixture(sink)
    with pytest.raises(SinkError, match="documents_all does not exist.*upsert_all_documents"):
        sink.search(vec(1, 0, 0, 0), use_dedup=False)
    everything = pd.DataFrame({
        "doc_id": ["near", "n1", "n2", "mid", "far"],
        "text": ["near", "alias 1", "alias 2", "mid", "far"],
        "embedding": [vec(1, 0.1, 0, 0), vec(1, 0.1, 0, 0.01), vec(1, 0.12, 0, 0), vec(1, 1, 0, 0), vec(0, 1, 0.2, 0)],
    })
    assert sink.upsert_all_documents(everything) == 5
    assert sink.upsert_all_documents(everything) == 0
    hits = sink.search(vec(1, 0.1, 0, 0), k=3, use_dedup=False)
    assert list(hits["doc_id"]) == ["near", "n1", "n2"]  # the duplicates crowd out "mid"
    assert (hits["alias_count"] == 0).all()
    assert list(sink.search(vec(1, 0.1, 0, 0), k=3)["doc_id"]) == ["near", "mid", "far"]
    assert sink.counts()["documents_all"] == 5


def test_upsert_and_search_chunks(sink, db, schema):
    chunks = pd.DataFrame({"chunk_id": ["c1", "c2", "c3"], "text": ["shared boilerplate", "unique", "no emb"],
                           "token_count": [2, 1, 2],
                           "embedding": [vec(1, 0, 0, 0), vec(0, 1, 0, 0), None], "occurrences": [3, 1, 1]})
    links = pd.DataFrame({"doc_id": ["b", "a", "a", "b"], "position": [0, 0, 2, 1],
                          "chunk_id": ["c1", "c1", "c1", "c2"]})
    assert sink.upsert_chunks(chunks, links) == (3, 4)
    assert sink.upsert_chunks(chunks, links) == (0, 0)
    assert sink.counts()["chunks"] == 3 and sink.counts()["document_chunks"] == 4
    hits = sink.search_chunks(vec(1, 0.2, 0, 0), k=5)
    assert list(hits["chunk_id"]) == ["c1", "c2"]
    assert hits["doc_ids"].iloc[0] == ["a", "b"] and hits["doc_ids"].iloc[1] == ["b"]
    assert hits["occurrences"].iloc[0] == 3 and hits["token_count"].iloc[0] == 2
    # new total occurrences, embedding None keeps the stored one, a link re-pointed
    assert sink.upsert_chunks(chunks.iloc[[0]].assign(occurrences=[5], embedding=[None]),
                              pd.DataFrame({"doc_id": ["a"], "position": [2], "chunk_id": ["c3"]})) == (1, 1)
    got = {r[0]: r for r in db.execute(f"SELECT chunk_id, occurrences, embedding FROM {schema}.chunks")}
    assert got["c1"][1] == 5 and np.array_equal(as_np(got["c1"][2]), vec(1, 0, 0, 0))
    assert db.execute(f"SELECT chunk_id FROM {schema}.document_chunks WHERE doc_id = 'a' AND position = 2"
                      ).fetchone()[0] == "c3"


# ---------------------------------------------------------------------------------------------------------
# connection errors

def test_connection_failure_names_host_and_db_not_password(pg_dsn):
    import socket
    from gpucurate.errors import SinkError
    from gpucurate.rag.sinks.pgvector import PgvectorSink
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    sink = PgvectorSink(f"postgresql://someone:s3cretpw@127.0.0.1:{port}/ragdb?connect_timeout=3", dim=4)
    assert "s3cretpw" not in repr(sink)
    with pytest.raises(SinkError) as err:
        sink.counts()
    message = str(err.value)
    assert f"127.0.0.1:{port}/ragdb" in message and "s3cretpw" not in message and "\n" not in message
    with pytest.raises(SinkError, match="invalid PostgreSQL DSN") as err:
        PgvectorSink("host=x password=s3cretpw dbname='unterminated")
    assert "s3cretpw" not in str(err.value)


def test_missing_vector_extension_is_a_sink_error(pg_dsn, db):
    from psycopg.conninfo import conninfo_to_dict, make_conninfo
    from gpucurate.errors import SinkError
    from gpucurate.rag.sinks.pgvector import PgvectorSink
    # a database without the extension, and a role that may not create it (pgvector is not a trusted extension)
    db.execute("DROP DATABASE IF EXISTS novector")
    db.execute("DROP ROLE IF EXISTS plainuser")
    db.execute("CREATE ROLE plainuser LOGIN")
    db.execute("CREATE DATABASE novector OWNER plainuser")
    info = conninfo_to_dict(pg_dsn)
    dsn = make_conninfo(**{**info, "user": "plainuser", "dbname": "novector"})
    with pytest.raises(SinkError, match=r"pgvector extension \('vector'\) is not installed in PostgreSQL "
                                        r"127\.0\.0\.1:\d+/novector"):
        PgvectorSink(dsn, dim=4).ensure_schema(4)
