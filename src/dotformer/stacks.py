"""The encoder and decoder stacks: N identical layers each (paper §3.1, the two halves of Figure 1).

    memory = Encoder(x)    N encoder layers over the embedded source x (B, S, D)
    hidden = Decoder(y)    N decoder layers over the embedded target y (B, T, D), each reading the memory

Each layer is :class:`~dotformer.layers.EncoderLayer` or :class:`~dotformer.layers.DecoderLayer`; the stacks only run
them in turn, collect the attention weights when asked, and (pre-LN) end with a LayerNorm. :mod:`dotformer.model`
puts them between the embeddings and the generator. Shapes follow the legend in :mod:`dotformer.attention`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from dotformer.layers import PADDED, DecoderLayer, EncoderLayer, LayerKeyValues, LayerSizes, PassMode, make_norm
from dotformer.positional import Rotary, RotarySettings


class StackKeyValues(Protocol):
    """The decoder's decoding caches, one per layer (e.g. :class:`dotformer.decoding.cache.DecoderCache`)."""

    def for_layers(self, num_layers: int) -> Sequence[LayerKeyValues]:
        """The caches of the ``num_layers`` layers, in order."""
        ...


class EncoderOutput(NamedTuple):
    """memory: (B, S, D) the encoder's output ((N_S, D) when packed); self_weights: per layer (B, H, S, S), when
    asked for."""

    memory: Tensor
    self_weights: tuple[Tensor, ...] | None


class DecoderOutput(NamedTuple):
    """hidden: (B, T, D) before the generator ((N_T, D) when packed); self_weights: per layer (B, H, T, T_total);
    cross_weights: per layer (B, H, T, S). Weights are None unless asked for."""

    hidden: Tensor
    self_weights: tuple[Tensor, ...] | None
    cross_weights: tuple[Tensor, ...] | None


def final_norm(sizes: LayerSizes) -> nn.Module | None:
    """A pre-LN stack's last norm (LayerNorm or RMSNorm, ``sizes.norm``); None for post-LN."""
    if not sizes.norm_first:
        return None
    return make_norm(sizes.d_model, sizes.norm, sizes.layer_norm_eps, sizes.norm_unit_offset)


def layer_rotaries(per_layer: list[LayerSizes]) -> list[Rotary | None]:
    """One :class:`~dotformer.positional.Rotary` per distinct setting (global, sliding), shared by the layers that
    use it (its table is a buffer, never a parameter); None for layers without RoPE."""
    shared: dict[RotarySettings, Rotary] = {}
    for sizes in per_layer:
        if sizes.rotary is not None and sizes.rotary not in shared:
            shared[sizes.rotary] = Rotary(sizes.rotary)
    return [shared[sizes.rotary] if sizes.rotary is not None else None for sizes in per_layer]


def run_layer(layer: nn.Module, checkpointed: bool, *args: Any) -> Any:
    """``layer(*args)``; ``checkpointed`` (with gradients on): through ``torch.utils.checkpoint`` (non-reentrant), which
    keeps only the layer's input and recomputes its activations in the backward pass (Chen et al. 2016, "Training
    Deep Nets with Sublinear Memory Cost"): one more forward per layer for the memory of the layer's activations."""
    if checkpointed and torch.is_grad_enabled():
        return checkpoint(layer, *args, use_reentrant=False)
    return layer(*args)


class Encoder(nn.Module):
    """N encoder layers; pre-LN stacks end with a LayerNorm (post-LN layers already end with one)."""

    def __init__(self, sizes: LayerSizes, num_layers: int) -> None:
        super().__init__()
        per_layer = [sizes.for_layer(i) for i in range(num_layers)]
        rotaries = layer_rotaries(per_layer)
        self.layers = nn.ModuleList(EncoderLayer(s, r) for s, r in zip(per_layer, rotaries, strict=True))
        self.final_norm = final_norm(sizes)
        self.checkpointing = False  # training's memory seam: recompute each layer in the backward pass (run_layer)

    def forward(self, x: Tensor, mask: Tensor | None = None, mode: PassMode = PADDED) -> EncoderOutput:
        """x: (B, S, D) embedded source (or (N_S, D) packed with ``mode.packing``); mask: bool broadcastable to
        (B, H, S, S); mode: :class:`~dotformer.layers.PassMode`. Returns the memory, shaped as x."""
        weights = []
        for layer in self.layers:
            x, w = run_layer(layer, self.checkpointing, x, mask, mode)  # (B, S, D)
            weights.append(w)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return EncoderOutput(x, tuple(weights) if mode.need_weights else None)


class Decoder(nn.Module):
    """N decoder layers (masked self-attention, cross-attention, FFN); pre-LN stacks end with a LayerNorm."""

    def __init__(self, sizes: LayerSizes, num_layers: int, cross_attention: bool = True) -> None:
        super().__init__()
        per_layer = [sizes.for_layer(i) for i in range(num_layers)]
        rotaries = layer_rotaries(per_layer)
        self.layers = nn.ModuleList(
            DecoderLayer(s, cross_attention, r) for s, r in zip(per_layer, rotaries, strict=True)
        )
        self.final_norm = final_norm(sizes)
        self.checkpointing = False  # training's memory seam: recompute each layer in the backward pass (run_layer)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        cache: StackKeyValues | None = None,
        mode: PassMode = PADDED,
    ) -> DecoderOutput:
        """x: (B, T, D) embedded target; memory: (B, S, D); masks and mode as in :meth:`DecoderLayer.forward`;
        cache: the decoder's caches, one per layer (:class:`dotformer.decoding.cache.DecoderCache`)."""
        layer_caches = cache.for_layers(len(self.layers)) if cache is not None else [None] * len(self.layers)
        self_w, cross_w = [], []
        for layer, layer_cache in zip(self.layers, layer_caches, strict=True):
            out = run_layer(layer, self.checkpointing, x, memory, tgt_mask, memory_mask, layer_cache, mode)
            x = out.output  # (B, T, D)
            self_w.append(out.self_weights)
            cross_w.append(out.cross_weights)
        if self.final_norm is not None:
            x = self.final_norm(x)
        if not mode.need_weights:
            return DecoderOutput(x, None, None)
        return DecoderOutput(x, tuple(self_w), tuple(cross_w) if memory is not None else None)
