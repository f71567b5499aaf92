"""When a run stops before its end: budgets that allow no step, SIGINT/SIGTERM (save the finished step, then stop),
and the max_minutes clock, agreed on by every rank; the fraction of the budget left (the cooldown's clock)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

import torch

from dotformer.errors import TrainingError
from dotformer.training.distributed import DistContext, all_reduce_sum
from dotformer.training.progress import Budget, Position, budget_fraction
from dotformer.training.saving import save
from dotformer.training.state import Setup, TrainState


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped on SIGINT (Ctrl-C) or SIGTERM after saving a checkpoint; the message says what was kept
    and how to continue. A KeyboardInterrupt, so that code catching Ctrl-C catches it too."""


def check_budget_allows_a_step(setup: Setup, state: TrainState) -> None:
    """Raise TrainingError when the budget, or early stopping, leaves no step to take (nothing is written)."""
    c = setup.config
    if c.max_steps is not None and state.step >= c.max_steps:
        raise TrainingError(f"the budget allows no step: the run is at step {state.step:,}, max_steps={c.max_steps}")
    if c.max_minutes is not None and state.seconds >= c.max_minutes * 60:
        raise TrainingError(
            f"the budget allows no step: the run has trained {state.seconds / 60:.2f} minutes, "
            f"max_minutes={c.max_minutes}"
        )
    if setup.stream.exhausted():
        raise TrainingError(
            f"the budget allows no step: the run is at epoch {setup.stream.epochs_done:.3f}, max_epochs={c.max_epochs}"
        )
    if c.patience and state.evals_without_gain >= c.patience:
        raise TrainingError(
            f"the run stopped early at step {state.step:,}: valid {c.best_metric} has not improved for "
            f"{state.evals_without_gain} validation passes (patience={c.patience}); pass a larger --patience to go on"
        )


def stop_before_step(setup: Setup, state: TrainState, first_step: int) -> str | None:
    """What ends the run before its next step: "max_steps", "max_minutes", or None (go on); the same on every rank.

    Raises:
        TrainingInterrupted: a signal arrived (the finished step is saved first).
        TrainingError: max_minutes ran out before this call's first step (nothing saved).
    """
    c = setup.config
    if c.max_steps is not None and state.step >= c.max_steps:
        return "max_steps"
    if stop_requested(state, setup.context):
        raise interrupted(setup, state)
    if time_is_up(setup, state):
        if state.step == first_step:
            raise TrainingError(
                f"the budget allows no step: max_minutes={c.max_minutes} ({c.max_minutes * 60:.3g} s) ran "
                f"out before the first step (after {state.elapsed():.3g} s of training in all); nothing was saved"
            )
        return "max_minutes"
    return None


def budget_ends_here(setup: Setup, state: TrainState) -> bool:
    """True when the step or epoch budget allows no step after the one just taken (the same on every rank): the
    loop ends, and this step's checkpoint is written once, after the final validation pass. A checkpoint of the last
    step written before that pass would look finished to a resume, which refuses to step on and would never redo the
    pass, if a crash came between the two."""
    c = setup.config
    return (c.max_steps is not None and state.step >= c.max_steps) or setup.stream.exhausted()


def stop_requested(state: TrainState, context: DistContext) -> bool:
    """True (on every rank) when SIGINT or SIGTERM arrived on any rank."""
    if not context.distributed:
        return state.signal is not None
    flag = torch.tensor([0.0 if state.signal is None else 1.0], dtype=torch.float64)
    return bool(all_reduce_sum(flag, context).item() > 0)


@contextlib.contextmanager
def signals_caught(state: TrainState) -> Iterator[None]:
    """Within: the first SIGINT/SIGTERM only sets ``state.signal`` (the loop saves and stops after the current step);
    a second one interrupts at once (KeyboardInterrupt; checkpoint writes are atomic). Previous handlers are
    restored. Outside the main thread nothing is caught."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(signum: int, frame: Any) -> None:
        if state.signal is not None:
            raise KeyboardInterrupt
        state.signal = signum

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def interrupted(setup: Setup, state: TrainState) -> TrainingInterrupted:
    """Save the last finished step (if not saved yet) and describe what was kept and how to continue."""
    name = signal.Signals(state.signal).name if state.signal is not None else "a signal"
    run_dir = setup.run_dir
    if run_dir is None:
        return TrainingInterrupted(f"interrupted by {name} at step {state.step:,}: nothing saved (no run directory)")
    if state.saved_step != state.step and state.step > 0:
        save(setup, state)
    if state.last_checkpoint is None:
        return TrainingInterrupted(
            f"interrupted by {name} before the first step: nothing to save; start again with --overwrite"
        )
    return TrainingInterrupted(
        f"interrupted by {name} at step {state.step:,}: kept {state.last_checkpoint} (step {state.saved_step:,}, "
        f"also {run_dir / 'last'}); continue with: dotformer train --out {run_dir} --resume"
    )


def position(setup: Setup, state: TrainState) -> Position:
    """Steps, training seconds and epochs done, for the progress display and the budget."""
    return Position(state.step, state.elapsed(), setup.stream.epochs_done)


def budget_left(setup: Setup, state: TrainState) -> float:
    """The fraction of the budget not yet spent, in [0, 1] (1 - the progress display's
    :func:`~dotformer.training.progress.budget_fraction`: the nearest limit counts), the same on every rank
    (rank 0's clock decides)."""
    used = budget_fraction(Budget.of(setup.config), position(setup, state))
    left = 1.0 if used is None else 1.0 - used
    if setup.context.distributed:
        mine = torch.tensor([left if setup.context.is_main else 0.0], dtype=torch.float64)
        left = all_reduce_sum(mine, setup.context).item()
    return left


def time_is_up(setup: Setup, state: TrainState) -> bool:
    """True (on every rank) when the max_minutes budget is spent; rank 0 decides."""
    if setup.config.max_minutes is None:
        return False
    spent = state.elapsed() >= setup.config.max_minutes * 60
    flag = torch.tensor([1.0 if spent and setup.context.is_main else 0.0], dtype=torch.float64)
    return bool(all_reduce_sum(flag, setup.context).item() > 0)
