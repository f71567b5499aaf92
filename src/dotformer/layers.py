"""The pieces of one Transformer block (paper §3.1, §3.3): the position-wise feed-forward network, the residual +
LayerNorm wrapper around every sublayer, and the encoder and decoder layers built from them.

Shapes follow the legend in :mod:`dotformer.attention`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NamedTuple, Protocol

import torch.nn.functional as F
from torch import Tensor, nn

from dotformer.errors import ConfigError
from dotformer.multihead import KeyValueCache, Layout, MultiHeadAttention

Activation = Literal["relu", "gelu", "silu"]
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}


class LayerKeyValues(Protocol):
    """One decoder layer's decoding caches (e.g. :class:`dotformer.decoding.cache.LayerCache`)."""

    @property
    def self_attn(self) -> KeyValueCache:
        """The self-attention's keys/values, growing by the new positions at every step."""
        ...

    @property
    def cross_attn(self) -> KeyValueCache:
        """The cross-attention's keys/values of the memory, projected on the first step."""
        ...


@dataclass(frozen=True)
class PassMode:
    """How one pass through a layer or a stack runs, beside its inputs, masks and cache.

    The same layers run every mode of the one path: padded (B, L, D) or packed (N, D) (:mod:`dotformer.packing`),
    with or without the attention weights. The mode is one value for the whole pass: the stacks hand it to every layer
    and the layers to their attention, so their forwards take it as one argument.
    :meth:`Transformer.encode <dotformer.model.Transformer.encode>` and ``decode`` build it from their keywords.

    Attributes:
        need_weights: also return the (B, H, T, S) attention weights (the reference attention, not the fused kernel).
        packing: the :class:`~dotformer.multihead.Layout` of the layer's input ``x``: packed (N, D) real tokens (a
            :class:`dotformer.packing.Packing`), or None for (B, L, D).
        memory_packing: the layout of the encoder memory a decoder layer reads (packed (N_S, D)), or None.
    """

    need_weights: bool = False
    packing: Layout | None = None
    memory_packing: Layout | None = None


PADDED = PassMode()  # the default: (B, L, D) inputs, no weights returned


class FeedForward(nn.Module):
    """FFN(x) = max(0, x·W_1 + b_1)·W_2 + b_2, the same two linear maps at every position (paper §3.3, Eq. 2).

    With another activation f: FFN(x) = f(x·W_1 + b_1)·W_2 + b_2, where GELU(z) = z·Φ(z) (Φ the standard normal
    CDF, BERT and GPT) and SiLU(z) = z·σ(z) (σ the logistic sigmoid; "swish", Marian's OPUS-MT models).

    Args:
        d_model: D, input and output width.
        d_ff: F, inner width (2048 in the paper's base model).
        activation: ``"relu"`` (the paper), ``"gelu"`` or ``"silu"``.
        dropout: dropout on the inner activations during training.
        bias: whether W_1 and W_2 have biases.

    Shape: (B, L, D) -> (B, L, D).

    Raises:
        ConfigError: unknown activation.
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        activation: Activation = "relu",
        dropout: float = 0.0,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ConfigError(f"FeedForward activation must be 'relu', 'gelu' or 'silu', got {activation!r}")
        self.activation = activation
        self.W_1 = nn.Linear(d_model, d_ff, bias=bias)
        self.W_2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """(B, L, D) -> (B, L, D)."""
        hidden = self.W_1(x)  # (B, L, F)
        hidden = ACTIVATIONS[self.activation](hidden)  # (B, L, F)
        return self.W_2(self.dropout(hidden))  # (B, L, D)


class Residual(nn.Module):
    """The connection around every sublayer: residual, dropout and LayerNorm (paper §3.1, §5.4).

    Post-LN (the paper): ``LayerNorm(x + Dropout(Sublayer(x)))``.
    Pre-LN (``norm_first=True``, Xiong et al. 2020): ``x + Dropout(Sublayer(LayerNorm(x)))``; the stack then needs a
    final LayerNorm, which :class:`dotformer.stacks.Encoder` and :class:`dotformer.stacks.Decoder` add.

    Shape: ``residual(x, sublayer)`` with x (B, L, D) (or packed (N, D)) and ``sublayer`` mapping that shape to itself.
    """

    def __init__(self, d_model: int, dropout: float = 0.1, norm_first: bool = False, eps: float = 1e-5) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        """(B, L, D) -> (B, L, D): the formula, post-LN or pre-LN."""
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))  # pre-LN
        return self.norm(x + self.dropout(sublayer(x)))  # post-LN, the paper


@dataclass(frozen=True)
class LayerSizes:
    """The sizes and switches every encoder or decoder layer takes (a subset of :class:`dotformer.ModelConfig`)."""

    d_model: int = 512  # D
    num_heads: int = 8  # H
    d_ff: int = 2048  # F
    dropout: float = 0.1  # on sublayer outputs
    attention_dropout: float = 0.0  # on attention weights
    activation_dropout: float = 0.0  # inside the FFN, after the activation
    activation: Activation = "relu"  # FFN non-linearity
    norm_first: bool = False  # pre-LN instead of the paper's post-LN
    layer_norm_eps: float = 1e-5  # LayerNorm epsilon
    bias: bool = True  # biases in projections and FFN


class EncoderLayerOutput(NamedTuple):
    """output: (B, S, D); self_weights: (B, H, S, S) when asked for, else None."""

    output: Tensor
    self_weights: Tensor | None


class EncoderLayer(nn.Module):
    """One encoder block: self-attention, then the FFN, each wrapped in residual + LayerNorm (paper §3.1)."""

    def __init__(self, sizes: LayerSizes) -> None:
        super().__init__()
        s = sizes
        self.self_attn = MultiHeadAttention(s.d_model, s.num_heads, s.attention_dropout, s.bias)
        self.feed_forward = FeedForward(s.d_model, s.d_ff, s.activation, s.activation_dropout, s.bias)
        self.res_attn = Residual(s.d_model, s.dropout, s.norm_first, s.layer_norm_eps)
        self.res_ff = Residual(s.d_model, s.dropout, s.norm_first, s.layer_norm_eps)

    def forward(self, x: Tensor, mask: Tensor | None = None, mode: PassMode = PADDED) -> EncoderLayerOutput:
        """x: (B, S, D) (or (N_S, D) packed with ``mode.packing``, :mod:`dotformer.packing`); mask: bool
        broadcastable to (B, H, S, S) (usually the (B, 1, 1, S) padding mask); mode: :class:`PassMode`.

        Returns x's shape and, with ``mode.need_weights``, the (B, H, S, S) self-attention weights.
        """
        weights = None

        def self_attention(h: Tensor) -> Tensor:
            nonlocal weights
            h, weights = self.self_attn(h, None, mask, False, mode.need_weights, None, mode.packing, mode.packing)
            return h

        x = self.res_attn(x, self_attention)  # (B, S, D)
        x = self.res_ff(x, self.feed_forward)  # (B, S, D)
        return EncoderLayerOutput(x, weights)


class DecoderLayerOutput(NamedTuple):
    """output: (B, T, D); self_weights: (B, H, T, T_total); cross_weights: (B, H, T, S) (None unless asked for)."""

    output: Tensor
    self_weights: Tensor | None
    cross_weights: Tensor | None


class DecoderLayer(nn.Module):
    """One decoder block: masked self-attention, cross-attention over the encoder memory, then the FFN, each wrapped
    in residual + LayerNorm (paper §3.1). With ``cross_attention=False`` it is a decoder-only (language model) block.
    """

    def __init__(self, sizes: LayerSizes, cross_attention: bool = True) -> None:
        super().__init__()
        s = sizes
        self.self_attn = MultiHeadAttention(s.d_model, s.num_heads, s.attention_dropout, s.bias)
        self.res_self = Residual(s.d_model, s.dropout, s.norm_first, s.layer_norm_eps)
        self.cross_attn: MultiHeadAttention | None = None
        self.res_cross: Residual | None = None
        if cross_attention:
            self.cross_attn = MultiHeadAttention(s.d_model, s.num_heads, s.attention_dropout, s.bias)
            self.res_cross = Residual(s.d_model, s.dropout, s.norm_first, s.layer_norm_eps)
        self.feed_forward = FeedForward(s.d_model, s.d_ff, s.activation, s.activation_dropout, s.bias)
        self.res_ff = Residual(s.d_model, s.dropout, s.norm_first, s.layer_norm_eps)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        cache: LayerKeyValues | None = None,
        mode: PassMode = PADDED,
    ) -> DecoderLayerOutput:
        """Run one decoder block.

        Args:
            x: (B, T, D) target vectors (the new positions only when decoding with a cache), or (N_T, D) packed
                with ``mode.packing`` (:mod:`dotformer.packing`).
            memory: (B, S, D) encoder output (None for a decoder-only block), or (N_S, D) with
                ``mode.memory_packing``.
            tgt_mask: optional extra bool mask broadcastable to (B, H, T, T_total), ANDed with the causal mask.
            memory_mask: bool broadcastable to (B, H, T, S), usually the source padding mask (B, 1, 1, S).
            cache: this layer's key/value caches (:class:`dotformer.decoding.cache.LayerCache`), updated in place.
            mode: :class:`PassMode`: the layouts of ``x`` and ``memory``, and whether to return the weights.

        Returns:
            :class:`DecoderLayerOutput` (``output`` has x's shape).
        """
        if self.cross_attn is not None and memory is None:
            raise ConfigError("this decoder layer has cross-attention: pass the encoder memory")
        self_cache, cross_cache = (cache.self_attn, cache.cross_attn) if cache is not None else (None, None)
        self_weights = cross_weights = None
        need_weights, packing = mode.need_weights, mode.packing

        def self_attention(h: Tensor) -> Tensor:  # masked: position t sees positions <= t only
            nonlocal self_weights
            h, self_weights = self.self_attn(h, None, tgt_mask, True, need_weights, self_cache, packing, packing)
            return h

        def cross_attention(h: Tensor) -> Tensor:  # queries from the decoder, keys and values from the memory
            nonlocal cross_weights
            h, cross_weights = self.cross_attn(
                h, memory, memory_mask, False, need_weights, cross_cache, packing, mode.memory_packing
            )
            return h

        x = self.res_self(x, self_attention)  # (B, T, D)
        if self.cross_attn is not None and self.res_cross is not None:
            x = self.res_cross(x, cross_attention)  # (B, T, D)
        x = self.res_ff(x, self.feed_forward)  # (B, T, D)
        return DecoderLayerOutput(x, self_weights, cross_weights)
