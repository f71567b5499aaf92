"""The optimizer (paper §5.3: Adam, β1 = 0.9, β2 = 0.98, ε = 1e-9) and the mixed-precision gradient scaler.

The learning rate is not a scheduler object: the loop sets it from :func:`dotformer.training.schedule.learning_rate`
before every step, so the step number alone restores it on resume.
"""

from __future__ import annotations

import torch
from torch import nn

from dotformer.errors import ConfigError
from dotformer.training.config import TrainConfig


def build_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    """Adam (AdamW when ``config.weight_decay`` > 0) over the model's trainable parameters.

    Weight decay, when asked for, skips every parameter with fewer than 2 dimensions (biases, LayerNorm gains), as
    is usual; weight matrices and embeddings are decayed.

    PyTorch's fused implementation (one kernel for all parameters) is used on CPU and CUDA: the same update,
    about 3x faster than the default per-tensor loop for the small preset on a CPU.

    Returns:
        ``torch.optim.Adam`` (or ``AdamW``) with lr 0 (the loop sets it per step).
    """
    params = [p for p in model.parameters() if p.requires_grad]
    betas = (config.adam_beta1, config.adam_beta2)
    fused = all(p.device.type in ("cpu", "cuda") and p.dtype in (torch.float32, torch.float64) for p in params)
    options = dict(lr=0.0, betas=betas, eps=config.adam_eps, fused=fused or None)
    if config.weight_decay == 0:
        return torch.optim.Adam(params, **options)
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, **options)


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set the learning rate of every parameter group."""
    for group in optimizer.param_groups:
        group["lr"] = lr


def autocast_dtype(amp: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of ``amp`` ("none", "bf16", "fp16") on ``device``; None means full float32.

    Raises:
        ConfigError: fp16 on a CPU (float16 autocast needs a GradScaler, which needs CUDA; use bf16 on CPU).
    """
    if amp == "none":
        return None
    if amp == "bf16":
        return torch.bfloat16
    if amp == "fp16":
        if device.type != "cuda":
            raise ConfigError(f"--amp fp16 needs a CUDA device (GradScaler), got {device}; use --amp bf16 on CPU")
        return torch.float16
    raise ConfigError(f"amp must be none, bf16 or fp16, got {amp!r}")


def build_grad_scaler(amp: str, device: torch.device) -> torch.amp.GradScaler | None:
    """A GradScaler for fp16 on CUDA (it rescales the loss so small fp16 gradients do not underflow), else None."""
    if amp == "fp16" and device.type == "cuda":
        return torch.amp.GradScaler("cuda")
    return None
