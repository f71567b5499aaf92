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

from dotformer.errors import ConfigError, ShapeError


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
        kind: ``"sinusoidal"`` (any length) or ``"learned"`` (``max_len`` rows).
        max_len: rows of the learned table; the sinusoidal table is precomputed to this length (a non-persistent
            buffer). Positions beyond it are computed on the fly, never stored: ``forward`` does not change the
            module (call :meth:`extend` beforehand to precompute more rows).

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

    def encoding(self, length: int, offset: int | Tensor = 0) -> Tensor:
        """(L, D) encodings of positions ``offset .. offset + L - 1``.

        ``offset`` may be a 0-d int64 tensor (a traced graph's input, :mod:`dotformer.export.onnx`): the rows are then
        gathered from the table (learned, or sinusoids precomputed to ``max_len``), without a range check.
        """
        if isinstance(offset, Tensor):
            rows = offset + torch.arange(length, device=offset.device)  # (L,)
            return (self.table.weight if self.kind == "learned" else self.sinusoids).index_select(0, rows)  # (L, D)
        end = offset + length
        if self.kind == "learned":
            if end > self.max_len:
                raise ShapeError(
                    f"positions up to {end - 1} asked of a learned positional table with max_len={self.max_len}: "
                    f"the input is too long for this model (use a shorter input or sinusoidal encodings)"
                )
            return self.table.weight[offset:end]  # (L, D)
        if end > self.sinusoids.size(0):  # beyond the table: the same formula, not stored
            return sinusoidal_positional_encoding(length, self.d_model, offset, device=self.sinusoids.device)
        return self.sinusoids[offset:end]  # (L, D)

    def extend(self, length: int) -> None:
        """Precompute the sinusoidal table up to ``length`` positions (outside ``forward``; never shrinks it).

        Raises:
            ConfigError: the table is learned (its size is a parameter: ``max_len``).
        """
        if self.kind == "learned":
            raise ConfigError(f"a learned positional table has max_len={self.max_len} rows and cannot be extended")
        if length > self.sinusoids.size(0):
            self.sinusoids = sinusoidal_positional_encoding(length, self.d_model, device=self.sinusoids.device)

    def forward(self, x: Tensor, offset: int | Tensor = 0) -> Tensor:
        """x: (B, L, D) -> x + PE(offset .. offset + L - 1), same shape and dtype."""
        return x + self.encoding(x.size(1), offset).to(x.dtype)  # (B, L, D)


class TokenEmbedding(nn.Module):
    """Looks up token vectors and multiplies them by √d_model (paper §3.4).

    Args:
        vocab_size: V.
        d_model: D.
        pad_id: the PAD id; its row starts at zero and the lookup gives it no gradient (``padding_idx``): untied,
            it stays zero. Tied to the generator (``ModelConfig.tie_output``), the same row is also PAD's output
            vector and the generator's gradient trains it (pushing PAD's logit down, as in fairseq and Marian), so
            it does not stay zero; PAD positions are masked, so its value never reaches a real position.
        scale: multiply by √D (the paper); False leaves the vectors as looked up (``ModelConfig.scale_embeddings``).
    """

    def __init__(self, vocab_size: int, d_model: int, pad_id: int = 0, scale: bool = True) -> None:
        super().__init__()
        self.d_model = d_model
        self.scale = math.sqrt(d_model) if scale else 1.0  # √D (§3.4); 1 for models imported unscaled (BERT)
        self.lookup = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)

    @property
    def weight(self) -> Tensor:
        """(V, D) the embedding matrix (shared with the generator when tied)."""
        return self.lookup.weight

    def forward(self, tokens: Tensor) -> Tensor:
        """tokens: (B, L) int64 (or int32) ids -> (B, L, D) float vectors · √D.

        Raises:
            ShapeError: ``tokens`` is not int64 or int32 (the id dtypes ``nn.Embedding`` takes), or an id is outside
                [0, V).
        """
        if tokens.dtype not in (torch.int64, torch.int32):
            raise ShapeError(f"token ids must be an int64 (or int32) tensor, got dtype {tokens.dtype}")
        if tokens.device.type != "cpu":  # e.g. a CUDA lookup would fail with a device-side assert: check first
            self.check_ids(tokens)
        try:
            return self.lookup(tokens) * self.scale  # (B, L, D)
        except (IndexError, RuntimeError):  # the CPU lookup checks the ids itself; name them
            self.check_ids(tokens)
            raise

    def check_ids(self, tokens: Tensor) -> None:
        """Raise :class:`ShapeError` unless every id lies in [0, V) (2 reductions and a host sync)."""
        V = self.lookup.num_embeddings
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= V):
            raise ShapeError(f"token ids must lie in [0, {V}); got min {int(tokens.min())}, max {int(tokens.max())}")


class InputEmbedding(nn.Module):
    """Token embedding · √D + positional encoding, then dropout (paper §3.4, §3.5, §5.4).

    ``scale=False`` drops the √D and ``norm=True`` adds a LayerNorm before the dropout: BERT's embeddings, for
    imported models (``ModelConfig.scale_embeddings``, ``ModelConfig.embedding_norm``).
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        pad_id: int = 0,
        dropout: float = 0.1,
        positional: Literal["sinusoidal", "learned"] = "sinusoidal",
        max_len: int = 1024,
        token: TokenEmbedding | None = None,
        scale: bool = True,
        norm: bool = False,
        eps: float = 1e-5,
    ) -> None:
        super().__init__()
        self.token = token if token is not None else TokenEmbedding(vocab_size, d_model, pad_id, scale)
        self.position = PositionalEncoding(d_model, positional, max_len)
        self.norm = nn.LayerNorm(d_model, eps=eps) if norm else None
        self.dropout = nn.Dropout(dropout)

    def forward(self, tokens: Tensor, offset: int | Tensor = 0) -> Tensor:
        """tokens: (B, L) int64 -> (B, L, D); ``offset`` is the position of the first token (decoding with a cache;
        a 0-d tensor in a traced graph)."""
        x = self.position(self.token(tokens), offset)  # (B, L, D)
        if self.norm is not None:
            x = self.norm(x)
        return self.dropout(x)  # (B, L, D)
