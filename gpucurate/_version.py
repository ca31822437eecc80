"""The package version, in a module of its own so that the package's modules can read it without importing
``gpucurate`` itself (whose ``__init__`` imports the workflows)."""

__version__ = "0.1.0"
