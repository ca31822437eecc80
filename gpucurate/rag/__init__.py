"""RAG indexing: ``chunks`` cuts documents into chunks, ``payload`` builds what a vector store receives
(chunks, embeddings, dedup metadata), and ``sinks`` write it (PostgreSQL + pgvector)."""
