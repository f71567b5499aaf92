"""The modern block's switches as CTranslate2's spec options, shared by its two exports: the encoder-decoder
(:mod:`dotformer.export.ct2`, a ``Translator``) and the decoder-only model (:mod:`dotformer.export.ct2_lm`, a
``Generator``).

=====================================  ====================================================
dotformer                              CTranslate2 spec
=====================================  ====================================================
``norm="rmsnorm"`` (unit offset)       ``rms_norm`` (each norm's ``layer_norm_use_residual``: (1 + w))
``ffn_gated``: ``W_gate``, ``W_1``     ``ffn.linear_0`` (activated), ``ffn.linear_0_noact``
``positional="rotary"``                ``rotary_dim`` R, ``rotary_interleave=False`` (rotate half), ``rotary_base``,
                                       ``rotary_scaling_type`` linear / llama3 and their factors (self-attention)
``num_kv_heads``, ``head_size``        ``num_heads_kv``, ``head_dim`` (every attention, cross-attention too)
``qk_norm``: ``q_norm``, ``k_norm``    each attention's ``q_norm``, ``k_norm``
``attention_scale``                    each attention's ``queries_scale``
=====================================  ====================================================

The options a whole stack shares go to the spec's constructor (:func:`stack_options`); what one attention holds on
its own (llama3's factors, a sliding layer's RoPE base, the scale) is set on it afterwards
(:func:`set_attention_options`).
"""

from __future__ import annotations

from typing import Any

from dotformer.config import ModelConfig

LOCAL_UNSCALED = (  # a sliding layer's RoPE with rope_local_theta is unscaled: these attributes go
    "rotary_scaling_type",
    "rotary_scaling_factor",
    "rotary_low_freq_factor",
    "rotary_high_freq_factor",
    "original_max_position_embeddings",
)


def stack_options(config: ModelConfig) -> dict[str, Any]:
    """The keyword arguments of CTranslate2's ``TransformerEncoderSpec`` and ``TransformerDecoderSpec`` (and the
    decoder-only model's ``from_config``) for ``config``'s modern switches that every layer of a stack shares: none
    for the 2017 block, whose spec stays as it was. llama3's original context length and a sliding window are the
    caller's (the encoder's spec takes neither)."""
    from ctranslate2.specs import attention_spec

    c = config
    options: dict[str, Any] = {}
    if c.norm == "rmsnorm":
        options["rms_norm"] = True
    if c.ffn_gated:
        options["ffn_glu"] = True
    if c.sandwich_norm:
        options["pre_post_layer_norm"] = True
    if c.qk_norm:
        options["qk_norm"] = True
    if c.kv_heads != c.num_heads:
        options["num_heads_kv"] = c.kv_heads
    if c.head_size is not None:
        options["head_dim"] = c.head_dim
    if c.positional == "rotary":
        options.update(rotary_dim=c.rotary_dims, rotary_interleave=False, rotary_base=c.rope_theta)
        if c.rope_scaling != "none":
            kind = {"linear": "Linear", "llama3": "Llama3"}[c.rope_scaling]  # checked by ct2_rules.modern_problem
            options["rotary_scaling_type"] = getattr(attention_spec.RotaryScalingType, kind)
            options["rotary_scaling_factor"] = c.rope_factor
    return options


def set_attention_options(attention: Any, config: ModelConfig, rotary: bool, local: bool = False) -> None:
    """Set on one attention spec what it holds on its own: llama3's factors and original context length (on a
    rotary self-attention), a sliding layer's own unscaled RoPE base (``local``: ``rope_local_theta``), the
    attention scale (``queries_scale``).

    Args:
        attention: a ``MultiHeadAttentionSpec``.
        config: the model's configuration.
        rotary: the attention turns q and k (a self-attention of a rotary model).
        local: the attention is a sliding layer's, whose RoPE base is ``rope_local_theta`` (when set).
    """
    import numpy as np

    c = config
    if rotary and c.rope_scaling == "llama3":
        # the spec declares the factor for linear scaling only; CTranslate2 reads it for llama3 too (default 1)
        object.__setattr__(attention, "rotary_scaling_factor", np.float32(c.rope_factor))
        object.__setattr__(attention, "original_max_position_embeddings", np.int32(c.rope_original_max_len))
        attention.rotary_low_freq_factor = np.float32(c.rope_low_freq_factor)
        attention.rotary_high_freq_factor = np.float32(c.rope_high_freq_factor)
    if rotary and local and c.rope_local_theta is not None:
        attention.rotary_base = np.float32(c.rope_local_theta)
        for name in LOCAL_UNSCALED:
            if hasattr(attention, name):
                delattr(attention, name)
    if c.attention_scale is not None:
        attention.queries_scale = np.float32(c.attention_scale)
