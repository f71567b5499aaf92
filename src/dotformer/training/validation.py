"""The validation pass of the training loop: the loss on the validation batches, the task's own figures (a
classifier's or a tagger's accuracy and macro-F1: ``TrainData.figures``), the score that picks ``best/`` (the loss, a
decoding metric or one of those figures: :mod:`~dotformer.training.selection`), and the patience count of early
stopping. A language model's pass also logs bits per token and per character of the validation text; a pass over
labels shows no perplexity (its loss is over labels, not tokens).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from dotformer.data.read.types import Pair
from dotformer.errors import ConfigError
from dotformer.metrics.language import LanguageModelScore, scored_characters
from dotformer.training.best_metrics import DECODING_METRICS, LABEL_METRICS, check_offered
from dotformer.training.config import TrainConfig
from dotformer.training.ema import averaged_weights
from dotformer.training.logging import MetricsLog
from dotformer.training.progress import Progress
from dotformer.training.saving import save_best
from dotformer.training.scoring import evaluate_loss
from dotformer.training.selection import decode_sample, select_best, validation_score
from dotformer.training.state import Setup, TrainState

if TYPE_CHECKING:
    from dotformer.data.read.types import Pair
    from dotformer.training.scoring import EvalResult
    from dotformer.training.state import TrainData


def validate(setup: Setup, state: TrainState, log: MetricsLog, progress: Progress) -> None:
    """One validation pass: its loss, the task's own figures (a classifier's accuracy and macro-F1) and a decoding
    ``best_metric``, ``best/`` and the patience count updated, one ``metrics.jsonl`` record and one progress line
    (rank 0). Collective: call on every rank."""
    state.evaluated_step = state.step
    if not setup.valid_batches and not setup.context.distributed:
        return
    with averaged_weights(setup.average, setup.model):  # a run with --ema-decay validates (and keeps) its average
        _validate(setup, state, log, progress)


def _validate(setup: Setup, state: TrainState, log: MetricsLog, progress: Progress) -> None:
    """The pass of :func:`validate`, on the weights the model holds."""
    context, recipe, config = setup.context, setup.recipe, setup.config
    started = time.monotonic()
    result = evaluate_loss(
        setup.model, setup.valid_batches, config.label_smoothing, recipe.pad_id, context, recipe.amp_dtype,
        recipe.packed, recipe.objective,
    )  # fmt: skip
    if result.num_tokens == 0:
        return
    state.last_valid = result
    metric = config.best_metric
    figures = setup.data.figures(setup.model) if setup.data.figures is not None else {}
    score = result.loss
    if metric in DECODING_METRICS:
        d = setup.data
        score = validation_score(setup.model, d.src_tokenizer, d.tgt_tokenizer, setup.decode_pairs, metric)
    elif metric != "loss":
        score = figures[metric]
    improved = select_best(state, metric, score, result)
    if improved:
        save_best(setup, state)
    if context.is_main:
        record = {"split": "valid", "step": state.step, "epoch": round(setup.stream.epochs_done, 4)}
        record.update(loss=result.loss, nll=result.nll)
        if recipe.objective.perplexity:  # a loss over labels has none
            record.update(ppl=result.perplexity)
        record.update(tokens=result.num_tokens)
        language = language_figures(setup, result)
        record.update(language)
        record.update(figures)
        if metric in DECODING_METRICS:
            record.update({metric: score, "decoded": len({p.source for p in setup.decode_pairs})})
        record.update(best=improved, seconds=round(time.monotonic() - started, 3))
        log.write(record)
        shown = f"valid loss {result.loss:.4f}"
        if recipe.objective.perplexity:
            shown += f", ppl {result.perplexity:.3f}"
        for name, value in figures.items():
            shown += ", " + FIGURE_FORMATS.get(name, name + " {:.2f}").format(value)
        if metric in DECODING_METRICS:
            shown += f", {metric} {score:.2f}"
        if language:
            shown += f", {language['bits_per_char']:.3f} bits/char"
        progress.write(f"step {state.step:,}: {shown}" + (" (best)" if improved else ""))


FIGURE_FORMATS = {"accuracy": "accuracy {:.2f}%", "f1": "macro-F1 {:.2f}"}  # a figure on the validation line


def language_figures(setup: Setup, result: EvalResult) -> dict[str, float]:
    """A language model's figures of a validation pass: bits per token and bits per character of the validation text
    (:mod:`dotformer.metrics.language`, from the pass's NLL); empty for examples that are no running text (their
    sampler's ``reads_text``), or a text of unknown length."""

    valid = setup.data.valid
    if not setup.stream.sampler.reads_text or not valid.characters or not math.isfinite(result.nll):
        return {}
    characters = scored_characters(valid, setup.data.tgt_tokenizer)
    score = LanguageModelScore(result.nll * result.num_tokens, result.num_tokens, characters)
    return {"bits_per_char": score.bits_per_character, "bits_per_token": score.bits_per_token}


def pairs_to_decode(data: TrainData, config: TrainConfig) -> list[Pair]:
    """The validation pairs a decoding ``best_metric`` decodes at each pass (none for another metric).

    Raises:
        ConfigError: a best_metric the data does not offer (``data.best_metrics``), a best_metric other than the
            loss or patience and no validation examples.
    """
    c = config
    check_offered(c.best_metric, data.best_metrics)
    if c.best_metric in LABEL_METRICS and (data.figures is None or c.best_metric not in data.figures.names):
        raise ConfigError(f"best_metric {c.best_metric!r} needs the task's validation figures (TrainData.figures)")
    if (c.best_metric != "loss" or c.patience) and not len(data.valid):
        what = f"best_metric {c.best_metric!r}" if c.best_metric != "loss" else f"patience={c.patience}"
        raise ConfigError(f"{what} needs a validation split, and this run has no validation examples")
    if c.best_metric not in DECODING_METRICS:
        return []
    pairs = data.valid_pairs
    if pairs is None:
        src, tgt = data.src_tokenizer, data.tgt_tokenizer
        pairs = [Pair(src.decode(e.src), tgt.decode(e.tgt)) for e in data.valid]
    return decode_sample(pairs, c.valid_decode_limit, c.seed)
