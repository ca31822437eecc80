"""Apply new thresholds (or canonical/keep/weight policies) to a finished run from its stored edges.

Groups, canonicals and annotations are recomputed from ``edges.parquet`` (every candidate pair with
its exact score) and ``run_index.parquet`` (the per-document results of the run); no signature or
embedding is recomputed. A fuzzy similarity to a new canonical that no stored edge holds (a member
joined through a chain) is recomputed from the two texts, as the full run does.

The result equals a full run at the new settings when each new threshold is at or above the one the
edges were collected at, and (semantic stage) the documents the semantic stage sees are unchanged;
with MinHash the full run must use the same LSH bands x rows (``summary.json`` names them), since
the bands chosen for a different threshold find slightly different candidates. Otherwise the
summary says ``exact: false`` and why. Rolling back is rethresholding to the old value: the stored
edges and their collection thresholds are never changed.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..stages.annotate import alias_table, annotate
from ..engine.backend import select
from ..engine.shuffle import owner_of
from ..config import Config, flatten, load_config
from ..errors import ConfigError, OutputError
from ..io.readback import RunRecords
from ..io.writer import (ANNOTATIONS_DIR, MARKER, StagedOutput, read_run_json, read_run_table, require_complete,
                         write_batches, write_json, write_table)
from ..kernels.hashing import padded_words
from .runindex import RUN_INDEX, RunIndex, load_run_index
from ..kernels.pairs import index_of, pack_pairs
from ..stages.exact import exact_canonicals
from ..stages.fuzzy import FuzzyDedup, FuzzyResult
from ..stages.sketches import Sketches, signature_partition
from ..stages.semantic import SemanticResult, keep_priority, keep_rule
from ..stages.table import canonicals
from ..stages.normalize import arrow_buffers, normalize

log = logging.getLogger("gpucurate")

#: config keys a rethreshold may change; anything else needs a full run
CHANGEABLE = ("fuzzy.threshold", "fuzzy.simhash_max_distance", "semantic.threshold", "semantic.keep",
              "canonical.policy", "output.weight", "output.soft_weight")
#: annotation columns a rethreshold rewrites; the gates' columns stay as written
DEDUP_COLUMNS = ("dedup_id", "is_canonical", "keep", "drop_stage", "drop_reason", "similarity", "cluster_size",
                 "weight", "exact_group", "fuzzy_group", "semantic_group")


def _configs(summary: dict, overrides) -> tuple[Config, Config, list[str]]:
    """(config of the run, new config, changed keys); a change outside CHANGEABLE is a ConfigError."""
    old = load_config(None, flatten(summary["config"]))
    new = load_config(None, overrides, base=old)
    before, after = flatten(old.to_dict()), flatten(new.to_dict())
    changed = [k for k in after if after[k] != before[k]]
    fixed = [k for k in changed if k not in CHANGEABLE]
    if fixed:
        raise ConfigError(f"rethreshold cannot change {', '.join(fixed)} (only {', '.join(CHANGEABLE)}); "
                          "run the pipeline again for that")
    for stage in ("paragraphs", "substrings"):
        if getattr(old, stage).enabled:
            raise ConfigError(f"rethreshold does not support runs with {stage}.enabled (which spans are removed "
                              "depends on which documents are kept); run the pipeline again")
    return old, new, changed


def rethreshold(run_dir: str | os.PathLike, overrides: list[str] | dict,
                output: str | os.PathLike | None = None) -> dict:
    """Recompute groups, canonicals and annotations of a finished run at new settings.

    Parameters
    ----------
    run_dir : output directory of a finished run (or of an earlier rethreshold).
    overrides : ``["fuzzy.threshold=0.85", ...]`` or a dict; only the keys in ``CHANGEABLE``.
    output : write the result here (a copy of the run with new annotations; a new or empty directory);
        default: replace ``run_dir`` in place, as a whole: the new version is written aside complete and
        swapped in (``io.writer.StagedOutput``), so an interrupted rethreshold leaves the run as it was.
        ``run_dir`` must be complete (``_SUCCESS``).

    Returns the new ``summary.json``, whose ``rethreshold`` entry says what changed, whether the
    result equals a full run (``exact``) and the time ratio to the original full run.
    """
    start = time.perf_counter()
    run = require_complete(run_dir, "rethreshold")
    in_place = output is None or os.path.realpath(output) == os.path.realpath(run)
    # in place, the run itself is locked, its new version written complete aside and swapped in (other
    # files carried over); elsewhere, a new output directory is written the same way
    with StagedOutput(run if in_place else output, overwrite=in_place, command="rethreshold",
                      foreign_ok=in_place) as staged:
        require_complete(run, "rethreshold", locked=in_place)  # again, under the lock
        summary = _rethreshold(run, staged.path, overrides, start, in_place)
        staged.commit()
    return summary


def _rethreshold(run: Path, out: Path, overrides, start: float, in_place: bool) -> dict:
    from .run import DedupResult, Timer, stage_counts
    from ..review.report import write_report
    summary = read_run_json(run / "summary.json")
    old_cfg, cfg, changed = _configs(summary, overrides)
    if not (run / RUN_INDEX).is_file():
        raise OutputError("missing (the run directory is incomplete)", run / RUN_INDEX)
    try:
        idx = load_run_index(run)
    except (OSError, pa.ArrowException, KeyError, ValueError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise OutputError(f"unreadable run index ({type(exc).__name__}: {first})", run / RUN_INDEX) from None
    _carry_over(run, out, in_place)
    timer = Timer()
    notes: list[str] = []
    backend = select("cpu")  # grouping and the few recomputed pairs: nothing worth a device
    table, exact, n = idx.table, idx.exact, idx.table.n
    rows = np.arange(n, dtype=np.int64)
    eligible = ~idx.quality.failed if idx.quality is not None else np.ones(n, bool)
    old_exact_canon = exact.canon.copy()
    if cfg.canonical.policy != old_cfg.canonical.policy:
        exact.canon = exact_canonicals(exact.hashes, exact.empty, eligible, table.policy_key(cfg.canonical.policy),
                                       old_cfg.exact.enabled)
    canonical = (exact.canon == rows) & ~exact.empty & eligible
    with timer("read edges"):
        edges = read_run_table(run / "edges.parquet")
        row_of = pd.Index(table.ids).get_indexer(edges.column("id_a").to_pandas()), \
            pd.Index(table.ids).get_indexer(edges.column("id_b").to_pandas())
        method = np.asarray(edges.column("method").to_pylist(), dtype=object)
        score = edges.column("score").to_numpy()
    if (row_of[0] < 0).any() or (row_of[1] < 0).any():
        raise ConfigError(f"{run}: edges.parquet names documents the run index does not hold")
    collected = idx.meta["collected_at"]
    fuzzy = semantic = None
    with timer("fuzzy"):
        if summary["stages"]["fuzzy"].get("enabled"):
            # participants: the exact canonicals of groups whose old canonical took part (same text)
            participants = canonical & idx.fuzzy_participant[old_exact_canon]
            sel = method != "cosine"
            fuzzy = _fuzzy(run, idx, cfg, backend, participants, exact.canon[row_of[0][sel]],
                           exact.canon[row_of[1][sel]], score[sel], summary["stages"]["fuzzy"], notes)
            if fuzzy.threshold < collected["fuzzy"] - 1e-12:
                notes.append(f"fuzzy threshold {fuzzy.threshold:g} is below {collected['fuzzy']:g}, where the "
                             "edges were collected: pairs in between that LSH did not propose are missing")
            canonical[fuzzy.rows[fuzzy.canon != fuzzy.rows]] = False
    with timer("semantic"):
        if summary["stages"]["semantic"].get("enabled"):
            semantic = _semantic(idx, cfg, backend, canonical, row_of, method, score, summary["stages"]["semantic"])
            if not np.array_equal(semantic.rows, np.flatnonzero(idx.semantic_participant)):
                notes.append("the documents left for the semantic stage changed (a different fuzzy threshold or "
                             "canonical policy): documents not embedded in the run are not compared, and a full "
                             "run would cluster the new set (semantic.reuse_embeddings makes that cheap)")
            if cfg.semantic.threshold < collected["semantic"] - 1e-12:
                notes.append(f"semantic threshold {cfg.semantic.threshold:g} is below {collected['semantic']:g}, "
                             "where the edges were collected: pairs in between are missing")
    with timer("annotate"):
        annotations = annotate(table, exact, fuzzy, cfg.output, semantic, idx.quality, idx.contamination)
    if idx.contamination is not None:  # the gate's counts, with the drops that now fall to it
        idx.contamination.stats.update({k: v for k, v in summary["stages"]["contamination"].items()
                                        if k not in ("enabled", "remaining")})
        idx.contamination.stats["dropped"] = int(pc.sum(pc.equal(annotations.column("drop_stage"),
                                                                 "contamination")).as_py() or 0)
    with timer("write"):
        _rewrite_parts(run, out, annotations, table.part_offsets, cfg.output.annotation_prefix, cfg)
        offs = table.part_offsets  # one row group per partition with aliases, as the run wrote them
        write_batches([alias_table(annotations.slice(offs[p], offs[p + 1] - offs[p])) for p in range(len(offs) - 1)],
                      out / "aliases.parquet", cfg)  # the run's compression
        _rewrite_edges(run, edges, method, score, cfg, fuzzy, out)
        _rewrite_run_index(run, out, exact.canon, fuzzy, n)
    for note in notes:
        log.warning("rethreshold: %s", note)
    keep = int(np.asarray(annotations.column("keep")).sum())
    counts = {"documents": n, "kept": keep, "empty_texts": int(exact.empty.sum()), "exact_duplicates": exact.duplicates,
              "text_bytes": int(table.nbytes.sum())}
    result = DedupResult(None, fuzzy, semantic, idx.quality.stats() if idx.quality is not None else None,
                         idx.meta["quality_limits"], idx.contamination, None, None, counts)
    wall = time.perf_counter() - start
    previous = summary.get("rethreshold", {})
    full_wall = previous.get("full_run_wall_time_s", summary["wall_time_s"])
    summary.update({
        "documents_kept": keep, "documents_dropped": n - keep,
        "stages": stage_counts(cfg, result, summary["stages"]["input"]["files"],
                               summary["stages"]["input"]["partitions"]),
        "config": cfg.to_dict(),
        "rethreshold": {
            "from_run": str(run), "changed": {k: flatten(cfg.to_dict())[k] for k in changed},
            "previous": {k: flatten(old_cfg.to_dict())[k] for k in changed},
            "edges_collected_at": collected, "exact": not notes, "notes": notes,
            "lsh_of_equivalent_full_run": {"fuzzy.bands": fuzzy.bands, "fuzzy.rows": fuzzy.rows_per_band}
            if fuzzy is not None and fuzzy.score_kind != "simhash" else None,
            "wall_time_s": round(wall, 4), "timings_s": timer.times, "full_run_wall_time_s": full_wall,
            "time_ratio": round(wall / full_wall, 4) if full_wall else None},
    })
    summary["stages"]["input"]["text_bytes"] = int(table.nbytes.sum())
    write_json(summary, out / "summary.json")
    write_report(out, staged=True)
    log.info("rethreshold: %d of %d documents kept in %.2f s (%.1f%% of the full run's %.2f s)", keep, n, wall,
             100 * wall / full_wall if full_wall else float("nan"), full_wall)
    return summary


#: what a rethreshold writes anew; everything else in the run directory is carried over unchanged
REWRITTEN = (ANNOTATIONS_DIR, "aliases.parquet", "edges.parquet", RUN_INDEX, "summary.json", "report.html", MARKER)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _carry_over(run: Path, out: Path, in_place: bool) -> None:
    """Put everything of ``run`` that a rethreshold does not rewrite (embeddings, the contamination
    report, the user's own files) into the staging directory ``out``: hard links in place (the old
    directory is deleted after the swap, and gpucurate replaces files, never modifies them), copies for
    a separate output."""
    copy = _link_or_copy if in_place else shutil.copy2
    for item in run.iterdir():
        if item.name in REWRITTEN or item.name.endswith(".tmp") or (item.name.startswith(".") and (
                ".staging-" in item.name or ".old-" in item.name or item.name.endswith(".lock"))):
            continue  # also a staging directory, lock file or old output of an output inside the run
        if item.is_dir():
            shutil.copytree(item, out / item.name, copy_function=copy)
        else:
            copy(str(item), str(out / item.name))


def _fuzzy(run: Path, idx: RunIndex, cfg: Config, backend, participants: np.ndarray, edge_a: np.ndarray,
           edge_b: np.ndarray, edge_score: np.ndarray, old_stats: dict, notes: list) -> FuzzyResult:
    """Fuzzy clusters over the stored candidate pairs (table rows ``edge_a``, ``edge_b``)."""
    meta = idx.meta["fuzzy"]
    kind = meta["score_kind"]
    threshold = 1.0 - cfg.fuzzy.simhash_max_distance / 64.0 if kind == "simhash" else cfg.fuzzy.threshold
    rows = np.flatnonzero(participants).astype(np.int64)
    m = len(rows)
    local = np.full(idx.table.n, -1, np.int64)
    local[rows] = np.arange(m)
    li, lj = local[edge_a], local[edge_b]
    if (li < 0).any() or (lj < 0).any():  # a bug or a tampered run directory
        raise ConfigError(f"{run}: edges.parquet joins documents that did not take part in the fuzzy stage")
    edge = edge_score >= threshold - 1e-12
    labels = backend.pairs.components(m, li[edge], lj[edge])
    key = idx.table.policy_key(cfg.canonical.policy)[rows]
    canon_local = np.searchsorted(rows, canonicals(labels, rows, key))
    similarity = np.ones(m, dtype=np.float64)
    members = np.flatnonzero(canon_local != np.arange(m))
    # a member's similarity to its canonical: the stored score of that pair, else from the two texts
    pos = index_of(pack_pairs(li, lj), pack_pairs(members, canon_local[members]))
    found = pos >= 0
    similarity[members[found]] = edge_score[pos[found]]
    missing = members[~found]
    if len(missing):
        similarity[missing] = _scores_from_texts(run, idx, cfg, backend, rows[missing],
                                                 rows[canon_local[missing]])
    stats = {"documents": int(m), "method": cfg.fuzzy.method, "bands": meta["bands"], "rows": meta["rows"],
             "candidate_pairs": int(len(edge_score)), "edges": int(edge.sum()),
             "clusters": int(len(np.unique(labels[members]))) if len(members) else 0,
             "duplicates": int(len(members)), "similarities_from_texts": int(len(missing))}
    if "boilerplate" in old_stats:
        stats["boilerplate"] = old_stats["boilerplate"]
    hashes = meta.get("boilerplate_hashes")
    return FuzzyResult(rows, rows[canon_local], similarity, rows[li], rows[lj], edge_score, kind, threshold,
                       meta["bands"], meta["rows"], stats,
                       np.asarray(hashes, np.uint64) if hashes is not None else None)


def _scores_from_texts(run: Path, idx: RunIndex, cfg: Config, backend, ra: np.ndarray, rb: np.ndarray) -> np.ndarray:
    """Fuzzy score of the pairs of table rows ``(ra, rb)`` computed from their texts in the records."""
    need = np.unique(np.concatenate([ra, rb]))
    texts = _read_texts(run, idx.table.part_offsets, cfg.input.text_field, need)
    normalized = normalize(texts, cfg.normalize)
    offsets, data = arrow_buffers(normalized)
    if not np.array_equal(backend.minhash.text_hashes(offsets, padded_words(data)), idx.exact.hashes[need]):
        raise ConfigError(f"{run}: the texts in {ANNOTATIONS_DIR}/ no longer match the run (changed since?)")
    fuzzy = FuzzyDedup(cfg.fuzzy, cfg.canonical.policy, backend)
    fuzzy.bands, fuzzy.rows_per_band = idx.meta["fuzzy"]["bands"], idx.meta["fuzzy"]["rows"]
    frame = pd.DataFrame({"_text": pd.arrays.ArrowExtensionArray(normalized)})
    sk = Sketches(*signature_partition(frame, np.ones(len(need), bool), fuzzy.params(), backend))
    boilerplate = idx.meta["fuzzy"].get("boilerplate_hashes")
    sk = fuzzy.finish_sketches(sk, np.asarray(boilerplate, np.uint64) if boilerplate is not None else None)
    return fuzzy.scores(sk, np.searchsorted(need, ra), np.searchsorted(need, rb))


def _annotation_files(run: Path, part_offsets: np.ndarray) -> list[Path]:
    """The run's annotated record files, one per partition of the run index."""
    files = sorted((run / ANNOTATIONS_DIR).glob("part-*.parquet"))
    if len(files) != len(part_offsets) - 1:
        raise ConfigError(f"{run}: {len(files)} annotation files for {len(part_offsets) - 1} partitions")
    return files


def _read_texts(run: Path, part_offsets: np.ndarray, text_field: str, rows: np.ndarray) -> pa.Array:
    """Original texts of the sorted table ``rows``, read from the annotated records (back from the inputs
    when the run wrote annotations only)."""
    files = _annotation_files(run, part_offsets)
    records = RunRecords(run, read_run_json(run / "summary.json")["config"], "rethreshold")
    out = []
    part_of = owner_of(part_offsets, rows)
    for p in np.unique(part_of):
        local = rows[part_of == p] - part_offsets[p]
        column = records.table(files[p], [text_field]).column(text_field)
        out.append(column.take(pa.array(local)).combine_chunks().cast(pa.large_string()))
    return pa.concat_arrays(out) if out else pa.array([], pa.large_string())


def _semantic(idx: RunIndex, cfg: Config, backend, canonical: np.ndarray, row_of, method, score,
              old_stats: dict) -> SemanticResult:
    """The semantic keep rule over the stored cosine edges among the embedded documents still canonical."""
    rows = np.flatnonzero(idx.semantic_participant & canonical).astype(np.int64)
    local = np.full(idx.table.n, -1, np.int64)
    local[rows] = np.arange(len(rows))
    sel = method == "cosine"
    a, b, s = local[row_of[0][sel]], local[row_of[1][sel]], score[sel]
    use = (a >= 0) & (b >= 0) & (s >= cfg.semantic.threshold)
    a, b, s = a[use], b[use], s[use]
    centroid_cos = idx.semantic_centroid_cos[rows]
    priority = keep_priority(cfg.semantic.keep, cfg.canonical.policy, idx.table, rows, centroid_cos)
    canon, similarity = keep_rule(a, b, s, priority, rows, backend.semantic.greedy_keep)
    duplicates = int((canon != np.arange(len(rows))).sum())
    stats = dict({k: v for k, v in old_stats.items() if k not in ("enabled", "remaining", "step_seconds")},
                 documents=int(len(rows)), edges=int(len(s)), duplicates=duplicates)
    model = (idx.meta.get("semantic") or {}).get("model", {})
    return SemanticResult(rows, rows[canon], similarity, idx.semantic_cluster[rows], centroid_cos, rows[a], rows[b],
                          s, np.empty((0, 0), np.float32), model, stats)


def _replace(path: Path, table: pa.Table, cfg: Config | None = None) -> None:
    """Write ``table`` to ``path`` in the staging directory: with the run's ``output.compression``
    (``cfg``), as the full run writes it, or pyarrow's defaults (``run_index.parquet``)."""
    if cfg is not None:
        write_table(table, path, cfg)
    else:
        pq.write_table(table, path)


def _rewrite_parts(run: Path, out: Path, annotations: pa.Table, part_offsets: np.ndarray, prefix: str = "",
                   cfg: Config | None = None) -> None:
    """``prefix``: the run's ``output.annotation_prefix`` (the part files' annotation column names)."""
    files = _annotation_files(run, part_offsets)
    for p, f in enumerate(files):
        records = read_run_table(f)
        new = annotations.slice(part_offsets[p], part_offsets[p + 1] - part_offsets[p])
        if records.num_rows != new.num_rows or not records.column(prefix + "doc_id").equals(new.column("doc_id")):
            raise ConfigError(f"{f}: its documents are not the ones the run index lists for partition {p}")
        for name in DEDUP_COLUMNS:
            i = records.schema.get_field_index(prefix + name)
            records = records.set_column(i, prefix + name, new.column(name))
        _replace(out / ANNOTATIONS_DIR / f.name, records, cfg)


def _rewrite_edges(run: Path, edges: pa.Table, method: np.ndarray, score: np.ndarray, cfg: Config, fuzzy,
                   out: Path) -> None:
    """The same edges with ``above_threshold`` at the new thresholds, in the row groups of the run's file
    and with its compression (as the full run writes them)."""
    fuzzy_threshold = fuzzy.threshold if fuzzy is not None else cfg.fuzzy.threshold
    above = np.where(method == "cosine", score >= cfg.semantic.threshold, score >= fuzzy_threshold - 1e-12)
    new = edges.set_column(edges.schema.get_field_index("above_threshold"), "above_threshold",
                           pa.array(above, pa.bool_()))
    meta = pq.read_metadata(run / "edges.parquet")
    sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(int)
    write_batches([new.slice(starts[i], sizes[i]) for i in range(len(sizes))] or [new.slice(0, 0)],
                  out / "edges.parquet", cfg)


def _rewrite_run_index(run: Path, out: Path, exact_canon: np.ndarray, fuzzy, n: int) -> None:
    """The run index with the new exact canonicals and fuzzy participants; the rest (semantic
    participants, collection thresholds) stays as the full run wrote it."""
    t = pq.read_table(run / RUN_INDEX)
    participant = np.zeros(n, bool)
    if fuzzy is not None:
        participant[fuzzy.rows] = True
    for name, values in (("exact_canon", exact_canon), ("fuzzy_participant", participant)):
        t = t.set_column(t.schema.get_field_index(name), name, pa.array(values))
    _replace(out / RUN_INDEX, t)
