"""Pattern, term-list and PII rules of the contamination gate: where each rule matches each document, as
byte spans of its original UTF-8 text.

* Regex rules (``contamination.patterns`` and the PII presets) run through RE2 (pyarrow.compute) over the
  partition's Arrow strings: one pass of all regexes together finds the documents with a candidate; in
  those only, each rule's regex marks its matches with two bytes absent from the text
  (``replace_substring_regex``), and the marks' positions give the spans (``regex_spans``). Candidates of
  the card and IBAN presets are then checked by compiled checksums (``kernels.patterns``), those of the
  others by their digit counts, context and, for IPv6, the address parser.
* Term lists are matched as whole words of the normalized text (NFKC, lowercase, punctuation removed,
  CJK characters each a word), by the word n-gram hash kernel of the benchmark lookup: a term of m words
  is an m-gram. The documents with a hit are then normalized character by character, which keeps each
  character's place in the original text, to give the spans.

Matches of one rule never overlap (RE2 reports leftmost non-overlapping matches; n-grams of a term list
are merged); different rules may match the same bytes.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..config import ContaminationConfig, NormalizeConfig, Rule, parse_rules
from ..errors import ConfigError, InputError
from ..kernels.gates import ngram_hashes, ngram_matches
from ..kernels.hashing import padded_words
from ..kernels.patterns import iban_ends, luhn_valid
from .normalize import CJK_CHARACTER, arrow_buffers, normalize, per_char_normalized

#: normalization of terms and documents for term matching (that of the benchmark n-grams)
MATCH_NORMALIZE = NormalizeConfig(nfkc=True, lowercase=True, collapse_whitespace=True, strip_punctuation=True)
#: bytes that may mark a match's start and end: control characters that text rarely holds
_MARKERS = tuple(b for b in range(1, 32) if b not in (9, 10, 13))

_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_H = r"[0-9A-Fa-f]{1,4}"
#: the PII presets' regexes (RE2); what each does not catch is in docs/pipeline.md
PII_REGEX = {
    "email": r"(?i)\b[a-z0-9][a-z0-9._%+\-]*@(?:[a-z0-9](?:[a-z0-9\-]{0,61}[a-z0-9])?\.)+[a-z]{2,24}\b",
    # international (+country code), North American with separators, national numbers with a trunk 0
    # (UK, Germany, France, Italy, ...) or 8 (Russia) and separators; a bare run of digits is not a phone
    "phone": (r"\+[1-9]\d{0,2}(?:[ .\-]?\(?\d{1,4}\)?){2,5}"
              r"|\(?\b[2-9]\d{2}\)?[ .\-][2-9]\d{2}[ .\-]\d{4}\b"
              r"|\b0\d{1,4}[ /\-]\d{2,8}(?:[ \-]\d{2,6}){0,3}\b"
              r"|\(0\d{1,4}\)[ ]?\d{2,8}(?:[ \-]\d{2,6}){0,3}\b"
              r"|\b8[ \-]?\(\d{3}\)[ \-]?\d{3}[ \-]?\d{2}[ \-]?\d{2}\b"),
    "ipv4": rf"\b{_OCTET}\.{_OCTET}\.{_OCTET}\.{_OCTET}\b",
    "ipv6": (rf"(?:{_H}:){{7}}{_H}|(?:{_H}:){{1,6}}(?::{_H}){{1,6}}|(?:{_H}:){{1,7}}:|::(?:{_H}:){{0,6}}{_H}"),
    "card": r"\b\d(?:[ \-]?\d){12,18}\b",
    # printed in groups of four or in one piece
    "iban": r"\b[A-Z]{2}\d{2}(?:[A-Z0-9]{11,30}|(?: [A-Z0-9]{4}){2,7}(?: [A-Z0-9]{1,4})?)\b",
    "secret": (r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"  # AWS access key id
               r"|\bgh[pousr]_[A-Za-z0-9]{36,255}\b|\bgithub_pat_[A-Za-z0-9_]{60,255}\b"  # GitHub
               r"|\bglpat-[A-Za-z0-9_\-]{20,}\b"  # GitLab
               r"|\bxox[abposr]-[A-Za-z0-9\-]{10,}"  # Slack
               r"|\bAIza[0-9A-Za-z_\-]{35}\b"  # Google API key
               r"|\b[sr]k_(?:live|test)_[0-9A-Za-z]{16,}\b"  # Stripe
               r"|\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{32,}\b"  # OpenAI, Anthropic
               r"|\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"  # JSON Web Token
               r"|-----BEGIN (?:RSA |EC |DSA |OPENSSH |PGP |ENCRYPTED )?PRIVATE KEY(?: BLOCK)?-----"),
}
#: where matches of two presets overlap, the one earlier here wins (an IBAN's digits are no phone number)
PII_PRECEDENCE = ("secret", "email", "iban", "card", "ipv6", "ipv4", "phone")
#: IBAN length by country (ISO 13616 registry)
IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BR": 29,
    "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "DO": 28, "EE": 20, "EG": 29,
    "ES": 24, "FI": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28,
    "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20,
    "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "MC": 27, "MD": 24, "ME": 22, "MK": 19,
    "MR": 27, "MT": 31, "MU": 30, "NL": 18, "NO": 15, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29,
    "RO": 24, "RS": 22, "SA": 24, "SC": 31, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "ST": 25, "SV": 28,
    "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}
_IBAN_TABLE = np.zeros(26 * 26, np.int64)
for _country, _length in IBAN_LENGTHS.items():
    _IBAN_TABLE[(ord(_country[0]) - 65) * 26 + ord(_country[1]) - 65] = _length
#: first digits of the card networks and their numbers' lengths: Visa; Mastercard; American Express; Diners,
#: JCB, Discover, UnionPay, Maestro and Mir (13 to 19 digits)
_CARD_LENGTHS = {"4": (13, 16, 19), **{p: (16,) for p in ("51", "52", "53", "54", "55", "23", "24", "25", "26", "27")},
                 "34": (15,), "37": (15,), **{p: tuple(range(13, 20)) for p in ("22", "30", "35", "36", "38", "39",
                                                                                  "50", "56", "57", "58", "6")}}
#: by a card number's first two digits, the lengths its network issues, as bits (bit L: L digits)
_CARD_LENGTH_BITS = np.zeros(100, np.int64)
for _two in range(100):
    for _prefix, _lengths in _CARD_LENGTHS.items():
        if f"{_two:02d}".startswith(_prefix):
            _CARD_LENGTH_BITS[_two] |= sum(1 << n for n in _lengths)


def check_regex(regex: str, where: str) -> None:
    """A ConfigError naming ``where`` when ``regex`` is not valid RE2 or matches the empty string."""
    try:
        empty = pc.count_substring_regex(pa.array([""]), regex)[0].as_py()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ConfigError(f"{where}: invalid RE2 regex {regex!r} ({str(exc).splitlines()[0]})") from None
    if empty:
        raise ConfigError(f"{where}: regex {regex!r} matches the empty string")


def load_terms(path: str, rule: str) -> list[str]:
    """The terms of a term-list file: one per line, blank lines and ``#`` comments skipped; an unreadable
    file, a line that is not UTF-8 or a term with no word after normalization is an error naming it."""
    import fsspec
    try:
        with fsspec.open(path, "rb", compression="infer") as fh:
            raw_lines = fh.read().splitlines()
    except FileNotFoundError:
        raise InputError(f"term list {rule}: file not found", path) from None
    terms = []
    for line_no, raw in enumerate(raw_lines, 1):
        try:
            line = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise InputError(f"term list {rule}: not UTF-8", path, line_no) from None
        if not line or line.startswith("#"):
            continue
        if not _term_words(line):
            raise InputError(f"term list {rule}: term {line!r} has no word after normalization", path, line_no)
        terms.append(line)
    if not terms:
        raise InputError(f"term list {rule}: no terms", path)
    return terms


def _term_words(text: str) -> str:
    return " ".join(per_char_normalized(text, split_cjk=True)[0].split())


@dataclass
class RuleMatches:
    """Matches of a slice of documents: ``rows`` (int64[k], ascending), ``rule`` (int64[k], index into the
    rule set), ``start``/``end`` (int64[k], byte offsets into the row's original text), sorted by (row,
    start, rule)."""

    rows: np.ndarray
    rule: np.ndarray
    start: np.ndarray
    end: np.ndarray

    @classmethod
    def empty(cls) -> "RuleMatches":
        return cls(*(np.empty(0, np.int64) for _ in range(4)))

    @classmethod
    def concat(cls, parts: list) -> "RuleMatches":
        parts = [p for p in parts if len(p.rows)]
        if not parts:
            return cls.empty()
        cols = [np.concatenate([getattr(p, k) for p in parts]) for k in ("rows", "rule", "start", "end")]
        order = np.lexsort((cols[1], cols[2], cols[0]))
        return cls(*(c[order] for c in cols))


class RuleSet:
    """The gate's pattern, term and PII rules, built once: ``match(raw) -> RuleMatches``."""

    def __init__(self, cfg: ContaminationConfig):
        self.rules: list[Rule] = parse_rules(cfg)
        self.regexes: list[tuple[int, str]] = []  # (rule, regex) of the pattern and PII rules
        for k, rule in enumerate(self.rules):
            if rule.kind == "terms":
                continue
            regex = rule.source if rule.kind == "pattern" else PII_REGEX[rule.source]
            check_regex(regex, f"contamination rule {rule.name}")
            self.regexes.append((k, regex))
        self.any_regex = "|".join(f"(?:{r})" for _, r in self.regexes)
        term_rule, terms = [], []
        for k, rule in enumerate(self.rules):
            if rule.kind == "terms":
                words = load_terms(rule.source, rule.name)
                term_rule += [k] * len(words)
                terms += [_term_words(t) for t in words]
        self.term_table = self.term_rule = self.term_lengths = None
        if terms:
            offsets, data = arrow_buffers(pa.array(terms, pa.large_string()))
            longest = max(len(t.split()) for t in terms)
            entry, hashes, length = ngram_hashes(offsets, data, padded_words(data), longest)
            order = np.argsort(hashes, kind="stable")
            self.term_table = hashes[order]
            self.term_rule = np.asarray(term_rule, np.int64)[entry[order]]
            self.term_lengths = np.unique(length).astype(np.int64)

    def __len__(self) -> int:
        return len(self.rules)

    def names(self) -> list[str]:
        return [r.name for r in self.rules]

    def match(self, raw: pa.LargeStringArray) -> RuleMatches:
        """Every rule's matches in ``raw`` (``large_string[n]``, the documents' original texts)."""
        parts = []
        if raw.type != pa.large_string():  # once here, not in every buffer access below
            raw = raw.cast(pa.large_string())
        if self.regexes and len(raw):
            hit = np.flatnonzero(pc.fill_null(pc.match_substring_regex(raw, self.any_regex), False)
                                 .to_numpy(zero_copy_only=False))
            if len(hit):
                candidates = raw.take(pa.array(hit))
                for k, regex in self.regexes:
                    parts.append(self._regex_matches(candidates, hit, k, regex))
        if self.term_table is not None and len(raw):
            parts.append(self._term_matches(raw))
        return self._without_shadowed(RuleMatches.concat(parts))

    def _without_shadowed(self, m: RuleMatches) -> RuleMatches:
        """``m`` without the PII matches that overlap a match of a preset of higher precedence."""
        rank = np.array([PII_PRECEDENCE.index(r.source) if r.kind == "pii" else -1 for r in self.rules], np.int64)
        pii = np.flatnonzero(rank[m.rule] >= 0) if len(m.rows) else np.empty(0, np.int64)
        if len(np.unique(m.rule[pii])) < 2:
            return m
        # (m is in row, start order) a match overlaps an earlier one of its row when the earlier ends reach it
        rows, start, end = m.rows[pii], m.start[pii], m.end[pii]
        first = np.r_[True, rows[1:] != rows[:-1]]
        reach = np.maximum.accumulate(np.where(first, -1, np.r_[-1, end[:-1]]) + rows * (1 << 40)) - rows * (1 << 40)
        touched = np.flatnonzero(reach > start)
        involved = np.unique(np.concatenate([touched, touched - 1]))  # its earlier partner may be further back
        drop = []
        for row in np.unique(rows[involved]).tolist():
            mine = pii[rows == row].tolist()
            for i in mine:
                if any(rank[m.rule[j]] < rank[m.rule[i]] and m.start[j] < m.end[i] and m.start[i] < m.end[j]
                       for j in mine):
                    drop.append(i)
        keep = np.ones(len(m.rows), bool)
        keep[drop] = False
        return RuleMatches(m.rows[keep], m.rule[keep], m.start[keep], m.end[keep])

    def _regex_matches(self, texts: pa.LargeStringArray, rows: np.ndarray, k: int, regex: str) -> RuleMatches:
        # the texts this rule matches (an RE2 scan is cheaper than marking, and most rules match few)
        mine = np.flatnonzero(pc.match_substring_regex(texts, regex).to_numpy(zero_copy_only=False))
        if not len(mine):
            return RuleMatches.empty()
        texts, rows = texts.take(pa.array(mine)), rows[mine]
        local, start, end = regex_spans(texts, regex)
        if len(local):
            offsets, data = arrow_buffers(texts)
            keep, start, end = _validate(self.rules[k], data, offsets[local] - offsets[0], start, end,
                                         offsets[local + 1] - offsets[local])
            local, start, end = local[keep], start[keep], end[keep]
        return RuleMatches(rows[local], np.full(len(local), k, np.int64), start, end)

    def _term_matches(self, raw: pa.LargeStringArray) -> RuleMatches:
        norm = normalize(raw, MATCH_NORMALIZE)
        norm = pc.replace_substring_regex(norm, CJK_CHARACTER, r" \1 ")
        offsets, data = arrow_buffers(norm)
        rows, _, _, _ = ngram_matches(offsets, data, padded_words(data), self.term_lengths, self.term_table)
        out = []
        for r in np.unique(rows).tolist():  # the documents with a hit only
            out.append(self._term_spans(r, raw[r].as_py()))
        return RuleMatches.concat(out)

    def _term_spans(self, row: int, text: str) -> RuleMatches:
        """The term matches of one document, located in its original text."""
        where, first, last, byte_at = located_ngrams(text, self.term_table, self.term_lengths, split_cjk=True)
        if not len(where):
            return RuleMatches.empty()
        start, end = byte_at[first], byte_at[last + 1]
        rule = self.term_rule[where]
        # a hash of several lists' terms: its first entry is found; the others match the same words
        last = np.searchsorted(self.term_table, self.term_table[where], side="right")
        extra = [(w2, i) for i, (w, l) in enumerate(zip(where, last)) for w2 in range(w + 1, l)
                 if self.term_rule[w2] != self.term_rule[w]]
        if extra:
            rule = np.concatenate([rule, self.term_rule[[w for w, _ in extra]]])
            idx = np.array([i for _, i in extra], np.int64)
            start, end = np.concatenate([start, start[idx]]), np.concatenate([end, end[idx]])
        return _merged(row, rule, start, end)


def located_ngrams(text: str, table: np.ndarray, lengths: np.ndarray, split_cjk: bool = False) -> tuple:
    """The n-grams of ``table`` (sorted hashes of ``lengths`` words) in ``text`` normalized for matching
    (``per_char_normalized``, so that each normalized character knows its character of ``text``), by the
    kernel of the partition pass. Returns ``(where, first, last, byte_at)``: each match's position in
    ``table`` and the first and last characters of ``text`` it covers (int64[k]), and each character's
    UTF-8 byte offset in ``text`` (int64[len(text) + 1]; None when nothing matched)."""
    norm, origin = per_char_normalized(text, split_cjk)
    data = np.frombuffer(norm.encode("utf-8"), np.uint8)
    _, where, s, e = ngram_matches(np.array([0, len(data)], np.int64), data, padded_words(data), lengths, table)
    if not len(s):
        return where, s, s, None
    char_at = np.cumsum((data & 0xC0) != 0x80) - 1  # byte of the normalized text -> its character
    origin = np.asarray(origin, np.int64)
    byte_at = np.concatenate(([0], np.cumsum([len(ch.encode("utf-8")) for ch in text]))).astype(np.int64)
    return where, origin[char_at[s]], origin[char_at[e - 1]], byte_at


def _merged(row: int, rule: np.ndarray, start: np.ndarray, end: np.ndarray) -> RuleMatches:
    """Overlapping spans of one rule in one document merged into one."""
    order = np.lexsort((start, rule))
    rule, start, end = rule[order], start[order], end[order]
    out_r, out_s, out_e = [], [], []
    for r, s, e in zip(rule.tolist(), start.tolist(), end.tolist()):
        if out_r and out_r[-1] == r and s < out_e[-1]:
            out_e[-1] = max(out_e[-1], e)
        else:
            out_r.append(r), out_s.append(s), out_e.append(e)
    n = len(out_r)
    return RuleMatches(np.full(n, row, np.int64), np.array(out_r, np.int64), np.array(out_s, np.int64),
                       np.array(out_e, np.int64))


def regex_spans(texts: pa.LargeStringArray, regex: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every non-overlapping match of ``regex`` in ``texts``: ``(index of the text, start, end)``, int64[k]
    each, byte offsets within the text, in text then position order. Each match is marked by two bytes
    that no text holds, and found by where the marks are."""
    offsets, data = arrow_buffers(texts)
    present = np.bincount(data[offsets[0]:offsets[-1]], minlength=256) > 0
    free = [b for b in _MARKERS if not present[b]]
    if len(free) < 2:
        if len(texts) == 1:
            raise InputError("a text holds every control character; the pattern rules cannot mark matches in it")
        half = len(texts) // 2
        a, b = regex_spans(texts.slice(0, half), regex), regex_spans(texts.slice(half), regex)
        return np.concatenate([a[0], b[0] + half]), np.concatenate([a[1], b[1]]), np.concatenate([a[2], b[2]])
    open_mark, close_mark = free[0], free[1]
    marked = pc.replace_substring_regex(texts, regex, f"{chr(open_mark)}\\0{chr(close_mark)}")
    moff, mdata = arrow_buffers(marked)
    mdata = mdata[moff[0]:moff[-1]]
    moff = moff - moff[0]
    opens = np.flatnonzero(mdata == open_mark)
    closes = np.flatnonzero(mdata == close_mark)
    row = np.searchsorted(moff, opens, side="right") - 1
    rank = np.arange(len(opens)) - np.searchsorted(opens, moff[row])  # matches before it in its text
    start = opens - moff[row] - 2 * rank
    end = closes - moff[row] - 2 * rank - 1
    return row.astype(np.int64), start.astype(np.int64), end.astype(np.int64)


def _validate(rule: Rule, data: np.ndarray, base: np.ndarray, start: np.ndarray, end: np.ndarray,
              length: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which regex candidates of a PII preset are values (``keep`` bool[k]) and their spans (``start``,
    ``end``, narrowed where the value is part of the candidate); ``base``: where each candidate's text
    starts in ``data``, ``length``: its text's length in bytes."""
    keep = np.ones(len(start), bool)
    if rule.kind != "pii":
        return keep, start, end
    start, end = start.copy(), end.copy()
    lo, hi = base + start, base + end
    before = np.where(start > 0, data[np.maximum(lo - 1, 0)], 32)
    after = np.where(end < length, data[np.minimum(hi, len(data) - 1)], 32)
    after2 = np.where(end + 1 < length, data[np.minimum(hi + 1, len(data) - 1)], 32)
    digit = np.zeros(256, bool)
    digit[48:58] = True
    alnum = digit.copy()
    alnum[65:91] = alnum[97:123] = True
    dotted_number = (before == 46) | ((after == 46) & digit[after2])  # 1.2.3.4.5, a version or a decimal
    name = rule.source
    if name in ("card", "ipv4", "phone"):
        keep &= ~digit[before] & ~digit[after]
    if name == "ipv4":
        keep &= ~dotted_number
    if name == "phone":
        # a number of a country whose numbers have a fixed length ends there ("+44 20 7946 0958 58 cts")
        for k in np.flatnonzero(keep & (data[lo] == 43)).tolist():
            stop = _international_end(data, int(lo[k]), int(hi[k]))
            if stop < 0:
                keep[k] = False
            elif stop < hi[k]:
                hi[k], end[k] = stop, stop - base[k]
        digits = _digits(data, lo, hi)
        keep &= (digits >= 8) & (digits <= 15)
        # a run of digit groups goes on around it: an IBAN that failed its checksum, a table of figures
        before2 = np.where(start > 1, data[np.maximum(lo - 2, 0)], 32)
        national = data[lo] == 48  # "0334 5235 3261": a trunk 0 is what such a run looks like
        keep &= ~(national & (((before == 32) & (digit[before2] | _after_group(data, lo, start)))
                              | ((after == 32) & digit[after2])))
        # two figures joined by a slash or a hyphen, the second with a leading 0, are a range ("0650/0700",
        # a commodity quote): a subscriber number after an area code does not start with the trunk 0
        for k in np.flatnonzero(keep & national).tolist():
            text = bytes(data[lo[k]:hi[k]])
            head, sep, tail = text.partition(b"/") if b"/" in text else text.partition(b"-")
            if sep and tail[:1] == b"0" and head.isdigit() and tail.isdigit():
                keep[k] = False
    elif name == "card":
        # an IBAN's groups (a grouped candidate after a group of four), a phone's digits
        grouped = _digits(data, lo, hi) < hi - lo
        keep &= ~((before == 32) & grouped & _after_group(data, lo, start)) & (before != 43)
        # a decimal's parts at either end ("17.6 4190 ...", "... 1111 85.4 mln") are not the card's
        ok = luhn_valid(data, lo, hi) & _card_network(data, lo, hi) & ~dotted_number
        # a card number printed beside another number ("Shr 34 4111 1111 1111 1111", "in 1986
        # 5126693770355766"): its groups alone
        for k in np.flatnonzero(keep & ~ok).tolist():
            text = bytes(data[lo[k]:hi[k]])
            if b" " not in text and b"-" not in text:  # one group: nothing shorter inside
                continue
            found = _card_within(data, int(lo[k]) + (before[k] == 46), int(hi[k]))
            if found is not None:
                ok[k] = True
                start[k], end[k] = found[0] - base[k], found[1] - base[k]
        keep &= ok
    elif name == "iban":
        stop = iban_ends(data, lo, hi, _IBAN_TABLE)
        ok = stop >= 0
        nxt = data[np.minimum(np.maximum(stop, 0), len(data) - 1)]
        ok &= (stop - base >= length) | ~alnum[nxt]
        keep &= ok
        end = np.where(ok, stop - base, end)
    elif name == "ipv6":
        texts = [bytes(data[a:b]).decode("ascii", "replace") for a, b in zip(lo.tolist(), hi.tolist())]
        keep &= np.array([_is_ipv6(t) for t in texts], bool) & ~alnum[before] & ~alnum[after]
    return keep, start, end


#: national significant numbers of the countries whose numbers have one length (ITU-T E.164 national plans)
FIXED_NSN_DIGITS = {"1": 10, "7": 10, "33": 9, "34": 9, "44": 10, "61": 9, "91": 10}


def _international_end(data: np.ndarray, lo: int, hi: int) -> int:
    """Where an international number ``+CC ...`` at ``data[lo:hi]`` ends when CC is a country of
    ``FIXED_NSN_DIGITS`` (written apart from the rest): after the digit group that completes the national
    number; -1 when no group boundary gives that length; ``hi`` for other countries."""
    k = lo + 1
    while k < hi and 48 <= data[k] <= 57:
        k += 1
    want = FIXED_NSN_DIGITS.get(bytes(data[lo + 1:k]).decode("ascii"))
    if want is None or k == hi or data[k] not in b" .-":
        return hi
    digits = 0
    for i in range(k, hi):
        if bytes(data[i - 1:i + 2]) == b"(0)":  # "+44 (0)20 ...": the trunk 0 is not dialled
            continue
        if 48 <= data[i] <= 57:
            digits += 1
            if digits == want:
                return i + 1 if i + 1 == hi or not 48 <= data[i + 1] <= 57 else -1
    return -1


def _digits(data: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """How many ASCII digits each span ``data[lo:hi]`` holds (int64[k])."""
    counts = np.concatenate(([0], np.cumsum((data >= 48) & (data <= 57))))
    return counts[hi] - counts[lo]


def _card_network(data: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Whether each card candidate (a digit, then digits with at most one space or hyphen between two) has
    a card network's first digits and length."""
    second = np.where((data[lo + 1] >= 48) & (data[lo + 1] <= 57), lo + 1, lo + 2)
    two = (data[lo].astype(np.int64) - 48) * 10 + data[second] - 48
    return (_CARD_LENGTH_BITS[two] >> _digits(data, lo, hi)) & 1 == 1


def _is_card_number(digits: str) -> bool:
    return len(digits) < 63 and bool((_CARD_LENGTH_BITS[int(digits[:2])] >> len(digits)) & 1)


def _after_group(data: np.ndarray, lo: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Whether the word before each candidate (``lo``: the candidate's first byte, ``start``: its offset in
    its text) is a group of four capitals or digits, as an IBAN's (``NL91 ABNA 0417 ...``)."""
    group = np.zeros(256, bool)
    group[48:58] = group[65:91] = True
    word = np.ones(256, bool)
    word[:128] = False
    word[48:58] = word[65:91] = word[97:123] = True
    at = np.maximum(lo[:, None] - np.arange(2, 6)[None, :], 0)
    out = (start >= 5) & group[data[at]].all(axis=1)
    return out & ((start == 5) | ~word[data[np.maximum(lo - 6, 0)]])


def _card_within(data: np.ndarray, lo: int, hi: int) -> tuple[int, int] | None:
    """The longest run of digit groups of ``data[lo:hi]`` that is a card number printed in groups of four
    (the last one may be shorter) or in one group (13 to 19 digits, a network's prefix, Luhn): its byte span,
    or None."""
    groups, k = [], lo
    while k < hi:
        j = k
        while j < hi and 48 <= data[j] <= 57:
            j += 1
        if j > k:
            groups.append((k, j))
        k = j + 1
    best = None
    for a in range(len(groups)):
        for b in range(a + 1, len(groups) + 1):
            if b - a > 1 and (any(g[1] - g[0] != 4 for g in groups[a:b - 1]) or groups[b - 1][1] - groups[b - 1][0] > 4):
                continue
            s, e = groups[a][0], groups[b - 1][1]
            digits = "".join(bytes(data[g0:g1]).decode() for g0, g1 in groups[a:b])
            if (best is None or e - s > best[1] - best[0]) and _luhn(digits) and _is_card_number(digits):
                best = (s, e)
    return best


def _luhn(digits: str) -> bool:
    """``kernels.patterns.luhn_valid`` of one number, in Python (a few candidates: no kernel call each)."""
    total = 0
    for k, c in enumerate(reversed(digits)):
        d = (ord(c) - 48) * (2 if k % 2 else 1)
        total += d - 9 if d > 9 else d
    return 13 <= len(digits) <= 19 and total % 10 == 0


def _is_ipv6(text: str) -> bool:
    # a digit and two groups at least: "a::b" in C++ and "12:30:45" are not addresses
    if not any(c.isdigit() for c in text) or text.count(":") < 2:
        return False
    try:
        return ipaddress.ip_address(text).version == 6
    except ValueError:
        return False


def mask(text: str) -> str:
    """A sample shown masked: its first and last two characters (one each under 8), the rest ``*``."""
    keep = 2 if len(text) >= 8 else (1 if len(text) >= 4 else 0)
    if not keep:
        return "*" * len(text)
    return text[:keep] + "*" * (len(text) - 2 * keep) + text[-keep:]


def redaction_token(name: str) -> str:
    """What a match of the rule ``name`` becomes when redacted: ``<NAME>``, the name upper-cased."""
    return f"<{name.upper()}>"
