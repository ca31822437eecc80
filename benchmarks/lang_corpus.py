"""A labelled multilingual corpus for language identification, built from Debian's translated documentation.

Sources, fetched with ``apt-get download`` into ``--cache``/debs (no root, nothing installed; a .deb
already there is reused, so a cache keeps its package versions) and unpacked with ``dpkg-deb -x`` into
``--cache``/root/<package>:

* the translated man pages ``manpages-{de,fr,es,it,pl,ru,ja,zh,cs,da,el,fi,hu,id,nl,ro,sv,uk,vi,tr,nb}``
  and the English ``manpages``. The language is the locale in the path ``usr/share/man/<locale>/manN/``
  (``zh_CN`` and ``zh_TW`` -> ``zh``, ``pt_BR`` -> ``pt``, ``sr@latin`` -> ``sr``, ``no`` -> ``nb``; no
  locale -> ``en``). Up to ``--max-pages`` pages per package and locale, a fixed-seed sample of the sorted
  list, are rendered with ``groff -K utf8 -t -Tutf8 -man -rHY=0 -rLL=1000n -dAD=l -P-cbou`` (UTF-8 input,
  tables, no hyphenation, 1,000-column lines so that a paragraph is one line, no colour or overstrike;
  escapes left are stripped) and cached under ``--cache``/text. Symlinks, ``.so`` links and pages that
  are not UTF-8 are skipped.
* the HTML Debian installation guide, ``installation-guide-amd64``, in each of its 19 languages (the
  folder name is the locale), and the Korean Debian FAQ, ``debian-faq-ko``: Korean has no manpages
  package, and some languages have few translated pages (``manpages-el`` has 5). The text of every
  ``<p>``; headings, ``<pre>`` and tables end a run of paragraphs.

Pieces: a rendered page is cut into paragraphs at blank lines; the page's header and footer lines are
dropped, an unindented line (a section heading) ends a run of paragraphs, and a paragraph whose first line
is indented less than the rest loses that line (a ``.TP`` tag such as ``-a, --all``). A paragraph found
on more than 2 pages of one package and language (licence notes, translator credits, bug-report
addresses) is boilerplate and ends a run. A paragraph over ``--max-chars`` (2,000) is cut at sentence
ends. Consecutive kept paragraphs of one run are joined (with a space, or nothing between two CJK
characters) until the piece has ``--min-chars`` (200) characters; a shorter rest is dropped. In Japanese
and Chinese pieces a space between two CJK characters is removed (roff joins source lines with one).

Filter (plain character and word counts; no language-identification model), on each paragraph and on
the piece:

* letters (``str.isalpha``) are at least 75% of the non-space characters, and (but in Japanese and
  Chinese) at least 70% of the space-separated tokens are plain words (letters, inner hyphens or
  apostrophes, quotes, brackets and closing punctuation): prose, not code, paths, URLs or option lists;
* the letters are mostly in the language's script: Hangul >= 60% for ``ko``; Han plus kana >= 60% with
  kana >= 10% of those for ``ja``; Han >= 60% and kana < 2% for ``zh``; Cyrillic >= 75% for ``ru`` and
  ``uk``; Greek >= 75% for ``el``; Latin >= 95% for the others;
* a Latin-script language other than English: at most 2% of the words (so none in a paragraph of fewer
  than 50 words) are English function words that are not words of the other languages here (``the and
  with this that which you your are from should when these those there their been have has were its
  would could same only not if or any``): a partly translated page keeps English paragraphs, which this
  drops. English pieces
  need at least 4% such words (prose rather than lists of names).

English left inside a kept piece (command names, option values, a short untranslated phrase without any
of those words) stays: labels are the translators' language, not a judgement of each sentence.

Identical pieces are kept once per language (the first source in sorted order), and a piece found under
two languages is dropped. A language with fewer than ``--min-per-lang`` (200) pieces is left out; the
others keep at most ``--cap`` (1,000), a fixed-seed sample. The same cache and arguments give the same
file.

Output: JSON Lines ``{"lang": "<ISO 639-1>", "text": ..., "source": "<package>/<path in the package>"}``
sorted by language then source, and ``<out>.packages.json`` ({package: version}); the counts per
language are printed.

    python benchmarks/lang_corpus.py [--cache ~/.cache/gpucurate-bench/lang] [--out <cache>/corpus.jsonl]
        [--cap 1000] [--seed 0] [--max-pages 400] [--min-chars 200] [--max-chars 2000] [--min-per-lang 200]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import html.parser
import json
import os
import random
import re
import shutil
import subprocess
import sys
import unicodedata
import urllib.parse
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

DEFAULT_CACHE = Path("~/.cache/gpucurate-bench/lang").expanduser()
MAN_PACKAGES = ["manpages"] + [f"manpages-{c}" for c in (
    "de", "fr", "es", "it", "pl", "ru", "ja", "zh", "cs", "da", "el", "fi", "hu", "id", "nl", "ro", "sv", "uk",
    "vi", "tr", "nb")]
# (package, folder inside it whose subfolders are locales holding HTML pages, or None for one language's pages
# in the folder itself, that language)
HTML_SOURCES = [("installation-guide-amd64", "usr/share/doc/installation-guide-amd64", None),
                ("debian-faq-ko", "usr/share/doc/debian/FAQ/ko", "ko")]
LOCALE_ALIASES = {"no": "nb"}
GROFF = ["groff", "-K", "utf8", "-t", "-Tutf8", "-man", "-rHY=0", "-rLL=1000n", "-dAD=l", "-P-cbou"]
EN_MARKERS = frozenset("the and with this that which you your are from should when these those there their been "
                       "have has were its would could same only not if or any".split())
WORD = re.compile(r"[^\W\d_]+")
PLAIN_WORD = re.compile(r"[(\"'«»„“‘]*[^\W\d_]+(?:[-'’][^\W\d_]+)*[)\"'»«“”’]*[.,;:!?…]*[)\"'»“”’]*$")
ESCAPES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|.\x08")
CYRILLIC = frozenset({"ru", "uk", "bg", "be", "mk", "sr"})
NOFILL_COLUMNS = 900  # of the 1,000 of -rLL=1000n: a filled line breaks near the end
CJK_SPACE = re.compile(r"(?<=[\u3000-\u9fff\uf900-\ufaff\uff00-\uffef]) (?=[\u3000-\u9fff\uf900-\ufaff\uff00-\uffef])")
SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+|(?<=[。！？；])")


class CorpusError(Exception):
    """A one-line reason the corpus cannot be built."""


def lang_of_locale(locale: str) -> str:
    """``zh_CN`` -> ``zh``, ``pt_BR`` -> ``pt``, ``sr@latin`` -> ``sr``, ``de.UTF-8`` -> ``de``, ``no`` -> ``nb``."""
    base = re.split(r"[_.@]", locale, maxsplit=1)[0].lower()
    return LOCALE_ALIASES.get(base, base)


# ---------------------------------------------------------------------------------------------------- fetch

def fetch_packages(packages: list[str], debs: Path) -> dict[str, Path]:
    """``apt-get download`` every package not already in ``debs``; {package: .deb path}."""
    if not shutil.which("apt-get") or not shutil.which("dpkg-deb"):
        raise CorpusError("apt-get and dpkg-deb are needed (a Debian or Ubuntu system)")
    debs.mkdir(parents=True, exist_ok=True)
    missing = [p for p in packages if not sorted(debs.glob(f"{p}_*.deb"))]
    if missing:
        print(f"apt-get download {' '.join(missing)}", file=sys.stderr)
        done = subprocess.run(["apt-get", "download", "-q", *missing], cwd=debs, capture_output=True, text=True)
        if done.returncode:
            errors = [ln for ln in done.stderr.splitlines() if ln.startswith("E:")] or done.stderr.splitlines()[-1:]
            hint = " (run 'apt-get update' first?)" if "Unable to locate" in done.stderr else ""
            raise CorpusError(f"apt-get download failed: {errors[0] if errors else done.returncode}{hint}")
    found = {}
    for p in packages:
        files = sorted(debs.glob(f"{p}_*.deb"))
        if not files:
            raise CorpusError(f"{p}: no .deb in {debs} after apt-get download")
        found[p] = files[-1]
    return found


def unpack(deb: Path, root: Path) -> Path:
    """``dpkg-deb -x`` into ``root``/<package> once (a marker file says it is complete)."""
    dest = root / deb.name.split("_")[0]
    marker = dest / ".unpacked"
    if marker.is_file() and marker.read_text() == deb.name:
        return dest
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    done = subprocess.run(["dpkg-deb", "-x", str(deb), str(dest)], capture_output=True, text=True)
    if done.returncode:
        raise CorpusError(f"dpkg-deb -x {deb.name} failed: {done.stderr.strip().splitlines()[-1:]}")
    marker.write_text(deb.name)
    return dest


# ---------------------------------------------------------------------------------------------------- render

def man_pages(pkg_root: Path) -> dict[str, list[Path]]:
    """{locale ('' for English): sorted page files} of an unpacked manpages package."""
    out: dict[str, list[Path]] = defaultdict(list)
    man = pkg_root / "usr" / "share" / "man"
    if not man.is_dir():
        return {}
    for path in sorted(man.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        parts = path.relative_to(man).parts
        if len(parts) == 2 and parts[0].startswith("man"):
            out[""].append(path)
        elif len(parts) == 3 and parts[1].startswith("man"):
            out[parts[0]].append(path)
    return dict(out)


def render(page: Path, text_cache: Path) -> str | None:
    """Plain text of a man page (cached), or None for a ``.so`` link, a non-UTF-8 page or a groff failure."""
    if text_cache.is_file():
        text = text_cache.read_text(encoding="utf-8")
        return text or None
    raw = page.read_bytes()
    if page.suffix == ".gz":
        raw = gzip.decompress(raw)
    text = None
    try:
        source = raw.decode("utf-8")
    except UnicodeDecodeError:
        source = None
    if source is not None and not re.match(r"\s*\.so\s", source):
        done = subprocess.run(GROFF, input=source.encode("utf-8"), capture_output=True, timeout=60)
        if done.returncode == 0:
            text = ESCAPES.sub("", done.stdout.decode("utf-8", errors="replace"))
    text_cache.parent.mkdir(parents=True, exist_ok=True)
    text_cache.write_text(text or "", encoding="utf-8")
    return text


def _cjk(ch: str) -> bool:
    return "\u3000" <= ch <= "\u9fff" or "\uf900" <= ch <= "\ufaff" or "\uff00" <= ch <= "\uffef"


def _columns(line: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line.rstrip())


def join_lines(lines: list[str]) -> str:
    out = ""
    for line in lines:
        line = line.strip()
        if not line:
            continue
        if out and not (_cjk(out[-1]) and _cjk(line[0])):
            out += " "
        out += line
    return re.sub(r"\s+", " ", out).strip()


def man_paragraphs(text: str) -> list[str | None]:
    """Paragraphs of a rendered page, None where a section starts; headings, the header and footer lines and
    option tags left out."""
    lines = text.splitlines()
    nonblank = [i for i, ln in enumerate(lines) if ln.strip()]
    if len(nonblank) < 3:
        return []
    out: list[str | None] = []
    block: list[str] = []
    for ln in lines[nonblank[0] + 1:nonblank[-1]] + [""]:  # header and footer lines left out
        if ln.strip() and ln[0].isspace():
            block.append(ln)
            continue
        if block:
            indents = [len(b) - len(b.lstrip()) for b in block]
            if len(block) > 1 and indents[0] < min(indents[1:]):
                block = block[1:]  # a tag line (".TP"), e.g. an option name
            if any(_columns(b) < NOFILL_COLUMNS for b in block[:-1]):
                out.append(None)  # lines broken short of the line length: no-fill text (examples, tables)
            else:
                out.append(join_lines(block))
            block = []
        if ln.strip():  # an unindented line: a section heading
            out.append(None)
    return out


class _Paragraphs(html.parser.HTMLParser):
    """Text of every ``<p>`` of an HTML page, None at headings, ``<pre>`` and tables."""

    BREAKS = {"h1", "h2", "h3", "h4", "h5", "h6", "pre", "table"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.paragraphs: list[str | None] = []
        self._buf: list[str] | None = None
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        if tag == "p":
            self._flush()
            self._buf = []
        elif tag in self.BREAKS:
            self._flush()
            self.paragraphs.append(None)
        if tag in ("script", "style"):
            self._skip += 1

    def handle_endtag(self, tag):
        if tag == "p":
            self._flush()
        elif tag in ("script", "style") and self._skip:
            self._skip -= 1

    def handle_data(self, data):
        if self._buf is not None and not self._skip:
            self._buf.append(data)

    def _flush(self):
        if self._buf:
            text = re.sub(r"\s+", " ", "".join(self._buf)).strip()
            if text:
                self.paragraphs.append(text)
        self._buf = None


def html_paragraphs(path: Path) -> list[str | None]:
    parser = _Paragraphs()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    parser.close()
    parser._flush()
    return parser.paragraphs


# ---------------------------------------------------------------------------------------------------- pieces

def split_long(paragraph: str, max_chars: int) -> list[str]:
    """``paragraph`` cut at sentence ends into pieces of at most ``max_chars`` (a sentence longer than that
    is dropped)."""
    if len(paragraph) <= max_chars:
        return [paragraph]
    pieces, cur = [], ""
    for sentence in (s.strip() for s in SENTENCE_END.split(paragraph)):
        if not sentence or len(sentence) > max_chars:
            continue
        joined = f"{cur} {sentence}".strip() if not (cur and _cjk(cur[-1])) else cur + sentence
        if len(joined) > max_chars:
            pieces.append(cur)
            cur = sentence
        else:
            cur = joined
    if cur:
        pieces.append(cur)
    return pieces


def _script(ch: str) -> str:
    if "\uac00" <= ch <= "\ud7af" or "\u1100" <= ch <= "\u11ff" or "\u3130" <= ch <= "\u318f":
        return "hangul"
    if "\u3040" <= ch <= "\u30ff" or "\u31f0" <= ch <= "\u31ff" or "\uff66" <= ch <= "\uff9f":
        return "kana"
    if "\u4e00" <= ch <= "\u9fff" or "\u3400" <= ch <= "\u4dbf" or "\uf900" <= ch <= "\ufaff":
        return "han"
    name = unicodedata.name(ch, "")
    for script in ("LATIN", "CYRILLIC", "GREEK"):
        if name.startswith(script) or f" {script} " in name:
            return script.lower()
    return "other"


def keep(text: str, lang: str, whole: bool = True) -> bool:
    """The filter of the module docstring, for a paragraph (``whole=False``: English's prose test is left to
    the piece) or a piece."""
    chars = [c for c in text if not c.isspace()]
    letters = [c for c in chars if c.isalpha()]
    if not letters or len(letters) < 0.75 * len(chars):
        return False
    if lang not in ("ja", "zh"):
        tokens = text.split()
        if sum(bool(PLAIN_WORD.match(t)) for t in tokens) < 0.7 * len(tokens):
            return False
    scripts = Counter(_script(c) for c in letters)
    n = len(letters)
    if lang == "ko":
        return scripts["hangul"] >= 0.6 * n
    if lang == "ja":
        cjk = scripts["han"] + scripts["kana"]
        return cjk >= 0.6 * n and scripts["kana"] >= 0.1 * cjk
    if lang == "zh":
        return scripts["han"] >= 0.6 * n and scripts["kana"] < 0.02 * n
    if lang in CYRILLIC:
        return scripts["cyrillic"] >= 0.75 * n
    if lang == "el":
        return scripts["greek"] >= 0.75 * n
    if scripts["latin"] < 0.95 * n:
        return False
    words = [w.lower() for w in WORD.findall(text)]
    english = sum(w in EN_MARKERS for w in words)
    if lang == "en":
        return not whole or english >= 0.04 * len(words)
    return english <= 0.02 * len(words)


def _join(a: str, b: str) -> str:
    return a + b if a and _cjk(a[-1]) and _cjk(b[0]) else f"{a} {b}".strip()


def pieces(paragraphs: list[str | None], lang: str, boilerplate: set[str], min_chars: int,
           max_chars: int) -> list[str]:
    """Pieces of one page: runs of consecutive kept paragraphs of one section, joined until ``min_chars``."""
    out, cur = [], ""

    def close():
        if len(cur) >= min_chars and keep(cur, lang):
            out.append(cur)
        return ""

    for para in paragraphs:
        if para is None or para in boilerplate:
            cur = close()
            continue
        for part in split_long(para, max_chars):
            if not keep(part, lang, whole=False):
                cur = close()
                continue
            if len(_join(cur, part)) > max_chars:
                cur = close()
            cur = _join(cur, part)
            if len(cur) >= min_chars:
                cur = close()
    close()
    if lang in ("ja", "zh"):  # roff joins source lines with a space, also inside CJK text
        out = [CJK_SPACE.sub("", piece) for piece in out]
    return out


# ---------------------------------------------------------------------------------------------------- build

def build(cache: Path, cap: int = 1000, seed: int = 0, max_pages: int = 400, min_chars: int = 200,
          max_chars: int = 2000, min_per_lang: int = 200,
          workers: int | None = None) -> tuple[list[dict], dict[str, str], dict[str, int]]:
    """The corpus records, {package: version} and {language dropped: pieces it had}."""
    if not shutil.which("groff"):
        raise CorpusError("groff is needed to render man pages (apt-get install groff)")
    packages = MAN_PACKAGES + [p for p, _, _ in HTML_SOURCES]
    debs = fetch_packages(packages, cache / "debs")
    versions = {p: urllib.parse.unquote(d.name.split("_")[1]) for p, d in debs.items()}
    roots = {p: unpack(d, cache / "root") for p, d in debs.items()}

    jobs = []  # (lang, package, page)
    for pkg in MAN_PACKAGES:
        for locale, pages in sorted(man_pages(roots[pkg]).items()):
            lang = lang_of_locale(locale) if locale else "en"
            if max_pages and len(pages) > max_pages:
                pages = sorted(random.Random(f"{seed}:{pkg}:{locale}").sample(pages, max_pages))
            jobs += [(lang, pkg, page) for page in pages]
    render_key = hashlib.sha1(" ".join(GROFF).encode()).hexdigest()[:8]
    print(f"rendering {len(jobs):,} man pages (cached under {cache / 'text' / render_key})", file=sys.stderr)

    def one(job):
        lang, pkg, page = job
        rel = page.relative_to(roots[pkg])
        text = render(page, cache / "text" / render_key / pkg / (str(rel) + ".txt"))
        return man_paragraphs(text) if text else []

    with ThreadPoolExecutor(workers or os.cpu_count() or 1) as pool:
        documents = [(lang, f"{pkg}/{page.relative_to(roots[pkg])}", paras)
                     for (lang, pkg, page), paras in zip(jobs, pool.map(one, jobs))]
    for pkg, folder, lang in HTML_SOURCES:
        base = roots[pkg] / folder
        if not base.is_dir():
            raise CorpusError(f"{pkg}: {folder} not found in the package")
        folders = ([(base, lang)] if lang else
                   [(d, lang_of_locale(d.name)) for d in sorted(base.iterdir()) if d.is_dir()])
        for sub, sub_lang in folders:
            documents += [(sub_lang, f"{pkg}/{page.relative_to(roots[pkg])}", html_paragraphs(page))
                          for page in sorted(sub.glob("*.html"))]

    # a paragraph on more than 2 pages of one package and language: licence, translator and bug-report notes
    seen_on: Counter = Counter()
    for lang, source, paras in documents:
        group = (lang, source.split("/", 1)[0])
        seen_on.update((group, p) for p in set(paras) if p)
    candidates: dict[str, dict[str, str]] = defaultdict(dict)  # lang -> {text: source}, first source wins
    for lang, source, paras in documents:
        group = (lang, source.split("/", 1)[0])
        boilerplate = {p for p in paras if p and seen_on[(group, p)] > 2}
        for piece in pieces(paras, lang, boilerplate, min_chars, max_chars):
            candidates[lang].setdefault(piece, source)

    langs_of = Counter(t for by_text in candidates.values() for t in by_text)
    records, dropped = [], {}
    for lang in sorted(candidates):
        pool = sorted((src, t) for t, src in candidates[lang].items() if langs_of[t] == 1)
        if len(pool) < min_per_lang:
            dropped[lang] = len(pool)
            continue
        if len(pool) > cap:
            pool = sorted(random.Random(f"{seed}:{lang}").sample(pool, cap))
        records += [{"lang": lang, "text": t, "source": src} for src, t in pool]
    return records, versions, dropped


def write_corpus(records: list[dict], versions: dict[str, str], out: Path) -> None:
    """``out`` (JSON Lines) and ``<out>.packages.json`` ({package: version})."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    Path(str(out) + ".packages.json").write_text(json.dumps(versions, indent=2, sort_keys=True) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--out", type=Path, default=None, help="default: <cache>/corpus.jsonl")
    ap.add_argument("--cap", type=int, default=1000, help="pieces per language at most")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-pages", type=int, default=400, help="man pages per package and locale (0: all)")
    ap.add_argument("--min-chars", type=int, default=200)
    ap.add_argument("--max-chars", type=int, default=2000)
    ap.add_argument("--min-per-lang", type=int, default=200, help="a language with fewer pieces is left out")
    args = ap.parse_args()
    cache = args.cache.expanduser().resolve()
    out = (args.out or cache / "corpus.jsonl").expanduser()
    try:
        records, versions, dropped = build(cache, args.cap, args.seed, args.max_pages, args.min_chars,
                                           args.max_chars, args.min_per_lang)
    except CorpusError as e:
        raise SystemExit(f"lang_corpus: {e}")
    write_corpus(records, versions, out)
    stats: dict[str, Counter] = defaultdict(Counter)
    for r in records:
        st = stats[r["lang"]]
        st["pieces"] += 1
        st["chars"] += len(r["text"])
        st["man pages" if r["source"].startswith("manpages") else r["source"].split("/", 1)[0]] += 1
    kinds = ["man pages"] + [p for p, _, _ in HTML_SOURCES]
    print(f"{'lang':6}{'pieces':>8}{'mean chars':>12}" + "".join(f"{k:>26}" for k in kinds))
    for lang in sorted(stats):
        st = stats[lang]
        print(f"{lang:6}{st['pieces']:>8,}{st['chars'] / st['pieces']:>12,.0f}"
              + "".join(f"{st[k]:>26,}" for k in kinds))
    if dropped:
        print("left out (fewer than --min-per-lang pieces): "
              + ", ".join(f"{k} ({v})" for k, v in sorted(dropped.items())))
    print(f"{len(stats)} languages, {len(records):,} pieces, "
          f"{sum(len(r['text'].encode('utf-8')) for r in records) / 1e6:.1f} MB -> {out}")


if __name__ == "__main__":
    main()
