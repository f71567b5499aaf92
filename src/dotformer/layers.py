"""The pieces of one Transformer block (paper §3.1, §3.3): the position-wise feed-forward network, the residual +
LayerNorm wrapper around every sublayer, and the encoder and decoder layers built from them.

Shapes follow the legend in :mod:`dotformer.attention`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import torch.nn.functional as F
from torch import Tensor, nn

from dotformer.errors import ConfigError
from dotformer.multihead import KVCache, MultiHeadAttention
from dotformer.packing import Packing


class FeedForward(nn.Module):
    """FFN(x) = max(0, x·W_1 + b_1)·W_2 + b_2, the same two linear maps at every position (paper §3.3, Eq. 2).

    Args:
        d_model: D, input and output width.
        d_ff: F, inner width (2048 in the paper's base model).
        activation: ``"relu"`` (the paper) or ``"gelu"``.
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
        activation: Literal["relu", "gelu"] = "relu",
        dropout: float = 0.0,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if activation not in ("relu", "gelu"):
            raise ConfigError(f"FeedForward activation must be 'relu' or 'gelu', got {activation!r}")
        self.activation = activation
        self.W_1 = nn.Linear(d_model, d_ff, bias=bias)
        self.W_2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """(B, L, D) -> (B, L, D)."""
        hidden = self.W_1(x)  # (B, L, F)
        hidden = F.relu(hidden) if self.activation == "relu" else F.gelu(hidden)
        return self.W_2(self.dropout(hidden))  # (B, L, D)


class Residual(nn.Module):
    """The wrapper around every sublayer: residual connection, dropout and LayerNorm (paper §3.1, §5.4).

    Post-LN (the paper): ``LayerNorm(x + Dropout(Sublayer(x)))``.
    Pre-LN (``norm_first=True``, Xiong et al. 2020): ``x + Dropout(Sublayer(LayerNorm(x)))``; the stack then needs a
    final LayerNorm, which :class:`dotformer.model.Encoder` and :class:`dotformer.model.Decoder` add.

    Use it in two halves around the sublayer: ``h = res.pre(x)``; ``y = sublayer(h)``; ``x = res.post(x, y)``.
    """

    def __init__(self, d_model: int, dropout: float = 0.1, norm_first: bool = False, eps: float = 1e-5) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def pre(self, x: Tensor) -> Tensor:
        """The sublayer's input: LayerNorm(x) for pre-LN, x itself for post-LN. (B, L, D) -> (B, L, D)."""
        return self.norm(x) if self.norm_first else x

    def post(self, x: Tensor, sublayer_out: Tensor) -> Tensor:
        """Add the sublayer's output back to its input (and normalise for post-LN). (B, L, D) -> (B, L, D)."""
        y = x + self.dropout(sublayer_out)
        return y if self.norm_first else self.norm(y)


@dataclass(frozen=True)
class LayerSizes:
    """The sizes and switches every encoder or decoder layer takes (a subset of :class:`dotformer.ModelConfig`)."""

    d_model: int = 512  # D
    num_heads: int = 8  # H
    d_ff: int = 2048  # F
    dropout: float = 0.1  # on sublayer outputs
    attention_dropout: float = 0.0  # on attention weights
    activation_dropout: float = 0.0  # inside the FFN, after the activation
    activation: Literal["relu", "gelu"] = "relu"  # FFN non-linearity
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

    def forward(
        self, x: Tensor, mask: Tensor | None = None, need_weights: bool = False, packing: Packing | None = None
    ) -> EncoderLayerOutput:
        """x: (B, S, D), or (N, D) packed with ``packing``; mask: bool broadcastable to (B, H, S, S) (usually the
        (B, 1, 1, S) padding mask).

        Returns x's shape and optionally the (B, H, S, S) self-attention weights.
        """
        attn = self.self_attn(self.res_attn.pre(x), mask=mask, need_weights=need_weights, packing=packing)
        x = self.res_attn.post(x, attn.output)  # (B, S, D)
        x = self.res_ff.post(x, self.feed_forward(self.res_ff.pre(x)))  # (B, S, D)
        return EncoderLayerOutput(x, attn.weights)


@dataclass
class LayerCache:
    """Cached keys/values of one decoder layer: its self-attention (growing) and cross-attention (fixed)."""

    self_attn: KVCache = field(default_factory=KVCache)
    cross_attn: KVCache = field(default_factory=KVCache)


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
        cache: LayerCache | None = None,
        need_weights: bool = False,
        packing: Packing | None = None,
        memory_packing: Packing | None = None,
    ) -> DecoderLayerOutput:
        """Run one decoder block.

        Args:
            x: (B, T, D) target vectors (the new positions only when decoding with a cache), or (N_T, D) packed.
            memory: (B, S, D) encoder output (None for a decoder-only block), or (N_S, D) packed.
            tgt_mask: optional extra bool mask broadcastable to (B, H, T, T_total), ANDed with the causal mask.
            memory_mask: bool broadcastable to (B, H, T, S), usually the source padding mask (B, 1, 1, S).
            cache: this layer's key/value cache, updated in place.
            need_weights: also return the attention weights.
            packing, memory_packing: the packings of packed ``x`` and ``memory`` (:mod:`dotformer.packing`).

        Returns:
            :class:`DecoderLayerOutput` (``output`` has x's shape).
        """
        self_cache = cache.self_attn if cache is not None else None
        attn = self.self_attn(
            self.res_self.pre(x),
            mask=tgt_mask,
            is_causal=True,
            need_weights=need_weights,
            cache=self_cache,
            packing=packing,
        )
        x = self.res_self.post(x, attn.output)  # (B, T, D)
        cross_weights = None
        if self.cross_attn is not None and self.res_cross is not None:
            if memory is None:
                raise ConfigError("this decoder layer has cross-attention: pass the encoder memory")
            cross = self.cross_attn(
                self.res_cross.pre(x),
                memory,
                mask=memory_mask,
                need_weights=need_weights,
                cache=cache.cross_attn if cache is not None else None,
                static_kv=True,
                packing=packing,
                kv_packing=memory_packing,
            )
            x = self.res_cross.post(x, cross.output)  # (B, T, D)
            cross_weights = cross.weights
        x = self.res_ff.post(x, self.feed_forward(self.res_ff.pre(x)))  # (B, T, D)
        return DecoderLayerOutput(x, attn.weights, cross_weights)
