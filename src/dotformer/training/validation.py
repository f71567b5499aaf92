"""The validation pass of the training loop: the loss on the validation batches, the score that picks ``best/``
(the loss, or a decoding metric: :mod:`~dotformer.training.selection`), and the patience count of early stopping.
A language model's pass also logs bits per token and per character of the validation text.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from dotformer.data.read.corpora import Pair
from dotformer.errors import ConfigError
from dotformer.metrics.language import LanguageModelScore, scored_characters
from dotformer.training.config import TrainConfig
from dotformer.training.logging import MetricsLog
from dotformer.training.progress import Progress
from dotformer.training.saving import save_best
from dotformer.training.scoring import evaluate_loss
from dotformer.training.selection import decode_sample, select_best, validation_score
from dotformer.training.state import Setup, TrainState

if TYPE_CHECKING:
    from dotformer.data.read.corpora import Pair
    from dotformer.training.scoring import EvalResult
    from dotformer.training.state import TrainData


def validate(setup: Setup, state: TrainState, log: MetricsLog, progress: Progress) -> None:
    """One validation pass: its loss (and ``best_metric`` when that decodes), ``best/`` and the patience count
    updated, one ``metrics.jsonl`` record and one progress line (rank 0). Collective: call on every rank."""
    state.evaluated_step = state.step
    context, recipe, config = setup.context, setup.recipe, setup.config
    if not setup.valid_batches and not context.distributed:
        return
    started = time.monotonic()
    result = evaluate_loss(
        setup.model, setup.valid_batches, config.label_smoothing, recipe.pad_id, context, recipe.amp_dtype,
        recipe.packed, recipe.objective,
    )  # fmt: skip
    if result.num_tokens == 0:
        return
    state.last_valid = result
    metric = config.best_metric
    score = result.loss
    if metric != "loss":
        d = setup.data
        score = validation_score(setup.model, d.src_tokenizer, d.tgt_tokenizer, setup.decode_pairs, metric)
    improved = select_best(state, metric, score, result)
    if improved:
        save_best(setup, state)
    if context.is_main:
        record = {"split": "valid", "step": state.step, "epoch": round(setup.stream.epochs_done, 4)}
        record.update(loss=result.loss, nll=result.nll, ppl=result.perplexity, tokens=result.num_tokens)
        language = language_figures(setup, result)
        record.update(language)
        if metric != "loss":
            record.update({metric: score, "decoded": len({p.source for p in setup.decode_pairs})})
        record.update(best=improved, seconds=round(time.monotonic() - started, 3))
        log.write(record)
        shown = f", {metric} {score:.2f}" if metric != "loss" else ""
        if language:
            shown += f", {language['bits_per_char']:.3f} bits/char"
        progress.write(
            f"step {state.step:,}: valid loss {result.loss:.4f}, ppl {result.perplexity:.3f}{shown}"
            + (" (best)" if improved else "")
        )


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
    """The validation pairs a decoding ``best_metric`` decodes at each pass (none for "loss").

    Raises:
        ConfigError: a decoding best_metric or patience, and no validation pairs.
    """
    c = config
    if (c.best_metric != "loss" or c.patience) and not len(data.valid):
        what = f"best_metric {c.best_metric!r}" if c.best_metric != "loss" else f"patience={c.patience}"
        raise ConfigError(f"{what} needs a validation split, and this run has no validation pairs")
    if c.best_metric == "loss":
        return []
    pairs = data.valid_pairs
    if pairs is None:
        src, tgt = data.src_tokenizer, data.tgt_tokenizer
        pairs = [Pair(src.decode(e.src), tgt.decode(e.tgt)) for e in data.valid]
    return decode_sample(pairs, c.valid_decode_limit, c.seed)
