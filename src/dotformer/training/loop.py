"""The training loop: one optimizer step (:func:`train_step`), a validation pass (:func:`evaluate_loss`), and
:func:`fit`, which runs steps under a budget with evaluation, checkpoints, logging and exact resumption.

One step (paper §5): for each of ``accumulation_steps`` batches, forward with teacher forcing, label-smoothed loss
(§5.4), backward; then clip the gradient norm, set the learning rate of the step (§5.3, Eq. 3) and take an Adam step.
The loss is normalised once by the number of real target tokens of the whole step (all micro-batches, all ranks),
so accumulation and data parallelism give the same update as one big batch.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import random
import signal
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor, nn

from dotformer import checkpoint as ckpt
from dotformer.data.batching import Batch, BatchSampler, EncodedPair, SamplerPosition, collate, padding_fraction
from dotformer.errors import CheckpointError, ConfigError, DataError, TrainingError
from dotformer.training.config import TrainConfig
from dotformer.training.distributed import (
    DistContext,
    all_gather_tensor,
    all_reduce_sum,
    barrier,
    setup_distributed,
    teardown_distributed,
)
from dotformer.training.logging import MetricsLog
from dotformer.training.loss import label_smoothed_cross_entropy
from dotformer.training.optim import (
    autocast_dtype,
    build_grad_scaler,
    build_optimizer,
    set_learning_rate,
)
from dotformer.training.progress import Budget, Position, Progress
from dotformer.training.schedule import learning_rate
from dotformer.training.selection import decode_sample, is_improvement, validation_score

if TYPE_CHECKING:
    from dotformer.data.corpora import Pair
    from dotformer.data.tokenizers import Tokenizer

logger = logging.getLogger(__name__)  # "dotformer.training.loop": the data line before training

FINE_TUNABLE = ("dropout", "attention_dropout", "activation_dropout")  # ModelConfig fields --init-from may change


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped on SIGINT (Ctrl-C) or SIGTERM after saving a checkpoint; the message says what was kept
    and how to continue. A KeyboardInterrupt, so that code catching Ctrl-C catches it too."""


@dataclass(frozen=True)
class StepResult:
    """What one optimizer step measured (over all micro-batches and all ranks).

    Attributes:
        step: the step number (from 1).
        loss: label-smoothed loss per target token (float, nats).
        nll: negative log-likelihood per target token (float, nats); exp(nll) is the perplexity.
        num_tokens: real (non-PAD) target tokens in the step.
        lr: the learning rate used.
        grad_norm: global L2 norm of the gradient before clipping (inf/nan when fp16 overflowed).
    """

    step: int
    loss: float
    nll: float
    num_tokens: int
    lr: float
    grad_norm: float


@dataclass(frozen=True)
class EvalResult:
    """Validation numbers, per real target token.

    Attributes:
        loss: label-smoothed loss per token (nats). nll: negative log-likelihood per token (nats).
        perplexity: exp(nll). num_tokens: real target tokens evaluated.
    """

    loss: float
    nll: float
    perplexity: float
    num_tokens: int


@dataclass
class TrainData:
    """The encoded examples and tokenizers that :func:`fit` trains on.

    Attributes:
        train: encoded training pairs (``dotformer.data.batching.encode_pairs``).
        valid: encoded validation pairs (may be empty: no validation).
        src_tokenizer, tgt_tokenizer: saved with every checkpoint.
        valid_pairs: the validation pairs as text, for a decoding ``best_metric`` (None: rebuilt from ``valid``
            by detokenising its ids, which loses symbols read as UNK).
    """

    train: Sequence[EncodedPair]
    valid: Sequence[EncodedPair]
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


# -- one step ---------------------------------------------------------------------------------------------------------


def gold_tokens(batch: Batch, packed: bool, pad_id: int) -> Tensor:
    """The labels matching ``model(src, tgt_in, packed=packed)``: (B, T) ``tgt_out``, or (N_T,) its entries at
    the non-PAD positions of ``tgt_in`` (the same positions as ``tgt_out``'s, one shift apart)."""
    return batch.tgt_out[batch.tgt_in != pad_id] if packed else batch.tgt_out


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: Sequence[Batch],
    step: int,
    config: TrainConfig,
    d_model: int,
    pad_id: int = 0,
    context: DistContext | None = None,
    scaler: torch.amp.GradScaler | None = None,
    amp_dtype: torch.dtype | None = None,
    packed: bool = True,
) -> StepResult:
    """One optimizer step over ``batches`` (gradient accumulation), normalised by the global target token count.

    Args:
        model: the Transformer, or its DDP/compiled wrapper; called as ``model(src, tgt_in, packed=packed)``.
        optimizer: from :func:`dotformer.training.optim.build_optimizer`.
        batches: the micro-batches of this step on this rank (src (B, S), tgt_in (B, T), tgt_out (B, T) int64).
        step: the step number from 1; sets the learning rate.
        config: label smoothing, clip norm and schedule.
        d_model: D, for the noam schedule.
        pad_id: PAD id of the targets (ignored by the loss).
        context: the distributed context (None: one process).
        scaler: a GradScaler for fp16, else None. amp_dtype: autocast dtype (None: float32).
        packed: compute the layers and the generator on the real target tokens only (:mod:`dotformer.packing`);
            same loss and gradients as on the padded batch, less work.

    Returns:
        :class:`StepResult`.

    Raises:
        TrainingError: the loss is NaN or infinite (the parameters are left unchanged), or the step has no tokens.
    """
    context = context or DistContext()
    device = next(iter(model.parameters())).device
    lr = learning_rate(step, config, d_model)
    set_learning_rate(optimizer, lr)
    model.train()
    local_tokens = sum(int(b.num_tgt_tokens) for b in batches)
    global_tokens = int(all_reduce_sum(torch.tensor([float(local_tokens)], dtype=torch.float64), context).item())
    if global_tokens == 0:
        raise TrainingError(f"step {step}: the batches hold no target tokens")
    scale = context.world_size / global_tokens  # DDP averages over ranks; this turns it into a global token mean
    optimizer.zero_grad(set_to_none=True)
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    nll_sum = torch.zeros((), dtype=torch.float64, device=device)
    for i, batch in enumerate(batches):
        batch = batch.to(device)
        last = i == len(batches) - 1
        sync = contextlib.nullcontext() if last or not hasattr(model, "no_sync") else model.no_sync()
        with sync:
            with torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
                logits = model(batch.src, batch.tgt_in, packed=packed)  # (B, T, V) or (N_T, V)
            gold = gold_tokens(batch, packed, pad_id)  # (B, T) or (N_T,)
            sums = label_smoothed_cross_entropy(logits, gold, config.label_smoothing, pad_id)
            objective = sums.loss * scale
            (scaler.scale(objective) if scaler is not None else objective).backward()
        loss_sum += sums.loss.detach().double()
        nll_sum += sums.nll.double()
    totals = all_reduce_sum(torch.stack([loss_sum, nll_sum]), context).cpu()
    loss, nll = totals[0].item() / global_tokens, totals[1].item() / global_tokens
    if not (math.isfinite(loss) and math.isfinite(nll)):
        optimizer.zero_grad(set_to_none=True)
        raise TrainingError(f"step {step}: the training loss is {loss} (lr {lr:.3g}); stopped before the update")
    if scaler is not None:
        scaler.unscale_(optimizer)
    max_norm = config.clip_norm if config.clip_norm > 0 else math.inf
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    return StepResult(step, loss, nll, global_tokens, lr, float(grad_norm))


def evaluate_loss(
    model: nn.Module,
    batches: Sequence[Batch],
    label_smoothing: float = 0.1,
    pad_id: int = 0,
    context: DistContext | None = None,
    amp_dtype: torch.dtype | None = None,
    packed: bool = True,
) -> EvalResult:
    """Loss, NLL and perplexity per target token over ``batches`` (this rank's shard; summed over ranks).

    Runs in eval mode (no dropout) without gradients and restores the model's previous mode.

    Args:
        model: the Transformer (not the DDP wrapper). batches: validation batches.
        label_smoothing: ε_ls of the reported loss. pad_id: the target PAD id.
        context: the distributed context. amp_dtype: autocast dtype (None: float32).
        packed: skip the padding (:mod:`dotformer.packing`); the same figures, faster.

    Returns:
        :class:`EvalResult`; loss, nll and perplexity are nan when there are no target tokens.
    """
    context = context or DistContext()
    device = next(iter(model.parameters())).device
    was_training = model.training
    model.eval()
    totals = torch.zeros(3, dtype=torch.float64, device=device)  # loss, nll, tokens
    with torch.no_grad():
        for batch in batches:
            batch = batch.to(device)
            with torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
                logits = model(batch.src, batch.tgt_in, packed=packed)  # (B, T, V) or (N_T, V)
            sums = label_smoothed_cross_entropy(logits, gold_tokens(batch, packed, pad_id), label_smoothing, pad_id)
            totals += torch.stack([sums.loss.double(), sums.nll.double(), sums.num_tokens.double()])
    model.train(was_training)
    loss_sum, nll_sum, tokens = all_reduce_sum(totals, context).tolist()
    if tokens == 0:
        return EvalResult(math.nan, math.nan, math.nan, 0)
    nll = nll_sum / tokens
    return EvalResult(loss_sum / tokens, nll, math.exp(min(nll, 700.0)), int(tokens))


# -- the data position ------------------------------------------------------------------------------------------------


class BatchStream:
    """Micro-batches in order, epoch after epoch, from a BatchSampler; remembers (epoch, batch index).

    The position is the next batch to read: saving it and starting a new stream there resumes the data order
    exactly (the sampler's batches are a pure function of (seed, epoch)). Batches are collated as they are taken.
    """

    def __init__(self, sampler: Any, epoch: int = 0, index: int = 0, max_epochs: float | None = None) -> None:
        self.sampler = sampler
        self.epoch = epoch
        self.index = index
        self.max_epochs = max_epochs
        self._indices: list[list[int]] = []
        self._indices_epoch = -1

    def _epoch_indices(self) -> list[list[int]]:
        if self._indices_epoch != self.epoch:
            self._indices = self.sampler.batch_indices(self.epoch)
            self._indices_epoch = self.epoch
            if not self._indices:
                raise TrainingError("the training split gives no batches")
        return self._indices

    @property
    def batches_per_epoch(self) -> int:
        """Number of batches of the current epoch on this rank."""
        return len(self._epoch_indices())

    @property
    def epochs_done(self) -> float:
        """Passes over the data so far (fractional)."""
        return self.epoch + self.index / self.batches_per_epoch

    def exhausted(self) -> bool:
        """True when the epoch budget is used up."""
        return self.max_epochs is not None and self.epochs_done >= self.max_epochs - 1e-12

    def take(self, count: int) -> list[Batch]:
        """Up to ``count`` next batches (fewer, or none, when the epoch budget ends)."""
        out: list[Batch] = []
        while len(out) < count and not self.exhausted():
            indices = self._epoch_indices()
            rows = indices[self.index]
            out.append(collate([self.sampler.examples[i] for i in rows], rows))
            self.index += 1
            if self.index == len(indices):
                self.epoch, self.index = self.epoch + 1, 0
        return out


# -- fit --------------------------------------------------------------------------------------------------------------


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


class _Trainer:
    """The state of one :func:`fit` call (kept private: fit's arguments are the interface)."""

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
        self.sampler = BatchSampler(data.train, config.max_tokens, config.seed, rank=rank, world_size=world)
        self.valid_batches: list[Batch] = []
        if len(data.valid):
            # evaluation needs no equal batch counts (one all-reduce at the end): each rank takes every world-th batch
            valid = BatchSampler(data.valid, config.max_tokens, config.seed, shuffle=False)
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

    # -- resume ------------------------------------------------------------------------------------------------------

    def restore(self) -> None:
        """Load weights, optimizer, scaler, RNG states, counters and data position from the run's newest checkpoint.

        Raises:
            CheckpointError: nothing to resume, damaged files, another model config or vocabulary, another number
                of processes or other data.
        """
        assert self.run_dir is not None
        path, skipped = ckpt.choose_resume_checkpoint(self.run_dir)
        saved_config = ckpt.model_config_of(ckpt.read_json(path / ckpt.CONFIG_FILE), path / ckpt.CONFIG_FILE)
        if saved_config != self.model_config:
            diff = sorted(k for k, v in saved_config.to_dict().items() if self.model_config.to_dict()[k] != v)
            raise CheckpointError(
                f"cannot resume from {path}: its model config differs in {', '.join(diff)} "
                f"(see {path / ckpt.CONFIG_FILE})"
            )
        for name, tokenizer in (
            (ckpt.SRC_TOKENIZER_FILE, self.data.src_tokenizer),
            (ckpt.TGT_TOKENIZER_FILE, self.data.tgt_tokenizer),
        ):
            check_same_vocabulary(tokenizer, ckpt.load_tokenizer_file(path / name), path / name)
        ckpt.load_weights_into(self.model, path / ckpt.MODEL_FILE)
        state = ckpt.load_train_state(path)
        where = path / ckpt.TRAIN_STATE_JSON
        try:
            world_size = int(state["world_size"])
            if world_size != self.context.world_size:
                raise CheckpointError(
                    f"cannot resume from {path}: it was written by {world_size} processes, this run has "
                    f"{self.context.world_size} (the data position and dropout RNG are per process)"
                )
            try:
                self.stream.epoch, self.stream.index = self.sampler.load_state_dict(state["data"])
            except DataError as exc:
                raise CheckpointError(f"cannot resume from {path}: {exc}") from None
            self.optimizer.load_state_dict(state["optimizer"])
            if self.scaler is not None and state.get("scaler"):
                self.scaler.load_state_dict(state["scaler"])
            self.step, self.seconds, self.tokens = int(state["step"]), float(state["seconds"]), int(state["tokens"])
            best = state["best_valid_loss"]
            self.best_loss = math.inf if best is None else float(best)
            self.best_perplexity, self.best_step = state["best_valid_perplexity"], state["best_step"]
            saved_metric = state.get("best_metric", "loss")  # checkpoints of older versions chose by loss
            self.best_score = state.get("best_score", best) if saved_metric == "loss" else state.get("best_score")
            self.bad_evals = int(state.get("evals_without_improvement", 0))
            _set_rng_state(state["rng"], self.context)
        except (KeyError, IndexError, TypeError) as exc:
            raise CheckpointError(f"{where} is incomplete or corrupted: {exc!r}") from None
        except ValueError as exc:  # e.g. optimizer state of other shapes
            if isinstance(exc, CheckpointError):
                raise
            raise CheckpointError(f"{where} does not fit this model: {exc}") from None
        self.last_checkpoint = path
        self.saved_step = self.step
        if not self.context.is_main:
            return
        if skipped:
            warnings.warn(
                f"{'; '.join(skipped)}; resuming from {path} (step {self.step})", ckpt.CheckpointWarning, stacklevel=3
            )
        if saved_metric != self.config.best_metric and self.best_score is not None:
            warnings.warn(
                f"best/ was chosen by valid {saved_metric} up to step {self.step}; from now on by "
                f"{self.config.best_metric}: the next validation pass becomes the best one",
                ckpt.CheckpointWarning,
                stacklevel=3,
            )
            self.best_score, self.bad_evals = None, 0
        dropped = trim_metrics_log(self.run_dir / "metrics.jsonl", self.step)
        if dropped:
            warnings.warn(
                f"{self.run_dir / 'metrics.jsonl'}: removed {dropped} line(s) logged after step {self.step} "
                f"(those steps run again from {path})",
                ckpt.CheckpointWarning,
                stacklevel=3,
            )

    def initialise_from(self, path: Path) -> None:
        """Copy the weights of the checkpoint ``path`` into the model (fine-tuning; optimizer and schedule fresh).

        Raises:
            CheckpointError: a damaged checkpoint, another model config (dropout rates aside) or another vocabulary;
                the message names the checkpoint's value and this run's.
        """
        path = ckpt.resolve_checkpoint(path)
        ckpt.verify_checkpoint(path)
        saved = ckpt.model_config_of(ckpt.read_json(path / ckpt.CONFIG_FILE), path / ckpt.CONFIG_FILE).to_dict()
        ours = self.model_config.to_dict()
        diff = [
            f"{k} {saved[k]!r} there, {ours[k]!r} here" for k in ours if k not in FINE_TUNABLE and saved[k] != ours[k]
        ]
        if diff:
            raise CheckpointError(
                f"cannot initialise from {path}: its model config differs from this run's: {'; '.join(diff)} "
                f"(see {path / ckpt.CONFIG_FILE})"
            )
        for name, tokenizer, side in (
            (ckpt.SRC_TOKENIZER_FILE, self.data.src_tokenizer, "source"),
            (ckpt.TGT_TOKENIZER_FILE, self.data.tgt_tokenizer, "target"),
        ):
            saved_tokenizer = ckpt.load_tokenizer_file(path / name)
            try:
                check_same_vocabulary(tokenizer, saved_tokenizer, path / name)
            except CheckpointError as exc:
                raise CheckpointError(f"cannot initialise from {path}: {side} {exc}") from None
        ckpt.load_weights_into(self.model, path / ckpt.MODEL_FILE)
        self.info = {**self.info, "init_from": str(path)}

    # -- budgets -----------------------------------------------------------------------------------------------------

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

    def time_is_up(self) -> bool:
        """True (on every rank) when the max_minutes budget is spent; rank 0 decides."""
        if self.config.max_minutes is None:
            return False
        spent = self.elapsed() >= self.config.max_minutes * 60
        flag = torch.tensor([1.0 if spent and self.context.is_main else 0.0], dtype=torch.float64)
        return bool(all_reduce_sum(flag, self.context).item() > 0)

    # -- saving ------------------------------------------------------------------------------------------------------

    def checkpoint_info(self) -> dict[str, Any]:
        from dotformer import __version__

        return {
            **self.info,
            "train": self.config.to_dict(),
            "step": self.step,
            "epoch": self.stream.epochs_done,
            "valid": None if self.last_valid is None else self.last_valid.__dict__,
            "dotformer_version": __version__,
        }

    def train_state(self) -> dict[str, Any]:
        """Everything besides the weights that exact resumption needs (collective: call on every rank)."""
        return {
            "step": self.step,
            "data": self.sampler.state_dict(SamplerPosition(self.stream.epoch, self.stream.index)),
            "seconds": self.elapsed(),
            "tokens": self.tokens,
            "best_valid_loss": None if math.isinf(self.best_loss) else self.best_loss,
            "best_valid_perplexity": self.best_perplexity,
            "best_step": self.best_step,
            "best_metric": self.config.best_metric,
            "best_score": self.best_score,
            "evals_without_improvement": self.bad_evals,
            "world_size": self.context.world_size,
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "rng": _get_rng_state(self.context),
        }

    def save(self) -> None:
        """Write checkpoints/step_N, point last/ at it, drop old step checkpoints (rank 0 writes)."""
        state = self.train_state()  # every rank joins the RNG gather
        if self.run_dir is not None and self.context.is_main:
            path = self.run_dir / "checkpoints" / ckpt.step_dir_name(self.step)
            d = self.data
            ckpt.save_checkpoint(path, self.model, d.src_tokenizer, d.tgt_tokenizer, self.checkpoint_info(), state)
            ckpt.link_checkpoint(path, self.run_dir / "last")
            ckpt.prune_checkpoints(self.run_dir / "checkpoints", max(1, self.config.keep_last))
            self.last_checkpoint = path
        self.saved_step = self.step
        barrier(self.context)

    def save_best(self) -> None:
        if self.run_dir is None or not self.context.is_main:
            return
        d = self.data
        info = {**self.checkpoint_info(), "best": {"metric": self.config.best_metric, "score": self.best_score}}
        ckpt.save_checkpoint(self.run_dir / "best", self.model, d.src_tokenizer, d.tgt_tokenizer, info)

    def evaluate(self, log: MetricsLog, progress: Progress) -> None:
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
            _seed_everything(c.seed + self.context.rank)
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
            batches = self.stream.take(c.accumulation_steps)
            if not batches:
                stopped_by = "max_epochs"
                break
            try:
                last = train_step(
                    train_model, self.optimizer, batches, self.step + 1, c, self.model_config.d_model,
                    self.model_config.pad_id, self.context, self.scaler, self.amp_dtype, c.packed,
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
        if self.evaluated_step != self.step:
            self.evaluate(log, progress)
        if self.saved_step != self.step:
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


# -- resume helpers ---------------------------------------------------------------------------------------------------


def trim_metrics_log(path: Path, step: int) -> int:
    """Remove the lines of a metrics.jsonl logged after ``step`` (and any line a crash left unfinished), so that a
    run resumed from the checkpoint of ``step`` logs those steps once. Rewritten atomically (temporary file,
    rename). Returns the number of lines removed (0: the file is left untouched)."""
    if not path.is_file():
        return 0
    kept, dropped = [], 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True):
        try:
            record = json.loads(line)
            keep = line.endswith("\n") and int(record["step"]) <= step
        except (ValueError, KeyError, TypeError):
            keep = False
        if keep:
            kept.append(line)
        else:
            dropped += 1
    if dropped:
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(kept)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    return dropped


def check_same_vocabulary(current: Tokenizer, saved: Tokenizer, path: Path) -> None:
    """Raise CheckpointError unless two tokenizers have the same tokens under the same ids."""
    if current.vocab_size != saved.vocab_size:
        raise CheckpointError(
            f"vocabulary mismatch: {path} has {saved.vocab_size} tokens, this run's tokenizer has {current.vocab_size}"
        )
    for i in range(current.vocab_size):
        if current.id_to_token(i) != saved.id_to_token(i):
            raise CheckpointError(
                f"vocabulary mismatch: token {i} is {saved.id_to_token(i)!r} in {path}, "
                f"{current.id_to_token(i)!r} in this run"
            )


# -- random number generators -----------------------------------------------------------------------------------------


def _seed_everything(seed: int) -> None:
    """Seed torch (CPU and CUDA), Python's random and NumPy's global generator."""
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)


def _get_rng_state(context: DistContext) -> dict[str, Any]:
    """The generators' states: torch CPU (and CUDA) per rank as uint8 tensors; Python and NumPy as lists (rank 0)."""
    torch_states = all_gather_tensor(torch.get_rng_state(), context)
    cuda_states = None
    if context.device.type == "cuda":
        cuda_states = all_gather_tensor(torch.cuda.get_rng_state(context.device), context)
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "torch": torch_states,
        "cuda": cuda_states,
        "python": [version, list(internal), gauss],
        "numpy": [name, [int(k) for k in keys], int(pos), int(has_gauss), float(cached)],
    }


def _set_rng_state(state: dict[str, Any], context: DistContext) -> None:
    """Inverse of :func:`_get_rng_state`; each rank takes its own torch states."""
    torch.set_rng_state(_as_byte_tensor(state["torch"][context.rank]))
    if state.get("cuda") is not None and context.device.type == "cuda":
        torch.cuda.set_rng_state(_as_byte_tensor(state["cuda"][context.rank]), context.device)
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))


def _as_byte_tensor(value: Tensor) -> Tensor:
    return value.to(dtype=torch.uint8, device="cpu").contiguous()
