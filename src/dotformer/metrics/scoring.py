"""Teacher-forced scoring of a model on batches: loss, NLL and perplexity per real target token.

Shared by training (the validation pass of :mod:`dotformer.training.loop`) and decoding
(:meth:`dotformer.decoding.engine.TorchEngine.reference_nll`), so neither reaches into the other. It needs only the
label-smoothed loss (:mod:`dotformer.training.loss`, paper §5.4) and the cross-rank sum
(:mod:`dotformer.training.distributed`); nothing of the training loop, checkpoints or tokenizers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from dotformer.training.distributed import DistContext, all_reduce_sum
from dotformer.training.loss import label_smoothed_cross_entropy

if TYPE_CHECKING:
    from dotformer.data.batching import Batch


@dataclass(frozen=True)
class EvalResult:
    """Validation numbers, per real target token.

    Attributes:
        loss: label-smoothed loss per token (nats). nll: negative log-likelihood per token (nats).
        perplexity: exp(nll). num_tokens: real target tokens evaluated.
    """

    loss: float
    nll: float
    perplexity: float
    num_tokens: int


def gold_tokens(batch: Batch, packed: bool, pad_id: int) -> Tensor:
    """The labels matching ``model(src, tgt_in, packed=packed)``: (B, T) ``tgt_out``, or (N_T,) its entries at
    the non-PAD positions of ``tgt_in`` (the same positions as ``tgt_out``'s, one shift apart)."""
    return batch.tgt_out[batch.tgt_in != pad_id] if packed else batch.tgt_out


def evaluate_loss(
    model: nn.Module,
    batches: Sequence[Batch],
    label_smoothing: float = 0.1,
    pad_id: int = 0,
    context: DistContext | None = None,
    amp_dtype: torch.dtype | None = None,
    packed: bool = True,
) -> EvalResult:
    """Loss, NLL and perplexity per target token over ``batches`` (this rank's shard; summed over ranks).

    Runs in eval mode (no dropout) without gradients and restores the model's previous mode.

    Args:
        model: the Transformer (not the DDP wrapper). batches: validation batches.
        label_smoothing: ε_ls of the reported loss. pad_id: the target PAD id.
        context: the distributed context. amp_dtype: autocast dtype (None: float32).
        packed: skip the padding (:mod:`dotformer.packing`); the same figures, faster.

    Returns:
        :class:`EvalResult`; loss, nll and perplexity are nan when there are no target tokens.
    """
    context = context or DistContext()
    device = next(iter(model.parameters())).device
    was_training = model.training
    model.eval()
    totals = torch.zeros(3, dtype=torch.float64, device=device)  # loss, nll, tokens
    with torch.no_grad():
        for batch in batches:
            batch = batch.to(device)
            with torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
                logits = model(batch.src, batch.tgt_in, packed=packed)  # (B, T, V) or (N_T, V)
            sums = label_smoothed_cross_entropy(logits, gold_tokens(batch, packed, pad_id), label_smoothing, pad_id)
            totals += torch.stack([sums.loss.double(), sums.nll.double(), sums.num_tokens.double()])
    model.train(was_training)
    loss_sum, nll_sum, tokens = all_reduce_sum(totals, context).tolist()
    if tokens == 0:
        return EvalResult(math.nan, math.nan, math.nan, 0)
    nll = nll_sum / tokens
    return EvalResult(loss_sum / tokens, nll, math.exp(min(nll, 700.0)), int(tokens))
