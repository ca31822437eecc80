"""Quality gate: cheap heuristic rules on the raw text, before deduplication.

Each rule compares one statistic of ``kernels.gates.quality_stats`` with a limit from ``quality`` config
(null = rule off). A document that fails a rule is annotated ``keep = false``, ``drop_stage = quality``
and ``drop_reason = "quality: <rule> <value> <op> <limit>"`` (the first failed rule in ``RULES`` order),
and takes no part in the dedup stages. The rules follow Gopher (Rae et al. 2021); ``configs/web-crawl.yaml``
turns on the usual settings, the defaults turn everything off.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pandas as pd

from ..config import QualityConfig
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
)


def active_rules(cfg: QualityConfig) -> list[tuple[int, str, int, str, float]]:
    """``(rule index, name, stat column, op, limit)`` of the rules with a limit set."""
    out = []
    for r, (name, stat, key, op) in enumerate(RULES):
        limit = getattr(cfg, key)
        if limit is not None:
            out.append((r, name, QUALITY_STATS.index(stat), op, float(limit)))
    return out


def quality_partition(df: pd.DataFrame, rules: list) -> pd.DataFrame:
    """``df`` with ``_qrule`` (int16: index of the first failed rule in RULES, -1 if none) and ``_qvalue``
    (float64: the failing statistic) computed from the raw ``_text``."""
    out = df.copy(deep=False)
    n = len(df)
    failed = np.full(n, -1, np.int16)
    value = np.zeros(n, np.float64)
    if n and rules:
        offsets, data = arrow_buffers(df["_text"].array._pa_array)
        stats = quality_stats(offsets, data, padded_words(data))
        for r, _, col, op, limit in reversed(rules):  # the first rule in order wins
            bad = stats[:, col] < limit if op == "<" else stats[:, col] > limit
            failed[bad] = r
            value[bad] = stats[bad, col]
    out["_qrule"] = failed
    out["_qvalue"] = value
    out.attrs = dict(df.attrs)
    return out


@dataclass
class QualityResult:
    rule: np.ndarray  # int16[n]: index into RULES of the failed rule, -1 when the document passed
    value: np.ndarray  # float64[n]: the failing statistic
    limits: dict  # config key -> limit

    @property
    def failed(self) -> np.ndarray:
        return self.rule >= 0

    def reasons(self, rows: np.ndarray) -> pa.Array:
        """``string[len(rows)]`` drop reasons of the failed ``rows``; each distinct (rule, value) is formatted
        once (a rule's values repeat: word counts, ratios of short texts)."""
        pairs = np.empty(len(rows), dtype=[("rule", np.int16), ("value", np.float64)])
        pairs["rule"], pairs["value"] = self.rule[rows], self.value[rows]
        distinct, index = np.unique(pairs, return_inverse=True)
        texts = []
        for rule, value in distinct.tolist():
            name, _, key, op = RULES[rule]
            texts.append(f"quality: {name} {value:.4g} {op} {key} {self.limits[key]:g}")
        return pa.array(texts, pa.string()).take(pa.array(index.reshape(-1).astype(np.int64)))

    def stats(self) -> dict:
        counts: dict[str, int] = {}
        for r in self.rule[self.rule >= 0]:
            name, _, key, _ = RULES[r]
            counts[key] = counts.get(key, 0) + 1
        return {"dropped": int(self.failed.sum()), "by_rule": dict(sorted(counts.items()))}


class QualityGate:
    """``run(ddf) -> ddf`` adds the rule columns per partition (fused with reading): ``_qrule`` and
    ``_qvalue``, which a run's table keeps in its partitions' states (``qrule``, ``qvalue``)."""

    name = "quality"

    def __init__(self, cfg: QualityConfig):
        self.cfg = cfg
        self.rules = active_rules(cfg) if cfg.enabled else []

    def run(self, ddf):
        meta = ddf._meta.assign(_qrule=np.array([], np.int16), _qvalue=np.array([], np.float64))
        return ddf.map_partitions(quality_partition, self.rules, meta=meta)

    def limits(self) -> dict:
        """config key -> limit of every rule (``QualityResult.limits``)."""
        return {key: getattr(self.cfg, key) for _, _, key, _ in RULES}
