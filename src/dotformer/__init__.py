"""dotformer: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017), from the dot product up.

Read the modules in the lesson's order:

1. :mod:`dotformer.attention`  scaled dot-product attention, softmax(Q·Kᵀ/√d_k)·V (paper §3.2.1), and the shape legend
2. :mod:`dotformer.masks`      padding and causal masks (True = may attend)
3. :mod:`dotformer.multihead`  multi-head attention: W_q, W_k, W_v, split, attend, concat, W_o (§3.2.2), KV cache
4. :mod:`dotformer.positional` token embeddings ×√d_model and sinusoidal positional encoding (§3.4, §3.5)
5. :mod:`dotformer.layers`     feed-forward network, residual + LayerNorm, encoder and decoder layers (§3.1, §3.3)
6. :mod:`dotformer.stacks`     the encoder and decoder stacks: N layers each (§3.1)
7. :mod:`dotformer.model`      the whole Transformer: embeddings, stacks, generator; encode, decode, forward (§3)
8. :mod:`dotformer.config`     the frozen configuration dataclasses with the paper's presets (Table 3)

Beside them at the top: :mod:`dotformer.packing` (training skips the padding, applied around the lesson's modules)
and :mod:`dotformer.errors` (the exceptions, and the message for a missing optional package). The tooling lives in
subpackages: :mod:`dotformer.data`, :mod:`dotformer.training`, :mod:`dotformer.checkpoint`, :mod:`dotformer.decoding`
(int8 included), :mod:`dotformer.metrics`, :mod:`dotformer.api` (Python and HTTP), :mod:`dotformer.export` and
:mod:`dotformer.imports` (other engines, ``torch.nn`` included), :mod:`dotformer.plots`, :mod:`dotformer.explore`,
:mod:`dotformer.compare` and :mod:`dotformer.cli` (the ``dotformer`` command).

To use a trained model from Python: ``dotformer.load("runs/g2p").translate(["cat", "dog"])`` (:mod:`dotformer.api`).
"""

from typing import Any

from dotformer.config import ModelConfig
from dotformer.errors import (
    CheckpointError,
    ConfigError,
    DataError,
    DotformerError,
    MissingDataError,
    MissingExtraError,
    ShapeError,
    TrainingError,
)

__version__ = "0.2.0"

# public name -> the module that defines it, imported on first use (PEP 562): ``import dotformer`` loads neither
# torch nor the model code, so the command line starts fast and a command that does not need torch never loads it
_LAZY = {
    "AttentionOutput": "dotformer.attention",
    "scaled_dot_product_attention": "dotformer.attention",
    "causal_mask": "dotformer.masks",
    "padding_mask": "dotformer.masks",
    "MultiHeadAttention": "dotformer.multihead",
    "sinusoidal_positional_encoding": "dotformer.positional",
    "DecoderLayer": "dotformer.layers",
    "EncoderLayer": "dotformer.layers",
    "FeedForward": "dotformer.layers",
    "Decoder": "dotformer.stacks",
    "Encoder": "dotformer.stacks",
    "Transformer": "dotformer.model",
    "KVCache": "dotformer.decoding.cache",
    "load": "dotformer.api",
    "Translator": "dotformer.api",
    "TranslationResult": "dotformer.api",
}


def __getattr__(name: str) -> Any:
    """The lesson's classes and functions, ``load``, ``Translator``, ``TranslationResult`` and ``KVCache``, imported
    on first use (PEP 562)."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'dotformer' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "AttentionOutput",
    "CheckpointError",
    "ConfigError",
    "DataError",
    "Decoder",
    "DecoderLayer",
    "DotformerError",
    "Encoder",
    "EncoderLayer",
    "FeedForward",
    "KVCache",
    "MissingDataError",
    "MissingExtraError",
    "ModelConfig",
    "MultiHeadAttention",
    "ShapeError",
    "Transformer",
    "TrainingError",
    "TranslationResult",
    "Translator",
    "causal_mask",
    "load",
    "padding_mask",
    "scaled_dot_product_attention",
    "sinusoidal_positional_encoding",
]
