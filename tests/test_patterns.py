"""Patterns, term lists and PII presets of the contamination gate: every preset against valid and invalid
values, the checksum kernels against plain Python, term lists in multi-byte UTF-8 and CJK, the actions and
their byte offsets, the report, and the same results whatever the partitioning."""

import json
import random

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from conftest import read_annotations, write_jsonl
from gpucurate.cli import main
from gpucurate.config import ContaminationConfig, parse_rules
from gpucurate.errors import ConfigError
from gpucurate.kernels.patterns import iban_ends, luhn_valid
from gpucurate.stages.patterns import IBAN_LENGTHS, _IBAN_TABLE, RuleSet, mask, regex_spans
from gpucurate.workflows.run import run

Q = {"run.progress": False}

#: each preset: values it must find (exactly that span) and look-alikes it must not
PRESETS = {
    "email": (["john.doe@example.com", "a.b+tag@mail.example.co.uk", "x_9@sub-domain.org"],
              ["user@localhost", "foo@bar", "@handle", "a@b.c", "name at example dot com", "mail@.com"]),
    "phone": (["+1 415-555-0134", "+44 20 7946 0958", "(415) 555-0134", "020 7946 0958", "+7 495 123 45 67",
               "8 (495) 123-45-67", "+49 30 901820", "01 42 68 53 00"],
              ["1987-03-26", "12345", "1,234,567", "3.14159", "4111111111111111", "555-0134", "+12"]),
    "ipv4": (["192.168.0.1", "8.8.8.8", "255.255.255.255"],
             ["256.1.1.1", "1.2.3", "1.2.3.4.5", "v2.10.3.1.0", "3.14.15.92.65"]),
    "ipv6": (["2001:db8::1", "fe80::1ff:fe23:4567:890a", "2001:0db8:85a3:0000:0000:8a2e:0370:7334", "::1"],
             ["12:30:45", "a::b", "std::vector", "dead:beef"]),
    "card": (["4111 1111 1111 1111", "5500-0000-0000-0004", "378282246310005", "6011111111111117"],
             ["4111 1111 1111 1112", "5500-0000-0000-0005", "1234567812345678", "378282246310006",
              "0000 0000 0000 0000"]),
    "iban": (["DE89 3704 0044 0532 0130 00", "GB82WEST12345698765432", "FR1420041010050500013M02606",
              "NL91 ABNA 0417 1643 00"],
             ["DE89 3704 0044 0532 0130 01", "GB83WEST12345698765432", "ZZ89370400440532013000",
              "DE8937040044053201300", "NL92ABNA0417164300"]),
    "secret": (["AKIAIOSFODNN7EXAMPLE", "ghp_" + "a1B2c3D4e5" * 3 + "f6G7h8", "-----BEGIN RSA PRIVATE KEY-----",
                "xoxb-123456789012-abcdefghij", "AIza" + "Sy" + "A" * 33, "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"],
               ["AKIA123", "ghp_short", "-----BEGIN PUBLIC KEY-----", "sk_live_short"]),
}


def _luhn(digits: str) -> bool:
    total = 0
    for k, c in enumerate(reversed(digits)):
        d = int(c) * (2 if k % 2 else 1)
        total += d - 9 if d > 9 else d
    return 13 <= len(digits) <= 19 and total % 10 == 0


def _iban(text: str) -> bool:
    s = "".join(c for c in text if c.isalnum())
    if IBAN_LENGTHS.get(s[:2]) != len(s) or not s[2:4].isdigit():
        return False
    return int("".join(str(int(c, 36)) for c in s[4:] + s[:4])) % 97 == 1


def _found(rules: RuleSet, texts: list[str]) -> list[list[tuple[str, str]]]:
    """Per text, its matches as (rule, matched text)."""
    m = rules.match(pa.array(texts, pa.large_string()))
    out = [[] for _ in texts]
    for r, k, s, e in zip(m.rows, m.rule, m.start, m.end):
        out[r].append((rules.rules[k].name, texts[r].encode()[s:e].decode()))
    return out


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_each_preset_finds_its_values_and_not_look_alikes(preset):
    rules = RuleSet(ContaminationConfig(pii=[preset]))
    valid, invalid = PRESETS[preset]
    texts = [f"Contact: {v}. Thanks, Ж." for v in valid] + [f"Contact: {v}. Thanks, Ж." for v in invalid]
    found = _found(rules, texts)
    for v, f in zip(valid, found):
        assert f == [(preset, v)], (v, f)
    for v, f in zip(invalid, found[len(valid):]):
        assert f == [], (v, f)


def test_all_presets_together_keep_the_most_specific_match():
    rules = RuleSet(ContaminationConfig(pii=["all"]))
    text = ("IBAN DE89 3704 0044 0532 0130 00, card 4111 1111 1111 1111, mail ann@example.org, "
            "call +1 415-555-0134 from 10.0.0.7; revenue 1,234.5 mln dlrs in 1987-03-26")
    assert _found(rules, [text])[0] == [("iban", "DE89 3704 0044 0532 0130 00"), ("card", "4111 1111 1111 1111"),
                                        ("email", "ann@example.org"), ("phone", "+1 415-555-0134"),
                                        ("ipv4", "10.0.0.7")]


def test_values_beside_other_figures_end_where_the_value_does():
    """In financial tables a value touches other numbers: a country's fixed number length, a card network's
    length and a decimal's integer part tell where it ends; a number of no known shape is not taken."""
    rules = RuleSet(ContaminationConfig(pii=["all"]))
    texts = ["Sales +1 415-555-0134 665.5 mln vs 446.2 mln", "extended by +44 20 7946 0958 11 days",
             "call +44 (0)20 7946 0958 now", "Revs 110.0 mln vs 4111 1111 1111 1111 85.4 mln",
             "Shr 34 4111 1111 1111 1111 cts", "ref +1 4155550134567 x", "Amex 3782 822463 10005, Visa 4222222222222.",
             "Avg shrs 17.6 4111 1111 1111 1111 mln", "rate 1.4111 1111 1111 1111 pct", "in 1987 +44 20 2288 2633 1986."]
    assert _found(rules, texts) == [[("phone", "+1 415-555-0134")], [("phone", "+44 20 7946 0958")],
                                    [("phone", "+44 (0)20 7946 0958")], [("card", "4111 1111 1111 1111")],
                                    [("card", "4111 1111 1111 1111")], [],
                                    [("card", "3782 822463 10005"), ("card", "4222222222222")],
                                    [("card", "4111 1111 1111 1111")], [], [("phone", "+44 20 2288 2633")]]


def test_figures_beside_cards_and_quote_ranges():
    """Held-out Reuters (issue 50): a card number after another figure is found; a range of two figures
    joined by a slash or a hyphen, the second with a leading 0 (a commodity quote), is no phone number."""
    rules = RuleSet(ContaminationConfig(pii=["all"]))
    cards = ["4025989937919188", "5126693770355766"]
    assert all(_luhn(c) for c in cards)
    texts = [f"Shr 40 {cards[0]} cts", f"in 1986 {cards[1]}", "Shr 40 4111 1111 1111 1111 cts",
             "prices 0650/0700 and 0660/0710 dlrs", "quoted 0430-0010 today", "call 030/1234567 or 0171-2345678"]
    assert _found(rules, texts) == [[("card", cards[0])], [("card", cards[1])], [("card", "4111 1111 1111 1111")],
                                    [], [], [("phone", "030/1234567"), ("phone", "0171-2345678")]]


def test_checksum_kernels_match_plain_python():
    rng = random.Random(3)
    numbers = ["".join(rng.choice("0123456789") for _ in range(rng.randint(12, 20))) for _ in range(3000)]
    numbers += ["4111111111111111", "378282246310005"]
    data = np.frombuffer("|".join(numbers).encode(), np.uint8)
    starts = np.cumsum([0] + [len(n) + 1 for n in numbers[:-1]]).astype(np.int64)
    ends = starts + np.array([len(n) for n in numbers], np.int64)
    got = luhn_valid(data, starts, ends)
    assert got.tolist() == [_luhn(n) for n in numbers] and 200 < got.sum() < 500  # about one in ten
    # IBANs: valid ones with one character changed fail unless the change keeps the checksum
    base = ["DE89370400440532013000", "GB82WEST12345698765432", "FR1420041010050500013M02606",
            "NL91ABNA0417164300", "NO9386011117947"]
    ibans = []
    for _ in range(2000):
        s = list(rng.choice(base))
        s[rng.randrange(2, len(s))] = rng.choice("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ")
        ibans.append("".join(s))
    ibans += base
    data = np.frombuffer("|".join(ibans).encode(), np.uint8)
    starts = np.cumsum([0] + [len(n) + 1 for n in ibans[:-1]]).astype(np.int64)
    ends = starts + np.array([len(n) for n in ibans], np.int64)
    got = iban_ends(data, starts, ends, _IBAN_TABLE) >= 0
    assert got.tolist() == [_iban(s) for s in ibans] and got[-len(base):].all()


def test_regex_spans_are_byte_offsets_of_multi_byte_text():
    texts = pa.array(["ключ 7707083893 и 7707083894", "", "нет", "北京 1234567890"], pa.large_string())
    rows, start, end = regex_spans(texts, r"\b\d{10}\b")
    assert rows.tolist() == [0, 0, 3]
    got = [texts[int(r)].as_py().encode()[s:e].decode() for r, s, e in zip(rows, start, end)]
    assert got == ["7707083893", "7707083894", "1234567890"]
    # the marks are bytes the partition does not hold: a text with \x01 and \x02 still works
    texts = pa.array(["a\x01b\x02 42 x", "43"], pa.large_string())
    rows, start, end = regex_spans(texts, r"\d+")
    assert [texts[int(r)].as_py()[s:e] for r, s, e in zip(rows, start, end)] == ["42", "43"]


def test_term_lists_match_whole_words_in_any_script(tmp_path):
    terms = tmp_path / "customers.txt"
    terms.write_text("# customers\nAcme Corp\nЗАО Ромашка\n北京大学\nMüller GmbH\n\n", encoding="utf-8")
    rules = RuleSet(ContaminationConfig(terms=[f"customers={terms}"]))
    texts = ["Offer for ACME corp. and Acmeville", "Договор с зао «Ромашка» подписан", "我在北京大学读书",
             "MÜLLER   GmbH, Müller GmbHx", "Acme Corporation, Ромашкаа"]
    assert _found(rules, texts) == [[("customers", "ACME corp")], [("customers", "зао «Ромашка")],
                                    [("customers", "北京大学")], [("customers", "MÜLLER   GmbH")], []]


def _docs(tmp_path, texts, name="docs.jsonl"):
    return write_jsonl(tmp_path / name, [{"id": i, "text": t} for i, t in enumerate(texts)])


def test_actions_in_the_pipeline_with_byte_offsets(tmp_path):
    terms = tmp_path / "terms.txt"
    terms.write_text("Ромашка\n", encoding="utf-8")
    texts = ["Пишите: иван@почта.рф? нет, ivan@example.com — ООО Ромашка, тел. +7 495 123 45 67.",
             "Invoice for customer INN 7707083893, nothing else worth reading here at all.",
             "A clean document about the weather in Paris, long enough to stay.",
             "Card 4111 1111 1111 1111 was charged twice."]
    src = _docs(tmp_path, texts)
    over = {**Q, "contamination.patterns": [{"name": "inn", "regex": r"\bINN \d{10}\b", "action": "drop"}],
            "contamination.terms": [{"name": "client", "path": str(terms), "action": "redact"}],
            "contamination.pii": [{"name": "email", "action": "redact"}, {"name": "phone", "action": "strip"},
                                  "card"]}
    summary = run([str(src)], tmp_path / "out", overrides=over)
    ann = read_annotations(tmp_path / "out").set_index("doc_id")
    assert ann.loc[0, "redacted_text"] == "Пишите: иван@почта.рф? нет, <EMAIL> — ООО <CLIENT>, тел. ."
    assert ann.loc[0, "stripped_text"] == "Пишите: иван@почта.рф? нет, ivan@example.com — ООО Ромашка, тел. ."
    spans = {s["rule"]: (s["start"], s["end"]) for s in ann.loc[0, "contamination_spans"]}
    raw = texts[0].encode()
    assert raw[slice(*spans["email"])] == b"ivan@example.com" and raw[slice(*spans["client"])] == "Ромашка".encode()
    assert raw[slice(*spans["phone"])] == b"+7 495 123 45 67"
    assert list(ann.loc[0, "removed_spans"]) == list(spans["phone"]) and ann.loc[0, "keep"]
    assert not ann.loc[1, "keep"] and ann.loc[1, "drop_stage"] == "contamination"
    assert ann.loc[1, "drop_reason"] == "pattern inn: 1 matches"
    assert not ann.loc[2, "contaminated"] and pd.isna(ann.loc[2, "contamination"])
    assert ann.loc[3, "contamination"] == "pii:card (1 matches)" and ann.loc[3, "keep"]  # flag only
    stats = summary["stages"]["contamination"]
    assert stats["contaminated_documents"] == 3 and stats["dropped"] == 1 and stats["redacted"] == 1
    assert stats["rules"]["email"] == {"action": "redact", "documents": 1, "matches": 1}
    report = json.loads((tmp_path / "out" / "contamination_report.json").read_text())
    assert report["rules"]["card"]["samples"] == [{"doc_id": 3, "start": 5, "end": 24, "text": "41***************11"}]
    html = (tmp_path / "out" / "report.html").read_text()
    assert "Patterns, terms and PII" in html and "41***************11" in html and "4111 1111" not in html
    # the exported dataset has the stripped and redacted text, without the dropped document
    assert main(["export", "dataset", "--run", str(tmp_path / "out"), "--output", str(tmp_path / "clean"),
                 "--format", "jsonl", "--compression", "none", "-q", "--no-progress"]) == 0
    clean = [json.loads(line) for f in sorted((tmp_path / "clean").glob("*.jsonl")) for line in f.open()]
    assert [c["id"] for c in clean] == [0, 2, 3]
    assert clean[0]["text"] == "Пишите: иван@почта.рф? нет, <EMAIL> — ООО <CLIENT>, тел. ."
    # full samples on request
    run([str(src)], tmp_path / "full", overrides={**over, "contamination.report_samples": "full"})
    report = json.loads((tmp_path / "full" / "contamination_report.json").read_text())
    assert report["rules"]["card"]["samples"][0]["text"] == "4111 1111 1111 1111"


def test_rules_do_not_depend_on_partitioning(tmp_path, demo_frame):
    records = demo_frame.head(300).to_dict(orient="records")
    rng = random.Random(5)
    for k in range(0, 300, 7):
        records[k]["text"] = (records[k]["text"] or "") + rng.choice(
            [" mail bob@example.com", " +44 20 7946 0958", " 4111 1111 1111 1111", " DE89 3704 0044 0532 0130 00"])
    src = write_jsonl(tmp_path / "docs.jsonl", records)
    over = {**Q, "contamination.pii": [{"name": "email", "action": "redact"}, {"name": "phone", "action": "strip"},
                                       {"name": "card", "action": "drop"}, "iban"]}
    run([str(src)], tmp_path / "one", overrides=over)
    run([str(src)], tmp_path / "many", overrides={**over, "input.partition_bytes": 4096, "run.workers": 1})
    one, many = read_annotations(tmp_path / "one"), read_annotations(tmp_path / "many")
    assert one.equals(many) and one.contaminated.sum() == len(range(0, 300, 7))
    assert (tmp_path / "one" / "contamination_report.json").read_text() == \
        (tmp_path / "many" / "contamination_report.json").read_text()


def test_rule_config_errors_are_clear(tmp_path, capsys):
    src = _docs(tmp_path, ["hello"])
    cases = [("contamination.patterns=[{name: x, regex: '(unclosed'}]", 2, "invalid RE2 regex"),
             ("contamination.patterns=[{name: x, regex: 'a*'}]", 2, "matches the empty string"),
             ("contamination.pii=[phonebook]", 2, "unknown PII preset 'phonebook'"),
             ("contamination.pii=[{name: email, action: burn}]", 2, "action must be one of"),
             (f"contamination.terms=['t={tmp_path / 'missing.txt'}']", 1, "missing.txt"),
             ("contamination.patterns=['email=x+']", 2, "contamination.pii"),
             ]
    for setting, code, message in cases[:-1]:
        got = main(["run", "--input", str(src), "--output", str(tmp_path / "o"), "--no-progress", "-q",
                    "--set", setting])
        err = capsys.readouterr().err.strip()
        assert got == code and len(err.splitlines()) == 1 and message in err, (setting, err)
    with pytest.raises(ConfigError, match="unique, repeated: email"):
        parse_rules(ContaminationConfig(patterns=["email=x+"], pii=["email"]))
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\n\xff\xfe\n")
    got = main(["run", "--input", str(src), "--output", str(tmp_path / "o"), "--no-progress", "-q",
                "--set", f"contamination.terms=['t={bad}']"])
    assert got == 1 and "bad.txt:2" in capsys.readouterr().err


def test_mask_keeps_only_the_ends():
    assert mask("4111 1111 1111 1111") == "41***************11"
    assert mask("abc") == "***" and mask("北京大学") == "北**学"
