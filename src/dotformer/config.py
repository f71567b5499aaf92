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
DEFAULT_SEED = 1  # every command's --seed default: train's split, weights and order, prepare's split, the draws
Architecture = Literal["encoder-decoder", "decoder-only", "encoder-only"]
Head = Literal["generator", "sequence", "token"]
Norm = Literal["layernorm", "rmsnorm"]
RopeScaling = Literal["none", "linear", "llama3", "yarn"]
LayerType = Literal["full", "sliding"]

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
    # FFN non-linearity: ReLU (paper), GELU (BERT), SiLU ("swish"), GELU's tanh approximation (GPT-2, Gemma)
    activation: Literal["relu", "gelu", "silu", "gelu_tanh"] = "relu"
    norm_first: bool = False  # False: post-LN, LayerNorm(x + Sublayer(x)) as in the paper; True: pre-LN
    layer_norm_eps: float = 1e-5  # epsilon inside every LayerNorm
    bias: bool = True  # biases in the attention projections and the FFN
    # §3.5: fixed sinusoids, a learned table, or rotary positions (RoPE: q and k rotated in every self-attention)
    positional: Literal["sinusoidal", "learned", "rotary"] = "sinusoidal"
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
    # The modern block's switches (GPT-2, Llama, Mistral, Qwen, Gemma); each defaults to the 2017 block.
    norm: Norm = "layernorm"  # every norm: LayerNorm, or RMSNorm x / √(mean(x²) + ε) · w (Zhang & Sennrich 2019)
    norm_unit_offset: bool = False  # RMSNorm's scale is (1 + w), w stored and initialised to 0 (Gemma)
    ffn_gated: bool = False  # FFN(x) = (f(x·W_gate) ⊙ x·W_1)·W_2 (Shazeer 2020): SwiGLU with silu, GeGLU with gelu
    rope_theta: float = 10000.0  # RoPE's base θ: pair i turns by pos · θ^(-2i/R)
    rope_fraction: float = 1.0  # the first round(fraction · Dh) dims of each head rotate (an even count), the rest pass
    rope_scaling: RopeScaling = "none"  # frequency scaling of longer contexts (HF's rope_scaling.rope_type)
    rope_factor: float = 1.0  # the scaling's factor s
    rope_low_freq_factor: float = 1.0  # llama3: wavelengths above original_max_len / low are divided by s
    rope_high_freq_factor: float = 4.0  # llama3: wavelengths below original_max_len / high are kept
    rope_original_max_len: int = 8192  # llama3 and yarn: the context length the model was trained on
    rope_local_theta: float | None = None  # the sliding layers' RoPE base, unscaled (Gemma 3); None: as the others
    num_kv_heads: int | None = None  # H_kv key/value heads shared by H / H_kv query heads each (GQA; MQA: 1); None: H
    head_size: int | None = None  # Dh when it is not D / H (W_q: (H·Dh, D), W_o: (D, H·Dh))
    qkv_bias: bool | None = None  # biases on W_q, W_k, W_v; None: as ``bias`` (which governs W_o and the FFN)
    qk_norm: bool = False  # RMSNorm over Dh of each head's q and k, before RoPE (Qwen3, Gemma 3)
    sliding_window: int | None = None  # W: on sliding layers query i attends keys j with i - W < j <= i
    layer_types: tuple[LayerType, ...] | None = None  # per decoder layer, "full" or "sliding"; None: all sliding if W
    sandwich_norm: bool = False  # pre-norm blocks also normalise each sublayer's output (Gemma 2/3)
    attention_scale: float | None = None  # scores = q·kᵀ · scale; None: 1/√Dh (the paper)
    attention_softcap: float | None = None  # scores = c · tanh(scores / c) before the mask (Gemma 2)
    logit_softcap: float | None = None  # logits = c · tanh(logits / c) at the generator (Gemma 2)

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
        if self.head_size is None and self.d_model % self.num_heads != 0:
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
        if self.activation not in ("relu", "gelu", "silu", "gelu_tanh"):
            raise ConfigError(
                f"ModelConfig.activation must be 'relu', 'gelu', 'silu' or 'gelu_tanh', got {self.activation!r}"
            )
        if self.positional not in ("sinusoidal", "learned", "rotary"):
            raise ConfigError(
                f"ModelConfig.positional must be 'sinusoidal', 'learned' or 'rotary', got {self.positional!r}"
            )
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
        self._check_modern()

    def _check_modern(self) -> None:
        """The modern block's switches: each in range, and consistent with the others.

        Raises:
            ConfigError: naming the field.
        """
        if self.norm not in ("layernorm", "rmsnorm"):
            raise ConfigError(f"ModelConfig.norm must be 'layernorm' or 'rmsnorm', got {self.norm!r}")
        if self.norm_unit_offset and self.norm != "rmsnorm":
            raise ConfigError("ModelConfig.norm_unit_offset is RMSNorm's (1 + w) scale: needs norm='rmsnorm'")
        for name in ("num_kv_heads", "head_size", "sliding_window"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
                raise ConfigError(f"ModelConfig.{name} must be a positive integer or None, got {value!r}")
        if self.num_kv_heads is not None and self.num_heads % self.num_kv_heads:
            raise ConfigError(
                f"ModelConfig.num_heads={self.num_heads} must be divisible by num_kv_heads={self.num_kv_heads} "
                f"(each key/value head serves num_heads / num_kv_heads query heads)"
            )
        positive = ("rope_theta", "rope_factor", "rope_low_freq_factor", "rope_high_freq_factor")
        optional = ("rope_local_theta", "attention_scale", "attention_softcap", "logit_softcap")
        for name in positive + optional:
            value = getattr(self, name)
            if (value is not None or name in positive) and not (
                isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
            ):
                raise ConfigError(
                    f"ModelConfig.{name} must be a positive number{' or None' * (name in optional)}, got {value!r}"
                )
        if not isinstance(self.rope_original_max_len, int) or self.rope_original_max_len <= 0:
            raise ConfigError(
                f"ModelConfig.rope_original_max_len must be a positive integer, got {self.rope_original_max_len!r}"
            )
        if self.rope_scaling not in ("none", "linear", "llama3", "yarn"):
            raise ConfigError(
                f"ModelConfig.rope_scaling must be 'none', 'linear', 'llama3' or 'yarn', got {self.rope_scaling!r}"
            )
        if self.rope_scaling == "llama3" and self.rope_high_freq_factor <= self.rope_low_freq_factor:
            raise ConfigError("ModelConfig.rope_high_freq_factor must exceed rope_low_freq_factor (llama3 scaling)")
        if not 0.0 < self.rope_fraction <= 1.0:
            raise ConfigError(f"ModelConfig.rope_fraction must be in (0, 1], got {self.rope_fraction!r}")
        if self.positional == "rotary" and (self.rotary_dims < 2 or self.rotary_dims % 2):
            raise ConfigError(
                f"ModelConfig.rope_fraction={self.rope_fraction} rotates {self.rotary_dims} of head_dim="
                f"{self.head_dim} dims: RoPE turns pairs, it needs an even count >= 2"
            )
        if self.qkv_bias not in (None, True, False):
            raise ConfigError(f"ModelConfig.qkv_bias must be true, false or None, got {self.qkv_bias!r}")
        if self.sandwich_norm and not self.norm_first:
            raise ConfigError("ModelConfig.sandwich_norm normalises pre-norm sublayers' outputs: needs norm_first")
        self._check_layer_types()

    def _check_layer_types(self) -> None:
        """``layer_types`` (stored as a tuple) has one "full" or "sliding" per decoder layer, and sliding layers have
        a window.

        Raises:
            ConfigError: naming the field.
        """
        if self.layer_types is not None:
            if isinstance(self.layer_types, str) or not isinstance(self.layer_types, (list, tuple)):
                raise ConfigError(
                    f"ModelConfig.layer_types must be a list of 'full'/'sliding', got {self.layer_types!r}"
                )
            object.__setattr__(self, "layer_types", tuple(self.layer_types))  # a JSON list, stored as a tuple
            wrong = [kind for kind in self.layer_types if kind not in ("full", "sliding")]
            if wrong:
                raise ConfigError(f"ModelConfig.layer_types holds {wrong[0]!r}: each must be 'full' or 'sliding'")
            if len(self.layer_types) != self.num_decoder_layers:
                raise ConfigError(
                    f"ModelConfig.layer_types has {len(self.layer_types)} entries for num_decoder_layers="
                    f"{self.num_decoder_layers}: one per decoder layer"
                )
            if "sliding" in self.layer_types and self.sliding_window is None:
                raise ConfigError("ModelConfig.layer_types has sliding layers: set sliding_window")
        if (self.sliding_window is not None or self.layer_types is not None) and self.arch == "encoder-only":
            raise ConfigError("ModelConfig.sliding_window is a window of causal self-attention: an encoder has none")

    def modern_switches(self) -> list[str]:
        """The modern block's fields set away from the 2017 block, as ``name=value`` (empty for the 2017 block);
        ``activation='gelu_tanh'`` and ``positional='rotary'`` included. Exporters that write the 2017 block refuse
        them by name."""
        defaults = {f.name: f.default for f in dataclasses.fields(ModelConfig)}
        start = list(defaults).index("norm")
        changed = [
            f"{name}={getattr(self, name)!r}"
            for name in list(defaults)[start:]
            if getattr(self, name) != defaults[name]
        ]
        extra = [
            f"{name}={getattr(self, name)!r}"
            for name, value in (("activation", "gelu_tanh"), ("positional", "rotary"))
            if getattr(self, name) == value
        ]
        return extra + changed

    def check_2017_block(self, what: str) -> None:
        """Raise :class:`ConfigError` naming the first modern switch (:meth:`modern_switches`) set in this config:
        ``what`` (an exporter) writes the 2017 block only."""
        switches = self.modern_switches()
        if switches:
            raise ConfigError(
                f"ModelConfig.{switches[0]}: {what} writes the 2017 block only (this switch is off there)"
            )

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
        """Dh = d_k = d_v: d_model / num_heads (§3.2.2), or ``head_size`` where set."""
        return self.head_size if self.head_size is not None else self.d_model // self.num_heads

    @property
    def kv_heads(self) -> int:
        """H_kv, the key/value heads: ``num_kv_heads``, or every head (num_heads)."""
        return self.num_kv_heads if self.num_kv_heads is not None else self.num_heads

    @property
    def rotary_dims(self) -> int:
        """R, the dims of each head that RoPE rotates: round(rope_fraction · Dh)."""
        return round(self.rope_fraction * self.head_dim)

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
