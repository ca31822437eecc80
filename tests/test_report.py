"""report.html: written by every run, readable in a browser without a server."""

import html
import json
import re
import shutil
import subprocess

import numpy as np
import pytest

from conftest import write_jsonl
from gpucurate.cli import main
from gpucurate.review.report import _svg_histogram, size_bins
from gpucurate.workflows.run import run


@pytest.fixture(scope="module")
def report_run(tmp_path_factory, demo_frame):
    tmp = tmp_path_factory.mktemp("report")
    records = demo_frame.head(500).to_dict(orient="records")
    item = {"q": "Which planet has the most moons in the solar system according to the latest count?",
            "a": "Saturn has the most moons."}
    records[3]["text"] = (records[3]["text"] or "") + " " + item["q"] + " " + item["a"]
    bench = write_jsonl(tmp / "bench.jsonl", [item])
    src = write_jsonl(tmp / "d.jsonl", records)
    summary = run([str(src)], tmp / "out", overrides={"run.progress": False,
                                                       "contamination.benchmarks": [f"mini={bench}:q,a"]})
    return summary, tmp / "out"


def test_report_sections(report_run):
    summary, out = report_run
    page = (out / "report.html").read_text()
    assert page.startswith("<!doctype html>") and "</html>" in page
    for heading in ("Documents per stage", "Cluster sizes", "Similarity of candidate pairs", "Largest clusters",
                    "Contamination", "Timings (s)", "Parameters"):
        assert f"<h2>{heading}</h2>" in page
    assert f"{summary['documents_in']:,} documents, {summary['documents_kept']:,} kept" in page
    assert page.count("<svg ") >= 2 and page.count("<rect ") > 10  # cluster sizes + jaccard histogram
    assert "mini: 1 of 1 items found in 1 documents" in page
    assert "http://" not in page and "https://" not in page, "no external resources"


def test_report_command_rewrites_it(report_run, tmp_path):
    _, out = report_run
    before = (out / "report.html").read_text()
    (out / "report.html").unlink()
    assert main(["report", "--run", str(out), "-q"]) == 0
    assert (out / "report.html").read_text() == before
    assert main(["report", "--run", str(tmp_path), "-q"]) == 1


CHROMIUM = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"]
needs_chromium = pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is not installed")


def _awkward_charts() -> str:
    """The two charts that went wrong: cluster sizes 2..38 (integer bins printed as ``2.000``) and scores from
    0.8 to 0.999 in 50 bins (a tick at 0.996 over the range end, 0.999)."""
    sizes = size_bins(37)  # edges 2 .. 38
    scores = np.histogram_bin_edges([], bins=50, range=(0.8, 0.999))
    return (_svg_histogram(np.arange(1, len(sizes)), sizes, "documents per cluster", "clusters", log=True)
            + _svg_histogram(np.arange(50) % 7, scores, "jaccard score", "pairs", marker=0.9, marker_label="t"))


def _x_ticks(svg: str) -> list[tuple[float, str]]:
    return [(float(x), label) for x, label in re.findall(r'<text class="x-tick" x="([\d.]+)"[^>]*>([^<]*)</text>', svg)]


def test_axis_ticks_are_whole_numbers_and_do_not_touch(report_run):
    charts = _awkward_charts()
    sizes, scores = charts.split("</svg>")[:2]
    assert [label for _, label in _x_ticks(sizes)][-1] == "38"
    assert all(re.fullmatch(r"\d+", label) for _, label in _x_ticks(sizes)), _x_ticks(sizes)
    assert [label for _, label in _x_ticks(scores)][-1] == "0.999"
    page = (report_run[1] / "report.html").read_text()
    for svg in [sizes, scores] + page.split("</svg>")[:-1]:
        ticks = _x_ticks(svg)
        assert len(ticks) >= 3
        for (xa, a), (xb, b) in zip(ticks, ticks[1:]):  # 6 px a character is a digit at 11 px in any sans
            assert xb - xa >= (len(a) + len(b)) / 2 * 6, (a, b, xb - xa)
    assert "Noto Sans CJK KR" in page and "Microsoft YaHei" in page  # CJK samples get a font that has them


@needs_chromium
def test_report_renders_in_headless_chromium(report_run, tmp_path):
    _, out = report_run
    shot = tmp_path / "shot.png"
    subprocess.run([*CHROMIUM, f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1000,2400",
                    f"--screenshot={shot}", (out / "report.html").as_uri()], check=True, capture_output=True,
                   timeout=120)
    import matplotlib.image
    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[0] >= 2000 and pixels.shape[1] >= 900
    assert np.std(pixels) > 0.05, "the page is not blank"


#: run in the page: the rendered box of every x-axis tick label, per chart, into the body's data-ticks
MEASURE = """<script>
document.body.dataset.ticks = JSON.stringify([...document.querySelectorAll('svg')].map(svg =>
  [...svg.querySelectorAll('text.x-tick')].map(t => { const r = t.getBoundingClientRect();
                                                      return [t.textContent, r.left, r.right]; })));
</script>"""


@needs_chromium
def test_tick_labels_do_not_overlap_in_chromium(report_run, tmp_path):
    """The report's charts and the two awkward ones, laid out by Chromium: no tick label overlaps the next."""
    page = (report_run[1] / "report.html").read_text()
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", _awkward_charts() + MEASURE + "</body>"), encoding="utf-8")
    dom = subprocess.run([*CHROMIUM, f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1000,2400",
                          "--dump-dom", probe.as_uri()], check=True, capture_output=True, text=True,
                         timeout=120).stdout
    charts = json.loads(html.unescape(re.search(r'data-ticks="([^"]*)"', dom).group(1)))
    assert len(charts) >= 4 and all(len(ticks) >= 3 for ticks in charts)
    for ticks in charts:
        for (a, _, a_right), (b, b_left, _) in zip(ticks, ticks[1:]):
            assert a_right <= b_left, f"tick labels {a} and {b} overlap"


def test_the_run_writes_the_report_without_reading_its_part_files(tmp_path, monkeypatch):
    """The run takes the report's clusters from its partitions and the sample texts from the write pass; the
    report equals the one ``report --run`` builds from the part files (over several partitions)."""
    import gpucurate.review.report as report
    base = "the quarterly report of the harbour authority was published on monday with new figures {}"
    records = [{"id": f"d{i}", "text": base.format(i % 4) + (" extra" * (i % 3))} for i in range(600)]
    records += [{"id": f"u{i}", "text": f"unrelated text number {i} " * 5} for i in range(600)]
    src = write_jsonl(tmp_path / "d.jsonl", records)

    def no_reading(*args):
        raise AssertionError("the run read texts back from its part files")
    monkeypatch.setattr(report, "texts_of", no_reading)
    run([str(src)], tmp_path / "out", overrides={"run.progress": False, "input.partition_bytes": 20_000})
    page = (tmp_path / "out" / "report.html").read_text()
    assert len(list((tmp_path / "out" / "annotations").glob("part-*.parquet"))) > 3
    assert page.count("<li><b>") >= 3 and "the quarterly report of the harbour" in page
    monkeypatch.undo()
    assert main(["report", "--run", str(tmp_path / "out"), "-q"]) == 0
    assert (tmp_path / "out" / "report.html").read_text() == page
