"""Command line: ``python -m gpucurate COMMAND`` (run, demo, report, sample-pairs, calibrate, rethreshold,
ingest, export [dataset|pgvector], search); logs, progress: stderr."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from .errors import ConfigError, GpucurateError

log = logging.getLogger("gpucurate")


class _Parser(argparse.ArgumentParser):
    """Argument errors as one line, ``gpucurate: error: ...``, exit 2 (like every other error)."""

    def error(self, message: str):
        self.exit(2, f"gpucurate: error: {message} (see {self.prog} --help)\n")


def _count(value: str) -> int:
    """An argparse type: an integer >= 0."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {n}")
    return n


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C's KeyboardInterrupt."""


def _on_sigterm(signum, frame):
    raise _Terminated()


#: the pages of docs/ (in gpucurate's source tree) that each command's --help names for more
GUIDES = {"run": ("pipeline", "configuration", "output", "scale"), "demo": ("pipeline", "output"),
          "report": ("review",), "sample-pairs": ("review",), "calibrate": ("review",), "rethreshold": ("review",),
          "ingest": ("rag",), "export": ("output", "rag"), "search": ("rag",)}


def _add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="YAML config file (see configs/default.yaml)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override one config key (repeatable), e.g. --set fuzzy.threshold=0.85")
    p.add_argument("--backend", choices=["auto", "cpu", "gpu"], help="compute backend (run.backend)")
    p.add_argument("--scheduler", metavar="ADDRESS", help="attach to a running Dask scheduler (run.scheduler)")
    p.add_argument("--workers", type=int, help="threads of the in-process scheduler (run.workers)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="only warnings and errors on stderr (no progress bars, no summary table)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logs and full tracebacks on stderr")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gpucurate", description="Find and annotate exact and near-duplicate "
                     "documents in large text collections.")
    from ._version import __version__
    parser.add_argument("--version", action="version", version=f"gpucurate {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="deduplicate input files into an annotated output directory")
    run.add_argument("--input", "-i", nargs="+", required=True, metavar="PATH",
                     help="JSON Lines (.jsonl, .jsonl.gz, .jsonl.zst) or Parquet files, globs or directories")
    run.add_argument("--output", "-o", required=True, metavar="DIR", help="output directory")
    run.add_argument("--reference", metavar="STATE", help="deduplicate against this ingest state without adding "
                     "to it: inputs that match a stored document become its aliases; the state is not changed")
    _add_run_options(run)

    demo = sub.add_parser("demo", help="generate a multilingual sample corpus and deduplicate it")
    demo.add_argument("--output", "-o", default="demo-output", metavar="DIR",
                      help="output directory (default: demo-output); the corpus is written to DIR/input")
    demo.add_argument("--docs", type=_count, default=3000, help="documents to generate (default 3000)")
    demo.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    _add_run_options(demo)

    rep = sub.add_parser("report", help="(re)write report.html of a finished run")
    rep.add_argument("--run", required=True, metavar="DIR", help="output directory of a finished run")
    rep.add_argument("-q", "--quiet", action="store_true")
    rep.add_argument("-v", "--verbose", action="store_true")

    smp = sub.add_parser("sample-pairs", help="draw candidate pairs of a finished run for people to label")
    smp.add_argument("--run", required=True, metavar="DIR", help="output directory of a finished run")
    smp.add_argument("-n", type=int, default=300, help="pairs to draw (default 300)")
    smp.add_argument("--seed", type=int, default=0)
    smp.add_argument("--out", default="review.csv", metavar="FILE", help="CSV to write (default review.csv)")
    smp.add_argument("-q", "--quiet", action="store_true")
    smp.add_argument("-v", "--verbose", action="store_true")

    ing = sub.add_parser("ingest", help="deduplicate a new batch against a persisted state and commit it")
    ing.add_argument("--state", required=True, metavar="DIR", help="state directory (created by the first ingest)")
    source = ing.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", "-i", nargs="+", metavar="PATH", help="the batch's files")
    source.add_argument("--from-run", metavar="DIR", help="seed the state from a finished run's output")
    ing.add_argument("--output", "-o", metavar="DIR", help="also write the batch's annotated records here")
    ing.add_argument("--sink", choices=["pgvector"], help="write canonicals, aliases and chunks to a database")
    ing.add_argument("--dsn", help="PostgreSQL connection string of the pgvector sink")
    ing.add_argument("--schema", default="public", help="PostgreSQL schema of the sink's tables (default public)")
    _add_run_options(ing)

    exp = sub.add_parser("export", help="write a finished run's kept documents as a cleaned dataset (dataset), "
                         "or the run to a database (pgvector)")
    exp.add_argument("target", choices=["pgvector", "dataset"])
    exp.add_argument("--run", required=True, metavar="DIR", help="output directory of a finished run")
    exp.add_argument("--dsn", help="pgvector: PostgreSQL connection string (required)")
    exp.add_argument("--schema", default="public", help="pgvector: PostgreSQL schema (default public)")
    exp.add_argument("--state", metavar="DIR", help="pgvector: keep the ingest state here (later batches can be "
                     "ingested into it); default: a temporary one")
    exp.add_argument("--output", "-o", metavar="DIR", help="dataset: directory to write (required): one file per "
                     "part file of the run and export_summary.json")
    exp.add_argument("--format", dest="fmt", choices=["parquet", "jsonl", "same"],
                     help="dataset: file format; same: the run's input format (default parquet)")
    exp.add_argument("--compression", choices=["zstd", "snappy", "gzip", "none"],
                     help="dataset: parquet zstd (default), snappy, gzip, none; jsonl none (default), gzip, zstd")
    exp.add_argument("--original-text", metavar="COLUMN", help="dataset: also write the original text in this column")
    exp.add_argument("--weight", action="store_true", help="dataset: also write the weight annotation (soft dedup) "
                     "as a column weight")
    exp.add_argument("--overwrite", action="store_true", help="dataset: replace an existing export directory")
    _add_run_options(exp)

    sea = sub.add_parser("search", help="nearest canonical documents (or chunks) of a query in a pgvector sink")
    sea.add_argument("query", help="query text")
    sea.add_argument("--dsn", required=True, help="PostgreSQL connection string")
    sea.add_argument("--schema", default="public")
    sea.add_argument("-k", type=int, default=20, help="results (default 20)")
    sea.add_argument("--chunks", action="store_true", help="search the deduplicated chunks instead of documents")
    sea.add_argument("--state", metavar="DIR", help="take the encoder settings from this ingest state")
    sea.add_argument("--config", help="YAML config whose semantic.model to use")
    sea.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    sea.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    sea.add_argument("-q", "--quiet", action="store_true")
    sea.add_argument("-v", "--verbose", action="store_true")

    ret = sub.add_parser("rethreshold", help="apply new thresholds to a finished run from its stored edges")
    ret.add_argument("--run", required=True, metavar="DIR", help="output directory of a finished run")
    ret.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                     required=True, help="new value (repeatable): fuzzy.threshold, semantic.threshold, "
                     "semantic.keep, canonical.policy, output.weight, output.soft_weight, fuzzy.simhash_max_distance")
    ret.add_argument("--output", "-o", metavar="DIR", help="write a rethresholded copy here (default: in place)")
    ret.add_argument("-q", "--quiet", action="store_true")
    ret.add_argument("-v", "--verbose", action="store_true")

    cal = sub.add_parser("calibrate", help="choose a threshold from labelled pairs (precision/recall/F1 sweep)")
    cal.add_argument("--pairs", required=True, metavar="FILE", help="CSV, TSV or Parquet of labelled text pairs")
    cal.add_argument("--preset", choices=["mrpc", "pan"], help="column names of the MRPC or PAN pair files")
    cal.add_argument("--text-a", default="text_a", help="column of the first text (default text_a)")
    cal.add_argument("--text-b", default="text_b", help="column of the second text (default text_b)")
    cal.add_argument("--label", default="label", help="column of the 0/1 label (default label)")
    cal.add_argument("--method", choices=["jaccard", "minhash", "simhash", "cosine"], default="jaccard")
    cal.add_argument("--thresholds", default="0.50:0.99:0.01",
                     help="start:stop:step or a list (default 0.50:0.99:0.01)")
    cal.add_argument("--min-precision", type=float, default=0.95,
                     help="report the lowest threshold with at least this precision (default 0.95)")
    cal.add_argument("--out", default="calibration", metavar="DIR", help="output folder (default calibration)")
    cal.add_argument("--config", help="YAML config whose normalize/fuzzy/semantic settings to use")
    cal.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    cal.add_argument("-q", "--quiet", action="store_true")
    cal.add_argument("-v", "--verbose", action="store_true")
    for name, command in sub.choices.items():
        command.epilog = "More: " + ", ".join(f"docs/{page}.md" for page in GUIDES[name]) + \
            " in gpucurate's source tree."
    return parser


def run_calibrate(args) -> int:
    from rich.console import Console
    from rich.table import Table
    from .review.calibrate import PRESETS, calibrate, load_pairs, parse_thresholds, write_outputs
    from .config import load_config
    cfg = load_config(args.config, args.overrides)
    text_a, text_b, label = PRESETS[args.preset] if args.preset else (args.text_a, args.text_b, args.label)
    pairs = load_pairs(args.pairs, text_a, text_b, label)
    cal = calibrate(pairs, args.method, cfg, parse_thresholds(args.thresholds), args.min_precision)
    paths = write_outputs(cal, args.out)
    t = Table(title=f"{args.method} on {cal.pairs:,} labelled pairs ({cal.positives:,} positive)")
    for col in ("threshold", "predicted", "precision", "recall", "f1"):
        t.add_column(col, justify="right")
    marks = {cal.best_f1["threshold"]: " best F1"}
    if cal.lowest_at_precision:
        marks[cal.lowest_at_precision["threshold"]] = marks.get(cal.lowest_at_precision["threshold"], "") + \
            f" precision>={args.min_precision:g}"
    for r in cal.table.itertuples():
        if round(r.threshold * 100) % 5 == 0 or r.threshold in marks:
            t.add_row(f"{r.threshold:.2f}{marks.get(r.threshold, '')}", f"{r.predicted:,}", f"{r.precision:.3f}",
                      f"{r.recall:.3f}", f"{r.f1:.3f}")
    console = Console()
    console.print(t)
    console.print(f"best F1 {cal.best_f1['f1']:.3f} at {cal.best_f1['threshold']:.2f}; "
                  + (f"lowest threshold with precision >= {args.min_precision:g}: "
                     f"{cal.lowest_at_precision['threshold']:.2f}" if cal.lowest_at_precision
                     else f"no threshold reaches precision {args.min_precision:g}"))
    if cal.lsh:
        curve = ", ".join(f"{k}: {v:.2f}" for k, v in cal.lsh["candidate_probability"].items()
                          if k in ("0.50", "0.70", "0.80", "0.90"))
        console.print(f"LSH at {cal.lsh['threshold']:.2f}: {cal.lsh['bands']} bands x {cal.lsh['rows']} rows; "
                      f"P(candidate | Jaccard) {curve}")
    console.print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def _overrides(args) -> list[str]:
    out = list(args.overrides)
    if args.backend:
        out.append(f"run.backend={args.backend}")
    if args.scheduler:
        out.append(f"run.scheduler={args.scheduler}")
    if args.workers:
        out.append(f"run.workers={args.workers}")
    if args.no_progress or args.quiet:  # quiet: only warnings and errors on stderr, no progress bars
        out.append("run.progress=false")
    return out


def print_summary(summary: dict, output: str) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=True)
    t = Table(title=f"gpucurate: {summary['documents_in']:,} documents -> {summary['documents_kept']:,} kept")
    for col in ("stage", "documents in", "dropped", "remaining", "time (s)"):
        t.add_column(col, justify="right" if col != "stage" else "left")
    st, times = summary["stages"], summary["timings_s"]
    n = st["input"]["documents"]
    t.add_row("read+normalize", f"{n:,}", "0", f"{n:,}", f"{times.get('read+normalize', 0):.2f}")
    q = st.get("quality", {"enabled": False, "remaining": n})
    if q.get("enabled"):
        t.add_row("quality (in read)", f"{n:,}", f"{q['dropped']:,}", f"{q['remaining']:,}", "")
    t.add_row("exact", f"{q['remaining']:,}", f"{st['exact']['duplicates']:,}", f"{st['exact']['remaining']:,}",
              f"{times.get('exact', 0):.2f}")
    fz = st["fuzzy"]
    if fz.get("enabled"):
        t.add_row(f"fuzzy (b={fz['bands']} r={fz['rows']})", f"{st['exact']['remaining']:,}",
                  f"{fz['duplicates']:,}", f"{fz['remaining']:,}", f"{times.get('fuzzy', 0):.2f}")
    sem = st.get("semantic", {"remaining": fz["remaining"]})
    if sem.get("enabled"):
        t.add_row(f"semantic ({sem['clusters']:,} clusters)", f"{fz['remaining']:,}", f"{sem['duplicates']:,}",
                  f"{sem['remaining']:,}", f"{times.get('semantic', 0):.2f}")
    c = st.get("contamination", {})
    if c.get("enabled"):
        t.add_row(f"contamination ({c['contaminated_documents']:,} flagged, {c['action']})", f"{sem['remaining']:,}",
                  f"{c['dropped']:,}", f"{c['remaining']:,}", f"{times.get('contamination', 0):.2f}")
    pg = st.get("paragraphs", {})
    if pg.get("enabled"):
        t.add_row(f"paragraphs ({pg['share_removed']:.1%} of characters removed)", "", f"{pg['dropped']:,}",
                  f"{pg['remaining']:,}", f"{times.get('paragraphs', 0):.2f}")
    t.add_row("write", "", "", "", f"{times.get('write', 0):.2f}")
    console.print(t)
    if summary.get("jit_compiled"):
        console.print("note: this run compiled the numba kernels (once; later runs load them from the cache)")
    console.print(f"{summary['wall_time_s']:.2f} s wall, {summary['docs_per_s']:,.0f} docs/s; "
                  f"skipped {len(summary['skipped'])} file(s)/row(s); output in {output}")


def run_ingest(args) -> int:
    from .workflows.ingest import ingest, ingest_run
    if args.sink and not args.dsn:
        raise ConfigError("--sink pgvector needs --dsn postgresql://...")
    sink = None
    if args.sink == "pgvector":
        from .rag.payload import RagSink
        sink = RagSink(args.dsn, args.schema)
    try:
        if args.from_run:
            summary = ingest_run(args.from_run, args.state, sink, _overrides(args))
        else:
            summary = ingest(args.input, args.state, config=args.config, overrides=_overrides(args),
                             output=args.output, sink=sink)
    finally:
        if sink is not None:
            sink.close()
    print_ingest(summary, args.state)
    return 0


def run_export(args) -> int:
    if args.target == "dataset":
        return run_export_dataset(args)
    if not args.dsn:
        raise ConfigError("export pgvector needs --dsn postgresql://...")
    _refuse_options(args, "export pgvector", "export dataset", output="--output", fmt="--format",
                    compression="--compression", original_text="--original-text", weight="--weight",
                    overwrite="--overwrite")
    import tempfile
    from .workflows.ingest import ingest_run
    from .rag.payload import RagSink
    sink = RagSink(args.dsn, args.schema)
    try:
        if args.state:
            summary = ingest_run(args.run, args.state, sink, _overrides(args))
        else:
            with tempfile.TemporaryDirectory(prefix="gpucurate-export-") as tmp:
                summary = ingest_run(args.run, tmp, sink, _overrides(args))
    finally:
        sink.close()
    print_ingest(summary, args.state or "(temporary state)")
    return 0


def _refuse_options(args, command: str, owner: str, **options: str) -> None:
    """A ConfigError (exit 2) naming the ``options`` (argument dest -> flag) given to ``command`` that only
    ``owner`` takes (both share one parser)."""
    given = [flag for dest, flag in options.items() if getattr(args, dest)]
    if given:
        raise ConfigError(f"{command} does not take {', '.join(given)} ({owner}'s options)")


def run_export_dataset(args) -> int:
    from .workflows.export_dataset import export_dataset
    if not args.output:
        raise ConfigError("export dataset needs --output DIR")
    _refuse_options(args, "export dataset", "export pgvector", dsn="--dsn", state="--state", config="--config",
                    overrides="--set", backend="--backend", scheduler="--scheduler", workers="--workers")
    summary = export_dataset(args.run, args.output, args.fmt or "parquet", args.compression, args.original_text,
                             args.weight, args.overwrite, progress=not (args.quiet or args.no_progress))
    if not args.quiet:
        print(f"exported {summary['documents_out']:,} of {summary['documents_in']:,} documents "
              f"({summary['text_bytes_out']:,} of {summary['text_bytes_in']:,} text bytes) as "
              f"{summary['files_written']} {summary['format']} file(s) ({summary['compression']}) in "
              f"{summary['seconds']:.2f} s; output in {args.output}", file=sys.stderr)
    return 0


def run_search(args) -> int:
    import pandas as pd
    from .config import load_config
    from .rag.payload import encoder_for
    from .rag.sinks.pgvector import PgvectorSink
    cfg = load_config(args.config, args.overrides)
    if args.state:
        from .workflows.state import State
        stored = State(args.state).config
        if stored is None:
            raise ConfigError(f"{args.state}: no committed ingest state")
        cfg.semantic = load_config(None, {f"semantic.{k}": v for k, v in stored["semantic"].items()}).semantic
    query = encoder_for(cfg, "cpu").encode([args.query])[0]
    with PgvectorSink(args.dsn, schema=args.schema) as db:
        found = db.search_chunks(query, args.k) if args.chunks else db.search(query, args.k)
    if args.json:
        print(found.to_json(orient="records", lines=True, date_format="iso", force_ascii=False))
        return 0
    from rich.console import Console
    from rich.table import Table
    t = Table(title=f"{len(found)} nearest {'chunks' if args.chunks else 'canonical documents'}")
    if args.chunks:
        for col in ("chunk", "score", "used by", "text"):
            t.add_column(col)
        for r in found.itertuples():
            t.add_row(str(r.chunk_id), f"{r.score:.3f}", f"{r.occurrences} ({', '.join(map(str, r.doc_ids[:3]))})",
                      str(r.text)[:120])
    else:
        for col in ("document", "score", "aliases", "newest alias", "text"):
            t.add_column(col)
        for r in found.itertuples():
            newest = "" if pd.isna(r.newest_alias_at) else f"{r.newest_alias_id} ({r.newest_alias_at:%Y-%m-%d})"
            t.add_row(str(r.doc_id), f"{r.score:.3f}", str(r.alias_count), newest, str(r.text)[:120])
    Console().print(t)
    return 0



def print_ingest(summary: dict, state: str, title: str | None = None) -> None:
    from rich.console import Console
    from rich.table import Table
    t = Table(title=title or f"ingest batch {summary['batch']} into {state}")
    t.add_column("", justify="left")
    t.add_column("documents", justify="right")
    rows = [("in", "documents_in"), ("already in the state", "already_present"), ("new canonicals", "new_canonicals"),
            ("new aliases", "new_aliases"), ("dropped by gates", "new_dropped_by_gates"),
            ("earlier canonicals now aliases", "canonicals_demoted"), ("embeddings computed", "embeddings_computed"),
            ("embeddings saved", "embeddings_saved"), ("in the state", "state_documents"),
            ("canonicals in the state", "state_canonicals")]
    for label, key in rows:
        t.add_row(label, f"{summary[key]:,}")
    for key, value in (summary.get("sink") or {}).items():
        t.add_row(f"sink: {key.replace('_', ' ')}", f"{value:,}" if isinstance(value, int) else str(value))
    Console(stderr=True).print(t)


def print_rethreshold(before: dict, after: dict, output: str) -> None:
    from rich.console import Console
    from rich.table import Table
    r = after["rethreshold"]
    console = Console(stderr=True)
    t = Table(title="rethreshold: " + ", ".join(f"{k} {r['previous'][k]} -> {v}" for k, v in r["changed"].items()))
    for col in ("stage", "duplicates before", "duplicates after"):
        t.add_column(col, justify="right" if col != "stage" else "left")
    for stage in ("exact", "fuzzy", "semantic"):
        if after["stages"][stage].get("enabled", True):
            t.add_row(stage, f"{before['stages'][stage]['duplicates']:,}", f"{after['stages'][stage]['duplicates']:,}")
    t.add_row("kept", f"{before['documents_kept']:,}", f"{after['documents_kept']:,}")
    console.print(t)
    console.print(f"{r['wall_time_s']:.2f} s, {r['time_ratio']:.1%} of the full run's "
                  f"{r['full_run_wall_time_s']:.2f} s; "
                  + ("same result as a full run at these settings" + (
                      f" (with fuzzy.bands={r['lsh_of_equivalent_full_run']['fuzzy.bands']} "
                      f"fuzzy.rows={r['lsh_of_equivalent_full_run']['fuzzy.rows']})"
                      if r["lsh_of_equivalent_full_run"] else "") if r["exact"]
                     else "NOT the same as a full run: " + "; ".join(r["notes"])) + f"; output in {output}")


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a one-line argument error (exit 2)
        return exc.code if isinstance(exc.code, int) else 2
    level = logging.WARNING if args.quiet else logging.DEBUG if args.verbose else logging.INFO
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("numba", "fsspec", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from .engine.spill import tune_allocator
    tune_allocator()
    # SIGTERM (kill, a scheduler's stop, docker stop) ends a command like Ctrl-C: the staging directory
    # is deleted, the previous output stays, exit 143
    import signal
    import threading
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return _main(args)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main(args) -> int:
    try:
        if args.command == "calibrate":
            return run_calibrate(args)
        if args.command == "ingest":
            return run_ingest(args)
        if args.command == "export":
            return run_export(args)
        if args.command == "search":
            return run_search(args)
        if args.command == "rethreshold":
            from .io.writer import read_run_json, require_complete
            from .workflows.rethreshold import rethreshold
            before = read_run_json(require_complete(args.run, "rethreshold") / "summary.json")
            summary = rethreshold(args.run, args.overrides, args.output)
            if not args.quiet:
                print_rethreshold(before, summary, args.output or args.run)
            return 0
        if args.command == "report":
            from .review.report import write_report
            log.info("wrote %s", write_report(args.run))
            return 0
        if args.command == "sample-pairs":
            from .review.samples import sample_pairs
            sample = sample_pairs(args.run, args.n, args.seed)
            sample.to_csv(args.out, index=False)
            log.info("wrote %d pairs to %s; fill in label (1 = same document, 0 = not), then run "
                     "python -m gpucurate calibrate --pairs %s --method ...", len(sample), args.out, args.out)
            return 0
        from .workflows.run import run
        if args.command == "demo":
            from .generators.demo import write_demo_corpus
            # the demo owns DIR/input and DIR/result and rewrites both on every call
            out = Path(args.output)
            corpus_dir = out / "input"
            corpus_dir.mkdir(parents=True, exist_ok=True)
            files = write_demo_corpus(str(corpus_dir), n_docs=args.docs, seed=args.seed, n_shards=3, fmt="jsonl.gz")
            log.info("wrote a %d-document demo corpus to %s", args.docs, corpus_dir)
            overrides = ["input.timestamp_field=timestamp", "output.overwrite=true"] + _overrides(args)
            summary = run(files, out / "result", config=args.config, overrides=overrides)
            if not args.quiet:
                print_summary(summary, str(out / "result"))
            return 0
        if args.reference:
            from .workflows.ingest import reference
            summary = reference(args.input, args.reference, args.output, config=args.config,
                                overrides=_overrides(args))
            if not args.quiet:
                print_ingest(summary, args.reference, f"{', '.join(args.input)} against {args.reference} "
                             "(not changed)")
            return 0
        summary = run(args.input, args.output, config=args.config, overrides=_overrides(args))
        if not args.quiet:
            print_summary(summary, args.output)
        return 0
    except GpucurateError as err:
        print(f"gpucurate: error: {err}", file=sys.stderr)
        return err.exit_code
    except _Terminated:
        print("gpucurate: terminated (SIGTERM); nothing half-written is in place", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("gpucurate: interrupted; nothing half-written is in place", file=sys.stderr)
        return 130
    except OSError as exc:  # the environment (a full disk, a path that cannot be written): one line, exit 1
        if args.verbose:
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"gpucurate: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # a bug: one line by default, the traceback with -v
        if args.verbose:
            raise
        first = (str(exc).strip().splitlines() or [""])[0]
        print(f"gpucurate: internal error: {type(exc).__name__}: {first} (rerun with -v for the traceback)",
              file=sys.stderr)
        return 3


def _build_kernels_ahead() -> None:
    """After a command whose kernels went through numba: build them ahead of time for later runs, which
    then load them without numba (``kernels.aot``; once per new set of signatures)."""
    if "gpucurate.kernels.jit" not in sys.modules:
        return
    try:
        from .kernels import aot, jit
        aot.refresh(jit.kernels)
    except KeyboardInterrupt:  # the command's outputs are complete; only the build is left undone
        pass
    except Exception as exc:  # never fails a command that succeeded
        log.warning("the kernels were not built ahead of time (%s)", str(exc).splitlines()[0])


def console_main() -> None:
    """The ``gpucurate`` command and ``python -m gpucurate``: ``main``, then exit without the interpreter's
    teardown (the modules' and LLVM's finalizers take 0.3-0.5 s after a large run). By then every output
    is committed and every file closed; the atexit handlers (temporary directories, logging) still run.

    NumPy's huge pages are off unless ``NUMPY_MADVISE_HUGEPAGE`` says otherwise: a run allocates and frees
    many large short-lived arrays, and a 2 MB page costs more to fault in than its TLB hits save (a 10x
    Reuters run took 6.7 s with them and 6.0 s without on a 2-core VM)."""
    os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")  # read when NumPy is imported, which is later
    code = main()
    if code == 0:
        _build_kernels_ahead()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing left to say
            pass
    import atexit
    atexit._run_exitfuncs()
    os._exit(code)


if __name__ == "__main__":
    console_main()
