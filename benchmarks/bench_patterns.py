"""The contamination gate's PII presets against datatrove's regex PIIFormatter and Presidio, on Reuters
with planted values: documents per second, MB/s per core, and precision and recall per kind of value.

Corpus: the Reuters-21578 bodies (``common.enlarge`` x ``--factor``). Every 5th document gets two planted
values (e-mail, phone, public IPv4, IPv6, Luhn-valid card, mod-97-valid IBAN, AWS key, drawn in turn) and
one look-alike (a Luhn-failing card, an IBAN with a wrong checksum, a dotted version number, a clock
time, ``user@localhost``), each at a random word boundary. The labels are the planted values: a tool's
match is right when its text is a value planted in that document with the same kind.

* gpucurate: ``stages.patterns.RuleSet`` with ``contamination.pii: [all]`` over the corpus' Arrow strings
  in one thread (what the gate does per partition in the read pass; best of 3 after one warm call), and
  the CLI end to end (``--set contamination.pii=[all]``, exact only; after one untimed run), whose
  ``gate_seconds`` is the gate's time summed over the partition tasks.
* datatrove: ``PIIFormatter().format(text)`` over every document (e-mails and public IPv4 addresses; its
  documented job), timed; its matches are its two replacers' regexes with their validators.
* Presidio: ``AnalyzerEngine`` with a blank spaCy English pipeline (no NER model can be downloaded here,
  so names and places are not found; its pattern recognizers run as usual) on every ``--presidio-every``
  th document, timed; EMAIL_ADDRESS, PHONE_NUMBER, IP_ADDRESS, CREDIT_CARD and IBAN_CODE are scored, other
  entity types are ignored.

datatrove and Presidio run in the Python of ``--peers-python`` (a virtual environment with
``pip install datatrove presidio-analyzer``), each in its own process; a peer that does not import is
reported as not run.

    python benchmarks/bench_patterns.py [--factor 1] [--peers-python /tmp/peers/bin/python]
        [--out benchmarks/results/bench_patterns.json]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import enlarge, print_table, reuters_bodies, write_json  # noqa: E402

from gpucurate.config import ContaminationConfig  # noqa: E402
from gpucurate.stages.patterns import RuleSet  # noqa: E402

KINDS = ("email", "phone", "ipv4", "ipv6", "card", "iban", "secret")
PRESIDIO_KINDS = {"EMAIL_ADDRESS": "email", "PHONE_NUMBER": "phone", "CREDIT_CARD": "card", "IBAN_CODE": "iban"}


def _luhn_digit(digits: str) -> str:
    total = 0
    for k, c in enumerate(reversed(digits)):
        d = int(c) * (1 if k % 2 else 2)
        total += d - 9 if d > 9 else d
    return str((10 - total % 10) % 10)


def _iban(rng: random.Random, valid: bool = True) -> str:
    bban = "".join(rng.choice("0123456789") for _ in range(18))
    check = 98 - int("".join(str(int(c, 36)) for c in bban + "DE00")) % 97
    if not valid:
        check = (check + 1 + rng.randrange(90)) % 97 + 2 if check < 97 else check - 1
    s = f"DE{check:02d}{bban}"
    return " ".join(s[i:i + 4] for i in range(0, len(s), 4))


def planted_value(kind: str, rng: random.Random) -> str:
    digits = lambda n: "".join(rng.choice("0123456789") for _ in range(n))  # noqa: E731
    if kind == "email":
        return f"{rng.choice(['anna', 'john', 'li.wei', 'm.rossi'])}{digits(2)}@{rng.choice(['example.com', 'mail.de', 'corp.co.uk'])}"
    if kind == "phone":
        area = str(rng.randint(2, 9)) + digits(2)
        return rng.choice([f"+1 {area}-{rng.randint(2, 9)}{digits(2)}-{digits(4)}", f"({area}) {rng.randint(2, 9)}{digits(2)}-{digits(4)}",
                           f"+44 20 {digits(4)} {digits(4)}", f"+49 30 {digits(7)}"])
    if kind == "ipv4":
        return f"{rng.choice([8, 23, 45, 66, 81, 93, 104, 151, 185, 203])}.{rng.randint(1, 254)}.{rng.randint(1, 254)}.{rng.randint(1, 254)}"
    if kind == "ipv6":
        return f"2a00:1450:{rng.randint(1, 0xffff):x}:{rng.randint(1, 0xffff):x}::{rng.randint(1, 0xffff):x}"
    if kind == "card":
        body = "4" + digits(14)
        number = body + _luhn_digit(body)
        return " ".join(number[i:i + 4] for i in range(0, 16, 4))
    if kind == "iban":
        return _iban(rng)
    return "AKIA" + "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") for _ in range(16))


def look_alike(k: int, rng: random.Random) -> str:
    digits = lambda n: "".join(rng.choice("0123456789") for _ in range(n))  # noqa: E731
    choice = k % 5
    if choice == 0:
        body = "4" + digits(14)
        bad = str((int(_luhn_digit(body)) + 1 + rng.randrange(9)) % 10)
        number = body + bad
        return " ".join(number[i:i + 4] for i in range(0, 16, 4))
    if choice == 1:
        return _iban(rng, valid=False)
    if choice == 2:
        return f"v{rng.randint(1, 9)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}.{rng.randint(0, 99)}.{rng.randint(0, 9)}"
    if choice == 3:
        return f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
    return "user@localhost"


def build_corpus(texts: list[str], seed: int) -> tuple[list[str], set]:
    """Texts with planted values, and the labels ``{(document, kind, value)}``."""
    rng = random.Random(seed)
    out, labels, turn = [], set(), 0
    for d, text in enumerate(texts):
        if d % 5:
            out.append(text)
            continue
        words = text.split(" ")
        inserts = []
        for _ in range(2):
            kind = KINDS[turn % len(KINDS)]
            turn += 1
            value = planted_value(kind, rng)
            labels.add((d, kind, value))
            inserts.append(value)
        inserts.append(look_alike(d // 5, rng))
        for value in inserts:
            words.insert(rng.randrange(len(words) + 1), value)
        out.append(" ".join(words))
    return out, labels


def score(found: set, labels: set, kinds: tuple, docs: set | None = None) -> dict:
    """Precision over the tool's matches of ``kinds``, recall over the planted values (all kinds, and per
    kind); ``docs``: only these documents count (a peer run on a sample)."""
    if docs is not None:
        labels = {x for x in labels if x[0] in docs}
        found = {x for x in found if x[0] in docs}
    mine = {x for x in found if x[1] in kinds}
    right = mine & labels
    out = {"matches": len(mine), "precision": round(len(right) / len(mine), 4) if mine else None,
           "recall": round(len(right) / len(labels), 4) if labels else None}
    for kind in KINDS:
        planted = {x for x in labels if x[1] == kind}
        out[f"recall_{kind}"] = round(len(right & planted) / len(planted), 4) if planted else None
    return out


DATATROVE = r"""
import json, sys, time
from datatrove.pipeline.formatters import PIIFormatter
texts = [json.loads(l)["text"] for l in open(sys.argv[1], encoding="utf-8")]
f = PIIFormatter()
t0 = time.perf_counter()
for t in texts:
    f.format(t)
seconds = time.perf_counter() - t0
found = []
for d, t in enumerate(texts):
    for kind, rep in (("email", f.emails_replacer), ("ipv4", f.ip_replacer)):
        for m in rep.regex.finditer(t):
            if rep.validator is None or rep.validator(m.group(0)):
                found.append([d, kind, m.group(0)])
json.dump({"seconds": seconds, "documents": len(texts), "found": found}, open(sys.argv[2], "w"))
"""

PRESIDIO = r"""
import json, sys, time, logging
logging.disable(logging.WARNING)
import spacy
from presidio_analyzer import AnalyzerEngine
from presidio_analyzer.nlp_engine import NlpEngineProvider
every = int(sys.argv[3])
texts = [json.loads(l)["text"] for l in open(sys.argv[1], encoding="utf-8")]
sample = list(range(0, len(texts), every))
spacy.blank("en").to_disk(sys.argv[2] + ".model")
conf = {"nlp_engine_name": "spacy", "models": [{"lang_code": "en", "model_name": sys.argv[2] + ".model"}]}
engine = AnalyzerEngine(nlp_engine=NlpEngineProvider(nlp_configuration=conf).create_engine(), supported_languages=["en"])
engine.analyze("warm up: a@example.com", language="en")
t0 = time.perf_counter()
results = [engine.analyze(texts[d], language="en") for d in sample]
seconds = time.perf_counter() - t0
found = [[d, r.entity_type, texts[d][r.start:r.end]] for d, rs in zip(sample, results) for r in rs]
json.dump({"seconds": seconds, "documents": len(sample), "sample": sample, "found": found}, open(sys.argv[2], "w"))
"""


def run_peer(python: str, code: str, args: list[str], timeout: int = 3600) -> dict | str:
    if not Path(python).exists():
        return f"not run: no {python} (see --peers-python)"
    done = subprocess.run([python, "-c", code, *args], capture_output=True, text=True, timeout=timeout)
    if done.returncode:
        return f"not run: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}"
    return json.loads(Path(args[1]).read_text())


def gpucurate_cli(corpus: Path, out: Path) -> dict:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gpucurate", "run", "--input", str(corpus), "--output", str(out), "-q",
                    "--set", "contamination.pii=[all]", "--set", "fuzzy.enabled=false",
                    "--set", "semantic.enabled=false"], check=True)
    wall = time.perf_counter() - t0
    summary = json.loads((out / "summary.json").read_text())
    return {"wall_s": round(wall, 3), "gate_seconds": summary["stages"]["contamination"]["gate_seconds"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--factor", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--peers-python", default="/tmp/peers/bin/python")
    ap.add_argument("--presidio-every", type=int, default=10)
    ap.add_argument("--out", default="benchmarks/results/bench_patterns.json")
    args = ap.parse_args()
    bodies, _ = reuters_bodies()
    texts, labels = build_corpus(enlarge(bodies, args.factor) if args.factor > 1 else bodies, args.seed)
    raw = pa.array(texts, pa.large_string())
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    rows, tmp = [], Path(tempfile.mkdtemp(prefix="bench_patterns-"))
    corpus = tmp / "corpus.jsonl"
    with corpus.open("w", encoding="utf-8") as fh:
        for d, t in enumerate(texts):
            fh.write(json.dumps({"id": d, "text": t}, ensure_ascii=False) + "\n")

    rules = RuleSet(ContaminationConfig(pii=["all"]))
    rules.match(raw.slice(0, 200))  # kernels loaded
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        matches = rules.match(raw)
        best = min(best, time.perf_counter() - t0)
    found = {(int(r), rules.rules[k].name, texts[r].encode("utf-8")[s:e].decode("utf-8"))
             for r, k, s, e in zip(matches.rows, matches.rule, matches.start, matches.end)}
    gpucurate_cli(corpus, tmp / "warm")  # untimed: the first process after a kernel edit builds them
    cli = gpucurate_cli(corpus, tmp / "out")
    rows.append({"tool": "gpucurate (pii: all, one thread)", "documents": len(texts), "seconds": round(best, 3),
                 "docs_per_s": round(len(texts) / best), "mb_s_core": round(mb / best, 1),
                 **score(found, labels, KINDS)})
    rows.append({"tool": "gpucurate CLI (gate in the read pass)", "documents": len(texts),
                 "seconds": cli["gate_seconds"], "docs_per_s": round(len(texts) / cli["gate_seconds"]),
                 "mb_s_core": round(mb / cli["gate_seconds"], 1), "wall_s": cli["wall_s"]})

    dt = run_peer(args.peers_python, DATATROVE, [str(corpus), str(tmp / "datatrove.json")])
    if isinstance(dt, str):
        rows.append({"tool": "datatrove PIIFormatter", "note": dt})
    else:
        found = {(d, k, t) for d, k, t in dt["found"]}
        rows.append({"tool": "datatrove PIIFormatter", "documents": dt["documents"], "seconds": round(dt["seconds"], 3),
                     "docs_per_s": round(dt["documents"] / dt["seconds"]), "mb_s_core": round(mb / dt["seconds"], 1),
                     **score(found, labels, ("email", "ipv4"))})
    pr = run_peer(args.peers_python, PRESIDIO, [str(corpus), str(tmp / "presidio.json"), str(args.presidio_every)])
    if isinstance(pr, str):
        rows.append({"tool": "Presidio (pattern recognizers)", "note": pr})
    else:
        sample = set(pr["sample"])
        found = set()
        for d, entity, t in pr["found"]:
            kind = "ipv6" if entity == "IP_ADDRESS" and ":" in t else ("ipv4" if entity == "IP_ADDRESS" else
                                                                       PRESIDIO_KINDS.get(entity, entity))
            found.add((d, kind, t))
        sample_mb = sum(len(texts[d].encode("utf-8")) for d in sample) / 1e6
        rows.append({"tool": f"Presidio (pattern recognizers, every {args.presidio_every}th document)",
                     "documents": pr["documents"], "seconds": round(pr["seconds"], 3),
                     "docs_per_s": round(pr["documents"] / pr["seconds"]),
                     "mb_s_core": round(sample_mb / pr["seconds"], 2),
                     **score(found, labels, ("email", "phone", "ipv4", "ipv6", "card", "iban"), sample)})
    columns = ["tool", "documents", "seconds", "docs_per_s", "mb_s_core", "matches", "precision", "recall"] + \
        [f"recall_{k}" for k in KINDS]
    print_table(rows, columns, f"PII presets on Reuters x{args.factor} ({len(texts):,} documents, {mb:.1f} MB, "
                               f"{len(labels):,} planted values and {len(range(0, len(texts), 5)):,} look-alikes)")
    for r in rows:
        if r.get("note"):
            print(f"{r['tool']}: {r['note']}")
    first = rows[0]
    print(f"target: >= 50 MB/s per core with every preset on: {first['mb_s_core']} in one thread, "
          f"{rows[1]['mb_s_core']} in the CLI's read pass")
    write_json({"benchmark": "bench_patterns", "date": time.strftime("%Y-%m-%d"), "factor": args.factor,
                "documents": len(texts), "text_mb": round(mb, 1), "planted": len(labels), "rows": rows},
               args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
