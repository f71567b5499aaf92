"""Training with the paper's recipe (§5): label-smoothed loss, Adam with warmup and 1/√step decay, clipping,
gradient accumulation, mixed precision, data parallelism, checkpoints and exact resumption.

Read in this order: :mod:`~dotformer.training.config` (TrainConfig, DataConfig), :mod:`~dotformer.training.loss`,
:mod:`~dotformer.training.schedule`, :mod:`~dotformer.training.optim`, :mod:`~dotformer.training.loop`
(train_step, evaluate_loss, fit), :mod:`~dotformer.training.distributed`, :mod:`~dotformer.training.logging`.
Checkpoints live in :mod:`dotformer.checkpoint`.
"""

from dotformer.training.config import DataConfig, TrainConfig
from dotformer.training.loop import EvalResult, FitResult, StepResult, TrainData, evaluate_loss, fit, train_step
from dotformer.training.loss import LossSums, label_smoothed_cross_entropy
from dotformer.training.schedule import inverse_sqrt_lr, learning_rate, noam_lr

__all__ = [
    "DataConfig",
    "EvalResult",
    "FitResult",
    "LossSums",
    "StepResult",
    "TrainConfig",
    "TrainData",
    "evaluate_loss",
    "fit",
    "inverse_sqrt_lr",
    "label_smoothed_cross_entropy",
    "learning_rate",
    "noam_lr",
    "train_step",
]
