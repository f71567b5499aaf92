"""Progress of a training run against its budget, on standard error: a bar on a terminal, plain lines elsewhere.

The run stops at the first budget it reaches (``max_steps``, ``max_minutes`` or ``max_epochs``), so progress is the
largest of the fractions done (steps / max_steps, training seconds / budget seconds, epochs / max_epochs) and the
time left is the smallest of the estimates: exact for a time budget, from this call's rate for steps and epochs.
A run stopped by its budget ends at 100%; one stopped early (patience, Ctrl-C) shows where it was.

On a terminal the bar redraws at most twice a second; when standard error is a file or a pipe, each update (every
``log_every`` steps; the metrics log has its own ``metrics_every``) is one newline-terminated line, e.g.::

    train: step 120/2,500 (4.8%), 0:00:24 elapsed, ~0:08:03 left, loss 3.214, lr 1.20e-03, 12,345 tok/s, epoch 0.12
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO


@dataclass(frozen=True)
class Budget:
    """The limits of a run; None means no limit of that kind (at least one is set for a real run)."""

    max_steps: int | None = None
    max_minutes: float | None = None
    max_epochs: float | None = None

    @classmethod
    def of(cls, config: Any) -> Budget:
        """The budget of a :class:`dotformer.training.TrainConfig` (or anything with the three fields)."""
        return cls(config.max_steps, config.max_minutes, config.max_epochs)


@dataclass(frozen=True)
class Position:
    """Where a run is: optimizer steps done, training seconds of the whole run (resumed runs included), epochs done."""

    step: int
    seconds: float
    epochs: float


def budget_fraction(budget: Budget, now: Position) -> float | None:
    """The fraction of the budget used, in [0, 1]: the largest of the fractions of the limits set (None: no limit)."""
    fractions = []
    if budget.max_steps is not None:
        fractions.append(now.step / max(budget.max_steps, 1))
    if budget.max_minutes is not None:
        fractions.append(now.seconds / max(budget.max_minutes * 60, 1e-9))
    if budget.max_epochs is not None:
        fractions.append(now.epochs / max(budget.max_epochs, 1e-9))
    return min(1.0, max(0.0, max(fractions))) if fractions else None


def seconds_left(budget: Budget, start: Position, now: Position) -> float | None:
    """Seconds until the first limit is reached: the time budget's remainder (exact), and for steps and epochs the
    remainder at the rate since ``start``; the smallest of those known (None: nothing to estimate from yet)."""
    spent = now.seconds - start.seconds
    estimates = []
    if budget.max_minutes is not None:
        estimates.append(budget.max_minutes * 60 - now.seconds)
    if budget.max_steps is not None and now.step > start.step and spent > 0:
        estimates.append((budget.max_steps - now.step) * spent / (now.step - start.step))
    if budget.max_epochs is not None and now.epochs > start.epochs and spent > 0:
        estimates.append((budget.max_epochs - now.epochs) * spent / (now.epochs - start.epochs))
    return max(0.0, min(estimates)) if estimates else None


def count(number: int, noun: str, plural: str | None = None) -> str:
    """A count and its noun, with thousands separators and the noun's number right: ``count(1, "step") ==
    "1 step"``, ``count(1320, "step") == "1,320 steps"``; ``plural`` for nouns not made plural by an "s"."""
    return f"{number:,} {noun if number == 1 else plural or noun + 's'}"


class TokenRate:
    """Target tokens per second between two readings (the speed of a progress line or a metrics line).

    Args:
        start: ``time.monotonic()`` when counting began (default: now).
    """

    def __init__(self, start: float | None = None) -> None:
        self.start = time.monotonic() if start is None else start
        self.tokens = 0

    def add(self, tokens: int) -> None:
        """Count the tokens of one more step."""
        self.tokens += tokens

    def read(self) -> float:
        """Tokens per second since the previous reading (or the start); starts a new window."""
        now = time.monotonic()
        rate = self.tokens / max(now - self.start, 1e-9)
        self.start, self.tokens = now, 0
        return rate


def clock(seconds: float) -> str:
    """H:MM:SS, e.g. ``clock(3725.2) == "1:02:05"``."""
    whole = max(0, int(round(seconds)))
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def progress_text(budget: Budget, start: Position, now: Position, numbers: str = "", final: bool = False) -> str:
    """One progress line without the "train: " prefix: step (of max_steps), percent of the budget, elapsed, time
    left (not on the ``final`` line), then ``numbers`` (loss, lr, speed)."""
    step = f"step {now.step:,}" + (f"/{budget.max_steps:,}" if budget.max_steps is not None else "")
    fraction = budget_fraction(budget, now)
    left = None if final else seconds_left(budget, start, now)
    parts = [step + (f" ({fraction:.1%})" if fraction is not None else ""), f"{clock(now.seconds)} elapsed"]
    if left is not None:
        parts.append(f"~{clock(left)} left")
    if numbers:
        parts.append(numbers)
    parts.append(f"epoch {now.epochs:.2f}")
    return ", ".join(parts)


class Progress:
    """Shows a run's progress on ``stream`` (standard error): a tqdm bar on a terminal, else plain lines.

    Args:
        budget: the run's limits (they drive the bar: percent of the budget, not of a guessed step count).
        position: returns the run's current :class:`Position` (called at each update and at the end).
        enabled: False shows nothing (other ranks, ``--no-progress``).
        stream: where to write (default: ``sys.stderr`` at construction).
        interactive: draw a bar (True) or write lines (False); default: whether ``stream`` is a terminal.
        unit: what the speed counts, per second ("tok": target tokens; an encoder's "masked tok", "texts", "words").
    """

    def __init__(
        self,
        budget: Budget,
        position: Callable[[], Position],
        enabled: bool = True,
        stream: TextIO | None = None,
        interactive: bool | None = None,
        unit: str = "tok",
    ) -> None:
        self.budget = budget
        self.unit = unit
        self._position = position
        self.start = position()
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.interactive = bool(self.stream.isatty()) if interactive is None else interactive
        self._numbers = ""  # loss, lr and speed of the last update
        self._numbers_step = -1  # the step they were measured at
        self._bar: Any = None
        if enabled and self.interactive:
            from tqdm import tqdm

            self._bar = tqdm(
                total=100.0,
                initial=100.0 * (budget_fraction(budget, self.start) or 0.0),
                bar_format="train {percentage:3.0f}%|{bar}| {desc}",  # desc: the text of progress_text
                file=self.stream,
                dynamic_ncols=True,
                mininterval=0.5,
                leave=True,
            )

    def update(self, loss: float, lr: float, tokens_per_second: float) -> None:
        """Show the run's latest numbers at its current position (a line, or a redraw of the bar); the speed counts
        the progress's ``unit`` (target tokens, or an encoder's texts, words, masked tokens)."""
        if not self.enabled:
            return
        now = self._position()
        self._numbers = f"loss {loss:.3f}, lr {lr:.2e}, {tokens_per_second:,.0f} {self.unit}/s"
        self._numbers_step = now.step
        self._show(now, final=False)

    def last_step(self, loss: float, lr: float, tokens_per_second: Callable[[], float]) -> None:
        """Keep the numbers of the run's last step for the end line (:meth:`close`) when no :meth:`update` showed
        them: a run that ends between two progress lines ends with its last loss, not without one.
        ``tokens_per_second`` is read only then (it starts a new window of the speed)."""
        if not self.enabled or self._position().step == self._numbers_step:
            return
        self._numbers = f"loss {loss:.3f}, lr {lr:.2e}, {tokens_per_second():,.0f} {self.unit}/s"
        self._numbers_step = self._position().step

    def write(self, message: str) -> None:
        """Print one line (above the bar on a terminal)."""
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.write(message, file=self.stream)
        else:
            print(message, file=self.stream, flush=True)

    def close(self) -> None:
        """Show the final position (100% when the budget is spent) and close the bar."""
        if not self.enabled:
            return
        self._show(self._position(), final=True)
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        self.enabled = False

    def _show(self, now: Position, final: bool) -> None:
        numbers = self._numbers if now.step == self._numbers_step else ""  # never show an older step's loss
        text = progress_text(self.budget, self.start, now, numbers, final)
        if self._bar is None:
            print(f"train: {'end at ' if final else ''}{text}", file=self.stream, flush=True)
            return
        fraction = budget_fraction(self.budget, now)
        percent = 100.0 * fraction if fraction is not None and math.isfinite(fraction) else self._bar.n
        self._bar.set_description_str(text, refresh=False)
        if final:
            self._bar.n = percent
            self._bar.refresh()
        else:
            self._bar.update(percent - self._bar.n)
