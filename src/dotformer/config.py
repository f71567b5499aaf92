"""Frozen configuration of the model, validated on construction, with the paper's presets (Table 3).

The training and decoding configurations live next to the code they configure
(:class:`dotformer.training.config.TrainConfig`, :class:`dotformer.decoding.DecodeConfig`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from dotformer.errors import ConfigError

MAX_SEED = 2**63 - 1  # the largest seed torch's random generator takes (a signed 64-bit integer): every config's bound
Architecture = Literal["encoder-decoder", "decoder-only", "encoder-only"]
Head = Literal["generator", "sequence", "token"]

# The paper's Table 3, rows "base" and "big" (dropout 0.1 for base; 0.3 for big on EN-DE), plus small sizes that
# train on a laptop CPU.
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(d_model=64, num_heads=4, d_ff=256, num_encoder_layers=2, num_decoder_layers=2, dropout=0.1),
    "small": dict(d_model=256, num_heads=4, d_ff=1024, num_encoder_layers=3, num_decoder_layers=3, dropout=0.1),
    "base": dict(d_model=512, num_heads=8, d_ff=2048, num_encoder_layers=6, num_decoder_layers=6, dropout=0.1),
    "big": dict(d_model=1024, num_heads=16, d_ff=4096, num_encoder_layers=6, num_decoder_layers=6, dropout=0.3),
}


@dataclass(frozen=True)
class ModelConfig:
    """Sizes and switches of a Transformer; frozen, validated in ``__post_init__``.

    Raises:
        ConfigError: a field is out of range or two fields disagree (the message names them).
    """

    src_vocab_size: int  # source vocabulary size V_src, including PAD/BOS/EOS/UNK (ignored for decoder-only)
    tgt_vocab_size: int  # target vocabulary size V (the generator's output size)
    d_model: int = 512  # width of every token vector (paper: 512 base, 1024 big)
    num_heads: int = 8  # h, attention heads per layer; d_k = d_v = d_model / h
    d_ff: int = 2048  # inner width of the position-wise feed-forward network
    num_encoder_layers: int = 6  # N for the encoder stack (0 for decoder-only)
    num_decoder_layers: int = 6  # N for the decoder stack (0 for encoder-only)
    dropout: float = 0.1  # P_drop on sublayer outputs and on embedding + positional sums (§5.4)
    attention_dropout: float = 0.0  # dropout on attention weights (the paper: none; tensor2tensor: 0.1 optional)
    activation_dropout: float = 0.0  # dropout inside the FFN, after the activation (the paper: none; costly on CPUs)
    activation: Literal["relu", "gelu", "silu"] = "relu"  # FFN non-linearity: ReLU (paper), GELU (BERT), SiLU ("swish")
    norm_first: bool = False  # False: post-LN, LayerNorm(x + Sublayer(x)) as in the paper; True: pre-LN
    layer_norm_eps: float = 1e-5  # epsilon inside every LayerNorm
    bias: bool = True  # biases in the attention projections and the FFN
    positional: Literal["sinusoidal", "learned"] = "sinusoidal"  # §3.5: fixed sinusoids, or a learned table
    max_len: int = 1024  # rows of the learned positional table (sinusoidal encodings have no limit)
    share_embeddings: bool = False  # one embedding table for source and target (needs a shared vocabulary)
    tie_output: bool = True  # generator weight = target embedding weight (§3.4 "share the same weight matrix")
    scale_embeddings: bool = True  # token embeddings · √d_model (§3.4); False: unscaled, as BERT (imported models)
    embedding_norm: bool = False  # a LayerNorm on embeddings + positions, before dropout (BERT; imported models)
    generator_bias: bool = False  # a bias on the generator's logits (Marian's final_logits_bias; imported models)
    init_std: float | None = None  # None: Xavier-uniform linears, N(0, 1/D) embeddings; σ: N(0, σ²) for all (HF's 0.02)
    pad_id: int = 0  # token id of PAD in both vocabularies; padding masks are built from it
    arch: Architecture = "encoder-decoder"  # encoder-decoder (translation), decoder-only (LM), encoder-only
    head: Head = "generator"  # what forward returns (dotformer.heads): token logits, or an encoder's classifier's
    num_labels: int = 0  # C, the labels of a sequence or token head (0 for the generator)
    pooling: Literal["cls", "mean"] = "cls"  # a sequence head's vector: the first token's (BERT's [CLS]) or the mean

    def __post_init__(self) -> None:
        positive = ("d_model", "num_heads", "d_ff", "tgt_vocab_size", "max_len")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"ModelConfig.{name} must be a positive integer, got {value!r}")
        for name in ("num_encoder_layers", "num_decoder_layers", "src_vocab_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"ModelConfig.{name} must be a non-negative integer, got {value!r}")
        if self.d_model % self.num_heads != 0:
            raise ConfigError(
                f"ModelConfig.d_model={self.d_model} must be divisible by num_heads={self.num_heads} "
                f"(d_k = d_model / num_heads)"
            )
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ConfigError(f"ModelConfig.{name} must be in [0, 1), got {value!r}")
        if self.activation == "swish":  # SiLU's other name (Marian's): stored as "silu"
            object.__setattr__(self, "activation", "silu")
        if self.activation not in ("relu", "gelu", "silu"):
            raise ConfigError(f"ModelConfig.activation must be 'relu', 'gelu' or 'silu', got {self.activation!r}")
        if self.positional not in ("sinusoidal", "learned"):
            raise ConfigError(f"ModelConfig.positional must be 'sinusoidal' or 'learned', got {self.positional!r}")
        if self.arch not in ("encoder-decoder", "decoder-only", "encoder-only"):
            raise ConfigError(
                f"ModelConfig.arch must be encoder-decoder, decoder-only or encoder-only, got {self.arch!r}"
            )
        if self.arch != "decoder-only" and self.src_vocab_size <= 0:
            raise ConfigError(f"ModelConfig.src_vocab_size must be positive for arch={self.arch!r}")
        if self.arch == "encoder-decoder" and (self.num_encoder_layers == 0 or self.num_decoder_layers == 0):
            raise ConfigError("ModelConfig: an encoder-decoder needs num_encoder_layers > 0 and num_decoder_layers > 0")
        if self.arch == "decoder-only" and self.num_decoder_layers == 0:
            raise ConfigError("ModelConfig: a decoder-only model needs num_decoder_layers > 0")
        if self.arch == "encoder-only" and self.num_encoder_layers == 0:
            raise ConfigError("ModelConfig: an encoder-only model needs num_encoder_layers > 0")
        if self.share_embeddings and self.arch == "encoder-decoder" and self.src_vocab_size != self.tgt_vocab_size:
            raise ConfigError(
                f"ModelConfig.share_embeddings needs one vocabulary: src_vocab_size={self.src_vocab_size} "
                f"!= tgt_vocab_size={self.tgt_vocab_size}"
            )
        if self.init_std is not None and not (
            isinstance(self.init_std, (int, float)) and not isinstance(self.init_std, bool) and self.init_std > 0
        ):
            raise ConfigError(f"ModelConfig.init_std must be a positive number or None, got {self.init_std!r}")
        if not 0 <= self.pad_id < self.tgt_vocab_size:
            raise ConfigError(f"ModelConfig.pad_id={self.pad_id} is outside the target vocabulary")
        self._check_head()

    def _check_head(self) -> None:
        """A classifier head (sequence, token) sits on an encoder-only model and has at least 2 labels; the
        generator has none.

        Raises:
            ConfigError: naming the field.
        """
        if self.head not in ("generator", "sequence", "token"):
            raise ConfigError(f"ModelConfig.head must be generator, sequence or token, got {self.head!r}")
        if self.pooling not in ("cls", "mean"):
            raise ConfigError(f"ModelConfig.pooling must be 'cls' or 'mean', got {self.pooling!r}")
        labels = self.num_labels
        if not isinstance(labels, int) or isinstance(labels, bool) or labels < 0:
            raise ConfigError(f"ModelConfig.num_labels must be a non-negative integer, got {labels!r}")
        if self.head == "generator" and labels:
            raise ConfigError(f"ModelConfig.num_labels={labels} needs a sequence or token head, not the generator")
        if self.head != "generator":
            if self.arch != "encoder-only":
                raise ConfigError(f"ModelConfig.head={self.head!r} is an encoder's classifier: needs encoder-only")
            if labels < 2:
                raise ConfigError(f"ModelConfig: a {self.head} head needs num_labels >= 2, got {labels}")

    @property
    def head_dim(self) -> int:
        """d_k = d_v = d_model / num_heads (§3.2.2)."""
        return self.d_model // self.num_heads

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> ModelConfig:
        """Build a config from a named preset (``tiny``, ``small``, ``base``, ``big``), with field overrides.

        Raises:
            ConfigError: unknown preset name or an invalid field.
        """
        if name not in PRESETS:
            raise ConfigError(f"unknown model preset {name!r}; choose one of {', '.join(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})

    def replace(self, **changes: Any) -> ModelConfig:
        """A copy with some fields changed, validated again."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-serialisable dict (saved with every checkpoint)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        """Inverse of :meth:`to_dict`.

        Raises:
            ConfigError: unknown field names or invalid values.
        """
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError(f"unknown ModelConfig field(s): {', '.join(unknown)}")
        try:
            return cls(**data)
        except TypeError as exc:  # a missing required field
            raise ConfigError(f"ModelConfig: {exc}") from None
