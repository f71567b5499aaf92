"""Training with the paper's recipe (§5): label-smoothed loss, Adam with warmup and 1/√step decay, clipping,
gradient accumulation, mixed precision, data parallelism, checkpoints and exact resumption.

Read in this order: :mod:`~dotformer.training.config` (TrainConfig, DataConfig), :mod:`~dotformer.training.loss`,
:mod:`~dotformer.training.schedule`, :mod:`~dotformer.training.optim`, :mod:`~dotformer.training.step`
(train_step, evaluate_loss), :mod:`~dotformer.training.loop` (fit; with :mod:`~dotformer.training.stream`, the batch
stream, :mod:`~dotformer.training.state`, the resume state, and :mod:`~dotformer.training.stopping`, budgets and
signals), :mod:`~dotformer.training.distributed`, :mod:`~dotformer.training.logging`.
Checkpoints live in :mod:`dotformer.checkpoint`.
"""

from dotformer.training.config import DataConfig, TrainConfig
from dotformer.training.loop import FitResult, TrainData, fit
from dotformer.training.loss import LossSums, label_smoothed_cross_entropy
from dotformer.training.schedule import inverse_sqrt_lr, learning_rate, noam_lr
from dotformer.training.step import EvalResult, StepResult, evaluate_loss, train_step

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
