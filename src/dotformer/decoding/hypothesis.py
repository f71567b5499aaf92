"""What every search returns: a :class:`Hypothesis` per output, scored with the GNMT length penalty.

    score(Y) = log P(Y | X) / lp(Y),    lp(Y) = ((5 + |Y|) / 6)^α        (Wu et al. 2016, Eq. 14; the paper §6.1: α=0.6)

|Y| counts the generated tokens including the final EOS (the EOS is a decision of the model and its log-probability
is part of log P(Y | X)). With α = 0 the score is the plain summed log-probability.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from dotformer.data.tokenize.tokenizers import BOS_ID, EOS_ID, PAD_ID


class Hypothesis(NamedTuple):
    """One output of a search.

    Attributes:
        tokens: the output token ids, without BOS and without the final EOS.
        score: the summed natural-log probability of the generated tokens (EOS included) divided by the length
            penalty lp(|Y|) of the :class:`~dotformer.decoding.DecodeConfig` (higher is better; α = 0: plain sum).
        log_probs: the model's natural-log probability of each generated token, one per decoding step:
            ``len(tokens) + 1`` entries (the last is the EOS) when the hypothesis finished, ``len(tokens)`` when it was
            cut at the maximum length.
    """

    tokens: list[int]
    score: float
    log_probs: list[float]

    @property
    def finished(self) -> bool:
        """True when the model ended the output with EOS; False when the search stopped it at the maximum length."""
        return len(self.log_probs) == len(self.tokens) + 1


def length_penalty(length: Tensor | int, alpha: float) -> Tensor:
    """The GNMT length penalty lp(Y) = ((5 + |Y|) / 6)^α (Wu et al. 2016, §7; used by the paper, §6.1).

    Args:
        length: |Y|, number of generated tokens including EOS: an int or an integer tensor of any shape.
        alpha: α >= 0; 0 gives 1 everywhere.

    Returns:
        float32 tensor of the shape of ``length``: 1 at |Y| = 1, growing with |Y| when α > 0.
    """
    length = torch.as_tensor(length)
    return ((5.0 + length.to(torch.float32)) / 6.0) ** alpha


def forbid_special_tokens(log_probs: Tensor) -> Tensor:
    """Set the log-probabilities of PAD and BOS to -inf: a search never generates them.

    The other entries keep the model's values (no renormalisation), so a hypothesis's log-probabilities are the
    model's. Shape: (N, V) float -> (N, V), in place and returned.
    """
    log_probs[:, PAD_ID] = float("-inf")
    log_probs[:, BOS_ID] = float("-inf")
    return log_probs


def make_hypothesis(tokens: list[int], log_probs: list[float], alpha: float, end_ids: Sequence[int] = ()) -> Hypothesis:
    """Build a :class:`Hypothesis` from a generated sequence that may end with EOS or one of ``end_ids`` (dropped from
    tokens, as the end it is).

    Args:
        tokens: generated ids, one per step; EOS (or an end token) may appear only as the last one.
        log_probs: the model's log-probability of each of them (natural log), same length.
        alpha: the length penalty's α.
        end_ids: the end tokens besides EOS (:mod:`dotformer.decoding.controls`).
    """
    ended = bool(tokens) and (tokens[-1] == EOS_ID or tokens[-1] in end_ids)
    body = tokens[:-1] if ended else list(tokens)
    total = float(sum(log_probs))
    score = total / float(length_penalty(len(log_probs), alpha)) if log_probs else 0.0
    return Hypothesis(body, score, [float(p) for p in log_probs])
