"""English words as datatrove's quality filters count them, in a compiled kernel.

datatrove's ``split_into_words`` (Gopher, FineWeb) is spaCy's blank English tokenizer; its sentences (C4)
are spaCy's sentencizer over those tokens. ``chunk_tokens`` follows the same procedure, with tables of our
own (``WordTables``):

1. text is cut at whitespace (``str.isspace``) into chunks;
2. a chunk that is a special case (a contraction, an abbreviation, an emoticon: ``SPECIAL_CASES``) gives its
   fixed pieces; otherwise prefixes (opening punctuation, quotes, currency, symbols) and suffixes (closing
   punctuation, quotes, ``'s``, a unit or currency after a digit, a period after a lower-case letter, a digit,
   punctuation or two capitals) come off one at a time, stopping at a special case;
3. what remains is one token when it is a URL (an optional scheme and ``user@``, domain labels and a
   lower-case top-level domain, an optional port and path), else it is cut at infixes: runs of periods, an
   ellipsis, symbols, an operator between digits, a period between a lower-case and a capital letter, a
   comma between letters, hyphens or ``:<>=/`` between a letter or digit and a letter;
4. consecutive pieces of a chunk that together spell a special case become that case's pieces ("Wash" "."
   -> "Wash.").

"Letter", "lower-case" and "capital" are Unicode's (a letter of a script without case counts as both);
"digit" means 0-9. On Reuters-21578 the tokens equal spaCy 3.8's on all 19,043 documents, and every rule
of the presets decides as datatrove does on all of them (``benchmarks/bench_quality.py``).

Speed: a chunk's tokens depend on its characters alone, and words repeat, so ``text_tokens`` remembers the
split of short chunks (``chunk_cache``). Helpers called per character, token or line are inlined
(``inline="always"``): a call that passes arrays costs about 10 ns, as much as the work of a short token.
"""

from __future__ import annotations

import functools
import hashlib
import unicodedata
from pathlib import Path

import numpy as np

from .hashing import pack_short
from .jit import njit
from .tables import cached_arrays

# character classes (bits of ``WordTables.flags``)
ALPHA, LOWER, UPPER, ICON, SPACE, PUNCT, AFFIX, CURRENCY, STERM, HYPHEN, IS_PUNCT, QUOTE, WORDCHAR, URLCHAR, \
    DECIMAL, INFIX = (1 << k for k in range(16))

#: opening/closing punctuation that comes off a chunk's ends (spaCy's LIST_PUNCT), as single characters
_PUNCT_CHARS = "…,:;!?¿؟¡()[]{}<>_#*&。？！，、；：～·।،۔؛٪"
_QUOTES = "'\"”“`‘´’‚,„»«「」『』（）〔〕【】《》〈〉〈〉⟦⟧"
_CURRENCY = "$£€¥฿₽﷼₴₠₡₢₣₤₥₦₧₨₩₪₫₭₮₯₰₱₲₳₵₶₷₸₹₺₻₼₾₿"
#: multi-character currencies and units that come off after a digit
_AFTER_DIGIT = ("US$ C$ A$ km km² km³ m m² m³ dm dm² dm³ cm cm² cm³ mm mm² mm³ ha µm nm yd in ft kg g mg µg t lb "
                "oz m/s km/h kmh mph hPa Pa mbar mb MB kb KB gb GB tb TB T G M K % км км² км³ м м² м³ дм дм² дм³ "
                "см см² см³ мм мм² мм³ нм кг г мг м/с км/ч кПа Па мбар Кб КБ кб Мб МБ мб Гб ГБ гб Тб ТБ тб").split()
#: datatrove's PUNCTUATION_SET without its terminal punctuation (a word of these alone is a symbol)
_DATATROVE_PUNCT = "!/—”:％１〈&(、━\\【#%「」，】；+^]~“《„';’{|∶´[=-`*．（–？！：$～«〉,><》)?）。…@_.\"}►»" + \
    "".join(map(chr, (x for a, b in ((0, 9), (11, 13), (13, 32), (127, 160)) for x in range(a, b))))
#: sentence terminators (Unicode's Sentence_Terminal, the common scripts): the sentencizer's punctuation and
#: FineWeb's line ends
_STERM = "!.?։؟۔܀܁܂߹।॥၊။።፧፨᙮᜵᜶᠃᠉᥄᥅᪨᪩᪪᪫᭚᭛᭞᭟᰻᰼᱾᱿‼‽⁇⁈⁉⸮⸼꓿꘎꘏꛳꛷꡶꡷꣎꣏꤯꧈꧉꩝꩞꩟꫰꫱꯫﹒﹖﹗！．？｡。"
_HYPHENS = "-–—~"
#: Gopher's stop words (datatrove's STOP_WORDS), then C4's phrases: a kept line with lorem ipsum drops the
#: document, one with javascript or a policy phrase is left out; then C4's citations
STOP_WORDS = ("the", "be", "to", "of", "and", "that", "have", "with")
PHRASES = STOP_WORDS + ("lorem ipsum", "javascript", "terms of use", "privacy policy", "cookie policy", "uses cookies",
                        "use of cookies", "use cookies", "[edit]", "[citation needed]")
_LOREM, _JAVASCRIPT, _POLICY, _EDIT, _CITATION = 8, 9, 10, 16, 17


def _special_cases() -> dict:
    """Chunks spaCy's English tokenizer keeps whole or splits its own way: abbreviations with periods, the
    contractions of common verbs and pronouns (with and without the apostrophe), emoticons."""
    out = {}
    abbreviations = (
        "Jan. Feb. Mar. Apr. Jun. Jul. Aug. Sep. Sept. Oct. Nov. Dec. Mr. Mrs. Ms. Dr. Prof. Gen. Gov. Sen. Rep. "
        "Rev. St. Jr. Adm. Messrs. Mt. Co. Corp. Inc. Ltd. Bros. co. Ala. Ariz. Ark. Calif. Colo. Conn. Del. "
        "Fla. Ga. Ill. Ind. Kan. Kans. Ky. La. Mass. Md. Mich. Minn. Miss. Mo. Mont. Neb. Nebr. Nev. N.C. N.D. "
        "N.H. N.J. N.M. N.Y. Okla. Ore. Pa. S.C. Tenn. Va. Wash. Wis. Ak. Ia. Id. e.g. i.e. E.g. E.G. I.e. "
        "I.E. a.m. p.m. vs. v.s. Ph.D. D.C. ä. ö. ü. '' and/or And/or C++ "
        ":) :-) (: (-: =) (= :] [: ;) ;-) (; :( :-( ): )-: =( :/ :-/ :| :-| :P :p :D :o :O <3 ^_^ -_- :'( :') "
        "8) 8-) (-8 :* :0 :)) :(( =/ =| <space>")
    for a in abbreviations.split():
        out[a] = (a,)
    for c in "abcdefghijklmnopqrstuvwxyz":
        out[c + "."] = (c + ".",)
    for h in range(1, 13):
        for suffix in ("a.m.", "p.m.", "am", "pm"):
            out[f"{h}{suffix}"] = (str(h), suffix)
    for w in ("cannot", "Cannot", "CANNOT"):
        out[w] = (w[:3], w[3:])
    verbs = ("do does did is are was were have has had could would should might must need dare ca wo ai sha").split()
    pronouns = "i you he she it we they that there what who where how here this when why".split()
    for apostrophe in "'’":
        for v in verbs:
            for w in (v, v.capitalize()):
                out[f"{w}n{apostrophe}t"] = (w, f"n{apostrophe}t")
            out[f"{v.upper()}N{apostrophe}T"] = (v.upper(), f"N{apostrophe}T")
        for p in pronouns:
            for w in (p, p.capitalize()):
                for s in ("m", "re", "ve", "ll", "d", "s"):
                    out[f"{w}{apostrophe}{s}"] = (w, f"{apostrophe}{s}")
        out[f"I{apostrophe}m"] = ("I", f"{apostrophe}m")
        for w in ("let", "Let"):
            out[f"{w}{apostrophe}s"] = (w, f"{apostrophe}s")
        for s in ("s", "S", "d", "ll", "re", "ve", "m", "em"):
            out[f"{apostrophe}{s}"] = (f"{apostrophe}{s}",)
    without = {"dont": "do nt", "doesnt": "does nt", "didnt": "did nt", "isnt": "is nt", "arent": "are nt",
               "wasnt": "was nt", "werent": "were nt", "havent": "have nt", "hasnt": "has nt", "hadnt": "had nt",
               "couldnt": "could nt", "wouldnt": "would nt", "shouldnt": "should nt", "mustnt": "must nt",
               "neednt": "need nt", "cant": "ca nt", "aint": "ai nt", "im": "i m", "id": "i d", "itd": "it d",
               "youd": "you d", "hed": "he d", "theyd": "they d", "ive": "i ve", "youve": "you ve",
               "weve": "we ve", "theyve": "they ve", "youre": "you re", "theyre": "they re", "youll": "you ll",
               "itll": "it ll", "theyll": "they ll"}
    for w, parts in without.items():
        out[w] = tuple(parts.split())
        first, *rest = parts.split()
        out[w.capitalize()] = (first.capitalize(), *rest)
    return out


SPECIAL_CASES = _special_cases()


def _fnv_cps(cps) -> int:
    h = 0xCBF29CE484222325
    for c in cps:
        h = ((h ^ c) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def _character_flags() -> np.ndarray:
    """``uint16[0x110000]``: every code point's classes (the bits above), from Python's Unicode tables. Made
    in 0.3 s, so kept in gpucurate's cache, by this file's text and the Unicode version (``kernels.tables``)."""
    key = hashlib.sha256(Path(__file__).read_bytes() + unicodedata.unidata_version.encode()).hexdigest()[:20]
    return cached_arrays("words", f"flags-{key}", ("flags",), lambda: (_make_character_flags(),))[0]


def _make_character_flags() -> np.ndarray:
    flags = np.zeros(0x110000, np.uint16)
    for cp in range(0x110000):
        ch = chr(cp)
        cat = unicodedata.category(ch)
        f = 0
        if ch.isalpha():
            f |= ALPHA
            cased = ch.islower() or ch.isupper()
            f |= (LOWER if ch.islower() or not cased else 0) | (UPPER if ch.isupper() or not cased else 0)
        if cat == "So":  # ° too: spaCy's pattern means to leave it out, but its ranges hold it
            f |= ICON | INFIX
        if ch.isspace():
            f |= SPACE
        if cat.startswith("P"):
            f |= IS_PUNCT
        if ch.isalnum() or ch == "_":
            f |= WORDCHAR
        if ch.isdecimal():
            f |= DECIMAL
        if ch.isascii() and ch.isalnum() or 0xA1 <= cp <= 0xFFFF:
            f |= URLCHAR
        if f:
            flags[cp] = f
    for chars, bit in ((_PUNCT_CHARS, AFFIX), (_QUOTES, AFFIX | QUOTE), (_CURRENCY, CURRENCY),
                       (_DATATROVE_PUNCT + _STERM, PUNCT), (_STERM, STERM), (_HYPHENS, HYPHEN),
                       (_HYPHENS + ".…+*^,:<>=/", INFIX)):
        for ch in chars:
            flags[ord(ch)] |= bit
    return flags


class WordTables:
    """The arrays ``chunk_tokens`` reads: ``flags`` uint16[0x110000] (character classes), the special cases
    (an open-addressing table over their code points' FNV-1a hashes, their code points and the lengths of
    their pieces) and the code points of the currencies and units that come off after a digit."""

    def __init__(self):
        self.flags = _character_flags()
        cases = list(SPECIAL_CASES.items())
        self.case_offsets = np.zeros(len(cases) + 1, np.int64)
        self.case_offsets[1:] = np.cumsum([len(k) for k, _ in cases])
        self.case_cps = np.array([ord(c) for k, _ in cases for c in k], np.int32)
        self.piece_offsets = np.zeros(len(cases) + 1, np.int64)
        self.piece_offsets[1:] = np.cumsum([len(v) for _, v in cases])
        self.piece_lengths = np.array([len(p) for _, v in cases for p in v], np.int32)
        size = 1 << (2 * len(cases)).bit_length()
        self.case_slots = np.full(size, -1, np.int32)
        for i, (k, _) in enumerate(cases):
            s = _fnv_cps(map(ord, k)) & (size - 1)
            while self.case_slots[s] >= 0:
                s = (s + 1) & (size - 1)
            self.case_slots[s] = i
        self.phrase_offsets = np.zeros(len(PHRASES) + 1, np.int64)
        self.phrase_offsets[1:] = np.cumsum([len(x) for x in PHRASES])
        self.phrase_cps = np.array([ord(c) for x in PHRASES for c in x], np.int32)
        self.unit_offsets = np.zeros(len(_AFTER_DIGIT) + 1, np.int64)
        self.unit_offsets[1:] = np.cumsum([len(u) for u in _AFTER_DIGIT])
        self.unit_cps = np.array([ord(c) for u in _AFTER_DIGIT for c in u], np.int32)

    def arrays(self) -> tuple:
        """The arrays in ``chunk_tokens``'s order."""
        return (self.flags, self.case_slots, self.case_offsets, self.case_cps, self.piece_offsets,
                self.piece_lengths, self.unit_offsets, self.unit_cps)

    def stats_arrays(self) -> tuple:
        """The arrays in ``preset_stats``'s order."""
        return self.arrays() + (self.phrase_offsets, self.phrase_cps)


@functools.lru_cache(maxsize=1)
def word_tables() -> WordTables:
    """The tables, made once per process (the character classes from gpucurate's cache: 0.3 s the first time)."""
    return WordTables()


@njit(nogil=True, cache=True)
def _case(cps, a, b, slots, case_offsets, case_cps):
    """The special case spelled by ``cps[a:b]``, or -1."""
    if b <= a:
        return -1
    h = np.uint64(0xCBF29CE484222325)
    for i in range(a, b):
        h = (h ^ np.uint64(cps[i])) * np.uint64(0x100000001B3)
    mask = slots.shape[0] - 1
    s = np.int64(h & np.uint64(mask))
    while slots[s] >= 0:
        k = slots[s]
        o, e = case_offsets[k], case_offsets[k + 1]
        if e - o == b - a:
            same = True
            for j in range(b - a):
                if case_cps[o + j] != cps[a + j]:
                    same = False
                    break
            if same:
                return k
        s = (s + 1) & mask
    return -1


@njit(nogil=True, cache=True)
def _digit(c):
    return 48 <= c <= 57


@njit(nogil=True, cache=True)
def _prefix(cps, a, b, flags):
    """Length of the prefix at ``cps[a:b]`` (spaCy's order of alternatives), 0 if none."""
    c = cps[a]
    f = flags[c]
    if c == 0xA7 or c == 37 or c == 61 or c == 0x2014 or c == 0x2013:  # § % = — –
        return 1
    if c == 43:  # +, unless a digit follows
        return 0 if a + 1 < b and _digit(cps[a + 1]) else 1
    if c == 46:  # a run of periods
        k = a + 1
        while k < b and cps[k] == 46:
            k += 1
        return k - a if k - a >= 2 else 0
    if f & (AFFIX | CURRENCY | ICON):
        return 1
    if b - a >= 3 and c == 85 and cps[a + 1] == 83 and cps[a + 2] == 36:  # US$
        return 3
    if b - a >= 2 and (c == 67 or c == 65) and cps[a + 1] == 36:  # C$ A$
        return 2
    return 0


@njit(nogil=True, cache=True)
def _after_digit(cps, i, b, unit_offsets, unit_cps):
    """Whether ``cps[i:b]`` is a currency or unit of ``_AFTER_DIGIT`` (none is longer than 5 or starts with a
    digit)."""
    n = b - i
    if n > 5 or _digit(cps[i]):
        return False
    for u in range(unit_offsets.shape[0] - 1):
        o, e = unit_offsets[u], unit_offsets[u + 1]
        if e - o == n:
            same = True
            for j in range(n):
                if unit_cps[o + j] != cps[i + j]:
                    same = False
                    break
            if same:
                return True
    return False


@njit(nogil=True, cache=True)
def _suffix_at(cps, a, i, b, flags, unit_offsets, unit_cps):
    """Whether ``cps[i:b]`` (within the string ``cps[a:b]``) is a suffix."""
    n = b - i
    c = cps[i]
    before = cps[i - 1] if i > a else -1
    if n == 1:
        f = flags[c]
        if f & (AFFIX | ICON) or c == 0x2014 or c == 0x2013:
            return True
        if before < 0:
            return False
        if c == 43:
            return _digit(before)
        if c == 46:
            if i - 2 >= a and cps[i - 2] == 0xB0 and (before == 70 or before == 102 or before == 67 or before == 99
                                                      or before == 75 or before == 107):
                return True
            g = flags[before]
            if _digit(before) or (g & LOWER) or (g & (AFFIX | QUOTE)) or before == 37 or before == 0xB2 or \
                    before == 45 or before == 43 or before == 124 or before == 40 or before == 63 or \
                    before == 58 or before == 41:
                return True
            if i - 2 >= a and (g & UPPER) and (flags[cps[i - 2]] & UPPER):
                return True
        if _digit(before) and (f & CURRENCY):
            return True
    elif c == 46:
        for j in range(i + 1, b):
            if cps[j] != 46:
                return False
        return True  # a run of periods
    elif n == 2 and ((c == 0x2026 and cps[i + 1] == 0x2026)
                     or ((c == 39 or c == 0x2019) and (cps[i + 1] == 115 or cps[i + 1] == 83))):
        return True  # …… 's 'S ’s ’S
    return before >= 0 and _digit(before) and _after_digit(cps, i, b, unit_offsets, unit_cps)


@njit(nogil=True, cache=True)
def _suffix(cps, a, b, flags, unit_offsets, unit_cps):
    """Length of the suffix of ``cps[a:b]`` that starts leftmost, 0 if none. Only a run of periods is
    longer than five characters."""
    last = cps[b - 1]
    if flags[last] & ALPHA:  # only 's or a unit after a digit end with a letter
        apostrophe = b - 2 >= a and (last == 115 or last == 83) and (cps[b - 2] == 39 or cps[b - 2] == 0x2019)
        digit = False
        for i in range(max(a, b - 6), b):
            if _digit(cps[i]):
                digit = True
        if not apostrophe and not digit:
            return 0
    r = b
    while r > a and cps[r - 1] == 46:
        r -= 1
    if b - r >= 2 and r < b - 5:
        return b - r
    for i in range(max(a, b - 5), b):
        if _suffix_at(cps, a, i, b, flags, unit_offsets, unit_cps):
            return b - i
    return 0


@njit(nogil=True, cache=True)
def _infix_at(cps, a, i, b, flags):
    """Length of an infix at ``cps[i]`` of the string ``cps[a:b]``, 0 if none."""
    c = cps[i]
    f = flags[c]
    if not (f & INFIX):
        return 0
    if c == 46 and i + 1 < b and cps[i + 1] == 46:
        k = i + 1
        while k < b and cps[k] == 46:
            k += 1
        return k - i
    if c == 0x2026 or f & ICON:
        return 1
    if i == a or i + 1 >= b:
        return 0
    before, after = cps[i - 1], cps[i + 1]
    g, h = flags[before], flags[after]
    if _digit(before) and (c == 43 or c == 45 or c == 42 or c == 94) and (_digit(after) or after == 45):
        return 1
    if c == 46 and (g & (LOWER | QUOTE)) and (h & (UPPER | QUOTE)):
        return 1
    if c == 44 and (g & ALPHA) and (h & ALPHA):
        return 1
    if (g & ALPHA) or _digit(before):
        if f & HYPHEN:
            k = i + 1
            if c == 45 and k < b and cps[k] == 45:  # -- and ---
                k += 1
                if k < b and cps[k] == 45:
                    k += 1
            elif c == 0x2014 and k < b and cps[k] == 0x2014:  # ——
                k += 1
            if k < b and flags[cps[k]] & ALPHA:
                return k - i
        if (c == 58 or c == 60 or c == 62 or c == 61 or c == 47) and (h & ALPHA):
            return 1
    return 0


@njit(nogil=True, cache=True)
def _is_url(cps, a, b, flags):
    """Whether ``cps[a:b]`` is a URL: [scheme://][user@]label.(label.)*tld[:port][/?#path]."""
    dot = False
    for k in range(a, b):
        if cps[k] == 46:
            dot = True
            break
    if not dot:
        return False
    p = a
    for k in range(a + 2, b - 2):  # a scheme of two or more word characters, + - .
        if cps[k] == 58 and cps[k + 1] == 47 and cps[k + 2] == 47:
            ok = True
            for j in range(a, k):
                c = cps[j]
                if not (flags[c] & WORDCHAR or c == 43 or c == 45 or c == 46):
                    ok = False
                    break
            if ok:
                p = k + 3
            break
    host = p
    for k in range(b - 1, p, -1):  # user@ (the last @)
        if cps[k] == 64:
            host = k + 1
            break
    end = host
    while end < b and not (cps[end] == 58 or cps[end] == 47 or cps[end] == 63 or cps[end] == 35):
        end += 1
    # labels: URL characters, _ and - inside; the last is the top-level domain (2-63 lower-case letters)
    labels = 0
    start = host
    for k in range(host, end + 1):
        if k < end and cps[k] != 46:
            continue
        n = k - start
        if k == end:
            if labels == 0 or n < 2 or n > 63:
                return False
            for j in range(start, k):
                if not (flags[cps[j]] & LOWER):
                    return False
        else:
            if n < 1 or n > 64 or not (flags[cps[start]] & URLCHAR) or not (flags[cps[k - 1]] & URLCHAR):
                return False
            for j in range(start, k):
                c = cps[j]
                if not (flags[c] & URLCHAR or c == 95 or c == 45):
                    return False
            labels += 1
        start = k + 1
    if end < b and cps[end] == 58:  # a port of 2-5 digits
        k = end + 1
        while k < b and _digit(cps[k]):
            k += 1
        if not 2 <= k - end - 1 <= 5:
            return False
        end = k
    return end == b or cps[end] == 47 or cps[end] == 63 or cps[end] == 35


@njit(nogil=True, cache=True)
def _emit(starts, ends, n, a, b):
    starts[n] = a
    ends[n] = b
    return n + 1


@njit(nogil=True, cache=True)
def _emit_case(k, a, piece_offsets, piece_lengths, starts, ends, n):
    for p in range(piece_offsets[k], piece_offsets[k + 1]):
        n = _emit(starts, ends, n, a, a + piece_lengths[p])
        a += piece_lengths[p]
    return n


@njit(nogil=True, cache=True)
def chunk_tokens(cps, a, b, flags, slots, case_offsets, case_cps, piece_offsets, piece_lengths, unit_offsets,
                 unit_cps, starts, ends, n, suffix_stack):
    """Append the tokens of the chunk ``cps[a:b]`` (no whitespace) to ``starts``/``ends`` (code point
    offsets) from index ``n``; return the new count. ``suffix_stack``: scratch of at least ``b - a`` ints."""
    # most chunks are ASCII letters only, digits only, or letters and one closing , ; : ! ? or .: no prefix,
    # infix or URL applies, and only that last character can come off
    letters = True
    digits = True
    for q in range(a, b - 1):
        c = cps[q]
        if not (65 <= c <= 90 or 97 <= c <= 122):
            letters = False
        if not _digit(c):
            digits = False
        if not letters and not digits:
            break
    c = cps[b - 1]
    if digits and _digit(c):
        return _emit(starts, ends, n, a, b)
    if letters and b - a >= 2 and (c == 44 or c == 59 or c == 58 or c == 33 or c == 63 or c == 46 or
                                   65 <= c <= 90 or 97 <= c <= 122):
        k = _case(cps, a, b, slots, case_offsets, case_cps)
        if k >= 0:
            return _emit_case(k, a, piece_offsets, piece_lengths, starts, ends, n)
        split = c == 44 or c == 59 or c == 58 or c == 33 or c == 63
        if c == 46:  # a period after a lower-case letter or two capitals
            before = cps[b - 2]
            split = 97 <= before <= 122 or (b - a >= 3 and 65 <= before <= 90 and 65 <= cps[b - 3] <= 90)
        if not split:
            return _emit(starts, ends, n, a, b)
        k = _case(cps, a, b - 1, slots, case_offsets, case_cps)
        n = _emit_case(k, a, piece_offsets, piece_lengths, starts, ends, n) if k >= 0 else \
            _emit(starts, ends, n, a, b - 1)
        return _emit(starts, ends, n, b - 1, b)
    first = n
    chunk_end = b
    k = _case(cps, a, b, slots, case_offsets, case_cps)  # the case spelled by cps[a:b] as it is now
    nsuf = 0
    last = -1
    while k < 0 and b > a and b - a != last:
        last = b - a
        pre = _prefix(cps, a, b, flags)
        if pre:
            k = _case(cps, a + pre, b, slots, case_offsets, case_cps)
            if k >= 0:
                n = _emit(starts, ends, n, a, a + pre)
                a += pre
                break
        suf = _suffix(cps, a + pre, b, flags, unit_offsets, unit_cps)
        if suf:
            k = _case(cps, a, b - suf, slots, case_offsets, case_cps)
            if k >= 0:
                suffix_stack[nsuf] = b - suf
                nsuf += 1
                b -= suf
                break
        if pre and suf and pre + suf <= b - a:
            n = _emit(starts, ends, n, a, a + pre)
            a += pre
            suffix_stack[nsuf] = b - suf
            nsuf += 1
            b -= suf
        elif pre:
            n = _emit(starts, ends, n, a, a + pre)
            a += pre
        elif suf:
            suffix_stack[nsuf] = b - suf
            nsuf += 1
            b -= suf
        if pre or suf:
            k = _case(cps, a, b, slots, case_offsets, case_cps)
    if b > a:
        if k >= 0:
            n = _emit_case(k, a, piece_offsets, piece_lengths, starts, ends, n)
        elif _is_url(cps, a, b, flags):
            n = _emit(starts, ends, n, a, b)
        else:
            start = a
            i = a
            while i < b:
                m = _infix_at(cps, a, i, b, flags)
                if m == 0:
                    i += 1
                    continue
                if i > start:
                    n = _emit(starts, ends, n, start, i)
                n = _emit(starts, ends, n, i, i + m)
                i += m
                start = i
            if start < b:
                n = _emit(starts, ends, n, start, b)
    # the suffixes, innermost first
    for s in range(nsuf - 1, -1, -1):
        n = _emit(starts, ends, n, suffix_stack[s], suffix_stack[s - 1] if s > 0 else chunk_end)
    return _merge_cases(cps, starts, ends, first, n, slots, case_offsets, case_cps, piece_offsets, piece_lengths)


@njit(nogil=True, cache=True)
def _merge_cases(cps, starts, ends, first, n, slots, case_offsets, case_cps, piece_offsets, piece_lengths):
    """Two to four consecutive tokens of ``starts/ends[first:n]`` (one chunk's: they touch) that spell a
    special case become its pieces; return the new count."""
    w = first
    i = first
    while i < n:
        k = -1
        j = min(n, i + 4)
        while j >= i + 2:
            k = _case(cps, starts[i], ends[j - 1], slots, case_offsets, case_cps)
            if k >= 0:
                break
            j -= 1
        if k >= 0 and piece_offsets[k + 1] - piece_offsets[k] <= j - i:
            a = starts[i]
            i = j
            w = _emit_case(k, a, piece_offsets, piece_lengths, starts, ends, w)
        else:
            starts[w], ends[w] = starts[i], ends[i]
            w += 1
            i += 1
    return w


@njit(nogil=True, cache=True)
def decode_utf8(data, start, end, cps, byte_at):
    """Code points of the UTF-8 bytes ``data[start:end]`` into ``cps``, each one's first byte into
    ``byte_at`` (and ``end`` after the last); return the count. Invalid bytes count as U+FFFD, one each."""
    n = 0
    i = start
    while i < end:
        c = np.int64(data[i])
        k = 1
        if c >= 0xF0 and i + 3 < end and c < 0xF8:
            c = ((c & 0x07) << 18) | ((np.int64(data[i + 1]) & 0x3F) << 12) | ((np.int64(data[i + 2]) & 0x3F) << 6) \
                | (np.int64(data[i + 3]) & 0x3F)
            k = 4
        elif c >= 0xE0 and i + 2 < end and c < 0xF0:
            c = ((c & 0x0F) << 12) | ((np.int64(data[i + 1]) & 0x3F) << 6) | (np.int64(data[i + 2]) & 0x3F)
            k = 3
        elif c >= 0xC0 and i + 1 < end and c < 0xE0:
            c = ((c & 0x1F) << 6) | (np.int64(data[i + 1]) & 0x3F)
            k = 2
        elif c >= 0x80:
            c = 0xFFFD
        cps[n] = c if c < 0x110000 else 0xFFFD
        byte_at[n] = i
        n += 1
        i += k
    byte_at[n] = end
    return n


#: chunks of at most this many Latin-1 characters are remembered with their tokens' lengths, in a direct-mapped
#: cache of ``CHUNK_CACHE_SLOTS`` (``chunk_cache``): words repeat, so most chunks are split once per call
CACHED_CHUNK = 16
CHUNK_CACHE_SLOTS = 1 << 16


@njit(nogil=True, cache=True)
def chunk_cache():
    """An empty cache of ``text_tokens``: per slot the chunk's characters (two words of eight bytes) and its
    length with its tokens' lengths (a byte each, at most seven tokens; 0: empty slot)."""
    return np.zeros((CHUNK_CACHE_SLOTS, 4), np.uint64)


@njit(nogil=True, cache=True)
def text_tokens(cps, m, flags, slots, case_offsets, case_cps, piece_offsets, piece_lengths, unit_offsets, unit_cps,
                starts, ends, scratch, cache):
    """The tokens of a text's code points ``cps[:m]`` into ``starts``/``ends`` (each at least ``m`` long);
    return the count. ``cache``: a ``chunk_cache()`` (a chunk's tokens depend on its characters alone)."""
    n = 0
    i = 0
    while i < m:
        if flags[cps[i]] & SPACE:
            i += 1
            continue
        j = i
        while j < m and not (flags[cps[j]] & SPACE):
            j += 1
        length = j - i
        slot = -1
        k0, k1, latin = np.uint64(0), np.uint64(0), False
        if length <= CACHED_CHUNK:
            k0, k1, latin = pack_short(cps, i, length)
        if latin:
            slot = np.int64(_mix(k0 ^ (k1 * _B) ^ np.uint64(length)) & np.uint64(CHUNK_CACHE_SLOTS - 1))
            got = cache[slot, 2]
            if np.int64(got >> np.uint64(56)) == length and cache[slot, 0] == k0 and cache[slot, 1] == k1:
                a = i
                got &= np.uint64((1 << 56) - 1)
                while got & np.uint64(0xFF):
                    b = a + np.int64(got & np.uint64(0xFF))
                    starts[n], ends[n] = a, b
                    n += 1
                    a = b
                    got >>= np.uint64(8)
                i = j
                continue
        first = n
        n = chunk_tokens(cps, i, j, flags, slots, case_offsets, case_cps, piece_offsets, piece_lengths, unit_offsets,
                         unit_cps, starts, ends, n, scratch)
        if slot >= 0 and n - first <= 7:  # remembered: the tokens' lengths (they tile the chunk)
            packed = np.uint64(length) << np.uint64(56)
            for t in range(first, n):
                packed |= np.uint64(ends[t] - starts[t]) << np.uint64(8 * (t - first))
            cache[slot, 0], cache[slot, 1], cache[slot, 2] = k0, k1, packed
        i = j
    return n


@njit(nogil=True, cache=True)
def word_spans(offsets, data, flags, slots, case_offsets, case_cps, piece_offsets, piece_lengths, unit_offsets,
               unit_cps):
    """Every text's tokens as byte spans: ``(counts int64[n], starts int64[t], ends int64[t])`` (for tests and
    the benchmark; the statistics kernels keep a text's tokens only while they use them)."""
    n_docs = offsets.shape[0] - 1
    longest = 1
    for d in range(n_docs):
        longest = max(longest, offsets[d + 1] - offsets[d] + 1)
    cps = np.empty(longest, np.int64)
    byte_at = np.empty(longest + 1, np.int64)
    ts = np.empty(longest, np.int64)
    te = np.empty(longest, np.int64)
    scratch = np.empty(longest, np.int64)
    cache = chunk_cache()
    counts = np.zeros(n_docs, np.int64)
    out_s = np.empty(offsets[n_docs] - offsets[0] + 1, np.int64)
    out_e = np.empty(offsets[n_docs] - offsets[0] + 1, np.int64)
    t = 0
    for d in range(n_docs):
        m = decode_utf8(data, offsets[d], offsets[d + 1], cps, byte_at)
        k = text_tokens(cps, m, flags, slots, case_offsets, case_cps, piece_offsets, piece_lengths, unit_offsets,
                        unit_cps, ts, te, scratch, cache)
        for j in range(k):
            out_s[t] = byte_at[ts[j]]
            out_e[t] = byte_at[te[j]]
            t += 1
        counts[d] = k
    return counts, out_s[:t], out_e[:t]


#: columns of ``preset_stats``: datatrove's values, each as its filter computes it
PRESET_STATS = (
    # GopherQualityFilter
    "gopher_words", "gopher_mean_word_length", "gopher_hash_ratio", "gopher_ellipsis_ratio",
    "gopher_bullet_lines", "gopher_ellipsis_lines", "gopher_alpha_words", "gopher_stop_words",
    # GopherRepetitionFilter
    "dup_para_frac", "dup_para_char_frac", "dup_line_frac", "dup_line_char_frac",
    "top_2_gram", "top_3_gram", "top_4_gram",
    "dup_5_gram", "dup_6_gram", "dup_7_gram", "dup_8_gram", "dup_9_gram", "dup_10_gram",
    # FineWebQualityFilter
    "fineweb_lines", "line_punct_ratio", "short_line_ratio", "char_dup_ratio", "list_ratio",
    # C4QualityFilter
    "c4_sentences", "c4_lorem_ipsum", "c4_curly_bracket",
)
_B = np.uint64(0x100000001B3)


@njit(nogil=True, cache=True, inline="always")
def _mix(h):
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    h ^= h >> np.uint64(33)
    return h


@njit(nogil=True, cache=True)
def _prefix_hashes(cps, m, out):
    """``out[j]``: the polynomial hash of ``cps[:j]`` for ``j <= m``, ``sum (cps[i] + 1) * B^(j - 1 - i)`` mod 2^64
    (``_span_hash`` gives any span's from two of them)."""
    h = np.uint64(0)
    out[0] = h
    for j in range(m):
        h = h * _B + np.uint64(cps[j] + 1)
        out[j + 1] = h


@njit(nogil=True, cache=True, inline="always")
def _span_hash(prefix, powers, a, b):
    """The polynomial hash of ``cps[a:b]`` from its prefix hashes (``_prefix_hashes``) and ``powers[j] = B^j``."""
    return prefix[b] - prefix[a] * powers[b - a]


@njit(nogil=True, cache=True, inline="always")
def _insert(keys, vals, stamp, now, key, mask):
    """Open addressing over the first ``mask + 1`` slots (a power of two: a text's table stays as small as its
    text, in cache): the slot of ``key`` (a 64-bit hash), new when ``stamp[slot] != now``; return
    ``(slot, is_new)``; keys are mixed already."""
    s = np.int64(key & np.uint64(mask))
    while stamp[s] == now:
        if keys[s] == key:
            return s, False
        s = (s + 1) & mask
    stamp[s] = now
    keys[s] = key
    vals[s] = 0
    return s, True


@njit(nogil=True, cache=True)
def _mask_for(entries, size):
    """The mask of the smallest power-of-two table (at most ``size``) at most half full with ``entries``."""
    m = 16
    while m < 2 * entries and m < size:
        m *= 2
    return m - 1


@njit(nogil=True, cache=True, inline="always")
def _strip(cps, a, b, flags):
    while a < b and flags[cps[a]] & SPACE:
        a += 1
    while b > a and flags[cps[b - 1]] & SPACE:
        b -= 1
    return a, b


@njit(nogil=True, cache=True, inline="always")
def _is_line_break(c):
    """Python's ``splitlines`` breaks: \\n \\r \\v \\f \\x1c-\\x1e \\x85 \\u2028 \\u2029 (\\r\\n is one)."""
    return c == 10 or c == 13 or c == 11 or c == 12 or 28 <= c <= 30 or c == 0x85 or c == 0x2028 or c == 0x2029


@njit(nogil=True, cache=True)
def _count_dups(prefix, powers, starts, ends, k, keys, vals, stamp, now):
    """``find_duplicates`` of the strings ``cps[starts[i]:ends[i]]`` (``prefix``: their text's prefix hashes):
    (repeated elements, their characters)."""
    mask = _mask_for(k, keys.shape[0])
    elems = 0
    chars = 0
    for i in range(k):
        h = _mix(_span_hash(prefix, powers, starts[i], ends[i]) ^ np.uint64(ends[i] - starts[i]))
        _, new = _insert(keys, vals, stamp, now, h, mask)
        if not new:
            elems += 1
            chars += ends[i] - starts[i]
    return elems, chars


@njit(nogil=True, cache=True, inline="always")
def _is_phrase(cps, a, b, k, phrase_offsets, phrase_cps):
    """Whether ``cps[a:b]`` is phrase ``k`` of ``PHRASES``."""
    o, e = phrase_offsets[k], phrase_offsets[k + 1]
    if b - a != e - o:
        return False
    for j in range(b - a):
        if cps[a + j] != phrase_cps[o + j]:
            return False
    return True


#: the lower-case ASCII letters that start Gopher's stop words (bit ``c - 97``)
_STOP_FIRSTS = sum(1 << (ord(x[0]) - 97) for x in STOP_WORDS)
#: C4's phrases by their first letter: bit ``k`` of ``_PHRASE_FIRSTS[c - 97]`` for ``PHRASES[k]`` starting with
#: ``c`` (l, j, t, p, c, u), and their second letter (the same for the phrases of one first letter)
_PHRASE_FIRSTS = np.array([sum(1 << k for k in range(_LOREM, _EDIT) if PHRASES[k][0] == chr(97 + c))
                           for c in range(26)], np.int64)
_PHRASE_SECONDS = np.array([next((ord(x[1]) for x in PHRASES[_LOREM:_EDIT] if x[0] == chr(97 + c)), 0)
                            for c in range(26)], np.int64)
assert all(len({x[1] for x in PHRASES[_LOREM:_EDIT] if x[0] == f}) == 1 for f in "ljtpcu")


@njit(nogil=True, cache=True)
def _line_phrases(line, n, phrase_offsets, phrase_cps):
    """Which of C4's phrases ``line[:n]`` holds, ASCII capitals lowered (bit ``k`` for ``PHRASES[k]``, lorem
    ipsum to the policy phrases), and bit 0 for a curly bracket, in one pass."""
    found = 0
    for i in range(n):
        c = line[i]
        if c == 123:
            found |= 1
            continue
        if 65 <= c <= 90:
            c += 32
        if c < 97 or c > 122 or i + 1 >= n:
            continue
        second = line[i + 1] + 32 if 65 <= line[i + 1] <= 90 else line[i + 1]
        if second != _PHRASE_SECONDS[c - 97]:
            continue
        phrases = _PHRASE_FIRSTS[c - 97]
        for k in range(_LOREM, _EDIT):
            o, e = phrase_offsets[k], phrase_offsets[k + 1]
            if not (phrases >> k) & 1 or i + e - o > n:
                continue
            same = True
            for j in range(1, e - o):
                x = line[i + j]
                if 65 <= x <= 90:
                    x += 32
                if x != phrase_cps[o + j]:
                    same = False
                    break
            if same:
                found |= 1 << k
    return found


@njit(nogil=True, cache=True)
def _sentences(cps, starts, ends, t0, t1, flags):
    """Sentences of the tokens ``t0:t1`` of one line by spaCy's sentencizer: a token that is not punctuation,
    after a sentence terminator, starts a new one; a run of whitespace between tokens other than one space
    is a token of its own."""
    count = 0
    seen_period = False
    for t in range(t0, t1):
        if t == t0:
            count = 1
        elif seen_period and (starts[t] - ends[t - 1] > 1 or (starts[t] > ends[t - 1] and cps[ends[t - 1]] != 32)):
            count += 1  # a whitespace token
            seen_period = False
        s, e = starts[t], ends[t]
        terminator = e - s == 1 and (flags[cps[s]] & STERM) != 0
        punct = True
        for q in range(s, e):
            if not (flags[cps[q]] & IS_PUNCT):
                punct = False
                break
        if seen_period and not punct and not terminator:
            count += 1
            seen_period = False
        elif terminator:
            seen_period = True
    return count


@njit(nogil=True, cache=True)
def _citation_end(cps, i, b, flags, phrase_offsets, phrase_cps):
    """End of a citation at ``cps[i]`` (``[`` digits ``]``, ``[edit]``, ``[citation needed]``), else -1."""
    if cps[i] != 91:
        return -1
    j = i + 1
    while j < b and flags[cps[j]] & DECIMAL:
        j += 1
    if j < b and cps[j] == 93:
        return j + 1
    for k in (_EDIT, _CITATION):
        n = phrase_offsets[k + 1] - phrase_offsets[k]
        if i + n <= b and _is_phrase(cps, i, i + n, k, phrase_offsets, phrase_cps):
            return i + n
    return -1


@njit(nogil=True, cache=True)
def _c4(cps, m, flags, tables, phrase_offsets, phrase_cps, ts, te, k, line, starts, ends, scratch, cache):
    """C4QualityFilter over the lines of ``cps[:m]`` (its tokens ``ts``/``te[:k]``): (sentences of the kept
    lines, lorem ipsum, curly bracket); a flag is 1.0 when a kept line has it (the filter stops at the
    first). ``line``, ``starts``, ``ends``, ``scratch``: for a line that loses citations, tokenized again."""
    slots, case_offsets, case_cps, piece_offsets, piece_lengths, unit_offsets, unit_cps = tables
    sentences = 0
    t = 0  # the first token not before the line
    i = 0
    while i < m:
        j = i
        while j < m and not _is_line_break(cps[j]):
            j += 1
        a, b = _strip(cps, i, j, flags)
        i = j + 2 if j + 1 < m and cps[j] == 13 and cps[j + 1] == 10 else j + 1
        while t < k and ts[t] < a:
            t += 1
        if b <= a:
            continue
        end = cps[b - 1]  # the line ends in terminal punctuation, or in a citation that may hide one
        if not (end == 46 or end == 63 or end == 33 or end == 34 or end == 39 or end == 93):
            continue
        words = 0  # the line's words (str.split), before citations go; none may pass 1000 characters
        longest = 0
        q = a
        while q < b:
            if flags[cps[q]] & SPACE:
                q += 1
                continue
            r = q
            while r < b and not (flags[cps[r]] & SPACE):
                r += 1
            words += 1
            longest = max(longest, r - q)
            q = r
        if longest > 1000:
            continue
        n = 0  # the line without citations
        q = a
        while q < b:
            c = _citation_end(cps, q, b, flags, phrase_offsets, phrase_cps) if cps[q] == 91 else -1
            if c >= 0:
                q = c
                continue
            line[n] = cps[q]
            n += 1
            q += 1
        last = line[n - 1] if n else 0
        if not (last == 46 or last == 63 or last == 33 or last == 34 or last == 39):
            continue
        if n >= 3 and line[n - 2] == 46 and line[n - 3] == 46 and last == 46:
            continue
        if words < 3:
            continue
        found = _line_phrases(line, n, phrase_offsets, phrase_cps)
        if found & 1 << _LOREM:
            return sentences, 1.0, 0.0
        if found & 1 << _JAVASCRIPT:
            continue
        if found & 1:  # a curly bracket
            return sentences, 0.0, 1.0
        if found:  # a policy phrase
            continue
        if n == b - a:  # no citation: the text's own tokens of the line
            t1 = t
            while t1 < k and te[t1] <= b:
                t1 += 1
            sentences += _sentences(cps, ts, te, t, t1, flags)
        else:
            kn = text_tokens(line, n, flags, slots, case_offsets, case_cps, piece_offsets, piece_lengths, unit_offsets,
                             unit_cps, starts, ends, scratch, cache)
            sentences += _sentences(line, starts, ends, 0, kn, flags)
    return sentences, 0.0, 0.0


@njit(nogil=True, cache=True)
def _lines_split(cps, a, b, starts, ends, min_breaks):
    """``re.split("\\n{min_breaks,}", text)`` of ``cps[a:b]`` into ``starts``/``ends``; return the count."""
    k = 0
    s = a
    i = a
    while i < b:
        if cps[i] == 10:
            j = i
            while j < b and cps[j] == 10:
                j += 1
            if j - i >= min_breaks:
                starts[k], ends[k] = s, i
                k += 1
                s = j
            i = j
        else:
            i += 1
    starts[k], ends[k] = s, b
    return k + 1


@njit(nogil=True, cache=True)
def preset_stats(offsets, data, flags, slots, case_offsets, case_cps, piece_offsets, piece_lengths, unit_offsets,
                 unit_cps, phrase_offsets, phrase_cps, gopher=True, c4=True, fineweb=True):
    """``float64[n, len(PRESET_STATS)]``: datatrove's values of its Gopher, FineWeb and C4 filters for each
    text (NaN where datatrove would divide by zero: the rule does not apply; the columns of a preset not
    asked for stay NaN). Lengths are in code points, as Python's ``len``."""
    tables = (slots, case_offsets, case_cps, piece_offsets, piece_lengths, unit_offsets, unit_cps)
    n_docs = offsets.shape[0] - 1
    out = np.full((n_docs, 29), np.nan)
    longest = 2
    for d in range(n_docs):
        longest = max(longest, offsets[d + 1] - offsets[d] + 2)
    cps = np.empty(longest, np.int64)
    byte_at = np.empty(longest + 1, np.int64)
    ts = np.empty(longest, np.int64)
    te = np.empty(longest, np.int64)
    es = np.empty(longest, np.int64)
    ee = np.empty(longest, np.int64)
    scratch = np.empty(longest, np.int64)
    line = np.empty(longest, np.int64)
    tok_key = np.empty(longest, np.uint64)
    gram_key = np.empty(longest, np.uint64)
    gram_len = np.empty(longest, np.int64)
    joined_at = np.empty(longest + 1, np.int64)  # each token's start in the text's tokens joined without spaces
    joined_hash = np.zeros(longest + 1, np.uint64)  # polynomial hashes of that joined text's prefixes
    text_hash = np.empty(longest + 1, np.uint64)  # and of the text's
    powers = np.ones(longest + 1, np.uint64)  # B^j
    for j in range(1, longest + 1):
        powers[j] = powers[j - 1] * _B
    cand = np.empty(longest, np.int64)  # positions that may start a repeated n-gram, ascending
    slot_at = np.empty(longest, np.int64)
    size = _mask_for(longest, 1 << 62) + 1  # a text's tables use the first slots of these
    keys = np.empty(size, np.uint64)
    vals = np.empty(size, np.int64)
    first = np.empty(size, np.int64)
    stamp = np.zeros(size, np.int64)
    cache = chunk_cache()
    now = 0
    for d in range(n_docs):
        m = decode_utf8(data, offsets[d], offsets[d + 1], cps, byte_at)
        k = text_tokens(cps, m, flags, slots, case_offsets, case_cps, piece_offsets, piece_lengths, unit_offsets,
                        unit_cps, ts, te, scratch, cache)
        if gopher or fineweb:  # the repeated lines and paragraphs
            _prefix_hashes(cps, m, text_hash)
        if gopher:
            # Gopher quality: words that are not all punctuation, their mean length, words with a letter, stop words
            nonsym = 0
            nonsym_chars = 0
            alpha = 0
            stop_bits = 0
            x = 0
            h = np.uint64(0)
            for t in range(k):
                s, e = ts[t], te[t]
                symbol = True
                letter = False
                joined_at[t] = x
                for q in range(s, e):
                    c = cps[q]
                    f = flags[c]
                    if not (f & PUNCT):
                        symbol = False
                    if f & ALPHA:
                        letter = True
                    h = h * _B + np.uint64(c + 1)
                    joined_hash[x + 1] = h
                    x += 1
                if not symbol:
                    nonsym += 1
                    nonsym_chars += e - s
                if letter:
                    alpha += 1
                if e - s <= 4 and 97 <= cps[s] <= 122 and (_STOP_FIRSTS >> (cps[s] - 97)) & 1:
                    for w in range(8):
                        if _is_phrase(cps, s, e, w, phrase_offsets, phrase_cps):
                            stop_bits |= 1 << w
                tok_key[t] = _mix(_span_hash(joined_hash, powers, joined_at[t], x) ^ np.uint64(e - s))
            joined_at[k] = x
            out[d, 0] = nonsym
            if nonsym:
                out[d, 1] = nonsym_chars / nonsym
            hashes = 0
            ellipses = 0
            q = 0
            while q < m:
                c = cps[q]
                if c == 35:
                    hashes += 1
                elif c == 0x2026:
                    ellipses += 1
                elif c == 46 and q + 2 < m and cps[q + 1] == 46 and cps[q + 2] == 46:
                    ellipses += 1
                    q += 3
                    continue
                q += 1
            if k:
                out[d, 2] = hashes / k
                out[d, 3] = ellipses / k
                out[d, 6] = alpha / k
            out[d, 7] = (stop_bits & 1) + (stop_bits >> 1 & 1) + (stop_bits >> 2 & 1) + (stop_bits >> 3 & 1) + \
                (stop_bits >> 4 & 1) + (stop_bits >> 5 & 1) + (stop_bits >> 6 & 1) + (stop_bits >> 7 & 1)
            # lines of str.splitlines: bullets after left whitespace, ellipses before right whitespace
            nlines = 0
            bullets = 0
            end_ellipsis = 0
            i = 0
            while i < m:
                j = i
                while j < m and not _is_line_break(cps[j]):
                    j += 1
                nlines += 1
                a, b = _strip(cps, i, j, flags)
                if b > a and (cps[a] == 0x2022 or cps[a] == 45):
                    bullets += 1
                if b > a and (cps[b - 1] == 0x2026 or (b - a >= 3 and cps[b - 1] == 46 and cps[b - 2] == 46
                                                       and cps[b - 3] == 46)):
                    end_ellipsis += 1
                i = j + 2 if j + 1 < m and cps[j] == 13 and cps[j + 1] == 10 else j + 1
            if nlines:
                out[d, 4] = bullets / nlines
                out[d, 5] = end_ellipsis / nlines
            # Gopher repetition: paragraphs (of the stripped text) and lines, repeated elements and characters
            a, b = _strip(cps, 0, m, flags)
            np_ = _lines_split(cps, a, b, es, ee, 2)
            now += 1
            dup, chars = _count_dups(text_hash, powers, es, ee, np_, keys, vals, stamp, now)
            out[d, 8] = dup / np_
            if m:
                out[d, 9] = chars / m
            nl_ = _lines_split(cps, 0, m, es, ee, 1)
            now += 1
            dup, chars = _count_dups(text_hash, powers, es, ee, nl_, keys, vals, stamp, now)
            out[d, 10] = dup / nl_
            if m:
                out[d, 11] = chars / m
            # the most frequent word 2-, 3-, 4-gram (joined by spaces): its characters times its count. Only an
            # n-gram whose (n - 1)-gram repeats can repeat, so 3- and 4-grams are counted at the positions of the
            # repeated 2- and 3-grams alone; when no n-gram repeats, the first one wins, with a count of 1
            mask = _mask_for(k, keys.shape[0])
            for i in range(k):
                cand[i] = i
                gram_key[i] = tok_key[i]
                gram_len[i] = te[i] - ts[i]
            nc = k
            for n in range(2, 5):
                col = 10 + n
                if k - n + 1 <= 0:
                    out[d, col] = 0.0
                    continue
                now += 1
                counted = 0
                while counted < nc and cand[counted] <= k - n:
                    i = cand[counted]
                    h = _mix(gram_key[i] * _B + tok_key[i + n - 1])
                    gram_key[i] = h
                    gram_len[i] += 1 + te[i + n - 1] - ts[i + n - 1]
                    slot, new = _insert(keys, vals, stamp, now, h ^ np.uint64(n), mask)
                    if new:
                        first[slot] = i
                    vals[slot] += 1
                    slot_at[i] = slot
                    counted += 1
                best_count = 1
                best_first = 0
                best_len = joined_at[n] + n - 1
                nc = 0
                for c in range(counted):
                    i = cand[c]
                    slot = slot_at[i]
                    if vals[slot] > 1:
                        if vals[slot] > best_count or (vals[slot] == best_count and first[slot] < best_first):
                            best_count, best_first, best_len = vals[slot], first[slot], gram_len[i]
                        cand[nc] = i
                        nc += 1
                out[d, col] = best_len * best_count / m
            # duplicated 5- to 10-grams (joined without spaces), each repeat skipping its own words. Two equal
            # n-grams (n >= 5) start with the same `shortest` characters, the length of the text's shortest 5-gram:
            # the scan visits only the positions whose first `shortest` characters occur at another position (the
            # others can neither repeat nor be repeated)
            nc = 0
            if k >= 5:
                shortest = joined_at[5]
                for i in range(k - 4):
                    shortest = min(shortest, joined_at[i + 5] - joined_at[i])
                now += 1
                for i in range(k - 4):
                    a = joined_at[i]
                    start = _mix(_span_hash(joined_hash, powers, a, a + shortest))
                    slot, _ = _insert(keys, vals, stamp, now, start, mask)
                    vals[slot] += 1
                    slot_at[i] = slot
                for i in range(k - 4):
                    if vals[slot_at[i]] > 1:
                        cand[nc] = i
                        nc += 1
            for n in range(5, 11):
                now += 1
                repeated = 0
                after = 0  # where the scan goes on: past a repeat's words
                for c in range(nc):
                    i = cand[c]
                    if i > k - n:
                        break
                    if i < after:
                        continue
                    a, b = joined_at[i], joined_at[i + n]
                    length = b - a
                    h = _mix(_span_hash(joined_hash, powers, a, b) ^ np.uint64(length))
                    _, new = _insert(keys, vals, stamp, now, h, mask)
                    if new:
                        after = i + 1
                    else:
                        repeated += length
                        after = i + n
                if m:
                    out[d, 10 + n] = repeated / m
        if fineweb:
            # FineWeb: the non-blank lines of text.split("\n")
            newlines = 0
            for q in range(m):
                if cps[q] == 10:
                    newlines += 1
            kept = 0
            s = 0
            while s <= m:  # every "\n" ends a line (runs of them give empty ones)
                e = s
                while e < m and cps[e] != 10:
                    e += 1
                a, b = _strip(cps, s, e, flags)
                if b > a:
                    es[kept], ee[kept] = s, e
                    kept += 1
                s = e + 1
            out[d, 21] = kept
            if kept:
                punct = 0
                short = 0
                for t in range(kept):
                    if flags[cps[ee[t] - 1]] & STERM:
                        punct += 1
                    if ee[t] - es[t] <= 30:
                        short += 1
                out[d, 22] = punct / kept
                out[d, 23] = short / kept
                now += 1
                _, chars = _count_dups(text_hash, powers, es, ee, kept, keys, vals, stamp, now)
                if m - newlines:
                    out[d, 24] = chars / (m - newlines)
                if k:
                    out[d, 25] = newlines / k
                elif newlines:
                    out[d, 25] = np.inf
        if c4:
            sentences, lorem, curly = _c4(cps, m, flags, tables, phrase_offsets, phrase_cps, ts, te, k, line, es, ee,
                                          scratch, cache)
            out[d, 26] = sentences
            out[d, 27] = lorem
            out[d, 28] = curly
    return out
