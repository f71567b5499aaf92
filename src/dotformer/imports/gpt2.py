"""GPT-2 (``model_type: gpt2``) as a dotformer decoder-only model: the 2017 decoder without cross-attention, pre-LN.

GPT-2 is the lesson's block with four named options: pre-norm with a final LayerNorm (``norm_first=True``),
learned positions (``positional="learned"``, ``max_len`` = ``n_positions``), unscaled token embeddings
(``scale_embeddings=False``) and GELU's tanh approximation (``gelu_new`` -> ``activation="gelu_tanh"``; ``gelu``
and ``relu`` map to themselves). Its weights are stored by ``Conv1D`` as (in, out), transposed on the way in, and
``c_attn`` holds W_q, W_k, W_v stacked on its output axis (split in that order). The output projection is tied to
the token table (``lm_head.weight`` is read when ``tie_word_embeddings`` is false).

Refused in one line: ``scale_attn_weights=false`` (scores not divided by √Dh), ``scale_attn_by_inverse_layer_idx``,
cross-attention, an activation other than gelu_new, gelu, relu.
"""

from __future__ import annotations

from typing import Any

from dotformer.config import ModelConfig
from dotformer.errors import ConfigError
from dotformer.export.hf_lm import GPT2_NAMES as GPT2_LAYOUT
from dotformer.imports.decoder import LMNames, lm_config

GPT2_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}
GPT2_PREFIXES = ("transformer.", "")  # GPT2LMHeadModel's, GPT2Model's
GPT2_BUFFERS = (".attn.bias", ".attn.masked_bias")  # the causal mask older versions saved
ADDS_BOS = False

GPT2_NAMES = LMNames(
    engine=GPT2_LAYOUT,  # the names export --to hf writes, read back
    conv1d=True,
)


def gpt2_config(hf: dict[str, Any], where: str) -> ModelConfig:
    """The dotformer config of a GPT-2 ``config.json``.

    Raises:
        ConfigError: an option dotformer cannot represent (module docstring), naming it and ``where``.
    """
    if not hf.get("scale_attn_weights", True):
        raise ConfigError(f"{where}: scale_attn_weights=false (unscaled attention scores) is not supported")
    for flag in ("scale_attn_by_inverse_layer_idx", "add_cross_attention"):
        if hf.get(flag):
            raise ConfigError(f"{where}: {flag}=true is not supported")
    activation = hf.get("activation_function", "gelu_new")
    if activation not in GPT2_ACTIVATIONS:
        raise ConfigError(f"{where}: activation_function={activation!r} is not one of {', '.join(GPT2_ACTIVATIONS)}")
    D = int(hf["n_embd"])
    return lm_config(
        vocab_size=int(hf["vocab_size"]),
        d_model=D,
        num_heads=int(hf["n_head"]),
        d_ff=int(hf.get("n_inner") or 4 * D),
        num_decoder_layers=int(hf["n_layer"]),
        activation=GPT2_ACTIVATIONS[activation],
        layer_norm_eps=float(hf.get("layer_norm_epsilon", 1e-5)),
        bias=True,
        positional="learned",
        max_len=int(hf.get("n_positions", 1024)),
        tie_output=bool(hf.get("tie_word_embeddings", True)),
        scale_embeddings=False,
    )
