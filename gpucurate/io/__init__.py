"""Readers and writers: input discovery and partitioning, and the output directory."""
