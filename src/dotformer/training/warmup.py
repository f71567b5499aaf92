"""The warmup against the budget (paper §5.3): a warning before step 1 when the warmup is longer than the budget can
reach.

The learning rate rises linearly for ``warmup_steps`` steps and reaches its peak only at their end; a budget that
ends earlier trains at a fraction of the peak throughout (the paper's 4,000 steps are more than a few minutes of a
CPU run take). The warmup itself never follows the budget: a run resumed with a larger budget must take the steps a
longer run takes, so the schedule of the steps already taken cannot depend on how many are still to come (each task's
defaults carry a warmup that suits a CPU budget of minutes). A warmup longer than the steps the budget can reach is
warned about: steps and epochs give the count exactly; minutes give an upper bound: the budget's seconds at the
device's peak arithmetic rate (:func:`peak_flops`) divided by the work of one step, ``6 × parameters × max_tokens ×
accumulation`` floating-point operations (forward and backward, every token through every weight). Real runs reach a
fraction of that peak, so a warmup above the bound is certainly too long; one below it may still be, which the
progress line's learning rate shows.
"""

from __future__ import annotations

import math

from dotformer.training.config import TrainConfig

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


def warmup_unfinished(config: TrainConfig, steps: int, stopped_by: str) -> str | None:
    """One line when a run ended (after ``steps`` optimizer steps, stopped by ``stopped_by``) before its warmup
    did: a budget in minutes or epochs, or an early stop, that :func:`warmup_warning` could not foresee. None when
    the warmup was over."""
    if steps >= config.warmup_steps or config.lr_schedule == "noam" and config.warmup_steps == 0:
        return None
    return (
        f"the run ended at step {steps:,} (stopped by {stopped_by}), before its learning-rate warmup of "
        f"{config.warmup_steps:,} steps did: the learning rate never reached its peak; pass --warmup N (e.g. a "
        f"tenth of the steps) or a larger budget"
    )
