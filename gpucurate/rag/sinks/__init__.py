"""Sinks: write deduplicated results into external stores.

``PgvectorSink`` (PostgreSQL + pgvector) needs the ``pgvector`` extra (psycopg 3 and the pgvector package);
it is imported lazily so that ``import gpucurate.rag.sinks`` works without them.
"""

__all__ = ["PgvectorSink"]


def __getattr__(name):
    if name == "PgvectorSink":
        from .pgvector import PgvectorSink
        return PgvectorSink
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
