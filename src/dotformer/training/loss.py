"""Label-smoothed cross-entropy (paper §5.4, "Label Smoothing ... ε_ls = 0.1"), ignoring padding.

For one target position with gold token y and predicted log-probabilities log p over the V tokens:

    loss = (1 - ε) · (-log p_y)  +  ε · mean_{v ≠ PAD} (-log p_v)

This is the cross-entropy against the smoothed target distribution q that puts 1 - ε on y and spreads ε evenly over
the V - 1 tokens other than PAD (y included): q_y = 1 - ε + ε/(V-1), q_v = ε/(V-1) for every other v ≠ PAD, and
q_PAD = 0. PAD gets no mass because the model should never learn to emit it (the Annotated Transformer also zeroes
the PAD column; fairseq spreads ε over all V tokens). Positions whose gold token is PAD contribute nothing, to the
loss or to the token count.

The functions return SUMS over tokens and the token count, so that the caller normalises once by the number of real
target tokens in the whole (possibly accumulated, possibly distributed) batch.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from dotformer.errors import ShapeError


class LossSums(NamedTuple):
    """Sums over the non-PAD target positions of a batch.

    Attributes:
        loss: () float32 tensor, Σ label-smoothed loss (differentiable); divide by ``num_tokens`` for the mean.
        nll: () float32 tensor, Σ -log p(gold) (detached); exp(nll / num_tokens) is the perplexity.
        num_tokens: () int64 tensor, the number of non-PAD target positions.
    """

    loss: Tensor
    nll: Tensor
    num_tokens: Tensor


def label_smoothed_cross_entropy(logits: Tensor, target: Tensor, epsilon: float = 0.1, pad_id: int = 0) -> LossSums:
    """Summed label-smoothed cross-entropy and NLL over the non-PAD positions (paper §5.4).

    Args:
        logits: (B, T, V) (or (N, V)) unnormalised scores, any float dtype; computed in float32.
        target: (B, T) (or (N,)) int64 gold token ids; positions equal to ``pad_id`` are ignored.
        epsilon: ε_ls in [0, 1); 0 gives the plain cross-entropy.
        pad_id: the PAD id: ignored as a target and given no smoothing mass.

    Returns:
        :class:`LossSums` (loss, nll, num_tokens), sums over the non-PAD positions.

    Raises:
        ShapeError: ``logits`` and ``target`` do not agree, or V < 2.
    """
    if logits.shape[:-1] != target.shape:
        raise ShapeError(f"logits {tuple(logits.shape)} must be target {tuple(target.shape)} plus a vocabulary dim")
    V = logits.size(-1)
    if V < 2:
        raise ShapeError(f"label smoothing needs a vocabulary of at least 2 tokens, got V={V}")
    log_probs = F.log_softmax(logits.float(), dim=-1)  # (B, T, V) float32
    keep = target != pad_id  # (B, T) bool: real target tokens
    gold = log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (B, T) log p(y)
    nll = -gold.masked_fill(~keep, 0.0).sum()
    if epsilon > 0:
        # mean over the V-1 non-PAD tokens of -log p_v
        smooth = -(log_probs.sum(dim=-1) - log_probs[..., pad_id]) / (V - 1)  # (B, T)
        loss = (1.0 - epsilon) * nll + epsilon * smooth.masked_fill(~keep, 0.0).sum()
    else:
        loss = nll
    return LossSums(loss=loss, nll=nll.detach(), num_tokens=keep.sum())


def smoothed_target_distribution(target: Tensor, vocab_size: int, epsilon: float, pad_id: int = 0) -> Tensor:
    """The target distribution q that :func:`label_smoothed_cross_entropy` is the cross-entropy against.

    A reference for tests and for the lesson: -Σ_v q_v · log p_v equals the per-position loss above.

    Args:
        target: (B, T) int64 gold ids. vocab_size: V. epsilon: ε_ls. pad_id: the PAD id.

    Returns:
        (B, T, V) float32: q_y = 1 - ε + ε/(V-1), q_v = ε/(V-1) for other v ≠ PAD, q_PAD = 0; all-zero rows where
        the target is PAD.
    """
    q = torch.full((*target.shape, vocab_size), epsilon / (vocab_size - 1), dtype=torch.float32)  # (B, T, V)
    q[..., pad_id] = 0.0
    q.scatter_add_(-1, target.unsqueeze(-1), torch.full((*target.shape, 1), 1.0 - epsilon))
    q[target == pad_id] = 0.0
    return q
