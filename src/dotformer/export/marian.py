"""Copy a dotformer encoder-decoder into a Hugging Face ``MarianMTModel`` with the same function.

Marian (HF's port of Marian NMT) is the paper's post-LN Transformer: embeddings scaled by √D plus sinusoidal positions,
``LayerNorm(x + Sublayer(x))`` around every sublayer, a generator tied to the target embeddings. Two details differ
and are bridged here:

* HF builds Marian's sinusoids with all sines first and all cosines after; dotformer interleaves them (paper §3.5).
  HF recomputes that table whenever it loads a model, so overwriting it would not survive ``save_pretrained`` and
  ``from_pretrained``. Instead the model's D axis is permuted (:func:`sinusoid_permutation`: dotformer's dimensions
  0, 2, 4, ... then 1, 3, 5, ...): every matrix that reads or writes the residual stream is permuted the same way,
  LayerNorm does not care about the order of its dimensions, and dotformer's table becomes exactly HF's.
  A learned positional table is copied too, but it is lost on reload: :func:`save_marian` refuses it.
* Marian always has biases and a ``final_logits_bias``; a bias-free dotformer model exports zeros.

dotformer's search never generates PAD or BOS; the model's ``generation_config`` carries that rule
(:func:`generation_rules`: ``bad_words_ids`` [[PAD], [BOS]], as OPUS-MT's forbid their pad), with the decoder start,
EOS and a maximum length, so that HF ``generate()`` with its default options decodes as dotformer does.

One cannot be bridged: HF Marian's LayerNorms use torch's default epsilon 1e-5 and ``MarianConfig`` has no field to
change it, so a model with another ``layer_norm_eps`` is refused (:data:`MARIAN_LAYER_NORM_EPS`) rather than exported
with a different function; CTranslate2 and ONNX exports carry any epsilon.

The benchmarks use it to run HF ``generate`` on exactly the same model as dotformer's decoder, and the tests check that
the two give the same logits.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from dotformer.config import ModelConfig
from dotformer.data.tokenize.tokenizers import BOS_ID, EOS_ID, PAD_ID
from dotformer.decoding.quantization import require_float_weights
from dotformer.errors import ConfigError
from dotformer.export.outdir import check_output_dir, fresh_output_dir
from dotformer.export.params import (
    READS_STREAM,
    WRITES_STREAM,
    Converter,
    EngineNames,
    LayerNames,
    embedding_params,
    locate,
)
from dotformer.model import Transformer

if TYPE_CHECKING:  # transformers is an optional dependency (the "bench" extra)
    from transformers import GenerationConfig, MarianConfig, MarianMTModel

MARIAN_LAYER_NORM_EPS = 1e-5  # the epsilon of every LayerNorm in HF's MarianMTModel (fixed: not in MarianConfig)


def check_exportable(config: ModelConfig) -> None:
    """Raise :class:`ConfigError` unless ``config`` describes a model Marian can hold: an encoder-decoder with post-LN
    and LayerNorm epsilon 1e-5.

    Raises:
        ConfigError: decoder-only or encoder-only architecture, pre-LN (``norm_first=True``), or a
            ``layer_norm_eps`` other than :data:`MARIAN_LAYER_NORM_EPS`.
    """
    if config.arch != "encoder-decoder":
        raise ConfigError(f"only encoder-decoder models can be exported to Marian, got arch={config.arch!r}")
    config.check_2017_block("the Marian export")
    if config.norm_first:
        raise ConfigError("Marian is post-LN: a model with norm_first=True cannot be exported to it")
    if config.embedding_norm:
        raise ConfigError("ModelConfig.embedding_norm=True: HF Marian has no LayerNorm on its embeddings")
    if config.layer_norm_eps != MARIAN_LAYER_NORM_EPS:
        raise ConfigError(
            f"ModelConfig.layer_norm_eps={config.layer_norm_eps:g}, but HF Marian's LayerNorms have a fixed epsilon "
            f"of {MARIAN_LAYER_NORM_EPS:g} (MarianConfig has no field for it): export to ct2 or onnx, which carry it"
        )


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
        activation_function=c.activation,  # "relu", "gelu" or "silu": all three are HF activations
        dropout=c.dropout,
        attention_dropout=c.attention_dropout,
        activation_dropout=c.activation_dropout,
        max_position_embeddings=c.max_len,
        scale_embedding=c.scale_embeddings,
        pad_token_id=c.pad_id,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        decoder_start_token_id=bos_id,
        forced_eos_token_id=None,
    )


def generation_rules(config: ModelConfig, bos_id: int = BOS_ID, eos_id: int = EOS_ID) -> GenerationConfig:
    """HF's ``GenerationConfig`` holding dotformer's decoding rules: start from ``bos_id``, stop at ``eos_id``, never
    generate PAD or BOS (``bad_words_ids``, which sets their scores to -inf without renormalising, as dotformer's
    search does), at most ``max_len`` positions (Marian's sinusoidal table), greedy unless the caller asks otherwise.
    """
    from transformers import GenerationConfig

    return GenerationConfig(
        decoder_start_token_id=bos_id,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        pad_token_id=config.pad_id,
        bad_words_ids=[[PAD_ID], [bos_id]],
        max_length=config.max_len,
        num_beams=1,
        do_sample=False,
    )


def sinusoid_permutation(d_model: int) -> torch.Tensor:
    """LongTensor (D,): HF Marian's dimension k is dotformer's dimension ``perm[k]`` (evens, then odds).

    With it ``sinusoidal_positional_encoding(L, D)[:, perm]`` is HF's sines-first table of the same positions.
    ``torch.argsort(perm)`` maps back (import).
    """
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def _marian_layer(stack: str, cross: bool) -> LayerNames:
    """HF Marian's names in one layer of ``stack`` (``encoder_attn``: the decoder's cross-attention)."""
    attention = {"self": "self_attn", **({"cross": "encoder_attn"} if cross else {})}
    projections = {"q_proj": ("q",), "k_proj": ("k",), "v_proj": ("v",), "out_proj": ("o",)}
    return LayerNames(
        path=f"{stack}.layers.{{i}}",
        attention=attention,
        projections={sublayer: projections for sublayer in attention},
        ffn={"in": "fc1", "out": "fc2"},
        norms={**{sublayer: f"{name}_layer_norm" for sublayer, name in attention.items()}, "ffn": "final_layer_norm"},
    )


# names under MarianMTModel.model, the generator's beside it (MarianMTModel.lm_head); post-LN: no final norms
MARIAN_NAMES = EngineNames(
    layers={"encoder": _marian_layer("encoder", cross=False), "decoder": _marian_layer("decoder", cross=True)},
    embeddings={"src": "encoder.embed_tokens", "tgt": "decoder.embed_tokens"},
    positions={"src": "encoder.embed_positions", "tgt": "decoder.embed_positions"},
    generator="lm_head",
)


class MarianWriter(Converter):
    """Copies a dotformer model into a ``MarianMTModel``, with the D axis permuted by :func:`sinusoid_permutation`.

    Args:
        marian: the HF model to fill (its ``model`` holds the names of :data:`MARIAN_NAMES`).
        perm: (D,) the permutation.
    """

    def __init__(self, marian: MarianMTModel, perm: torch.Tensor) -> None:
        super().__init__(MARIAN_NAMES)
        self.marian, self.perm = marian, perm

    @torch.no_grad()
    def copy_linear(self, ours: Sequence[nn.Linear], theirs: str, roles: tuple[str, ...]) -> None:
        """target <- source, with the input columns permuted if the layer reads the residual stream and the output
        rows (and bias) if it writes it; a missing source bias is copied as zeros."""
        (source,), target = ours, locate(self.marian.model, theirs)
        weight = source.weight
        if roles[0] in READS_STREAM:
            weight = weight[:, self.perm]
        bias = source.bias if source.bias is not None else torch.zeros(weight.size(0), dtype=weight.dtype)
        if roles[0] in WRITES_STREAM:
            weight, bias = weight[self.perm], bias[self.perm]
        target.weight.copy_(weight)
        if target.bias is not None:
            target.bias.copy_(bias)

    @torch.no_grad()
    def copy_norm(self, ours: nn.LayerNorm, theirs: str) -> None:
        target = locate(self.marian.model, theirs)
        target.weight.copy_(ours.weight[self.perm])
        target.bias.copy_(ours.bias[self.perm])

    @torch.no_grad()
    def copy_embeddings(self, model: Transformer) -> None:
        """Token tables, generator (and ``final_logits_bias``), positional tables: their D axis permuted."""
        inner, perm, max_len = self.marian.model, self.perm, model.config.max_len
        for side, embedding in embedding_params(model).items():
            locate(inner, self.names.embeddings[side]).weight.copy_(embedding.weight[:, perm])
        locate(self.marian, self.names.generator or "").weight.copy_(model.generator.weight[:, perm])
        if model.generator.bias is not None:  # (V,) -> (1, V)
            self.marian.final_logits_bias.copy_(model.generator.bias[None])
        else:
            self.marian.final_logits_bias.zero_()
        for side, embed in (("src", model.src_embed), ("tgt", model.tgt_embed)):
            assert embed is not None  # encoder-decoder, checked
            locate(inner, self.names.positions[side]).weight.copy_(embed.position.encoding(max_len)[:, perm])


@torch.no_grad()
def to_marian(model: Transformer, bos_id: int = BOS_ID, eos_id: int = EOS_ID) -> MarianMTModel:
    """A new ``MarianMTModel`` that computes the same function as ``model`` (float32, on CPU, in eval mode), with
    dotformer's decoding rules as its generation config (:func:`generation_rules`).

    Args:
        model: an encoder-decoder :class:`Transformer` with post-LN and ``layer_norm_eps`` 1e-5.
        bos_id: the id the decoder starts from (Marian's ``decoder_start_token_id``).
        eos_id: the end-of-sentence id that stops ``generate``.

    Returns:
        The Marian model; ``marian(input_ids=src, attention_mask=src != pad, decoder_input_ids=tgt_in).logits``
        equals ``model(src, tgt_in)`` up to float rounding (tested), also after ``save_pretrained`` and
        ``from_pretrained`` for sinusoidal models. Its hidden states are dotformer's with the D axis permuted by
        :func:`sinusoid_permutation`.

    Raises:
        ConfigError: the model cannot be held by Marian (see :func:`check_exportable`), or has int8 linear layers.
    """
    from transformers import MarianMTModel

    require_float_weights(model, "export to HF Marian")
    marian = MarianMTModel(marian_config(model.config, bos_id, eos_id)).eval()
    marian.generation_config = generation_rules(model.config, bos_id, eos_id)
    writer = MarianWriter(marian, sinusoid_permutation(model.config.d_model))
    writer.copy_embeddings(model)
    writer.copy_stacks(model)
    return marian


def save_marian(model: Transformer, output_dir: str | Path) -> Path:
    """Write ``model`` as a Hugging Face Marian directory (``config.json``, ``model.safetensors``,
    ``generation_config.json``) that ``MarianMTModel.from_pretrained`` reads back with the same logits, and whose
    ``generate()`` with default options gives dotformer's greedy outputs.

    The ids are dotformer's (PAD 0, BOS 1 = decoder start, EOS 2, UNK 3); the caller copies the tokenizers.

    Args:
        model: as for :func:`to_marian`, with sinusoidal positions.
        output_dir: a new directory, or an empty one (a non-empty one is refused: nothing is overwritten).

    Returns:
        ``output_dir``.

    Raises:
        ConfigError: as :func:`to_marian`, a learned positional table (HF Marian rebuilds its sinusoids on load), or
            a non-empty ``output_dir``.
    """
    if model.config.positional != "sinusoidal":
        raise ConfigError(
            "ModelConfig.positional='learned': HF Marian has sinusoidal positions only (it rebuilds them on load), "
            "so a learned table cannot be saved as a Marian model; export to ct2 or onnx instead"
        )

    output_dir = check_output_dir(output_dir)
    marian = to_marian(model)
    with fresh_output_dir(output_dir) as tmp:
        marian.save_pretrained(str(tmp))
    return output_dir
