"""Peer tools of ``bench_fuzzy.py --mode e2e``, one per process, as their users would run them.

    python benchmarks/e2e_peers.py TOOL INPUT.jsonl OUT.npy

TOOL is one of gaoya-native, gaoya-our-shingles, dedup-rs, datasketch, rensa+verify. INPUT holds records
``{"id": int, "text": str}``; OUT gets one integer cluster label per input row, in file order.
Every tool imports what it needs inside its own function, so that the import cost in a fresh process is
its own and no one pays for another's libraries. The in-process mode of bench_fuzzy.py reuses the
datasketch and rensa algorithms (``datasketch_pairs``, ``rensa_pairs``) from here.
"""

from __future__ import annotations

import sys

THRESHOLD, NUM_PERM, SEED, K = 0.8, 128, 42, 5


def read_texts(path: str) -> list[str]:
    import json
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line)["text"] for line in fh]


def normalized(texts: list[str]) -> list[str]:
    """gpucurate's normalization, the input of every peer that shares gpucurate's shingles."""
    import pyarrow as pa
    from gpucurate.stages.normalize import normalize
    return normalize(pa.array(texts, type=pa.large_string())).to_pylist()


def python_shingles(norm_texts: list[str]) -> list[list[str]]:
    """Word K-grams from ordinary Python code (``text.split(" ")``), the same sets gpucurate hashes."""
    from gpucurate.stages.normalize import reference_shingles
    return [reference_shingles(t, "word", K) for t in norm_texts]


def exact_jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


def components(n: int, i, j):
    """Connected components of the edges (i, j) as labels (the smallest row of each component), by min-label
    propagation with pointer jumping: plain numpy, so that no peer pays for gpucurate's numba kernels."""
    import numpy as np
    labels = np.arange(n)
    i, j = np.asarray(i, dtype=np.int64), np.asarray(j, dtype=np.int64)
    while True:
        low = np.minimum(labels[i], labels[j])
        new = labels.copy()
        np.minimum.at(new, i, low)
        np.minimum.at(new, j, low)
        new = new[new]
        if np.array_equal(new, labels):
            return labels
        labels = new


def pair_labels(n: int, pairs: list[tuple[int, int]]):
    import numpy as np
    i, j = np.array(pairs, dtype=np.int64).reshape(-1, 2).T
    return components(n, i, j)


def hit_labels(hits: list[list[int]]):
    """Labels from a bulk query's answer (row r -> the ids similar to it): every hit is an edge."""
    import itertools
    import numpy as np
    counts = np.fromiter(map(len, hits), dtype=np.int64, count=len(hits))
    j = np.fromiter(itertools.chain.from_iterable(hits), dtype=np.int64, count=int(counts.sum()))
    return components(len(hits), np.repeat(np.arange(len(hits)), counts), j)


def gaoya_index(analyzer):
    from gaoya.minhash import MinHashStringIndex
    return MinHashStringIndex(hash_size=32, jaccard_threshold=THRESHOLD, num_bands=16, band_size=8,
                              analyzer=analyzer, lowercase=True, ngram_range=(K, K), id_container="smallvec")


def gaoya_native(path: str):
    """gaoya's own Rust word K-gram tokenizer on the raw texts."""
    texts = read_texts(path)
    index = gaoya_index("word")
    index.par_bulk_insert_docs(list(range(len(texts))), texts)
    return hit_labels(index.par_bulk_query(texts))


def gaoya_our_shingles(path: str):
    """gaoya's index fed gpucurate's normalized texts and shingles through a callable analyzer. gaoya's
    wrapper calls the analyzer in Python, single-threaded, once to insert and again to query."""
    from gpucurate.stages.normalize import reference_shingles
    norm = normalized(read_texts(path))
    index = gaoya_index(lambda t: reference_shingles(t, "word", K))
    index.par_bulk_insert_docs(list(range(len(norm))), norm)
    return hit_labels(index.par_bulk_query(norm))


def dedup_rs(path: str):
    import numpy as np
    from dedup_rs import EmbedFunc
    texts = read_texts(path)
    ids = np.arange(len(texts), dtype=np.uint32)
    embed = EmbedFunc(THRESHOLD, NUM_PERM, K, 0.5, 0.5, "text", "id", "uint32", 0)
    embed.batch_embed_shard(texts, ids)
    return np.array(embed.cluster().batch_find(ids))


def rensa_pairs(norm_texts: list[str], verify_sets: bool) -> tuple[list[tuple[int, int]], float]:
    """rensa's LSH candidates, kept if their exact shingle-set Jaccard (``verify_sets``) or their MinHash
    estimate reaches THRESHOLD. Returns the pairs and the seconds spent on shingles + signatures."""
    import time
    from rensa import RMinHash, RMinHashLSH
    t0 = time.perf_counter()
    shingles = python_shingles(norm_texts)
    mhs = []
    for sh in shingles:
        m = RMinHash(num_perm=NUM_PERM, seed=SEED)
        m.update(sh)
        mhs.append(m)
    sig_seconds = time.perf_counter() - t0
    lsh = RMinHashLSH(threshold=THRESHOLD, num_perm=NUM_PERM, num_bands=16)
    for i, m in enumerate(mhs):
        if shingles[i]:
            lsh.insert(i, m)
    sets = [set(s) for s in shingles] if verify_sets else None
    pairs = []
    for i, m in enumerate(mhs):
        if not shingles[i]:
            continue
        for j in lsh.query(m):
            if j <= i:
                continue
            ok = exact_jaccard(sets[i], sets[j]) >= THRESHOLD if verify_sets else m.jaccard(mhs[j]) >= THRESHOLD
            if ok:
                pairs.append((i, j))
    return pairs, sig_seconds


def datasketch_pairs(norm_texts: list[str]) -> tuple[list[tuple[int, int]], float]:
    """datasketch's LSH candidates as they come (its MinHashLSH does not verify). Returns the pairs and the
    seconds spent on shingles + signatures."""
    import time
    from datasketch import MinHash, MinHashLSH
    t0 = time.perf_counter()
    shingles = python_shingles(norm_texts)
    mhs = []
    for sh in shingles:
        m = MinHash(num_perm=NUM_PERM, seed=SEED)
        m.update_batch([s.encode("utf-8") for s in sh])
        mhs.append(m)
    sig_seconds = time.perf_counter() - t0
    lsh = MinHashLSH(threshold=THRESHOLD, num_perm=NUM_PERM)
    with lsh.insertion_session() as session:
        for i, m in enumerate(mhs):
            if shingles[i]:
                session.insert(i, m)
    return [(i, j) for i, m in enumerate(mhs) if shingles[i] for j in lsh.query(m) if j > i], sig_seconds


def rensa_verify(path: str):
    norm = normalized(read_texts(path))
    return pair_labels(len(norm), rensa_pairs(norm, verify_sets=True)[0])


def datasketch(path: str):
    norm = normalized(read_texts(path))
    return pair_labels(len(norm), datasketch_pairs(norm)[0])


PEERS = {"gaoya-native": gaoya_native, "gaoya-our-shingles": gaoya_our_shingles, "dedup-rs": dedup_rs,
         "datasketch": datasketch, "rensa+verify": rensa_verify}


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in PEERS:
        print(f"usage: e2e_peers.py {{{','.join(PEERS)}}} INPUT.jsonl OUT.npy", file=sys.stderr)
        return 2
    tool, src, out = argv
    labels = PEERS[tool](src)
    import numpy as np
    np.save(out, np.asarray(labels, dtype=np.int64))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
