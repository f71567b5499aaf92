"""Token embeddings and positional encodings (paper §3.4 and §3.5).

    input_t = Embedding(token_t) · √d_model + PE(t)
    PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
    PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))

Shapes follow the legend in :mod:`dotformer.attention`.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor, nn

from dotformer.errors import ShapeError


def sinusoidal_positional_encoding(
    length: int,
    d_model: int,
    offset: int = 0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """The fixed sinusoidal encoding of positions ``offset .. offset + length - 1`` (paper §3.5).

    Even dimensions 2i get sin(pos / 10000^(2i/d_model)), odd dimensions 2i+1 get the cosine of the same angle;
    an odd ``d_model`` ends on a sine. Any length works: nothing is truncated.

    Args:
        length: number of positions L (>= 0).
        d_model: D, the encoding width (>= 1).
        offset: the first position (decoding step by step starts later positions at the cache length).
        dtype, device: of the result (computed in float64 on CPU, then cast).

    Returns:
        (L, D) tensor. For D = 4, position 1 is ≈ [0.8415, 0.5403, 0.0100, 0.99995].

    Raises:
        ShapeError: negative length or offset, or d_model < 1.
    """
    if length < 0 or offset < 0 or d_model < 1:
        raise ShapeError(f"need length >= 0, offset >= 0, d_model >= 1; got {length=}, {offset=}, {d_model=}")
    position = torch.arange(offset, offset + length, dtype=torch.float64)[:, None]  # (L, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (ceil(D/2),) the even dimension indices 2i
    angle = position / torch.pow(10000.0, two_i / d_model)  # (L, ceil(D/2))
    pe = torch.empty(length, d_model, dtype=torch.float64)  # (L, D)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return pe.to(dtype=dtype, device=device)


class PositionalEncoding(nn.Module):
    """Adds position information to (B, L, D) token vectors: sinusoidal (paper §3.5) or a learned table.

    Args:
        d_model: D.
        kind: ``"sinusoidal"`` (any length; the table grows on demand) or ``"learned"`` (``max_len`` rows).
        max_len: rows of the learned table; the sinusoidal table is precomputed to this length and extended.

    Raises (in forward):
        ShapeError: a learned table is asked for positions >= max_len.
    """

    def __init__(self, d_model: int, kind: Literal["sinusoidal", "learned"] = "sinusoidal", max_len: int = 1024):
        super().__init__()
        self.d_model = d_model
        self.kind = kind
        self.max_len = max_len
        if kind == "learned":
            self.table = nn.Embedding(max_len, d_model)
        else:
            self.register_buffer("sinusoids", sinusoidal_positional_encoding(max_len, d_model), persistent=False)

    def encoding(self, length: int, offset: int = 0) -> Tensor:
        """(L, D) encodings of positions ``offset .. offset + L - 1``."""
        end = offset + length
        if self.kind == "learned":
            if end > self.max_len:
                raise ShapeError(
                    f"positions up to {end - 1} asked of a learned positional table with max_len={self.max_len}: "
                    f"the input is too long for this model (use a shorter input or sinusoidal encodings)"
                )
            return self.table.weight[offset:end]  # (L, D)
        if end > self.sinusoids.size(0):
            self.sinusoids = sinusoidal_positional_encoding(2 * end, self.d_model, device=self.sinusoids.device)
        return self.sinusoids[offset:end]  # (L, D)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """x: (B, L, D) -> x + PE(offset .. offset + L - 1), same shape and dtype."""
        return x + self.encoding(x.size(1), offset).to(x.dtype)  # (B, L, D)


class TokenEmbedding(nn.Module):
    """Looks up token vectors and multiplies them by √d_model (paper §3.4).

    Args:
        vocab_size: V.
        d_model: D.
        pad_id: the PAD id; its row starts at zero and gets no gradient.
    """

    def __init__(self, vocab_size: int, d_model: int, pad_id: int = 0) -> None:
        super().__init__()
        self.d_model = d_model
        self.lookup = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)

    @property
    def weight(self) -> Tensor:
        """(V, D) the embedding matrix (shared with the generator when tied)."""
        return self.lookup.weight

    def forward(self, tokens: Tensor) -> Tensor:
        """tokens: (B, L) int64 ids -> (B, L, D) float vectors · √D.

        Raises:
            ShapeError: ``tokens`` is not an integer tensor, or an id is outside [0, V).
        """
        if tokens.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
            raise ShapeError(f"token ids must be an integer tensor (int64), got dtype {tokens.dtype}")
        if tokens.device.type != "cpu":  # e.g. a CUDA lookup would fail with a device-side assert: check first
            self.check_ids(tokens)
        try:
            return self.lookup(tokens) * math.sqrt(self.d_model)  # (B, L, D)
        except (IndexError, RuntimeError):  # the CPU lookup checks the ids itself; name them
            self.check_ids(tokens)
            raise

    def check_ids(self, tokens: Tensor) -> None:
        """Raise :class:`ShapeError` unless every id lies in [0, V) (2 reductions and a host sync)."""
        V = self.lookup.num_embeddings
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= V):
            raise ShapeError(f"token ids must lie in [0, {V}); got min {int(tokens.min())}, max {int(tokens.max())}")


class InputEmbedding(nn.Module):
    """Token embedding · √D + positional encoding, then dropout (paper §3.4, §3.5, §5.4)."""

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        pad_id: int = 0,
        dropout: float = 0.1,
        positional: Literal["sinusoidal", "learned"] = "sinusoidal",
        max_len: int = 1024,
        token: TokenEmbedding | None = None,
    ) -> None:
        super().__init__()
        self.token = token if token is not None else TokenEmbedding(vocab_size, d_model, pad_id)
        self.position = PositionalEncoding(d_model, positional, max_len)
        self.dropout = nn.Dropout(dropout)

    def forward(self, tokens: Tensor, offset: int = 0) -> Tensor:
        """tokens: (B, L) int64 -> (B, L, D); ``offset`` is the position of the first token (decoding with a cache)."""
        return self.dropout(self.position(self.token(tokens), offset))  # (B, L, D)
