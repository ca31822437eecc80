"""gpucurate: find exact, near-duplicate and semantic duplicate documents in large text collections and annotate them
(canonical, aliases, audit trail) instead of deleting them.

Main entry points: ``gpucurate.run(inputs, output, config, overrides)`` (the CLI's ``run``),
``gpucurate.rethreshold(run_dir, overrides, output)``, ``gpucurate.export_dataset(run_dir, output, fmt, ...)``,
``gpucurate.ingest(inputs, state_dir, config, overrides, output, sink)`` and, for
Dask DataFrames, ``read``, ``dedup``, ``exact_dedup``, ``fuzzy_dedup`` and ``semantic_dedup``.
"""

from ._version import __version__  # noqa: E402

from .config import Config, load_config  # noqa: E402
from .errors import ConfigError, GpucurateError, InputError  # noqa: E402


def run(*args, **kwargs):
    from .workflows.run import run as _run
    return _run(*args, **kwargs)


run.__doc__ = "Deduplicate input files into an annotated output directory; see gpucurate.workflows.run.run."


def rethreshold(*args, **kwargs):
    from .workflows.rethreshold import rethreshold as _rethreshold
    return _rethreshold(*args, **kwargs)


rethreshold.__doc__ = "Apply new thresholds to a finished run from its stored edges; see gpucurate.workflows.rethreshold."


def export_dataset(*args, **kwargs):
    from .workflows.export_dataset import export_dataset as _export_dataset
    return _export_dataset(*args, **kwargs)


export_dataset.__doc__ = ("Write the kept documents of a finished run, text after every removal stage, as a dataset; "
                          "see gpucurate.workflows.export_dataset.export_dataset.")


def ingest(*args, **kwargs):
    from .workflows.ingest import ingest as _ingest
    return _ingest(*args, **kwargs)


ingest.__doc__ = "Add a batch of documents to an incremental state; see gpucurate.workflows.ingest.ingest."


def __getattr__(name):
    if name in ("read", "dedup", "exact_dedup", "fuzzy_dedup", "semantic_dedup"):
        from . import api
        return getattr(api, name)
    raise AttributeError(name)


__all__ = ["run", "rethreshold", "export_dataset", "ingest", "read", "dedup", "exact_dedup", "fuzzy_dedup", "semantic_dedup", "Config",
           "load_config", "GpucurateError", "ConfigError", "InputError", "__version__"]
