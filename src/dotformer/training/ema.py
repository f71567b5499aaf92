"""An exponential moving average of the weights (Polyak averaging), kept beside the weights that train:
:class:`WeightAverage`, and :func:`averaged_weights`, which puts it in the model while a run validates and saves.

After every optimizer step ``t`` (``TrainConfig.ema_decay`` = d in (0, 1), ``TrainConfig.ema_start`` = t0):

    θ_ema ← θ                              for t ≤ t0 (the average follows the weights)
    θ_ema ← d · θ_ema + (1 - d) · θ        for t > t0

so after step t the average weighs the weights of step s (t0 < s ≤ t) by (1 - d) · d^(t - s) and those of step t0 by
d^(t - t0): it remembers about 1 / (1 - d) steps (1,000 at d = 0.999). This is the average of fairseq's
``--ema-decay`` and ``--ema-start-update``, timm's ``ModelEmaV2`` and ``torch.optim.swa_utils.AveragedModel`` with
``get_ema_multi_avg_fn``; it is kept here as a plain dictionary of tensors rather than a second copy of the model, so
that the lesson's model is the one module the run validates, saves and resumes.

What is averaged: the parameters that train (``requires_grad``). Those are exactly what a checkpoint of a model with
LoRA adapters saves (:mod:`dotformer.lora`); the frozen ones never change, so their average would be themselves.
Buffers (sinusoidal positions) are not averaged. Under data parallelism every rank keeps the same average of the same
weights (DDP keeps the ranks' weights equal), so a validation pass, collective, reads the average on every rank.

The run validates, picks ``best/`` and saves the averaged weights (checkpoints, ``last/``): ``evaluate``,
``translate`` and export read them with no flag of their own. The weights that train are saved beside them in the
training state (``raw_weights``), and a resumed run takes them back: it continues as if never stopped.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import Tensor, nn

from dotformer.errors import CheckpointError


def trained_parameters(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """The parameters of ``model`` that train (``requires_grad``), by name: what :class:`WeightAverage` averages."""
    return [(name, p) for name, p in model.named_parameters() if p.requires_grad]


class WeightAverage:
    """The exponential moving average θ_ema of a model's trained parameters (see the module).

    Args:
        model: the model whose parameters train (not a DDP or compiled wrapper); the average starts as its weights.
        decay: d in (0, 1), the share of the old average kept at each step.
        start: t0, the steps up to which the average is the weights themselves (0: averaging from step 1).

    Shape: each averaged tensor has its parameter's shape, dtype and device.
    """

    def __init__(self, model: nn.Module, decay: float, start: int = 0) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"the decay of a weight average must be in (0, 1), got {decay!r}")
        self.decay, self.start = decay, start
        self.averaged: dict[str, Tensor] = {name: p.detach().clone() for name, p in trained_parameters(model)}

    @torch.no_grad()
    def reset(self, model: nn.Module) -> None:
        """Make the average the model's present weights (a run's first step, or weights loaded from elsewhere)."""
        for name, p in trained_parameters(model):
            self.averaged[name].copy_(p)

    @torch.no_grad()
    def update(self, model: nn.Module, step: int) -> None:
        """Take the weights of optimizer step ``step`` (1 for the first) into the average:
        θ_ema ← d · θ_ema + (1 - d) · θ, or θ_ema ← θ while ``step`` ≤ ``start``."""
        if step <= self.start:
            self.reset(model)
            return
        d = self.decay
        for name, p in trained_parameters(model):
            self.averaged[name].mul_(d).add_(p.detach(), alpha=1.0 - d)


@contextlib.contextmanager
def averaged_weights(average: WeightAverage | None, model: nn.Module) -> Iterator[dict[str, Tensor] | None]:
    """Put the average into ``model``'s parameters for the block, and the trained weights back after it (exactly:
    copies). Yields a copy of the trained weights by name (what exact resumption saves), or None without an
    average (the model is left as it is)."""
    if average is None:
        yield None
        return
    parameters = trained_parameters(model)
    raw = {name: p.detach().clone() for name, p in parameters}
    with torch.no_grad():
        for name, p in parameters:
            p.copy_(average.averaged[name])
    try:
        yield raw
    finally:
        with torch.no_grad():
            for name, p in parameters:
                p.copy_(raw[name])


@torch.no_grad()
def load_trained_weights(model: nn.Module, raw: dict[str, Tensor], source: str) -> None:
    """Copy the trained weights saved by :func:`averaged_weights`'s caller back into ``model``.

    Raises:
        CheckpointError: ``raw`` lacks a parameter of the model, or holds one of another shape (``source`` names the
            file).
    """
    for name, p in trained_parameters(model):
        if name not in raw:
            raise CheckpointError(f"{source} has no trained weights for {name}")
        if tuple(raw[name].shape) != tuple(p.shape):
            shape, wanted = tuple(raw[name].shape), tuple(p.shape)
            raise CheckpointError(f"{source}: the trained weights {name} have the shape {shape}, not {wanted}")
        p.copy_(raw[name])
