"""A dotformer encoder (masked language model, classifier, tagger) as a Hugging Face BERT directory that
``transformers.AutoModel.from_pretrained`` loads as a ``BertModel`` whose ``last_hidden_state`` is dotformer's
encoder output (its memory).

BERT is the paper's post-LN encoder with a LayerNorm on its embeddings; the names are those
:mod:`dotformer.imports.bert` reads (:data:`BERT_NAMES` here, the same table), so an export imports back:

=====================================  ====================================================
dotformer                              BERT (``BertModel``)
=====================================  ====================================================
``src_embed.token``                    ``embeddings.word_embeddings`` (× √D when ``scale_embeddings``)
learned table, or sinusoids            ``embeddings.position_embeddings`` (``max_len`` rows)
(none)                                 ``embeddings.token_type_embeddings``: one type, zeros
``src_embed.norm``                     ``embeddings.LayerNorm``
``W_q, W_k, W_v`` / ``W_o``            ``attention.self.query/key/value`` / ``attention.output.dense``
``W_1`` / ``W_2``                      ``intermediate.dense`` / ``output.dense``
``res_attn.norm`` / ``res_ff.norm``    ``attention.output.LayerNorm`` / ``output.LayerNorm``
=====================================  ====================================================

BERT always has biases (a bias-free model exports zeros). Its pooler (``dense`` + tanh over the first token) is not
a part of dotformer's encoder: it is written as the identity (``pooler_output`` = tanh of the first token's vector),
so that nothing is left random. dotformer's head (the tied generator of a masked language model, a classifier's or a
tagger's projection) is not in ``BertModel`` and is not written. Refused, in one line naming the field: pre-LN
(``norm_first=True``: BERT is post-LN), no embedding LayerNorm (``embedding_norm=False``: BERT always has one), and
the modern block's switches.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from dotformer.config import ModelConfig
from dotformer.errors import ConfigError
from dotformer.export.hf_tokenizer import HFVocabulary
from dotformer.export.hf_writer import StateDictWriter, save_hf_directory, unheld_option
from dotformer.export.params import EngineNames, LayerNames, embedding_params
from dotformer.model import Transformer

BERT_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "silu": "silu", "gelu_tanh": "gelu_new"}

BERT_NAMES = EngineNames(
    layers={
        "encoder": LayerNames(
            path="encoder.layer.{i}",
            attention={"self": "attention"},
            projections={
                "self": {"self.query": ("q",), "self.key": ("k",), "self.value": ("v",), "output.dense": ("o",)}
            },
            ffn={"in": "intermediate.dense", "out": "output.dense"},
            norms={"self": "attention.output.LayerNorm", "ffn": "output.LayerNorm"},
        )
    },
    embeddings={"src": "embeddings.word_embeddings"},
    positions={"src": "embeddings.position_embeddings"},
    embedding_norms={"src": "embeddings.LayerNorm"},
)  # BertModel's names (post-LN: no final norm)


def bert_problem(config: ModelConfig) -> str | None:
    """Why an encoder of ``config`` does not fit BERT's layout (one line, naming the field), or None."""
    if config.arch != "encoder-only":
        return f"BERT's layout holds an encoder-only model, got arch={config.arch!r}"
    if config.norm_first:
        elsewhere = " (export to onnx)" if not config.modern_switches() else ""  # ONNX writes the 2017 block only
        return f"ModelConfig.norm_first=True: BERT is post-LN, a pre-LN encoder has no BERT layout{elsewhere}"
    if not config.embedding_norm:
        return "ModelConfig.embedding_norm=False: BERT always has a LayerNorm on its embeddings"
    if config.positional not in ("learned", "sinusoidal"):
        return f"ModelConfig.positional={config.positional!r}: BERT has absolute positions only"
    if getattr(config, "norm", "layernorm") != "layernorm":
        return f"ModelConfig.norm={config.norm!r}: BERT has LayerNorm only"
    options = ("num_kv_heads", "head_size", "sliding_window", "attention_scale", "attention_softcap")
    return unheld_option(config, "BERT's", ("ffn_gated", "qk_norm", "sandwich_norm", *options))


def bert_config(config: ModelConfig, vocabulary: HFVocabulary) -> Any:
    """The ``BertConfig`` of a dotformer encoder-only config."""
    from transformers import BertConfig

    hf = BertConfig(
        vocab_size=vocabulary.size,
        hidden_size=config.d_model,
        num_hidden_layers=config.num_encoder_layers,
        num_attention_heads=config.num_heads,
        intermediate_size=config.d_ff,
        hidden_act=BERT_ACTIVATIONS[config.activation],
        hidden_dropout_prob=config.dropout,
        attention_probs_dropout_prob=config.attention_dropout,
        max_position_embeddings=config.max_len,
        type_vocab_size=1,
        layer_norm_eps=config.layer_norm_eps,
        initializer_range=config.init_std if config.init_std is not None else 0.02,
        pad_token_id=vocabulary.pad if vocabulary.pad is not None else 0,
    )
    hf.architectures = ["BertModel"]
    return hf


@torch.no_grad()
def bert_tensors(model: Transformer, vocabulary: HFVocabulary) -> dict[str, torch.Tensor]:
    """The ``BertModel`` state dict of ``model`` (module docstring)."""
    config, embed, encoder = model.config, model.src_embed, model.encoder
    assert embed is not None and embed.norm is not None and encoder is not None
    names, D = BERT_NAMES, config.d_model
    writer = StateDictWriter(names, "", biases=True)
    scale = math.sqrt(D) if config.scale_embeddings else 1.0
    writer.put(f"{names.embeddings['src']}.weight", vocabulary.rows(embedding_params(model)["src"].weight) * scale)
    writer.put(f"{names.positions['src']}.weight", embed.position.encoding(config.max_len))  # (max_len, D)
    writer.put("embeddings.token_type_embeddings.weight", torch.zeros(1, D))
    writer.copy_norm(embed.norm, names.embedding_norms["src"])
    writer.copy_stack("encoder", encoder, names.layers["encoder"])
    writer.put("pooler.dense.weight", torch.eye(D))
    writer.put("pooler.dense.bias", torch.zeros(D))
    return writer.tensors


def write_bert(model: Transformer, vocabulary: HFVocabulary, directory: Path) -> None:
    """Write the encoder of ``model`` as a ``BertModel`` directory into ``directory`` (existing, empty).

    Raises:
        ConfigError: the model does not fit BERT's layout (:func:`bert_problem`).
    """

    problem = bert_problem(model.config)
    if problem is not None:
        raise ConfigError(problem)
    tensors = bert_tensors(model, vocabulary)
    save_hf_directory(
        directory, bert_config(model.config, vocabulary), tensors, vocabulary, model.config.max_len, causal=False
    )
