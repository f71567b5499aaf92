"""Packed batches: run the position-wise layers on the real tokens only, never on the padding.

A right-padded batch of B sentences is a (B, L, D) tensor in which some rows are PAD. Everything in a Transformer
layer except attention works on each position alone: the Q/K/V and output projections, the feed-forward network,
LayerNorm, dropout, the residual additions and the generator. Those are ~90 % of a training step's work, and with
sentences of mixed lengths 10-30 % of it is spent on PAD positions whose results are thrown away.

Packing removes that waste (the "remove padding" trick of FasterTransformer and of variable-length flash attention):
the real tokens of the batch are gathered into one (N, D) tensor, N = number of real tokens, and stay packed through
the whole stack. Only attention, which mixes positions, needs the (B, L) layout: it scatters its projected queries,
keys and values back into zero-padded (B, H, L, Dh) tensors, attends with the usual masks, and gathers the real rows
of the result again. The padding positions the masks hide are the only ones packing drops, so the real positions'
outputs are the same as without packing (tested).

Packing is applied around the lesson's modules, not threaded through them: :func:`packed_encoder` and
:func:`packed_decoder` run an :class:`~dotformer.stacks.Encoder` / :class:`~dotformer.stacks.Decoder` stack layer by
layer with the layers' own sublayers and residual connections, calling :func:`packed_attention` where the lesson's
layer calls its attention. ``Transformer.encode(packing=...)``, ``decode(packing=...)`` and ``forward(packed=True)``
use them.

Shapes follow the legend in :mod:`dotformer.attention`; N = number of real (non-PAD) tokens in the batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from dotformer.errors import ConfigError, ShapeError
from dotformer.masks import check_right_padded

if TYPE_CHECKING:
    from dotformer.layers import DecoderLayer, EncoderLayer
    from dotformer.multihead import MultiHeadAttention
    from dotformer.stacks import Decoder, Encoder

Weights = tuple[Tensor, ...] | None  # one (B, H, T, S) tensor per layer, when asked for


@dataclass(frozen=True)
class Packing:
    """Where the real tokens of a (B, L) batch sit, to move vectors between (B, L, ...) and (N, ...).

    Attributes:
        index: (N,) int64, the flat positions b·L + l of the real tokens, in row-major order (sentence by
            sentence, left to right): ``packing.pack(x)`` equals ``x[keep]`` for the (B, L) bool ``keep``.
        batch_size: B.
        length: L, the padded length.
    """

    index: Tensor
    batch_size: int
    length: int

    @classmethod
    def from_mask(cls, keep: Tensor) -> Packing:
        """The packing of the True positions of ``keep``, a (B, L) bool tensor (True = real token).

        Raises:
            ShapeError: ``keep`` is not a 2-D bool tensor.
        """
        if keep.dim() != 2 or keep.dtype != torch.bool:
            raise ShapeError(f"packing needs a (B, L) bool mask of real tokens, got {tuple(keep.shape)} {keep.dtype}")
        B, L = keep.shape
        return cls(keep.reshape(-1).nonzero().squeeze(1), B, L)  # index: (N,)

    @classmethod
    def of_tokens(cls, tokens: Tensor, pad_id: int, right_padded: bool = False) -> Packing:
        """The packing of the non-PAD ids of a (B, L) int64 batch.

        Args:
            tokens: (B, L) integer ids. pad_id: the PAD id.
            right_padded: require every row's PADs to come after its real tokens. A causal decoder needs it: its
                queries may attend to any earlier position, and a PAD inside a row would be a key that packing
                drops (the padded computation would attend to it).

        Raises:
            ShapeError: ``tokens`` is not (B, L), or (with ``right_padded``) a row has a PAD before a real token.
        """
        if tokens.dim() != 2:
            raise ShapeError(f"packing needs (B, L) token ids, got {tuple(tokens.shape)}")
        if right_padded:
            check_right_padded(tokens, pad_id, "packed targets")
        return cls.from_mask(tokens != pad_id)

    @property
    def num_tokens(self) -> int:
        """N, the number of real tokens."""
        return self.index.numel()

    def pack(self, x: Tensor) -> Tensor:
        """(B, L, ...) -> (N, ...): keep the real positions, row-major.

        Raises:
            ShapeError: ``x`` does not start with this packing's (B, L).
        """
        if x.dim() < 2 or tuple(x.shape[:2]) != (self.batch_size, self.length):
            raise ShapeError(f"cannot pack {tuple(x.shape)}: expected (B={self.batch_size}, L={self.length}, ...)")
        return x.flatten(0, 1).index_select(0, self.index)  # (N, ...)

    def unpack(self, x: Tensor) -> Tensor:
        """(N, ...) -> (B, L, ...): put the real positions back, zeros at the padding.

        Raises:
            ShapeError: ``x`` does not have N rows.
        """
        if x.dim() < 1 or x.size(0) != self.num_tokens:
            raise ShapeError(f"cannot unpack {tuple(x.shape)}: expected (N={self.num_tokens}, ...) packed rows")
        padded = x.new_zeros((self.batch_size * self.length, *x.shape[1:]))  # (B·L, ...)
        return padded.index_copy(0, self.index, x).view(self.batch_size, self.length, *x.shape[1:])  # (B, L, ...)


def pack(x: Tensor, packing: Packing | None) -> Tensor:
    """(B, L, ...) -> (N, ...) with ``packing``; ``x`` itself when ``packing`` is None (the padded layout)."""
    return x if packing is None else packing.pack(x)


def unpack(x: Tensor, packing: Packing | None) -> Tensor:
    """(N, ...) -> (B, L, ...) with ``packing``; ``x`` itself when ``packing`` is None (the padded layout)."""
    return x if packing is None else packing.unpack(x)


def packed_attention(
    attention: MultiHeadAttention,
    query: Tensor,
    key_value: Tensor,
    mask: Tensor | None,
    packing: Packing,
    kv_packing: Packing,
    is_causal: bool = False,
    need_weights: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """``attention``'s forward on packed vectors: the projections on the real tokens, attention on the (B, L) layout.

    Args:
        attention: the :class:`~dotformer.multihead.MultiHeadAttention` whose weights are used.
        query: (N_T, D) packed with ``packing``. key_value: (N_S, D) packed with ``kv_packing``.
        mask: bool broadcastable to (B, H, T, S); it must hide the padding keys (the padding mask, and the causal mask
            over right-padded targets, do), which packing drops. is_causal, need_weights: as in the module's forward.

    Returns:
        (N_T, D) output, packed like ``query``, and the (B, H, T, S) weights or None.

    Raises:
        ShapeError: ``query`` or ``key_value`` are not (N, D) for their packings, or the batch sizes differ.
    """
    check_packed(query, packing, "query")
    check_packed(key_value, kv_packing, "key_value")
    if kv_packing.batch_size != packing.batch_size:
        raise ShapeError(
            f"key_value is packed from B={kv_packing.batch_size} sentences, query from B={packing.batch_size}"
        )
    q = attention.split_heads(packing.unpack(attention.W_q(query)))  # (B, H, T, Dh), zeros at the padding
    k = attention.split_heads(kv_packing.unpack(attention.W_k(key_value)))  # (B, H, S, Dh)
    v = attention.split_heads(kv_packing.unpack(attention.W_v(key_value)))  # (B, H, S, Dh)
    heads, weights = attention.attend(q, k, v, mask, is_causal, need_weights, keys_hidden=True)  # padding: zeros
    return attention.W_o(packing.pack(attention.merge_heads(heads))), weights  # (N_T, D)


def packed_encoder(
    encoder: Encoder, x: Tensor, mask: Tensor | None, packing: Packing, need_weights: bool = False
) -> tuple[Tensor, Weights]:
    """:meth:`Encoder.forward <dotformer.stacks.Encoder.forward>` on packed (N_S, D) vectors; returns the packed
    (N_S, D) memory and the per-layer weights (None unless asked for).

    Raises:
        ShapeError: ``x`` is not (N_S, D) for this packing.
    """
    check_packed(x, packing, "source vectors")
    weights = []
    for layer in encoder.layers:
        x, w = packed_encoder_layer(layer, x, mask, packing, need_weights)  # (N_S, D)
        weights.append(w)
    if encoder.final_norm is not None:
        x = encoder.final_norm(x)
    return x, tuple(weights) if need_weights else None


def packed_encoder_layer(
    layer: EncoderLayer, x: Tensor, mask: Tensor | None, packing: Packing, need_weights: bool = False
) -> tuple[Tensor, Tensor | None]:
    """:meth:`EncoderLayer.forward <dotformer.layers.EncoderLayer.forward>` on packed (N_S, D) vectors."""
    weights = None

    def self_attention(h: Tensor) -> Tensor:
        nonlocal weights
        h, weights = packed_attention(layer.self_attn, h, h, mask, packing, packing, need_weights=need_weights)
        return h

    x = layer.res_attn(x, self_attention)  # (N_S, D)
    return layer.res_ff(x, layer.feed_forward), weights  # (N_S, D)


def packed_decoder(
    decoder: Decoder,
    x: Tensor,
    memory: Tensor | None,
    tgt_mask: Tensor | None,
    memory_mask: Tensor | None,
    packing: Packing,
    memory_packing: Packing | None,
    need_weights: bool = False,
) -> tuple[Tensor, Weights, Weights]:
    """:meth:`Decoder.forward <dotformer.stacks.Decoder.forward>` on packed (N_T, D) vectors and an (N_S, D) memory
    packed with ``memory_packing`` (or a (B, S, D) one without it); returns the packed (N_T, D) hidden states and the
    per-layer self- and cross-attention weights (None unless asked for).

    Raises:
        ShapeError: ``x`` or ``memory`` do not fit their packings. ConfigError: a cross-attention decoder got no memory.
    """
    check_packed(x, packing, "target vectors")
    if memory is not None and memory_packing is None:  # a padded (B, S, D) memory: every position counts as real
        memory_packing = Packing(torch.arange(memory.size(0) * memory.size(1), device=memory.device), *memory.shape[:2])
        memory = memory.flatten(0, 1)  # (B·S, D)
    if memory is not None and memory_packing is not None:
        check_packed(memory, memory_packing, "memory")
    self_w, cross_w = [], []
    for layer in decoder.layers:
        x, sw, cw = packed_decoder_layer(
            layer, x, memory, tgt_mask, memory_mask, packing, memory_packing, need_weights
        )  # (N_T, D)
        self_w.append(sw)
        cross_w.append(cw)
    if decoder.final_norm is not None:
        x = decoder.final_norm(x)
    if not need_weights:
        return x, None, None
    return x, tuple(self_w), tuple(cross_w) if memory is not None else None


def packed_decoder_layer(
    layer: DecoderLayer,
    x: Tensor,
    memory: Tensor | None,
    tgt_mask: Tensor | None,
    memory_mask: Tensor | None,
    packing: Packing,
    memory_packing: Packing | None,
    need_weights: bool = False,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """:meth:`DecoderLayer.forward <dotformer.layers.DecoderLayer.forward>` on packed (N_T, D) vectors.

    Raises:
        ConfigError: the layer has cross-attention and no (packed) memory was given.
    """
    cross_attn = layer.cross_attn
    if cross_attn is not None and (memory is None or memory_packing is None):
        raise ConfigError("this decoder layer has cross-attention: pass the encoder memory")
    self_weights = cross_weights = None

    def self_attention(h: Tensor) -> Tensor:  # masked: position t sees positions <= t only
        nonlocal self_weights
        h, self_weights = packed_attention(layer.self_attn, h, h, tgt_mask, packing, packing, True, need_weights)
        return h

    def cross_attention(h: Tensor) -> Tensor:
        nonlocal cross_weights
        assert cross_attn is not None and memory is not None and memory_packing is not None
        h, cross_weights = packed_attention(
            cross_attn, h, memory, memory_mask, packing, memory_packing, need_weights=need_weights
        )
        return h

    x = layer.res_self(x, self_attention)  # (N_T, D)
    if layer.res_cross is not None:
        x = layer.res_cross(x, cross_attention)  # (N_T, D)
    return layer.res_ff(x, layer.feed_forward), self_weights, cross_weights  # (N_T, D)


def check_packed(x: Tensor, packing: Packing, name: str) -> None:
    """Raise :class:`ShapeError` unless ``x`` is (N, D) with N = ``packing.num_tokens``."""
    if x.dim() != 2 or x.size(0) != packing.num_tokens:
        raise ShapeError(f"{name} must be packed (N={packing.num_tokens}, D), got {tuple(x.shape)}")
