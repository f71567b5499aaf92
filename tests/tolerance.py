"""Tolerances derived from the arithmetic, for tests that compare two computations of the same values.

Each rounding in a floating-point format with a p-bit significand is exact up to a relative error of
u = 2^-p: float32 2^-24, float64 2^-53, bfloat16 2^-8, float16 2^-11 (:data:`UNIT_ROUNDOFF`). A sum of n terms
computed in any order is off by at most γ_n · Σ|t_i|, γ_n = n·u / (1 - n·u) ≈ n·u (Higham, "Accuracy and Stability
of Numerical Algorithms", §4.2), so two evaluations in different orders (another vector unit, another blocking of a
matrix product, another batch around the same row) differ by at most 2·n·u·Σ|t_i|. A value that goes through a
chain of such sums, each stage well conditioned (a LayerNorm renormalises, a softmax of bounded scores), carries
the sum of the stages' bounds to first order: :func:`reordering_bound`.

These are worst cases: rounding errors mostly cancel, and a measured difference is typically ~√n times smaller.
A tolerance from them holds on every CPU while still failing on a real error (a padded position that leaks, a
missing scale), which moves values by orders of magnitude more.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

UNIT_ROUNDOFF = {torch.float32: 2.0**-24, torch.float64: 2.0**-53, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}


def reordering_bound(sums: Iterable[int], scale: float, dtype: torch.dtype = torch.float32) -> float:
    """The most two evaluations of the same values can differ when each value of magnitude up to ``scale`` goes
    through sums of ``sums`` terms (one length per stage of the chain) in ``dtype``: 2 · Σn · u · scale."""
    return 2.0 * sum(sums) * UNIT_ROUNDOFF[dtype] * scale


def attention_sums(d_model: int, num_heads: int, keys: int) -> list[int]:
    """The sums behind one output value of an attention sublayer and its LayerNorm: the projection (D terms), the
    scores (Dh = D / H), the weighted values (``keys``), W_o (D), the LayerNorm's mean and variance (D each)."""
    return [d_model, d_model // num_heads, keys, d_model, 2 * d_model]


def feed_forward_sums(d_model: int, d_ff: int) -> list[int]:
    """The sums behind one output value of a feed-forward sublayer and its LayerNorm: D, then F, then 2 · D."""
    return [d_model, d_ff, 2 * d_model]


def encoder_sums(d_model: int, num_heads: int, d_ff: int, num_layers: int, length: int) -> list[int]:
    """The sums behind one value of an encoder's output (``num_layers`` layers, at most ``length`` tokens)."""
    return num_layers * [*attention_sums(d_model, num_heads, length), *feed_forward_sums(d_model, d_ff)]


def decoder_sums(d_model: int, num_heads: int, d_ff: int, num_layers: int, length: int, memory: int) -> list[int]:
    """The sums behind one value of a decoder's output (``num_layers`` layers with cross-attention, ``length``
    target and ``memory`` source tokens at most), without the generator (add ``d_model`` for a logit)."""
    layer = [*attention_sums(d_model, num_heads, length), *attention_sums(d_model, num_heads, memory)]
    return num_layers * [*layer, *feed_forward_sums(d_model, d_ff)]


def logit_sums(config: object, tgt_len: int, src_len: int = 0) -> list[int]:
    """The sums behind one logit of a Transformer of ``config`` (a :class:`~dotformer.config.ModelConfig`): its
    encoder's (the memory enters every cross-attention), its decoder's, and the generator's D terms."""
    D, H, F = config.d_model, config.num_heads, config.d_ff  # type: ignore[attr-defined]
    encoder = encoder_sums(D, H, F, config.num_encoder_layers, src_len) if src_len else []  # type: ignore[attr-defined]
    layers = config.num_decoder_layers  # type: ignore[attr-defined]
    if config.arch == "decoder-only":  # type: ignore[attr-defined]
        decoder = layers * [*attention_sums(D, H, tgt_len), *feed_forward_sums(D, F)]
    else:
        decoder = decoder_sums(D, H, F, layers, tgt_len, src_len)
    return [*encoder, *decoder, D]


def logits_tolerance(config: object, reference: torch.Tensor, src_len: int = 0) -> float:
    """:func:`reordering_bound` of :func:`logit_sums` at the magnitude of ``reference`` ((B, T, V) float32 logits,
    T the target length): how far two implementations' float32 logits of one model may lie apart."""
    return reordering_bound(logit_sums(config, reference.size(-2), src_len), float(reference.abs().max()))
