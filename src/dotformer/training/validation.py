"""The validation pass of the training loop: the loss on the validation batches, the score that picks ``best/``
(the loss, or a decoding metric: :mod:`~dotformer.training.selection`), and the patience count of early stopping.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from torch import nn

from dotformer.data.batching import Batch
from dotformer.errors import ConfigError
from dotformer.training.config import TrainConfig
from dotformer.training.distributed import DistContext
from dotformer.training.logging import MetricsLog
from dotformer.training.progress import Progress
from dotformer.training.selection import decode_sample, is_improvement, validation_score
from dotformer.training.step import EvalResult, evaluate_loss
from dotformer.training.stream import BatchStream

if TYPE_CHECKING:
    import torch

    from dotformer.config import ModelConfig
    from dotformer.data.corpora import Pair
    from dotformer.training.loop import TrainData


class Validation:
    """The validation pass of :func:`dotformer.training.loop.fit`'s trainer, which mixes this class in and sets the
    attributes below (and ``save_best()``)."""

    config: TrainConfig
    data: TrainData
    context: DistContext
    model: nn.Module
    model_config: ModelConfig
    amp_dtype: torch.dtype | None
    stream: BatchStream
    valid_batches: list[Batch]
    step: int
    evaluated_step: int | None  # the step of the newest validation pass
    last_valid: EvalResult | None
    best_loss: float
    best_perplexity: float | None
    best_step: int | None
    best_score: float | None  # config.best_metric at the best validation pass
    bad_evals: int  # validation passes since the best one
    decode_pairs: list[Pair]  # the validation pairs decoded for a decoding best_metric

    def evaluate(self, log: MetricsLog, progress: Progress) -> None:
        """One validation pass: its loss (and ``best_metric`` when that decodes), ``best/`` and the patience count
        updated, one ``metrics.jsonl`` record and one progress line (rank 0)."""
        self.evaluated_step = self.step
        if not self.valid_batches and not self.context.distributed:
            return
        started = time.monotonic()
        result = evaluate_loss(
            self.model, self.valid_batches, self.config.label_smoothing, self.model_config.pad_id, self.context,
            self.amp_dtype, self.config.packed,
        )  # fmt: skip
        if result.num_tokens == 0:
            return
        self.last_valid = result
        metric = self.config.best_metric
        score = result.loss
        if metric != "loss":
            d = self.data
            score = validation_score(self.model, d.src_tokenizer, d.tgt_tokenizer, self.decode_pairs, metric)
        improved = is_improvement(metric, score, self.best_score)
        if improved:
            self.best_loss, self.best_perplexity, self.best_step = result.loss, result.perplexity, self.step
            self.best_score, self.bad_evals = score, 0
            self.save_best()
        else:
            self.bad_evals += 1
        if self.context.is_main:
            record = {"split": "valid", "step": self.step, "epoch": round(self.stream.epochs_done, 4)}
            record.update(loss=result.loss, nll=result.nll, ppl=result.perplexity, tokens=result.num_tokens)
            if metric != "loss":
                record.update({metric: score, "decoded": len({p.source for p in self.decode_pairs})})
            record.update(best=improved, seconds=round(time.monotonic() - started, 3))
            log.write(record)
            shown = f", {metric} {score:.2f}" if metric != "loss" else ""
            progress.write(
                f"step {self.step}: valid loss {result.loss:.4f}, ppl {result.perplexity:.3f}{shown}"
                + (" (best)" if improved else "")
            )

    def prepare_selection(self) -> None:
        """Check that a decoding best_metric or patience has validation pairs; pick the pairs to decode."""
        c = self.config
        if (c.best_metric != "loss" or c.patience) and not len(self.data.valid):
            what = f"best_metric {c.best_metric!r}" if c.best_metric != "loss" else f"patience={c.patience}"
            raise ConfigError(f"{what} needs a validation split, and this run has no validation pairs")
        if c.best_metric == "loss":
            return
        pairs = self.data.valid_pairs
        if pairs is None:
            from dotformer.data.corpora import Pair

            src, tgt = self.data.src_tokenizer, self.data.tgt_tokenizer
            pairs = [Pair(src.decode(e.src), tgt.decode(e.tgt)) for e in self.data.valid]
        self.decode_pairs = decode_sample(pairs, c.valid_decode_limit, c.seed)
