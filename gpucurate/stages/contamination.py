"""Contamination gate: documents that share word n-grams with benchmark items.

Benchmarks are files (JSON Lines or Parquet, local or fsspec, or a directory of them) whose items are
the configured fields joined by newlines. Items and documents are normalized the same way (NFKC,
lowercase, punctuation removed, whitespace collapsed) and cut into word n-grams (``contamination.ngram``,
default 13; an item with fewer words is one n-gram of all its words). Item n-gram hashes form a sorted
table built once; every document's n-grams are looked up in it in compiled code
(``kernels.gates.ngram_matches``), during the same partition pass as the quality gate.

A document is contaminated by an item when it contains at least ``min_matches`` distinct n-grams of that
item, not counting n-grams found in more than ``max_doc_frequency`` documents (too common to be
evidence). Every document is checked, also those the dedup stages drop. ``action``: ``flag`` only
annotates, ``drop`` sets ``keep = false``, ``strip`` removes each matched span plus ``strip_window``
characters on each side (the GPT-3 recipe) into the ``stripped_text`` column and drops the document
only when fewer than ``strip_min_chars`` characters remain.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import PurePosixPath

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa

from ..config import Benchmark, ContaminationConfig, parse_benchmarks
from ..errors import InputError
from ..engine.executor import Executor
from ..engine.partitions import Carried
from ..engine.tasks import delayed
from ..kernels.gates import ngram_hashes, ngram_matches
from ..kernels.hashing import padded_words
from .cuts import edited, merge_ranges
from .normalize import arrow_buffers, normalize
from .patterns import MATCH_NORMALIZE, RuleMatches, RuleSet, located_ngrams, mask, redaction_token

#: characters of matched text kept per hit in the report
REPORT_TEXT_CHARS = 1000
#: samples of each pattern, term or PII rule in the report (the first ones in input order)
REPORT_RULE_SAMPLES = 20
#: the type of the ``contamination_spans`` annotation: every match of a pattern, term or PII rule (items
#: named as Parquet's lists name them, as ``cuts.RANGES``, so a part file rewritten keeps its bytes)
SPANS_TYPE = pa.list_(pa.field("element", pa.struct([("rule", pa.string()), ("action", pa.string()),
                                                     ("start", pa.int64()), ("end", pa.int64())])))


def _benchmark_files(path: str) -> list[tuple[object, str]]:
    import fsspec
    fs, root = fsspec.core.url_to_fs(path)
    if not fs.exists(root):
        raise InputError("benchmark file not found", path)
    if fs.isdir(root):
        files = sorted(f for f in fs.find(root) if any(f.endswith(ext) for ext in (
            ".jsonl", ".json", ".ndjson", ".jsonl.gz", ".jsonl.zst", ".parquet")))
        if not files:
            raise InputError("no .jsonl or .parquet benchmark files in directory", path)
        return [(fs, f) for f in files]
    return [(fs, root)]


def load_items(bench: Benchmark) -> tuple[list[str], list[str]]:
    """``(item ids, item texts)``; a missing or non-text field is an error naming the file and line/row."""
    ids, texts = [], []
    for fs, f in _benchmark_files(bench.path):
        if f.endswith(".parquet"):
            import pyarrow.parquet as pq
            with fs.open(f, "rb") as fh:
                table = pq.read_table(fh)
            wanted = bench.fields + ((bench.id_field,) if bench.id_field else ())
            missing = [c for c in wanted if c not in table.column_names]
            if missing:
                raise InputError(f"benchmark {bench.name}: missing field", f, field=missing[0])
            records = table.to_pylist()
            first = 0
        else:
            with fs.open(f, "rb", compression="infer") as fh:
                lines = fh.read().splitlines()
            records = []
            for line_no, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    rec = orjson.loads(line)
                except orjson.JSONDecodeError as exc:
                    raise InputError(f"benchmark {bench.name}: invalid JSON ({exc})", f, line_no) from None
                records.append((line_no, rec))
            first = None
        for r, rec in enumerate(records):
            line_no, rec = rec if first is None else (r, rec)
            parts = []
            for field_name in bench.fields:
                value = rec.get(field_name) if isinstance(rec, dict) else None
                if not isinstance(value, str):
                    what = "missing field" if not isinstance(rec, dict) or field_name not in rec else "non-text field"
                    raise InputError(f"benchmark {bench.name}: {what}", f, line_no, field=field_name)
                parts.append(value)
            texts.append("\n".join(parts))
            item_id = rec.get(bench.id_field) if bench.id_field else None
            ids.append(str(item_id) if item_id is not None else f"{PurePosixPath(f).name}:{line_no}")
    return ids, texts


@dataclass
class ItemIndex:
    """The lookup structure: sorted n-gram hashes of every benchmark item."""

    benchmarks: list[Benchmark]
    item_benchmark: np.ndarray  # int64[I] benchmark index of each item
    item_ids: list[str]
    items_per_benchmark: list[int]
    table: np.ndarray  # uint64[E] sorted n-gram hashes (a hash of several items appears once per item)
    entry_item: np.ndarray  # int64[E] item of each entry
    lengths: np.ndarray  # int64[L] distinct n-gram lengths (n, and shorter whole items)

    @classmethod
    def build(cls, benchmarks: list[Benchmark], n: int) -> "ItemIndex":
        item_bench, item_ids, texts, counts = [], [], [], []
        for b, bench in enumerate(benchmarks):
            ids, bench_texts = load_items(bench)
            item_bench += [b] * len(ids)
            item_ids += ids
            texts += bench_texts
            counts.append(len(ids))
        offsets, data = arrow_buffers(normalize(pa.array(texts, pa.large_string()), MATCH_NORMALIZE))
        item, hashes, length = ngram_hashes(offsets, data, padded_words(data), n)
        order = np.lexsort((item, hashes))
        return cls(benchmarks, np.array(item_bench, np.int64), item_ids, counts, hashes[order], item[order],
                   np.unique(length).astype(np.int64) if len(length) else np.array([n], np.int64))

    def entries(self, first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Expand table positions (first entry of a hash) to every entry with that hash:
        ``(index into first, entry)``."""
        last = np.searchsorted(self.table, self.table[first], side="right")
        count = last - first
        which = np.repeat(np.arange(len(first)), count)
        entry = np.repeat(first, count) + (np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count))
        return which, entry


def contamination_partition(df: pd.DataFrame, index: ItemIndex | None, keep_raw: bool, kernels=None,
                            rules: RuleSet | None = None) -> pd.DataFrame:
    """Look up every document's n-grams and rules; the matches go to ``df.attrs["contamination"]``: ``(rows,
    table positions, span starts, span ends)`` of the benchmark n-grams (byte spans within the
    match-normalized text), the normalized texts of matched rows (and their raw texts when ``keep_raw``),
    the rules' ``RuleMatches`` (byte spans of the original text) with the raw texts of their rows, and the
    seconds spent."""
    start = time.perf_counter()
    out = df.copy(deep=False)
    out.attrs = dict(df.attrs)
    raw = pa.chunked_array(df["_text"].array._pa_array).combine_chunks() if len(df) else pa.array([], pa.large_string())
    found = {"rows": np.empty(0, np.int64), "where": np.empty(0, np.int64), "start": np.empty(0, np.int64),
             "end": np.empty(0, np.int64), "texts": {}, "raw": {}}
    if index is not None:
        norm = normalize(raw, MATCH_NORMALIZE)
        offsets, data = arrow_buffers(norm)
        match = kernels.ngram_matches if kernels is not None else ngram_matches
        rows, where, s, e = match(offsets, data, padded_words(data), index.lengths, index.table)
        matched = np.unique(rows)
        found.update(rows=rows, where=where, start=s - offsets[rows], end=e - offsets[rows])
        if len(matched):
            found["texts"] = dict(zip(matched.tolist(), norm.take(pa.array(matched)).to_pylist()))
            if keep_raw:
                found["raw"] = dict(zip(matched.tolist(), raw.take(pa.array(matched)).to_pylist()))
    found["rules"] = rules.match(raw) if rules is not None else RuleMatches.empty()
    ruled = np.unique(found["rules"].rows)
    found["rule_raw"] = dict(zip(ruled.tolist(), raw.take(pa.array(ruled)).to_pylist())) if len(ruled) else {}
    found["seconds"] = time.perf_counter() - start
    out.attrs["contamination"] = Carried(found)
    return out


@dataclass
class ContaminationResult:
    contaminated: np.ndarray  # bool[n]
    label: np.ndarray  # object[n]: "bench:item (k n-grams)[; ...]" or None
    stripped: np.ndarray  # object[n]: text after strip, or None
    drop: np.ndarray  # bool[n]: dropped by the gate (action drop, or strip leaving too little)
    drop_reason: np.ndarray  # object[n]
    report: dict
    stats: dict
    redacted: np.ndarray | None = None  # object[n]: text after strip and redaction, or None
    spans: np.ndarray | None = None  # object[n]: the rules' matches (SPANS_TYPE items), or None

    def gates(self) -> tuple:
        """What ``annotate.Gates.contamination`` holds, in ``CONTAMINATION_COLUMNS`` order."""
        n = len(self.contaminated)
        none = np.full(n, None, dtype=object)
        return (self.contaminated, self.label, self.stripped, self.drop, self.drop_reason,
                none if self.redacted is None else self.redacted, none if self.spans is None else self.spans)


class ContaminationGate:
    """``run(ddf) -> ddf`` (matches in partition attrs, fused with reading), ``collect(ddf, table,
    executor) -> ContaminationResult``."""

    name = "contamination"

    def __init__(self, cfg: ContaminationConfig, backend=None):
        self.cfg, self.backend = cfg, backend
        self.benchmarks = parse_benchmarks(cfg.benchmarks)
        t0 = time.perf_counter()
        self.index = ItemIndex.build(self.benchmarks, cfg.ngram) if self.benchmarks else None
        self.rules = RuleSet(cfg) if cfg.patterns or cfg.terms or cfg.pii else None
        self.build_seconds = time.perf_counter() - t0

    @property
    def enabled(self) -> bool:
        return self.index is not None or self.rules is not None

    def run(self, ddf):
        kernels = self.backend.gates if self.backend is not None else None
        return ddf.map_partitions(contamination_partition, self.index, self.cfg.action == "strip", kernels,
                                  self.rules, meta=ddf._meta)

    def collect(self, ddf, table, executor: Executor) -> ContaminationResult:
        """The gate's decisions for a table held in this process (``DocTable``), as arrays in table order."""
        found, report, stats = self.decide(ddf, table.part_offsets, executor, lambda rows: table.ids[rows])
        n = table.n
        contaminated = np.zeros(n, bool)
        drop = np.zeros(n, bool)
        label, stripped, reason, redacted, spans = (np.full(n, None, dtype=object) for _ in range(5))
        for f in found:
            rows = f["rows"]
            contaminated[rows] = True
            drop[rows] = f["drop"]
            for column, key in ((label, "label"), (stripped, "stripped"), (reason, "reason"),
                                (redacted, "redacted"), (spans, "spans")):
                column[rows] = f[key]
        return ContaminationResult(contaminated, label, stripped, drop, reason, report, stats, redacted, spans)

    def collect_parts(self, ddf, table, executor: Executor) -> tuple:
        """The gate's decisions for a run's ``DocParts``: ``(table with the CONTAMINATION_COLUMNS in its states,
        report, stats)``; this process holds the contaminated documents' results only."""
        found, report, stats = self.decide(ddf, table.part_offsets, executor,
                                           lambda rows: table.values_at(executor, "id", rows))
        return table.update(executor, _contamination_columns, "contamination: annotate", found), report, stats

    def decide(self, ddf, part_offsets: np.ndarray, executor: Executor, ids_of) -> tuple:
        """The gate's decisions, computed where the matches are: each partition counts the documents of its
        matched n-grams, the counts are summed pairwise up to one table of at most the index's size (for
        ``max_doc_frequency``), and each partition then finds its hits, labels and strips its documents.
        Returns per partition a dict of the contaminated rows' results, the report (document ids from
        ``ids_of(rows)``) and the stats; nothing per match or per clean document comes here."""
        cfg, index = self.cfg, self.index
        offs = part_offsets
        parts = ddf.to_delayed()
        common = np.empty(0, np.uint64)
        if index is not None and cfg.max_doc_frequency is not None and parts:
            counts = [delayed(_ngram_document_counts)(p, index.table) for p in parts]
            while len(counts) > 1:  # a tree: no task holds more than two tables of the index's size
                counts = [delayed(_add_counts)(*counts[k:k + 2]) for k in range(0, len(counts), 2)]
            hashes, docs = executor.compute(counts, "contamination: n-gram document counts")[0]
            common = hashes[docs > cfg.max_doc_frequency]
        found = executor.compute([delayed(_partition_hits)(p, int(offs[q]), index, self.rules, cfg, common)
                                  for q, p in enumerate(parts)], "contamination: hits")
        hits = pd.concat([f["hits"] for f in found], ignore_index=True) if found else _no_hits()
        report = self._report(hits, ids_of)
        if self.rules is not None:
            report["rules"] = self._rules_report(found, ids_of)
        seconds = sum(f["seconds"] for f in found)
        n = int(offs[-1])
        contaminated = sum(len(f["rows"]) for f in found)
        stats = {"benchmarks": [b.name for b in self.benchmarks],
                 "items": len(index.item_ids) if index is not None else 0,
                 "ngram": cfg.ngram, "action": cfg.action, "contaminated_documents": int(contaminated),
                 "dropped": int(sum(np.sum(f["drop"]) for f in found)),
                 "stripped": int(sum(x is not None for f in found for x in f["stripped"])),
                 "redacted": int(sum(x is not None for f in found for x in f["redacted"])),
                 "ignored_common_ngrams": len(common), "index_build_seconds": round(self.build_seconds, 4),
                 "gate_seconds": round(seconds, 4),
                 "docs_per_s": round(n / seconds, 1) if seconds > 0 else None}
        if self.rules is not None:
            stats["rules"] = {name: {k: r[k] for k in ("action", "documents", "matches")}
                              for name, r in report["rules"].items()}
        return found, report, stats

    def _rules_report(self, found: list, ids_of) -> dict:
        """Per rule: what it is, its action, the documents it hit, its matches and its first samples."""
        out = {}
        samples = pd.concat([f["rule_samples"] for f in found], ignore_index=True) if found else None
        for k, rule in enumerate(self.rules.rules):
            mine = samples[samples.rule == k].head(REPORT_RULE_SAMPLES) if samples is not None else samples
            ids = ids_of(mine.row.to_numpy(np.int64)) if mine is not None and len(mine) else []
            out[rule.name] = {
                "kind": rule.kind, "source": rule.source, "action": rule.action,
                "documents": int(sum(f["rule_documents"][k] for f in found)),
                "matches": int(sum(f["rule_matches"][k] for f in found)),
                "samples": [{"doc_id": _plain(d), "start": int(a), "end": int(b), "text": t}
                            for d, a, b, t in zip(ids, mine.start, mine.end, mine.text)] if len(ids) else []}
        return out

    def _report(self, hits: pd.DataFrame, ids_of) -> dict:
        index = self.index
        out = {}
        hit_ids = ids_of(hits.row.to_numpy(np.int64)) if len(hits) else []
        bench_of_hit = index.item_benchmark[hits.item.to_numpy()] if len(hits) else np.empty(0, np.int64)
        for b, bench in enumerate(self.benchmarks):
            mine = hits[bench_of_hit == b]
            out[bench.name] = {
                "path": bench.path, "fields": list(bench.fields), "items": index.items_per_benchmark[b],
                "items_found": int(mine.item.nunique()), "contaminated_documents": int(mine.row.nunique()),
                "hits": [{"doc_id": _plain(hit_ids[h]), "item_id": index.item_ids[i], "matches": int(k),
                          "matched_text": t} for h, i, k, t in zip(np.flatnonzero(bench_of_hit == b), mine.item,
                                                                   mine.matches, mine.text)],
            }
        return {"ngram": self.cfg.ngram, "min_matches": self.cfg.min_matches,
                "max_doc_frequency": self.cfg.max_doc_frequency, "action": self.cfg.action,
                "report_samples": self.cfg.report_samples, "benchmarks": out}


#: the state column of the byte ranges a strip removed (``strip_spans``; into ``removed_spans``)
STRIP_CUTS_COLUMN = "contamination_cuts"
#: the gate's per-document columns in a run's states (``DocParts``), in ``annotate.Gates.contamination`` order
CONTAMINATION_COLUMNS = ("contaminated", "contamination_label", "contamination_stripped", "contamination_drop",
                         "contamination_reason", "contamination_redacted", "contamination_spans")
_FOUND_KEYS = ("label", "stripped", "drop", "reason", "redacted", "spans")


def _contamination_columns(state: dict, first_row: int, found: dict) -> dict:
    m = len(state["ord"])
    local = found["rows"] - first_row
    columns = {name: np.full(m, None, object) for name in CONTAMINATION_COLUMNS + (STRIP_CUTS_COLUMN,)}
    columns["contaminated"], columns["contamination_drop"] = np.zeros(m, bool), np.zeros(m, bool)
    columns["contaminated"][local] = True
    for name, key in zip(CONTAMINATION_COLUMNS[1:], _FOUND_KEYS):
        columns[name][local] = found[key]
    columns[STRIP_CUTS_COLUMN][local] = found["cuts"]
    return columns


def _no_hits() -> pd.DataFrame:
    return pd.DataFrame({"row": pd.Series([], dtype=np.int64), "item": pd.Series([], dtype=np.int64),
                         "matches": pd.Series([], dtype=np.int64), "text": pd.Series([], dtype=object)})


def _ngram_document_counts(df: pd.DataFrame, table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(hashes, documents)``: each matched n-gram hash of the partition (sorted) and how many of its
    documents contain it."""
    d = df.attrs["contamination"]
    pair = pd.DataFrame({"row": d["rows"], "hash": table[d["where"]]}).drop_duplicates()
    hashes, docs = np.unique(pair["hash"].to_numpy(np.uint64), return_counts=True)
    return hashes, docs.astype(np.int64)


def _add_counts(a: tuple, b: tuple | None = None) -> tuple[np.ndarray, np.ndarray]:
    if b is None:
        return a
    hashes = np.concatenate([a[0], b[0]])
    docs = np.concatenate([a[1], b[1]])
    order = np.argsort(hashes, kind="stable")
    hashes, docs = hashes[order], docs[order]
    starts = np.flatnonzero(np.r_[True, hashes[1:] != hashes[:-1]]) if len(hashes) else np.zeros(0, np.int64)
    return hashes[starts], np.add.reduceat(docs, starts) if len(starts) else docs


def _partition_hits(df: pd.DataFrame, first_row: int, index: ItemIndex | None, rules: RuleSet | None,
                    cfg: ContaminationConfig, common: np.ndarray) -> dict:
    """One partition's contaminated documents (table rows, ascending) with their labels, stripped and
    redacted texts, rule spans, drops and reasons; its benchmark report hits ``(row, item, matches, text)``
    in (row, item) order, and per rule its documents, matches and first samples."""
    d = df.attrs["contamination"]
    bench = _benchmark_hits(d, index, cfg, common) if index is not None else {}
    matches: RuleMatches = d["rules"]
    n_rules = len(rules) if rules is not None else 0
    local = np.union1d(np.fromiter(bench, np.int64, len(bench)), matches.rows).astype(np.int64)
    k = len(local)
    label, stripped, cuts, reason, redacted, spans = (np.full(k, None, dtype=object) for _ in range(6))
    drop = np.zeros(k, bool)
    at = np.searchsorted(matches.rows, local)
    upto = np.searchsorted(matches.rows, local, side="right")
    for i, r in enumerate(local.tolist()):
        b = bench.get(r)
        mine = slice(at[i], upto[i])
        rule_of, starts, ends = matches.rule[mine], matches.start[mine], matches.end[mine]
        parts = [b["label"]] if b else []
        why = [f"contaminated: {b['label']}"] if b and cfg.action == "drop" else []
        strip_cuts = list(b["cuts"]) if b and b.get("cuts") else []
        redactions = []
        for q in np.unique(rule_of).tolist():
            rule = rules.rules[q]
            sel = rule_of == q
            parts.append(f"{rule.kind}:{rule.name} ({int(sel.sum())} matches)")
            if rule.action == "drop":
                why.append(f"{rule.kind} {rule.name}: {int(sel.sum())} matches")
            elif rule.action == "strip":
                strip_cuts += [x for a, e in zip(starts[sel], ends[sel]) for x in (int(a), int(e))]
            elif rule.action == "redact":
                redactions += [(int(a), int(e), redaction_token(rule.name)) for a, e in zip(starts[sel], ends[sel])]
        label[i] = "; ".join(parts)
        if len(rule_of):
            spans[i] = [{"rule": rules.rules[q].name, "action": rules.rules[q].action, "start": int(a),
                         "end": int(e)} for q, a, e in zip(rule_of.tolist(), starts.tolist(), ends.tolist())]
        if b and b.get("unlocated"):
            why.append(f"contaminated: {b['label']}; matched span not located for strip")
        raw = d["raw"].get(r) if r in d["raw"] else d["rule_raw"].get(r)
        strip_cuts = merge_ranges(strip_cuts)
        if strip_cuts and not why:
            text = edited(raw, strip_cuts, [])
            # the minimum is the benchmark strip's (GPT-3's recipe): removing a phone number drops nothing
            if b and b.get("cuts") and len(text.strip()) < cfg.strip_min_chars:
                why.append(f"contaminated: {label[i]}; {len(text.strip())} characters left after strip "
                           f"< strip_min_chars {cfg.strip_min_chars}")
            else:
                stripped[i], cuts[i] = text, strip_cuts
        if redactions and not why:
            redacted[i] = edited(raw, strip_cuts or [], redactions)
        if why:
            drop[i] = True
            reason[i] = "; ".join(why)
    rule_documents = np.zeros(n_rules, np.int64)
    rule_matches = np.bincount(matches.rule, minlength=n_rules).astype(np.int64)
    if len(matches.rows):
        pairs = np.unique(np.stack([matches.rows, matches.rule]), axis=1)
        rule_documents = np.bincount(pairs[1], minlength=n_rules).astype(np.int64)
    return {"rows": first_row + local, "label": label, "stripped": stripped, "cuts": cuts, "drop": drop,
            "reason": reason, "redacted": redacted, "spans": spans,
            "hits": _bench_report(d, bench, first_row), "rule_samples": _rule_samples(d, matches, first_row, cfg),
            "rule_documents": rule_documents, "rule_matches": rule_matches, "seconds": d["seconds"]}


def _benchmark_hits(d: dict, index: ItemIndex, cfg: ContaminationConfig, common: np.ndarray) -> dict:
    """Per contaminated row of the partition: its label, its report hits and, with ``strip``, the byte
    ranges to cut (or ``unlocated``)."""
    rows, where, starts, ends = (np.asarray(d[k], np.int64) for k in ("rows", "where", "start", "end"))
    hashes = index.table[where]
    use = ~np.isin(hashes, common) if len(common) else np.ones(len(rows), bool)
    which, entry = index.entries(where[use])
    m = pd.DataFrame({"row": rows[use][which], "item": index.entry_item[entry], "hash": hashes[use][which],
                      "start": starts[use][which], "end": ends[use][which]})
    per_item = m.groupby(["row", "item"]).agg(matches=("hash", "nunique"), start=("start", "min"),
                                              end=("end", "max")).reset_index()
    hits = per_item[per_item.matches >= cfg.min_matches].sort_values(["row", "item"], kind="stable")
    out = {}
    for r, group in hits.groupby("row", sort=True):
        out[int(r)] = {"label": "; ".join(f"{index.benchmarks[index.item_benchmark[i]].name}:{index.item_ids[i]} "
                                          f"({k} n-grams)" for i, k in zip(group.item, group.matches)),
                       "hits": group}
    if cfg.action == "strip" and out:
        counted = m.merge(hits[["row", "item"]], on=["row", "item"])  # n-grams of the items that count
        for r, g in counted.groupby("row"):
            _, removed, ranges = strip_spans(d["raw"][int(r)], np.unique(g.hash.to_numpy()), index.lengths,
                                             cfg.strip_window)
            out[int(r)]["cuts"] = ranges
            out[int(r)]["unlocated"] = removed == 0
    return out


def _bench_report(d: dict, bench: dict, first_row: int) -> pd.DataFrame:
    if not bench:
        return _no_hits()
    hits = pd.concat([b["hits"] for b in bench.values()], ignore_index=True)
    texts = d["texts"]
    return pd.DataFrame({"row": first_row + hits.row.to_numpy(np.int64), "item": hits.item.to_numpy(np.int64),
                         "matches": hits.matches.to_numpy(np.int64),
                         "text": [texts[r].encode("utf-8")[s:e].decode("utf-8", "replace")[:REPORT_TEXT_CHARS]
                                  for r, s, e in zip(hits.row, hits.start, hits.end)]})


def _rule_samples(d: dict, matches: RuleMatches, first_row: int, cfg: ContaminationConfig) -> pd.DataFrame:
    """The partition's first ``REPORT_RULE_SAMPLES`` matches of each rule, their text masked unless
    ``report_samples: full``."""
    frame = pd.DataFrame({"row": matches.rows, "rule": matches.rule, "start": matches.start, "end": matches.end})
    frame = frame.groupby("rule", sort=False).head(REPORT_RULE_SAMPLES)
    show = (lambda t: t) if cfg.report_samples == "full" else mask
    frame["text"] = [show(d["rule_raw"][r].encode("utf-8")[a:b].decode("utf-8", "replace")[:REPORT_TEXT_CHARS])
                     for r, a, b in zip(frame.row.tolist(), frame.start.tolist(), frame.end.tolist())]
    frame["row"] = frame["row"].astype(np.int64) + first_row
    return frame


def _plain(v):
    return int(v) if isinstance(v, (np.integer,)) else v


def strip_spans(raw: str, table: np.ndarray, lengths: np.ndarray, window: int) -> tuple[str, int, list]:
    """``raw`` without every span whose n-gram hash is in ``table``, widened by ``window`` characters on
    each side. Returns ``(text, number of spans removed, byte ranges)``: the ranges of ``raw``'s UTF-8
    bytes that went, flat ``[s0, e0, ...]`` (for ``removed_spans``).

    The n-grams are found and located in ``raw`` by ``patterns.located_ngrams``.
    """
    _, first, last, byte_at = located_ngrams(raw, table, lengths)
    if len(first) == 0:
        return raw, 0, []
    cut = np.zeros(len(raw) + 1, np.int64)
    for a, b in zip(first.tolist(), last.tolist()):
        cut[max(0, a - window)] += 1
        cut[min(len(raw), b + 1 + window)] -= 1
    covered = np.cumsum(cut)[:len(raw)] > 0
    edges = np.flatnonzero(np.diff(np.concatenate(([0], covered.astype(np.int8), [0]))))
    return "".join(ch for ch, c in zip(raw, covered) if not c), len(first), byte_at[edges].tolist()

