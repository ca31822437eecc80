"""Turn stage results into the annotation columns, the alias table and the edge table."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from .config import OutputConfig
from .stages.exact import ExactResult
from .stages.fuzzy import FuzzyResult
from .table import DocTable

#: annotation columns added to every record, in this order
ANNOTATION_COLUMNS = ("doc_id", "dedup_id", "is_canonical", "keep", "drop_stage", "drop_reason", "similarity",
                      "cluster_size", "weight", "exact_group", "fuzzy_group")


def _id_array(ids: np.ndarray) -> pa.Array:
    return pa.array(ids, type=pa.int64()) if ids.dtype.kind == "i" else pa.array(ids, type=pa.string())


def annotate(table: DocTable, exact: ExactResult, fuzzy: FuzzyResult | None, out: OutputConfig) -> pa.Table:
    """Annotation columns for every document, in table order (``pa.Table`` with ANNOTATION_COLUMNS)."""
    n = table.n
    rows = np.arange(n, dtype=np.int64)
    exact_canon = exact.canon
    # fuzzy canonical of each exact canonical that took part; others are their own
    fuzzy_of = rows.copy()
    sim_of = np.ones(n, dtype=np.float64)
    if fuzzy is not None:
        fuzzy_of[fuzzy.rows] = fuzzy.canon
        sim_of[fuzzy.rows] = fuzzy.similarity
    final = fuzzy_of[exact_canon]
    # an exact copy has the same shingles as its exact canonical, hence the same similarity to `final`
    similarity = sim_of[exact_canon]
    is_canonical = final == rows
    exact_dup = exact_canon != rows
    fuzzy_dup = ~exact_dup & ~is_canonical
    cluster_size = np.bincount(final, minlength=n)[final]

    drop_stage = np.full(n, None, dtype=object)
    drop_stage[exact_dup] = "exact"
    drop_stage[fuzzy_dup] = "fuzzy"
    reason = np.full(n, None, dtype=object)
    ids = table.ids
    str_ids = pd.Series(ids).astype(str)
    e = np.flatnonzero(exact_dup)
    reason[e] = ("exact duplicate of " + str_ids.iloc[exact_canon[e]].reset_index(drop=True)).to_numpy()
    f = np.flatnonzero(fuzzy_dup)
    measure = "jaccard" if fuzzy is None or fuzzy.score_kind == "jaccard" else "estimated jaccard"
    reason[f] = ("near-duplicate of " + str_ids.iloc[final[f]].reset_index(drop=True) + f" ({measure} "
                 + np.char.mod("%.3f", similarity[f]).astype(object) + ")").to_numpy()

    if out.weight == "hard":
        weight = is_canonical.astype(np.float64)
    elif out.weight == "soft":
        weight = np.where(is_canonical, 1.0, out.soft_weight)
    else:  # size: the canonical stands for its whole cluster
        weight = np.where(is_canonical, cluster_size, 0).astype(np.float64)

    return pa.table({
        "doc_id": _id_array(ids),
        "dedup_id": _id_array(ids[final]),
        "is_canonical": pa.array(is_canonical),
        "keep": pa.array(is_canonical),
        "drop_stage": pa.array(drop_stage, type=pa.string()),
        "drop_reason": pa.array(reason, type=pa.string()),
        "similarity": pa.array(similarity),
        "cluster_size": pa.array(cluster_size.astype(np.int64)),
        "weight": pa.array(weight),
        "exact_group": _id_array(ids[exact_canon]),
        "fuzzy_group": _id_array(ids[final]),
    })


def alias_table(annotations: pa.Table) -> pa.Table:
    """alias_id -> canonical_id with the stage that grouped them and the similarity."""
    df = annotations.select(["doc_id", "dedup_id", "drop_stage", "similarity", "is_canonical"])
    mask = pc.invert(df.column("is_canonical"))
    df = df.filter(mask)
    return pa.table({"alias_id": df.column("doc_id"), "canonical_id": df.column("dedup_id"),
                     "stage": df.column("drop_stage"), "similarity": df.column("similarity")})


def edge_table(table: DocTable, fuzzy: FuzzyResult | None, threshold: float) -> pa.Table:
    """Every verified candidate pair (both ends exact canonicals) with its score."""
    if fuzzy is None:
        i = j = np.empty(0, np.int64)
        score = np.empty(0, np.float64)
        kind = "jaccard"
    else:
        i, j, score, kind = fuzzy.edge_i, fuzzy.edge_j, fuzzy.edge_score, fuzzy.score_kind
    return pa.table({
        "id_a": _id_array(table.ids[i]) if len(i) else _id_array(table.ids[:0]),
        "id_b": _id_array(table.ids[j]) if len(j) else _id_array(table.ids[:0]),
        "score": pa.array(score, type=pa.float64()),
        "above_threshold": pa.array(score >= threshold),
        "method": pa.array(np.full(len(score), kind, dtype=object), type=pa.string()),
    })
