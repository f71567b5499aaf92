"""Copy a dotformer encoder-decoder into a Hugging Face ``MarianMTModel`` with the same function.

Marian (HF's port of Marian NMT) is the paper's post-LN Transformer: embeddings scaled by √D plus sinusoidal positions,
``LayerNorm(x + Sublayer(x))`` around every sublayer, a generator tied to the target embeddings. Two details differ
and are bridged here:

* HF builds Marian's sinusoids with all sines first and all cosines after; dotformer interleaves them (paper §3.5).
  The positional table is a frozen weight in Marian, so we overwrite it with dotformer's table.
* Marian always has biases and a ``final_logits_bias``; a bias-free dotformer model exports zeros.

The benchmarks use it to run HF ``generate`` on exactly the same model as dotformer's decoder, and the tests check that
the two give the same logits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from dotformer.config import ModelConfig
from dotformer.data.tokenizers import BOS_ID, EOS_ID
from dotformer.errors import ConfigError
from dotformer.model import Transformer
from dotformer.quantization import require_float_weights

if TYPE_CHECKING:  # transformers is an optional dependency (the "bench" extra)
    from transformers import MarianConfig, MarianMTModel


def check_exportable(config: ModelConfig) -> None:
    """Raise :class:`ConfigError` unless ``config`` describes a model Marian can hold: an encoder-decoder with post-LN.

    Raises:
        ConfigError: decoder-only or encoder-only architecture, or pre-LN (``norm_first=True``).
    """
    if config.arch != "encoder-decoder":
        raise ConfigError(f"only encoder-decoder models can be exported to Marian, got arch={config.arch!r}")
    if config.norm_first:
        raise ConfigError("Marian is post-LN: a model with norm_first=True cannot be exported to it")


def marian_config(config: ModelConfig, bos_id: int = BOS_ID, eos_id: int = EOS_ID) -> MarianConfig:
    """The ``MarianConfig`` with the sizes, dropouts and special ids of a dotformer :class:`ModelConfig`.

    Dropout maps one to one: ``dropout`` (embeddings and sublayer outputs), ``attention_dropout`` (attention
    weights) and ``activation_dropout`` (the FFN's inner activations) have the same names and places in both.

    Raises:
        ConfigError: the model cannot be held by Marian (see :func:`check_exportable`).
    """
    from transformers import MarianConfig

    check_exportable(config)
    c = config
    return MarianConfig(
        vocab_size=c.src_vocab_size,
        decoder_vocab_size=c.tgt_vocab_size,
        share_encoder_decoder_embeddings=c.share_embeddings,
        tie_word_embeddings=c.tie_output,
        d_model=c.d_model,
        encoder_layers=c.num_encoder_layers,
        decoder_layers=c.num_decoder_layers,
        encoder_attention_heads=c.num_heads,
        decoder_attention_heads=c.num_heads,
        encoder_ffn_dim=c.d_ff,
        decoder_ffn_dim=c.d_ff,
        activation_function=c.activation,
        dropout=c.dropout,
        attention_dropout=c.attention_dropout,
        activation_dropout=c.activation_dropout,
        max_position_embeddings=c.max_len,
        scale_embedding=True,
        pad_token_id=c.pad_id,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        decoder_start_token_id=bos_id,
        forced_eos_token_id=None,
    )


@torch.no_grad()
def _copy_linear(target: nn.Linear, source: nn.Linear) -> None:
    """target.weight <- source.weight (V, D) and target.bias <- source.bias (zeros when the source has none)."""
    target.weight.copy_(source.weight)
    if target.bias is not None:
        target.bias.copy_(source.bias if source.bias is not None else torch.zeros_like(target.bias))


@torch.no_grad()
def _copy_norm(target: nn.LayerNorm, source: nn.LayerNorm) -> None:
    target.weight.copy_(source.weight)
    target.bias.copy_(source.bias)


def _copy_attention(target: nn.Module, source: nn.Module) -> None:
    """W_q, W_k, W_v, W_o -> q_proj, k_proj, v_proj, out_proj."""
    _copy_linear(target.q_proj, source.W_q)
    _copy_linear(target.k_proj, source.W_k)
    _copy_linear(target.v_proj, source.W_v)
    _copy_linear(target.out_proj, source.W_o)


@torch.no_grad()
def to_marian(model: Transformer, bos_id: int = BOS_ID, eos_id: int = EOS_ID) -> MarianMTModel:
    """A new ``MarianMTModel`` that computes the same function as ``model`` (float32, on CPU, in eval mode).

    Args:
        model: an encoder-decoder :class:`Transformer` with post-LN.
        bos_id: the id the decoder starts from (Marian's ``decoder_start_token_id``).
        eos_id: the end-of-sentence id that stops ``generate``.

    Returns:
        The Marian model; ``marian(input_ids=src, attention_mask=src != pad, decoder_input_ids=tgt_in).logits``
        equals ``model(src, tgt_in)`` up to float rounding (tested).

    Raises:
        ConfigError: the model cannot be held by Marian (see :func:`check_exportable`), or has int8 linear layers.
    """
    from transformers import MarianMTModel

    require_float_weights(model, "export to HF Marian")
    config = model.config
    marian = MarianMTModel(marian_config(config, bos_id, eos_id)).eval()
    assert model.src_embed is not None and model.tgt_embed is not None  # encoder-decoder, checked above
    assert model.encoder is not None and model.decoder is not None
    inner = marian.model

    inner.encoder.embed_tokens.weight.copy_(model.src_embed.token.weight)
    inner.decoder.embed_tokens.weight.copy_(model.tgt_embed.token.weight)
    marian.lm_head.weight.copy_(model.generator.weight)
    marian.final_logits_bias.zero_()
    inner.encoder.embed_positions.weight.copy_(model.src_embed.position.encoding(config.max_len))
    inner.decoder.embed_positions.weight.copy_(model.tgt_embed.position.encoding(config.max_len))

    for theirs, ours in zip(inner.encoder.layers, model.encoder.layers, strict=True):
        _copy_attention(theirs.self_attn, ours.self_attn)
        _copy_norm(theirs.self_attn_layer_norm, ours.res_attn.norm)
        _copy_linear(theirs.fc1, ours.feed_forward.W_1)
        _copy_linear(theirs.fc2, ours.feed_forward.W_2)
        _copy_norm(theirs.final_layer_norm, ours.res_ff.norm)
    for theirs, ours in zip(inner.decoder.layers, model.decoder.layers, strict=True):
        assert ours.cross_attn is not None and ours.res_cross is not None  # encoder-decoder layers
        _copy_attention(theirs.self_attn, ours.self_attn)
        _copy_norm(theirs.self_attn_layer_norm, ours.res_self.norm)
        _copy_attention(theirs.encoder_attn, ours.cross_attn)
        _copy_norm(theirs.encoder_attn_layer_norm, ours.res_cross.norm)
        _copy_linear(theirs.fc1, ours.feed_forward.W_1)
        _copy_linear(theirs.fc2, ours.feed_forward.W_2)
        _copy_norm(theirs.final_layer_norm, ours.res_ff.norm)
    return marian
