"""gpucurate: find exact, near-duplicate and semantic duplicate documents in large text collections and annotate them
(canonical, aliases, audit trail) instead of deleting them.

Main entry points: ``gpucurate.run(inputs, output, config, overrides)`` (the CLI's ``run``),
``gpucurate.rethreshold(run_dir, overrides, output)`` and, for
Dask DataFrames, ``read``, ``dedup``, ``exact_dedup``, ``fuzzy_dedup`` and ``semantic_dedup``.
"""

__version__ = "0.1.0"

from .config import Config, load_config  # noqa: E402
from .errors import ConfigError, GpucurateError, InputError  # noqa: E402


def run(*args, **kwargs):
    from .pipeline import run as _run
    return _run(*args, **kwargs)


run.__doc__ = "Deduplicate input files into an annotated output directory; see gpucurate.pipeline.run."


def rethreshold(*args, **kwargs):
    from .regroup import rethreshold as _rethreshold
    return _rethreshold(*args, **kwargs)


rethreshold.__doc__ = "Apply new thresholds to a finished run from its stored edges; see gpucurate.regroup."


def __getattr__(name):
    if name in ("read", "dedup", "exact_dedup", "fuzzy_dedup", "semantic_dedup"):
        from . import api
        return getattr(api, name)
    raise AttributeError(name)


__all__ = ["run", "rethreshold", "read", "dedup", "exact_dedup", "fuzzy_dedup", "semantic_dedup", "Config",
           "load_config", "GpucurateError", "ConfigError", "InputError", "__version__"]
