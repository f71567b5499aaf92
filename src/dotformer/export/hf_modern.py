"""A language model of the modern block (RMSNorm, gated feed-forward, rotary positions) as a Hugging Face causal
LM of the Llama family: ``LlamaForCausalLM``, or the relative a switch needs (:func:`modern_layout`):

====================================  ==========================================================================
switch                                layout
====================================  ==========================================================================
(none of the below)                   ``llama``: biases on all attention projections (``attention_bias``) and on
                                      the MLP (``mlp_bias``) when ``bias``; GQA (``num_key_value_heads``),
                                      ``head_dim``, RoPE scaling (linear, llama3, yarn)
``qkv_bias`` (``bias`` off)           ``qwen2``: biases on W_q, W_k, W_v only
``qk_norm``                           ``qwen3``: RMSNorm over each head's q and k
``sliding_window``                    ``mistral``: every layer sees the last W positions
``sandwich_norm`` / softcaps          ``gemma2`` (``gemma3`` with ``qk_norm``): (1 + w) RMSNorm, √D-scaled
                                      embeddings, a norm after each sublayer, ``query_pre_attn_scalar``,
                                      sliding and full layers (``layer_types``)
====================================  ==========================================================================

Names (under ``model.``; ``lm_head`` beside it, absent when tied): ``embed_tokens``, ``layers.{i}.input_layernorm``
(``res_self.norm``), ``self_attn.{q,k,v,o}_proj``, ``self_attn.{q,k}_norm``, ``mlp.gate_proj`` (``W_gate``),
``mlp.up_proj`` (``W_1``), ``mlp.down_proj`` (``W_2``), ``post_attention_layernorm`` (Llama: ``res_ff.norm``; Gemma:
``res_self.post_norm``), Gemma's ``pre_feedforward_layernorm`` (``res_ff.norm``) and ``post_feedforward_layernorm``
(``res_ff.post_norm``), ``norm`` (``decoder.final_norm``). A switch no layout holds is refused in one line naming it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dotformer.config import ModelConfig
from dotformer.errors import ConfigError
from dotformer.export.hf_tokenizer import HFVocabulary
from dotformer.export.hf_writer import StateDictWriter, generator_rows
from dotformer.export.params import EngineNames, LayerNames, embedding_params, join
from dotformer.layers import DecoderLayer
from dotformer.model import Transformer

HF_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "silu": "silu", "gelu_tanh": "gelu_pytorch_tanh"}
ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "mistral": "MistralForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "gemma3": "Gemma3ForCausalLM",
}
GEMMA = ("gemma2", "gemma3")
HF_LAYER_TYPES = {"full": "full_attention", "sliding": "sliding_attention"}


def _names(gemma: bool) -> EngineNames:
    """The Llama family's names (Gemma's ``pre_feedforward_layernorm`` where Llama has ``post_attention_layernorm``)."""
    return EngineNames(
        layers={
            "decoder": LayerNames(
                path="layers.{i}",
                attention={"self": "self_attn"},
                projections={"self": {"q_proj": ("q",), "k_proj": ("k",), "v_proj": ("v",), "o_proj": ("o",)}},
                ffn={"in": "mlp.up_proj", "out": "mlp.down_proj"},
                norms={
                    "self": "input_layernorm",
                    "ffn": "pre_feedforward_layernorm" if gemma else "post_attention_layernorm",
                },
                final_norm="norm",
            )
        },
        embeddings={"tgt": "embed_tokens"},
        generator="lm_head",
    )


def modern_layout(config: ModelConfig) -> str:
    """The Llama-family layout of a decoder-only model of the modern block (module docstring).

    Raises:
        ConfigError: a switch (or its absence) no layout holds, naming the field.
    """
    c = config
    needs = {"norm": ("rmsnorm", c.norm), "ffn_gated": (True, c.ffn_gated), "positional": ("rotary", c.positional)}
    for field, (wanted, value) in needs.items():
        if value != wanted:
            return _refuse(f"ModelConfig.{field}={value!r}: the Llama family's layouts need {field}={wanted!r}")
    if not c.norm_first:
        return _refuse("ModelConfig.norm_first=False: the Llama family is pre-norm")
    if c.embedding_norm:
        return _refuse("ModelConfig.embedding_norm=True: the Llama family has no norm on its embeddings")
    if c.rope_fraction != 1.0:
        return _refuse(f"ModelConfig.rope_fraction={c.rope_fraction}: the Llama family rotates every dimension")
    gemma = c.sandwich_norm or c.norm_unit_offset or c.attention_softcap is not None or c.logit_softcap is not None
    if gemma:
        for field in ("sandwich_norm", "norm_unit_offset", "scale_embeddings"):
            if not getattr(c, field):
                return _refuse(f"ModelConfig.{field}=False: Gemma's layout needs it (with sandwich norms, softcaps)")
        if c.bias or c.qkv_bias:
            return _refuse("ModelConfig.bias=True: Gemma's layout has no biases")
        return "gemma3" if c.qk_norm else "gemma2"
    if c.scale_embeddings:
        return _refuse("ModelConfig.scale_embeddings=True: only Gemma's layout scales embeddings by √D")
    for field in ("attention_scale", "rope_local_theta"):
        if getattr(c, field) is not None:
            return _refuse(f"ModelConfig.{field}={getattr(c, field)!r}: only Gemma's layout has it")
    qkv_bias = c.bias if c.qkv_bias is None else c.qkv_bias
    if c.sliding_window is not None:
        if c.layer_types is not None and set(c.layer_types) != {"sliding"}:
            return _refuse("ModelConfig.layer_types mixes full and sliding layers: only Gemma's layout holds that")
        if c.bias or qkv_bias or c.qk_norm:
            return _refuse("ModelConfig.sliding_window with biases or qk_norm: Mistral's layout has neither")
        return "mistral"
    if c.qk_norm:
        if c.bias or qkv_bias:
            return _refuse("ModelConfig.qk_norm=True with biases: Qwen3's layout has no biases")
        return "qwen3"
    if qkv_bias and not c.bias:
        return "qwen2"
    if qkv_bias != c.bias:
        return _refuse(f"ModelConfig.qkv_bias={c.qkv_bias} with bias={c.bias}: no Llama-family layout holds it")
    return "llama"


def _refuse(message: str) -> str:
    raise ConfigError(message)


def rope_parameters(config: ModelConfig, theta: float) -> dict[str, Any]:
    """HF's ``rope_parameters`` of ``config``'s RoPE with base ``theta`` (its scaling, when any)."""
    c = config
    if c.rope_scaling == "none":
        return {"rope_type": "default", "rope_theta": theta}
    parameters: dict[str, Any] = {"rope_type": c.rope_scaling, "rope_theta": theta, "factor": c.rope_factor}
    if c.rope_scaling == "llama3":
        parameters.update(
            low_freq_factor=c.rope_low_freq_factor,
            high_freq_factor=c.rope_high_freq_factor,
            original_max_position_embeddings=c.rope_original_max_len,
        )
    elif c.rope_scaling == "yarn":
        parameters["original_max_position_embeddings"] = c.rope_original_max_len
    return parameters


def gemma_options(c: ModelConfig, layout: str, head_dim: int, activation: str) -> dict[str, Any]:
    """The Gemma 2/3 config fields of a dotformer config: the score scale, soft caps, layer types and RoPE bases.

    Raises:
        ConfigError: an attention scale that is not 1/√n for an integer n (HF's query_pre_attn_scalar).
    """
    layer_types = c.layer_types or (("sliding",) * c.num_decoder_layers if c.sliding_window else None)
    scale = c.attention_scale if c.attention_scale is not None else head_dim**-0.5
    scalar = round(scale**-2)  # HF's query_pre_attn_scalar is an integer
    if abs(scalar * scale**2 - 1) > 1e-6:
        raise ConfigError(f"ModelConfig.attention_scale={scale}: Gemma's layout needs 1/√n for an integer n")
    options: dict[str, Any] = dict(
        hidden_activation=activation,
        query_pre_attn_scalar=scalar,  # scores · query_pre_attn_scalar^-1/2
        attn_logit_softcapping=c.attention_softcap,
        final_logit_softcapping=c.logit_softcap,
        sliding_window=c.sliding_window if c.sliding_window is not None else c.max_len,
        layer_types=[HF_LAYER_TYPES[t] for t in layer_types]
        if layer_types
        else ["full_attention"] * c.num_decoder_layers,
        attention_bias=False,
    )
    if layout == "gemma3":
        local = c.rope_local_theta if c.rope_local_theta is not None else c.rope_theta
        options["rope_parameters"] = {
            "full_attention": rope_parameters(c, c.rope_theta),
            "sliding_attention": {"rope_type": "default", "rope_theta": local},
        }
    return options


def modern_config(config: ModelConfig, vocabulary: HFVocabulary, layout: str, tie: bool) -> Any:
    """The HF config of ``layout`` for a dotformer config of the modern block."""
    from transformers import AutoConfig

    c = config
    kv_heads = c.num_kv_heads if c.num_kv_heads is not None else c.num_heads
    head_dim = c.head_dim if hasattr(c, "head_dim") else c.d_model // c.num_heads
    common: dict[str, Any] = dict(
        vocab_size=vocabulary.size,
        hidden_size=c.d_model,
        intermediate_size=c.d_ff,
        num_hidden_layers=c.num_decoder_layers,
        num_attention_heads=c.num_heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        max_position_embeddings=c.max_len,
        rms_norm_eps=c.layer_norm_eps,
        attention_dropout=c.attention_dropout,
        initializer_range=c.init_std if c.init_std is not None else 0.02,
        tie_word_embeddings=tie,
        bos_token_id=vocabulary.bos,
        eos_token_id=list(vocabulary.eos) if len(vocabulary.eos) > 1 else vocabulary.eos[0],
        pad_token_id=vocabulary.pad,
        rope_parameters=rope_parameters(c, c.rope_theta),
    )
    activation = HF_ACTIVATIONS[c.activation]
    if layout in GEMMA:
        common.update(gemma_options(c, layout, head_dim, activation))
    else:
        common["hidden_act"] = activation
        if layout == "llama":
            common.update(attention_bias=c.bias, mlp_bias=c.bias)
        elif layout == "qwen3":
            common["attention_bias"] = False
        elif layout == "mistral":
            common["sliding_window"] = c.sliding_window
    model_type = "gemma3_text" if layout == "gemma3" else layout
    hf = AutoConfig.for_model(model_type, **common)
    hf.architectures = [ARCHITECTURES[layout]]
    return hf


class ModernWriter(StateDictWriter):
    """:class:`~dotformer.export.hf_writer.StateDictWriter` over the Llama family's names, with the modern block's
    extra weights per layer: ``W_gate``, the qk norms, Gemma's norms after each sublayer."""

    def __init__(self, layout: str) -> None:
        super().__init__(_names(layout in GEMMA), "model", biases=None)
        self.layout = layout

    def copy_layer(self, ours: DecoderLayer, names: LayerNames, theirs: str) -> None:  # type: ignore[override]
        super().copy_layer(ours, names, theirs)
        self.copy_linear([ours.feed_forward.W_gate], join(theirs, "mlp.gate_proj"), ("gate",))
        attention = ours.self_attn
        for side in ("q", "k"):
            norm = getattr(attention, f"{side}_norm", None)
            if norm is not None:
                self.copy_norm(norm, join(theirs, f"self_attn.{side}_norm"))
        if self.layout in GEMMA:
            self.copy_norm(ours.res_self.post_norm, join(theirs, "post_attention_layernorm"))
            self.copy_norm(ours.res_ff.post_norm, join(theirs, "post_feedforward_layernorm"))

    def copy_norm(self, ours: nn.Module, theirs: str) -> None:
        """An RMSNorm's ``weight`` (Gemma's stores w of its (1 + w), as dotformer's unit offset does)."""
        self.put(f"{theirs}.weight", ours.weight)


@torch.no_grad()
def modern_tensors(model: Transformer, vocabulary: HFVocabulary, layout: str, tie: bool) -> dict[str, torch.Tensor]:
    """The state dict of ``layout`` for ``model`` (module docstring)."""

    assert model.decoder is not None
    writer = ModernWriter(layout)
    writer.put("embed_tokens.weight", vocabulary.rows(embedding_params(model)["tgt"].weight))
    writer.copy_stack("decoder", model.decoder, writer.names.layers["decoder"])
    rows = generator_rows(model, vocabulary)
    if not tie:
        writer.put("lm_head.weight", rows, root=True)
    return writer.tensors
