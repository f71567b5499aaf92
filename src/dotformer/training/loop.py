"""The training loop: :func:`fit` sets a run up, and :func:`train_loop` runs optimizer steps under a budget, with
validation, checkpoints, logging and exact resumption.

Read :func:`train_loop` first: one screen over one :class:`~dotformer.training.state.TrainState`. What it calls is
one plain function each: the step (:func:`~dotformer.training.step.train_step`), the stop checks
(:mod:`~dotformer.training.stopping`), validation and the choice of ``best/`` (:mod:`~dotformer.training.validation`,
:mod:`~dotformer.training.selection`), saving and resuming (:mod:`~dotformer.training.saving`,
:mod:`~dotformer.training.resume`); the batches come from :mod:`~dotformer.training.stream`.
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
from dotformer.data.batch.batching import Batch, PlannedBatches, sampler_for
from dotformer.errors import ConfigError, TrainingError
from dotformer.training.adapting import adapt_model
from dotformer.training.config import TrainConfig
from dotformer.training.ctc import feasibility_line
from dotformer.training.distributed import DistContext, barrier, setup_distributed, teardown_distributed
from dotformer.training.ema import WeightAverage
from dotformer.training.logging import MetricsLog
from dotformer.training.objective import NEXT_TOKEN, JointCTC
from dotformer.training.optim import autocast_dtype, build_grad_scaler, build_optimizer, set_learning_rate
from dotformer.training.progress import Budget, Progress, TokenRate, count
from dotformer.training.resume import initialise_from, restore
from dotformer.training.saving import save, seed_everything
from dotformer.training.schedule import decay_factor, learning_rate
from dotformer.training.state import Setup, TrainData, TrainState
from dotformer.training.step import StepRecipe, StepResult, train_step
from dotformer.training.stopping import (
    budget_ends_here,
    budget_left,
    check_budget_allows_a_step,
    interrupted,
    position,
    signals_caught,
    stop_before_step,
    stop_requested,
)
from dotformer.training.stream import BatchStream
from dotformer.training.validation import pairs_to_decode, validate

if TYPE_CHECKING:
    from dotformer.training.scoring import EvalResult

logger = logging.getLogger(__name__)  # "dotformer.training.loop": the data line before training


@dataclass(frozen=True)
class FitResult:
    """The outcome of :func:`fit`.

    Attributes:
        steps: optimizer steps done in total (a resumed run includes the earlier ones).
        epochs: passes over the training data in total (fractional).
        seconds: training wall-clock seconds in total (earlier runs included).
        run_seconds: seconds spent in this call.
        tokens: target tokens trained on in total (an encoder's: the masked tokens, texts or words its objective
            scores: ``scored``).
        tokens_per_second: of them, per second in this call.
        train_loss: label-smoothed loss per token of the last step (nan when no step ran).
        best_valid_loss, best_valid_perplexity, best_step: the best validation pass by ``best_metric`` (its loss
            and perplexity; None without validation; no perplexity for an objective over labels).
        last_valid: the last validation pass (None without validation).
        stopped_by: "max_steps", "max_minutes", "max_epochs" or "patience" (early stopping).
        checkpoint: best/ when it exists, else last/ (None without a run directory).
        best_metric: what chose best/ ("loss", "bleu", "chrf", "wer", "per", "accuracy", "f1").
        best_score: its value at the best pass (None without validation).
        scored: what ``tokens`` counts, plural ("target tokens", "masked tokens", "texts", "words").
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
    scored: str = "target tokens"


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

    Under ``torchrun`` every process calls this with the same arguments: each trains on its share of every step's
    batches (:mod:`~dotformer.training.stream`), gradients are averaged, and only rank 0 writes. Budgets
    (max_steps, max_minutes, max_epochs) count from the start of the run, resumed runs included.

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
            ``data``'s. Ignored when resuming. With ``config.lora_rank`` its weights stay frozen and LoRA adapters
            train (:mod:`dotformer.lora`); the checkpoints save the adapters and refer to it.

    Raises:
        ConfigError: no budget, fp16 on CPU, bad device, resume without a run directory, a best_metric the data
            does not offer (``data.best_metrics``), a best_metric other than the loss or patience without validation.
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
        adapt_model(model, config, resume or init_from is not None, context.is_main and config.progress)
        setup = set_up(model, data, config, Path(run_dir) if run_dir else None, dict(info or {}), context)
        state = TrainState()
        start(setup, state, resume, None if init_from is None else Path(init_from))
        return train_loop(setup, state)
    finally:
        teardown_distributed(context)


def train_loop(setup: Setup, state: TrainState) -> FitResult:
    """Steps from ``state`` until a budget, early stopping or a signal; then the final validation pass and checkpoint.

    Each step: the stop checks, the learning rate of the step (the schedule, times the cooldown's factor), this
    rank's micro-batches, :func:`train_step`, the counters, a progress line every ``log_every`` steps and a
    metrics line every ``metrics_every``, a validation pass every ``eval_every`` and a checkpoint every
    ``save_every``. Collective under torchrun: every rank runs it.
    """
    c, main, optimizer = setup.config, setup.context.is_main, setup.optimizer
    model = training_model(setup)
    log = metrics_log(setup)
    state.started = time.monotonic()
    unit = setup.recipe.objective.unit  # what the speed counts: target tokens, or an encoder's texts, words, ...
    progress = Progress(Budget.of(c), lambda: position(setup, state), enabled=main and c.progress, unit=unit)
    first_step, first_tokens, cpu_start = state.step, state.tokens, time.process_time()
    shown, logged = TokenRate(state.started), TokenRate(state.started)  # speeds of progress and metrics lines
    try:
        with signals_caught(state):
            while True:
                stopped_by = stop_before_step(setup, state, first_step)
                if stopped_by is not None:
                    break
                lr_factor = decay_factor(c, budget_left(setup, state))  # cosine and linear decay, a cooldown
                batches = setup.stream.take(c.accumulation_steps)
                if not batches:
                    stopped_by = "max_epochs"
                    break
                set_learning_rate(optimizer, learning_rate(state.step + 1, c, setup.model.config.d_model) * lr_factor)
                try:
                    last = train_step(model, optimizer, batches, setup.recipe)
                except TrainingError as exc:
                    kept = f"; the last good checkpoint is {state.last_checkpoint}" if state.last_checkpoint else ""
                    raise TrainingError(f"step {state.step + 1:,}: {exc}{kept}") from None
                state.step, state.tokens, state.train_loss = state.step + 1, state.tokens + last.num_tokens, last.loss
                if setup.average is not None:  # θ_ema ← d·θ_ema + (1 - d)·θ (dotformer.training.ema)
                    setup.average.update(setup.model, state.step)
                shown.add(last.num_tokens)
                logged.add(last.num_tokens)
                if main and (state.step % max(1, c.log_every) == 0 or state.step == 1):
                    progress.update(last.loss, last.lr, shown.read())
                if main and (state.step % max(1, c.metrics_every) == 0 or state.step == 1):
                    log.write(train_record(setup, state, last, logged.read(), time.process_time() - cpu_start))
                if c.eval_every and state.step % c.eval_every == 0:
                    validate(setup, state, log, progress)
                if c.save_every and state.step % c.save_every == 0 and not budget_ends_here(setup, state):
                    save(setup, state)  # the budget's last step is saved after the final validation pass, below
                if c.patience and state.evals_without_gain >= c.patience:
                    stopped_by = "patience"
                    break
            if main and state.step > first_step:  # the end line shows the last step's loss, between progress lines too
                progress.last_step(last.loss, last.lr, shown.read)
            if stop_requested(state, setup.context):
                raise interrupted(setup, state)
            # a step saved by save_every when the clock ran out after it (max_minutes) is saved again after its pass
            saved_before_its_validation = state.saved_step == state.step and state.evaluated_step != state.step
            if state.evaluated_step != state.step:
                validate(setup, state, log, progress)
            if state.saved_step != state.step or saved_before_its_validation:  # last/ carries the final pass's best
                save(setup, state)
    finally:
        progress.close()
        log.close()
    return result(setup, state, stopped_by, first_tokens)


def set_up(
    model: nn.Module, data: TrainData, config: TrainConfig, run_dir: Path | None, info: dict[str, Any],
    context: DistContext,
) -> Setup:  # fmt: skip
    """The model on its device, the optimizer, the step's recipe, the batches; the pairs a decoding metric decodes.

    Raises:
        ConfigError: fp16 on a CPU, a best_metric the data does not offer, a best_metric other than the loss or
            patience without validation.
        DataError: an example longer than max_tokens.
    """
    amp_dtype = autocast_dtype(config.amp, context.device)
    model = model.to(context.device)
    optimizer = build_optimizer(model, config)
    scaler = build_grad_scaler(config.amp, context.device)
    objective = data.objective
    if config.ctc_weight:  # joint CTC/attention (dotformer.training.ctc): the head is on the model (adapt_model)
        if objective is not NEXT_TOKEN:
            raise ConfigError(f"--ctc-weight adds CTC to teacher forcing; this data trains {objective.name}")
        objective = JointCTC(config.ctc_weight, model.config.pad_id)
    recipe = StepRecipe.of(config, model.config.pad_id, context, scaler, amp_dtype, objective)
    sampler = sampler_for(data.train, config.max_tokens, config.seed)  # the global order; the stream deals it
    stream = BatchStream(sampler, max_epochs=config.max_epochs, rank=context.rank, world_size=context.world_size)
    valid_batches: Sequence[Batch] = []
    if len(data.valid):
        # evaluation needs no equal batch counts (one all-reduce at the end): each rank takes every world-th batch,
        # collated when a validation pass reads it
        valid = sampler_for(data.valid, config.max_tokens, config.seed, shuffle=False)
        valid_batches = PlannedBatches(valid, valid.plan(0).select(slice(context.rank, None, context.world_size)))
    decode = pairs_to_decode(data, config)
    average = WeightAverage(model, config.ema_decay, config.ema_start) if config.ema_decay else None
    return Setup(model, optimizer, recipe, config, data, stream, valid_batches, decode, run_dir, info, average)


def start(setup: Setup, state: TrainState, resume: bool, init_from: Path | None) -> None:
    """Bring ``state`` (and the model, optimizer and stream) to the first step: recover the run directory after a
    crash, then resume, or seed and maybe copy ``init_from``'s weights; check the budget allows a step."""
    context, c = setup.context, setup.config
    if setup.run_dir is not None and context.is_main:
        ckpt.recover_run_directory(setup.run_dir)  # leftovers of a crash: unfinished writes, prunes, renames
    barrier(context)
    if resume:
        restore(setup, state)
    else:
        seed_everything(c.seed + context.rank)
        if init_from is not None:
            initialise_from(setup, init_from)
        if setup.average is not None:  # the average starts from the weights of step 0
            setup.average.reset(setup.model)
    check_budget_allows_a_step(setup, state)
    if context.is_main and c.progress:
        logger.info(describe_data(setup))
        if c.ctc_weight:
            logger.info(feasibility_line(setup.data.train, c.ctc_upsample))


def describe_data(setup: Setup) -> str:
    """One line before training: the examples' counts and vocabulary as their sampler says them (pairs, a language
    model's tokens and blocks, an encoder's examples), parameters, batches per epoch, padding fraction (counted from
    the lengths: no batch is collated)."""
    d, c, sampler = setup.data, setup.config, setup.stream.sampler
    plan = setup.stream.own_plan(setup.stream.epoch)
    counts, vocabulary, size = sampler.data_line(
        len(d.valid), d.src_tokenizer, d.tgt_tokenizer, setup.recipe.objective.name, c.max_tokens
    )
    return (
        f"data: {counts}; {vocabulary};"
        f" model {setup.model.num_parameters():,} parameters; {count(len(plan), 'batch', 'batches')} of"
        f" {size} per epoch (this process), {sampler.padding_fraction(plan):.1%} padding"
    )


def training_model(setup: Setup) -> nn.Module:
    """What the steps run through: the model, wrapped in DistributedDataParallel across ranks, compiled if asked."""
    model: nn.Module = setup.model
    if setup.context.distributed:
        device_ids = [setup.context.device] if setup.context.device.type == "cuda" else None
        model = nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
    if setup.config.compile:
        setup.model.keep_packings_eager()
        model = torch.compile(model)
    return model


def metrics_log(setup: Setup) -> MetricsLog:
    """RUN/metrics.jsonl (and RUN/tensorboard) on rank 0; a log that keeps nothing elsewhere."""
    run_dir = setup.run_dir if setup.context.is_main else None
    tensorboard = run_dir / "tensorboard" if run_dir and setup.config.tensorboard else None
    return MetricsLog(run_dir / "metrics.jsonl" if run_dir else None, tensorboard)


def train_record(setup: Setup, state: TrainState, last: StepResult, speed: float, cpu_seconds: float) -> dict[str, Any]:
    """The metrics.jsonl line of the step just taken (see :mod:`~dotformer.training.logging`)."""
    record = {"split": "train", "step": state.step, "epoch": round(setup.stream.epochs_done, 4)}
    record.update(loss=last.loss, nll=last.nll)
    if setup.recipe.objective.perplexity:  # a loss over labels has none
        record.update(ppl=math.exp(min(last.nll, 700.0)))
    record.update(lr=last.lr)
    record.update(grad_norm=last.grad_norm, tokens=last.num_tokens, tokens_per_s=round(speed, 1))
    record.update(elapsed_s=round(state.elapsed(), 3), cpu_s=round(cpu_seconds, 3))
    return record


def result(setup: Setup, state: TrainState, stopped_by: str, first_tokens: int) -> FitResult:
    """The :class:`FitResult` of the loop that just ended."""
    run_seconds = time.monotonic() - state.started
    checkpoint = None
    if setup.run_dir is not None:
        best = setup.run_dir / "best"
        checkpoint = best if best.is_dir() else setup.run_dir / "last"
    return FitResult(
        steps=state.step,
        epochs=setup.stream.epochs_done,
        seconds=state.elapsed(),
        run_seconds=run_seconds,
        tokens=state.tokens,
        tokens_per_second=(state.tokens - first_tokens) / max(run_seconds, 1e-9),
        train_loss=state.train_loss,
        best_valid_loss=None if math.isinf(state.best_loss) else state.best_loss,
        best_valid_perplexity=state.best_perplexity if setup.recipe.objective.perplexity else None,
        best_step=state.best_step,
        last_valid=state.last_valid,
        stopped_by=stopped_by,
        checkpoint=checkpoint,
        best_metric=setup.config.best_metric,
        best_score=state.best_score,
        scored=setup.recipe.objective.scored,
    )
