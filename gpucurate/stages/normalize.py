"""Normalize stage: replaces the ``_text`` column of each partition by its normalized form."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa

from ..config import NormalizeConfig
from ..text import normalize


def normalize_partition(df: pd.DataFrame, cfg: NormalizeConfig) -> pd.DataFrame:
    out = df.copy(deep=False)
    if len(df):
        arr = pa.chunked_array(df["_text"].array._pa_array) if hasattr(df["_text"].array, "_pa_array") \
            else pa.array(df["_text"], type=pa.large_string())
        out["_text"] = pd.arrays.ArrowExtensionArray(normalize(arr, cfg))
    out.attrs = dict(df.attrs)
    return out


class Normalize:
    """NFKC, lowercase, whitespace collapse and optional boilerplate removal (see ``gpucurate.text``).

    ``run(ddf) -> ddf`` with ``_text`` normalized; other columns untouched.
    """

    name = "normalize"

    def __init__(self, cfg: NormalizeConfig):
        self.cfg = cfg

    def run(self, ddf):
        return ddf.map_partitions(normalize_partition, self.cfg, meta=ddf._meta)
