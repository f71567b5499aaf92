"""Learning-rate schedules as pure functions of the step number (paper §5.3, Eq. 3).

The paper's schedule ("noam", after Noam Shazeer) rises linearly for ``warmup`` steps, then decays with 1/√step:

    lr(step) = scale · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)

It peaks at step = warmup with lr = scale · (d_model · warmup)^-0.5 (7.0e-4 for d_model = 512, warmup = 4000).
The "inverse_sqrt" variant of fairseq names the peak directly:

    lr(step) = peak · step / warmup            for step <= warmup
             = peak · √(warmup / step)         after

Steps count from 1 (the first optimizer update); step 0 has lr 0.

"cosine" and "linear" (HF's ``get_cosine_schedule_with_warmup`` and ``get_linear_schedule_with_warmup``, fairseq's
``cosine`` and ``polynomial_decay``) rise linearly to ``lr_peak`` over the warmup and then fall to 0 at the end of the
budget, following the fraction p of the budget spent after the warmup (:func:`decay_factor`):

    cosine: peak · ½ (1 + cos(π p))          linear: peak · (1 - p)

A cooldown (``lr_cooldown`` = c > 0; not in the paper) multiplies any of them by a factor that falls linearly to 0
over the final fraction c of the run's budget (steps, minutes or epochs, whichever runs out first): the
"warmup-stable-decay" / trapezoidal schedules of later work. At a fixed budget it lands the weights in a lower point
of the loss than a learning rate still at 1/√step does, which checkpoint averaging only approximates:

    factor = min(1, left / c)        left: the fraction of the budget not yet spent, in [0, 1]
"""

from __future__ import annotations

import math

from dotformer.errors import ConfigError
from dotformer.training.config import TrainConfig


def noam_lr(step: int, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """The paper's learning rate at ``step`` (Eq. 3): scale · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5).

    Args:
        step: optimizer step, counting from 1 (0 gives 0.0). d_model: D. warmup: warmup steps (> 0).
        scale: a multiplier (the paper: 1).

    Returns:
        The learning rate (float).

    Raises:
        ConfigError: negative step or non-positive warmup / d_model.
    """
    if step < 0 or warmup <= 0 or d_model <= 0:
        raise ConfigError(f"noam_lr needs step >= 0, warmup > 0, d_model > 0; got {step=}, {warmup=}, {d_model=}")
    if step == 0:
        return 0.0
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def inverse_sqrt_lr(step: int, peak: float, warmup: int) -> float:
    """Linear warmup to ``peak`` over ``warmup`` steps, then peak · √(warmup / step) (fairseq's inverse_sqrt).

    Args:
        step: optimizer step from 1 (0 gives 0.0). peak: the learning rate at step = warmup.
        warmup: warmup steps (0: start at the peak and decay as peak / √step).

    Returns:
        The learning rate (float).

    Raises:
        ConfigError: negative step or warmup.
    """
    if step < 0 or warmup < 0:
        raise ConfigError(f"inverse_sqrt_lr needs step >= 0 and warmup >= 0; got {step=}, {warmup=}")
    if step == 0:
        return 0.0
    if step <= warmup:
        return peak * step / warmup
    return peak * math.sqrt(max(warmup, 1) / step)


def constant_lr(step: int, peak: float, warmup: int) -> float:
    """Linear warmup to ``peak`` over ``warmup`` steps, then constant."""
    if step < 0 or warmup < 0:
        raise ConfigError(f"constant_lr needs step >= 0 and warmup >= 0; got {step=}, {warmup=}")
    if step == 0:
        return 0.0
    return peak * min(1.0, step / warmup) if warmup else peak


def cooldown_factor(left: float, cooldown: float) -> float:
    """The cooldown's multiplier of the learning rate: min(1, left / cooldown), 1.0 when ``cooldown`` is 0.

    Args:
        left: the fraction of the budget not yet spent (1 at the start, 0 at the end; clamped to [0, 1]).
        cooldown: the final fraction of the budget over which the learning rate falls linearly to 0, in [0, 1].

    Raises:
        ConfigError: ``cooldown`` outside [0, 1].
    """
    if not 0.0 <= cooldown <= 1.0:
        raise ConfigError(f"cooldown_factor needs 0 <= cooldown <= 1; got {cooldown=}")
    if cooldown == 0.0:
        return 1.0
    return min(1.0, max(0.0, left) / cooldown)


def decay_factor(config: TrainConfig, left: float) -> float:
    """The multiplier of the learning rate that follows the budget, from ``left``, the fraction of it not yet spent
    (1 at the start, 0 at the end): for "cosine" ½ (1 + cos(π p)) and for "linear" 1 - p, where p is the fraction
    spent after the warmup (the warmup's share of a step budget, max_steps, is taken off first); for every schedule
    times the cooldown's factor (:func:`cooldown_factor`). 1.0 for noam, inverse_sqrt and constant without a
    cooldown."""
    factor = cooldown_factor(left, config.lr_cooldown) if config.lr_cooldown else 1.0
    if config.lr_schedule not in ("cosine", "linear"):
        return factor
    warm = min(1.0, config.warmup_steps / config.max_steps) if config.max_steps else 0.0
    used = min(1.0, max(0.0, 1.0 - left))
    p = 0.0 if used <= warm else (used - warm) / max(1.0 - warm, 1e-12)
    shape = 0.5 * (1.0 + math.cos(math.pi * p)) if config.lr_schedule == "cosine" else 1.0 - p
    return factor * shape


def learning_rate(step: int, config: TrainConfig, d_model: int) -> float:
    """The learning rate of ``config.lr_schedule`` at ``step`` (from 1) for a model of width ``d_model``, before
    the factor that follows the budget (:func:`decay_factor`: cosine and linear decay, any cooldown), which the
    training loop applies from the budget left. Cosine and linear: the warmup to ``lr_peak``, then ``lr_peak``."""
    if config.lr_schedule == "noam":
        return noam_lr(step, d_model, config.warmup_steps, config.lr_scale)
    if config.lr_schedule == "inverse_sqrt":
        return inverse_sqrt_lr(step, config.lr_peak, config.warmup_steps)
    return constant_lr(step, config.lr_peak, config.warmup_steps)


def used_fraction(config: TrainConfig, step: int, seconds: float) -> float | None:
    """The fraction of ``config``'s step and minute budgets spent after ``step`` steps and ``seconds`` seconds, in
    [0, 1] (the nearest limit counts; None: neither is set)."""
    fractions = []
    if config.max_steps is not None:
        fractions.append(step / max(config.max_steps, 1))
    if config.max_minutes is not None:
        fractions.append(seconds / max(config.max_minutes * 60, 1e-9))
    return min(1.0, max(fractions)) if fractions else None


def cooldown_resume_note(before: TrainConfig, after: TrainConfig, step: int, seconds: float) -> str | None:
    """One line when a run resumed at ``step`` (after ``seconds`` of training) had already begun its cooldown under
    its earlier budget ``before`` and the new budget ``after`` raises its learning rate again: the resumed run then
    cannot equal a run trained to the new budget from the start. None otherwise (no cooldown begun, or the same
    budget)."""
    old, new = used_fraction(before, step, seconds), used_fraction(after, step, seconds)
    if old is None or new is None or new >= old:
        return None
    was = decay_factor(before, 1.0 - old)
    if was >= 1.0:
        return None
    now = decay_factor(after, 1.0 - new)
    budget = f"{before.max_steps:,}-step" if before.max_steps is not None else f"{before.max_minutes:g}-minute"
    why = f"lr_cooldown {before.lr_cooldown:g}" if before.lr_cooldown else f"the {before.lr_schedule} schedule"
    return (
        f"resuming at step {step:,} after its learning-rate cooldown had begun ({why} of the {budget} budget had "
        f"lowered it to {was:.0%} of the schedule's rate); the new budget raises it to {now:.0%} again, so this run "
        f"will not equal one trained to the new budget from the start (to extend a run later, train it with "
        f"--lr-cooldown 0 and a schedule that does not follow the budget, and give the cooldown on its last --resume)"
    )
