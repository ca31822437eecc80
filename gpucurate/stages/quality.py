"""Quality gate: cheap heuristic rules on the raw text, before deduplication.

Each rule compares one statistic of ``kernels.gates.quality_stats`` with a limit from ``quality`` config
(null = rule off); ``quality.preset`` adds datatrove's Gopher, C4 and FineWeb filters with their defaults
(``PRESET_RULES``, statistics of ``kernels.words.preset_stats``; ``quality.preset_limits`` changes them), and ``quality.languages`` a language rule. A document that fails a rule is annotated ``keep = false``, ``drop_stage = quality``
and ``drop_reason = "quality: <rule> <value> <op> <limit>"`` (the first failed rule in ``RULES`` order),
and takes no part in the dedup stages. The rules follow Gopher (Rae et al. 2021); ``configs/web-crawl.yaml``
turns on the usual settings, the defaults turn everything off.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pandas as pd

from ..config import QualityConfig
from ..engine.clock import task_clock
from ..engine.partitions import Carried
from ..errors import ConfigError
from ..kernels.gates import QUALITY_STATS, quality_stats
from ..kernels.hashing import padded_words
from .normalize import arrow_buffers

#: (rule name, statistic, config key, comparison that fails)
RULES = (
    ("word_count", "words", "min_words", "<"),
    ("word_count", "words", "max_words", ">"),
    ("mean_word_length", "mean_word_length", "min_mean_word_length", "<"),
    ("mean_word_length", "mean_word_length", "max_mean_word_length", ">"),
    ("symbol_word_ratio", "symbol_word_ratio", "max_symbol_word_ratio", ">"),
    ("ellipsis_lines", "ellipsis_line_fraction", "max_ellipsis_line_fraction", ">"),
    ("bullet_lines", "bullet_line_fraction", "max_bullet_line_fraction", ">"),
    ("duplicate_lines", "duplicate_line_fraction", "max_duplicate_line_fraction", ">"),
    ("top_2gram", "top_2gram_fraction", "max_top_2gram_fraction", ">"),
    ("top_3gram", "top_3gram_fraction", "max_top_3gram_fraction", ">"),
    ("top_4gram", "top_4gram_fraction", "max_top_4gram_fraction", ">"),
    ("alpha_words", "alpha_word_fraction", "min_alpha_word_fraction", "<"),
    # the language rule (quality.languages, min_language_score): its value is the language's probability
    ("language", None, "languages", "in"),
)
LANGUAGE_RULE = len(RULES) - 1

#: the rules of ``quality.preset``, datatrove's filters with their defaults, each filter's in its order:
#: (preset, rule name as datatrove's drop reason, ``kernels.words.PRESET_STATS`` column, comparison that
#: fails, limit)
PRESET_RULES = (
    ("gopher", "gopher_short_doc", "gopher_words", "<", 50),
    ("gopher", "gopher_long_doc", "gopher_words", ">", 100000),
    ("gopher", "gopher_below_avg_threshold", "gopher_mean_word_length", "<", 3),
    ("gopher", "gopher_above_avg_threshold", "gopher_mean_word_length", ">", 10),
    ("gopher", "gopher_too_many_hashes", "gopher_hash_ratio", ">", 0.1),
    ("gopher", "gopher_too_many_ellipsis", "gopher_ellipsis_ratio", ">", 0.1),
    ("gopher", "gopher_too_many_bullets", "gopher_bullet_lines", ">", 0.9),
    ("gopher", "gopher_too_many_end_ellipsis", "gopher_ellipsis_lines", ">", 0.3),
    ("gopher", "gopher_below_alpha_threshold", "gopher_alpha_words", "<", 0.8),
    ("gopher", "gopher_enough_stop_words", "gopher_stop_words", "<", 2),
    ("gopher", "dup_para_frac", "dup_para_frac", ">", 0.3),
    ("gopher", "dup_para_char_frac", "dup_para_char_frac", ">", 0.2),
    ("gopher", "dup_line_frac", "dup_line_frac", ">", 0.3),
    ("gopher", "dup_line_char_frac", "dup_line_char_frac", ">", 0.2),
    ("gopher", "top_2_gram", "top_2_gram", ">", 0.2),
    ("gopher", "top_3_gram", "top_3_gram", ">", 0.18),
    ("gopher", "top_4_gram", "top_4_gram", ">", 0.16),
    ("gopher", "duplicated_5_n_grams", "dup_5_gram", ">", 0.15),
    ("gopher", "duplicated_6_n_grams", "dup_6_gram", ">", 0.14),
    ("gopher", "duplicated_7_n_grams", "dup_7_gram", ">", 0.13),
    ("gopher", "duplicated_8_n_grams", "dup_8_gram", ">", 0.12),
    ("gopher", "duplicated_9_n_grams", "dup_9_gram", ">", 0.11),
    ("gopher", "duplicated_10_n_grams", "dup_10_gram", ">", 0.10),
    ("c4", "lorem_ipsum", "c4_lorem_ipsum", ">", 0.5),
    ("c4", "curly_bracket", "c4_curly_bracket", ">", 0.5),
    ("c4", "too_few_sentences", "c4_sentences", "<", 5),
    ("fineweb", "empty", "fineweb_lines", "<", 1),
    ("fineweb", "line_punct_ratio", "line_punct_ratio", "<", 0.12),
    ("fineweb", "short_line_ratio", "short_line_ratio", ">", 0.67),
    ("fineweb", "char_dup_ratio", "char_dup_ratio", ">", 0.01),
    ("fineweb", "list_ratio", "list_ratio", ">", 0.3),
)
PRESETS = ("gopher", "c4", "fineweb")
#: index in RULES of the first preset rule (they follow the language rule, so stored rule indices stay)
PRESET_BASE = len(RULES)
RULES = RULES + tuple((name, None, "preset", op) for _, name, _, op, _ in PRESET_RULES)


def preset_rules(presets, limits: dict | None = None) -> list[tuple[int, str, int, str, float]]:
    """``(rule index, name, PRESET_STATS column, op, limit)`` of the rules of ``presets``, with the limits of
    ``limits`` (rule name -> limit, None: the rule is off; ``quality.preset_limits``) instead of datatrove's."""
    from ..kernels.words import PRESET_STATS
    limits = limits or {}
    return [(PRESET_BASE + i, name, PRESET_STATS.index(stat), op, float(limits.get(name, limit)))
            for i, (preset, name, stat, op, limit) in enumerate(PRESET_RULES)
            if preset in (presets or ()) and not (name in limits and limits[name] is None)]


def preset_limit(rule: int, limits: dict) -> float:
    """The limit that preset rule ``rule`` (an index of ``RULES``) ran with, from ``QualityGate.limits``."""
    _, name, _, _, default = PRESET_RULES[rule - PRESET_BASE]
    return (limits.get("preset_limits") or {}).get(name, default)


def check_preset_limits(cfg: QualityConfig) -> None:
    """``quality.preset_limits``: every key a rule of a preset in ``quality.preset``, every value a number
    or null (ConfigError, exit 2, otherwise)."""
    if cfg.preset_limits is None:
        return
    if not isinstance(cfg.preset_limits, dict):
        raise ConfigError(f"quality.preset_limits must be a mapping of rule names to limits, got {cfg.preset_limits!r}")
    presets = {name: preset for preset, name, *_ in PRESET_RULES}
    for name, limit in cfg.preset_limits.items():
        if name not in presets:
            raise ConfigError(f"quality.preset_limits.{name}: no such rule; the rules are {', '.join(presets)}")
        if presets[name] not in (cfg.preset or ()):
            raise ConfigError(f"quality.preset_limits.{name}: a rule of preset {presets[name]}, which quality.preset "
                              f"does not include")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, float))):
            raise ConfigError(f"quality.preset_limits.{name} must be a number or null, got {limit!r}")


def active_rules(cfg: QualityConfig) -> list[tuple[int, str, int, str, float]]:
    """``(rule index, name, stat column, op, limit)`` of the rules with a limit set."""
    out = []
    for r, (name, stat, key, op) in enumerate(RULES):
        limit = getattr(cfg, key)
        if limit is not None and stat is not None:
            out.append((r, name, QUALITY_STATS.index(stat), op, float(limit)))
    return out


@dataclass(frozen=True)
class LanguageRule:
    """Language identification in the quality pass: ``model`` (a ``stages.language`` model path, None: the
    default), the label indices to keep (None: identify only) and the lowest probability kept."""
    model: str | None
    keep: tuple | None
    min_score: float

    def identify(self, offsets: np.ndarray, data: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(label int16[n], probability float32[n], failed bool[n])`` of the texts of Arrow string buffers."""
        from .language import load_model
        model = load_model(self.model)
        labels, scores = model.identify(offsets, data)
        if self.keep is None:
            return labels, scores, np.zeros(len(labels), bool)
        kept = np.zeros(len(model.labels) + 1, bool)  # the last: no language (label -1)
        kept[list(self.keep)] = True
        return labels, scores, ~kept[labels] | (scores < self.min_score)


#: bins of each rule's histogram in summary.json and report.html, and the dropped texts kept per rule
HIST_BINS = 40
SAMPLES_PER_RULE = 3
SAMPLE_CHARS = 400


def rule_range(limit: float) -> tuple[float, float]:
    """The range of a rule's histogram: [0, 1] for fractions, else [0, twice the limit]; values past it
    count in the end bins."""
    return (0.0, 1.0) if limit <= 1 else (0.0, 2.0 * limit)


def _histogram(values: np.ndarray, limit: float) -> np.ndarray:
    """``int64[HIST_BINS]`` counts of ``values`` (NaN, where the rule does not apply, left out)."""
    low, high = rule_range(limit)
    v = np.clip(values[~np.isnan(values)], low, high)
    return np.bincount(np.minimum(((v - low) / (high - low) * HIST_BINS).astype(np.int64), HIST_BINS - 1),
                       minlength=HIST_BINS)


def _apply(rules: list, stats: np.ndarray, failed: np.ndarray, value: np.ndarray, hists: dict) -> None:
    """Mark the documents failing ``rules`` (``(index, name, column, op, limit)``), the first in order
    winning over the later ones and over what ``failed`` held; each rule's histogram into ``hists``."""
    for r, _, col, op, limit in reversed(rules):
        bad = stats[:, col] < limit if op == "<" else stats[:, col] > limit
        failed[bad] = r
        value[bad] = stats[bad, col]
        hists[r] = _histogram(stats[:, col], limit)


def _samples(failed: np.ndarray, ords: np.ndarray, texts: pa.Array) -> dict:
    """rule -> the first ``SAMPLES_PER_RULE`` documents it dropped: (order key, text's first characters)."""
    out = {}
    for r in np.unique(failed[failed >= 0]).tolist():
        rows = np.flatnonzero(failed == r)[:SAMPLES_PER_RULE]
        out[r] = [(int(ords[i]), texts[int(i)].as_py()[:SAMPLE_CHARS]) for i in rows]
    return out


def quality_partition(df: pd.DataFrame, rules: list, language: LanguageRule | None = None,
                      presets: list | None = None) -> pd.DataFrame:
    """``df`` with ``_qrule`` (int16: index of the first failed rule in RULES, -1 if none) and ``_qvalue``
    (float64: the failing statistic) computed from the raw ``_text``; with ``language``, ``_lang`` (int16:
    the label's index, -1 for a text without words) and ``_lang_score`` (float32). The language rule is
    checked first, then ``rules``, then ``presets`` (``preset_rules``)."""
    out = df.copy(deep=False)
    n = len(df)
    failed = np.full(n, -1, np.int16)
    value = np.zeros(n, np.float64)
    hists: dict = {}
    samples: dict = {}
    if n and (rules or language is not None or presets):
        texts = df["_text"].array._pa_array
        offsets, data = arrow_buffers(texts)
        if presets:
            from ..kernels.words import preset_stats, word_tables
            wanted = {PRESET_RULES[r - PRESET_BASE][0] for r, *_ in presets}  # a preset's statistics only if asked
            with task_clock("quality presets"):
                stats = preset_stats(offsets, data, *word_tables().stats_arrays(), "gopher" in wanted, "c4" in wanted,
                                     "fineweb" in wanted)
            _apply(presets, stats, failed, value, hists)
        if rules:
            with task_clock("quality rules"):
                stats = quality_stats(offsets, data, padded_words(data))
            _apply(rules, stats, failed, value, hists)
        if language is not None:
            with task_clock("language identification"):
                labels, scores, bad = language.identify(offsets, data)
            failed[bad] = LANGUAGE_RULE
            value[bad] = scores[bad]
            if language.keep is not None:
                hists[LANGUAGE_RULE] = _histogram(np.where(labels >= 0, scores, np.nan).astype(np.float64),
                                                  language.min_score)
        samples = _samples(failed, df["_ord"].to_numpy(), texts)
    out["_qrule"] = failed
    out["_qvalue"] = value
    if language is not None:
        out["_lang"] = labels if n else np.empty(0, np.int16)
        out["_lang_score"] = scores if n else np.empty(0, np.float32)
    out.attrs = dict(df.attrs)
    out.attrs["quality"] = Carried(histograms=hists, samples=samples)
    return out


@dataclass
class QualityResult:
    rule: np.ndarray  # int16[n]: index into RULES of the failed rule, -1 when the document passed
    value: np.ndarray  # float64[n]: the failing statistic
    limits: dict  # config key -> limit; "language_labels": the model's labels when languages are identified
    lang: np.ndarray | None = None  # int16[n]: the language's label index (-1: none) when identified
    lang_score: np.ndarray | None = None  # float32[n]: its probability

    @property
    def failed(self) -> np.ndarray:
        return self.rule >= 0

    def reasons(self, rows: np.ndarray) -> pa.Array:
        """``string[len(rows)]`` drop reasons of the failed ``rows``; each distinct (rule, value, language)
        is formatted once (a rule's values repeat: word counts, ratios of short texts)."""
        keys = np.empty(len(rows), dtype=[("rule", np.int16), ("value", np.float64), ("lang", np.int16)])
        keys["rule"], keys["value"] = self.rule[rows], self.value[rows]
        keys["lang"] = self.lang[rows] if self.lang is not None else -1
        distinct, index = np.unique(keys, return_inverse=True)
        texts = []
        for rule, value, lang in distinct.tolist():
            name, _, key, op = RULES[rule]
            if rule >= PRESET_BASE:
                preset = PRESET_RULES[rule - PRESET_BASE][0]
                texts.append(f"quality: {name} {value:.4g} {op} {preset_limit(rule, self.limits):g} (preset {preset})")
                continue
            if rule == LANGUAGE_RULE:
                code = self.limits["language_labels"][lang] if lang >= 0 else "none"
                wanted = self.limits["languages"]
                texts.append(f"quality: language {code} {value:.3f} not in languages [{', '.join(wanted)}]"
                             if code not in wanted else
                             f"quality: language {code} {value:.3f} < min_language_score {self.limits['min_language_score']:g}")
                continue
            texts.append(f"quality: {name} {value:.4g} {op} {key} {self.limits[key]:g}")
        return pa.array(texts, pa.string()).take(pa.array(index.reshape(-1).astype(np.int64)))

    def language_columns(self) -> tuple[pa.Array, pa.Array] | None:
        """``lang`` (the model's codes) and ``lang_score`` columns, null for a text without words; None when
        languages were not identified."""
        if self.lang is None:
            return None
        none = self.lang < 0
        labels = pa.array(list(self.limits["language_labels"]), pa.string())
        return (labels.take(pa.array(self.lang, pa.int16(), mask=none)),
                pa.array(self.lang_score, pa.float32(), mask=none))

    def stats(self) -> dict:
        counts: dict[str, int] = {}
        for r in self.rule[self.rule >= 0]:
            name, _, key, _ = RULES[r]
            key = name if r >= PRESET_BASE else key
            counts[key] = counts.get(key, 0) + 1
        return {"dropped": int(self.failed.sum()), "by_rule": dict(sorted(counts.items()))}


def rule_report(parts: list[dict], limits: dict) -> list[dict]:
    """``summary.json``'s ``stages.quality.rules``: for each rule that ran, its limit, the documents it
    dropped (as the first rule they failed), the histogram of its value over every document and the first
    dropped texts. ``parts``: each partition's ``{"histograms", "samples", "dropped"}`` (samples with their
    ``doc_id``); ``limits``: ``QualityGate.limits``."""
    hists: dict[int, np.ndarray] = {}
    samples: dict[int, list] = {}
    dropped: dict[int, int] = {}
    for part in parts:
        for r, counts in part["histograms"].items():
            hists[r] = hists.get(r, 0) + counts
        for r, found in part["samples"].items():
            samples[r] = sorted(samples.get(r, []) + found)[:SAMPLES_PER_RULE]
        for r, k in part["dropped"].items():
            dropped[r] = dropped.get(r, 0) + k
    out = []
    for r in sorted(hists):
        name, _, key, op = RULES[r]
        if r >= PRESET_BASE:
            source, limit = f"preset {PRESET_RULES[r - PRESET_BASE][0]}", preset_limit(r, limits)
        elif r == LANGUAGE_RULE:
            source, op, limit = "languages", "<", limits["min_language_score"]
        else:
            source, limit = key, limits[key]
        low, high = rule_range(limit)
        out.append({"rule": name, "source": source, "fails_when": f"{op} {limit:g}", "limit": limit,
                    "dropped": dropped.get(r, 0),
                    "histogram": {"low": low, "high": high, "counts": hists[r].tolist()},
                    "samples": [{"doc_id": doc, "text": text} for _, doc, text in samples.get(r, [])]})
    return out


class QualityGate:
    """``run(ddf) -> ddf`` adds the rule columns per partition (fused with reading): ``_qrule`` and
    ``_qvalue``, which a run's table keeps in its partitions' states (``qrule``, ``qvalue``)."""

    name = "quality"

    def __init__(self, cfg: QualityConfig, model: str | None = None):
        self.cfg = cfg
        self.rules = active_rules(cfg) if cfg.enabled else []
        check_preset_limits(cfg)
        self.presets = preset_rules(cfg.preset, cfg.preset_limits) if cfg.enabled else []
        self.language = None
        if cfg.language_id:
            from .language import load_model
            labels = load_model(model).labels
            unknown = [x for x in cfg.languages or () if x not in labels]
            if unknown:
                raise ConfigError(f"quality.languages: {', '.join(unknown)} not among the model's {len(labels)} "
                                  f"language codes (ISO 639: en, de, fr, zh, ja, ko, ru, ...)")
            keep = tuple(labels.index(x) for x in cfg.languages) if cfg.languages is not None else None
            self.language = LanguageRule(model, keep, cfg.min_language_score)
            self.labels = labels

    @property
    def active(self) -> bool:
        return bool(self.rules or self.presets) or self.language is not None

    def run(self, ddf):
        columns = dict(_qrule=np.array([], np.int16), _qvalue=np.array([], np.float64))
        if self.language is not None:
            columns.update(_lang=np.array([], np.int16), _lang_score=np.array([], np.float32))
        return ddf.map_partitions(quality_partition, self.rules, self.language, self.presets,
                                  meta=ddf._meta.assign(**columns))

    def limits(self) -> dict:
        """config key -> limit of every rule (``QualityResult.limits``), and the model's labels when languages
        are identified."""
        out = {key: getattr(self.cfg, key) for _, _, key, _ in RULES[:PRESET_BASE]}
        out["preset"] = self.cfg.preset
        out["preset_limits"] = self.cfg.preset_limits
        if self.language is not None:
            from .language import load_model
            model = load_model(self.language.model)
            out.update(min_language_score=self.cfg.min_language_score, language_labels=list(self.labels),
                       language_model={"file": Path(model.path).name, "sha256": model.fingerprint})
        return out
