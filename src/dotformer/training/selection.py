"""Model selection during training: which validation score picks ``best/``, and when early stopping gives up.

As fairseq's ``--best-checkpoint-metric`` and ``--patience``: at each validation pass the score is either the
label-smoothed validation loss, or a metric of the model's greedy outputs on the validation sources (all of them,
or a seeded sample of ``valid_decode_limit`` sources, the same sample at every pass so the scores compare):

* ``bleu``, ``chrf``: sacrebleu's corpus BLEU and chrF of the detokenised outputs, one reference per pair
  (:func:`dotformer.metrics.bleu`, :func:`dotformer.metrics.chrf`); higher is better;
* ``wer``, ``per``: word and phone error rates against every reference of a source, stress kept
  (:func:`dotformer.metrics.g2p_error_rates`, as ``dotformer evaluate`` computes them for G2P); lower is better.
  On other tasks a "word" is a whole output and a "phone" a whitespace-separated token;
* ``accuracy``, ``f1``: a classifier's or a tagger's accuracy and macro-F1 of the labels it gives the validation
  texts, as ``dotformer evaluate`` computes them (:mod:`dotformer.metrics.labels`); higher is better. The task
  computes them (a :class:`ValidFigures` in its :class:`~dotformer.training.state.TrainData`) at every pass.

Each task offers some of them (``TrainData.best_metrics``: pairs the decoding metrics, a classifier or a tagger its
label figures, every task the loss; :mod:`~dotformer.training.best_metrics`); a run asking for another is refused
before its first step.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dotformer.errors import ConfigError
from dotformer.training.best_metrics import DECODING_METRICS, LOWER_IS_BETTER

if TYPE_CHECKING:
    from dotformer.data.read.types import Pair
    from dotformer.data.tokenize.tokenizers import Tokenizer
    from dotformer.model import Transformer
    from dotformer.training.scoring import EvalResult
    from dotformer.training.state import TrainState


def is_improvement(metric: str, score: float, best: float | None) -> bool:
    """True when ``score`` beats ``best`` (None: nothing yet) in the direction of ``metric``; ties do not count.

    Raises:
        ConfigError: an unknown metric.
    """
    if metric not in LOWER_IS_BETTER:
        raise ConfigError(f"unknown best metric {metric!r}; choose one of {', '.join(LOWER_IS_BETTER)}")
    if best is None:
        return True
    return score < best if LOWER_IS_BETTER[metric] else score > best


def select_best(state: TrainState, metric: str, score: float, result: EvalResult) -> bool:
    """Count one validation pass of ``score`` (``metric``; ``result``: its loss) in ``state``: a new best sets the
    best loss, perplexity, step and score and clears the count of passes without gain; any other pass adds one to
    it (early stopping reads it). Returns True for a new best.

    Raises:
        ConfigError: an unknown metric.
    """
    improved = is_improvement(metric, score, state.best_score)
    if improved:
        state.best_loss, state.best_perplexity, state.best_step = result.loss, result.perplexity, state.step
        state.best_score, state.evals_without_gain = score, 0
    else:
        state.evals_without_gain += 1
    return improved


def decode_sample(pairs: Sequence[Pair], limit: int | None, seed: int) -> list[Pair]:
    """The pairs of a seeded random sample of ``limit`` distinct sources (all their references kept), in file order.

    None, or a limit at least the number of distinct sources, keeps every pair. Uses its own generator: the
    training's random streams are untouched.
    """
    if limit is None:
        return list(pairs)
    sources = list(dict.fromkeys(pair.source for pair in pairs))
    if limit >= len(sources):
        return list(pairs)
    kept = set(random.Random(seed).sample(sources, limit))
    return [pair for pair in pairs if pair.source in kept]


def validation_score(
    model: Transformer,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    pairs: Sequence[Pair],
    metric: str,
    batch_size: int = 256,
) -> float:
    """Greedy-decode the distinct sources of ``pairs`` and score the outputs with ``metric`` (see the module).

    The model is decoded in eval mode without gradients and its training flag is restored; no random generator is
    used. Source symbols outside the vocabulary are read as UNK without a warning (the split was read at training).

    Args:
        model: the Transformer being trained (not a DDP wrapper).
        src_tokenizer, tgt_tokenizer: the run's tokenizers.
        pairs: validation (source, target) pairs, at least one.
        metric: "bleu", "chrf", "wer" or "per".
        batch_size: sentences decoded together.

    Returns:
        The score: BLEU/chrF on 0-100, WER/PER in percent.

    Raises:
        ConfigError: ``metric`` is not a decoding metric. DataError: no pairs.
    """
    from dotformer.checkpoint import LoadedCheckpoint
    from dotformer.decoding.config import DecodeConfig
    from dotformer.decoding.evaluation import group_references
    from dotformer.decoding.inputs import UnknownTokenWarning
    from dotformer.decoding.translate import translate
    from dotformer.errors import DataError
    from dotformer.metrics import bleu, chrf, g2p_error_rates

    if metric not in DECODING_METRICS:
        raise ConfigError(f"{metric!r} is not a decoding metric; choose bleu, chrf, wer or per")
    if not pairs:
        raise DataError("no validation pairs to decode for the best metric")
    grouped = group_references(pairs)
    loaded = LoadedCheckpoint(model, model.config, src_tokenizer, tgt_tokenizer, {}, Path("."))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnknownTokenWarning)
        outputs = translate(loaded, grouped.sources, DecodeConfig(strategy="greedy"), batch_size, progress=False)
    best = [hyps[0].text if hyps else "" for hyps in outputs]
    if metric in ("wer", "per"):
        rates = g2p_error_rates(best, grouped.references, strip_stress=False)
        return rates.wer if metric == "wer" else rates.per
    output_of = dict(zip(grouped.sources, best, strict=True))
    hyps = [output_of[pair.source] for pair in pairs]
    refs = [pair.target for pair in pairs]
    return (bleu(hyps, refs) if metric == "bleu" else chrf(hyps, refs)).score
