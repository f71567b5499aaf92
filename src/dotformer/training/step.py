"""One optimizer step (:func:`train_step`), the training a student reads; the validation pass (:func:`evaluate_loss`)
is :mod:`dotformer.metrics.scoring`'s, re-exported here.

One step (paper §5): for each of ``accumulation_steps`` batches, forward with teacher forcing, label-smoothed loss
(§5.4), backward; then clip the gradient norm, set the learning rate of the step (§5.3, Eq. 3) and take an Adam step.
The loss is normalised once by the number of real target tokens of the whole step (all micro-batches, all ranks),
so accumulation and data parallelism give the same update as one big batch.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from dotformer.data.batching import Batch
from dotformer.errors import TrainingError
from dotformer.metrics.scoring import EvalResult, evaluate_loss, gold_tokens  # the validation pass (shared)
from dotformer.training.config import TrainConfig
from dotformer.training.distributed import DistContext, all_reduce_sum
from dotformer.training.loss import label_smoothed_cross_entropy
from dotformer.training.optim import set_learning_rate
from dotformer.training.schedule import learning_rate


@dataclass(frozen=True)
class StepResult:
    """What one optimizer step measured (over all micro-batches and all ranks).

    Attributes:
        step: the step number (from 1).
        loss: label-smoothed loss per target token (float, nats).
        nll: negative log-likelihood per target token (float, nats); exp(nll) is the perplexity.
        num_tokens: real (non-PAD) target tokens in the step.
        lr: the learning rate used.
        grad_norm: global L2 norm of the gradient before clipping (inf/nan when fp16 overflowed).
    """

    step: int
    loss: float
    nll: float
    num_tokens: int
    lr: float
    grad_norm: float


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: Sequence[Batch],
    step: int,
    config: TrainConfig,
    d_model: int,
    pad_id: int = 0,
    context: DistContext | None = None,
    scaler: torch.amp.GradScaler | None = None,
    amp_dtype: torch.dtype | None = None,
    packed: bool = True,
    lr_factor: float = 1.0,
) -> StepResult:
    """One optimizer step over ``batches`` (gradient accumulation), normalised by the global target token count.

    Args:
        model: the Transformer, or its DDP/compiled wrapper; called as ``model(src, tgt_in, packed=packed)``.
        optimizer: from :func:`dotformer.training.optim.build_optimizer`.
        batches: the micro-batches of this step on this rank (src (B, S), tgt_in (B, T), tgt_out (B, T) int64).
        step: the step number from 1; sets the learning rate.
        config: label smoothing, clip norm and schedule.
        d_model: D, for the noam schedule.
        pad_id: PAD id of the targets (ignored by the loss).
        context: the distributed context (None: one process).
        scaler: a GradScaler for fp16, else None. amp_dtype: autocast dtype (None: float32).
        packed: compute the layers and the generator on the real target tokens only (:mod:`dotformer.packing`);
            same loss and gradients as on the padded batch, less work.
        lr_factor: multiplies the schedule's learning rate (the cooldown's
            :func:`~dotformer.training.schedule.cooldown_factor`; 1.0: none).

    Returns:
        :class:`StepResult`.

    Raises:
        TrainingError: the loss is NaN or infinite (the parameters are left unchanged), or the step has no tokens.
    """
    context = context or DistContext()
    device = next(iter(model.parameters())).device
    lr = learning_rate(step, config, d_model) * lr_factor
    set_learning_rate(optimizer, lr)
    model.train()
    local_tokens = sum(int(b.num_tgt_tokens) for b in batches)
    global_tokens = int(all_reduce_sum(torch.tensor([float(local_tokens)], dtype=torch.float64), context).item())
    if global_tokens == 0:
        raise TrainingError(f"step {step}: the batches hold no target tokens")
    scale = context.world_size / global_tokens  # DDP averages over ranks; this turns it into a global token mean
    optimizer.zero_grad(set_to_none=True)
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    nll_sum = torch.zeros((), dtype=torch.float64, device=device)
    for i, batch in enumerate(batches):
        batch = batch.to(device)
        last = i == len(batches) - 1
        sync = contextlib.nullcontext() if last or not hasattr(model, "no_sync") else model.no_sync()
        with sync:
            with torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
                logits = model(batch.src, batch.tgt_in, packed=packed)  # (B, T, V) or (N_T, V)
            gold = gold_tokens(batch, packed, pad_id)  # (B, T) or (N_T,)
            sums = label_smoothed_cross_entropy(logits, gold, config.label_smoothing, pad_id)
            objective = sums.loss * scale
            (scaler.scale(objective) if scaler is not None else objective).backward()
        loss_sum += sums.loss.detach().double()
        nll_sum += sums.nll.double()
    totals = all_reduce_sum(torch.stack([loss_sum, nll_sum]), context).cpu()
    loss, nll = totals[0].item() / global_tokens, totals[1].item() / global_tokens
    if not (math.isfinite(loss) and math.isfinite(nll)):
        optimizer.zero_grad(set_to_none=True)
        raise TrainingError(f"step {step}: the training loss is {loss} (lr {lr:.3g}); stopped before the update")
    if scaler is not None:
        scaler.unscale_(optimizer)
    max_norm = config.clip_norm if config.clip_norm > 0 else math.inf
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    return StepResult(step, loss, nll, global_tokens, lr, float(grad_norm))


__all__ = ["EvalResult", "StepResult", "evaluate_loss", "gold_tokens", "train_step"]
