"""Frozen configuration of a training run's recipe: :class:`TrainConfig`.

The model's own sizes live in :class:`dotformer.config.ModelConfig`, the data's in
:class:`dotformer.data.config.DataConfig`. All three map one-to-one onto the sections ``[train]``, ``[model]`` and
``[data]`` of a TOML config file (see ``configs/*.toml``); command-line flags override them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from dotformer.config import DEFAULT_SEED, MAX_SEED
from dotformer.data.config import choice, config_from_dict, is_number, non_negative_int, positive_int
from dotformer.errors import ConfigError
from dotformer.training.best_metrics import DECODING_METRICS, LABEL_METRICS

if TYPE_CHECKING:
    from dotformer.lora import LoRASpec

Schedule = Literal["noam", "inverse_sqrt", "constant", "cosine", "linear"]
Amp = Literal["none", "bf16", "fp16"]
BestMetric = Literal["loss", "bleu", "chrf", "wer", "per", "accuracy", "f1"]
BEST_METRICS: tuple[str, ...] = ("loss", *DECODING_METRICS, *LABEL_METRICS)  # a task offers some (best_metrics)


@dataclass(frozen=True)
class TrainConfig:
    """The training recipe (paper §5): batching, Adam, learning-rate schedule, regularisation, budgets, bookkeeping.

    Budgets count from the START of the run: a resumed run continues the step, epoch and time counts of the run it
    resumes. At least one budget must be set before :func:`dotformer.training.fit` trains.

    Raises:
        ConfigError: a field is out of range (the message names it).
    """

    # batching (§5.1: "each training batch contained ... approximately 25000 source tokens and 25000 target tokens")
    max_tokens: int = 4096  # padded tokens per batch per process (the sampler's cap on B × max(S, T))
    accumulation_steps: int = 1  # batches whose gradients are summed into one optimizer step (a larger batch)
    # budgets (None = no limit from this budget); all count from the start of the run, across resumes
    max_steps: int | None = None  # optimizer steps in total
    max_minutes: float | None = None  # training wall-clock minutes in total (evaluation and saving included)
    max_epochs: float | None = None  # passes over the training split in total (fractions allowed, e.g. 0.5)
    # optimizer (§5.3: Adam with β1 = 0.9, β2 = 0.98, ε = 1e-9)
    adam_beta1: float = 0.9  # β1, decay of the first-moment estimate
    adam_beta2: float = 0.98  # β2, decay of the second-moment estimate
    adam_eps: float = 1e-9  # ε in Adam's denominator
    weight_decay: float = 0.0  # decoupled weight decay (AdamW); the paper uses none
    # learning rate (§5.3, Eq. 3)
    lr_schedule: Schedule = "noam"  # "noam": the paper's formula; "inverse_sqrt": peak lr, linear warmup, 1/√step
    lr_scale: float = 1.0  # noam: lr = lr_scale · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)
    lr_peak: float = 5e-4  # inverse_sqrt, constant, cosine, linear: the learning rate reached at the end of warmup
    warmup_steps: int = 4000  # steps of linear warmup (paper: 4000)
    lr_cooldown: float = 0.0  # the final fraction of the budget over which the lr falls linearly to 0 (0: none)
    # regularisation (§5.4)
    label_smoothing: float = 0.1  # ε_ls; 0 gives plain cross-entropy
    clip_norm: float = 1.0  # clip the global gradient L2 norm to this value; 0 disables clipping (the paper's)
    # joint CTC/attention training (Kim, Hori, Watanabe 2017; dotformer.training.ctc): encoder-decoder pairs only
    ctc_weight: float = 0.0  # λ: loss = (1 - λ)·attention cross-entropy + λ·CTC on the encoder; 0: off (the paper's)
    ctc_upsample: int = 2  # k: the CTC head reads k frames per source token (a target may be longer than its source)
    # an exponential moving average of the weights (dotformer.training.ema): validated, kept in best/ and saved
    ema_decay: float = 0.0  # d: θ_ema ← d·θ_ema + (1 - d)·θ after every step; 0: off (the trained weights are saved)
    ema_start: int = 0  # the steps up to which the average is the weights themselves (fairseq's --ema-start-update)
    # speed
    amp: Amp = "none"  # mixed precision: "bf16" autocast (CPU and CUDA) or "fp16" autocast + GradScaler (CUDA)
    compile: bool = False  # wrap the model in torch.compile for the training steps
    packed: bool = True  # run every layer on the real tokens only, skipping the padding (dotformer.packing)
    device: str = "auto"  # "auto" (cuda:LOCAL_RANK if available, else cpu), "cpu", "cuda", "cuda:1", ...
    activation_checkpointing: bool = False  # recompute each layer's activations in the backward pass (less memory)
    # fine-tuning with LoRA adapters (dotformer.lora): the weights of --init-from stay frozen, the adapters train
    lora_rank: int = 0  # r, the rank of every adapter; 0: no adapters (every weight trains)
    lora_alpha: float = 16.0  # α: an adapter's change is scaled by α / r
    lora_targets: tuple[str, ...] = ("W_q", "W_v")  # the linears adapted, by name: W_q W_k W_v W_o W_1 W_2 generator
    lora_dropout: float = 0.0  # dropout on the adapters' input
    # bookkeeping
    seed: int = DEFAULT_SEED  # seeds model init, data order, dropout and the split
    eval_every: int = 500  # steps between validation passes (and "best" checkpoint updates); 0: only at the end
    save_every: int = 1000  # steps between checkpoints (one is also written at the end); 0: only at the end
    keep_last: int = 3  # step checkpoints kept in checkpoints/ (older ones deleted); best/ and last/ are extra
    log_every: int = 10  # steps between progress lines on standard error (off a terminal)
    metrics_every: int = 1  # steps between train lines in metrics.jsonl and TensorBoard points (1: every step)
    progress: bool = True  # show a tqdm progress bar on standard error (rank 0 only)
    tensorboard: bool = False  # also write TensorBoard event files to RUN/tensorboard (needs `tensorboard`)
    # model selection and early stopping (fairseq's --best-checkpoint-metric and --patience)
    best_metric: BestMetric = "loss"  # picks best/: valid "loss"; the "bleu", "chrf", "wer", "per" of greedy outputs
    # (pairs); the "accuracy" or macro-"f1" of the labels given (a classifier, a tagger): the task says which it offers
    valid_decode_limit: int | None = None  # decode a seeded sample of N valid sources for best_metric (None: all)
    patience: int = 0  # stop when the best_metric has not improved for this many validation passes (0: never)

    def __post_init__(self) -> None:
        positive_int(self, "max_tokens", "accumulation_steps")
        positive_int(self, "max_steps", optional=True)
        non_negative_int(self, "warmup_steps", "eval_every", "save_every", "log_every", "keep_last", "seed")
        if self.seed > MAX_SEED:
            raise ConfigError(f"TrainConfig.seed must be an integer in [0, 2**63 - 1], got {self.seed!r}")
        non_negative_int(self, "metrics_every")
        non_negative_int(self, "patience")
        positive_int(self, "valid_decode_limit", optional=True)
        choice(self, "best_metric", BEST_METRICS)
        for name in ("max_minutes", "max_epochs"):
            value = getattr(self, name)
            if value is not None and not (is_number(value) and value > 0):
                raise ConfigError(f"TrainConfig.{name} must be a positive number, got {value!r}")
        for name in ("adam_beta1", "adam_beta2"):
            if not (is_number(getattr(self, name)) and 0.0 <= getattr(self, name) < 1.0):
                raise ConfigError(f"TrainConfig.{name} must be in [0, 1), got {getattr(self, name)!r}")
        for name in ("adam_eps", "lr_scale", "lr_peak"):
            if not (is_number(getattr(self, name)) and getattr(self, name) > 0):
                raise ConfigError(f"TrainConfig.{name} must be positive, got {getattr(self, name)!r}")
        for name in ("weight_decay", "clip_norm"):
            if not (is_number(getattr(self, name)) and getattr(self, name) >= 0):
                raise ConfigError(f"TrainConfig.{name} must be >= 0, got {getattr(self, name)!r}")
        if not (is_number(self.lr_cooldown) and 0.0 <= self.lr_cooldown <= 1.0):
            raise ConfigError(f"TrainConfig.lr_cooldown must be in [0, 1], got {self.lr_cooldown!r}")
        if not (is_number(self.label_smoothing) and 0.0 <= self.label_smoothing < 1.0):
            raise ConfigError(f"TrainConfig.label_smoothing must be in [0, 1), got {self.label_smoothing!r}")
        if not (is_number(self.ctc_weight) and 0.0 <= self.ctc_weight < 1.0):
            raise ConfigError(f"TrainConfig.ctc_weight must be in [0, 1), got {self.ctc_weight!r}")
        positive_int(self, "ctc_upsample")
        if not (is_number(self.ema_decay) and 0.0 <= self.ema_decay < 1.0):
            raise ConfigError(f"TrainConfig.ema_decay must be in [0, 1), got {self.ema_decay!r}")
        non_negative_int(self, "ema_start")
        choice(self, "lr_schedule", ("noam", "inverse_sqrt", "constant", "cosine", "linear"))
        choice(self, "amp", ("none", "bf16", "fp16"))
        if self.lr_schedule == "noam" and self.warmup_steps == 0:
            raise ConfigError("TrainConfig.warmup_steps must be positive for the noam schedule (it divides by it)")
        if not isinstance(self.device, str) or not self.device:
            raise ConfigError(f"TrainConfig.device must be a device name such as 'cpu' or 'cuda', got {self.device!r}")
        non_negative_int(self, "lora_rank")
        if not (is_number(self.lora_alpha) and self.lora_alpha > 0):
            raise ConfigError(f"TrainConfig.lora_alpha must be positive, got {self.lora_alpha!r}")
        if not (is_number(self.lora_dropout) and 0.0 <= self.lora_dropout < 1.0):
            raise ConfigError(f"TrainConfig.lora_dropout must be in [0, 1), got {self.lora_dropout!r}")
        targets = self.lora_targets
        if isinstance(targets, str) or not isinstance(targets, (list, tuple)) or not targets:
            raise ConfigError(f"TrainConfig.lora_targets must be a non-empty list of layer names, got {targets!r}")
        if not all(isinstance(name, str) and name.isidentifier() for name in targets):
            raise ConfigError(f"TrainConfig.lora_targets must name layers such as W_q, got {list(targets)!r}")
        object.__setattr__(self, "lora_targets", tuple(targets))  # a TOML or JSON list
        for name in ("compile", "packed", "progress", "tensorboard", "activation_checkpointing"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"TrainConfig.{name} must be true or false, got {getattr(self, name)!r}")

    @property
    def has_budget(self) -> bool:
        """True when at least one of max_steps, max_minutes, max_epochs is set."""
        return any(b is not None for b in (self.max_steps, self.max_minutes, self.max_epochs))

    @property
    def lora(self) -> LoRASpec | None:
        """The :class:`~dotformer.lora.LoRASpec` of the lora_* fields (None when lora_rank is 0)."""
        if not self.lora_rank:
            return None
        from dotformer.lora import LoRASpec

        return LoRASpec(self.lora_rank, self.lora_alpha, self.lora_targets, self.lora_dropout)

    def replace(self, **changes: Any) -> TrainConfig:
        """A copy with some fields changed, validated again."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-serialisable dict (saved in run.json and in every checkpoint)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "TrainConfig") -> TrainConfig:
        """Inverse of :meth:`to_dict`. Raises ConfigError naming an unknown key and ``source`` (e.g. a file)."""
        return config_from_dict(cls, data, source)
