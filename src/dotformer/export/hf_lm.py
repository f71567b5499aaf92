"""A dotformer language model (decoder-only) as a Hugging Face causal LM directory that
``transformers.AutoModelForCausalLM.from_pretrained`` loads with the same logits.

The 2017 block goes out in **GPT-2's layout** (``GPT2LMHeadModel``) where it fits, which it does for a pre-LN model:

=====================================  ====================================================
dotformer                              GPT-2 (``transformer.``)
=====================================  ====================================================
``tgt_embed.token``                    ``wte`` (× √D when ``scale_embeddings``, see below)
learned table, or sinusoids            ``wpe``: ``max_len`` rows (``n_positions``); sinusoids written as a table
``res_self.norm`` / ``res_ff.norm``    ``h.{i}.ln_1`` / ``h.{i}.ln_2``
``W_q, W_k, W_v`` / ``W_o``            ``h.{i}.attn.c_attn`` (stacked, ``Conv1D``: (in, out)) / ``attn.c_proj``
``W_1`` / ``W_2``                      ``h.{i}.mlp.c_fc`` / ``mlp.c_proj``
``decoder.final_norm``                 ``ln_f``
``generator``                          ``lm_head`` (tied to ``wte`` unless ``tie_output`` is false)
``activation``                         ``activation_function``: relu, ``gelu`` (exact, torch's erf form), silu,
                                       ``gelu_new`` (the tanh approximation, dotformer's ``gelu_tanh``)
=====================================  ====================================================

GPT-2 always has biases: a bias-free model exports zeros. Its embeddings are not scaled: a model that scales by √D
writes ``wte`` = E·√D; when the output is tied to E, the final LayerNorm's weight and bias are divided by √D, so
that ``ln_f(h)·wteᵀ = LayerNorm(h)·Eᵀ`` exactly (``ln_f`` feeds the logits only). Refused, in one line naming the
field: post-LN (GPT-2 is pre-LN), an embedding LayerNorm, a generator bias that is not zero (``lm_head`` has none;
an imported model's bias that only keeps its four copied rows from being produced goes with those rows).

The modern block (RMSNorm, gated feed-forward, rotary positions) goes out in the **Llama layout** and its relatives
(:func:`modern_layout`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from dotformer.config import ModelConfig
from dotformer.errors import ConfigError
from dotformer.export.hf_modern import modern_config, modern_layout, modern_tensors
from dotformer.export.hf_tokenizer import HFVocabulary
from dotformer.export.hf_writer import StateDictWriter, generator_rows, save_hf_directory, unheld_option
from dotformer.export.params import EngineNames, LayerNames, embedding_params
from dotformer.model import Transformer

GPT2_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "silu": "silu", "gelu_tanh": "gelu_new"}

GPT2_NAMES = EngineNames(
    layers={
        "decoder": LayerNames(
            path="h.{i}",
            attention={"self": "attn"},
            projections={"self": {"c_attn": ("q", "k", "v"), "c_proj": ("o",)}},
            ffn={"in": "mlp.c_fc", "out": "mlp.c_proj"},
            norms={"self": "ln_1", "ffn": "ln_2"},
            final_norm="ln_f",
        )
    },
    embeddings={"tgt": "wte"},
    positions={"tgt": "wpe"},
    generator="lm_head",
)  # GPT2LMHeadModel's names under "transformer." (lm_head beside it)


def is_modern(config: ModelConfig) -> bool:
    """Whether ``config`` uses a switch of the modern block that GPT-2's layout cannot hold (RMSNorm, a gated
    feed-forward, rotary positions): such a model goes out in the Llama layout."""
    return (
        getattr(config, "norm", "layernorm") != "layernorm"
        or getattr(config, "ffn_gated", False)
        or config.positional == "rotary"
    )


def gpt2_problem(config: ModelConfig) -> str | None:
    """Why a decoder-only model of ``config`` does not fit GPT-2's layout (one line, naming the field), or None."""
    if not config.norm_first:
        return "ModelConfig.norm_first=False: a post-LN language model fits no HF causal-LM layout (GPT-2 is pre-LN)"
    if config.embedding_norm:
        return "ModelConfig.embedding_norm=True: GPT-2 has no LayerNorm on its embeddings"
    options = ("num_kv_heads", "head_size", "sliding_window", "attention_scale", "attention_softcap", "logit_softcap")
    return unheld_option(config, "GPT-2's", (*options, "qk_norm", "sandwich_norm"))


def gpt2_config(config: ModelConfig, vocabulary: HFVocabulary, tie: bool) -> Any:
    """The ``GPT2Config`` of a dotformer decoder-only config (sizes, activation, epsilon, dropouts, special ids;
    ``tie``: ``lm_head`` is ``wte``)."""
    from transformers import GPT2Config

    hf = GPT2Config(
        vocab_size=vocabulary.size,
        n_positions=config.max_len,
        n_embd=config.d_model,
        n_layer=config.num_decoder_layers,
        n_head=config.num_heads,
        n_inner=config.d_ff,
        activation_function=GPT2_ACTIVATIONS[config.activation],
        resid_pdrop=config.dropout,
        embd_pdrop=config.dropout,
        attn_pdrop=config.attention_dropout,
        layer_norm_epsilon=config.layer_norm_eps,
        initializer_range=config.init_std if config.init_std is not None else 0.02,
        bos_token_id=vocabulary.bos,
        eos_token_id=vocabulary.eos[0],
        pad_token_id=vocabulary.pad,
        tie_word_embeddings=tie,
    )
    hf.architectures = ["GPT2LMHeadModel"]
    return hf


def tied(model: Transformer) -> bool:
    """Whether the generator is the token table itself (``tie_output``)."""
    assert model.tgt_embed is not None
    return model.generator.weight is model.tgt_embed.token.lookup.weight


@torch.no_grad()
def gpt2_tensors(model: Transformer, vocabulary: HFVocabulary) -> dict[str, torch.Tensor]:
    """The ``GPT2LMHeadModel`` state dict of ``model`` (module docstring)."""
    config = model.config
    assert model.tgt_embed is not None and model.decoder is not None
    writer = StateDictWriter(GPT2_NAMES, "transformer", conv1d=True, biases=True)
    scale = math.sqrt(config.d_model) if config.scale_embeddings else 1.0
    table = vocabulary.rows(embedding_params(model)["tgt"].weight.detach())  # (V, D)
    writer.put("wte.weight", table * scale)
    writer.put("wpe.weight", model.tgt_embed.position.encoding(config.max_len))  # (max_len, D)
    writer.copy_stack("decoder", model.decoder, GPT2_NAMES.layers["decoder"])
    rows = generator_rows(model, vocabulary)
    if tied(model):
        final = model.decoder.final_norm
        assert final is not None  # pre-LN
        writer.put("ln_f.weight", final.weight / scale)  # ln_f(h)·(E·√D)ᵀ = LayerNorm(h)·Eᵀ
        writer.put("ln_f.bias", final.bias / scale)
    else:
        writer.put("lm_head.weight", rows, root=True)
    return writer.tensors


def lm_layout(config: ModelConfig) -> str:
    """The HF architecture a decoder-only model of ``config`` goes out as (``"gpt2"`` or a modern family).

    Raises:
        ConfigError: the model fits no HF causal-LM layout (one line naming the field).
    """
    if config.arch != "decoder-only":
        raise ConfigError(f"an HF causal LM holds a decoder-only model, got arch={config.arch!r}")
    if is_modern(config):
        return modern_layout(config)
    problem = gpt2_problem(config)
    if problem is not None:
        raise ConfigError(problem)
    return "gpt2"


def write_causal_lm(model: Transformer, vocabulary: HFVocabulary, directory: Path) -> None:
    """Write ``model`` (decoder-only) as an HF causal-LM directory into ``directory`` (existing, empty).

    Raises:
        ConfigError: the model fits no HF layout (:func:`lm_layout`), or its generator has a bias.
    """

    layout = lm_layout(model.config)
    if layout == "gpt2":
        hf_config, tensors = gpt2_config(model.config, vocabulary, tied(model)), gpt2_tensors(model, vocabulary)
    else:
        tie = tied(model)
        hf_config = modern_config(model.config, vocabulary, layout, tie)
        tensors = modern_tensors(model, vocabulary, layout, tie)
    save_hf_directory(directory, hf_config, tensors, vocabulary, model.config.max_len, causal=True)
