"""Step rules: what a search may generate at step t, applied where its log-probabilities are made.

Every search turns the decoder's (N, V) log-probabilities into the scores it chooses from at ONE place; there it
calls :meth:`StepRules.apply`, which sets the log-probabilities of forbidden tokens to -inf and leaves the others as
the model gave them (no renormalisation), so a hypothesis's log-probabilities stay the model's:

    PAD and BOS are never generated                              (:func:`forbid_special_tokens`)
    EOS (and any end token) is forbidden while t < min_len      (:func:`forbid_eos_before`; fairseq's --min-len)
    at t < |prefix| only the prefix's token t is allowed         (:func:`force_prefix`; CTranslate2's target_prefix)

t counts the tokens generated before this step (0 at the first step), so ``min_len`` is the fewest tokens before
EOS, and a forced prefix is generated, scored and kept in the output like any other token. The rules hold per
sentence; a search says which sentence each of its rows belongs to (rows are dropped and reordered as it runs).
Shapes: N rows, B sentences, V vocabulary, P longest prefix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from dotformer.data.tokenize.tokenizers import BOS_ID, EOS_ID, PAD_ID
from dotformer.decoding.hypothesis import forbid_special_tokens
from dotformer.errors import ShapeError
from dotformer.masks import check_right_padded

NEG_INF = float("-inf")


def forbid_eos_before(log_probs: Tensor, step: int, min_len: Tensor, ends: Tensor | None = None) -> Tensor:
    """Set the EOS log-probability (and the end tokens', as CTranslate2's minimum length holds them back too) of
    every row whose ``min_len`` is above ``step`` to -inf.

    Args:
        log_probs: (N, V) float log-probabilities of the token after ``step`` generated ones; changed in place.
        step: t, tokens generated so far (the same for every row).
        min_len: (N,) int64 the fewest tokens each row must generate before its EOS.
        ends: (E,) int64 the end tokens besides EOS (:mod:`dotformer.decoding.controls`); None: none.

    Returns:
        ``log_probs``.
    """
    early = min_len > step  # (N,)
    log_probs[:, EOS_ID] = log_probs[:, EOS_ID].masked_fill(early, NEG_INF)
    if ends is not None and ends.numel() and bool(early.any()):
        rows = early.nonzero()  # (N_e, 1)
        log_probs[rows, ends[None, :]] = NEG_INF
    return log_probs


def force_prefix(log_probs: Tensor, step: int, prefix: Tensor) -> Tensor:
    """Rows whose prefix has a token at ``step`` may generate only that token (it keeps the model's log-probability).

    Args:
        log_probs: (N, V) float log-probabilities; changed in place.
        step: t, tokens generated so far.
        prefix: (N, P) int64 forced tokens per row, right-padded with PAD (a row without a prefix is all PAD).

    Returns:
        ``log_probs``.
    """
    if step >= prefix.size(1):
        return log_probs
    token = prefix[:, step]  # (N,)
    forced = (token != PAD_ID).nonzero().squeeze(1)  # (N_f,) rows with a forced token at this step
    if forced.numel() == 0:
        return log_probs
    kept = log_probs[forced].gather(1, token[forced, None])  # (N_f, 1)
    log_probs[forced] = torch.full_like(log_probs[forced], NEG_INF).scatter(1, token[forced, None], kept)
    return log_probs


@dataclass(frozen=True)
class StepRules:
    """The per-sentence rules of one search (see the module docstring).

    Attributes:
        min_len: (B,) int64 fewest tokens before EOS per sentence (0: no minimum).
        prefix: (B, P) int64 forced first tokens per sentence, right-padded with PAD; None: no prefix.
        ends: (E,) int64 end tokens besides EOS, held back with it before ``min_len``; None: none.
    """

    min_len: Tensor
    prefix: Tensor | None = None
    ends: Tensor | None = None

    def apply(self, log_probs: Tensor, step: int, sentence: Tensor) -> Tensor:
        """The scores a search chooses from at ``step``: (N, V) log-probabilities with forbidden tokens at -inf.

        Args:
            log_probs: (N, V) float32 the decoder's log-probabilities; changed in place and returned.
            step: t, tokens generated so far by every row.
            sentence: (N,) int64 the sentence (index into B) of each row.
        """
        log_probs = forbid_special_tokens(log_probs)
        log_probs = forbid_eos_before(log_probs, step, self.min_len[sentence], self.ends)
        if self.prefix is not None:
            log_probs = force_prefix(log_probs, step, self.prefix[sentence])
        return log_probs


def step_rules(min_len: Tensor, max_len: Tensor, prefix: Tensor | None, end_ids: Sequence[int] = ()) -> StepRules:
    """The :class:`StepRules` of a batch, checked.

    Args:
        min_len: (B,) int64 fewest tokens before EOS per sentence (the length limit wins where they disagree).
        max_len: (B,) int64 the most decoding steps per sentence (EOS included).
        prefix: None, or (B, P) int64 forced tokens right-padded with PAD; a prefix may not hold BOS or EOS, and
            must leave room for the EOS (fewer than ``max_len`` tokens).
        end_ids: the end tokens besides EOS (:mod:`dotformer.decoding.controls`).

    Raises:
        ShapeError: ``prefix`` is not right-padded (B, P) integer ids for the B sentences, holds BOS or EOS, or is as
            long as its sentence's length limit (the message names the sentence).
    """
    ends = torch.tensor(list(end_ids), dtype=torch.int64, device=min_len.device) if end_ids else None  # (E,)
    if prefix is None:
        return StepRules(min_len, None, ends)
    if prefix.dim() != 2 or prefix.size(0) != min_len.size(0) or prefix.dtype not in (torch.int64, torch.int32):
        raise ShapeError(
            f"prefix must be (B, P) integer token ids with B = {min_len.size(0)} sentences, "
            f"got {tuple(prefix.shape)} {prefix.dtype}"
        )
    check_right_padded(prefix, PAD_ID, "prefix")
    if bool(((prefix == BOS_ID) | (prefix == EOS_ID)).any()):
        raise ShapeError("prefix must not hold BOS or EOS: its tokens are forced before the output's end")
    prefix = prefix.long().to(min_len.device)
    lengths = (prefix != PAD_ID).sum(dim=1)  # (B,)
    too_long = (lengths >= max_len).nonzero().squeeze(1).tolist()
    if too_long:
        b = too_long[0]
        raise ShapeError(
            f"the prefix of sentence {b} has {int(lengths[b])} tokens but its output may have at most "
            f"{int(max_len[b]) - 1} before the EOS; shorten the prefix or raise max_len_a/max_len_b"
        )
    return StepRules(min_len, prefix, ends)
