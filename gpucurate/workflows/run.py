"""The main job: read -> quality -> normalize -> exact -> fuzzy -> semantic -> contamination -> annotate -> write.

The quality and contamination gates compute their per-document results in the partition pass that
reads the raw text (fused with normalization); their decisions are applied at annotation.
"""

from __future__ import annotations

import functools
import logging
import os
import platform
import time
from contextlib import closing, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .._version import __version__
from ..review.samples import texts_by_id
from ..review.report import (REPORT_COLUMNS, ClusterSamples, cluster_samples, clusters_of_part, members_of_part,
                             write_report)
from ..stages.annotate import alias_table, annotate_parts, apply_paragraphs, apply_substrings, edge_batches
from ..engine.backend import select
from ..config import Config, annotation_names, resolve_config
from ..engine.clock import reset as reset_task_clock, totals as task_clock_totals
from ..engine.executor import Executor, quiet_logs
from ..engine.progress import stage as progress_stage
from ..engine.partitions import Partitions
from ..engine.spill import StagePeaks, machine_memory, nbytes_of
from ..engine.tasks import delayed
from ..io.reader import (ROW_BITS, ParsedCache, load_partition, plan_partitions, processing_partitions,
                         read_documents)
from .runindex import write_run_index
from ..io.writer import StagedOutput, needs_texts, write_annotations, write_batches, write_json, write_partition
from ..stages.contamination import ContaminationGate
from ..stages.exact import ExactDedup
from ..stages.fuzzy import FuzzyDedup, FuzzyResult
from ..stages.fuzzy_exchange import ApartSketches
from ..stages.fuzzy_lsh import kept_apart
from ..stages.normalize import Normalize
from ..stages.paragraphs import ParagraphDedup
from ..stages.quality import QualityGate, QualityResult, rule_report
from ..stages.substrings import SubstringDedup, span_samples
from ..stages.semantic import SemanticDedup, SemanticResult, semantic_enabled, write_embeddings
from ..stages.table import DocParts, RowKeys, id_array

log = logging.getLogger("gpucurate")
#: what writing a part file holds per byte of its input (its parse, the parse's copy in one chunk, the
#: annotations; 256 MB part files under a 1GB budget peaked at 1.9 GB)
WRITE_BYTES_PER_INPUT_BYTE = 3


class Timer:
    """The seconds of each user-level stage (``summary.json``'s ``timings_s``); each timed block is also the
    stage its progress is shown under (``engine.progress.stage``), which it yields."""

    def __init__(self):
        self.times: dict[str, float] = {}
        self.steps: dict[str, dict[str, float]] = {}  # the parts of a stage's time (``step_seconds``)
        self.peaks: StagePeaks | None = None  # each stage's memory, once the run's executor is there

    @contextmanager
    def __call__(self, name: str):
        start = time.perf_counter()
        with progress_stage(name) as stage, (self.peaks.stage(name) if self.peaks is not None else nullcontext()):
            yield stage
        self.times[name] = round(self.times.get(name, 0.0) + time.perf_counter() - start, 4)

    def memory_of(self, name: str):
        """Count the block's memory to stage ``name`` (``summary.json``'s ``memory.stages``) without timing it:
        work between two timed stages that loads their states back."""
        return self.peaks.stage(name) if self.peaks is not None else nullcontext()

    @contextmanager
    def step(self, stage: str, name: str):
        """Time one part of ``stage`` (a block inside that stage's own ``with timer(stage)``)."""
        start = time.perf_counter()
        yield
        steps = self.steps.setdefault(stage, {})
        steps[name] = round(steps.get(name, 0.0) + time.perf_counter() - start, 4)


def _versions() -> dict:
    import pandas
    import pyarrow
    return {"gpucurate": __version__, "python": platform.python_version(), "numpy": np.__version__,
            "pandas": pandas.__version__, "pyarrow": pyarrow.__version__,
            **_optional_versions("numba", "dask", "distributed", "torch", "transformers", "sklearn")}


def _optional_versions(*modules) -> dict:
    import sys
    return {m: sys.modules[m].__version__ for m in modules if m in sys.modules}


def run(inputs: list[str] | str, output: str | os.PathLike, config: Config | str | None = None,
        overrides: list[str] | dict | None = None) -> dict:
    """Deduplicate ``inputs`` and write the annotated output directory; return the summary.

    Parameters
    ----------
    inputs : files, globs or directories of JSON Lines (.jsonl[.gz|.zst]) or Parquet.
    output : output directory (created; must be empty unless ``output.overwrite``). It is written aside
        and put in place only when complete, with a ``_SUCCESS`` marker; a second writer of the same
        directory fails at once (``LockedError``). See ``gpucurate.io.writer``.
    config : a Config, a YAML path, or None for the defaults.
    overrides : ``["section.key=value", ...]`` or ``{"section.key": value}`` applied on top.
    """
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [str(inputs)]
    cfg = resolve_config(config, overrides)
    backend = select(cfg.run.backend)
    timer = Timer()
    reset_task_clock()
    start = time.perf_counter()
    # everything is written into a staging directory next to ``output`` (locked) and put in place complete
    with StagedOutput(output, cfg.output.overwrite, "run") as staged:
        summary = _run_into(staged.path, inputs, cfg, backend, timer, start)
        staged.commit()
    return summary


def _run_into(out, inputs, cfg: Config, backend, timer: Timer, start: float) -> dict:
    report: dict = {}
    # past run.memory_limit, kept partitions and states spill beside the output (the staging folder's parent)
    with quiet_logs(), Executor(cfg.run.scheduler, cfg.run.workers, cfg.run.progress, gpus=backend.name == "gpu",
                                memory_limit=cfg.run.memory_limit,
                                partition_bytes=cfg.input.partition_bytes,
                                spill_dir=cfg.run.spill_dir or Path(out).parent) as executor, \
            (closing(StagePeaks(executor.store)) if executor.client is None else nullcontext()) as timer.peaks:
        with timer("plan"):
            # input columns must not have these names
            reserved = annotation_names(cfg.output.annotation_prefix, cfg.quality.language_id)
            specs = plan_partitions([str(i) for i in inputs], cfg.input, report, reserved, executor.workers,
                                    executor.piece_bytes)
        # the partitions are the part files; under a small budget they are read and processed in pieces,
        # joined again for the write
        pieces, layout = processing_partitions(specs)
        log.info("%d input partition(s) from %d file(s) on %s%s", len(specs),
                 len({p for s in specs for p in s.paths}), executor.description,
                 f", read in {len(pieces)} pieces of about {executor.piece_bytes >> 20} MB (run.memory_limit)"
                 if len(pieces) > len(specs) else "")
        if len(pieces) > len(specs) and \
                executor.workers * WRITE_BYTES_PER_INPUT_BYTE * cfg.input.partition_bytes > executor.memory_limit // 2:
            log.warning("the write holds a part file's rows at a time, about %d MB per thread: past run.memory_limit "
                        "(%d MB); a smaller input.partition_bytes makes smaller part files",
                        WRITE_BYTES_PER_INPUT_BYTE * cfg.input.partition_bytes >> 20, executor.memory_limit >> 20)
        local = executor.client is None
        if not local:
            executor.client.run(reset_task_clock)
        if backend.arrays is not None and not local:  # the workers count this run's copies from zero
            from ..device.arrays import process_ledger
            executor.client.run(process_ledger, backend.arrays.kind, True)
        # the parses kept for the write: an eighth of the machine, a quarter of the kept values' budget at
        # most, and taken out of it
        # (only their texts with output.columns=annotations: the write pass reads no other input column);
        # past that, on disk when the write will read them all
        everything = cfg.output.columns == "all"
        parsed = ParsedCache(executor.store.set_aside(min(machine_memory() // 8, executor.store.budget // 4)),
                             None if everything else (cfg.input.text_field,),
                             executor.store.keep_on_disk if everything else None) if local else None
        ddf = read_documents(pieces, cfg.input, reserved, local=local, cache=parsed)
        result = deduplicate(ddf, cfg, executor, backend, timer, _locator(specs))
        with timer("write"):
            if len(pieces) > len(specs):
                with timer.step("write", "join pieces"):
                    result.table = result.table.joined(executor, layout, "join pieces")
                    if result.semantic is not None:
                        result.semantic = result.semantic.joined(layout)
            table = result.table
            with timer.step("write", "report samples"):
                samples = _report_samples(table, executor)
            shown = samples.shown_ids()
            top_spans = result.substrings["top_spans"] if result.substrings is not None else []
            with timer.step("write", "parts"):
                read_in = [pieces[a:b] for a, b in layout]
                for _, texts, spans in executor.compute(table.map(_write_part, specs, read_in, cfg=cfg, out=str(out),
                                                                  parsed=parsed, shown=shown, top_spans=top_spans),
                                                        "write"):
                    samples.texts.update(texts)
                    for k, sample in spans.items():  # the most repeated spans' documents and texts, for the summary
                        top_spans[k].update(sample)
            with timer.step("write", "aliases"):
                write_batches(executor.iter_compute(table.map(_aliases), "write aliases"), out / "aliases.parquet",
                              cfg)
            with timer.step("write", "edges"):
                write_batches(edge_batches(table, result.fuzzy, result.semantic, cfg.semantic.threshold, executor),
                              out / "edges.parquet", cfg)
            if result.semantic is not None and cfg.semantic.write_embeddings:
                with timer.step("write", "embeddings"):
                    write_embeddings(result.semantic, table, out, cfg.output.compression, executor)
            if result.contamination is not None:
                write_json(result.contamination.report, out / "contamination_report.json")
            with timer.step("write", "run index"):
                write_run_index(result, out, executor, collected_at={
                    "fuzzy": result.fuzzy.threshold if result.fuzzy is not None else None,
                    "semantic": cfg.semantic.threshold if result.semantic is not None else None})
        wall = time.perf_counter() - start
        summary = _summary(cfg, inputs, specs, report, result, timer, wall, backend.name, executor.description,
                           executor.workers)
        summary["stages"]["input"]["read_pieces"] = len(pieces)
        summary["task_seconds"] = _task_seconds(executor)
        if local:
            summary["memory"] = {"limit": executor.memory_limit, **executor.store.summary(),
                                 "stages": timer.peaks.stages}
        if backend.arrays is not None:
            summary["device"] = _device_summary(backend.arrays, executor, result.fuzzy, wall)
    write_json(summary, out / "summary.json")
    start = time.perf_counter()
    write_report(out, staged=True, samples=samples)  # reads summary.json; its own time is added after
    summary["step_seconds"]["write"]["report"] = round(time.perf_counter() - start, 4)
    write_json(summary, out / "summary.json")
    return summary


def _task_seconds(executor: Executor) -> dict:
    """``summary.json``'s ``task_seconds``: the seconds the partition tasks spent parsing, normalizing, hashing
    and sketching (``engine.clock``), summed over this process's threads and, on a cluster, the workers'."""
    clocks = [task_clock_totals()]
    if executor.client is not None:
        clocks += list(executor.client.run(task_clock_totals).values())
    out: dict[str, float] = {}
    for clock in clocks:
        for name, seconds in clock.items():
            out[name] = round(out.get(name, 0.0) + seconds, 4)
    return dict(sorted(out.items()))


def _device_summary(arrays, executor: Executor, fuzzy, wall: float) -> dict:
    """``summary.json``'s ``device`` section: the transfer ledger of this process and, on a cluster, of the
    workers' processes, summed; ``resident`` when the fuzzy stage's sketches stayed on the devices;
    ``device_busy_fraction``: the seconds the devices' locks were held (their work finished) over the wall
    time of the devices used, an upper bound of the time they were busy."""
    from ..device.arrays import merge_ledgers, process_ledger
    ledgers = [arrays.summary()]
    if executor.client is not None:
        ledgers += [w for w in executor.client.run(process_ledger, arrays.kind).values() if w is not None]
    out = dict(merge_ledgers(ledgers), arrays=arrays.kind, processes=len(ledgers),
               resident=fuzzy is None or bool(fuzzy.stats.get("device_resident")))
    out["device_busy_fraction"] = round(out["device_seconds"] / (wall * max(1, out["devices_used"])), 4) \
        if wall > 0 else None
    if executor.client is not None:
        out["note"] = ("summed over the Dask workers' processes and this one; pieces and states sent between "
                       "workers go through host memory, counted as 'spill: sent to another worker' and "
                       "'spill: back to the device'")
    return out


def _write_part(state: dict, first_row: int, spec, pieces: list, *, cfg: Config, out: str,
                parsed: ParsedCache | None, shown: set, top_spans: list) -> tuple[str, dict, dict]:
    """Write the partition's part file (``pieces``: the partitions it was read in); return its path, the texts
    of its rows in ``shown`` (doc_ids) and the samples of the ``top_spans`` in its rows
    (``substrings.span_samples``)."""
    annotations = state["annotations"]
    doc_ids = annotations.column("doc_id")
    cached = parsed.take_joined(spec, pieces) if parsed is not None else None
    if cfg.output.columns == "all":
        part = cached or load_partition(spec, cfg.input)
        path = write_partition(spec, cfg, annotations, state["ord"], out, part)
        texts = part.table.column(cfg.input.text_field)
    else:  # the input is read again only when a removal stage's texts or a report sample come from it
        m = len(doc_ids)
        wanted = needs_texts(annotations) or any(0 <= s["row"] - first_row < m for s in top_spans) or \
            (bool(shown) and pc.any(pc.is_in(doc_ids, value_set=pa.array(list(shown)).cast(doc_ids.type))).as_py())
        texts = (cached or load_partition(spec, cfg.input)).table.column(cfg.input.text_field) if wanted else None
        path = write_annotations(spec, cfg, annotations, state["ord"], out, texts)
        if texts is None:
            return path, {}, {}
    spans = span_samples(top_spans, first_row, doc_ids, texts)
    if not shown:
        return path, {}, spans
    return path, texts_by_id(doc_ids, texts, shown), spans


def _report_samples(table: DocParts, executor: Executor) -> ClusterSamples:
    """report.html's ``ClusterSamples`` from the partitions' annotations, before the write, which adds their
    texts (so that the report does not read the part files again)."""
    first = executor.compute(table.map(_clusters_of_part), "report: clusters")
    return cluster_samples(first, lambda bins, top_ids: executor.compute(
        table.map(_members_of_part, bins=bins, top_ids=top_ids), "report: cluster members"))


def _clusters_of_part(state: dict, first_row: int) -> tuple:
    return clusters_of_part(state["annotations"].select(REPORT_COLUMNS).to_pandas())


def _members_of_part(state: dict, first_row: int, *, bins, top_ids: list) -> tuple:
    return members_of_part(state["annotations"].select(REPORT_COLUMNS).to_pandas(), bins, top_ids)


def _aliases(state: dict, first_row: int):
    return alias_table(state["annotations"])


@dataclass
class GateOutput:
    """The contamination gate's run-wide output (its per-document columns are in the partitions' states)."""
    stats: dict
    report: dict


@dataclass
class DedupResult:
    """A run's result: the table (``DocParts``) whose partition states hold every per-document column and
    the ``annotations``, the stages' outputs, and the run-wide ``counts`` (``partition_counts``)."""
    table: DocParts
    fuzzy: FuzzyResult | None
    semantic: SemanticResult | None
    quality: dict | None  # the quality rules' stats, None when none is set
    quality_limits: dict | None
    contamination: GateOutput | None
    paragraphs: dict | None  # the paragraph stage's stats
    substrings: dict | None  # the substrings stage's stats
    counts: dict


@dataclass
class Prepared:
    """A read batch after the partition pass: normalized texts (persisted; without them when no later
    stage reads them), the document table (with the quality columns ``qrule``, ``qvalue`` when rules are
    set; ingest replaces it by its ``DocTable`` in memory), the gates whose per-document work runs in the
    same pass, and the fuzzy stage's sketches when the pass made them on the CPU, kept apart from the
    table's states (``fuzzy_exchange.ApartSketches``; the stage takes them)."""
    ddf: object
    table: DocParts
    quality_limits: dict | None
    contamination_gate: ContaminationGate
    paragraph_stage: ParagraphDedup
    substring_stage: SubstringDedup
    sketches: ApartSketches | None = None

    def quality(self, executor: Executor) -> QualityResult | None:
        """The quality columns as arrays in this process (ingest keeps its collection there)."""
        if self.quality_limits is None:
            return None
        lang = lang_score = None
        if "language_labels" in self.quality_limits:
            lang = self.table.gather(executor, "lang").astype(np.int16)
            lang_score = self.table.gather(executor, "lang_score")
        return QualityResult(self.table.gather(executor, "qrule").astype(np.int16),
                             self.table.gather(executor, "qvalue"), self.quality_limits, lang, lang_score)


def prepare(narrow_ddf, cfg: Config, executor: Executor, backend, describe=None, timer: Timer | None = None,
            text_pass=None, sketches: bool = False, texts_later: bool = True) -> Prepared:
    """The partition pass over a narrow Dask DataFrame (``io.reader.NARROW_META``): quality statistics,
    contamination n-gram matches and paragraph spans of the raw text, then normalization, then ``text_pass``
    (``ExactDedup.text_pass``: hashes and sketches) when given, each partition's chain one after another.
    ``sketches``: the text pass makes the fuzzy stage's sketches on the CPU (``exact.HostSketching``, on
    this process's threads), which are kept apart (``Prepared.sketches``). ``texts_later``: False when no
    stage after the fuzzy one reads the normalized texts, which are then not kept unless a gate or removal
    stage of this pass reads them again. ``timer``: records the pass and the collection of the table as
    steps of ``read+normalize``."""
    timer = timer or Timer()
    quality_gate = QualityGate(cfg.quality)
    contamination_gate = ContaminationGate(cfg.contamination, backend)
    threads = executor.threads_per_task(narrow_ddf.npartitions)
    ddf = narrow_ddf
    if quality_gate.active:
        ddf = quality_gate.run(ddf)
    if contamination_gate.enabled:
        ddf = contamination_gate.run(ddf)
    paragraph_stage = ParagraphDedup(cfg.paragraphs, backend)
    if cfg.paragraphs.enabled:
        ddf = paragraph_stage.run(ddf)
    substring_stage = SubstringDedup(cfg.substrings, (cfg.substrings.unit or cfg.fuzzy.shingle) == "char", backend)
    if cfg.substrings.enabled:
        ddf = substring_stage.run(ddf)
    ddf = Normalize(cfg.normalize).run(ddf, threads)
    if text_pass is not None:
        ddf = text_pass(ddf)
    made = None
    texts_later = texts_later or contamination_gate.enabled or cfg.paragraphs.enabled or cfg.substrings.enabled
    with timer.step("read+normalize", "partition pass"):
        if sketches:
            split = [delayed(_sketches_apart, nout=3)(part, texts_later) for part in ddf.to_delayed()]
            kept, nbytes = executor.persist_tasks([t[k] for t in split for k in range(3)], "read+normalize",
                                                  measure=nbytes_of)
            ddf = Partitions(kept[0::3], ddf._meta if texts_later else ddf._meta.drop(columns="_text"))
            made = ApartSketches(kept[1::3], kept[2::3], nbytes[1::3], nbytes[2::3])
        else:
            ddf = executor.persist(ddf, "read+normalize")
    with timer.step("read+normalize", "collect"):
        table = DocParts.collect(ddf, executor, cfg.input.on_duplicate_id, describe)
    limits = None
    if quality_gate.active:
        table = table.update(executor, _quality_columns, "quality: collect", ddf.to_delayed())
        limits = quality_gate.limits()
    return Prepared(ddf, table, limits, contamination_gate, paragraph_stage, substring_stage, made)


def _sketches_apart(df, texts_later: bool) -> tuple:
    """A partition of the read pass as three values kept apart: the frame (without its texts unless
    ``texts_later``) and its sketches' band keys and shingle sets (``fuzzy_lsh.kept_apart``)."""
    bands, sets = kept_apart(df.attrs["text_pass"].pop("sketch"))
    if not texts_later:
        attrs = df.attrs
        df = df.drop(columns="_text")
        df.attrs = attrs
    return df, bands, sets


def _quality_columns(state: dict, first_row: int, df) -> dict:
    out = {"qrule": df["_qrule"].to_numpy().astype(np.int16), "qvalue": df["_qvalue"].to_numpy(),
           "qreport": df.attrs["quality"]}
    if "_lang" in df:
        out.update(lang=df["_lang"].to_numpy().astype(np.int16), lang_score=df["_lang_score"].to_numpy())
    return out


def deduplicate(narrow_ddf, cfg: Config, executor: Executor, backend, timer: Timer, describe=None) -> DedupResult:
    """Gates and dedup stages over a narrow Dask DataFrame (``io.reader.NARROW_META``) or ``Partitions``; each
    dedup stage sees only the canonicals of the one before, and documents that fail a quality rule take no part.

    The exact stage's text pass (hashes, and the fuzzy stage's sketches, on the device or on the CPU) is the
    last task of each partition's read chain, in one process and on a cluster's workers.

    Every per-document column stays in the partitions' states (``DocParts``); the fuzzy and semantic stages
    still take their participants' masks and keys into this process (``RowKeys``) and hand back their
    canonicals, which go back to the partitions."""
    resident = _resident(cfg, backend, executor)
    exact = ExactDedup(cfg, backend)
    sketching = None
    if cfg.fuzzy.enabled and resident is None:
        sketching = FuzzyDedup(cfg.fuzzy, cfg.canonical.policy, backend).host_sketching(
            executor.threads_per_task(narrow_ddf.npartitions))
    with timer("read+normalize") as stage:
        prep = prepare(narrow_ddf, cfg, executor, backend, describe, timer,
                       functools.partial(exact.text_pass, resident=resident, sketching=sketching),
                       sketches=sketching is not None,
                       texts_later=sketching is None or semantic_enabled(cfg.semantic))
        stage.documents = prep.table.n  # what the later stages' lines count
    ddf, table = prep.ddf, prep.table
    made, prep.sketches = prep.sketches, None  # the fuzzy stage lets them go
    contamination_gate = prep.contamination_gate
    with timer("exact"):
        table, exact_duplicates = exact.run(ddf, table, executor, resident)
    keys = RowKeys(table, executor)
    fuzzy = None
    if cfg.fuzzy.enabled:
        with timer("fuzzy"):
            table, fuzzy = FuzzyDedup(cfg.fuzzy, cfg.canonical.policy, backend).run_parts(
                ddf, table, table.map(_fuzzy_candidates, cfg=cfg.fuzzy), keys, executor, resident, made)
    semantic = None
    if semantic_enabled(cfg.semantic):
        if cfg.semantic.enabled is None:
            log.info("semantic stage on because the encoder is installed (--set semantic.enabled=false skips it)")
        with timer("semantic"):
            table, semantic = SemanticDedup(cfg.semantic, cfg.canonical.policy, backend, cfg.run.progress).run(
                ddf, table, table.map(_still_canonical), executor)
    contamination = None
    if contamination_gate.enabled:
        with timer("contamination"):
            table, report, stats = contamination_gate.collect_parts(ddf, table, executor)
            contamination = GateOutput(stats, report)
    with timer("annotate"):
        table = annotate_parts(table, executor, cfg.output, fuzzy is not None, semantic is not None,
                               prep.quality_limits, fuzzy.score_kind if fuzzy is not None else "jaccard")
    paragraphs = substrings = None
    if cfg.paragraphs.enabled or cfg.substrings.enabled:  # both count the documents kept by annotation
        with timer.memory_of("annotate"):
            kept = executor.persist_tasks(table.map(_kept), "kept documents")
    if cfg.paragraphs.enabled:
        with timer("paragraphs"):
            table, paragraphs = prep.paragraph_stage.collect(ddf, table, kept, executor,
                                                             functools.partial(apply_paragraphs, out=cfg.output))
    if cfg.substrings.enabled:
        with timer("substrings"):
            table, substrings = prep.substring_stage.collect(ddf, table, kept, executor,
                                                             functools.partial(apply_substrings, out=cfg.output))
    with timer.memory_of("annotate"):  # the counts read the annotated states back (spilled ones too)
        counts = partition_counts(table, executor, exact_duplicates, prep.quality_limits)
    if prep.quality_limits is not None and "language_model" in prep.quality_limits:
        counts["quality"]["language_model"] = prep.quality_limits["language_model"]
    return DedupResult(table, fuzzy, semantic, counts.pop("quality"), prep.quality_limits, contamination,
                       paragraphs, substrings, counts)


def _kept(state: dict, first_row: int) -> np.ndarray:
    return np.asarray(state["annotations"].column("keep"))


def _canonical_with_text(state: dict, first_row: int) -> np.ndarray:
    """The partition's exact canonicals with text that passed the quality rules."""
    rows = first_row + np.arange(len(state["hash"]))
    use = (state["exact_canon"] == rows) & ~state["empty"]
    if "qrule" in state:
        use &= state["qrule"] < 0
    return use


def _fuzzy_candidates(state: dict, first_row: int, *, cfg) -> np.ndarray:
    """The fuzzy stage's participants: ``_canonical_with_text`` with at least ``fuzzy.min_length`` words (or
    characters)."""
    use = _canonical_with_text(state, first_row)
    if cfg.min_length:
        use &= state["words" if cfg.shingle == "word" else "chars"] >= cfg.min_length
    return use


def _still_canonical(state: dict, first_row: int) -> np.ndarray:
    """The semantic stage's participants: ``_canonical_with_text`` that are their own fuzzy canonical."""
    use = _canonical_with_text(state, first_row)
    if "fuzzy_canon" in state:
        use &= state["fuzzy_canon"] == first_row + np.arange(len(use))
    return use


def partition_counts(table: DocParts, executor: Executor, exact_duplicates: int, quality: dict | None) -> dict:
    """The run-wide counts of the summary, summed from each partition's; ``quality``: the quality rules'
    limits (``QualityGate.limits``) when they ran, and then their stats (``QualityResult.stats``) and
    report (``quality.rule_report``), else None."""
    parts = executor.compute(table.map(_counts), "count")
    counts = {"documents": table.n, "text_bytes": table.text_bytes, "exact_duplicates": exact_duplicates,
              "empty_texts": int(sum(p["empty_texts"] for p in parts)), "kept": int(sum(p["kept"] for p in parts))}
    by_rule: dict[str, int] = {}
    for p in parts:
        for key, k in p["by_rule"].items():
            by_rule[key] = by_rule.get(key, 0) + k
    counts["quality"] = {"dropped": int(sum(by_rule.values())), "by_rule": dict(sorted(by_rule.items()))} \
        if quality else None
    if quality:
        counts["quality"]["rules"] = rule_report([p["quality_report"] for p in parts], quality)
    if any("languages" in p for p in parts):  # documents per identified language, the most frequent first
        languages: dict[str, int] = {}
        for p in parts:
            for code, k in p["languages"].items():
                languages[code] = languages.get(code, 0) + k
        counts["quality"]["languages"] = dict(sorted(languages.items(), key=lambda kv: (-kv[1], kv[0])))
    return counts


def _counts(state: dict, first_row: int) -> dict:
    by_rule = QualityResult(state["qrule"], state["qvalue"], {}).stats()["by_rule"] if "qrule" in state else {}
    keep = np.asarray(state["annotations"].column("keep"))
    out = {"empty_texts": int(state["empty"].sum()), "kept": int(keep.sum()), "by_rule": by_rule}
    if "qreport" in state:  # the rules' histograms, and the ids of their sample documents
        report = state["qreport"]

        def id_of(order_key) -> str:
            return id_array(state["id"][[np.searchsorted(state["ord"], order_key)]]).cast(pa.string())[0].as_py()
        rules, dropped = np.unique(state["qrule"][state["qrule"] >= 0], return_counts=True)
        out["quality_report"] = {
            "histograms": report["histograms"], "dropped": dict(zip(rules.tolist(), dropped.tolist())),
            "samples": {r: [(o, id_of(o), text) for o, text in found] for r, found in report["samples"].items()}}
    if "lang" in state:
        counts = pc.value_counts(pc.fill_null(state["annotations"].column("lang"), "none")).to_pylist()
        out["languages"] = {v["values"]: v["counts"] for v in counts}
    return out


def _resident(cfg: Config, backend, executor: Executor):
    """The device-resident exact + fuzzy path of the GPU backend (``device.resident``): each partition's text
    goes up once and its sketches stay on the device of the process that holds its state (a worker's GPU
    on a cluster); None on the CPU."""
    if backend.arrays is None:
        return None
    from ..device.resident import ResidentCorpus
    params = FuzzyDedup(cfg.fuzzy, cfg.canonical.policy, backend).device_params(executor) if cfg.fuzzy.enabled \
        else None
    return ResidentCorpus(backend.arrays, params, cfg.run.device_memory)


def _locator(specs):
    """Order key -> ``file:line`` (JSON Lines, 1-based) or ``file:row`` (Parquet), for error messages."""
    files = {m.file_index: m for s in specs for m in s.parts()}

    def describe(order_key) -> str:
        spec = files[int(order_key) >> ROW_BITS]
        record = int(order_key) & ((1 << ROW_BITS) - 1)
        return f"{spec.path}:{record + 1 if spec.fmt == 'jsonl' else record}"
    return describe


def _jit_compiled() -> bool:
    """Whether this process compiled any kernel instead of loading it from numba's cache or the AOT build."""
    from ..kernels.jit import compiled_any
    return compiled_any()


def _aot_kernels() -> int:
    """Kernels in the ahead-of-time build this process loaded (``kernels.aot``; 0: numba served all)."""
    from ..kernels.aot import loaded_kernels
    return loaded_kernels()


def stage_counts(cfg: Config, result: DedupResult, files: int, partitions: int) -> dict:
    """``summary.json``'s ``stages``: documents in, dropped and remaining per stage, with each stage's stats."""
    counts, fuzzy = result.counts, result.fuzzy
    n, keep = counts["documents"], counts["kept"]
    quality_dropped = result.quality["dropped"] if result.quality is not None else 0
    stages = {
        "input": {"documents": n, "empty_texts": counts["empty_texts"], "files": files,
                  "partitions": partitions, "text_bytes": counts["text_bytes"]},
        "quality": dict(result.quality, enabled=True, remaining=n - quality_dropped)
        if result.quality is not None else {"enabled": False, "dropped": 0, "remaining": n},
    }
    after_quality = n - quality_dropped
    stages["exact"] = {"enabled": cfg.exact.enabled, "duplicates": counts["exact_duplicates"],
                       "remaining": after_quality - counts["exact_duplicates"]}
    if fuzzy is not None:
        stages["fuzzy"] = dict(fuzzy.stats, enabled=True,
                               remaining=stages["exact"]["remaining"] - fuzzy.stats["duplicates"])
    else:
        stages["fuzzy"] = {"enabled": False, "duplicates": 0, "remaining": stages["exact"]["remaining"]}
    remaining = stages["fuzzy"]["remaining"]
    if result.semantic is not None:
        stages["semantic"] = dict(result.semantic.stats, enabled=True,
                                  remaining=remaining - result.semantic.stats["duplicates"])
    else:
        stages["semantic"] = {"enabled": False, "duplicates": 0, "remaining": remaining}
    removal_drops = sum(r["dropped"] for r in (result.paragraphs, result.substrings) if r is not None)
    if result.contamination is not None:
        stages["contamination"] = dict(result.contamination.stats, enabled=True, remaining=keep + removal_drops)
    else:
        stages["contamination"] = {"enabled": False, "contaminated_documents": 0, "dropped": 0,
                                   "remaining": stages["semantic"]["remaining"]}
    stages["paragraphs"] = dict(result.paragraphs, enabled=True, remaining=keep + (
        result.substrings["dropped"] if result.substrings is not None else 0)) \
        if result.paragraphs is not None else {"enabled": False, "dropped": 0}
    stages["substrings"] = dict(result.substrings, enabled=True, remaining=keep) \
        if result.substrings is not None else {"enabled": False, "dropped": 0}
    return stages


def step_throughput(times: dict, text_bytes: int, cores: int) -> dict:
    """MB of input text per second and per core of each per-partition step (``summary.json``'s
    ``mb_per_s_per_core``): the figure to compare across machines and corpus sizes."""
    steps = ("read+normalize", "exact", "fuzzy", "semantic", "write")
    return {s: round(text_bytes / 1e6 / times[s] / cores, 1) for s in steps if times.get(s)}


def _summary(cfg, inputs, specs, report, result: DedupResult, timer, wall, backend, executor, cores) -> dict:
    table, fuzzy = result.table, result.fuzzy
    n, keep, text_bytes = table.n, result.counts["kept"], table.text_bytes
    stages = stage_counts(cfg, result, len({p for s in specs for p in s.paths}), len(specs))
    return {
        "gpucurate_version": __version__,
        "inputs": [str(i) for i in inputs],
        "input_formats": sorted({s.fmt for s in specs}),  # what ``export dataset --format same`` writes
        "documents_in": n,
        "documents_kept": keep,
        "documents_dropped": n - keep,
        "stages": stages,
        "lsh": {"bands": fuzzy.bands if fuzzy else None, "rows": fuzzy.rows_per_band if fuzzy else None,
                "chosen": "config" if cfg.fuzzy.bands is not None else "optimal (weighted FP/FN area)"},
        "skipped": table.skipped + report.get("skipped", []),
        "empty_files": report.get("empty_files", []),
        "ignored_files": report.get("ignored_files", []),
        "invalid_utf8_rows_replaced": table.replaced_utf8,
        "renamed_duplicate_ids": table.renamed_ids,
        "backend": backend,
        "executor": executor,
        "timings_s": timer.times,
        # wall seconds of the parts of a stage
        "step_seconds": {stage: dict(steps) for stage, steps in timer.steps.items()},
        "wall_time_s": round(wall, 4),
        "jit_compiled": _jit_compiled(),
        "aot_kernels": _aot_kernels(),
        "docs_per_s": round(n / wall, 1) if wall > 0 else None,
        "mb_per_s": round(text_bytes / 1e6 / wall, 2) if wall > 0 else None,
        "cores": cores,
        "mb_per_s_per_core": step_throughput(timer.times, text_bytes, cores),
        "config": cfg.to_dict(),
        "versions": _versions(),
    }
