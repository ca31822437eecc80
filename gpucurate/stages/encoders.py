"""The semantic stage's encoder, chosen in one place from ``semantic.encoder``."""

from __future__ import annotations

from functools import lru_cache

from ..config import SemanticConfig
from .encoder import Encoder, encoder_available, resolve_model_path
from .static_encoder import StaticEncoder, load_static

__all__ = ["make_encoder", "encoder_available", "prepare_encoder"]


def make_encoder(cfg: SemanticConfig, device: str, threads: int | None = None):
    """The encoder ``cfg`` names on ``device``: ``Encoder`` (the transformer) or ``StaticEncoder``; both
    give ``tokenize``, ``encode_tokens``, ``encode``, ``fingerprint`` and ``dim``. Made once per process for
    each setting (every partition's task asks for it)."""
    return _encoder(cfg.encoder, cfg.model, device, cfg.max_tokens, cfg.batch_size, cfg.dtype, threads)


@lru_cache(maxsize=4)
def _encoder(kind: str, model, device: str, max_tokens: int, batch_size, dtype: str, threads):
    if kind == "static":
        return StaticEncoder(model, device, max_tokens, threads=threads)
    return Encoder(model, device, max_tokens, batch_size, dtype, threads=threads)


def prepare_encoder(cfg: SemanticConfig) -> None:
    """What the workers' encoders will read, made once here: the static vectors are built (or found in the
    cache) by the driver, not by every worker at once."""
    if cfg.encoder == "static":
        load_static(resolve_model_path(cfg.model))
