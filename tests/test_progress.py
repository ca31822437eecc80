"""Progress on stderr (``engine.progress``): one line per user-level stage in a log, nested bars in a terminal."""

import io
import re
import subprocess
import sys

from conftest import write_jsonl
from gpucurate.engine.progress import Reporter

STAGE_LINE = re.compile(r"INFO gpucurate: (?P<stage>[a-z+]+): (?P<docs>[\d,]+) documents in [\d.]+ s "
                        r"\([\d,]+ documents/s; \d+ steps?, [\d,]+ tasks?\)$")


def _corpus(tmp_path):
    base = "the harbour authority published its quarterly report on monday with revised figures for {}"
    records = [{"id": i, "text": base.format(i % 7) + " and more" * (i % 3)} for i in range(300)]
    return write_jsonl(tmp_path / "docs.jsonl", records)


def test_a_log_gets_one_line_per_stage_and_no_redraws(tmp_path):
    """``2> run.log``: no carriage returns, no internal step names, one line per user-level stage with its
    documents, rate, steps and tasks."""
    src = _corpus(tmp_path)
    with open(tmp_path / "run.log", "w") as log:
        proc = subprocess.run([sys.executable, "-m", "gpucurate", "run", "--input", str(src), "--output",
                               str(tmp_path / "out"), "--set", "semantic.enabled=false",
                               "--set", "input.partition_bytes=8000"],
                              stderr=log, stdout=subprocess.DEVNULL, timeout=300)
    text = (tmp_path / "run.log").read_text()
    assert proc.returncode == 0, text[-3000:]
    assert "\r" not in text and "\x1b[" not in text
    stages = [m for m in map(STAGE_LINE.search, text.splitlines()) if m]
    assert [m["stage"] for m in stages] == ["read+normalize", "exact", "fuzzy", "annotate", "write"]
    assert {m["docs"] for m in stages} == {"300"}
    assert re.search(r"INFO gpucurate: plan: [\d.]+ s$", text, re.M)
    for internal in ("look up id", "collect ids", "exact: hash", "fuzzy: minhash", "write aliases", "%|"):
        assert internal not in text


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_terminal_nests_the_steps_under_their_stage():
    term = _Terminal()
    reporter = Reporter(True, term)
    with reporter.active():
        with reporter.stage("exact") as stage:
            for desc in ("exact: hash", "look up id"):
                with reporter.step(4, desc, "task") as bar:
                    bar.update(4)
            stage.documents = 1200
        with reporter.stage("fuzzy"):
            with reporter.step(2, "fuzzy: minhash", "task") as bar:
                bar.update(2)
    drawn = term.getvalue()
    # the stages' bars stay, named by the stage and ending with the stage's line; the documents carry over
    assert re.search(r"exact: 1,200 documents in [\d.]+ s \([\d,]+ documents/s; 2 steps, 8 tasks\)", drawn)
    assert re.search(r"fuzzy: 1,200 documents in [\d.]+ s \([\d,]+ documents/s; 1 step, 2 tasks\)", drawn)
    assert "exact (step 2: look up id)" in drawn
    # each step is a bar indented under its stage, one line down (tqdm moves the cursor back up after it)
    for desc in ("exact: hash", "look up id", "fuzzy: minhash"):
        assert re.search(rf"\r  {re.escape(desc)}: +\d+%", drawn), desc
        assert not re.search(rf"\r{re.escape(desc)}:", drawn), desc
    assert "\x1b[A" in drawn


def test_progress_off_draws_and_logs_nothing(caplog):
    term = _Terminal()
    reporter = Reporter(False, term)
    with caplog.at_level("DEBUG", logger="gpucurate"), reporter.active():
        with reporter.stage("exact"):
            with reporter.step(3, "exact: hash", "task") as bar:
                bar.update(3)
    assert term.getvalue() == "" and caplog.records == []
