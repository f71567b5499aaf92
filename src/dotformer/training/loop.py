"""The training loop: :func:`fit` runs optimizer steps under a budget, with evaluation, checkpoints, logging and
exact resumption (its trainer is the state of one call).

The pieces it puts together: the step (:mod:`~dotformer.training.step`: :func:`train_step`, :func:`evaluate_loss`),
the batch stream (:mod:`~dotformer.training.stream`), the resume state (:mod:`~dotformer.training.state`), the stop
checks (:mod:`~dotformer.training.stopping`) and the validation pass (:mod:`~dotformer.training.validation`). Their
public names are importable from here too, as before.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from dotformer import checkpoint as ckpt
from dotformer.data.batching import Batch, EncodedPair, padding_fraction
from dotformer.data.blocks import TokenStream, sampler_for
from dotformer.errors import ConfigError, TrainingError
from dotformer.training.config import TrainConfig
from dotformer.training.distributed import DistContext, barrier, setup_distributed, teardown_distributed
from dotformer.training.logging import MetricsLog
from dotformer.training.optim import autocast_dtype, build_grad_scaler, build_optimizer
from dotformer.training.progress import Budget, Position, Progress
from dotformer.training.schedule import cooldown_factor
from dotformer.training.state import (
    FINE_TUNABLE,
    ResumeState,
    check_same_vocabulary,
    seed_everything,
    trim_metrics_log,
)
from dotformer.training.step import EvalResult, StepResult, evaluate_loss, gold_tokens, train_step
from dotformer.training.stopping import Stopping, TrainingInterrupted
from dotformer.training.stream import BatchStream
from dotformer.training.validation import Validation

if TYPE_CHECKING:
    from dotformer.data.corpora import Pair
    from dotformer.data.tokenizers import Tokenizer

__all__ = [  # fit's interface, and the names of the modules split off that were imported from here before
    "FINE_TUNABLE",
    "BatchStream",
    "EvalResult",
    "FitResult",
    "StepResult",
    "TrainData",
    "TrainingInterrupted",
    "check_same_vocabulary",
    "evaluate_loss",
    "fit",
    "gold_tokens",
    "train_step",
    "trim_metrics_log",
]

logger = logging.getLogger(__name__)  # "dotformer.training.loop": the data line before training


@dataclass
class TrainData:
    """The encoded examples and tokenizers that :func:`fit` trains on.

    Attributes:
        train: encoded training pairs (``dotformer.data.batching.encode_pairs``), or a language model's text
            (:class:`~dotformer.data.blocks.TokenStream`: batched in contiguous blocks).
        valid: encoded validation pairs, or text (may be empty: no validation).
        src_tokenizer, tgt_tokenizer: saved with every checkpoint.
        valid_pairs: the validation pairs as text, for a decoding ``best_metric`` (None: rebuilt from ``valid``
            by detokenising its ids, which loses symbols read as UNK).
    """

    train: Sequence[EncodedPair] | TokenStream
    valid: Sequence[EncodedPair] | TokenStream
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    valid_pairs: Sequence[Pair] | None = None


@dataclass(frozen=True)
class FitResult:
    """The outcome of :func:`fit`.

    Attributes:
        steps: optimizer steps done in total (a resumed run includes the earlier ones).
        epochs: passes over the training data in total (fractional).
        seconds: training wall-clock seconds in total (earlier runs included).
        run_seconds: seconds spent in this call.
        tokens: target tokens trained on in total.
        tokens_per_second: target tokens per second in this call.
        train_loss: label-smoothed loss per token of the last step (nan when no step ran).
        best_valid_loss, best_valid_perplexity, best_step: the best validation pass by ``best_metric`` (its loss
            and perplexity; None without validation).
        last_valid: the last validation pass (None without validation).
        stopped_by: "max_steps", "max_minutes", "max_epochs" or "patience" (early stopping).
        checkpoint: best/ when it exists, else last/ (None without a run directory).
        best_metric: what chose best/ ("loss", "bleu", "chrf", "wer", "per").
        best_score: its value at the best pass (None without validation).
    """

    steps: int
    epochs: float
    seconds: float
    run_seconds: float
    tokens: int
    tokens_per_second: float
    train_loss: float
    best_valid_loss: float | None
    best_valid_perplexity: float | None
    best_step: int | None
    last_valid: EvalResult | None
    stopped_by: str
    checkpoint: Path | None
    best_metric: str = "loss"
    best_score: float | None = None


def fit(
    model: nn.Module,
    data: TrainData,
    config: TrainConfig,
    run_dir: str | Path | None = None,
    info: dict[str, Any] | None = None,
    resume: bool = False,
    init_from: str | Path | None = None,
) -> FitResult:
    """Train ``model`` on ``data`` until a budget of ``config`` is reached (paper §5).

    Under ``torchrun`` every process calls this with the same arguments: each trains on its shard of the batches,
    gradients are averaged, and only rank 0 writes. Budgets (max_steps, max_minutes, max_epochs) count from the start
    of the run, resumed runs included.

    Args:
        model: a :class:`dotformer.model.Transformer` (moved to the training device in place).
        data: encoded train/valid examples and the tokenizers.
        config: the recipe and budgets.
        run_dir: where checkpoints/, best/, last/ and metrics.jsonl go (None: nothing is written, no resuming).
        info: extra JSON facts for every checkpoint's config.json (task, data config, ...).
        resume: continue the run in ``run_dir`` from its newest checkpoint (weights, optimizer, RNG, data position).
            Damaged newer checkpoints are skipped with a :class:`dotformer.checkpoint.CheckpointWarning` naming them;
            lines of metrics.jsonl logged after the checkpoint's step are removed (they are logged again).
        init_from: a checkpoint (or run) whose weights start a fresh run (fine-tuning): a new optimizer, schedule
            and data position. Its model config must equal the model's (dropout rates aside) and its tokenizers
            ``data``'s. Ignored when resuming.

    Returns:
        :class:`FitResult`.

    Raises:
        ConfigError: no budget, fp16 on CPU, bad device, resume without a run directory, a decoding best_metric or
            patience without validation pairs.
        CheckpointError: nothing to resume, a damaged checkpoint, or a model/vocabulary different from the checkpoint's
            (the resumed one or ``init_from``; the message names both sides).
        TrainingError: the budget allows no step (nothing is written), or the loss became NaN/inf (the last good
            checkpoint is kept).
        TrainingInterrupted: SIGINT or SIGTERM arrived; a checkpoint of the last finished step was saved first.
    """
    if not config.has_budget:
        raise ConfigError("no training budget: set max_steps, max_minutes or max_epochs (--max-steps, ...)")
    if resume and run_dir is None:
        raise ConfigError("resume needs a run directory")
    context = setup_distributed(config.device)
    try:
        trainer = _Trainer(model, data, config, Path(run_dir) if run_dir else None, info or {}, context)
        return trainer.run(resume, None if init_from is None else Path(init_from))
    finally:
        teardown_distributed(context)


class _Trainer(ResumeState, Stopping, Validation):
    """The state of one :func:`fit` call (kept private: fit's arguments are the interface). Saving and resuming
    come from :class:`~dotformer.training.state.ResumeState`, the stop checks from
    :class:`~dotformer.training.stopping.Stopping`, the validation pass from
    :class:`~dotformer.training.validation.Validation`; here: the loop."""

    def __init__(
        self,
        model: nn.Module,
        data: TrainData,
        config: TrainConfig,
        run_dir: Path | None,
        info: dict[str, Any],
        context: DistContext,
    ) -> None:
        self.config = config
        self.data = data
        self.run_dir = run_dir
        self.info = info
        self.context = context
        self.device = context.device
        self.amp_dtype = autocast_dtype(config.amp, self.device)
        self.model = model.to(self.device)
        self.model_config = model.config
        self.optimizer = build_optimizer(self.model, config)
        self.scaler = build_grad_scaler(config.amp, self.device)
        rank, world = context.rank, context.world_size
        self.sampler = sampler_for(data.train, config.max_tokens, config.seed, rank=rank, world_size=world)
        self.valid_batches: list[Batch] = []
        if len(data.valid):
            # evaluation needs no equal batch counts (one all-reduce at the end): each rank takes every world-th batch
            valid = sampler_for(data.valid, config.max_tokens, config.seed, shuffle=False)
            self.valid_batches = valid.batches(0)[rank::world]
        # counters, restored on resume
        self.step = 0
        self.seconds = 0.0
        self.tokens = 0
        self.best_loss = math.inf
        self.best_perplexity: float | None = None
        self.best_step: int | None = None
        self.last_checkpoint: Path | None = None
        self.last_valid: EvalResult | None = None
        self.saved_step: int | None = None  # the step of the newest checkpoint
        self.evaluated_step: int | None = None  # the step of the newest validation pass
        self.best_score: float | None = None  # config.best_metric at the best validation pass
        self.bad_evals = 0  # validation passes since the best one (early stopping after config.patience)
        self.stop_signal: int | None = None  # SIGINT/SIGTERM received: save and stop after the current step
        self.decode_pairs: list[Pair] = []  # the validation pairs decoded for a decoding best_metric
        self.last_train_loss = math.nan  # of the newest step in this call
        self.started = time.monotonic()  # reset when the loop starts
        self.stream = BatchStream(self.sampler, max_epochs=config.max_epochs)

    # -- the loop ----------------------------------------------------------------------------------------------------

    def describe_data(self) -> str:
        """One line before training: pair counts, vocabulary sizes, parameters, batches per epoch, padding fraction."""
        batches = self.sampler.batches(self.stream.epoch)
        return (
            f"data: {len(self.data.train):,} train / {len(self.data.valid):,} valid pairs;"
            f" vocabulary {self.data.src_tokenizer.vocab_size:,} -> {self.data.tgt_tokenizer.vocab_size:,};"
            f" model {self.model.num_parameters():,} parameters; {len(batches):,} batches of"
            f" <= {self.config.max_tokens:,} tokens per epoch (this process), {padding_fraction(batches):.1%} padding"
        )

    def run(self, resume: bool, init_from: Path | None = None) -> FitResult:
        c = self.config
        self.prepare_selection()
        if self.run_dir is not None and self.context.is_main:
            ckpt.recover_run_directory(self.run_dir)  # leftovers of a crash: unfinished writes, prunes, renames
        barrier(self.context)
        if resume:
            self.restore()
        else:
            seed_everything(c.seed + self.context.rank)
            if init_from is not None:
                self.initialise_from(init_from)
        self.check_budget_allows_a_step()
        first_step = self.step
        if self.context.is_main and c.progress:
            logger.info(self.describe_data())
        train_model: nn.Module = self.model
        if self.context.distributed:
            device_ids = [self.device] if self.device.type == "cuda" else None
            train_model = nn.parallel.DistributedDataParallel(self.model, device_ids=device_ids)
        if c.compile:
            self.model.keep_packings_eager()
            train_model = torch.compile(train_model)
        main = self.context.is_main
        log = MetricsLog(
            self.run_dir / "metrics.jsonl" if (main and self.run_dir) else None,
            self.run_dir / "tensorboard" if (main and self.run_dir and c.tensorboard) else None,
        )
        self.started = time.monotonic()
        progress = Progress(Budget.of(c), self.position, enabled=main and c.progress)
        start_tokens = self.tokens
        try:
            with self.signals_saved():
                stopped_by = self.loop(train_model, log, progress, first_step)
        finally:
            progress.close()
            log.close()
        return self.result(stopped_by, last_loss=self.last_train_loss, start_tokens=start_tokens)

    def loop(self, train_model: nn.Module, log: MetricsLog, progress: Progress, first_step: int) -> str:
        """Steps until a budget, early stopping or a signal; the final validation pass and checkpoint. Returns
        what stopped the run."""
        c = self.config
        main = self.context.is_main
        cpu_start = time.process_time()  # CPU seconds of this process (all threads): robust to other jobs' load
        window_start, window_tokens = self.started, 0
        while True:
            if c.max_steps is not None and self.step >= c.max_steps:
                stopped_by = "max_steps"
                break
            if self.stop_requested():
                raise self.interrupted()
            if self.time_is_up():
                if self.step == first_step:
                    raise TrainingError(
                        f"the budget allows no step: max_minutes={c.max_minutes} ({c.max_minutes * 60:.3g} s) ran "
                        f"out before the first step (after {self.elapsed():.3g} s of training in all); nothing "
                        f"was saved"
                    )
                stopped_by = "max_minutes"
                break
            lr_factor = cooldown_factor(self.budget_left(), c.lr_cooldown) if c.lr_cooldown else 1.0  # before it
            batches = self.stream.take(c.accumulation_steps)
            if not batches:
                stopped_by = "max_epochs"
                break
            try:
                last = train_step(
                    train_model, self.optimizer, batches, self.step + 1, c, self.model_config.d_model,
                    self.model_config.pad_id, self.context, self.scaler, self.amp_dtype, c.packed, lr_factor,
                )  # fmt: skip
            except TrainingError as exc:
                kept = f"; the last good checkpoint is {self.last_checkpoint}" if self.last_checkpoint else ""
                raise TrainingError(f"{exc}{kept}") from None
            self.step += 1
            self.last_train_loss = last.loss
            self.tokens += last.num_tokens
            window_tokens += last.num_tokens
            now = time.monotonic()
            if main and (self.step % max(1, c.log_every) == 0 or self.step == 1):
                speed = window_tokens / max(now - window_start, 1e-9)
                progress.update(last.loss, last.lr, speed)
                record = {"split": "train", "step": self.step, "epoch": round(self.stream.epochs_done, 4)}
                record.update(loss=last.loss, nll=last.nll, ppl=math.exp(min(last.nll, 700.0)), lr=last.lr)
                record.update(grad_norm=last.grad_norm, tokens=last.num_tokens, tokens_per_s=round(speed, 1))
                record.update(elapsed_s=round(self.elapsed(), 3), cpu_s=round(time.process_time() - cpu_start, 3))
                log.write(record)
                window_start, window_tokens = now, 0
            if c.eval_every and self.step % c.eval_every == 0:
                self.evaluate(log, progress)
            if c.save_every and self.step % c.save_every == 0:
                self.save()
            if c.patience and self.bad_evals >= c.patience:
                stopped_by = "patience"
                break
        if self.stop_requested():
            raise self.interrupted()
        saved_before_its_evaluation = self.saved_step == self.step and self.evaluated_step != self.step
        if self.evaluated_step != self.step:
            self.evaluate(log, progress)
        if self.saved_step != self.step or saved_before_its_evaluation:  # last/ carries the final pass's best
            self.save()
        return stopped_by

    def result(self, stopped_by: str, last_loss: float, start_tokens: int) -> FitResult:
        """The :class:`FitResult` of the loop that just ended."""
        run_seconds = time.monotonic() - self.started
        checkpoint = None
        if self.run_dir is not None:
            checkpoint = self.run_dir / "best" if (self.run_dir / "best").is_dir() else self.run_dir / "last"
        return FitResult(
            steps=self.step,
            epochs=self.stream.epochs_done,
            seconds=self.elapsed(),
            run_seconds=run_seconds,
            tokens=self.tokens,
            tokens_per_second=(self.tokens - start_tokens) / max(run_seconds, 1e-9),
            train_loss=last_loss,
            best_valid_loss=None if math.isinf(self.best_loss) else self.best_loss,
            best_valid_perplexity=self.best_perplexity,
            best_step=self.best_step,
            last_valid=self.last_valid,
            stopped_by=stopped_by,
            checkpoint=checkpoint,
            best_metric=self.config.best_metric,
            best_score=self.best_score,
        )

    def elapsed(self) -> float:
        """Training seconds of the whole run: those of the runs resumed from plus this call's."""
        return self.seconds + time.monotonic() - self.started

    def position(self) -> Position:
        """Steps, training seconds and epochs done, for the progress display."""
        return Position(self.step, self.elapsed(), self.stream.epochs_done)
