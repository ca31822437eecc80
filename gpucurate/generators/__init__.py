"""Corpus generators: the built-in ``demo`` corpus and the templated ``archive`` used in tests and
benchmarks."""
