"""A synthetic web-crawl-like corpus of any size, written as Parquet shards, with its duplicate families.

Documents come in *families*: an original and its near-copies. Family sizes follow one fixed
distribution whatever the corpus size (about 60% of families are single documents, the rest 2 to 200
copies with a heavy tail), so the work per document, and hence throughput, should not depend on the
size. Three kinds of family:

* **articles** (80% of families): Zipf-distributed words of one language; each copy has a random
  fraction (0 to 1.5%) of its words replaced and may lose up to 15% at
  the end;
* **templated letters** (15%): one template with a few slots; each copy fills the slots with other
  words (names, amounts), like mail-merge archives;
* **exact copies** (5%): byte-identical repeats.

Languages: synthetic vocabularies in Latin (English-, German-, French-like letters), Cyrillic, Greek and
Arabic scripts. Everything is vectorized (numpy + pyarrow), about 50-100 MB/s on one core, and
deterministic for a given seed.

    python benchmarks/synthetic.py --gb 4 --out /data/synthetic
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

LANGUAGES = {
    "en": ("bcdfghjklmnprstvwyz", "aeiou"),
    "de": ("bcdfghjklmnprstvwzß", "aeiouäöü"),
    "fr": ("bcdfghjlmnprstvç", "aeiouéèàê"),
    "ru": ("бвгджзклмнпрстфхцчшщ", "аеиоуыэюя"),
    "el": ("βγδζθκλμνξπρστφχψ", "αεηιουω"),
    "ar": ("بتثجحخدذرزسشصضطظعغفقكلمنهو", "اوي"),
}
VOCAB_PER_LANGUAGE = 40_000
MEAN_WORDS = 160  # about 1 KB of text a document, like news articles and web pages
ROW_GROUP_BYTES = 8 << 20


def _vocabulary(rng: np.random.Generator) -> tuple[pa.Array, list[tuple[int, int]]]:
    """All languages' words in one Arrow array, and each language's ``(first id, count)``: distinct
    strings of 1 to 4 consonant-vowel syllables of the language's letters."""
    words, ranges, total = [], [], 0
    for consonants, vowels in LANGUAGES.values():
        syllables = pa.array([a + b for a in consonants for b in vowels])
        count = 3 * VOCAB_PER_LANGUAGE
        lengths = rng.integers(1, 5, count)
        ids = rng.integers(0, len(syllables), int(lengths.sum()))
        offsets = pa.array(np.concatenate(([0], np.cumsum(lengths))).astype(np.int32))
        candidates = pc.binary_join(pa.ListArray.from_arrays(offsets, syllables.take(pa.array(ids))), "")
        distinct = pc.unique(candidates)[:VOCAB_PER_LANGUAGE]
        assert len(distinct) == VOCAB_PER_LANGUAGE
        ranges.append((total, VOCAB_PER_LANGUAGE))
        words.append(distinct)
        total += VOCAB_PER_LANGUAGE
    return pa.concat_arrays(words), ranges


def _zipf_ids(rng: np.random.Generator, n: int) -> np.ndarray:
    """Word ranks (0-based) with a Zipf(1.1)-like law truncated to the vocabulary."""
    ranks = rng.zipf(1.1, n) - 1
    bad = ranks >= VOCAB_PER_LANGUAGE
    ranks[bad] = rng.integers(0, VOCAB_PER_LANGUAGE, int(bad.sum()))
    return ranks


def family_sizes(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` family sizes from the fixed distribution (mean about 2.6)."""
    single = rng.random(n) < 0.6
    sizes = np.minimum(2 + np.floor(rng.pareto(1.6, n) * 2).astype(np.int64), 200)
    return np.where(single, 1, sizes)


def generate_chunk(rng: np.random.Generator, vocab: pa.Array, ranges, families: int, first_family: int):
    """Texts, family ids and kinds of ``families`` new families (documents shuffled within the chunk)."""
    sizes = family_sizes(rng, families)
    kind = rng.choice(3, families, p=[0.80, 0.15, 0.05])  # 0 article, 1 letter, 2 exact copies
    sizes[kind == 1] = np.maximum(sizes[kind == 1], 3)
    lang = rng.integers(0, len(ranges), families)
    base = np.array([r[0] for r in ranges], np.int64)[lang]
    length = np.maximum(12, rng.lognormal(np.log(MEAN_WORDS) - 0.18, 0.6, families).astype(np.int64))
    src_off = np.concatenate(([0], np.cumsum(length)))
    src = _zipf_ids(rng, int(src_off[-1])) + np.repeat(base, length)
    # template slots: 1 word in 70 of a letter's template is filled per copy
    slot = (rng.random(len(src)) < 0.015) & np.repeat(kind == 1, length)

    fam = np.repeat(np.arange(families), sizes)
    n = len(fam)
    first = np.r_[True, fam[1:] != fam[:-1]]
    doc_kind = kind[fam]
    rate = np.where(first | (doc_kind != 0), 0.0, rng.uniform(0.0, 0.015, n))
    # some article copies are cut short (a page with its end missing)
    keep_frac = np.where(~first & (doc_kind == 0) & (rng.random(n) < 0.2), rng.uniform(0.85, 1.0, n), 1.0)
    doc_len = np.maximum(1, (length[fam] * keep_frac).astype(np.int64))
    doc_off = np.concatenate(([0], np.cumsum(doc_len)))
    pos = np.arange(doc_off[-1]) - np.repeat(doc_off[:-1], doc_len)
    src_pos = np.repeat(src_off[:-1][fam], doc_len) + pos
    tokens = src[src_pos]
    token_rate = np.repeat(rate, doc_len)
    edit = rng.random(len(tokens)) < token_rate
    fill = slot[src_pos] & np.repeat(~first, doc_len)
    change = edit | fill
    tokens[change] = np.repeat(base[fam], doc_len)[change] + rng.integers(0, VOCAB_PER_LANGUAGE, int(change.sum()))

    words = vocab.take(pa.array(tokens))
    lists = pa.ListArray.from_arrays(pa.array(doc_off.astype(np.int32)), words)
    texts = pc.binary_join(lists, " ")
    order = rng.permutation(n)
    names = np.array(list(LANGUAGES))
    return (texts.take(pa.array(order)), (first_family + fam)[order], np.array(["article", "letter", "exact"])[
        doc_kind[order]], names[lang[fam[order]]])


def write_corpus(folder: Path, target_bytes: int, seed: int = 0, shard_bytes: int = 64 << 20,
                 progress: bool = True) -> dict:
    """Parquet shards of about ``shard_bytes`` of text (columns id, text, family, kind, lang) until the
    text reaches ``target_bytes``; returns ``{"documents", "text_bytes", "families", "shards"}``."""
    rng = np.random.default_rng(seed)
    vocab, ranges = _vocabulary(rng)
    folder.mkdir(parents=True, exist_ok=True)
    docs = text_bytes = families = shards = writer_bytes = 0
    writer = None
    while text_bytes < target_bytes:
        # ~2.7 documents of ~1.5 KB (UTF-8) a family; small chunks near the end keep the size close
        per_chunk = int(max(20, min(20_000, (target_bytes - text_bytes) // 4_000)))
        texts, fam, kind, lang = generate_chunk(rng, vocab, ranges, per_chunk, families)
        families += per_chunk
        nbytes = int(pc.sum(pc.binary_length(texts)).as_py())
        # keep whole shards close to shard_bytes: write this chunk to the current shard file
        table = pa.table({"id": pa.array(np.arange(docs, docs + len(texts)), pa.int64()), "text": texts,
                          "family": pa.array(fam, pa.int64()), "kind": kind, "lang": lang})
        rows_per_group = max(1, int(len(texts) * ROW_GROUP_BYTES / max(nbytes, 1)))
        if writer is None or writer_bytes >= shard_bytes:
            if writer is not None:
                writer.close()
            writer = pq.ParquetWriter(folder / f"part-{shards:05d}.parquet", table.schema, compression="zstd")
            shards += 1
            writer_bytes = 0
        writer.write_table(table, row_group_size=rows_per_group)
        writer_bytes += nbytes
        docs += len(texts)
        text_bytes += nbytes
        if progress:
            print(f"\rsynthetic corpus: {text_bytes / 1e9:.2f} / {target_bytes / 1e9:.2f} GB, {docs:,} documents",
                  end="", file=sys.stderr)
    writer.close()
    if progress:
        print(file=sys.stderr)
    return {"documents": docs, "text_bytes": text_bytes, "families": families, "shards": shards}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, required=True, help="text to write (GB of UTF-8)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(write_corpus(Path(args.out), int(args.gb * 1e9), args.seed))


if __name__ == "__main__":
    main()
