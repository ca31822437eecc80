"""Turn stage results into the annotation columns, the alias table and the edge table."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..config import OutputConfig
from ..engine.executor import Executor
from ..engine.shuffle import answer_columns, lookup
from ..engine.tasks import delayed
from .contamination import CONTAMINATION_COLUMNS, SPANS_TYPE, STRIP_CUTS_COLUMN, ContaminationResult
from .exact import ExactResult
from .fuzzy import FuzzyResult
from ..io.writer import ID_TYPE_KEY
from .cuts import PARAGRAPH_CUTS, RANGES, STRIP_CUTS, SUBSTRING_CUTS
from .paragraphs import ParagraphResult
from .substrings import SubstringResult
from .quality import QualityResult
from .semantic import SemanticResult
from .table import DocParts, DocTable, id_array


def stage_canonicals(n: int, exact: ExactResult, fuzzy: FuzzyResult | None,
                     semantic: SemanticResult | None = None) -> tuple:
    """What a document's annotation is made of, for the ``n`` rows of a table held in this process:
    ``(exact_canon, fuzzy_canon, final, fuzzy_similarity, semantic_similarity, cluster_size)``, the rows of its
    exact canonical, of that one's fuzzy canonical and of the final canonical (``dedup_id``), the exact
    canonical's similarity to its fuzzy canonical, its own cosine to its semantic canonical, and how many
    documents share its final canonical (each int64[n] or float64[n]).

    Each stage maps the canonicals of the stage before to its own canonicals; a document's final
    canonical is the composition."""
    rows = np.arange(n, dtype=np.int64)
    # each later stage: canonical and score of the rows that took part; the others map to themselves
    fuzzy_of, fuzzy_sim = rows.copy(), np.ones(n, dtype=np.float64)
    if fuzzy is not None:
        fuzzy_of[fuzzy.rows] = fuzzy.canon
        fuzzy_sim[fuzzy.rows] = fuzzy.similarity
    semantic_of, semantic_sim = rows.copy(), np.ones(n, dtype=np.float64)
    if semantic is not None:
        semantic_of[semantic.rows] = semantic.canon
        semantic_sim[semantic.rows] = semantic.similarity
    exact_canon = exact.canon
    fuzzy_canon = fuzzy_of[exact_canon]
    final = semantic_of[fuzzy_canon]
    return exact_canon, fuzzy_canon, final, fuzzy_sim[exact_canon], semantic_sim, np.bincount(final, minlength=n)[final]


def annotate(table: DocTable, exact: ExactResult, fuzzy: FuzzyResult | None, out: OutputConfig,
             semantic: SemanticResult | None = None, quality: QualityResult | None = None,
             contamination: ContaminationResult | None = None) -> pa.Table:
    """Annotation columns for every document of a table held in this process, in table order (``pa.Table``
    with ANNOTATION_COLUMNS); a run's partitions compose the same way by row lookups
    (``workflows.run``) and share ``annotation_columns``."""
    n = table.n
    exact_canon, fuzzy_canon, final, fuzzy_sim, semantic_sim, cluster_size = stage_canonicals(n, exact, fuzzy,
                                                                                               semantic)
    ids = table.ids
    gates = Gates(quality.rule >= 0, quality.reasons, None) if quality is not None else None
    if contamination is not None:
        gates = gates or Gates(np.zeros(n, bool), None, None)
        gates.contamination = contamination.gates()
    return with_languages(annotation_columns(
        np.arange(n, dtype=np.int64), exact_canon, fuzzy_canon, final, ids, ids[exact_canon], ids[fuzzy_canon],
        ids[final], fuzzy_sim, semantic_sim, cluster_size, gates, out,
        table.int_ids if table.int_ids is not None else ids.dtype.kind == "i",
        fuzzy.score_kind if fuzzy is not None else "jaccard"), quality)


class Gates:
    """What the gates decided about a slice of documents: ``failed`` bool[m] (a quality rule), ``reasons(rows)``
    the quality messages of the failed positions, and ``contamination``: ``(contaminated bool[m], label object[m],
    stripped object[m], drop bool[m], drop_reason object[m], redacted object[m], spans object[m])`` or None."""

    def __init__(self, failed: np.ndarray, reasons, contamination: tuple | None):
        self.failed, self.reasons, self.contamination = failed, reasons, contamination


#: ``drop_stage`` values by code (0: not dropped, null)
STAGE_NAMES = (None, "exact", "fuzzy", "semantic", "quality", "contamination")
EXACT, FUZZY, SEMANTIC, QUALITY, CONTAMINATION = range(1, 6)


def stage_names(codes: np.ndarray) -> pa.Array:
    """``string[n]`` ``drop_stage`` of codes into ``STAGE_NAMES`` (code 0: null)."""
    dictionary = pa.array(STAGE_NAMES[1:], pa.string())
    indices = pa.array(codes.astype(np.int8) - 1, mask=codes == 0)
    return pa.DictionaryArray.from_arrays(indices, dictionary).dictionary_decode()


def fixed3(values: np.ndarray) -> pa.Array:
    """``"%.3f" % v`` of every value as ``string[n]``, made from integers by Arrow. The rare values whose
    thousandths are within rounding error of a half (and negative or non-finite ones) are formatted by
    Python, so every string is printf's."""
    scaled = values * 1000.0
    with np.errstate(invalid="ignore"):  # NaN and infinities are left to Python
        exact = np.isfinite(scaled) & (values >= 0) & (np.abs(scaled - np.floor(scaled) - 0.5) > 1e-6)
    k = np.rint(np.where(exact, scaled, 0.0)).astype(np.int64)
    text = pc.binary_join_element_wise(pa.array(k // 1000).cast(pa.string()),
                                       pc.utf8_lpad(pa.array(k % 1000).cast(pa.string()), 3, "0"), ".")
    if exact.all():
        return text
    return pc.replace_with_mask(text, pa.array(~exact), pa.array(["%.3f" % v for v in values[~exact]], pa.string()))


def annotation_columns(rows, exact_canon, fuzzy_canon, final, ids, exact_ids, fuzzy_ids, final_ids,
                       fuzzy_similarity, semantic_similarity, cluster_size, gates: Gates | None, out: OutputConfig,
                       int_ids: bool, score_kind: str) -> pa.Table:
    """The annotation columns of ``m`` documents.

    Parameters
    ----------
    rows : int64[m] the documents' table rows; exact_canon, fuzzy_canon, final : int64[m] the rows of their
        exact canonical, of its fuzzy canonical, and of that one's semantic canonical (``dedup_id``).
    ids, exact_ids, fuzzy_ids, final_ids : the ids of ``rows``, ``exact_canon``, ``fuzzy_canon``, ``final``
        (NumPy or Arrow arrays).
    fuzzy_similarity : float64[m] the exact canonical's similarity to its fuzzy canonical (an exact copy has
        the same shingles as its exact canonical, hence the same similarity); semantic_similarity :
        float64[m] the document's cosine to its semantic canonical; cluster_size : int64[m] documents whose
        ``final`` is the same.
    gates : the gates' decisions; int_ids : the run's user ids are integers; score_kind : the fuzzy score.

    ``similarity`` and ``drop_reason`` describe the stage that grouped the document. ``keep`` is
    ``is_canonical`` minus the documents a gate drops: a document that fails a quality rule took part in no
    dedup stage (it is its own canonical); a contaminated document keeps its dedup columns, and
    ``drop_stage = contamination`` only when nothing else dropped it.
    """
    n = len(rows)
    is_canonical = final == rows
    exact_dup = exact_canon != rows
    fuzzy_dup = ~exact_dup & (fuzzy_canon != rows)
    semantic_dup = ~exact_dup & ~fuzzy_dup & ~is_canonical
    similarity = np.where(semantic_dup, semantic_similarity, fuzzy_similarity)

    # drop_stage as codes into STAGE_NAMES, drop_reason as an Arrow column filled mask by mask: the strings
    # are made by Arrow's kernels, not a Python call per row
    stage_code = np.zeros(n, np.int8)
    reason = pa.nulls(n, pa.string())

    def fill(mask: np.ndarray, labels) -> None:
        nonlocal reason
        if mask.any():
            reason = pc.replace_with_mask(reason, pa.array(mask), labels)

    measure = {"jaccard": "jaccard", "minhash": "estimated jaccard", "simhash": "simhash similarity"}[score_kind]
    for mask, target_ids, code, prefix, score_name in (
            (exact_dup, exact_ids, EXACT, "exact duplicate of ", None),
            (fuzzy_dup, fuzzy_ids, FUZZY, "near-duplicate of ", measure),
            (semantic_dup, final_ids, SEMANTIC, "semantic duplicate of ", "cosine")):
        if not mask.any():
            continue
        stage_code[mask] = code
        parts = [pa.scalar(prefix), id_array(target_ids).filter(pa.array(mask)).cast(pa.string())]
        if score_name:
            parts += [pa.scalar(f" ({score_name} "), fixed3(similarity[mask]), pa.scalar(")")]
        fill(mask, pc.binary_join_element_wise(*parts, ""))

    gate_drop = np.zeros(n, bool)
    if gates is not None and gates.failed.any():
        stage_code[gates.failed] = QUALITY
        fill(gates.failed, gates.reasons(np.flatnonzero(gates.failed)))
        gate_drop |= gates.failed
    contaminated = np.zeros(n, bool)
    label, stripped, redacted, spans = (pa.nulls(n, pa.string()),) * 3 + (pa.nulls(n, SPANS_TYPE),)
    if gates is not None and gates.contamination is not None:
        contaminated, label, stripped, drop, drop_reason, redacted, spans = gates.contamination
        by_gate = drop & ~gate_drop & is_canonical
        stage_code[by_gate] = CONTAMINATION
        fill(by_gate, pa.array(drop_reason[by_gate], pa.string()))
        gate_drop |= drop
        label, stripped, redacted = (pa.array(c, pa.string()) for c in (label, stripped, redacted))
        spans = pa.array(spans, type=SPANS_TYPE)
    keep = is_canonical & ~gate_drop

    if out.weight == "hard":
        weight = keep.astype(np.float64)
    elif out.weight == "soft":  # duplicates get soft_weight, documents a gate dropped 0
        weight = np.where(keep, 1.0, np.where(gate_drop, 0.0, out.soft_weight))
    else:  # size: the canonical stands for its whole cluster
        weight = np.where(keep, cluster_size, 0).astype(np.float64)

    return pa.table({
        "doc_id": id_array(ids),
        "dedup_id": id_array(final_ids),
        "is_canonical": pa.array(is_canonical),
        "keep": pa.array(keep),
        "drop_stage": stage_names(stage_code),
        "drop_reason": reason,
        "similarity": pa.array(similarity),
        "cluster_size": pa.array(np.asarray(cluster_size).astype(np.int64)),
        "weight": pa.array(weight),
        "exact_group": id_array(exact_ids),
        "fuzzy_group": id_array(fuzzy_ids),
        "semantic_group": id_array(final_ids),
        "contaminated": pa.array(contaminated),
        "contamination": label,
        "contamination_spans": spans,
        "stripped_text": stripped,
        "redacted_text": redacted,
        # byte ranges removed by the paragraphs stage; the writer turns them into paragraph_text
        PARAGRAPH_CUTS: pa.nulls(n, type=RANGES),
        "paragraph_chars_removed": pa.array(np.zeros(n, np.int64)),
        # the substrings stage's repeated spans and the byte ranges it removes (-> substring_text)
        "substring_spans": pa.nulls(n, type=RANGES),
        SUBSTRING_CUTS: pa.nulls(n, type=RANGES),
        # the bytes a contamination strip removed (stripped_text is made by the gate)
        STRIP_CUTS: pa.nulls(n, type=RANGES),
        "substring_chars_removed": pa.array(np.zeros(n, np.int64)),
    }, metadata={ID_TYPE_KEY: b"int64" if int_ids else b"string"})  # the user's id column's type in the parts


def annotate_parts(table: DocParts, executor: Executor, out: OutputConfig, fuzzy: bool, semantic: bool,
                   quality_limits: dict | None, score_kind: str) -> DocParts:
    """``annotation_columns`` of every partition, computed where the partitions are; the state of each gets an
    ``annotations`` table. The composition of the stages' canonicals, the ids of the canonicals and the
    cluster sizes come from row lookups (``engine.shuffle.lookup``) answered by the partitions holding the
    rows, so no per-document array passes through this process.

    State columns read: ``id``, ``exact_canon``; ``fuzzy_canon`` and ``fuzzy_sim`` when ``fuzzy``;
    ``semantic_canon`` and ``semantic_sim`` when ``semantic``; ``qrule`` and ``qvalue`` with
    ``quality_limits``; the ``contamination_*`` columns when present.
    """
    # each lookup also answers the ids of the rows it asks about: the exact canonicals' ids come with their
    # fuzzy canonicals, the fuzzy canonicals' with their semantic ones, the final canonicals' with the
    # cluster sizes (a stage that is off asks nothing, and its canonicals are the previous stage's)
    offs = table.part_offsets
    exact_canon = table.column("exact_canon")
    fuzzy_of = semantic_of = None
    if fuzzy:
        fuzzy_of = lookup(executor, exact_canon, table.map(_with_ids, names=("fuzzy_canon", "fuzzy_sim")), offs,
                          answer_columns, "annotate: fuzzy canonicals")
        fuzzy_canon = [delayed(_item)(a, 0) for a in fuzzy_of]
    else:
        fuzzy_canon = exact_canon
    if semantic:
        semantic_of = lookup(executor, fuzzy_canon, table.map(_with_ids, names=("semantic_canon",)), offs,
                             answer_columns, "annotate: semantic canonicals")
        final = [delayed(_item)(a, 0) for a in semantic_of]
    else:
        final = fuzzy_canon
    final_of = lookup(executor, final, table.map(_with_ids, names=()), offs, _answer_count_and_ids,
                      "annotate: cluster sizes")
    n = table.npartitions
    return table.update(executor, _annotate_part, "annotate", fuzzy_canon, final, fuzzy_of or [None] * n,
                        semantic_of or [None] * n, final_of, out=out, int_ids=table.int_ids, score_kind=score_kind,
                        quality_limits=quality_limits)


def _with_ids(state: dict, first_row: int, *, names: tuple) -> tuple:
    """A row lookup's owner: the state's columns ``names``, then its ids as an Arrow column (an answer of text
    ids is then no object per id to copy, pickle or spill)."""
    return tuple(state[k] for k in names) + (id_array(state["id"]),)


def _answer_count_and_ids(owner: tuple, local: np.ndarray, counts: np.ndarray) -> tuple:
    return counts, owner[0].take(pa.array(local))


def _item(answers: tuple, k: int) -> np.ndarray:
    return answers[k]


def _annotate_part(state: dict, first_row: int, fuzzy_canon, final, fuzzy_of, semantic_of, final_of, *, out,
                   int_ids, score_kind, quality_limits) -> dict:
    m = len(state["ord"])
    rows = first_row + np.arange(m, dtype=np.int64)
    exact_canon = state["exact_canon"]
    fuzzy_similarity = fuzzy_of[1] if fuzzy_of is not None else np.ones(m)
    semantic_similarity = state["semantic_sim"] if "semantic_sim" in state else np.ones(m)
    cluster_size, final_ids = final_of
    fuzzy_ids = semantic_of[1] if semantic_of is not None else final_ids
    exact_ids = fuzzy_of[2] if fuzzy_of is not None else fuzzy_ids
    gates = None
    quality = None
    if quality_limits is not None:
        quality = QualityResult(state["qrule"], state["qvalue"], quality_limits, state.get("lang"),
                                state.get("lang_score"))
        gates = Gates(quality.failed, quality.reasons, None)
    if "contaminated" in state:
        gates = gates or Gates(np.zeros(m, bool), None, None)
        gates.contamination = tuple(state[k] for k in CONTAMINATION_COLUMNS)
    annotations = annotation_columns(rows, exact_canon, fuzzy_canon, final, state["id"], exact_ids, fuzzy_ids,
                                     final_ids, fuzzy_similarity, semantic_similarity, cluster_size, gates, out,
                                     int_ids, score_kind)
    if STRIP_CUTS_COLUMN in state:  # the bytes a strip removed, for removed_spans
        annotations = annotations.set_column(annotations.schema.get_field_index(STRIP_CUTS), STRIP_CUTS,
                                             pa.array(state[STRIP_CUTS_COLUMN], type=RANGES))
    return {"annotations": with_languages(annotations, quality)}


def with_languages(annotations: pa.Table, quality: QualityResult | None) -> pa.Table:
    """``annotations`` with the ``LANGUAGE_COLUMNS`` when the quality gate identified languages."""
    columns = quality.language_columns() if quality is not None else None
    if columns is None:
        return annotations
    return annotations.append_column("lang", columns[0]).append_column("lang_score", columns[1])


def apply_paragraphs(annotations: pa.Table, paragraphs: ParagraphResult, out: OutputConfig) -> pa.Table:
    """Add the paragraphs stage's cuts and counts; documents it drops lose ``keep`` and ``weight``."""
    return _apply_removal(annotations, "paragraphs", paragraphs.drop, paragraphs.drop_reason, {
        PARAGRAPH_CUTS: pa.array(paragraphs.cuts, type=RANGES),
        "paragraph_chars_removed": pa.array(paragraphs.chars_removed)})


def apply_substrings(annotations: pa.Table, substrings: SubstringResult, out: OutputConfig) -> pa.Table:
    """Add the substrings stage's spans, cuts and counts; documents it drops lose ``keep`` and ``weight``."""
    return _apply_removal(annotations, "substrings", substrings.drop, substrings.drop_reason, {
        "substring_spans": pa.array(substrings.spans, type=RANGES),
        SUBSTRING_CUTS: pa.array(substrings.cuts, type=RANGES),
        "substring_chars_removed": pa.array(substrings.chars_removed)})


def _apply_removal(annotations: pa.Table, stage_name: str, drop: np.ndarray, drop_reason: np.ndarray,
                   columns: dict) -> pa.Table:
    """``columns`` set, and the kept documents in ``drop`` dropped by ``stage_name`` with their reasons."""
    keep = np.asarray(annotations.column("keep"))
    dropped = drop & keep
    stage = annotations.column("drop_stage").to_numpy(zero_copy_only=False).astype(object)
    reason = annotations.column("drop_reason").to_numpy(zero_copy_only=False).astype(object)
    stage[dropped] = stage_name
    reason[dropped] = drop_reason[dropped]
    weight = np.where(dropped, 0.0, np.asarray(annotations.column("weight")))
    columns = {"keep": pa.array(keep & ~dropped), "drop_stage": pa.array(stage, type=pa.string()),
               "drop_reason": pa.array(reason, type=pa.string()), "weight": pa.array(weight), **columns}
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


#: edges per batch (row group) of ``edges.parquet``, and per id lookup of the driver's edge arrays: what
#: this process holds of the edges at a time
EDGE_BATCH = 100_000
#: row groups of ``edges.parquet`` whose ids one lookup asks for (from the driver's edge arrays)
LOOKUP_BATCHES = 8


def edge_batches(table: DocParts, fuzzy: FuzzyResult | None, semantic: SemanticResult | None = None,
                 semantic_threshold: float = 1.0, executor=None):
    """``edges.parquet`` in Arrow tables of ``EDGE_BATCH`` rows (the last one shorter), so that its row
    groups do not depend on where the edges were: every verified fuzzy candidate pair (both ends exact
    canonicals) with its Jaccard (method ``jaccard``, or ``minhash`` estimates without verification), then
    every within-cluster pair of the semantic stage with cosine at or above its threshold (``cosine``).

    Edges kept in partitions (``fuzzy.edge_frames``, ``semantic.edge_parts``) get their ids where they are
    (a ``lookup``), and come here one partition's table at a time; the driver's edge arrays ask the
    table's partitions for their ids a batch at a time."""
    def from_arrays(i, j, score, method, threshold):
        # ids asked of the partitions for LOOKUP_BATCHES row groups at once (each ask is a step over them)
        for a in range(0, len(i), EDGE_BATCH * LOOKUP_BATCHES):
            b = a + EDGE_BATCH * LOOKUP_BATCHES
            edges = _edges(table, executor, i[a:b], j[a:b], score[a:b], method, threshold)
            for c in range(0, edges.num_rows, EDGE_BATCH):
                yield edges.slice(c, EDGE_BATCH)

    def from_parts(parts, method, threshold):
        ids = lookup(executor, [delayed(_pair_rows)(p) for p in parts], table.map(_with_ids, names=()),
                     table.part_offsets, answer_columns, "edges: ids")
        if executor.client is None:  # a part is here already
            slices = [[(0, None)] for _ in parts]
        else:  # gathered in slices of at most EDGE_BATCH edges (a part of Dask's sorted edges can hold more)
            lengths = executor.compute([delayed(_n_edges)(p) for p in parts], "edges: count")
            slices = [[(a, a + EDGE_BATCH) for a in range(0, n, EDGE_BATCH)] for n in lengths]
        tasks = [delayed(_part_edges)(p, got, method, threshold, a, b)
                 for p, got, cuts in zip(parts, ids, slices) for a, b in cuts]
        return _rebatched(executor.iter_compute(tasks, "write edges"), EDGE_BATCH)

    if fuzzy is not None and fuzzy.edge_frames is not None:
        yield from from_parts([delayed(_frame_edges)(f) for f in fuzzy.edge_frames.to_delayed()],
                              fuzzy.score_kind, fuzzy.threshold)
    elif fuzzy is not None:
        yield from from_arrays(fuzzy.edge_i, fuzzy.edge_j, fuzzy.edge_score, fuzzy.score_kind, fuzzy.threshold)
    if semantic is not None and semantic.edge_parts is not None:
        yield from from_parts(semantic.edge_parts, "cosine", semantic_threshold)
    elif semantic is not None:
        yield from from_arrays(semantic.edge_i, semantic.edge_j, semantic.edge_score, "cosine", semantic_threshold)
    yield _edges(table, executor, np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0), "", 1.0)


def _frame_edges(frame) -> tuple:
    return frame["i"].to_numpy(np.int64), frame["j"].to_numpy(np.int64), frame["score"].to_numpy(np.float64)


def _pair_rows(edges: tuple) -> np.ndarray:
    return np.concatenate([edges[0], edges[1]]).astype(np.int64)


def _n_edges(edges: tuple) -> int:
    return len(edges[0])


def _part_edges(edges: tuple, ids: tuple, method: str, threshold: float, start: int, stop: int | None) -> pa.Table:
    """The edges ``start:stop`` of one part, with the ids of their rows (``ids``: of ``_pair_rows``)."""
    n = len(edges[0])
    cut = slice(start, stop)
    return _edge_table(ids[0][:n][cut], ids[0][n:][cut], np.asarray(edges[2][cut], np.float64), method, threshold)


def _rebatched(tables, size: int):
    """Arrow ``tables`` cut into tables of ``size`` rows (the last one shorter), each in one chunk."""
    held, n = [], 0
    for t in tables:
        held.append(t)
        n += t.num_rows
        while n >= size:
            joined = pa.concat_tables(held).combine_chunks()
            yield joined.slice(0, size)
            held, n = [joined.slice(size)], n - size
    if n:
        yield pa.concat_tables(held).combine_chunks()


def _edges(table: DocParts, executor, i, j, score, method: str, threshold: float) -> pa.Table:
    ids = table.values_at(executor, "id", np.concatenate([i, j])) if len(i) else None
    ids_a, ids_b = (ids[:len(i)], ids[len(i):]) if ids is not None else (_no_ids(table), _no_ids(table))
    return _edge_table(ids_a, ids_b, score, method, threshold)


def _edge_table(ids_a, ids_b, score, method: str, threshold: float) -> pa.Table:
    return pa.table({
        "id_a": id_array(ids_a),
        "id_b": id_array(ids_b),
        "score": pa.array(score, type=pa.float64()),
        "above_threshold": pa.array(score >= threshold, type=pa.bool_()),
        "method": pa.repeat(pa.scalar(method, pa.string()), len(score)),
    })


def _no_ids(table: DocParts) -> np.ndarray:
    return np.empty(0, np.int64 if table.int_ids and not table.renamed_ids else object)
