"""What a training run records: a JSON-lines metrics log and, optionally, TensorBoard event files (the progress shown
on standard error is :mod:`dotformer.training.progress`).

Each line of ``metrics.jsonl`` is one JSON object with a "split" ("train" or "valid"), the "step", and the numbers
measured then. Train lines come every ``metrics_every`` steps (default 1: every step; the first step always), whatever
``log_every`` (the progress lines) is; valid lines at every validation pass. Train lines have loss and nll per
target token, ppl, lr, grad_norm (before clipping), tokens (target tokens of the step), tokens_per_s (since the
previous line), elapsed_s (training seconds of the whole run) and cpu_s (CPU seconds of this process since this call
started, all threads); valid lines have loss, nll, ppl, tokens, best (a new best by the best metric) and seconds
(the pass's duration), and for a language model bits_per_token and bits_per_char (nll / ln 2 per token, and per
character of the validation text: :mod:`dotformer.metrics.language`), for a decoding best metric its score (bleu,
chrf, wer or per) and the sources decoded, for a classifier or a tagger its accuracy and macro-F1 (accuracy, f1,
percent). An encoder's "tokens" are what its objective scores (masked tokens, texts, words), and a loss over labels
(a classifier's, a tagger's) has no ppl. A resumed run appends to the same file.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from dotformer.errors import require_extra


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
