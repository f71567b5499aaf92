"""When a run stops before its end: budgets that allow no step, SIGINT/SIGTERM (save the finished step, then stop),
and the max_minutes clock, agreed on by every rank; the fraction of the budget left (the cooldown's clock)."""

from __future__ import annotations

import contextlib
import signal
import threading
from pathlib import Path
from typing import Any

import torch

from dotformer.errors import TrainingError
from dotformer.training.config import TrainConfig
from dotformer.training.distributed import DistContext, all_reduce_sum
from dotformer.training.progress import Budget, budget_fraction
from dotformer.training.stream import BatchStream


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped on SIGINT (Ctrl-C) or SIGTERM after saving a checkpoint; the message says what was kept
    and how to continue. A KeyboardInterrupt, so that code catching Ctrl-C catches it too."""


class Stopping:
    """The stop checks of :func:`dotformer.training.loop.fit`'s trainer, and the budget left that its cooldown
    reads; the trainer mixes this class in and sets the attributes below (and ``save()``, ``elapsed()``,
    ``position()``)."""

    config: TrainConfig
    context: DistContext
    run_dir: Path | None
    stream: BatchStream
    step: int
    seconds: float  # training seconds of the runs resumed from
    bad_evals: int  # validation passes since the best one
    saved_step: int | None  # the step of the newest checkpoint
    last_checkpoint: Path | None
    stop_signal: int | None  # SIGINT/SIGTERM received: save and stop after the current step

    def check_budget_allows_a_step(self) -> None:
        c = self.config
        if c.max_steps is not None and self.step >= c.max_steps:
            raise TrainingError(f"the budget allows no step: the run is at step {self.step}, max_steps={c.max_steps}")
        if c.max_minutes is not None and self.seconds >= c.max_minutes * 60:
            raise TrainingError(
                f"the budget allows no step: the run has trained {self.seconds / 60:.2f} minutes, "
                f"max_minutes={c.max_minutes}"
            )
        if self.stream.exhausted():
            raise TrainingError(
                f"the budget allows no step: the run is at epoch {self.stream.epochs_done:.3f}, "
                f"max_epochs={c.max_epochs}"
            )
        if c.patience and self.bad_evals >= c.patience:
            raise TrainingError(
                f"the run stopped early at step {self.step}: valid {c.best_metric} has not improved for "
                f"{self.bad_evals} validation passes (patience={c.patience}); pass a larger --patience to go on"
            )

    def stop_requested(self) -> bool:
        """True (on every rank) when SIGINT or SIGTERM arrived on any rank."""
        if not self.context.distributed:
            return self.stop_signal is not None
        flag = torch.tensor([0.0 if self.stop_signal is None else 1.0], dtype=torch.float64)
        return bool(all_reduce_sum(flag, self.context).item() > 0)

    @contextlib.contextmanager
    def signals_saved(self) -> Any:
        """Within: the first SIGINT/SIGTERM only asks the loop to save and stop after the current step; a second
        one interrupts at once (KeyboardInterrupt; checkpoint writes are atomic). Previous handlers are restored."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def on_signal(signum: int, frame: Any) -> None:
            if self.stop_signal is not None:
                raise KeyboardInterrupt
            self.stop_signal = signum

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def interrupted(self) -> TrainingInterrupted:
        """Save the last finished step (if not saved yet) and describe what was kept and how to continue."""
        name = signal.Signals(self.stop_signal).name if self.stop_signal is not None else "a signal"
        if self.run_dir is None:
            return TrainingInterrupted(f"interrupted by {name} at step {self.step}: nothing saved (no run directory)")
        if self.saved_step != self.step and self.step > 0:
            self.save()
        if self.last_checkpoint is None:
            return TrainingInterrupted(
                f"interrupted by {name} before the first step: nothing to save; start again with --overwrite"
            )
        return TrainingInterrupted(
            f"interrupted by {name} at step {self.step}: kept {self.last_checkpoint} (step {self.saved_step}, also "
            f"{self.run_dir / 'last'}); continue with: dotformer train --out {self.run_dir} --resume"
        )

    def budget_left(self) -> float:
        """The fraction of the budget not yet spent, in [0, 1] (1 - the progress display's
        :func:`~dotformer.training.progress.budget_fraction`: the nearest limit counts), the same on every rank
        (rank 0's clock decides)."""
        used = budget_fraction(Budget.of(self.config), self.position())
        left = 1.0 if used is None else 1.0 - used
        if self.context.distributed:
            mine = torch.tensor([left if self.context.is_main else 0.0], dtype=torch.float64)
            left = all_reduce_sum(mine, self.context).item()
        return left

    def time_is_up(self) -> bool:
        """True (on every rank) when the max_minutes budget is spent; rank 0 decides."""
        if self.config.max_minutes is None:
            return False
        spent = self.elapsed() >= self.config.max_minutes * 60
        flag = torch.tensor([1.0 if spent and self.context.is_main else 0.0], dtype=torch.float64)
        return bool(all_reduce_sum(flag, self.context).item() > 0)
