"""Frozen configuration of a training run: :class:`TrainConfig` (the recipe) and :class:`DataConfig` (the data).

The model's own sizes live in :class:`dotformer.config.ModelConfig`. All three map one-to-one onto the sections
``[train]``, ``[data]`` and ``[model]`` of a TOML config file (see ``configs/*.toml``); command-line flags override
them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from dotformer.errors import ConfigError

Schedule = Literal["noam", "inverse_sqrt", "constant"]
Amp = Literal["none", "bf16", "fp16"]
TokenizerKind = Literal["char", "symbol", "bpe"]

_T = TypeVar("_T")


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
    lr_peak: float = 5e-4  # inverse_sqrt and constant: the learning rate reached at the end of warmup
    warmup_steps: int = 4000  # steps of linear warmup (paper: 4000)
    # regularisation (§5.4)
    label_smoothing: float = 0.1  # ε_ls; 0 gives plain cross-entropy
    clip_norm: float = 1.0  # clip the global gradient L2 norm to this value; 0 disables clipping (the paper's)
    # speed
    amp: Amp = "none"  # mixed precision: "bf16" autocast (CPU and CUDA) or "fp16" autocast + GradScaler (CUDA)
    compile: bool = False  # wrap the model in torch.compile for the training steps
    packed: bool = True  # run every layer on the real tokens only, skipping the padding (dotformer.packing)
    device: str = "auto"  # "auto" (cuda:LOCAL_RANK if available, else cpu), "cpu", "cuda", "cuda:1", ...
    # bookkeeping
    seed: int = 1  # seeds model init, data order, dropout and the split
    eval_every: int = 500  # steps between validation passes (and "best" checkpoint updates); 0: only at the end
    save_every: int = 1000  # steps between checkpoints (one is also written at the end); 0: only at the end
    keep_last: int = 3  # step checkpoints kept in checkpoints/ (older ones deleted); best/ and last/ are extra
    log_every: int = 10  # steps between train lines in metrics.jsonl (and TensorBoard points)
    progress: bool = True  # show a tqdm progress bar on standard error (rank 0 only)
    tensorboard: bool = False  # also write TensorBoard event files to RUN/tensorboard (needs `tensorboard`)

    def __post_init__(self) -> None:
        _positive_int(self, "max_tokens", "accumulation_steps")
        _positive_int(self, "max_steps", optional=True)
        _non_negative_int(self, "warmup_steps", "eval_every", "save_every", "log_every", "keep_last", "seed")
        for name in ("max_minutes", "max_epochs"):
            value = getattr(self, name)
            if value is not None and not (_is_number(value) and value > 0):
                raise ConfigError(f"TrainConfig.{name} must be a positive number, got {value!r}")
        for name in ("adam_beta1", "adam_beta2"):
            if not (_is_number(getattr(self, name)) and 0.0 <= getattr(self, name) < 1.0):
                raise ConfigError(f"TrainConfig.{name} must be in [0, 1), got {getattr(self, name)!r}")
        for name in ("adam_eps", "lr_scale", "lr_peak"):
            if not (_is_number(getattr(self, name)) and getattr(self, name) > 0):
                raise ConfigError(f"TrainConfig.{name} must be positive, got {getattr(self, name)!r}")
        for name in ("weight_decay", "clip_norm"):
            if not (_is_number(getattr(self, name)) and getattr(self, name) >= 0):
                raise ConfigError(f"TrainConfig.{name} must be >= 0, got {getattr(self, name)!r}")
        if not (_is_number(self.label_smoothing) and 0.0 <= self.label_smoothing < 1.0):
            raise ConfigError(f"TrainConfig.label_smoothing must be in [0, 1), got {self.label_smoothing!r}")
        _choice(self, "lr_schedule", ("noam", "inverse_sqrt", "constant"))
        _choice(self, "amp", ("none", "bf16", "fp16"))
        if self.lr_schedule == "noam" and self.warmup_steps == 0:
            raise ConfigError("TrainConfig.warmup_steps must be positive for the noam schedule (it divides by it)")
        if not isinstance(self.device, str) or not self.device:
            raise ConfigError(f"TrainConfig.device must be a device name such as 'cpu' or 'cuda', got {self.device!r}")
        for name in ("compile", "packed", "progress", "tensorboard"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"TrainConfig.{name} must be true or false, got {getattr(self, name)!r}")

    @property
    def has_budget(self) -> bool:
        """True when at least one of max_steps, max_minutes, max_epochs is set."""
        return any(b is not None for b in (self.max_steps, self.max_minutes, self.max_epochs))

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


@dataclass(frozen=True)
class DataConfig:
    """Which pairs to train on and how to tokenize them.

    Raises:
        ConfigError: a field is out of range (the message names it).
    """

    dataset: str = "copy"  # "cmudict", "bible", "copy", "reverse", a TSV/CSV path, or "train.src,train.tgt"
    src_tokenizer: TokenizerKind | None = None  # None: the task's default (char for cmudict, bpe for bible, ...)
    tgt_tokenizer: TokenizerKind | None = None  # None: the task's default (symbol for cmudict, bpe for bible, ...)
    vocab_size: int | None = None  # BPE vocabulary size (None: 8000); ignored by char/symbol tokenizers
    shared_vocab: bool | None = None  # one tokenizer for both sides (None: yes for bpe on both sides)
    limit: int | None = None  # keep only the first N pairs of the corpus (quick experiments); None keeps all
    strip_stress: bool = False  # cmudict: drop the stress digits of vowels (AH0 -> AH)
    source_module: str | None = None  # bible: the SWORD module of the source side (None: the reader's default)
    target_module: str | None = None  # bible: the SWORD module of the target side (None: the reader's default)
    test_books: tuple[str, ...] | None = None  # bible: books held out as the test split (None: a random fraction)
    valid_fraction: float = 0.05  # share of pairs (or groups) in the validation split
    test_fraction: float = 0.05  # share of pairs (or groups) in the test split

    def __post_init__(self) -> None:
        if not isinstance(self.dataset, str) or not self.dataset:
            raise ConfigError(f"DataConfig.dataset must be a non-empty string, got {self.dataset!r}")
        for name in ("src_tokenizer", "tgt_tokenizer"):
            value = getattr(self, name)
            if value is not None and value not in ("char", "symbol", "bpe"):
                raise ConfigError(f"DataConfig.{name} must be 'char', 'symbol' or 'bpe', got {value!r}")
        _positive_int(self, "vocab_size", "limit", optional=True)
        for name in ("valid_fraction", "test_fraction"):
            value = getattr(self, name)
            if not (_is_number(value) and 0.0 <= value < 1.0):
                raise ConfigError(f"DataConfig.{name} must be in [0, 1), got {value!r}")
        if self.valid_fraction + self.test_fraction >= 1.0:
            raise ConfigError(
                f"DataConfig: valid_fraction + test_fraction = {self.valid_fraction + self.test_fraction} leaves no "
                f"training data"
            )
        if isinstance(self.test_books, list):  # from TOML or JSON
            object.__setattr__(self, "test_books", tuple(self.test_books))

    def replace(self, **changes: Any) -> DataConfig:
        """A copy with some fields changed, validated again."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-serialisable dict (saved in run.json and in every checkpoint)."""
        data = dataclasses.asdict(self)
        if data["test_books"] is not None:
            data["test_books"] = list(data["test_books"])
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "DataConfig") -> DataConfig:
        """Inverse of :meth:`to_dict`. Raises ConfigError naming an unknown key and ``source`` (e.g. a file)."""
        return config_from_dict(cls, data, source)


def config_from_dict(cls: type[_T], data: dict[str, Any], source: str) -> _T:
    """Build the frozen dataclass ``cls`` from ``data``.

    Raises:
        ConfigError: an unknown key (named with ``source``, e.g. "run.toml [train]") or an invalid value.
    """
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(names))})")
    try:
        return cls(**data)
    except TypeError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _positive_int(config: Any, *names: str, optional: bool = False) -> None:
    for name in names:
        value = getattr(config, name)
        if optional and value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"{type(config).__name__}.{name} must be a positive integer, got {value!r}")


def _non_negative_int(config: Any, *names: str) -> None:
    for name in names:
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"{type(config).__name__}.{name} must be a non-negative integer, got {value!r}")


def _choice(config: Any, name: str, choices: tuple[str, ...]) -> None:
    value = getattr(config, name)
    if value not in choices:
        raise ConfigError(f"{type(config).__name__}.{name} must be one of {', '.join(choices)}, got {value!r}")
