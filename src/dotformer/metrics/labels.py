"""The figures of an encoder's evaluation: masked-token accuracy and perplexity, and a classifier's or a tagger's
accuracy and macro-F1.

* A masked language model: over the masked positions of held-out text, the share whose token the model ranks first
  (masked-token accuracy) and exp of the mean NLL of the true tokens (perplexity), as BERT and HF report them.
* A classifier: accuracy and macro-F1 (the unweighted mean of the per-label F1s, so a rare label counts as much as
  a frequent one) by scikit-learn's ``accuracy_score``, ``f1_score`` and ``precision_recall_fscore_support``.
* A tagger: accuracy over the words, and macro-F1 over the labels: by seqeval (entities, the CoNLL way: a span
  counts only when its type and both ends are right) when the labels are a BIO scheme (``O``, ``B-X``, ``I-X``, ...),
  else by scikit-learn over the words.

No figure is computed by hand: the packages are the ``eval`` extra (``pip install "dotformer[eval]"``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from dotformer.errors import require_extra

BIO = re.compile(r"^(O|[BIESLU]-.+)$")  # a label of a BIO / BIOES scheme


@dataclass(frozen=True)
class MaskedTokenScore:
    """A masked language model's figures over the masked positions of a text.

    Attributes:
        masked: masked positions scored. correct: of them, those whose true token ranks first.
        nll: Σ -ln p(true token), nats.
    """

    masked: int
    correct: int
    nll: float

    @property
    def accuracy(self) -> float:
        """Masked-token accuracy, percent."""
        return 100.0 * self.correct / self.masked if self.masked else math.nan

    @property
    def perplexity(self) -> float:
        """exp(mean NLL) of the true tokens."""
        return math.exp(min(self.nll / self.masked, 700.0)) if self.masked else math.nan

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "accuracy": self.accuracy, "perplexity": self.perplexity}


def masked_token_score(model: Any, batches: Sequence[Any]) -> MaskedTokenScore:
    """Score ``model`` (encoder-only, generator head) on masked batches (:class:`~dotformer.data.batch.labelled.
    LabelledBatch`: masked inputs, the true tokens as labels), in eval mode without gradients."""
    device = next(iter(model.parameters())).device
    masked, correct, nll = 0, 0, 0.0
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for batch in batches:
            batch = batch.to(device)
            scored = batch.scored  # (B, S) bool
            logits = model(batch.src, select=scored).float()  # (N, V)
            gold = batch.labels[scored]  # (N,)
            masked += gold.numel()
            correct += int((logits.argmax(dim=-1) == gold).sum())
            nll += float(F.cross_entropy(logits, gold, reduction="sum"))
    model.train(was_training)
    return MaskedTokenScore(masked, correct, nll)


@dataclass(frozen=True)
class LabelScore:
    """A classifier's or a tagger's figures.

    Attributes:
        count: texts (a classifier) or words (a tagger) scored.
        accuracy: percent right.
        macro_f1: the mean of the per-label (or per-entity-type) F1s, percent.
        f1_by: "labels" (scikit-learn over texts or words) or "entities" (seqeval, a BIO scheme).
        per_label: label -> {"precision", "recall", "f1", "support"} (percent, count).
    """

    count: int
    accuracy: float
    macro_f1: float
    f1_by: str
    per_label: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def table(self) -> str:
        """The figures as printed: one line, then a line per label."""
        lines = [f"accuracy {self.accuracy:.2f}%  macro-F1 {self.macro_f1:.2f} (over {self.f1_by})"]
        for label, row in self.per_label.items():
            lines.append(
                f"  {label:<16} precision {row['precision']:6.2f}  recall {row['recall']:6.2f}  F1 {row['f1']:6.2f}"
                f"  ({int(row['support']):,})"
            )
        return "\n".join(lines)


def _per_label(gold: Sequence[str], predicted: Sequence[str], labels: Sequence[str]) -> dict[str, dict[str, float]]:
    metrics = require_extra("eval", "sklearn.metrics", "classification metrics")
    p, r, f, s = metrics.precision_recall_fscore_support(gold, predicted, labels=list(labels), zero_division=0)
    return {
        label: {
            "precision": 100 * float(p[i]),
            "recall": 100 * float(r[i]),
            "f1": 100 * float(f[i]),
            "support": int(s[i]),
        }
        for i, label in enumerate(labels)
    }


def classification_score(gold: Sequence[str], predicted: Sequence[str], labels: Sequence[str]) -> LabelScore:
    """Accuracy and macro-F1 over the ``labels`` (every label the model knows: one never predicted nor true counts
    as F1 0 only when it is true somewhere; scikit-learn's ``labels=`` and ``zero_division=0``).

    Raises:
        MissingExtraError: scikit-learn is not installed.
    """
    metrics = require_extra("eval", "sklearn.metrics", "classification metrics")
    present = [label for label in labels if label in set(gold) | set(predicted)]
    accuracy = 100 * float(metrics.accuracy_score(gold, predicted))
    macro = 100 * float(metrics.f1_score(gold, predicted, labels=present, average="macro", zero_division=0))
    return LabelScore(len(gold), accuracy, macro, "labels", _per_label(gold, predicted, present))


def tagging_score(
    gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]], labels: Sequence[str]
) -> LabelScore:
    """Word accuracy and macro-F1 of tagged sentences: seqeval's entity F1 for a BIO scheme, else scikit-learn's over
    the words (module docstring).

    Raises:
        MissingExtraError: scikit-learn or seqeval is not installed.
    """
    flat_gold = [label for sentence in gold for label in sentence]
    flat_predicted = [label for sentence in predicted for label in sentence]
    words = classification_score(flat_gold, flat_predicted, labels)
    if not all(BIO.match(label) for label in labels) or "O" not in labels:
        return words
    seqeval = require_extra("eval", "seqeval.metrics", "entity F1 of BIO tags")
    gold_lists, predicted_lists = [list(s) for s in gold], [list(s) for s in predicted]
    macro = 100 * float(seqeval.f1_score(gold_lists, predicted_lists, average="macro", zero_division=0))
    report = seqeval.classification_report(gold_lists, predicted_lists, output_dict=True, zero_division=0)
    per_entity = {
        name: {"precision": 100 * float(row["precision"]), "recall": 100 * float(row["recall"]),
               "f1": 100 * float(row["f1-score"]), "support": int(row["support"])}  # numpy's numbers: JSON's
        for name, row in report.items() if not name.endswith(" avg")
    }  # fmt: skip
    return LabelScore(words.count, words.accuracy, macro, "entities", per_entity)


__all__ = [
    "LabelScore",
    "MaskedTokenScore",
    "classification_score",
    "masked_token_score",
    "tagging_score",
]
