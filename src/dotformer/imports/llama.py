"""The Llama family (Llama 2/3, SmolLM, Mistral, Qwen2/2.5, Qwen3) as dotformer decoder-only models.

One parameter map for all of them (HF's ``LlamaForCausalLM`` layout): each layer is a pre-norm block with RMSNorm
(``norm="rmsnorm"``), rotary positions (``positional="rotary"``, ``rope_theta`` and the ``rope_scaling`` of Llama 3
or yarn), grouped-query attention (``num_kv_heads``) and a SwiGLU feed-forward (``ffn_gated=True``, ``silu``):
``gate_proj`` -> W_gate, ``up_proj`` -> W_1, ``down_proj`` -> W_2; ``input_layernorm`` is the attention's norm,
``post_attention_layernorm`` the feed-forward's. The families differ in small ways, one line each:

========  ==================================================================================================
llama     ``attention_bias`` / ``mlp_bias`` (both or neither); adds BOS
mistral   ``sliding_window`` on every layer; adds BOS
qwen2     biases on W_q, W_k, W_v only (``qkv_bias=True``, ``bias=False``); sliding layers from ``layer_types``;
          no BOS
qwen3     QK-norm (``q_norm``, ``k_norm``: RMSNorm over Dh), ``head_dim`` apart from D / H; no BOS
========  ==================================================================================================

SmolLM is a Llama (``model_type: llama``). Refused in one line: a rope_type other than default, linear, llama3 and
yarn (defaults), an attention bias without the feed-forward's (or the reverse), an activation that is not SiLU or
GELU.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dotformer.config import ModelConfig
from dotformer.errors import ConfigError
from dotformer.export.params import EngineNames, LayerNames
from dotformer.imports.decoder import LMNames, layer_types, lm_config, rope_fields, rope_parameters, window_fields

LLAMA_TYPES = ("llama", "mistral", "qwen2", "qwen3")
ADDS_BOS = {"llama": True, "mistral": True, "qwen2": False, "qwen3": False}
GATED_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh"}
LLAMA_PREFIXES = ("model.", "")  # LlamaForCausalLM's layers are under model., its lm_head at the root
LLAMA_BUFFERS = ("rotary_emb.inv_freq",)  # older saves kept RoPE's frequencies; dotformer computes them


def llama_layer_names(norms: Mapping[str, str]) -> LayerNames:
    """The ``LlamaDecoderLayer`` names, with the family's sublayer norms."""
    return LayerNames(
        path="layers.{i}",
        attention={"self": "self_attn"},
        projections={"self": {"q_proj": ("q",), "k_proj": ("k",), "v_proj": ("v",), "o_proj": ("o",)}},
        ffn={"gate": "mlp.gate_proj", "in": "mlp.up_proj", "out": "mlp.down_proj"},
        norms=norms,
        final_norm="norm",
    )


def llama_names(
    qk_norm: bool, extra: Mapping[str, str] | None = None, norms: Mapping[str, str] | None = None
) -> LMNames:
    """The parameter map of the Llama layout (Gemma's differs in its norms: ``norms`` and ``extra``)."""
    qk = {"self_attn.q_norm": "self_attn.q_norm", "self_attn.k_norm": "self_attn.k_norm"} if qk_norm else {}
    return LMNames(
        engine=EngineNames(
            layers={
                "decoder": llama_layer_names(norms or {"self": "input_layernorm", "ffn": "post_attention_layernorm"})
            },
            embeddings={"tgt": "embed_tokens"},
            generator="lm_head",
        ),
        extra={**(extra or {}), **qk},
    )


def gated_activation(hf: Mapping[str, Any], where: str, key: str = "hidden_act") -> str:
    """dotformer's activation of a gated feed-forward's ``hidden_act``.

    Raises:
        ConfigError: not SiLU or a GELU.
    """
    activation = hf.get(key, "silu")
    if activation not in GATED_ACTIVATIONS:
        raise ConfigError(f"{where}: {key}={activation!r} is not one of {', '.join(GATED_ACTIVATIONS)}")
    return GATED_ACTIVATIONS[activation]


def family_biases(hf: dict[str, Any], where: str) -> dict[str, Any]:
    """The bias fields: Qwen2's on W_q, W_k, W_v only; else all or none (``attention_bias``, ``mlp_bias``).

    Raises:
        ConfigError: attention biases without MLP biases, or the reverse.
    """
    attention_bias, mlp_bias = bool(hf.get("attention_bias", False)), bool(hf.get("mlp_bias", False))
    if hf["model_type"] == "qwen2":
        return {"bias": False, "qkv_bias": True}
    if attention_bias != mlp_bias:
        raise ConfigError(
            f"{where}: attention_bias={attention_bias} with mlp_bias={mlp_bias} is not supported (both or neither)"
        )
    return {"bias": attention_bias}


def family_layer_types(hf: dict[str, Any], N: int, where: str) -> list[str]:
    """Each layer's attention, "sliding" or "full": Mistral's window on every layer; Qwen's from
    ``max_window_layers`` on when ``use_sliding_window``; Llama's full (``layer_types`` wins where given)."""
    family, window = hf["model_type"], hf.get("sliding_window")
    if family == "mistral":
        return layer_types(hf, N, where, ["sliding" if window else "full"] * N)
    if family in ("qwen2", "qwen3"):
        slides = hf.get("use_sliding_window", False) and window
        first = int(hf.get("max_window_layers", N))
        return layer_types(hf, N, where, ["sliding" if slides and i >= first else "full" for i in range(N)])
    return layer_types(hf, N, where)


def llama_config(hf: dict[str, Any], where: str) -> ModelConfig:
    """The dotformer config of a Llama, Mistral, Qwen2 or Qwen3 ``config.json``.

    Raises:
        ConfigError: an option dotformer cannot represent (module docstring), naming it and ``where``.
    """
    family = hf["model_type"]
    D, H, N = int(hf["hidden_size"]), int(hf["num_attention_heads"]), int(hf["num_hidden_layers"])
    window = hf.get("sliding_window")
    types = family_layer_types(hf, N, where)
    head_dim = hf.get("head_dim") or D // H
    return lm_config(
        vocab_size=int(hf["vocab_size"]),
        d_model=D,
        num_heads=H,
        num_kv_heads=int(hf.get("num_key_value_heads") or H),
        head_size=int(head_dim) if head_dim * H != D else None,
        d_ff=int(hf["intermediate_size"]),
        num_decoder_layers=N,
        norm="rmsnorm",
        layer_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        activation=gated_activation(hf, where),
        ffn_gated=True,
        positional="rotary",
        max_len=int(hf.get("max_position_embeddings", 2048)),
        qk_norm=family == "qwen3",
        tie_output=bool(hf.get("tie_word_embeddings", False)),
        scale_embeddings=False,
        rope_fraction=float(hf.get("partial_rotary_factor", 1.0)),
        **rope_fields(rope_parameters(hf), where),
        **window_fields(types, window, where),
        **family_biases(hf, where),
    )
