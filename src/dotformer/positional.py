"""Token embeddings and positional encodings (paper §3.4 and §3.5), and rotary positions (RoPE).

    input_t = Embedding(token_t) · √d_model + PE(t)
    PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
    PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))

Rotary positions (Su et al. 2021, "RoFormer", ``ModelConfig.positional="rotary"``) add nothing to the embeddings: every
self-attention turns its queries and keys by their positions instead (:class:`Rotary`), so that q_m·k_n depends on
the positions through m - n only.

Shapes follow the legend in :mod:`dotformer.attention`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
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


ROTARY_PRECOMPUTED = 4096  # positions of the rotary cos/sin table built with the module (longer: computed on the fly)


@dataclass(frozen=True)
class RotarySettings:
    """What a :class:`Rotary` needs (from :class:`dotformer.ModelConfig`'s ``rope_*`` fields).

    Attributes:
        dims: R, the rotated dims of each head (even; the first R of Dh, the rest pass through).
        theta: the base θ. scaling: ``"none"``, ``"linear"``, ``"llama3"`` or ``"yarn"`` (HF's rope types).
        factor: the scaling's s. low_freq_factor, high_freq_factor: llama3's. original_max_len: llama3's and yarn's
            original context length. local_theta: the base of sliding layers (unscaled), None: as the others.
        max_len: positions to precompute (at most :data:`ROTARY_PRECOMPUTED`).
    """

    dims: int
    theta: float = 10000.0
    scaling: str = "none"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_len: int = 8192
    local_theta: float | None = None
    max_len: int = 1024

    def local(self) -> RotarySettings:
        """The settings of a sliding-window layer: ``local_theta`` unscaled (Gemma 3), or these."""
        if self.local_theta is None:
            return self
        return replace(self, theta=self.local_theta, scaling="none", factor=1.0, local_theta=None)


def rotary_frequencies(settings: RotarySettings) -> tuple[Tensor, float]:
    """RoPE's angular frequencies ω_i = θ^(-2i/R), i = 0 .. R/2 - 1, after the settings' scaling, in float64.

    * ``linear`` (position interpolation, Chen et al. 2023): ω_i / s.
    * ``llama3`` (Meta's Llama 3.1): wavelengths λ_i = 2π/ω_i longer than L/low (L the original context) are divided
      by s, shorter than L/high kept, and in between ω_i is blended: (1 - a)·ω_i/s + a·ω_i, a = (L/λ_i - low) /
      (high - low).
    * ``yarn`` (Peng et al. 2023): a ramp from ω_i (dims that turn more than 32 times over L) to ω_i / s (fewer than
      once), and cos/sin multiplied by the attention factor 0.1·ln(s) + 1 (HF's defaults: β_fast 32, β_slow 1).

    Returns:
        ((R/2,) float64 frequencies, the factor cos and sin are multiplied by: 1 except for yarn).

    Raises:
        ConfigError: an unknown scaling.
    """
    R, theta, s = settings.dims, settings.theta, settings.factor
    omega = 1.0 / theta ** (torch.arange(0, R, 2, dtype=torch.float64) / R)  # (R/2,)
    if settings.scaling == "none":
        return omega, 1.0
    if settings.scaling == "linear":
        return omega / s, 1.0
    L = settings.original_max_len
    if settings.scaling == "llama3":
        low, high = settings.low_freq_factor, settings.high_freq_factor
        wavelength = 2 * math.pi / omega  # (R/2,)
        blend = (L / wavelength - low) / (high - low)  # (R/2,) 0 at λ = L/low, 1 at λ = L/high
        blended = (1 - blend) * omega / s + blend * omega
        scaled = torch.where(wavelength > L / low, omega / s, omega)
        medium = (wavelength >= L / high) & (wavelength <= L / low)
        return torch.where(medium, blended, scaled), 1.0
    if settings.scaling == "yarn":

        def dim_of(rotations: float) -> float:  # the dim whose pair turns ``rotations`` times over L positions
            return R * math.log(L / (rotations * 2 * math.pi)) / (2 * math.log(theta))

        low, high = max(math.floor(dim_of(32)), 0), min(math.ceil(dim_of(1)), R - 1)
        ramp = ((torch.arange(R // 2, dtype=torch.float64) - low) / max(high - low, 1e-3)).clamp(0, 1)  # (R/2,)
        attention_factor = 0.1 * math.log(s) + 1.0 if s > 1 else 1.0
        return omega / s * ramp + omega * (1 - ramp), attention_factor
    raise ConfigError(f"unknown rotary scaling {settings.scaling!r}: none, linear, llama3 or yarn")


def rotary_table(settings: RotarySettings, length: int, offset: int = 0) -> tuple[Tensor, Tensor]:
    """cos and sin of the angles pos · ω_i for positions ``offset .. offset + length - 1``, each frequency twice (the
    two halves of the rotated dims), computed in float64 and returned as float32.

    Returns:
        (cos, sin), each (L, R) float32.
    """
    omega, factor = rotary_frequencies(settings)
    position = torch.arange(offset, offset + length, dtype=torch.float64)[:, None]  # (L, 1)
    angle = (position * omega).repeat(1, 2)  # (L, R): [θ_0 .. θ_{R/2-1}, θ_0 .. θ_{R/2-1}]
    return (angle.cos() * factor).float(), (angle.sin() * factor).float()


def rotate_half(x: Tensor) -> Tensor:
    """[x1, x2] -> [-x2, x1] over the last dim's two halves: the 90° turn of every pair (x1_i, x2_i)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Rotary(nn.Module):
    """Rotary position embedding, RoPE (Su et al. 2021): turn each pair of a head's dims by an angle that grows with
    the position, so that the score q_m·k_n depends on the positions through m - n only.

        RoPE(x, m) = x ⊙ cos(m·ω) + rotate_half(x) ⊙ sin(m·ω),   ω_i = θ^(-2i/R), i < R/2

    on the first R dims of the head (``rope_fraction``), pairing dim i with dim i + R/2 (HF's convention, "rotate
    half", which released Llama, Qwen and Gemma weights expect; the paper pairs neighbours 2i, 2i+1, a permutation of
    W_q's and W_k's rows). The other Dh - R dims pass through. Frequencies: :func:`rotary_frequencies`.

    The cos/sin table of the first ``min(max_len, ROTARY_PRECOMPUTED)`` positions is a non-persistent buffer (moved
    and cast with the module, never saved); later positions are computed on the fly, never stored: ``forward`` does
    not change the module (:meth:`extend` precomputes more).

    Shape: (B, H, L, Dh) -> (B, H, L, Dh), the rows at positions ``offset .. offset + L - 1``.
    """

    def __init__(self, settings: RotarySettings) -> None:
        super().__init__()
        self.settings = settings
        cos, sin = rotary_table(settings, min(settings.max_len, ROTARY_PRECOMPUTED))
        self.register_buffer("cos", cos, persistent=False)  # (L, R)
        self.register_buffer("sin", sin, persistent=False)  # (L, R)

    def table(self, length: int, offset: int = 0) -> tuple[Tensor, Tensor]:
        """(cos, sin) of positions ``offset .. offset + length - 1``, each (L, R), from the buffer where it holds
        them."""
        end = offset + length
        if end > self.cos.size(0):  # beyond the table: the same formula, not stored
            cos, sin = rotary_table(self.settings, length, offset)
            return cos.to(self.cos), sin.to(self.sin)
        return self.cos[offset:end], self.sin[offset:end]  # (L, R) each

    def extend(self, length: int) -> None:
        """Precompute the table up to ``length`` positions (outside ``forward``; never shrinks it)."""
        if length > self.cos.size(0):
            cos, sin = rotary_table(self.settings, length)
            self.cos, self.sin = cos.to(self.cos), sin.to(self.sin)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """x: (B, H, L, Dh) queries or keys at positions ``offset ..`` -> the same, turned (in x's dtype)."""
        R = self.settings.dims
        cos, sin = self.table(x.size(-2), offset)
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)  # (L, R)
        if x.size(-1) == R:
            return x * cos + rotate_half(x) * sin  # (B, H, L, Dh)
        turned, rest = x[..., :R], x[..., R:]  # (B, H, L, R), (B, H, L, Dh - R)
        return torch.cat((turned * cos + rotate_half(turned) * sin, rest), dim=-1)  # (B, H, L, Dh)


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
    imported models (``ModelConfig.scale_embeddings``, ``ModelConfig.embedding_norm``); ``norm_module`` replaces
    that LayerNorm (an RMSNorm, ``ModelConfig.norm``). ``positional="rotary"`` adds no positions here (the attention
    turns q and k, :class:`Rotary`): ``position`` is then None.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        pad_id: int = 0,
        dropout: float = 0.1,
        positional: Literal["sinusoidal", "learned", "rotary"] = "sinusoidal",
        max_len: int = 1024,
        token: TokenEmbedding | None = None,
        scale: bool = True,
        norm: bool = False,
        eps: float = 1e-5,
        norm_module: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.token = token if token is not None else TokenEmbedding(vocab_size, d_model, pad_id, scale)
        self.position = PositionalEncoding(d_model, positional, max_len) if positional != "rotary" else None
        self.norm = (norm_module if norm_module is not None else nn.LayerNorm(d_model, eps=eps)) if norm else None
        self.dropout = nn.Dropout(dropout)

    def forward(self, tokens: Tensor, offset: int | Tensor = 0) -> Tensor:
        """tokens: (B, L) int64 -> (B, L, D); ``offset`` is the position of the first token (decoding with a cache;
        a 0-d tensor in a traced graph)."""
        x = self.token(tokens)  # (B, L, D)
        if self.position is not None:  # rotary positions enter in the attention instead
            x = self.position(x, offset)  # (B, L, D)
        if self.norm is not None:
            x = self.norm(x)
        return self.dropout(x)  # (B, L, D)
