"""Sampling: draw each next token from the model's distribution, reshaped by temperature, top-k and top-p.

    p(token) ∝ exp(logit / temperature)                 temperature
    keep the k most likely tokens                       top-k (Fan et al. 2018)
    keep the smallest set whose probability ≥ p         top-p, nucleus sampling (Holtzman et al. 2020)

The filters apply in this order, then the kept probabilities are renormalised and one token is drawn. The
hypotheses record the model's own log-probabilities (temperature 1, no filter), so their scores are comparable with
greedy and beam search. A seeded generator makes the draws repeatable.
"""

from __future__ import annotations

import torch
from torch import Tensor

from dotformer.decoding.config import DecodeConfig
from dotformer.decoding.controls import NO_CONTROLS, Controls
from dotformer.decoding.greedy import TokenPicker, decode_left_to_right
from dotformer.decoding.hypothesis import Hypothesis
from dotformer.model import Transformer


def filter_top_k(logits: Tensor, k: int) -> Tensor:
    """Keep the ``k`` largest logits of every row, set the others to -inf (ties at the k-th value are all kept).

    Shape: (N, V) float -> (N, V). ``k`` <= 0 or >= V keeps everything.
    """
    if k <= 0 or k >= logits.size(-1):
        return logits
    kth = logits.topk(k, dim=-1).values[:, -1:]  # (N, 1) the k-th largest value
    return logits.masked_fill(logits < kth, float("-inf"))  # (N, V)


def filter_top_p(logits: Tensor, p: float) -> Tensor:
    """Nucleus filter: keep, per row, the most likely tokens until their probabilities sum to at least ``p``.

    A token is kept when the probability mass of the tokens ranked strictly before it is below ``p``, so the most
    likely token is always kept. Shape: (N, V) float -> (N, V). ``p`` >= 1 keeps everything.
    """
    if p >= 1.0:
        return logits
    sorted_logits, order = logits.sort(dim=-1, descending=True)  # (N, V)
    probs = sorted_logits.softmax(dim=-1)  # (N, V)
    mass_before = probs.cumsum(dim=-1) - probs  # (N, V) probability of the better-ranked tokens
    drop_sorted = mass_before >= p  # (N, V)
    drop = drop_sorted.scatter(-1, order, drop_sorted)  # (N, V) back in vocabulary order
    return logits.masked_fill(drop, float("-inf"))


def sampling_picker(config: DecodeConfig, generator: torch.Generator) -> TokenPicker:
    """A token picker that draws from the tempered, top-k and top-p filtered distribution with ``generator``."""

    def pick(log_probs: Tensor) -> Tensor:
        logits = filter_top_p(filter_top_k(log_probs / config.temperature, config.top_k), config.top_p)  # (N, V)
        probs = logits.softmax(dim=-1)  # (N, V)
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)  # (N,)

    return pick


def sample(
    model: Transformer,
    src: Tensor,
    config: DecodeConfig | None = None,
    prefix: Tensor | None = None,
    controls: Controls = NO_CONTROLS,
) -> list[list[Hypothesis]]:
    """Sample ``config.n_best`` outputs per sentence (independent draws), token by token.

    Args:
        model: an encoder-decoder :class:`Transformer` (its training flag is restored afterwards).
        src: (B, S) int64 source ids (each ending with EOS), right-padded with PAD.
        config: temperature, top_k, top_p, seed, n_best, the length limits and ``length_penalty`` (for the scores).
        prefix: None, or (B, P) int64 forced first tokens per sentence, right-padded with PAD (every sample starts
            with them).
        controls: see :mod:`dotformer.decoding.controls`.

    Returns:
        For each sentence, ``n_best`` hypotheses sorted by score (best first). The same seed, inputs and batch give
        the same samples; a different batch composition draws different ones.

    Raises:
        ConfigError, ShapeError: the model cannot decode, or ``src`` is malformed or too long for the model.
    """
    config = config or DecodeConfig(strategy="sample")
    generator = torch.Generator(device=src.device)
    generator.manual_seed(config.seed)
    return decode_left_to_right(
        model, src, config, sampling_picker(config, generator), copies=config.n_best, prefix=prefix, controls=controls
    )
