"""Turn stage results into the annotation columns, the alias table and the edge table."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..config import OutputConfig
from .contamination import ContaminationResult
from .exact import ExactResult
from .fuzzy import FuzzyResult
from ..io.writer import ID_TYPE_KEY, PARAGRAPH_CUTS
from .paragraphs import ParagraphResult
from .quality import QualityResult
from .semantic import SemanticResult
from .table import DocTable, id_array


def partition_slices(annotations: pa.Table, offsets: np.ndarray) -> list[pa.Table]:
    """The rows ``offsets[p]:offsets[p + 1]`` of ``annotations`` for each partition ``p``, each with buffers
    of its own: a zero-copy slice would pickle the whole table into every task of a Dask cluster."""
    return [annotations.take(pa.array(np.arange(offsets[p], offsets[p + 1], dtype=np.int64)))
            for p in range(len(offsets) - 1)]


def annotate(table: DocTable, exact: ExactResult, fuzzy: FuzzyResult | None, out: OutputConfig,
             semantic: SemanticResult | None = None, quality: QualityResult | None = None,
             contamination: ContaminationResult | None = None) -> pa.Table:
    """Annotation columns for every document, in table order (``pa.Table`` with ANNOTATION_COLUMNS).

    Each stage maps the canonicals of the stage before to its own canonicals; a document's final
    canonical (``dedup_id``) is the composition. ``similarity`` and ``drop_reason`` describe the stage
    that grouped the document (exact copies inherit their exact canonical's fuzzy similarity).
    ``keep`` is ``is_canonical`` minus the documents a gate drops: a document that fails a quality rule
    took part in no dedup stage (it is its own canonical); a contaminated document keeps its dedup
    columns, and ``drop_stage = contamination`` only when nothing else dropped it.
    """
    n = table.n
    rows = np.arange(n, dtype=np.int64)
    exact_canon = exact.canon
    # each later stage: canonical and score of the rows that took part; the others map to themselves
    fuzzy_of, fuzzy_sim = rows.copy(), np.ones(n, dtype=np.float64)
    if fuzzy is not None:
        fuzzy_of[fuzzy.rows] = fuzzy.canon
        fuzzy_sim[fuzzy.rows] = fuzzy.similarity
    semantic_of, semantic_sim = rows.copy(), np.ones(n, dtype=np.float64)
    if semantic is not None:
        semantic_of[semantic.rows] = semantic.canon
        semantic_sim[semantic.rows] = semantic.similarity
    fuzzy_canon = fuzzy_of[exact_canon]
    final = semantic_of[fuzzy_canon]
    is_canonical = final == rows
    exact_dup = exact_canon != rows
    fuzzy_dup = ~exact_dup & (fuzzy_canon != rows)
    semantic_dup = ~exact_dup & ~fuzzy_dup & ~is_canonical
    # an exact copy has the same shingles as its exact canonical, hence the same similarity to it
    similarity = np.where(semantic_dup, semantic_sim, fuzzy_sim[exact_canon])
    cluster_size = np.bincount(final, minlength=n)[final]

    drop_stage = np.full(n, None, dtype=object)
    reason = np.full(n, None, dtype=object)
    str_ids = pd.Series(table.ids).astype(str)

    def describe(mask, target, text):
        r = np.flatnonzero(mask)
        drop_stage[r] = text[0]
        label = text[1] + str_ids.iloc[target[r]].reset_index(drop=True)
        if text[2]:
            label = label + f" ({text[2]} " + np.char.mod("%.3f", similarity[r]).astype(object) + ")"
        reason[r] = label.to_numpy()

    measure = {"jaccard": "jaccard", "minhash": "estimated jaccard", "simhash": "simhash similarity"}[
        fuzzy.score_kind if fuzzy is not None else "jaccard"]
    describe(exact_dup, exact_canon, ("exact", "exact duplicate of ", None))
    describe(fuzzy_dup, fuzzy_canon, ("fuzzy", "near-duplicate of ", measure))
    describe(semantic_dup, final, ("semantic", "semantic duplicate of ", "cosine"))

    gate_drop = np.zeros(n, bool)
    if quality is not None and quality.failed.any():
        r = np.flatnonzero(quality.failed)
        drop_stage[r] = "quality"
        reason[r] = quality.reasons(r)
        gate_drop[r] = True
    contaminated = np.zeros(n, bool)
    label, stripped = np.full(n, None, dtype=object), np.full(n, None, dtype=object)
    if contamination is not None:
        contaminated, label, stripped = contamination.contaminated, contamination.label, contamination.stripped
        r = np.flatnonzero(contamination.drop & ~gate_drop & is_canonical)
        drop_stage[r] = "contamination"
        reason[r] = contamination.drop_reason[r]
        gate_drop |= contamination.drop
    keep = is_canonical & ~gate_drop

    if out.weight == "hard":
        weight = keep.astype(np.float64)
    elif out.weight == "soft":  # duplicates get soft_weight, documents a gate dropped 0
        weight = np.where(keep, 1.0, np.where(gate_drop, 0.0, out.soft_weight))
    else:  # size: the canonical stands for its whole cluster
        weight = np.where(keep, cluster_size, 0).astype(np.float64)

    ids = table.ids
    int_ids = table.int_ids if table.int_ids is not None else ids.dtype.kind == "i"
    return pa.table({
        "doc_id": id_array(ids),
        "dedup_id": id_array(ids[final]),
        "is_canonical": pa.array(is_canonical),
        "keep": pa.array(keep),
        "drop_stage": pa.array(drop_stage, type=pa.string()),
        "drop_reason": pa.array(reason, type=pa.string()),
        "similarity": pa.array(similarity),
        "cluster_size": pa.array(cluster_size.astype(np.int64)),
        "weight": pa.array(weight),
        "exact_group": id_array(ids[exact_canon]),
        "fuzzy_group": id_array(ids[fuzzy_canon]),
        "semantic_group": id_array(ids[final]),
        "contaminated": pa.array(contaminated),
        "contamination": pa.array(label, type=pa.string()),
        "stripped_text": pa.array(stripped, type=pa.string()),
        # byte ranges removed by the paragraphs stage; the writer turns them into paragraph_text
        PARAGRAPH_CUTS: pa.nulls(n, type=pa.list_(pa.int64())),
        "paragraph_chars_removed": pa.array(np.zeros(n, np.int64)),
    }, metadata={ID_TYPE_KEY: b"int64" if int_ids else b"string"})  # the user's id column's type in the parts


def apply_paragraphs(annotations: pa.Table, paragraphs: ParagraphResult, out: OutputConfig) -> pa.Table:
    """Add the paragraphs stage's cuts and counts; documents it drops lose ``keep`` and ``weight``."""
    keep = np.asarray(annotations.column("keep"))
    dropped = paragraphs.drop & keep
    stage = annotations.column("drop_stage").to_numpy(zero_copy_only=False).astype(object)
    reason = annotations.column("drop_reason").to_numpy(zero_copy_only=False).astype(object)
    stage[dropped] = "paragraphs"
    reason[dropped] = paragraphs.drop_reason[dropped]
    weight = np.where(dropped, 0.0, np.asarray(annotations.column("weight")))
    columns = {"keep": pa.array(keep & ~dropped), "drop_stage": pa.array(stage, type=pa.string()),
               "drop_reason": pa.array(reason, type=pa.string()), "weight": pa.array(weight),
               PARAGRAPH_CUTS: pa.array(paragraphs.cuts, type=pa.list_(pa.int64())),
               "paragraph_chars_removed": pa.array(paragraphs.chars_removed)}
    for name, column in columns.items():
        annotations = annotations.set_column(annotations.schema.get_field_index(name), name, column)
    return annotations


def alias_table(annotations: pa.Table) -> pa.Table:
    """alias_id -> canonical_id with the stage that grouped them and the similarity."""
    df = annotations.select(["doc_id", "dedup_id", "drop_stage", "similarity", "is_canonical"])
    mask = pc.invert(df.column("is_canonical"))
    df = df.filter(mask)
    return pa.table({"alias_id": df.column("doc_id"), "canonical_id": df.column("dedup_id"),
                     "stage": df.column("drop_stage"), "similarity": df.column("similarity")})


def edge_batches(table: DocTable, fuzzy: FuzzyResult | None, semantic: SemanticResult | None = None,
                 semantic_threshold: float = 1.0, executor=None):
    """``edges.parquet`` in Arrow tables: every verified fuzzy candidate pair (both ends exact canonicals)
    with its Jaccard (method ``jaccard``, or ``minhash`` estimates without verification), then every
    within-cluster pair of the semantic stage with cosine at or above its threshold (method ``cosine``).
    Fuzzy edges kept on Dask (``fuzzy.edge_frames``) come one partition at a time."""
    if fuzzy is not None and fuzzy.edge_frames is not None:
        for part in executor.iter_compute(fuzzy.edge_frames.to_delayed(), "write edges"):
            yield _edges(table, part["i"].to_numpy(np.int64), part["j"].to_numpy(np.int64),
                         part["score"].to_numpy(np.float64), fuzzy.score_kind, fuzzy.threshold)
    elif fuzzy is not None:
        yield _edges(table, fuzzy.edge_i, fuzzy.edge_j, fuzzy.edge_score, fuzzy.score_kind, fuzzy.threshold)
    if semantic is not None:
        yield _edges(table, semantic.edge_i, semantic.edge_j, semantic.edge_score, "cosine", semantic_threshold)
    yield _edges(table, np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0), "", 1.0)


def _edges(table: DocTable, i, j, score, method: str, threshold: float) -> pa.Table:
    return pa.table({
        "id_a": id_array(table.ids[i]),
        "id_b": id_array(table.ids[j]),
        "score": pa.array(score, type=pa.float64()),
        "above_threshold": pa.array(score >= threshold, type=pa.bool_()),
        "method": pa.array(np.full(len(score), method, dtype=object), type=pa.string()),
    })
