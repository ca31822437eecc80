"""Normalize stage: replaces the ``_text`` column of each partition by its normalized form."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from ..config import NormalizeConfig
from ..text import normalize
from ..threads import thread_map


def normalize_partition(df: pd.DataFrame, cfg: NormalizeConfig, threads: int = 1) -> pd.DataFrame:
    """``df`` with ``_text`` normalized; with ``threads > 1`` slices of it are normalized in parallel."""
    out = df.copy(deep=False)
    if len(df):
        arr = pa.chunked_array(df["_text"].array._pa_array).combine_chunks()
        cuts = np.linspace(0, len(arr), max(1, min(threads, len(arr))) + 1).astype(int)
        parts = thread_map(lambda c: normalize(arr.slice(c[0], c[1] - c[0]), cfg), list(zip(cuts[:-1], cuts[1:])),
                           threads)
        out["_text"] = pd.arrays.ArrowExtensionArray(parts[0] if len(parts) == 1 else pa.concat_arrays(parts))
    out.attrs = dict(df.attrs)
    return out


class Normalize:
    """NFKC, lowercase, whitespace collapse and optional boilerplate removal (see ``gpucurate.text``).

    ``run(ddf) -> ddf`` with ``_text`` normalized; other columns untouched.
    """

    name = "normalize"

    def __init__(self, cfg: NormalizeConfig):
        self.cfg = cfg

    def run(self, ddf, threads: int = 1):
        return ddf.map_partitions(normalize_partition, self.cfg, threads, meta=ddf._meta)
