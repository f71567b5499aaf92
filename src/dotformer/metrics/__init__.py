"""How good a model is: the formulas of its scores, applied to numbers and texts it produced (no model runs here).

* :mod:`dotformer.metrics.decoded`  BLEU and chrF (sacrebleu), WER and PER, exact match, perplexity: the scores of a
  decoded test set against its references (every name re-exported here: ``from dotformer.metrics import bleu``)
* :mod:`dotformer.metrics.language` nats and bits per token and per character of a language model's summed NLL
* :mod:`dotformer.metrics.labels`   accuracy and macro-F1 of predicted labels

The teacher-forced loss of a model on batches, which runs the model, is training's
(:func:`dotformer.training.scoring.evaluate_loss`).
"""

from dotformer.metrics.decoded import (
    STRESS,
    G2PErrorRates,
    MetricResult,
    bleu,
    chrf,
    closest_reference,
    exact_match,
    g2p_error_rates,
    has_stress_digits,
    perplexity,
    phones,
    require_metric_packages,
)

__all__ = [
    "STRESS",
    "G2PErrorRates",
    "MetricResult",
    "bleu",
    "chrf",
    "closest_reference",
    "exact_match",
    "g2p_error_rates",
    "has_stress_digits",
    "perplexity",
    "phones",
    "require_metric_packages",
]
