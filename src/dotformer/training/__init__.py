"""Training with the paper's recipe (§5): label-smoothed loss, Adam with warmup and 1/√step decay, clipping,
gradient accumulation, mixed precision, data parallelism, checkpoints and exact resumption.

Read in this order: :mod:`~dotformer.training.config` (TrainConfig; the data's DataConfig is in
:mod:`dotformer.data.config`), :mod:`~dotformer.training.loss`,
:mod:`~dotformer.training.schedule`, :mod:`~dotformer.training.optim`, :mod:`~dotformer.training.step`
(train_step and its StepRecipe), :mod:`~dotformer.training.loop` (fit and train_loop over a TrainState; with
:mod:`~dotformer.training.state`, the state and the setup, :mod:`~dotformer.training.stream`, the batch stream,
:mod:`~dotformer.training.stopping`, budgets and signals, :mod:`~dotformer.training.validation` and
:mod:`~dotformer.training.selection`, the validation pass and best/, :mod:`~dotformer.training.saving` and
:mod:`~dotformer.training.resume`, checkpoints written and read back), :mod:`~dotformer.training.ema` (a moving
average of the weights), :mod:`~dotformer.training.distributed`, :mod:`~dotformer.training.logging`. Checkpoints
live in :mod:`dotformer.checkpoint`.
"""

from typing import Any

# Each module and the public names it holds, imported on first use (PEP 562): ``import dotformer.training.loss``
# (or :mod:`dotformer.training.scoring`, which needs it) does not load the loop, checkpoints and data batching with it.
_MODULES = {
    "dotformer.training.config": ("TrainConfig",),
    "dotformer.training.loop": ("FitResult", "fit"),
    "dotformer.training.state": ("TrainData", "TrainState"),
    "dotformer.training.loss": ("LossSums", "label_smoothed_cross_entropy"),
    "dotformer.training.schedule": ("inverse_sqrt_lr", "learning_rate", "noam_lr"),
    "dotformer.training.scoring": ("EvalResult", "evaluate_loss"),
    "dotformer.training.step": ("StepRecipe", "StepResult", "train_step"),
    "dotformer.training.stopping": ("TrainingInterrupted",),
}
_LAZY = {name: module for module, names in _MODULES.items() for name in names}


def __getattr__(name: str) -> Any:
    """The names of ``__all__``, imported from their modules on first use."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'dotformer.training' has no attribute {name!r}")


__all__ = sorted(_LAZY)
