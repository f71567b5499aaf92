"""What a CTranslate2 model can hold, checked without torch: its activations, its quantizations, the model shapes.

The converters (:mod:`dotformer.export.ct2`, :mod:`dotformer.export.ct2_lm`) raise these problems as errors; the
CTranslate2 engine (:mod:`dotformer.engines`) reads them first, from a checkpoint's config.json alone, to decide
whether a checkpoint can run there before it converts anything (and before it imports torch).
"""

from __future__ import annotations

from dotformer.config import ModelConfig
from dotformer.errors import ConfigError

CT2_ACTIVATIONS = {
    "relu": "RELU",
    "gelu": "GELU",
    "silu": "SWISH",
    "gelu_tanh": "GELUTanh",
}  # -> common_spec.Activation
CT2_ROTARY_SCALINGS = ("none", "linear", "llama3")  # ModelConfig.rope_scaling values CTranslate2's attention has
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")
CT2_ARCHITECTURES = ("encoder-decoder", "decoder-only")  # a Translator and a Generator; no encoder-only model
CT2_POSITIONS = 1024  # positional rows exported for a sinusoidal model: CTranslate2's default max_input_length


def check_quantization(quantization: str | None) -> None:
    """Raise :class:`ConfigError` unless ``quantization`` is None or one of :data:`QUANTIZATIONS`."""
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ConfigError(
            f"unknown CTranslate2 quantization {quantization!r}; choose one of {', '.join(QUANTIZATIONS)}"
        )


def model_problem(config: ModelConfig) -> str | None:
    """Why a model of ``config`` cannot become a CTranslate2 model (one line), or None when it can.

    The shape alone decides: an architecture with a CTranslate2 model (encoder-decoder: ``Translator``,
    decoder-only: ``Generator``), the generator as its head, an activation CTranslate2 has, no embedding LayerNorm.
    The vocabularies are checked when converting.
    """
    if config.arch not in CT2_ARCHITECTURES:
        return f"CTranslate2 runs encoder-decoder and decoder-only models, this one is {config.arch}"
    if config.head != "generator":
        return f"ModelConfig.head={config.head!r}: CTranslate2 runs a model whose head is the generator (its logits)"
    if config.embedding_norm:
        return "ModelConfig.embedding_norm=True: the CTranslate2 export does not carry embedding LayerNorms"
    modern = modern_problem(config)
    if modern is not None:
        return modern
    if config.activation not in CT2_ACTIVATIONS:
        return (
            f"ModelConfig.activation={config.activation!r}: CTranslate2's Transformer has "
            f"{', '.join(CT2_ACTIVATIONS)} only"
        )
    return None


def exported_positions(config: ModelConfig) -> int:
    """Rows of the positional tables written for an encoder-decoder: ``max_len`` for a learned table, at least
    :data:`CT2_POSITIONS` for sinusoids (which have no limit in dotformer); rotary positions write no table and read
    as many (the bound the CTranslate2 engine keeps to)."""
    return config.max_len if config.positional == "learned" else max(config.max_len, CT2_POSITIONS)


def modern_problem(config: ModelConfig) -> str | None:
    """The first switch of the modern block that the CTranslate2 export cannot carry (one line naming the field), or
    None.

    A decoder-only model becomes a ``Generator`` with every switch CTranslate2's decoder has: RMSNorm (Gemma's
    (1 + w) too), gated feed-forwards, rotary positions (partial, linear and llama3 scalings, a local base on sliding
    layers), shared key/value heads, ``head_size``, biases on W_q, W_k, W_v alone, QK-norm, sliding-window layers
    among full ones, sandwich norms, an attention scale and the logits' soft cap (:mod:`dotformer.export.ct2_lm`).
    An encoder-decoder becomes a ``Translator`` with the same switches in both stacks and in the cross-attention
    (:mod:`dotformer.export.ct2`), but for three its encoder-decoder lacks: QK-norm (its Translator does not give
    dotformer's values with it), sandwich norms (no norm after its cross-attention) and a sliding window (it cannot
    score a target longer than the window).
    """
    if not config.modern_switches():
        return None
    if config.attention_softcap is not None:
        return (
            f"ModelConfig.attention_softcap={config.attention_softcap!r}: CTranslate2 has no soft cap on attention "
            "scores"
        )
    if config.rope_scaling not in CT2_ROTARY_SCALINGS:
        return (
            f"ModelConfig.rope_scaling={config.rope_scaling!r}: CTranslate2 scales rotary frequencies "
            f"{' or '.join(CT2_ROTARY_SCALINGS[1:])} only"
        )
    if config.arch == "encoder-decoder":
        if config.qk_norm:
            return "ModelConfig.qk_norm=True: CTranslate2's Translator does not give dotformer's values with QK-norm"
        if config.sandwich_norm:
            return "ModelConfig.sandwich_norm=True: CTranslate2's Translator has no norm after the cross-attention"
        if config.sliding_window is not None:
            return (
                f"ModelConfig.sliding_window={config.sliding_window!r}: CTranslate2's Translator cannot score a "
                "target longer than the window"
            )
    return None
