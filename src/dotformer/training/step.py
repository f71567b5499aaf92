"""One optimizer step (:func:`train_step`), the training a student reads, and the few settings it needs
(:class:`StepRecipe`).

One step (paper §5): for each micro-batch of the step, forward and loss, backward; then clip the gradient norm and
take an Adam step at the learning rate the loop has set (§5.3, Eq. 3:
:func:`dotformer.training.schedule.learning_rate`). The loss is normalised once by the number of scored positions of
the whole step (all micro-batches, all ranks), so accumulation and data parallelism give the same update as one big
batch. What the forward scores and which loss it takes is the recipe's objective (:mod:`dotformer.training.objective`):
teacher forcing with the label-smoothed loss (§5.4) for translation and language models, masked tokens or labels for
an encoder. The validation pass is :func:`dotformer.training.scoring.evaluate_loss`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from dotformer.data.batch.batching import Batch
from dotformer.errors import TrainingError
from dotformer.training.config import TrainConfig
from dotformer.training.distributed import DistContext, all_reduce_sum
from dotformer.training.objective import NEXT_TOKEN, Objective


@dataclass(frozen=True)
class StepRecipe:
    """How :func:`train_step` turns micro-batches into one update: the objective and its loss, clipping, precision
    and the ranks.

    Build it from a :class:`~dotformer.training.config.TrainConfig` with :meth:`of`.
    """

    label_smoothing: float = 0.1  # ε_ls of the training loss (§5.4); 0 gives plain cross-entropy
    clip_norm: float = 1.0  # clip the global gradient L2 norm to this (0: no clipping, as in the paper)
    pad_id: int = 0  # the target PAD id, ignored by the loss
    packed: bool = True  # run the layers on the real target tokens only (dotformer.packing): same loss, less work
    amp_dtype: torch.dtype | None = None  # autocast dtype (None: float32)
    scaler: torch.amp.GradScaler | None = None  # fp16's loss scaler (CUDA), else None
    context: DistContext = field(default_factory=DistContext)  # the ranks whose tokens normalise the loss
    objective: Objective = NEXT_TOKEN  # what the forward scores and its loss (dotformer.training.objective)

    @classmethod
    def of(
        cls,
        config: TrainConfig,
        pad_id: int = 0,
        context: DistContext | None = None,
        scaler: torch.amp.GradScaler | None = None,
        amp_dtype: torch.dtype | None = None,
        objective: Objective = NEXT_TOKEN,
    ) -> StepRecipe:
        """The recipe of ``config`` (label smoothing, clip norm, packing) with the run's PAD id, ranks, precision
        and objective."""
        context = context or DistContext()
        c = config
        return cls(c.label_smoothing, c.clip_norm, pad_id, c.packed, amp_dtype, scaler, context, objective)


@dataclass(frozen=True)
class StepResult:
    """What one optimizer step measured (over all micro-batches and all ranks).

    Attributes:
        loss: label-smoothed loss per target token (float, nats).
        nll: negative log-likelihood per target token (float, nats); exp(nll) is the perplexity.
        num_tokens: real (non-PAD) target tokens in the step.
        lr: the learning rate used (the optimizer's, as the loop set it).
        grad_norm: global L2 norm of the gradient before clipping (inf/nan when fp16 overflowed).
    """

    loss: float
    nll: float
    num_tokens: int
    lr: float
    grad_norm: float


def train_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, batches: Sequence[Batch], recipe: StepRecipe
) -> StepResult:
    """One optimizer step over the micro-batches ``batches`` (gradient accumulation), normalised by the global target
    token count, at the learning rate set in ``optimizer`` (:func:`dotformer.training.optim.set_learning_rate`).

    Args:
        model: the Transformer, or its DDP/compiled wrapper; called through ``recipe.objective`` (for translation
            and language models ``model(src, tgt_in, packed=recipe.packed)``).
        optimizer: from :func:`dotformer.training.optim.build_optimizer`.
        batches: the micro-batches of this step on this rank (pairs and blocks: src (B, S), tgt_in (B, T), tgt_out
            (B, T) int64; an encoder's: :class:`~dotformer.data.batch.labelled.LabelledBatch`), each with the number of
            positions it scores (``num_tgt_tokens``).
        recipe: the objective, label smoothing, clip norm, PAD id, packing, precision and the distributed context.

    Raises:
        TrainingError: the loss is NaN or infinite (the parameters are left unchanged), or the step has no tokens.
            The loop puts the step number in front of the message.
    """
    context, scaler, objective = recipe.context, recipe.scaler, recipe.objective
    device = next(iter(model.parameters())).device
    lr = float(optimizer.param_groups[0]["lr"])
    model.train()
    local_tokens = sum(int(b.num_tgt_tokens) for b in batches)
    global_tokens = int(all_reduce_sum(torch.tensor([float(local_tokens)], dtype=torch.float64), context).item())
    if global_tokens == 0:
        raise TrainingError("the batches hold no target tokens")
    scale = context.world_size / global_tokens  # DDP averages over ranks; this turns it into a global token mean
    optimizer.zero_grad(set_to_none=True)
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    nll_sum = torch.zeros((), dtype=torch.float64, device=device)
    for i, batch in enumerate(batches):
        batch = batch.to(device)
        last = i == len(batches) - 1
        sync = contextlib.nullcontext() if last or not hasattr(model, "no_sync") else model.no_sync()
        with sync:
            amp = recipe.amp_dtype
            with torch.autocast(device.type, dtype=amp or torch.float32, enabled=amp is not None):
                prediction = objective.predict(model, batch, recipe.packed, recipe.pad_id)  # logits, gold
            sums = objective.loss(prediction, recipe.label_smoothing, recipe.pad_id)
            scaled = sums.loss * scale
            (scaler.scale(scaled) if scaler is not None else scaled).backward()
        loss_sum += sums.loss.detach().double()
        nll_sum += sums.nll.double()
    totals = all_reduce_sum(torch.stack([loss_sum, nll_sum]), context).cpu()
    loss, nll = totals[0].item() / global_tokens, totals[1].item() / global_tokens
    if not (math.isfinite(loss) and math.isfinite(nll)):
        optimizer.zero_grad(set_to_none=True)
        raise TrainingError(f"the training loss is {loss} (lr {lr:.3g}); stopped before the update")
    if scaler is not None:
        scaler.unscale_(optimizer)
    max_norm = recipe.clip_norm if recipe.clip_norm > 0 else math.inf
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    return StepResult(loss, nll, global_tokens, lr, float(grad_norm))
