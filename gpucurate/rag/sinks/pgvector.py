"""PostgreSQL + pgvector sink: canonical documents with embeddings, their aliases, and chunks.

Self-contained: it takes pandas DataFrames and NumPy arrays and knows nothing about the pipeline. It needs
psycopg 3 and the ``pgvector`` Python package (the ``pgvector`` extra) and a server with the ``vector``
extension (pgvector >= 0.5 for HNSW).

Tables, all in one schema (``public`` by default)::

    documents         doc_id text PK, text, metadata jsonb, embedding vector(dim), cluster_size int,
                      first_seen timestamptz, last_seen timestamptz          + HNSW (embedding vector_cosine_ops)
    document_aliases  alias_id text PK, canonical_id text, stage text ('exact'|'fuzzy'|'semantic'),
                      similarity float8, metadata jsonb, ingested_at timestamptz
                                                                             + btree (canonical_id, ingested_at)
    chunks            chunk_id text PK, text, token_count int, embedding vector(dim), occurrences int
                                                                             + HNSW (embedding vector_cosine_ops)
    document_chunks   (doc_id, position) PK, chunk_id text -> chunks         + btree (chunk_id)
    documents_all     every document, canonical or not (benchmarking search without deduplication);
                      created by the first ``upsert_all_documents``         + HNSW (embedding vector_cosine_ops)

There are no foreign keys from aliases to documents: the caller may write aliases before their canonical,
and a later batch may re-point an alias to another canonical. ``document_chunks.chunk_id`` does reference
``chunks`` (both are written by one ``upsert_chunks`` call).

Every write call is one transaction: the rows are streamed with binary COPY into a temporary table and
merged with one ``INSERT ... SELECT ... ON CONFLICT DO UPDATE``, so a failure anywhere (bad row, lost
connection, crash) leaves the tables as they were, and re-running the same call gives the same rows.
Rows whose values would not change are not rewritten (a re-run costs a read, not index inserts), and
a batch of embeddings larger than its table rebuilds the HNSW index instead of inserting row by row.
Inputs are validated before anything is sent; errors are ``SinkError`` with a one-line message that names
the server as ``host:port/dbname`` (never the password) and the offending row.

Values: text cannot hold NUL in PostgreSQL, so NUL characters in text and metadata become U+FFFD.
Timestamps may be datetimes, pandas Timestamps or ISO 8601 strings; naive ones are taken as UTC; they are
stored with microsecond precision and returned in UTC.
"""
from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd

from ...errors import SinkError

STAGES = ("exact", "fuzzy", "semantic")
CORE_TABLES = ("documents", "document_aliases", "chunks", "document_chunks")
ALL_TABLES = CORE_TABLES + ("documents_all",)
HNSW_MAX_DIM = 2000          # pgvector's limit for an HNSW index on vector
HNSW_MAX_EF_SEARCH = 1000    # pgvector's limit for hnsw.ef_search


# ----------------------------------------------------------------------------------------------------------
# driver and DSN helpers

def _driver():
    try:
        import psycopg
        from pgvector.psycopg import register_vector
    except ImportError as exc:
        raise SinkError(f"the pgvector sink needs psycopg 3 and pgvector ({exc.name} is missing): "
                        "pip install 'gpucurate[pgvector]'") from exc
    return psycopg, register_vector


def _conninfo(dsn: str) -> dict:
    try:
        from psycopg.conninfo import conninfo_to_dict
        return conninfo_to_dict(dsn)
    except Exception:  # a malformed DSN; its text may hold a password, so it is never echoed
        raise SinkError("invalid PostgreSQL DSN (expected postgresql://user@host:port/dbname or "
                        "'host=... dbname=...')") from None


def _describe(info: dict) -> str:
    """``host:port/dbname`` of a parsed DSN, with libpq's defaults (environment, then localhost:5432)."""
    import os
    host = info.get("host") or info.get("hostaddr") or os.environ.get("PGHOST") or "localhost"
    port = info.get("port") or os.environ.get("PGPORT") or "5432"
    user = info.get("user") or os.environ.get("PGUSER")
    db = info.get("dbname") or os.environ.get("PGDATABASE") or user or "(default db)"
    return f"{host}:{port}/{db}"


def _one_line(exc: BaseException, secret: str | None = None) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    if secret:
        text = text.replace(secret, "***")
    return text


# ----------------------------------------------------------------------------------------------------------
# input normalisation: DataFrame columns -> lists of values the binary COPY dumpers accept

def _isnull(v: Any) -> bool:
    return v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and math.isnan(v))


def _where(what: str, i: int, ids: list | None) -> str:
    return f"{what}: row {i}" + (f" (id {ids[i]!r})" if ids is not None and i < len(ids) else "")


def _check_frame(df: Any, what: str, required: Iterable[str]) -> None:
    if not isinstance(df, pd.DataFrame):
        raise SinkError(f"{what}: expected a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise SinkError(f"{what}: missing column(s) {', '.join(missing)} (has {', '.join(map(str, df.columns))})")


def _strings(df: pd.DataFrame, col: str, what: str, ids: list | None = None) -> list[str]:
    out = []
    for i, v in enumerate(df[col].tolist()):
        if _isnull(v):
            raise SinkError(f"{_where(what, i, ids)}: {col} is null")
        s = v if isinstance(v, str) else str(v)
        out.append(s.replace("\x00", "\ufffd") if "\x00" in s else s)
    return out


def _unique_ids(ids: list[str], what: str, col: str) -> None:
    dup = pd.Series(ids).duplicated()
    if dup.any():
        shown = sorted(set(pd.Series(ids)[dup].tolist()))[:5]
        raise SinkError(f"{what}: {col} must be unique within one call; repeated: {', '.join(map(repr, shown))}")


def _ints(df: pd.DataFrame, col: str, what: str, ids: list | None, nullable: bool) -> list[int | None]:
    if col not in df.columns:
        return [None] * len(df)
    out: list[int | None] = []
    for i, v in enumerate(df[col].tolist()):
        if _isnull(v):
            if not nullable:
                raise SinkError(f"{_where(what, i, ids)}: {col} is null")
            out.append(None)
            continue
        try:
            iv = int(v)
            ok = iv == v and -2**31 <= iv < 2**31
        except (TypeError, ValueError, OverflowError):
            ok = False
        if not ok:
            raise SinkError(f"{_where(what, i, ids)}: {col}={v!r} is not a 32-bit integer")
        out.append(iv)
    return out


def _floats(df: pd.DataFrame, col: str, what: str, ids: list | None) -> list[float | None]:
    if col not in df.columns:
        return [None] * len(df)
    out: list[float | None] = []
    for i, v in enumerate(df[col].tolist()):
        if _isnull(v):
            out.append(None)
            continue
        try:
            out.append(float(v))
        except (TypeError, ValueError):
            raise SinkError(f"{_where(what, i, ids)}: {col}={v!r} is not a number") from None
    return out


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "isoformat"):
        return obj.isoformat()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    return str(obj)


def _strip_nul(obj: Any) -> Any:
    if isinstance(obj, str):
        return obj.replace("\x00", "\ufffd")
    if isinstance(obj, dict):
        return {_strip_nul(k): _strip_nul(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_strip_nul(v) for v in obj]
    return obj


def _json_texts(df: pd.DataFrame, col: str, what: str, ids: list | None) -> list[str | None]:
    """Metadata as JSON text (cast to jsonb on the server): dicts/lists are serialised, JSON strings
    validated; None/NaN -> NULL."""
    import orjson

    if col not in df.columns:
        return [None] * len(df)
    opts = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
    out: list[str | None] = []
    for i, v in enumerate(df[col].tolist()):
        if not isinstance(v, (dict, list)) and _isnull(v):
            out.append(None)
            continue
        try:
            obj = orjson.loads(v) if isinstance(v, (str, bytes)) else v
            text = orjson.dumps(obj, option=opts, default=_json_default).decode()
            if "\\u0000" in text:  # jsonb rejects \u0000
                text = orjson.dumps(_strip_nul(orjson.loads(text))).decode()
        except (orjson.JSONDecodeError, orjson.JSONEncodeError, TypeError) as exc:
            raise SinkError(f"{_where(what, i, ids)}: {col} is not valid JSON: {_one_line(exc)}") from None
        out.append(None if obj is None else text)
    return out


def _timestamps(df: pd.DataFrame, col: str, what: str) -> list:
    if col not in df.columns:
        return [None] * len(df)
    s = df[col]
    try:
        if pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s) and s.notna().any():
            raise ValueError("numbers are ambiguous; pass datetimes or ISO 8601 strings")
        if pd.api.types.is_datetime64_any_dtype(s):
            ts = pd.to_datetime(s, utc=True)
        else:
            ts = pd.to_datetime(s.astype(object), utc=True, format="ISO8601")
        ts = ts.dt.floor("us")  # PostgreSQL keeps microseconds; avoids pandas' "discarding nanoseconds"
    except (ValueError, TypeError, OverflowError) as exc:
        raise SinkError(f"{what}: column {col}: not a timestamp: {_one_line(exc)}") from None
    return [None if _isnull(t) else t.to_pydatetime() for t in ts.tolist()]


def _vectors(df: pd.DataFrame, col: str, what: str, ids: list | None, dim: int) -> list[np.ndarray | None]:
    """float32 1-D arrays of length ``dim`` (finite, non-zero norm: cosine distance needs a norm), or None."""
    if col not in df.columns:
        return [None] * len(df)
    out: list[np.ndarray | None] = []
    for i, v in enumerate(df[col].tolist()):
        if v is None or (not hasattr(v, "__len__") and _isnull(v)):
            out.append(None)
            continue
        try:
            a = np.ascontiguousarray(v, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise SinkError(f"{_where(what, i, ids)}: {col} is not a numeric vector: {_one_line(exc)}") from None
        if a.ndim != 1 or a.shape[0] != dim:
            raise SinkError(f"{_where(what, i, ids)}: {col} has shape {a.shape}, expected ({dim},)")
        if not np.isfinite(a).all():
            raise SinkError(f"{_where(what, i, ids)}: {col} holds NaN or infinity")
        if not a.any():
            raise SinkError(f"{_where(what, i, ids)}: {col} is all zeros (no cosine distance); pass None")
        out.append(a)
    return out


def _first_dim(df: pd.DataFrame, col: str) -> int | None:
    if col not in df.columns:
        return None
    for v in df[col].tolist():
        if v is not None and hasattr(v, "__len__"):
            return int(np.asarray(v).shape[-1])
    return None


# ----------------------------------------------------------------------------------------------------------
# the sink

class PgvectorSink:
    """Write canonical documents, aliases and chunks to PostgreSQL + pgvector, and search them.

    ``dsn``: a libpq connection string or URI. ``dim``: the embedding dimension; when None it is read from
    existing tables, or taken from the first embedding written. ``schema``: where the tables live (created
    if missing). The connection is opened on first use (autocommit; each write call is one explicit
    transaction) with the session time zone set to UTC; close it with ``close()`` or a ``with`` block.
    """

    SNIPPET_CHARS = 300  # characters of document text returned by search()
    BULK_MIN_ROWS = 1000  # batches with this many embeddings may rebuild the HNSW index (see _merge)

    def __init__(self, dsn: str, dim: int | None = None, schema: str = "public"):
        if not isinstance(dsn, str) or not dsn.strip():
            raise SinkError("PgvectorSink: dsn must be a non-empty connection string")
        if not isinstance(schema, str) or not schema:
            raise SinkError("PgvectorSink: schema must be a non-empty string")
        if dim is not None:
            self._check_dim(dim)
        info = _conninfo(dsn)
        self.dsn = dsn
        self.dim = int(dim) if dim is not None else None
        self.schema = schema
        self.where = _describe(info)
        self._password = info.get("password")
        self._has_timeout = "connect_timeout" in info
        self._conn = None
        self._ready = False  # ensure_schema has run on this connection

    def __repr__(self) -> str:
        return f"PgvectorSink({self.where}, schema={self.schema!r}, dim={self.dim})"

    def __enter__(self) -> "PgvectorSink":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- connection ---------------------------------------------------------------------------------------

    @staticmethod
    def _check_dim(dim: Any) -> None:
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or not 1 <= int(dim) <= HNSW_MAX_DIM:
            raise SinkError(f"embedding dimension must be an integer from 1 to {HNSW_MAX_DIM} "
                            f"(pgvector's HNSW limit), got {dim!r}")

    def _err(self, what: str, exc: BaseException) -> SinkError:
        return SinkError(f"{what} on PostgreSQL {self.where}: {_one_line(exc, self._password)}")

    def _connection(self):
        conn = self._conn
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        self._conn, self._ready = None, False
        psycopg, register_vector = _driver()
        from psycopg import sql

        kwargs = {} if self._has_timeout else {"connect_timeout": 10}
        try:
            conn = psycopg.connect(self.dsn, autocommit=True, **kwargs)
        except psycopg.Error as exc:
            raise SinkError(f"cannot connect to PostgreSQL {self.where}: {_one_line(exc, self._password)}") from exc
        try:
            conn.execute("SET TIME ZONE 'UTC'")
            ext_schema = self._vector_schema(conn)
            if ext_schema is None:
                try:
                    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                except psycopg.Error as exc:
                    ext_schema = self._vector_schema(conn)  # a concurrent session may have created it
                    if ext_schema is None:
                        raise SinkError(
                            f"the pgvector extension ('vector') is not installed in PostgreSQL {self.where} and "
                            f"could not be created ({_one_line(exc, self._password)}); install pgvector on the "
                            "server and run CREATE EXTENSION vector as a superuser") from exc
                ext_schema = ext_schema or self._vector_schema(conn)
            # the vector type and its operators (<=>) resolve through search_path
            conn.execute(sql.SQL("SET search_path TO {}, {}").format(sql.Identifier(self.schema),
                                                                   sql.Identifier(ext_schema)))
            register_vector(conn)
        except SinkError:
            conn.close()
            raise
        except psycopg.Error as exc:
            conn.close()
            raise self._err("setting up the session", exc) from exc
        self._conn = conn
        return conn

    @staticmethod
    def _vector_schema(conn) -> str | None:
        row = conn.execute("SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
                           "WHERE e.extname = 'vector'").fetchone()
        return row[0] if row else None

    def close(self) -> None:
        """Close the connection (idempotent); the sink reconnects if used again."""
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn, self._ready = None, False

    # -- schema -------------------------------------------------------------------------------------------

    def _ident(self, name: str):
        from psycopg import sql
        return sql.Identifier(self.schema, name)

    def _existing(self, conn) -> dict[str, int | None]:
        """Existing tables of this sink in the schema -> declared embedding dimension (None: no column/any)."""
        rows = conn.execute(
            "SELECT c.relname, a.atttypmod FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'embedding' AND NOT a.attisdropped "
            "WHERE n.nspname = %s AND c.relname = ANY(%s) AND c.relkind IN ('r', 'p')",
            [self.schema, list(ALL_TABLES)]).fetchall()
        return {name: (mod if mod is not None and mod > 0 else None) for name, mod in rows}

    def _ddl(self, table: str, dim: int) -> list:
        from psycopg import sql
        t = self._ident(table)
        vec = sql.SQL(f"vector({int(dim)})")
        if table == "documents":
            return [sql.SQL("""CREATE TABLE IF NOT EXISTS {t} (
                doc_id text PRIMARY KEY, text text NOT NULL, metadata jsonb, embedding {vec},
                cluster_size integer NOT NULL DEFAULT 1,
                first_seen timestamptz NOT NULL DEFAULT now(), last_seen timestamptz NOT NULL DEFAULT now())""")
                    .format(t=t, vec=vec)]
        if table == "document_aliases":
            return [sql.SQL("""CREATE TABLE IF NOT EXISTS {t} (
                alias_id text PRIMARY KEY, canonical_id text NOT NULL,
                stage text NOT NULL CHECK (stage IN ('exact', 'fuzzy', 'semantic')),
                similarity double precision, metadata jsonb, ingested_at timestamptz NOT NULL DEFAULT now())""")
                    .format(t=t)]
        if table == "chunks":
            return [sql.SQL("""CREATE TABLE IF NOT EXISTS {t} (
                chunk_id text PRIMARY KEY, text text NOT NULL, token_count integer NOT NULL, embedding {vec},
                occurrences integer NOT NULL DEFAULT 1)""").format(t=t, vec=vec)]
        if table == "document_chunks":
            return [sql.SQL("""CREATE TABLE IF NOT EXISTS {t} (
                doc_id text NOT NULL, position integer NOT NULL,
                chunk_id text NOT NULL REFERENCES {c} (chunk_id), PRIMARY KEY (doc_id, position))""")
                    .format(t=t, c=self._ident("chunks"))]
        if table == "documents_all":
            return [sql.SQL("""CREATE TABLE IF NOT EXISTS {t} (
                doc_id text PRIMARY KEY, text text NOT NULL, metadata jsonb, embedding {vec},
                first_seen timestamptz NOT NULL DEFAULT now(), last_seen timestamptz NOT NULL DEFAULT now())""")
                    .format(t=t, vec=vec)]
        raise ValueError(table)

    # index name -> (table, definition); HNSW with cosine distance: search orders by embedding <=> q
    _INDEXES = {
        "documents_embedding_hnsw": ("documents", "USING hnsw (embedding vector_cosine_ops)"),
        "document_aliases_canonical_idx": ("document_aliases", "(canonical_id, ingested_at)"),
        "chunks_embedding_hnsw": ("chunks", "USING hnsw (embedding vector_cosine_ops)"),
        "document_chunks_chunk_idx": ("document_chunks", "(chunk_id)"),
        "documents_all_embedding_hnsw": ("documents_all", "USING hnsw (embedding vector_cosine_ops)"),
    }

    def _create(self, conn, tables: Iterable[str], dim: int) -> None:
        """Create the missing ones of ``tables`` and their indexes, in the caller's transaction. Only missing
        objects are created, so a role without CREATE privilege can use tables that exist."""
        from psycopg import sql
        tables = list(tables)
        # serialise concurrent schema creation (CREATE ... IF NOT EXISTS races on the catalog)
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"gpucurate.pgvector.schema:{self.schema}"])
        existing = self._existing(conn)
        for name in tables:
            have = existing.get(name)
            if name in existing and have is not None and have != dim:
                raise SinkError(f"PostgreSQL {self.where}: table {self.schema}.{name} holds {have}-dimensional "
                                f"embeddings, not {dim}; use another schema or drop the tables")
        if any(t not in existing for t in tables):
            if conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [self.schema]).fetchone() is None:
                conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
            for name in tables:
                if name not in existing:
                    for stmt in self._ddl(name, dim):
                        conn.execute(stmt)
        present = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = %s",
                                              [self.schema]).fetchall()}
        for index, (table, definition) in self._INDEXES.items():
            if table in tables and index not in present:
                conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} " + definition)
                             .format(sql.Identifier(index), self._ident(table)))

    def ensure_schema(self, dim: int) -> None:
        """Create the ``vector`` extension (if missing), the schema, the four core tables and their indexes
        (HNSW cosine on the embeddings). Idempotent. Raises ``SinkError`` when existing tables hold embeddings
        of another dimension, or when the sink was opened with another ``dim``."""
        self._check_dim(dim)
        dim = int(dim)
        if self.dim is not None and self.dim != dim:
            raise SinkError(f"ensure_schema(dim={dim}) but this sink was opened with dim={self.dim}")
        conn = self._connection()
        psycopg, _ = _driver()
        try:
            with conn.transaction():
                self._create(conn, CORE_TABLES, dim)
        except psycopg.Error as exc:
            raise self._err("creating the tables", exc) from exc
        self.dim = dim
        self._ready = True

    def _prepare(self, df: pd.DataFrame | None = None, col: str = "embedding"):
        """Connection with the core tables present and ``self.dim`` known."""
        conn = self._connection()
        if self._ready:
            return conn
        if self.dim is None:
            existing = self._existing(conn)
            have = existing.get("documents") or existing.get("chunks")
            self.dim = have or (_first_dim(df, col) if df is not None else None)
            if self.dim is None:
                raise SinkError("embedding dimension unknown: pass dim= to PgvectorSink, call ensure_schema(dim), "
                                "or write rows with embeddings first")
        self.ensure_schema(self.dim)
        return conn

    def _known_dim(self, conn) -> int:
        if self.dim is None:
            existing = self._existing(conn)
            self.dim = existing.get("documents") or existing.get("chunks") or existing.get("documents_all")
        if self.dim is None:
            raise SinkError(f"PostgreSQL {self.where}: no gpucurate tables in schema {self.schema!r}; "
                            "nothing has been written yet")
        return self.dim

    # -- writes -------------------------------------------------------------------------------------------

    def _copy_stage(self, conn, name: str, columns: list[tuple[str, str]], data: list[list]) -> None:
        """Temporary table ``name`` (dropped at commit) filled by binary COPY from column lists."""
        from psycopg import sql
        defs = sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(t)) for c, t in columns)
        cols = sql.SQL(", ").join(sql.Identifier(c) for c, _ in columns)
        conn.execute(sql.SQL("CREATE TEMP TABLE {} ({}) ON COMMIT DROP").format(sql.Identifier(name), defs))
        with conn.cursor() as cur:
            with cur.copy(sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(sql.Identifier(name), cols)) as cp:
                cp.set_types([t for _, t in columns])
                for row in zip(*data):
                    cp.write_row(row)

    def _merge(self, conn, stage: str, columns: list[tuple[str, str]], data: list[list], merge_sql: str,
               table: str) -> int:
        """Stage ``data`` and run ``merge_sql``; returns the rows inserted or changed.

        Inserting into an HNSW index row by row costs milliseconds per row (10,000 384-d rows: ~30 s on 2
        cores) while building it afresh costs a tenth of that, so when a batch of at least ``BULK_MIN_ROWS``
        embeddings is larger than the table, the HNSW index is dropped and rebuilt inside the transaction
        (readers of that table wait for the commit)."""
        from psycopg import sql
        self._copy_stage(conn, stage, columns, data)
        index = next((name for name, (t, how) in self._INDEXES.items() if t == table and "hnsw" in how), None)
        rebuild = False
        if index is not None:
            embeddings = data[[c for c, _ in columns].index("embedding")]
            n_vec = sum(v is not None for v in embeddings)
            if n_vec >= self.BULK_MIN_ROWS:
                have = conn.execute(sql.SQL("SELECT count(*) FROM (SELECT 1 FROM {} LIMIT %s) x")
                                    .format(self._ident(table)), [n_vec]).fetchone()[0]
                rebuild = have < n_vec
        if rebuild:
            conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(self.schema, index)))
        with conn.cursor() as cur:
            cur.execute(sql.SQL(merge_sql).format(t=self._ident(table), s=sql.Identifier(stage)))
            written = cur.rowcount
        if rebuild:
            conn.execute(sql.SQL("CREATE INDEX {} ON {} " + self._INDEXES[index][1])
                         .format(sql.Identifier(index), self._ident(table)))
        return written

    def _transaction(self, what: str, conn, body: Callable[[], Any], write: bool = True) -> Any:
        psycopg, _ = _driver()
        try:
            with conn.transaction():
                return body()
        except psycopg.Error as exc:
            raise self._err(f"{what} failed" + (", nothing was written" if write else ""), exc) from exc

    _DOCUMENTS_MERGE = """
        INSERT INTO {t} AS d (doc_id, text, metadata, embedding, cluster_size, first_seen, last_seen)
        SELECT s.doc_id, s.text, s.metadata::jsonb, s.embedding, COALESCE(s.cluster_size, e.cluster_size, 1),
               -- a missing timestamp keeps the stored one, so re-running a call changes nothing
               COALESCE(s.first_seen, e.first_seen, now()), COALESCE(s.last_seen, e.last_seen, now())
        FROM {s} s LEFT JOIN {t} e ON e.doc_id = s.doc_id
        ON CONFLICT (doc_id) DO UPDATE SET
            text = EXCLUDED.text,
            metadata = EXCLUDED.metadata,
            embedding = COALESCE(EXCLUDED.embedding, d.embedding),  -- None = not re-embedded: keep
            cluster_size = EXCLUDED.cluster_size,
            first_seen = LEAST(d.first_seen, EXCLUDED.first_seen),
            last_seen = GREATEST(d.last_seen, EXCLUDED.last_seen)
        -- unchanged rows are not rewritten: a re-run writes nothing (no dead tuples, no HNSW inserts)
        WHERE (d.text, d.metadata, d.embedding, d.cluster_size, d.first_seen, d.last_seen) IS DISTINCT FROM
              (EXCLUDED.text, EXCLUDED.metadata, COALESCE(EXCLUDED.embedding, d.embedding), EXCLUDED.cluster_size,
               LEAST(d.first_seen, EXCLUDED.first_seen), GREATEST(d.last_seen, EXCLUDED.last_seen))"""

    def upsert_documents(self, docs: pd.DataFrame) -> int:
        """Insert or update canonical documents; returns the number of rows inserted or
        changed (a re-run of the same frame returns 0).

        Columns: ``doc_id`` (str, unique within the call), ``text`` (str); optional ``metadata`` (dict, list,
        JSON string or None), ``embedding`` (float32 array of shape (dim,) or None), ``cluster_size`` (int;
        None keeps the stored value, 1 for new rows), ``first_seen``/``last_seen`` (timestamps; None keeps the
        stored value, now() for new rows). On conflict: text, metadata and cluster_size are replaced, the
        embedding is replaced unless the new one is None, first_seen = least, last_seen = greatest.
        """
        what = "upsert_documents"
        _check_frame(docs, what, ["doc_id", "text"])
        if len(docs) == 0:
            return 0
        conn = self._prepare(docs)
        ids = _strings(docs, "doc_id", what)
        _unique_ids(ids, what, "doc_id")
        data = [ids, _strings(docs, "text", what, ids), _json_texts(docs, "metadata", what, ids),
                _vectors(docs, "embedding", what, ids, self.dim), _ints(docs, "cluster_size", what, ids, True),
                _timestamps(docs, "first_seen", what), _timestamps(docs, "last_seen", what)]
        columns = [("doc_id", "text"), ("text", "text"), ("metadata", "text"), ("embedding", "vector"),
                   ("cluster_size", "int4"), ("first_seen", "timestamptz"), ("last_seen", "timestamptz")]
        return self._transaction(what, conn, lambda: self._merge(
            conn, "gpucurate_stage_documents", columns, data, self._DOCUMENTS_MERGE, "documents"))

    _ALL_MERGE = """
        INSERT INTO {t} AS d (doc_id, text, metadata, embedding, first_seen, last_seen)
        SELECT s.doc_id, s.text, s.metadata::jsonb, s.embedding,
               COALESCE(s.first_seen, e.first_seen, now()), COALESCE(s.last_seen, e.last_seen, now())
        FROM {s} s LEFT JOIN {t} e ON e.doc_id = s.doc_id
        ON CONFLICT (doc_id) DO UPDATE SET
            text = EXCLUDED.text,
            metadata = EXCLUDED.metadata,
            embedding = COALESCE(EXCLUDED.embedding, d.embedding),
            first_seen = LEAST(d.first_seen, EXCLUDED.first_seen),
            last_seen = GREATEST(d.last_seen, EXCLUDED.last_seen)
        WHERE (d.text, d.metadata, d.embedding, d.first_seen, d.last_seen) IS DISTINCT FROM
              (EXCLUDED.text, EXCLUDED.metadata, COALESCE(EXCLUDED.embedding, d.embedding),
               LEAST(d.first_seen, EXCLUDED.first_seen), GREATEST(d.last_seen, EXCLUDED.last_seen))"""

    def upsert_all_documents(self, docs: pd.DataFrame) -> int:
        """Insert or update rows of ``documents_all`` (every document, canonical or not, each with its own
        embedding) for ``search(use_dedup=False)``; creates the table on first use. Columns and conflict rules
        as ``upsert_documents`` without ``cluster_size``."""
        what = "upsert_all_documents"
        _check_frame(docs, what, ["doc_id", "text"])
        if len(docs) == 0:
            return 0
        conn = self._prepare(docs)
        ids = _strings(docs, "doc_id", what)
        _unique_ids(ids, what, "doc_id")
        data = [ids, _strings(docs, "text", what, ids), _json_texts(docs, "metadata", what, ids),
                _vectors(docs, "embedding", what, ids, self.dim),
                _timestamps(docs, "first_seen", what), _timestamps(docs, "last_seen", what)]
        columns = [("doc_id", "text"), ("text", "text"), ("metadata", "text"), ("embedding", "vector"),
                   ("first_seen", "timestamptz"), ("last_seen", "timestamptz")]

        def body():
            self._create(conn, ["documents_all"], self.dim)
            return self._merge(conn, "gpucurate_stage_all", columns, data, self._ALL_MERGE, "documents_all")
        return self._transaction(what, conn, body)

    _ALIASES_MERGE = """
        INSERT INTO {t} AS a (alias_id, canonical_id, stage, similarity, metadata, ingested_at)
        SELECT s.alias_id, s.canonical_id, s.stage, s.similarity, s.metadata::jsonb,
               COALESCE(s.ingested_at, e.ingested_at, now())
        FROM {s} s LEFT JOIN {t} e ON e.alias_id = s.alias_id
        ON CONFLICT (alias_id) DO UPDATE SET
            canonical_id = EXCLUDED.canonical_id, stage = EXCLUDED.stage, similarity = EXCLUDED.similarity,
            metadata = EXCLUDED.metadata, ingested_at = EXCLUDED.ingested_at
        WHERE (a.canonical_id, a.stage, a.similarity, a.metadata, a.ingested_at) IS DISTINCT FROM
              (EXCLUDED.canonical_id, EXCLUDED.stage, EXCLUDED.similarity, EXCLUDED.metadata, EXCLUDED.ingested_at)"""

    def upsert_aliases(self, aliases: pd.DataFrame) -> int:
        """Insert or update ``document_aliases``; returns the number of rows inserted or changed.

        Columns: ``alias_id`` (str, unique within the call), ``canonical_id`` (str), ``stage`` ('exact',
        'fuzzy' or 'semantic'); optional ``similarity`` (float or None), ``metadata`` (as for documents),
        ``ingested_at`` (timestamp; None keeps the stored value, now() for new rows). On conflict every
        column is replaced.
        """
        what = "upsert_aliases"
        _check_frame(aliases, what, ["alias_id", "canonical_id", "stage"])
        if len(aliases) == 0:
            return 0
        conn = self._prepare()
        ids = _strings(aliases, "alias_id", what)
        _unique_ids(ids, what, "alias_id")
        stages = _strings(aliases, "stage", what, ids)
        for i, st in enumerate(stages):
            if st not in STAGES:
                raise SinkError(f"{_where(what, i, ids)}: stage {st!r} is not one of {', '.join(STAGES)}")
        data = [ids, _strings(aliases, "canonical_id", what, ids), stages, _floats(aliases, "similarity", what, ids),
                _json_texts(aliases, "metadata", what, ids), _timestamps(aliases, "ingested_at", what)]
        columns = [("alias_id", "text"), ("canonical_id", "text"), ("stage", "text"), ("similarity", "float8"),
                   ("metadata", "text"), ("ingested_at", "timestamptz")]
        return self._transaction(what, conn, lambda: self._merge(
            conn, "gpucurate_stage_aliases", columns, data, self._ALIASES_MERGE, "document_aliases"))

    _CHUNKS_MERGE = """
        INSERT INTO {t} AS c (chunk_id, text, token_count, embedding, occurrences)
        SELECT s.chunk_id, s.text, s.token_count, s.embedding, COALESCE(s.occurrences, e.occurrences, 1)
        FROM {s} s LEFT JOIN {t} e ON e.chunk_id = s.chunk_id
        ON CONFLICT (chunk_id) DO UPDATE SET
            text = EXCLUDED.text, token_count = EXCLUDED.token_count,
            occurrences = EXCLUDED.occurrences,  -- the caller passes the new total, not an increment
            embedding = COALESCE(EXCLUDED.embedding, c.embedding)
        WHERE (c.text, c.token_count, c.occurrences, c.embedding) IS DISTINCT FROM
              (EXCLUDED.text, EXCLUDED.token_count, EXCLUDED.occurrences, COALESCE(EXCLUDED.embedding, c.embedding))"""

    _DOC_CHUNKS_MERGE = """
        INSERT INTO {t} AS dc (doc_id, position, chunk_id)
        SELECT s.doc_id, s.position, s.chunk_id FROM {s} s
        ON CONFLICT (doc_id, position) DO UPDATE SET chunk_id = EXCLUDED.chunk_id
        WHERE dc.chunk_id IS DISTINCT FROM EXCLUDED.chunk_id"""

    def upsert_chunks(self, chunks: pd.DataFrame, document_chunks: pd.DataFrame) -> tuple[int, int]:
        """Insert or update unique chunks and the (document, position) -> chunk links, in one transaction;
        returns (chunk rows inserted or changed, link rows inserted or changed).

        ``chunks``, one row per unique chunk: ``chunk_id`` (str), ``text`` (str), ``token_count`` (int);
        optional ``embedding`` (float32 (dim,) or None: keeps the stored one), ``occurrences`` (int, the new
        total; None keeps the stored value, 1 for new rows).
        ``document_chunks``: ``doc_id`` (str), ``position`` (int), ``chunk_id`` (str; must be in ``chunks``
        or already stored); key (doc_id, position), on conflict chunk_id is replaced.
        """
        what = "upsert_chunks"
        chunks = pd.DataFrame(columns=["chunk_id", "text", "token_count"]) if chunks is None else chunks
        links = pd.DataFrame(columns=["doc_id", "position", "chunk_id"]) if document_chunks is None else document_chunks
        _check_frame(chunks, what + " (chunks)", ["chunk_id", "text", "token_count"])
        _check_frame(links, what + " (document_chunks)", ["doc_id", "position", "chunk_id"])
        if len(chunks) == 0 and len(links) == 0:
            return 0, 0
        conn = self._prepare(chunks)
        w = what + " (chunks)"
        ids = _strings(chunks, "chunk_id", w)
        _unique_ids(ids, w, "chunk_id")
        chunk_data = [ids, _strings(chunks, "text", w, ids), _ints(chunks, "token_count", w, ids, False),
                      _vectors(chunks, "embedding", w, ids, self.dim), _ints(chunks, "occurrences", w, ids, True)]
        chunk_cols = [("chunk_id", "text"), ("text", "text"), ("token_count", "int4"), ("embedding", "vector"),
                      ("occurrences", "int4")]
        w = what + " (document_chunks)"
        docs = _strings(links, "doc_id", w)
        positions = _ints(links, "position", w, docs, False)
        keys = [f"{d}\x1f{p}" for d, p in zip(docs, positions)]
        if pd.Series(keys).duplicated().any():
            raise SinkError(f"{w}: (doc_id, position) must be unique within one call")
        link_data = [docs, positions, _strings(links, "chunk_id", w, docs)]
        link_cols = [("doc_id", "text"), ("position", "int4"), ("chunk_id", "text")]

        def body():
            n_chunks = n_links = 0
            if ids:  # chunks first: document_chunks.chunk_id references them
                n_chunks = self._merge(conn, "gpucurate_stage_chunks", chunk_cols, chunk_data,
                                       self._CHUNKS_MERGE, "chunks")
            if docs:
                n_links = self._merge(conn, "gpucurate_stage_document_chunks", link_cols, link_data,
                                      self._DOC_CHUNKS_MERGE, "document_chunks")
            return n_chunks, n_links
        return self._transaction(what, conn, body)

    def refresh_cluster_sizes(self) -> None:
        """Set ``documents.cluster_size`` = 1 + the number of aliases pointing at the document."""
        conn = self._prepare()
        from psycopg import sql
        stmt = sql.SQL("""
            UPDATE {d} d SET cluster_size = 1 + COALESCE(a.n, 0)
            FROM {d} d2 LEFT JOIN (SELECT canonical_id, count(*) AS n FROM {a} GROUP BY canonical_id) a
                 ON a.canonical_id = d2.doc_id
            WHERE d.doc_id = d2.doc_id AND d.cluster_size IS DISTINCT FROM 1 + COALESCE(a.n, 0)""").format(
            d=self._ident("documents"), a=self._ident("document_aliases"))
        self._transaction("refresh_cluster_sizes", conn, lambda: conn.execute(stmt))

    @contextlib.contextmanager
    def transaction(self, dim: int):
        """One transaction around several calls (each becomes a savepoint inside it): a batch of
        documents, aliases and chunks is committed whole or not at all."""
        self.ensure_schema(dim)
        conn = self._prepare()
        psycopg, _ = _driver()
        try:
            with conn.transaction():
                yield self
        except psycopg.Error as exc:
            raise self._err("the batch's transaction failed, nothing was written", exc) from exc

    def repoint(self, moves: pd.DataFrame) -> int:
        """Point documents at a new canonical: a stored canonical becomes an alias (its row moves from
        ``documents`` to ``document_aliases`` with its metadata; its chunk links are removed), a stored
        alias gets the new canonical. Columns: ``doc_id``, ``canonical_id``, ``stage``, ``similarity``."""
        if len(moves) == 0:
            return 0
        conn = self._prepare()
        from psycopg import sql
        ids = [str(x) for x in moves["doc_id"]]
        rows = list(zip(ids, [str(x) for x in moves["canonical_id"]], [str(x) for x in moves["stage"]],
                        [float(x) for x in moves["similarity"]]))
        d, a, dc = self._ident("documents"), self._ident("document_aliases"), self._ident("document_chunks")

        def body():
            conn.execute("CREATE TEMP TABLE gpucurate_moves (doc_id text, canonical_id text, stage text, "
                         "similarity float8) ON COMMIT DROP")
            with conn.cursor() as cur:
                cur.executemany("INSERT INTO gpucurate_moves VALUES (%s, %s, %s, %s)", rows)
            conn.execute(sql.SQL("""
                INSERT INTO {a} (alias_id, canonical_id, stage, similarity, metadata, ingested_at)
                SELECT d.doc_id, m.canonical_id, m.stage, m.similarity, d.metadata, d.first_seen
                FROM {d} d JOIN gpucurate_moves m ON m.doc_id = d.doc_id
                ON CONFLICT (alias_id) DO UPDATE SET canonical_id = EXCLUDED.canonical_id,
                    stage = EXCLUDED.stage, similarity = EXCLUDED.similarity""").format(a=a, d=d))
            conn.execute(sql.SQL("UPDATE {a} a SET canonical_id = m.canonical_id, stage = m.stage, "
                                 "similarity = m.similarity FROM gpucurate_moves m WHERE a.alias_id = m.doc_id "
                                 "AND (a.canonical_id, a.stage, a.similarity) IS DISTINCT FROM "
                                 "(m.canonical_id, m.stage, m.similarity)").format(a=a))
            conn.execute(sql.SQL("DELETE FROM {} WHERE doc_id = ANY(%s)").format(dc), (ids,))
            conn.execute(sql.SQL("DELETE FROM {} WHERE doc_id = ANY(%s)").format(d), (ids,))
            conn.execute("DROP TABLE gpucurate_moves")
            return len(rows)
        return self._transaction("repoint", conn, body)

    def refresh_counts(self) -> None:
        """``documents.cluster_size`` = 1 + its aliases, ``last_seen`` = the newest of its own and its
        aliases' times, ``chunks.occurrences`` = the document positions that use the chunk."""
        self.refresh_cluster_sizes()
        conn = self._prepare()
        from psycopg import sql
        stmts = [sql.SQL("""
            UPDATE {d} d SET last_seen = a.newest FROM
                (SELECT canonical_id, max(ingested_at) AS newest FROM {a} GROUP BY canonical_id) a
            WHERE a.canonical_id = d.doc_id AND a.newest > d.last_seen""").format(
            d=self._ident("documents"), a=self._ident("document_aliases")),
            sql.SQL("""
            UPDATE {c} c SET occurrences = COALESCE(n.n, 0) FROM {c} c2 LEFT JOIN
                (SELECT chunk_id, count(*) AS n FROM {dc} GROUP BY chunk_id) n ON n.chunk_id = c2.chunk_id
            WHERE c.chunk_id = c2.chunk_id AND c.occurrences IS DISTINCT FROM COALESCE(n.n, 0)""").format(
            c=self._ident("chunks"), dc=self._ident("document_chunks"))]
        self._transaction("refresh_counts", conn, lambda: [conn.execute(st) for st in stmts])

    # -- reads --------------------------------------------------------------------------------------------

    def _query_vector(self, q: Any, dim: int) -> np.ndarray:
        try:
            a = np.ascontiguousarray(q, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise SinkError(f"query embedding is not a numeric vector: {_one_line(exc)}") from None
        if a.ndim == 2 and a.shape[0] == 1:
            a = a[0]
        if a.ndim != 1 or a.shape[0] != dim:
            raise SinkError(f"query embedding has shape {a.shape}, expected ({dim},)")
        if not np.isfinite(a).all() or not a.any():
            raise SinkError("query embedding holds NaN/infinity or is all zeros")
        return a

    def _search_settings(self, conn, k: int) -> None:
        # HNSW returns at most ef_search rows; past its limit fall back to an exact scan
        if k <= HNSW_MAX_EF_SEARCH:
            conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", [str(max(40, k))])
        else:
            conn.execute("SELECT set_config('enable_indexscan', 'off', true)")

    def search_sql(self, use_dedup: bool = True):
        """The statement ``search`` runs (parameters q, k, snip); public for EXPLAIN in tests and benchmarks."""
        from psycopg import sql
        if use_dedup:
            # the inner ORDER BY embedding <=> q LIMIT k is what the HNSW index serves; alias stats are looked up
            # only for those k rows, through the (canonical_id, ingested_at) index
            text = """
            SELECT n.doc_id, 1 - n.distance AS score, left(n.text, %(snip)s) AS text,
                   s.alias_count, w.alias_id AS newest_alias_id, s.newest_alias_at, n.last_seen
            FROM (SELECT doc_id, text, last_seen, embedding <=> %(q)s AS distance
                  FROM {docs} WHERE embedding IS NOT NULL
                  ORDER BY embedding <=> %(q)s LIMIT %(k)s) n
            LEFT JOIN LATERAL (SELECT count(*) AS alias_count, max(a.ingested_at) AS newest_alias_at
                               FROM {aliases} a WHERE a.canonical_id = n.doc_id) s ON true
            LEFT JOIN LATERAL (SELECT a.alias_id FROM {aliases} a WHERE a.canonical_id = n.doc_id
                               ORDER BY a.ingested_at DESC, a.alias_id DESC LIMIT 1) w ON true
            ORDER BY n.distance, n.doc_id"""
            return sql.SQL(text).format(docs=self._ident("documents"), aliases=self._ident("document_aliases"))
        text = """
            SELECT n.doc_id, 1 - n.distance AS score, left(n.text, %(snip)s) AS text,
                   0::bigint AS alias_count, NULL::text AS newest_alias_id, NULL::timestamptz AS newest_alias_at,
                   n.last_seen
            FROM (SELECT doc_id, text, last_seen, embedding <=> %(q)s AS distance
                  FROM {docs} WHERE embedding IS NOT NULL
                  ORDER BY embedding <=> %(q)s LIMIT %(k)s) n
            ORDER BY n.distance, n.doc_id"""
        return sql.SQL(text).format(docs=self._ident("documents_all"))

    def search(self, query_embedding: np.ndarray, k: int = 20, use_dedup: bool = True) -> pd.DataFrame:
        """Top-``k`` documents by cosine similarity to ``query_embedding`` (float array of shape (dim,)).

        ``use_dedup=True`` searches the canonical ``documents``; ``False`` searches ``documents_all`` (no
        deduplication; alias columns are 0/None there). Returns one row per hit, best first, with columns
        ``doc_id``, ``score`` (cosine similarity, 1 - cosine distance), ``text`` (first ``SNIPPET_CHARS``
        characters), ``alias_count`` (aliases pointing at it), ``newest_alias_id`` and ``newest_alias_at``
        (the alias with the latest ``ingested_at``; missing (NaN/NaT) when none), ``last_seen`` (UTC). The HNSW index
        makes the result approximate on large tables.
        """
        k = int(k)
        if k < 1:
            raise SinkError(f"search: k must be >= 1, got {k}")
        conn = self._connection()
        dim = self._known_dim(conn)
        q = self._query_vector(query_embedding, dim)
        table = "documents" if use_dedup else "documents_all"
        if table not in self._existing(conn):
            hint = "" if use_dedup else "; write it with upsert_all_documents first"
            raise SinkError(f"PostgreSQL {self.where}: table {self.schema}.{table} does not exist{hint}")
        stmt = self.search_sql(use_dedup)

        def body():
            self._search_settings(conn, k)
            return conn.execute(stmt, {"q": q, "k": k, "snip": self.SNIPPET_CHARS}).fetchall()
        rows = self._transaction("search", conn, body, write=False)
        cols = ["doc_id", "score", "text", "alias_count", "newest_alias_id", "newest_alias_at", "last_seen"]
        out = pd.DataFrame(rows, columns=cols)
        out["score"] = out["score"].astype("float64")
        out["alias_count"] = out["alias_count"].astype("int64")
        for c in ("newest_alias_at", "last_seen"):
            out[c] = pd.to_datetime(out[c], utc=True)
        return out

    def search_chunks(self, query_embedding: np.ndarray, k: int = 20) -> pd.DataFrame:
        """Top-``k`` unique chunks by cosine similarity; columns ``chunk_id``, ``score``, ``text``,
        ``token_count``, ``occurrences``, ``doc_ids`` (sorted list of the documents containing the chunk)."""
        from psycopg import sql
        k = int(k)
        if k < 1:
            raise SinkError(f"search_chunks: k must be >= 1, got {k}")
        conn = self._connection()
        dim = self._known_dim(conn)
        q = self._query_vector(query_embedding, dim)
        if "chunks" not in self._existing(conn):
            raise SinkError(f"PostgreSQL {self.where}: table {self.schema}.chunks does not exist")
        stmt = sql.SQL("""
            SELECT n.chunk_id, 1 - n.distance AS score, n.text, n.token_count, n.occurrences,
                   COALESCE(l.doc_ids, '{{}}') AS doc_ids
            FROM (SELECT chunk_id, text, token_count, occurrences, embedding <=> %(q)s AS distance
                  FROM {chunks} WHERE embedding IS NOT NULL
                  ORDER BY embedding <=> %(q)s LIMIT %(k)s) n
            LEFT JOIN LATERAL (SELECT array_agg(DISTINCT dc.doc_id ORDER BY dc.doc_id) AS doc_ids
                               FROM {links} dc WHERE dc.chunk_id = n.chunk_id) l ON true
            ORDER BY n.distance, n.chunk_id""").format(chunks=self._ident("chunks"),
                                                       links=self._ident("document_chunks"))

        def body():
            self._search_settings(conn, k)
            return conn.execute(stmt, {"q": q, "k": k}).fetchall()
        rows = self._transaction("search_chunks", conn, body, write=False)
        out = pd.DataFrame(rows, columns=["chunk_id", "score", "text", "token_count", "occurrences", "doc_ids"])
        out["score"] = out["score"].astype("float64")
        for c in ("token_count", "occurrences"):
            out[c] = out[c].astype("int64")
        return out

    def counts(self) -> dict[str, int]:
        """Rows per table: the four core tables (0 when absent) and ``documents_all`` when it exists."""
        from psycopg import sql
        conn = self._connection()
        existing = self._existing(conn)
        out = {}
        for name in ALL_TABLES:
            if name in existing:
                out[name] = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(self._ident(name))).fetchone()[0]
            elif name in CORE_TABLES:
                out[name] = 0
        return out
