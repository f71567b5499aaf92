"""What a training run reports: a JSON-lines metrics log, a tqdm progress bar on standard error, optional TensorBoard.

Each line of ``metrics.jsonl`` is one JSON object with a "split" ("train" or "valid"), the "step", and the numbers
measured then: train lines have loss and nll per target token, ppl, lr, grad_norm (before clipping), tokens (target
tokens of the step), tokens_per_s (since the previous line), elapsed_s (training seconds of the whole run) and cpu_s
(CPU seconds of this process since this call started, all threads); valid lines have loss, nll, ppl, tokens, best
(a new best validation loss) and seconds (the pass's duration). A resumed run appends to the same file.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from dotformer.extras import require_extra


class MetricsLog:
    """Appends one JSON object per line to ``path`` (None: keeps nothing). Flushed after every line."""

    def __init__(self, path: Path | None, tensorboard_dir: Path | None = None) -> None:
        self.path = path
        self._file = None
        self._writer = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())
        if tensorboard_dir is not None:
            require_extra("tensorboard", "tensorboard", "--tensorboard")
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(tensorboard_dir))

    def write(self, record: dict[str, Any]) -> None:
        """Log one record (must hold "split" and "step"); numbers also go to TensorBoard as split/name."""
        if self._file is not None:
            clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
            self._file.write(json.dumps(clean) + "\n")
            self._file.flush()
        if self._writer is not None:
            for key, value in record.items():
                if key not in ("split", "step") and isinstance(value, (int, float)) and not isinstance(value, bool):
                    self._writer.add_scalar(f"{record['split']}/{key}", value, record["step"])

    def close(self) -> None:
        """Close the file and the TensorBoard writer."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class Progress:
    """A tqdm bar on standard error showing loss, lr, tokens/s and the ETA of the step budget.

    Args:
        total_steps: the run's step budget when known (for the ETA), else None.
        initial: steps already done (a resumed run).
        enabled: False hides it (other ranks, --no-progress).
    """

    def __init__(self, total_steps: int | None, initial: int, enabled: bool) -> None:
        self._bar = None
        if enabled:
            from tqdm.auto import tqdm

            interactive = sys.stderr.isatty()
            self._bar = tqdm(
                total=total_steps,
                initial=initial,
                unit="step",
                file=sys.stderr,
                dynamic_ncols=True,
                mininterval=0.5 if interactive else 30.0,
                leave=True,
            )

    def update(self, steps: int, loss: float, lr: float, tokens_per_second: float, extra: str = "") -> None:
        """Advance by ``steps`` and show the latest numbers."""
        if self._bar is None:
            return
        text = f"loss={loss:.3f} lr={lr:.2e} tok/s={tokens_per_second:,.0f}"
        self._bar.set_postfix_str(text + (f" {extra}" if extra else ""), refresh=False)
        self._bar.update(steps)

    def write(self, message: str) -> None:
        """Print a line above the bar (nothing when the bar is disabled)."""
        if self._bar is not None:
            self._bar.write(message, file=sys.stderr)

    def close(self) -> None:
        """Close the bar."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
