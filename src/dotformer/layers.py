"""The pieces of one Transformer block (paper §3.1, §3.3): the position-wise feed-forward network, the residual +
LayerNorm wrapper around every sublayer, and the encoder and decoder layers built from them.

The modern block's changes to them, each a switch of :class:`LayerSizes` (off by default): RMSNorm in place of
LayerNorm (:class:`RMSNorm`), a gated feed-forward network (SwiGLU, GeGLU), GELU's tanh approximation, a norm on
each sublayer's output too ("sandwich"), and the attention's own (:class:`~dotformer.multihead.MultiHeadAttention`).

Shapes follow the legend in :mod:`dotformer.attention`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Literal, NamedTuple, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dotformer.errors import ConfigError
from dotformer.multihead import KeyValueCache, Layout, MultiHeadAttention
from dotformer.positional import Rotary, RotarySettings

Activation = Literal["relu", "gelu", "silu", "gelu_tanh"]
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,
    "silu": F.silu,
    "gelu_tanh": partial(F.gelu, approximate="tanh"),  # GPT-2's gelu_new, Gemma's gelu_pytorch_tanh
}
Norm = Literal["layernorm", "rmsnorm"]


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


class RMSNorm(nn.Module):
    """RMSNorm(x) = x / √(mean(x²) + ε) · w over the last dim (Zhang & Sennrich 2019, "Root Mean Square Layer
    Normalization"): LayerNorm without the mean subtraction and the bias. Llama, Mistral, Qwen and Gemma use it.

    The normalisation is computed in float32 (half-precision inputs are upcast) and cast back to the input's dtype.
    With ``unit_offset`` the scale is (1 + w), w stored and initialised to 0 (Gemma); the product is then taken in
    float32 before the cast, as Gemma does, and without it after the cast, as Llama does (the same in float32).

    Args:
        size: the normalised width (D, or Dh for QK-norm).
        eps: ε (``ModelConfig.layer_norm_eps``).
        unit_offset: scale by (1 + w) instead of w.

    Shape: (..., size) -> (..., size), the input's dtype.
    """

    def __init__(self, size: int, eps: float = 1e-6, unit_offset: bool = False) -> None:
        super().__init__()
        self.eps = eps
        self.unit_offset = unit_offset
        self.weight = nn.Parameter(torch.zeros(size) if unit_offset else torch.ones(size))

    def forward(self, x: Tensor) -> Tensor:
        """(..., size) -> (..., size): x / √(mean(x²) + ε) · w (or · (1 + w))."""
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + self.eps)  # (..., size) unit root mean square
        if self.unit_offset:
            return (h * (1.0 + self.weight.float())).to(x.dtype)
        return self.weight * h.to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.numel()}, eps={self.eps}, unit_offset={self.unit_offset}"


def make_norm(size: int, norm: Norm = "layernorm", eps: float = 1e-5, unit_offset: bool = False) -> nn.Module:
    """A LayerNorm (the paper) or an :class:`RMSNorm` of width ``size`` (``ModelConfig.norm``).

    Raises:
        ConfigError: an unknown norm.
    """
    if norm == "layernorm":
        return nn.LayerNorm(size, eps=eps)
    if norm == "rmsnorm":
        return RMSNorm(size, eps=eps, unit_offset=unit_offset)
    raise ConfigError(f"norm must be 'layernorm' or 'rmsnorm', got {norm!r}")


class FeedForward(nn.Module):
    """FFN(x) = max(0, x·W_1 + b_1)·W_2 + b_2, the same two linear maps at every position (paper §3.3, Eq. 2).

    With another activation f: FFN(x) = f(x·W_1 + b_1)·W_2 + b_2, where GELU(z) = z·Φ(z) (Φ the standard normal
    CDF, BERT and GPT), its tanh approximation 0.5·z·(1 + tanh(√(2/π)·(z + 0.044715·z³))) (GPT-2, Gemma) and
    SiLU(z) = z·σ(z) (σ the logistic sigmoid; "swish", Marian's OPUS-MT models).

    Gated (Shazeer 2020, "GLU Variants Improve Transformer"): FFN(x) = (f(x·W_gate) ⊙ x·W_1)·W_2, a third matrix
    whose activation gates the inner vector elementwise: SwiGLU with SiLU (Llama, Mistral, Qwen), GeGLU with GELU
    (Gemma, tanh). HF's gate_proj, up_proj and down_proj are W_gate, W_1 and W_2.

    Args:
        d_model: D, input and output width.
        d_ff: F, inner width (2048 in the paper's base model).
        activation: ``"relu"`` (the paper), ``"gelu"``, ``"silu"`` or ``"gelu_tanh"``.
        dropout: dropout on the inner activations during training.
        bias: whether W_1 and W_2 (and W_gate) have biases.
        gated: add W_gate (F, D), the gated form.

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
        gated: bool = False,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ConfigError(
                f"FeedForward activation must be 'relu', 'gelu', 'silu' or 'gelu_tanh', got {activation!r}"
            )
        self.activation = activation
        self.W_1 = nn.Linear(d_model, d_ff, bias=bias)
        self.W_2 = nn.Linear(d_ff, d_model, bias=bias)
        self.W_gate = nn.Linear(d_model, d_ff, bias=bias) if gated else None
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """(B, L, D) -> (B, L, D)."""
        if self.W_gate is not None:  # gated: f(x·W_gate) ⊙ x·W_1
            hidden = ACTIVATIONS[self.activation](self.W_gate(x)) * self.W_1(x)  # (B, L, F)
            return self.W_2(self.dropout(hidden))  # (B, L, D)
        hidden = self.W_1(x)  # (B, L, F)
        hidden = ACTIVATIONS[self.activation](hidden)  # (B, L, F)
        return self.W_2(self.dropout(hidden))  # (B, L, D)


class Residual(nn.Module):
    """The connection around every sublayer: residual, dropout and LayerNorm (paper §3.1, §5.4).

    Post-LN (the paper): ``LayerNorm(x + Dropout(Sublayer(x)))``.
    Pre-LN (``norm_first=True``, Xiong et al. 2020): ``x + Dropout(Sublayer(LayerNorm(x)))``; the stack then needs a
    final LayerNorm, which :class:`dotformer.stacks.Encoder` and :class:`dotformer.stacks.Decoder` add.
    Sandwich (``sandwich=True``, pre-LN only; Ding et al. 2021, Gemma 2/3):
    ``x + Dropout(Norm_post(Sublayer(Norm(x))))``.

    ``norm`` picks LayerNorm or :class:`RMSNorm` (``unit_offset``: Gemma's (1 + w)) for every norm here.

    Shape: ``residual(x, sublayer)`` with x (B, L, D) (or packed (N, D)) and ``sublayer`` mapping that shape to itself.
    """

    def __init__(
        self,
        d_model: int,
        dropout: float = 0.1,
        norm_first: bool = False,
        eps: float = 1e-5,
        *,
        norm: Norm = "layernorm",
        unit_offset: bool = False,
        sandwich: bool = False,
    ) -> None:
        super().__init__()
        if sandwich and not norm_first:
            raise ConfigError("a sandwich norm normalises a pre-norm sublayer's output: needs norm_first")
        self.norm_first = norm_first
        self.norm = make_norm(d_model, norm, eps, unit_offset)
        self.post_norm = make_norm(d_model, norm, eps, unit_offset) if sandwich else None
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        """(B, L, D) -> (B, L, D): the formula, post-LN, pre-LN or sandwich."""
        if self.post_norm is not None:
            return x + self.dropout(self.post_norm(sublayer(self.norm(x))))  # sandwich
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
    # The modern block's switches (dotformer.ModelConfig's fields of the same names), off by default.
    norm: Norm = "layernorm"  # every norm: LayerNorm or RMSNorm
    norm_unit_offset: bool = False  # RMSNorm's scale is (1 + w)
    ffn_gated: bool = False  # FFN(x) = (f(x·W_gate) ⊙ x·W_1)·W_2
    num_kv_heads: int | None = None  # H_kv key/value heads (None: H)
    head_size: int | None = None  # Dh (None: D / H)
    qkv_bias: bool | None = None  # biases on W_q, W_k, W_v (None: as bias)
    qk_norm: bool = False  # RMSNorm over Dh of q and k
    attention_scale: float | None = None  # scores · scale (None: 1/√Dh)
    attention_softcap: float | None = None  # c · tanh(scores / c)
    sandwich_norm: bool = False  # a norm on each sublayer's output too
    rotary: RotarySettings | None = None  # RoPE in every self-attention, or None
    sliding_window: int | None = None  # W of the causal self-attention of sliding layers
    layer_types: tuple[str, ...] | None = None  # per layer "full" or "sliding" (None: all sliding if W is set)

    def for_layer(self, index: int) -> LayerSizes:
        """The sizes of layer ``index``: a full layer has no window; a sliding one has ``sliding_window`` and its
        own rotary base (:meth:`~dotformer.positional.RotarySettings.local`)."""
        if self.sliding_window is None:
            return replace(self, layer_types=None)
        sliding = self.layer_types is None or self.layer_types[index] == "sliding"
        if not sliding:
            return replace(self, sliding_window=None, layer_types=None)
        return replace(self, rotary=self.rotary.local() if self.rotary is not None else None, layer_types=None)

    def residual(self) -> Residual:
        """The residual connection around one sublayer, with these sizes' norms."""
        return Residual(
            self.d_model,
            self.dropout,
            self.norm_first,
            self.layer_norm_eps,
            norm=self.norm,
            unit_offset=self.norm_unit_offset,
            sandwich=self.sandwich_norm,
        )

    def feed_forward(self) -> FeedForward:
        """The feed-forward sublayer of these sizes."""
        return FeedForward(
            self.d_model, self.d_ff, self.activation, self.activation_dropout, self.bias, gated=self.ffn_gated
        )

    def attention(self, rotary: Rotary | None = None, causal: bool = False) -> MultiHeadAttention:
        """An attention sublayer of these sizes: self-attention with ``rotary`` (RoPE) and, when ``causal``, the
        sliding window; cross-attention with neither."""
        dh = self.head_size if self.head_size is not None else self.d_model // self.num_heads

        def qk_norm() -> RMSNorm | None:
            return RMSNorm(dh, self.layer_norm_eps, self.norm_unit_offset) if self.qk_norm else None

        return MultiHeadAttention(
            self.d_model,
            self.num_heads,
            self.attention_dropout,
            self.bias,
            num_kv_heads=self.num_kv_heads,
            head_size=self.head_size,
            qkv_bias=self.qkv_bias,
            q_norm=qk_norm(),
            k_norm=qk_norm(),
            rotary=rotary,
            scale=self.attention_scale,
            softcap=self.attention_softcap,
            sliding_window=self.sliding_window if causal else None,
        )


class EncoderLayerOutput(NamedTuple):
    """output: (B, S, D); self_weights: (B, H, S, S) when asked for, else None."""

    output: Tensor
    self_weights: Tensor | None


class EncoderLayer(nn.Module):
    """One encoder block: self-attention, then the FFN, each wrapped in residual + LayerNorm (paper §3.1)."""

    def __init__(self, sizes: LayerSizes, rotary: Rotary | None = None) -> None:
        super().__init__()
        self.self_attn = sizes.attention(rotary)
        self.feed_forward = sizes.feed_forward()
        self.res_attn = sizes.residual()
        self.res_ff = sizes.residual()

    def forward(self, x: Tensor, mask: Tensor | None = None, mode: PassMode = PADDED) -> EncoderLayerOutput:
        """x: (B, S, D) (or (N_S, D) packed with ``mode.packing``, :mod:`dotformer.packing`); mask: bool
        broadcastable to (B, H, S, S) (usually the (B, 1, 1, S) padding mask); mode: :class:`PassMode`.

        Returns x's shape and, with ``mode.need_weights``, the (B, H, S, S) self-attention weights.
        """
        weights = None

        def self_attention(h: Tensor) -> Tensor:
            nonlocal weights
            h, weights = self.self_attn(
                h, mask=mask, need_weights=mode.need_weights, packing=mode.packing, kv_packing=mode.packing
            )
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
    ``rotary`` turns the self-attention's q and k by position (RoPE); ``sizes.sliding_window`` limits its keys.
    """

    def __init__(self, sizes: LayerSizes, cross_attention: bool = True, rotary: Rotary | None = None) -> None:
        super().__init__()
        self.self_attn = sizes.attention(rotary, causal=True)
        self.res_self = sizes.residual()
        self.cross_attn: MultiHeadAttention | None = None
        self.res_cross: Residual | None = None
        if cross_attention:
            self.cross_attn = sizes.attention()
            self.res_cross = sizes.residual()
        self.feed_forward = sizes.feed_forward()
        self.res_ff = sizes.residual()

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
            h, self_weights = self.self_attn(
                h,
                mask=tgt_mask,
                is_causal=True,
                need_weights=need_weights,
                cache=self_cache,
                packing=packing,
                kv_packing=packing,
            )
            return h

        def cross_attention(h: Tensor) -> Tensor:  # queries from the decoder, keys and values from the memory
            nonlocal cross_weights
            h, cross_weights = self.cross_attn(
                h,
                memory,
                mask=memory_mask,
                need_weights=need_weights,
                cache=cross_cache,
                packing=packing,
                kv_packing=mode.memory_packing,
            )
            return h

        x = self.res_self(x, self_attention)  # (B, T, D)
        if self.cross_attn is not None and self.res_cross is not None:
            x = self.res_cross(x, cross_attention)  # (B, T, D)
        x = self.res_ff(x, self.feed_forward)  # (B, T, D)
        return DecoderLayerOutput(x, self_weights, cross_weights)
