"""Packed batches: run the position-wise layers on the real tokens only, never on the padding.

A right-padded batch of B sentences is a (B, L, D) tensor in which some rows are PAD. Everything in a Transformer
layer except attention works on each position alone: the Q/K/V and output projections, the feed-forward network,
LayerNorm, dropout, the residual additions and the generator. Those are ~90 % of a training step's work, and with
sentences of mixed lengths 10-30 % of it is spent on PAD positions whose results are thrown away.

Packing removes that waste (the "remove padding" trick of FasterTransformer and of variable-length flash attention):
the real tokens of the batch are gathered into one (N, D) tensor, N = number of real tokens, and stay packed through
the whole stack. Only attention, which mixes positions, needs the (B, L) layout: a :class:`Packing` is the
:class:`~dotformer.multihead.Layout` that :meth:`MultiHeadAttention.forward
<dotformer.multihead.MultiHeadAttention.forward>` unpacks its projected queries, keys and values with (zeros at the
padding), and packs its result with again. The layers and stacks run unchanged on (N, D) tensors and pass the packing
down to their attention. The padding positions the masks hide are the only ones packing drops, so the real positions'
outputs are the same as without packing (tested). ``Transformer.encode(packing=...)``, ``decode(packing=...)`` and
``forward(packed=True)`` use it.

Shapes follow the legend in :mod:`dotformer.attention`; N = number of real (non-PAD) tokens in the batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from dotformer.errors import ShapeError
from dotformer.masks import check_right_padded


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
    dims: ClassVar[int] = 2  # the caller's vectors are (N, D)

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

    def pack_weights(self, weights: Tensor) -> Tensor:
        """Attention weights stay in the padded (B, H, T, S) layout: returned as they are."""
        return weights
