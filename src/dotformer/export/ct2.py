"""Write a dotformer encoder-decoder as a CTranslate2 model directory (a fast C++ inference engine for Transformers).

CTranslate2 describes a model with a *spec* (``ctranslate2.specs.TransformerSpec``): a tree of named weights that its
C++ Transformer reads. The paper's model maps onto it one to one:

=====================================  ====================================================
dotformer                              CTranslate2 spec
=====================================  ====================================================
``src_embed.token`` (·√D)              ``encoder.embeddings[0]`` with ``scale_embeddings``
sinusoidal table (interleaved sin/cos)  ``encoder/decoder.position_encodings.encodings``
``self_attn.W_q, W_k, W_v``            ``self_attention.linear[0]`` (one fused (3D, D) matrix)
``cross_attn.W_q`` / ``W_k, W_v``      ``attention.linear[0]`` / ``attention.linear[1]`` (fused (2D, D))
``W_o``                                ``linear[-1]``
``res_*.norm``                         the ``layer_norm`` of the sublayer (post-LN: after the residual sum)
``feed_forward.W_1, W_2``              ``ffn.linear_0, linear_1``
``generator``                          ``decoder.projection``
=====================================  ====================================================

CTranslate2 speaks in token *strings*: we register a vocabulary whose i-th string stands for id i
(:func:`id_vocabulary`; specials ``<pad> <s> </s> <unk>`` at ids 0-3 as in the contract), and
:func:`ids_to_tokens` / :func:`tokens_to_ids` translate batches both ways. int8 (and other compute types) are chosen
when loading: ``ctranslate2.Translator(path, compute_type="int8")`` quantises the float32 weights on load.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from dotformer.config import ModelConfig
from dotformer.data.tokenizers import BOS_ID, EOS_ID, SPECIAL_TOKENS, UNK_ID, Tokenizer
from dotformer.decoding.quantization import require_float_weights
from dotformer.errors import ConfigError
from dotformer.model import Transformer
from dotformer.multihead import MultiHeadAttention

QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")


def check_quantization(quantization: str | None) -> None:
    """Raise :class:`ConfigError` unless ``quantization`` is None or one of :data:`QUANTIZATIONS`."""
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ConfigError(
            f"unknown CTranslate2 quantization {quantization!r}; choose one of {', '.join(QUANTIZATIONS)}"
        )


def id_vocabulary(size: int) -> list[str]:
    """Token strings for ids 0 .. size-1: the four specials, then ``"t4"``, ``"t5"``, ...

    Raises:
        ConfigError: ``size`` is smaller than the number of special tokens.
    """
    if size < len(SPECIAL_TOKENS):
        raise ConfigError(f"a vocabulary needs at least the {len(SPECIAL_TOKENS)} special tokens, got size {size}")
    return [*SPECIAL_TOKENS, *(f"t{i}" for i in range(len(SPECIAL_TOKENS), size))]


def tokenizer_vocabulary(tokenizer: Tokenizer) -> list[str]:
    """The token strings of a dotformer tokenizer's ids 0 .. V-1 (what CTranslate2 reads, e.g. for a checkpoint's)."""
    return [tokenizer.id_to_token(i) for i in range(tokenizer.vocab_size)]


def ids_to_tokens(ids: Sequence[int], vocabulary: Sequence[str]) -> list[str]:
    """Map ids to the strings of ``vocabulary`` (what CTranslate2 takes as input)."""
    return [vocabulary[i] for i in ids]


def tokens_to_ids(tokens: Sequence[str], vocabulary: Sequence[str]) -> list[int]:
    """Map CTranslate2's output strings back to ids of ``vocabulary``."""
    index = {token: i for i, token in enumerate(vocabulary)}
    return [index[t] for t in tokens]


def _check(config: ModelConfig, src_vocab: Sequence[str], tgt_vocab: Sequence[str]) -> None:
    if config.arch != "encoder-decoder":
        raise ConfigError(f"only encoder-decoder models can be exported to CTranslate2, got arch={config.arch!r}")
    if config.embedding_norm:
        raise ConfigError("ModelConfig.embedding_norm=True: the CTranslate2 export does not carry embedding LayerNorms")
    sides = (("source", src_vocab, config.src_vocab_size), ("target", tgt_vocab, config.tgt_vocab_size))
    for name, vocab, size in sides:
        if len(vocab) != size:
            raise ConfigError(f"the {name} vocabulary has {len(vocab)} tokens but the model has {size}")
        if len(set(vocab)) != len(vocab):
            raise ConfigError(f"the {name} vocabulary has duplicate token strings; CTranslate2 needs unique ones")
        if tuple(vocab[: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
            raise ConfigError(f"the {name} vocabulary must start with {SPECIAL_TOKENS}, got {tuple(vocab[:4])}")


def _set_linear(spec, weights: Sequence[torch.nn.Linear]) -> None:
    """spec.weight <- the weights stacked on the output axis (fused projections); the same for biases if any."""
    spec.weight = torch.cat([w.weight.detach() for w in weights]).float().cpu()
    if weights[0].bias is not None:
        spec.bias = torch.cat([w.bias.detach() for w in weights]).float().cpu()


def _set_norm(spec, norm: torch.nn.LayerNorm) -> None:
    spec.gamma = norm.weight.detach().float().cpu()
    spec.beta = norm.bias.detach().float().cpu()


def _set_attention(spec, attention: MultiHeadAttention, self_attention: bool) -> None:
    if self_attention:
        _set_linear(spec.linear[0], [attention.W_q, attention.W_k, attention.W_v])
    else:
        _set_linear(spec.linear[0], [attention.W_q])
        _set_linear(spec.linear[1], [attention.W_k, attention.W_v])
    _set_linear(spec.linear[-1], [attention.W_o])


def transformer_spec(
    model: Transformer, src_vocab: Sequence[str] | None = None, tgt_vocab: Sequence[str] | None = None
) -> Any:
    """Build the ``ctranslate2.specs.TransformerSpec`` holding ``model``'s weights (float32) and vocabularies.

    Args:
        model: an encoder-decoder :class:`Transformer` (post-LN or pre-LN, ReLU or GELU, any positional table).
        src_vocab, tgt_vocab: the token strings of ids 0..V-1 (unique, specials first); default :func:`id_vocabulary`.

    Returns:
        The validated spec; ``spec.save(directory)`` writes it.

    Raises:
        ConfigError: not an encoder-decoder, or a vocabulary does not fit the model.
    """
    from ctranslate2.specs import common_spec, transformer_spec

    config = model.config
    src_vocab = list(src_vocab) if src_vocab is not None else id_vocabulary(config.src_vocab_size)
    tgt_vocab = list(tgt_vocab) if tgt_vocab is not None else id_vocabulary(config.tgt_vocab_size)
    _check(config, src_vocab, tgt_vocab)
    assert model.src_embed is not None and model.tgt_embed is not None  # encoder-decoder, checked above
    assert model.encoder is not None and model.decoder is not None

    activation = common_spec.Activation.RELU if config.activation == "relu" else common_spec.Activation.GELU
    spec = transformer_spec.TransformerSpec.from_config(
        (config.num_encoder_layers, config.num_decoder_layers),
        config.num_heads,
        pre_norm=config.norm_first,
        activation=activation,
    )
    spec.config.layer_norm_epsilon = config.layer_norm_eps
    scale = math.sqrt(config.d_model) if config.scale_embeddings else 1.0

    encoder, decoder = spec.encoder, spec.decoder
    encoder.scale_embeddings = scale
    encoder.embeddings[0].weight = model.src_embed.token.weight.detach().float().cpu()
    encoder.position_encodings.encodings = model.src_embed.position.encoding(config.max_len).detach().float().cpu()
    for layer_spec, layer in zip(encoder.layer, model.encoder.layers, strict=True):
        _set_attention(layer_spec.self_attention, layer.self_attn, self_attention=True)
        _set_norm(layer_spec.self_attention.layer_norm, layer.res_attn.norm)
        _set_linear(layer_spec.ffn.linear_0, [layer.feed_forward.W_1])
        _set_linear(layer_spec.ffn.linear_1, [layer.feed_forward.W_2])
        _set_norm(layer_spec.ffn.layer_norm, layer.res_ff.norm)
    if model.encoder.final_norm is not None:
        _set_norm(encoder.layer_norm, model.encoder.final_norm)

    decoder.scale_embeddings = scale
    decoder.embeddings.weight = model.tgt_embed.token.weight.detach().float().cpu()
    decoder.position_encodings.encodings = model.tgt_embed.position.encoding(config.max_len).detach().float().cpu()
    for layer_spec, layer in zip(decoder.layer, model.decoder.layers, strict=True):
        assert layer.cross_attn is not None and layer.res_cross is not None  # encoder-decoder layers
        _set_attention(layer_spec.self_attention, layer.self_attn, self_attention=True)
        _set_norm(layer_spec.self_attention.layer_norm, layer.res_self.norm)
        _set_attention(layer_spec.attention, layer.cross_attn, self_attention=False)
        _set_norm(layer_spec.attention.layer_norm, layer.res_cross.norm)
        _set_linear(layer_spec.ffn.linear_0, [layer.feed_forward.W_1])
        _set_linear(layer_spec.ffn.linear_1, [layer.feed_forward.W_2])
        _set_norm(layer_spec.ffn.layer_norm, layer.res_ff.norm)
    if model.decoder.final_norm is not None:
        _set_norm(decoder.layer_norm, model.decoder.final_norm)
    _set_linear(decoder.projection, [model.generator])

    spec.register_source_vocabulary(src_vocab)
    spec.register_target_vocabulary(tgt_vocab)
    spec.config.unk_token = SPECIAL_TOKENS[UNK_ID]
    spec.config.bos_token = SPECIAL_TOKENS[BOS_ID]
    spec.config.eos_token = SPECIAL_TOKENS[EOS_ID]
    spec.config.decoder_start_token = SPECIAL_TOKENS[BOS_ID]  # dotformer's decoder starts from BOS
    spec.validate()
    return spec


def export_ctranslate2(
    model: Transformer,
    output_dir: str | Path,
    src_vocab: Sequence[str] | None = None,
    tgt_vocab: Sequence[str] | None = None,
    quantization: str | None = None,
) -> Path:
    """Write ``model`` as a CTranslate2 model directory (``model.bin``, ``config.json``, vocabularies).

    Args:
        model: an encoder-decoder :class:`Transformer`.
        output_dir: the directory to create, or an empty one (a non-empty directory is refused, never replaced).
        src_vocab, tgt_vocab: token strings of the ids (default :func:`id_vocabulary`).
        quantization: store the weights quantised (``"int8"``, ``"int8_float32"``, ``"bfloat16"``, ...); None keeps
            float32, which can still run as int8 with ``Translator(..., compute_type="int8")``.

    Returns:
        The output directory. Load it with ``ctranslate2.Translator(str(path), device="cpu")`` and translate with
        ``translate_batch([ids_to_tokens(src_ids, vocab), ...])`` where each source ends with ``</s>``, as dotformer's.

    Raises:
        ConfigError: the model or vocabularies cannot be exported (see :func:`transformer_spec`), the model has
            int8 linear layers, ``output_dir`` exists and is not empty, or ``quantization`` is unknown.
    """
    from dotformer.export.outdir import fresh_output_dir

    check_quantization(quantization)
    require_float_weights(model, "export to CTranslate2 (its own quantization= option quantizes)")
    spec = transformer_spec(model, src_vocab, tgt_vocab)
    spec.optimize(quantization=quantization)
    with fresh_output_dir(output_dir) as tmp:
        spec.save(str(tmp))
    return Path(output_dir)
