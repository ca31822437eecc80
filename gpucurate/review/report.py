"""``report.html``: a self-contained human report of a finished run (plots drawn as inline SVG).

Sections: the funnel of documents per stage, cluster sizes, similarity histograms per method with the
threshold marked, the largest clusters with sample texts, contamination hits, timings and parameters.
Written by every run and by ``python -m gpucurate report --run DIR``; it reads only the output directory.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from ..config import run_annotation_prefix
from ..errors import InputError
from ..io.writer import iter_run_table, read_run_json, read_run_table
from .samples import edge_thresholds, texts_of

SAMPLE_CHARS = 300


#: fonts for Latin, Cyrillic, Greek and the CJK scripts (samples may be Korean, Chinese or Japanese): the system's
#: UI font first, then the usual CJK families of Linux, macOS and Windows, then whatever sans-serif there is
FONT_STACK = ('system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", "Noto Sans CJK SC", "Noto Sans CJK KR", '
              '"Noto Sans CJK JP", "Source Han Sans SC", "PingFang SC", "Hiragino Sans", "Apple SD Gothic Neo", '
              '"Microsoft YaHei", "Malgun Gothic", "Yu Gothic", sans-serif')
#: the charts' font size, and the most a character of a tick label can take at it (digits, ',' and '.' take
#: less): what keeps two labels apart
FONT_PX, CHAR_PX = 11, 7.0


def _svg_histogram(counts: np.ndarray, edges: np.ndarray, xlabel: str, ylabel: str, log: bool = False,
                   marker: float | None = None, marker_label: str = "") -> str:
    """An inline SVG bar chart of ``counts[b]`` over ``edges[b]:edges[b + 1]`` (both axes log10 when ``log``),
    with an optional dashed vertical line at ``marker``. Drawn by hand: a plotting library costs a second
    of import for two small charts."""
    width, height, left, bottom, top, right = 650, 300, 70, 45, 15, 15
    pw, ph = width - left - right, height - top - bottom
    tx = np.log10 if log else (lambda v: np.asarray(v, dtype=np.float64))
    x0, x1 = float(tx(edges[0])), float(tx(edges[-1]))
    y_max = float(np.log10(counts.max()) + 0.1) if log else float(counts.max()) * 1.05
    y_max = max(y_max, 1e-9)

    def px(v):
        return left + (float(tx(v)) - x0) / (x1 - x0 or 1.0) * pw

    def py(c):
        c = (np.log10(c) + 0.1 if log else c) if c > 0 else 0.0
        return top + ph - c / y_max * ph

    font = html.escape(FONT_STACK)
    out = [f'<svg role="img" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="{font}" font-size="{FONT_PX}">',
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>']
    for c, a, b in zip(counts, edges[:-1], edges[1:]):
        if c > 0:
            y = py(c)
            out.append(f'<rect x="{px(a):.1f}" y="{y:.1f}" width="{max(px(b) - px(a) - 0.5, 0.5):.1f}" '
                       f'height="{top + ph - y:.1f}" fill="#4c72b0"><title>{_axis_label(a)}-{_axis_label(b)}: '
                       f'{int(c):,}</title></rect>')
    for x, label in _x_ticks(edges, px):
        out.append(f'<text class="x-tick" x="{x:.1f}" y="{top + ph + 15}" text-anchor="middle">{label}</text>')
    for c in ([10 ** k for k in range(int(y_max) + 1)] if log else _count_ticks(int(counts.max()))):
        if c <= counts.max():
            out.append(f'<text x="{left - 5}" y="{py(c) + 4:.1f}" text-anchor="end">{_fmt(int(c))}</text>')
    if marker is not None:
        out.append(f'<line x1="{px(marker):.1f}" x2="{px(marker):.1f}" y1="{top}" y2="{top + ph}" stroke="red" '
                   f'stroke-dasharray="5,3"/><text x="{px(marker) - 4:.1f}" y="{top + 12}" text-anchor="end" '
                   f'fill="red">{html.escape(marker_label)}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 8}" text-anchor="middle">{html.escape(xlabel)}</text>'
               f'<text transform="translate(14,{top + ph / 2}) rotate(-90)" text-anchor="middle">'
               f'{html.escape(ylabel)}</text></svg>')
    return "".join(out)


def _axis_label(v) -> str:
    """A bin edge as an axis shows it: whole numbers (cluster sizes) without decimals."""
    v = float(v)
    return _fmt(int(v)) if v.is_integer() else _fmt(v)


def _x_ticks(edges: np.ndarray, px) -> list[tuple[float, str]]:
    """``(x, label)`` of the x axis: about six bin edges and the last one, leaving out any whose label would
    touch its right neighbour's (the last edge, the end of the range, always stays)."""
    chosen = list(dict.fromkeys([*edges[:: max(1, len(edges) // 6)], edges[-1]]))
    ticks = [(px(v), _axis_label(v)) for v in chosen]
    kept = [ticks[-1]]
    for x, label in reversed(ticks[:-1]):
        if kept[0][0] - x >= (len(label) + len(kept[0][1])) / 2 * CHAR_PX + CHAR_PX:
            kept.insert(0, (x, label))
    return kept


def _count_ticks(largest: int) -> list[int]:
    """Whole-number ticks of a count axis from 0 to ``largest``: about five, 1, 2 or 5 times a power of ten apart."""
    raw = max(largest / 4, 1)
    power = 10 ** int(np.floor(np.log10(raw)))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    return list(range(0, largest + 1, int(step)))


def _table(rows: list[dict], columns: list[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(r.get(c)))}</td>" for c in columns) + "</tr>"
                   for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 100 else f"{v:,.0f}"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    return str(v)


def _funnel(summary: dict) -> list[dict]:
    st = summary["stages"]
    rows = [{"stage": "input", "dropped": 0, "remaining": st["input"]["documents"]}]
    for name, key in (("quality", "dropped"), ("exact", "duplicates"), ("fuzzy", "duplicates"),
                      ("semantic", "duplicates"), ("contamination", "dropped"), ("paragraphs", "dropped"),
                      ("substrings", "dropped")):
        s = st.get(name, {})
        if s.get("enabled", name in ("exact",)):
            rows.append({"stage": name, "dropped": s.get(key, 0), "remaining": s.get("remaining")})
    return rows


def _edge_histograms(path: Path) -> dict:
    """method -> (pairs, pairs at or above the threshold, counts, bin edges) of ``edges.parquet``'s scores in
    50 bins over each method's range (``np.histogram``'s bins), read a row group at a time."""
    def batches():  # per batch: method -> (scores, above_threshold) as NumPy arrays
        for batch in iter_run_table(path, columns=["method", "score", "above_threshold"]):
            method = batch.column(0)
            for m in pc.unique(method).to_pylist():
                rows = pc.equal(method, m)
                yield (m, batch.column(1).filter(rows).to_numpy(),
                       batch.column(2).filter(rows).to_numpy(zero_copy_only=False))
    ranges: dict = {}
    for method, score, _ in batches():
        low, high = ranges.get(method, (np.inf, -np.inf))
        ranges[method] = (min(low, score.min()), max(high, score.max()))
    out = {m: [0, 0, np.zeros(50, np.int64), np.histogram_bin_edges([], bins=50, range=_span(*r))]
           for m, r in ranges.items()}
    for method, score, above in batches():
        h = out[method]
        h[0] += len(score)
        h[1] += int(above.sum())
        # equal-width bins given as (count, range): NumPy's arithmetic path, which counts as binary search over
        # those same edges does, without sorting the scores
        h[2] += np.histogram(score, bins=50, range=_span(*ranges[method]))[0]
    return {m: tuple(h) for m, h in out.items()}


def _span(low: float, high: float) -> tuple:
    """``np.histogram``'s range for data from ``low`` to ``high`` (one value: half a unit either side)."""
    return (low - 0.5, high + 0.5) if low == high else (low, high)


REPORT_COLUMNS = ["doc_id", "dedup_id", "cluster_size", "is_canonical", "drop_stage"]
TOP_CLUSTERS, MEMBERS_SHOWN = 5, 2


def clusters_of_part(ann: pd.DataFrame) -> tuple:
    """First look at one partition's annotations (``REPORT_COLUMNS``): ``(clusters of 2 or more, the largest
    size, the canonical rows of its TOP_CLUSTERS largest clusters)``."""
    clusters = ann[ann.is_canonical & (ann.cluster_size > 1)]
    return (len(clusters), int(clusters.cluster_size.max()) if len(clusters) else 0,
            clusters.nlargest(TOP_CLUSTERS, "cluster_size", keep="first"))


def size_bins(largest: int) -> np.ndarray:
    """The bins of the cluster-size histogram."""
    return np.unique(np.geomspace(2, max(3, largest + 1), 30).astype(int))


def members_of_part(ann: pd.DataFrame, bins: np.ndarray | None, top_ids: list) -> tuple:
    """Second look at one partition's annotations: ``(cluster-size counts over bins, the first MEMBERS_SHOWN
    members of each cluster in top_ids)``."""
    clusters = ann[ann.is_canonical & (ann.cluster_size > 1)]
    counts = np.histogram(clusters.cluster_size.to_numpy(), bins=bins)[0] if bins is not None else None
    members = ann[ann.dedup_id.isin(top_ids) & ~ann.is_canonical]
    return counts, members.groupby("dedup_id").head(MEMBERS_SHOWN)


@dataclass
class ClusterSamples:
    """What report.html shows of the clusters: their number, largest size, size histogram (``counts`` over
    ``bins``), the ``top`` canonical rows, their first ``members`` and the ``texts`` (doc_id -> text) of both."""
    n_clusters: int
    largest: int
    bins: np.ndarray | None
    counts: np.ndarray | None
    top: pd.DataFrame
    members: pd.DataFrame
    texts: dict

    def shown_ids(self) -> set:
        """The doc_ids whose texts the report shows."""
        return set(self.top.doc_id) | set(self.members.doc_id) if len(self.top) else set()


def cluster_samples(first: list, second) -> ClusterSamples:
    """``ClusterSamples`` (without texts: ``shown_ids`` says whose) from each partition's ``clusters_of_part``
    (``first``, in order) and ``second(bins, top_ids)``, each partition's ``members_of_part``. The run
    computes them where its partitions are; ``report --run`` from the part files."""
    n_clusters, largest = sum(f[0] for f in first), max((f[1] for f in first), default=0)
    top = pd.concat([f[2] for f in first], ignore_index=True).nlargest(TOP_CLUSTERS, "cluster_size", keep="first") \
        if first else pd.DataFrame()
    bins = size_bins(largest) if n_clusters else None
    top_ids = top.doc_id.tolist() if len(top) else []
    seconds = second(bins, top_ids) if n_clusters else []
    counts = np.sum([c for c, _ in seconds], axis=0) if bins is not None else None
    members = pd.concat([m for _, m in seconds], ignore_index=True).groupby("dedup_id").head(MEMBERS_SHOWN) \
        if top_ids else pd.DataFrame()
    return ClusterSamples(n_clusters, largest, bins, counts, top, members, {})


def _samples_from_files(run: Path, cfg: dict) -> ClusterSamples:
    files = sorted((run / "annotations").glob("part-*.parquet"))
    prefix = run_annotation_prefix(cfg)  # output.annotation_prefix of the run: the part files' column names

    def frames():  # one part file at a time: what is kept grows with the clusters, not with the documents
        for f in files:
            yield read_run_table(f, columns=[prefix + c for c in REPORT_COLUMNS]).rename_columns(
                REPORT_COLUMNS).to_pandas()
    samples = cluster_samples([clusters_of_part(a) for a in frames()],
                              lambda bins, top_ids: [members_of_part(a, bins, top_ids) for a in frames()])
    samples.texts = texts_of(run, samples.shown_ids(), "report")
    return samples


def build_report(run_dir: str | Path, samples: ClusterSamples | None = None) -> str:
    """report.html's text; ``samples``: the run's ``ClusterSamples`` (by default read from the part files)."""
    run = Path(run_dir)
    if not (run / "summary.json").is_file():
        raise InputError("not a finished gpucurate run (no summary.json)", str(run))
    summary = read_run_json(run / "summary.json")
    cfg = summary["config"]
    if samples is None:
        samples = _samples_from_files(run, cfg)
    parts = [f"<h1>gpucurate run: {summary['documents_in']:,} documents, {summary['documents_kept']:,} kept</h1>",
             f"<p>backend {html.escape(summary['backend'])}, {html.escape(summary['executor'])}, "
             f"{summary['wall_time_s']:.1f} s wall ({summary['docs_per_s'] or 0:,.0f} docs/s)</p>",
             "<h2>Documents per stage</h2>", _table(_funnel(summary), ["stage", "dropped", "remaining"])]

    quality = summary["stages"].get("quality", {})
    if quality.get("rules"):
        parts.append("<h2>Quality rules</h2>" + _quality_section(quality))

    parts.append("<h2>Cluster sizes</h2>")
    if samples.n_clusters:
        parts.append(f"<p>{samples.n_clusters:,} clusters of 2 or more documents; the largest has "
                     f"{samples.largest:,}.</p>"
                     + _svg_histogram(samples.counts, samples.bins, "documents per cluster", "clusters", log=True))
    else:
        parts.append("<p>No cluster has more than one document.</p>")

    parts.append("<h2>Similarity of candidate pairs</h2>")
    thresholds = edge_thresholds(cfg)
    histograms = _edge_histograms(run / "edges.parquet") if (run / "edges.parquet").is_file() else {}
    for method, (pairs, above, counts, bins) in sorted(histograms.items()):
        chart = _svg_histogram(counts, bins, f"{method} score", "pairs", marker=thresholds[method],
                               marker_label=f"threshold {thresholds[method]:.3g}")
        parts.append(f"<h3>{html.escape(method)}: {pairs:,} pairs, {above:,} at or above the threshold</h3>" + chart)
    if not histograms:
        parts.append("<p>No candidate pairs.</p>")

    parts.append("<h2>Largest clusters</h2>")
    top, members, texts = samples.top, samples.members, samples.texts
    if len(top):
        for row in top.itertuples():
            sample = [("canonical", row.doc_id)] + [(m.drop_stage, m.doc_id) for m in
                                                    members[members.dedup_id == row.doc_id].itertuples()]
            items = "".join(f"<li><b>{html.escape(str(d))}</b> ({html.escape(str(s))}): "
                            f"{html.escape(texts.get(d, '')[:SAMPLE_CHARS])}</li>" for s, d in sample)
            parts.append(f"<h3>{html.escape(str(row.doc_id))}: {row.cluster_size:,} documents</h3><ul>{items}</ul>")
    else:
        parts.append("<p>None.</p>")

    parts.append("<h2>Contamination</h2>")
    if (run / "contamination_report.json").is_file():
        rep = json.loads((run / "contamination_report.json").read_text())
        for name, b in rep["benchmarks"].items():
            parts.append(f"<h3>{html.escape(name)}: {b['items_found']:,} of {b['items']:,} items found in "
                         f"{b['contaminated_documents']:,} documents</h3>")
            parts.append(_table(b["hits"][:50], ["doc_id", "item_id", "matches", "matched_text"]))
        if rep.get("rules"):
            shown = "full" if rep.get("report_samples") == "full" else "masked"
            parts.append("<h3>Patterns, terms and PII</h3>" + _table(
                [{"rule": name, "kind": r["kind"], "action": r["action"], "documents": r["documents"],
                  "matches": r["matches"]} for name, r in rep["rules"].items()],
                ["rule", "kind", "action", "documents", "matches"]))
            for name, r in rep["rules"].items():
                if r["samples"]:
                    parts.append(f"<h4>{html.escape(name)}: first matches ({shown})</h4>"
                                 + _table(r["samples"][:10], ["doc_id", "start", "end", "text"]))
    else:
        parts.append("<p>No benchmarks, patterns, terms or PII presets configured.</p>")

    substrings = summary["stages"].get("substrings", {})
    if substrings.get("enabled"):
        parts.append("<h2>Repeated spans</h2>" + _substrings_section(substrings))

    parts.append("<h2>Timings (s)</h2>" + _table([{"step": k, "seconds": v} for k, v in summary["timings_s"].items()],
                                               ["step", "seconds"]))
    parts.append("<h2>Parameters</h2><pre>" + html.escape(json.dumps(cfg, indent=2)) + "</pre>")
    style = (f"body{{font-family:{FONT_STACK};max-width:960px;margin:2em auto;color:#222}}"
             "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.2em .6em;"
             "text-align:left;vertical-align:top}th{background:#eee}pre{background:#f6f6f6;padding:1em}"
             "li{margin:.3em 0}svg{max-width:100%;height:auto}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>gpucurate report</title>"
            f"<style>{style}</style></head><body>{''.join(parts)}</body></html>")


def _quality_section(stats: dict) -> str:
    """Each quality rule that ran: the documents it dropped, the histogram of its value with the limit
    marked, and the first texts it dropped."""
    rows = [{"rule": r["rule"], "from": r["source"], "fails when": r["fails_when"], "dropped": r["dropped"]}
            for r in stats["rules"]]
    out = [_table(rows, ["rule", "from", "fails when", "dropped"])]
    if stats.get("languages"):
        out.append("<p>Languages: " + html.escape(", ".join(f"{k} {v:,}" for k, v in stats["languages"].items()))
                   + "</p>")
    for r in stats["rules"]:
        h = r["histogram"]
        counts = np.asarray(h["counts"], dtype=np.int64)
        if not counts.any():
            continue
        edges = np.linspace(h["low"], h["high"], len(counts) + 1)
        out.append(f"<h3>{html.escape(r['rule'])} ({html.escape(r['source'])}): {r['dropped']:,} dropped</h3>"
                   + _svg_histogram(counts, edges, f"{r['rule']} (values past the axis in the end bars)", "documents",
                                    marker=r["limit"], marker_label=f"fails {r['fails_when']}"))
        if r["samples"]:
            out.append("<ul>" + "".join(f"<li><b>{html.escape(str(x['doc_id']))}</b>: {html.escape(x['text'])}</li>"
                                        for x in r["samples"]) + "</ul>")
    return "".join(out)


def _substrings_section(stats: dict) -> str:
    """The substrings stage: bytes repeated and removed, documents touched, the most repeated spans."""
    lead = (f"<p>Runs of {stats['min_tokens']} {stats['unit']}s or more seen twice: "
            f"{stats['repeated_bytes']:,} bytes repeated in {stats['documents_touched']:,} documents; "
            f"{stats['removed_bytes']:,} bytes removed ({100 * stats['share_removed']:.2f}% of the kept text, "
            f"keep: {html.escape(stats['keep'])}) from {stats['documents_changed']:,} documents, "
            f"{stats['dropped']:,} dropped.</p>")
    rows = [{"count": t["count"], "doc_id": t.get("doc_id"), "sample": t.get("sample")} for t in stats["top_spans"]]
    return lead + (_table(rows, ["count", "doc_id", "sample"]) if rows else "<p>No repeated span.</p>")


def write_report(run_dir: str | Path, staged: bool = False, samples: ClusterSamples | None = None) -> Path:
    """Write ``report.html`` (atomically: a temporary file renamed over it).

    ``staged``: ``run_dir`` is a staging directory the caller is writing (and holds the lock of);
    otherwise it must be a complete run (``_SUCCESS``), and the output directory's lock is taken."""
    from ..io.writer import lock_output, require_complete
    if staged:
        return _write_report(Path(run_dir), samples)
    with lock_output(run_dir, "report"):
        return _write_report(require_complete(run_dir, "report", locked=True))


def _write_report(run: Path, samples: ClusterSamples | None = None) -> Path:
    path = run / "report.html"
    tmp = run / ".report.html.tmp"
    tmp.write_text(build_report(run, samples), encoding="utf-8")
    tmp.replace(path)
    return path
