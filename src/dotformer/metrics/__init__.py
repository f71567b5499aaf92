"""How good a model is: scores of its decoded outputs, and its teacher-forced loss.

* :mod:`dotformer.metrics.decoded`  BLEU and chrF (sacrebleu), WER and PER, exact match, perplexity: the scores of a
  decoded test set against its references (every name re-exported here: ``from dotformer.metrics import bleu``)
* :mod:`dotformer.metrics.scoring`  the teacher-forced loss, NLL and perplexity of a model on batches, shared by
  training's validation pass and ``dotformer evaluate`` (so neither reaches into the other)
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
