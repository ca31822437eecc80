"""A static encoder distilled from the transformer: one vector per token of its vocabulary, and a text's
embedding is the unit-length mean of its tokens' vectors (``semantic.encoder: static``).

The distillation is model2vec's (Tulkens and van Dongen, 2024), reimplemented here on the bundled weights:

1. every token of the vocabulary goes through the transformer alone, as ``[SEP] token [CLS]`` (model2vec
   found the reversed special tokens better), and its vector is the mean of the three outputs;
2. PCA to ``RECIPE["dims"]`` (256) dimensions, *whitened* (each component scaled to unit variance). Whitening is ours: on
   the labelled pairs of MRPC and PAN (train splits) it raised the best F1 by 0.007 and 0.013 over plain
   PCA (benchmarks/bench_static.py measures the result on the test splits);
3. SIF weights from Zipf's law over the vocabulary's order (``SIF / (SIF + p(rank))``), which shrink the
   frequent tokens.

A text is tokenized without special tokens and truncated to ``semantic.max_tokens``; unknown and special
tokens are left out of the mean. The vectors are built once per machine from ``semantic.model`` and
cached under ``$GPUCURATE_CACHE_DIR/static/<fingerprint>`` (``vectors.npy`` and ``meta.json``), the
fingerprint being a hash of the model's files and of the recipe. Building needs torch and takes about
20 s on two cores; encoding needs only the tokenizer and a compiled kernel (on a CUDA device, Torch's
``embedding_bag``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from ..kernels.aot import cache_root
from ..kernels.semantic import mean_pool
from ..engine.threads import thread_map
from .encoder import DEFAULT_MODEL, load_tokenizer, resolve_model_path
from .tokens import TextTokenizer, Tokens, load_backend

log = logging.getLogger("gpucurate")

#: the recipe; a change here names another cache folder
RECIPE = {"format": 1, "dims": 256, "sif": 1e-4, "whiten": True, "context": "sep-token-cls"}
#: tokens per forward pass while distilling
DISTILL_BATCH = 1024
#: texts pooled per call of the kernel on one thread
POOL_BATCH = 4096


class StaticEncoder:
    """``encode(texts) -> float32[n, dim]`` unit vectors from the static vectors of ``model``.

    Parameters
    ----------
    model : local model directory, or None / "all-MiniLM-L6-v2" for the bundled default; its static
        vectors are built on first use and cached.
    device : "cpu", or a torch CUDA device for the pooling.
    max_tokens : tokens of each text that count (default 256).
    threads : threads that tokenize and pool at once.
    """

    dtype = "float32"

    def __init__(self, model: str | None = None, device: str = "cpu", max_tokens: int = 256,
                 threads: int | None = None):
        self.path = resolve_model_path(model)
        self.name = f"{model or DEFAULT_MODEL} (static)"
        self.device, self.max_tokens = device, max_tokens
        self.threads = max(1, threads or os.cpu_count() or 1)
        self.vectors, self.meta = load_static(self.path)
        self.dim = int(self.vectors.shape[1])
        backend = load_backend(self.path)
        if backend is None:
            raise ConfigError(f"semantic.encoder=static: {self.path} has no tokenizer.json")
        self.text_tokenizer = TextTokenizer(backend, max_tokens, special=False, threads=self.threads)
        vocabulary = len(self.vectors)
        self.skip = np.zeros(vocabulary, bool)
        for i, token in backend.get_added_tokens_decoder().items():
            if token.special and i < vocabulary:  # [UNK], [PAD], [CLS], ...: carry no meaning
                self.skip[i] = True
        self._device_vectors = None  # the vectors on a CUDA device, once asked for

    @property
    def tokenizer(self):
        """The model's Hugging Face tokenizer (the RAG chunker counts tokens with it)."""
        return load_tokenizer(str(self.path))

    def tokenize(self, texts) -> Tokens:
        """Token ids of each text (a list of str or an Arrow string array), without special tokens,
        truncated to ``max_tokens``, and how well the vocabulary covers the text (see ``Tokens``)."""
        return self.text_tokenizer.tokenize(texts)

    def encode(self, texts, progress: bool = False) -> np.ndarray:
        """float32[n, dim] unit vectors of ``texts``."""
        return self.encode_tokens(self.tokenize(texts), progress)

    def encode_tokens(self, tokens: Tokens, progress: bool = False) -> np.ndarray:
        """float32[n, dim] unit vectors of tokenized texts."""
        n = len(tokens)
        if self.device.startswith("cuda"):
            if self._device_vectors is None:
                import torch
                self._device_vectors = torch.from_numpy(self.vectors).to(self.device)
            return _pool_on_device(tokens, self._device_vectors, self.skip)
        chunks = [(s, min(n, s + POOL_BATCH)) for s in range(0, n, POOL_BATCH)]

        def pool(chunk):
            s, e = chunk
            offsets = tokens.offsets[s:e + 1]
            return mean_pool(tokens.ids[offsets[0]:offsets[-1]], offsets - offsets[0], self.vectors, self.skip)

        parts = thread_map(pool, chunks, self.threads)
        return np.concatenate(parts) if parts else np.zeros((0, self.dim), np.float32)

    def fingerprint(self) -> dict:
        """What must match for stored embeddings to be reused: the vectors' hash and max_tokens."""
        return {"model": self.name, "fingerprint": self.meta["vectors_sha256"][:16], "dim": self.dim,
                "max_tokens": self.max_tokens, "dtype": self.dtype}


def _pool_on_device(tokens: Tokens, table, skip: np.ndarray) -> np.ndarray:
    """The kernel's unit-length means on the device of ``table`` (Torch's ``embedding_bag``)."""
    import torch
    keep = ~skip[tokens.ids]
    owner = np.repeat(np.arange(len(tokens)), tokens.lengths)
    starts = np.zeros(len(tokens), np.int64)
    np.cumsum(np.bincount(owner[keep], minlength=len(tokens))[:-1], out=starts[1:])
    with torch.inference_mode():
        ids = torch.from_numpy(tokens.ids[keep].astype(np.int64)).to(table.device)
        sums = torch.nn.functional.embedding_bag(ids, table, torch.from_numpy(starts).to(table.device), mode="sum")
        return torch.nn.functional.normalize(sums, dim=1).cpu().numpy()


def static_dir(model_dir: Path) -> Path:
    """Where the static vectors of ``model_dir`` are (or will be) cached."""
    return cache_root() / "static" / model_digest(model_dir)


def model_digest(model_dir: Path) -> str:
    """A hash of the recipe and of the model's files (weights, config, tokenizer)."""
    files = sorted(p for p in Path(model_dir).iterdir() if p.is_file() and p.name != "README.md")
    return _digest(tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files))


@lru_cache(maxsize=8)
def _digest(files: tuple) -> str:
    digest = hashlib.sha256(json.dumps(RECIPE, sort_keys=True).encode())
    for path, size, _ in files:
        digest.update(f"{Path(path).name}\0{size}\0".encode())
        with open(path, "rb") as fh:
            while block := fh.read(1 << 22):
                digest.update(block)
    return digest.hexdigest()[:20]


@lru_cache(maxsize=4)
def load_static(model_dir: Path) -> tuple[np.ndarray, dict]:
    """``(vectors float32[vocabulary, dims], meta)`` of ``model_dir``, built and cached on first use."""
    folder = static_dir(model_dir)
    if not (folder / "meta.json").is_file():
        build_static(model_dir, folder)
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    vectors = np.load(folder / "vectors.npy")
    return vectors, meta


def build_static(model_dir: Path, folder: Path) -> None:
    """Distill ``model_dir`` into ``folder`` (written whole in a staging folder, then renamed; another
    process building the same folder at the same time is harmless: the first rename wins)."""
    log.info("semantic: building the static encoder from %s (once; cached in %s)", model_dir, folder)
    t0 = time.perf_counter()
    vectors = distill(model_dir)
    staging = folder.parent / f".staging-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        staging.mkdir(parents=True)
        np.save(staging / "vectors.npy", vectors)
        meta = dict(RECIPE, base_model=str(model_dir), vocabulary=int(len(vectors)),
                    vectors_sha256=hashlib.sha256(vectors.tobytes()).hexdigest(),
                    built_seconds=round(time.perf_counter() - t0, 1))
        (staging / "meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
        try:
            os.rename(staging, folder)
        except OSError:
            if not (folder / "meta.json").is_file():  # not another process's complete build
                raise
    except OSError as exc:
        raise ConfigError(f"semantic.encoder=static: cannot write its vectors under {folder.parent} ({exc}); "
                          "set GPUCURATE_CACHE_DIR to a writable folder") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log.info("semantic: static encoder built in %.1f s", time.perf_counter() - t0)


def distill(model_dir: Path, recipe: dict = RECIPE) -> np.ndarray:
    """float32[vocabulary, dims]: every token's vector by ``recipe`` (see the module's docstring)."""
    try:
        import torch
        from sklearn.decomposition import PCA
    except ImportError:
        raise ConfigError("semantic.encoder=static: building the static vectors needs torch and scikit-learn "
                          "(pip install -e '.[semantic]')") from None
    from .encoder import _load
    tokenizer, model = _load(str(model_dir), "cpu")
    vocabulary = len(tokenizer.get_vocab())
    first, last = tokenizer.sep_token_id, tokenizer.cls_token_id
    if first is None or last is None:  # a model without BERT's special tokens: its own around the token
        probe = tokenizer("a")["input_ids"]
        first, last = probe[-1], probe[0]
    ids = torch.arange(vocabulary)
    outputs = []
    with torch.inference_mode():
        for s in range(0, vocabulary, DISTILL_BATCH):
            batch = ids[s:s + DISTILL_BATCH]
            x = torch.stack([torch.full_like(batch, first), batch, torch.full_like(batch, last)], dim=1)
            hidden = model(input_ids=x, attention_mask=torch.ones_like(x)).last_hidden_state
            outputs.append(hidden.float().mean(dim=1).numpy())
    raw = np.concatenate(outputs).astype(np.float64)
    dims = min(recipe["dims"], raw.shape[1], len(raw) - 1)
    reduced = PCA(n_components=dims, svd_solver="full", whiten=recipe["whiten"]).fit_transform(raw)
    inverse_rank = 1.0 / np.arange(2, len(reduced) + 2)
    probability = inverse_rank / inverse_rank.sum()
    reduced *= (recipe["sif"] / (recipe["sif"] + probability))[:, None]
    return np.ascontiguousarray(reduced, dtype=np.float32)
