"""What :func:`dotformer.compare.compare` measures: the layer kinds and their row names, and the frozen
:class:`CompareConfig` (one comment per field)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dotformer.config import DEFAULT_SEED
from dotformer.errors import ConfigError

LayerKind = Literal["lstm", "gru", "attention", "attention-fused"]
LAYER_KINDS: tuple[str, ...] = ("lstm", "gru", "attention", "attention-fused")
LAYER_NAMES = {
    "lstm": "Recurrent (LSTM)",
    "gru": "Recurrent (GRU)",
    "attention": "Self-attention",
    "attention-fused": "Self-attention (fused SDPA)",
}
FLOAT_BYTES = 4  # float32


@dataclass(frozen=True)
class CompareConfig:
    """What :func:`compare` measures; frozen, validated.

    Raises:
        ConfigError: a field is out of range.
    """

    d_model: int = 64  # D: the width of every layer (RNN input and hidden size, attention d_model)
    num_heads: int = 4  # H: heads of the attention layer (Dh = D / H)
    layers: tuple[str, ...] = LAYER_KINDS  # which layers to measure (see LAYER_NAMES)
    lengths: tuple[int, ...] = (16, 64, 256, 1024, 2048, 4096)  # sequence lengths n for time, memory and counts
    batch_size: int = 1  # B for time and memory
    repeats: int = 3  # timed forward + backward calls per (layer, n), after one warm-up call; the median is reported
    time_budget_s: float = 1.5  # ... but no more timed calls once they have taken this many seconds (at least one)
    max_call_seconds: float = 6.0  # a layer skips the longer lengths once one call took longer than this
    count_max_length: int = 1024  # count sequential steps and FLOPs up to this n (the counter runs Python per op)
    gradient_length: int = 64  # n of the gradient-vs-distance measurement (and of the training task)
    gradient_batch: int = 4  # sequences averaged in the gradient measurement
    gradient_probes: int = 8  # random projections estimating each Jacobian norm (0: exact, one pass per component)
    train_steps: int = 100  # Adam steps of the brief training (0: report the random initialisation only)
    train_batch: int = 32  # sequences per training step
    train_lr: float = 3e-3  # Adam learning rate of the brief training
    vocab_size: int = 16  # tokens of the recall-the-first-token task
    seed: int = DEFAULT_SEED  # seeds the layers, the inputs and the training
    device: str = "cpu"  # where to run ("cpu", "cuda")

    def __post_init__(self) -> None:
        if not isinstance(self.gradient_probes, int) or self.gradient_probes < 0:
            raise ConfigError(f"CompareConfig.gradient_probes must be >= 0, got {self.gradient_probes!r}")
        for name in ("d_model", "num_heads", "batch_size", "repeats", "count_max_length", "gradient_batch"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"CompareConfig.{name} must be a positive integer, got {value!r}")
        if self.d_model % self.num_heads:
            raise ConfigError(f"CompareConfig.d_model={self.d_model} must be divisible by num_heads={self.num_heads}")
        if not self.lengths or any(not isinstance(n, int) or n < 1 for n in self.lengths):
            raise ConfigError(f"CompareConfig.lengths must be positive integers, got {self.lengths!r}")
        unknown = [k for k in self.layers if k not in LAYER_KINDS]
        if unknown or not self.layers:
            raise ConfigError(f"unknown layer(s) {unknown or '(none given)'}; choose from {', '.join(LAYER_KINDS)}")
        if self.gradient_length < 2:
            raise ConfigError(f"CompareConfig.gradient_length must be >= 2, got {self.gradient_length}")
        if self.train_steps < 0 or self.train_batch < 1 or self.vocab_size < 2:
            raise ConfigError("CompareConfig needs train_steps >= 0, train_batch >= 1 and vocab_size >= 2")
        if not (self.max_call_seconds > 0 and self.time_budget_s > 0 and self.train_lr > 0):
            raise ConfigError("CompareConfig.max_call_seconds, time_budget_s and train_lr must be positive")
