"""The warmup against the budget (paper §5.3): a default warmup fitted to a short budget, and a warning before step 1
when the warmup is longer than the budget can reach.

The learning rate rises linearly for ``warmup_steps`` steps and reaches its peak only at their end; a budget that
ends earlier trains at a fraction of the peak throughout (the paper's 4,000 steps are more than a few minutes of a
CPU run take). Two rules, both decided before step 1:

* **scaled default**: when neither the config file nor a flag sets the warmup and the budget's step count is known
  in advance (``max_steps``, or ``max_epochs`` × the optimizer steps of one epoch), the warmup is at most
  :data:`WARMUP_FRACTION` of those steps. The steps are counted, never timed, so the recipe stays reproducible.
* **kept on resume**: a fitted warmup is recorded in run.json with the recipe's warmup it replaced
  (:func:`fitted_record`), and a resumed run keeps it, whatever its new budget: a budget can grow without changing
  the steps already taken (:func:`resumed_warmup_line` says so). Only a cooldown (``lr_cooldown``) follows the new
  budget. So a run resumed to a longer budget continues exactly the run it was; a fresh run of that longer budget
  fits its own warmup, and starts otherwise.
* **warning**: a warmup longer than the steps the budget can reach. Steps and epochs give the count exactly; minutes
  give an upper bound: the budget's seconds at the device's peak arithmetic rate (:func:`peak_flops`) divided by the
  work of one step, ``6 × parameters × max_tokens × accumulation`` floating-point operations (forward and backward,
  every token through every weight). Real runs reach a fraction of that peak, so a warmup above the bound is
  certainly too long; one below it may still be, which the progress line's learning rate shows.
"""

from __future__ import annotations

import math
from typing import Any

from dotformer.training.config import TrainConfig

WARMUP_FRACTION = 0.1  # a default warmup takes at most this share of a budget's known steps
CPU_FLOPS_PER_THREAD = 4e11  # above the fp32 peak of one core (2 FMA units × 16 lanes × 2 × ~4 GHz = 2.6e11)
ACCELERATOR_FLOPS = 2e15  # above the dense bf16 peak of today's largest single GPUs


def peak_flops(device_type: str, threads: int) -> float:
    """An upper bound of the floating-point operations per second of one training process on ``device_type``
    ("cpu", "cuda", "mps", ...) with ``threads`` CPU threads."""
    return CPU_FLOPS_PER_THREAD * max(threads, 1) if device_type == "cpu" else ACCELERATOR_FLOPS


def steps_per_epoch(batches_per_epoch: int, accumulation_steps: int) -> int:
    """Optimizer steps in one pass over this process's batches (``accumulation_steps`` batches each)."""
    return max(1, math.ceil(batches_per_epoch / accumulation_steps))


def known_steps(config: TrainConfig, epoch_steps: int | None) -> int | None:
    """The steps ``max_steps`` and ``max_epochs`` allow (the smaller; None when neither is set or the epoch's steps
    are not given)."""
    bounds = [config.max_steps] if config.max_steps is not None else []
    if config.max_epochs is not None and epoch_steps is not None:
        bounds.append(max(1, math.ceil(config.max_epochs * epoch_steps)))
    return min(bounds) if bounds else None


def minutes_bound(config: TrainConfig, num_parameters: int, flops_per_second: float) -> int | None:
    """The most steps ``max_minutes`` could hold at ``flops_per_second`` (None without a minutes budget)."""
    if config.max_minutes is None:
        return None
    step_flops = 6.0 * num_parameters * config.max_tokens * config.accumulation_steps
    return max(1, int(config.max_minutes * 60.0 * flops_per_second / step_flops))


def scaled_warmup(config: TrainConfig, epoch_steps: int | None) -> int:
    """The default warmup fitted to the budget: ``config.warmup_steps``, or :data:`WARMUP_FRACTION` of the known
    steps when that is fewer (at least 1)."""
    steps = known_steps(config, epoch_steps)
    if steps is None:
        return config.warmup_steps
    return min(config.warmup_steps, max(1, round(WARMUP_FRACTION * steps)))


def fitted_record(recipe: TrainConfig, fitted: TrainConfig) -> dict[str, int]:
    """What run.json records at a run's start about its warmup: ``{"warmup_fitted_from": N}`` (the recipe's warmup
    that :func:`scaled_warmup` replaced) when the warmup was fitted to the budget, else nothing."""
    return {} if fitted.warmup_steps == recipe.warmup_steps else {"warmup_fitted_from": recipe.warmup_steps}


def resumed_warmup_line(record: dict[str, Any], config: TrainConfig) -> str | None:
    """One line for a run resumed with another budget whose warmup was fitted to its first budget (run.json's
    ``warmup_fitted_from``): the warmup is kept as the run started, and what a fresh run of the new budget would
    use instead. None when the warmup was not fitted, the budget is the same, or the resume sets its own warmup."""
    recipe = record.get("warmup_fitted_from")
    first = record.get("train", {})
    warmup = first.get("warmup_steps")
    budgets = ("max_steps", "max_epochs", "max_minutes")
    if recipe is None or config.warmup_steps != warmup:
        return None
    if all(first.get(name) == getattr(config, name) for name in budgets):
        return None
    fresh = scaled_warmup(config.replace(warmup_steps=recipe), None)
    other = "" if fresh == warmup else f"; a new run of this budget would warm up for {fresh:,}"
    return (
        f"warmup: {warmup:,} step{'s' if warmup != 1 else ''} as this run started (fitted to its first budget; a "
        f"budget can grow without changing the steps taken, so only a cooldown follows the new one{other})"
    )


def warmup_warning(
    config: TrainConfig, epoch_steps: int | None, num_parameters: int, flops_per_second: float, first_step: int = 0
) -> str | None:
    """One line when the warmup ends after the last step the budget can reach, else None.

    Args:
        config: the recipe and budgets.
        epoch_steps: optimizer steps per epoch (None: not counted; ``max_epochs`` then bounds nothing).
        num_parameters: the model's parameters. flops_per_second: :func:`peak_flops` of the device.
        first_step: the step the run starts from (a resumed run that is past its warmup is not warned about).
    """
    warmup = config.warmup_steps
    if first_step >= warmup:  # no warmup, or a resumed run past it
        return None
    exact = known_steps(config, epoch_steps)
    bound = minutes_bound(config, num_parameters, flops_per_second)
    if exact is not None and (bound is None or exact <= bound):
        if warmup <= exact:
            return None
        budget = f"the {exact:,} steps of the budget"
    elif bound is not None:
        if warmup <= bound:
            return None
        budget = (
            f"the {bound:,} steps that {config.max_minutes:g} minutes can hold at most for this model and batch "
            f"({num_parameters:,} parameters, {config.max_tokens * config.accumulation_steps:,} tokens a step, at a "
            f"peak of {flops_per_second:.2g} floating-point operations per second)"
        )
    else:
        return None
    return (
        f"the learning-rate warmup of {warmup:,} steps is longer than {budget}: the learning rate stays below its peak "
        f"throughout; pass --warmup N (e.g. a tenth of the steps) or a larger budget"
    )
