"""The best metrics, what each means and which way is better, and the protocol of a task's own validation
figures (:mod:`~dotformer.training.selection` picks ``best/`` by them; a task's
:class:`~dotformer.training.state.TrainData` says which it offers)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from dotformer.errors import ConfigError

if TYPE_CHECKING:
    from torch import nn

LOWER_IS_BETTER = {"loss": True, "wer": True, "per": True, "bleu": False, "chrf": False, "accuracy": False, "f1": False}
DECODING_METRICS = ("bleu", "chrf", "wer", "per")  # scores of the greedy outputs of the validation sources
LABEL_METRICS = ("accuracy", "f1")  # a classifier's or a tagger's figures of its validation texts


class ValidFigures(Protocol):
    """A task's own figures of a validation pass beside its loss (a classifier's or a tagger's accuracy and
    macro-F1), each one a best metric that picks ``best/`` (higher is better)."""

    names: tuple[str, ...]  # the figures it gives, by name (keys of the dict a call returns)

    def __call__(self, model: nn.Module) -> dict[str, float]:
        """The figures of ``model`` (the Transformer, not a DDP wrapper) on the validation texts, computed in eval mode
        without gradients; the model's training flag is restored. The same on every rank."""
        ...


def check_offered(metric: str, offered: Sequence[str]) -> None:
    """Refuse a best metric the run's data does not offer (``TrainData.best_metrics``).

    Raises:
        ConfigError: one line naming the metric and the ones offered.
    """
    if metric not in offered:
        offers = or_list(offered)
        raise ConfigError(f"best_metric {metric!r} is not a figure of this run's validation; choose {offers}")


def or_list(names: Sequence[str]) -> str:
    """``"loss"``, ``"loss or f1"``, ``"loss, accuracy or f1"``."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


__all__ = ["DECODING_METRICS", "LABEL_METRICS", "LOWER_IS_BETTER", "ValidFigures", "check_offered", "or_list"]
