"""Write a dotformer language model (decoder-only) as a CTranslate2 model directory, run by ``ctranslate2.Generator``.

CTranslate2 describes a GPT-style model with ``ctranslate2.specs.TransformerDecoderModelSpec``: one decoder stack
without encoder attention, its embeddings, positions and output projection. The lesson's decoder alone maps onto it
with the names of :mod:`dotformer.export.ct2` (the same :class:`~dotformer.export.ct2.SpecWriter` copies the
weights; only the decoder's names are used):

=====================================  ====================================================
dotformer                              CTranslate2 decoder-only spec
=====================================  ====================================================
``tgt_embed.token`` (·√D)              ``decoder.embeddings`` with ``scale_embeddings``
sinusoidal or learned table             ``decoder.position_encodings.encodings`` (``max_len`` rows)
``self_attn.W_q, W_k, W_v`` / ``W_o``  ``self_attention.linear[0]`` (fused (3D, D)) / ``linear[1]``
``res_*.norm``, ``decoder.final_norm``  each sublayer's ``layer_norm``; ``decoder.layer_norm`` (pre-LN only)
``feed_forward.W_1, W_2``              ``ffn.linear_0, linear_1``
``generator``                          ``decoder.projection``
=====================================  ====================================================

The modern block's switches map onto the same spec's options as in :mod:`dotformer.export.ct2_modern`'s table (as
CTranslate2's own Llama, Qwen3 and Gemma converters set them), with three of a decoder alone:

=====================================  ====================================================
dotformer                              CTranslate2 decoder-only spec
=====================================  ====================================================
``sliding_window``, ``layer_types``    ``sliding_window`` (0 on a full layer); a sliding layer's
                                       ``rope_local_theta`` is its own ``rotary_base``, unscaled
``sandwich_norm``                      ``pre_post_layer_norm``: ``input_layer_norm``, ``post_attention_layer_norm``,
                                       ``pre_feedforward_layer_norm``, ``post_feedforward_layer_norm``
``logit_softcap``                      ``decoder.final_logit_softcapping``
=====================================  ====================================================

What CTranslate2 lacks is refused in one line naming the field (an attention soft cap, yarn's scaling:
:func:`~dotformer.export.ct2_rules.modern_problem`). With ``logit_softcap`` the logits of PAD and BOS are capped
too: their bias of :data:`~dotformer.export.params.SUPPRESSED_LOGIT` leaves them at -c, the least a capped logit
can be, so pass ``suppress_sequences=[["<pad>"], ["<s>"]]`` to be sure never to generate them. With
``sliding_window`` W, CTranslate2 gives dotformer's outputs for prompts of at most W tokens (then the window slides
as dotformer's does); it reads a longer prompt in pieces of W tokens that do not keep to the window (``dotformer
generate`` runs such a prompt on the torch engine).

The vocabulary is one list (the tokenizer's pieces, or ``t4``, ``t5``, ... when pieces look alike); ``</s>`` is both
the end token and dotformer's line end. A prompt is read as dotformer reads it (a line end first:
:func:`dotformer.decoding.inputs.encode_prompt`) and goes to ``Generator.generate_batch`` or ``forward_batch`` as token
strings (:func:`~dotformer.export.ct2.ids_to_tokens`). CTranslate2 stops greedy decoding at ``</s>`` unless told
otherwise (``end_token``), where dotformer's sampling runs on across line ends; and it knows no window: a text longer
than ``max_len`` (the positions the model has) is refused there, where ``dotformer generate`` slides its window.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from dotformer.config import ModelConfig
from dotformer.data.tokenize.tokenizers import BOS_ID, EOS_ID, SPECIAL_TOKENS, UNK_ID
from dotformer.decoding.quantization import require_float_weights
from dotformer.errors import ConfigError
from dotformer.export.ct2 import (
    CT2_NAMES,
    SpecWriter,
    _layer_names,
    _tensor,
    check_pieces,
    gated_names,
    id_vocabulary,
    save_spec,
)
from dotformer.export.ct2_modern import set_attention_options, stack_options
from dotformer.export.ct2_rules import CT2_ACTIVATIONS, check_quantization, model_problem
from dotformer.export.params import EngineNames, LayerNames, embedding_params, join, locate
from dotformer.layers import DecoderLayer
from dotformer.model import Transformer

CT2_LM_NAMES = EngineNames(
    layers={"decoder": _layer_names("decoder", cross=False)},  # the decoder alone: no encoder attention
    embeddings={"tgt": CT2_NAMES.embeddings["tgt"]},
    positions={"tgt": CT2_NAMES.positions["tgt"]},
    generator=CT2_NAMES.generator,
)


def language_model_names(config: ModelConfig) -> EngineNames:
    """:data:`CT2_LM_NAMES`, with the modern block's names where ``config`` switches them: a gated feed-forward's
    W_1 is ``ffn.linear_0_noact`` (W_gate takes ``linear_0``), sandwich norms sit on the layer itself."""
    layer = gated_names(CT2_LM_NAMES.layers["decoder"], config)
    norms = {"self": "input_layer_norm", "ffn": "pre_feedforward_layer_norm"} if config.sandwich_norm else layer.norms
    return replace(CT2_LM_NAMES, layers={"decoder": replace(layer, norms=norms)})


class LanguageModelSpecWriter(SpecWriter):
    """:class:`~dotformer.export.ct2.SpecWriter` over a ``TransformerDecoderModelSpec``: the decoder's names only
    (:func:`language_model_names`), one token table and one positional table (none for rotary positions), and the
    modern block's extra weights of a layer: ``W_gate``, the QK-norms, the norms after each sublayer."""

    def __init__(self, spec: Any, config: ModelConfig, suppress_specials: bool = True) -> None:
        super().__init__(spec, suppress_specials, language_model_names(config))

    def copy_embeddings(self, model: Transformer) -> None:
        """The token table, the positional table up to ``max_len`` (×√D is ``scale_embeddings``)."""
        assert model.tgt_embed is not None  # every model has a decoder
        config = model.config
        locate(self.spec, self.names.embeddings["tgt"]).weight = _tensor(embedding_params(model)["tgt"].weight)
        if model.tgt_embed.position is not None:  # rotary positions turn q and k in each layer instead
            positions = model.tgt_embed.position.encoding(config.max_len)  # (max_len, D)
            locate(self.spec, self.names.positions["tgt"]).encodings = _tensor(positions)
        self.spec.decoder.scale_embeddings = math.sqrt(config.d_model) if config.scale_embeddings else 1.0

    def copy_layer(self, ours: DecoderLayer, names: LayerNames, theirs: str) -> None:  # type: ignore[override]
        """The layer's weights (:meth:`~dotformer.export.ct2.SpecWriter.copy_layer`: W_gate and the QK-norms
        included), then the sandwich's norms after each sublayer, where the layer has them."""
        super().copy_layer(ours, names, theirs)
        if ours.res_self.post_norm is not None:
            assert ours.res_ff.post_norm is not None  # sandwich_norm puts one after each sublayer
            self.copy_norm(ours.res_self.post_norm, join(theirs, "post_attention_layer_norm"))
            self.copy_norm(ours.res_ff.post_norm, join(theirs, "post_feedforward_layer_norm"))


def modern_options(config: ModelConfig) -> dict[str, Any]:
    """The keyword arguments of ``TransformerDecoderModelSpec.from_config`` for ``config``'s modern switches:
    :func:`~dotformer.export.ct2_modern.stack_options`, and the decoder's sliding window."""
    options = stack_options(config)
    if config.sliding_window is not None:
        options["sliding_window"] = config.sliding_window
    return options


def set_layer_options(spec: Any, config: ModelConfig) -> None:
    """The options set layer by layer, on each self-attention: no window on a full layer among sliding ones, and
    :func:`~dotformer.export.ct2_modern.set_attention_options` (a sliding layer's own RoPE base, llama3's factors,
    the attention scale); and the logits' soft cap on the decoder."""
    import numpy as np

    c = config
    for i, layer in enumerate(spec.decoder.layer):
        attention = layer.self_attention
        sliding = c.sliding_window is not None and (c.layer_types is None or c.layer_types[i] == "sliding")
        if c.sliding_window is not None and not sliding:
            attention.sliding_window = np.int32(0)  # 0: every key, as the decoder's option would otherwise give W
        set_attention_options(attention, c, rotary=c.positional == "rotary", local=sliding)
    if c.logit_softcap is not None:
        spec.decoder.final_logit_softcapping = np.float32(c.logit_softcap)


def check_language_model(config: ModelConfig, vocabulary: Sequence[str]) -> None:
    """Raise :class:`ConfigError` unless ``config`` and ``vocabulary`` fit CTranslate2's decoder-only spec."""
    if config.arch != "decoder-only":
        raise ConfigError(f"the CTranslate2 language-model spec holds a decoder-only model, got arch={config.arch!r}")
    problem = model_problem(config)
    if problem is not None:
        raise ConfigError(problem)
    check_pieces(vocabulary, config.tgt_vocab_size)


def language_model_spec(
    model: Transformer,
    vocabulary: Sequence[str] | None = None,
    suppress_specials: bool = True,
    eos_id: int | None = None,
) -> Any:
    """Build the ``ctranslate2.specs.TransformerDecoderModelSpec`` holding ``model``'s weights (float32).

    Args:
        model: a decoder-only :class:`Transformer` (post-LN or pre-LN, ReLU, GELU or SiLU, sinusoidal or learned
            positions), or of the modern block (module docstring).
        vocabulary: the token strings of ids 0..V-1 (unique, specials first); default
            :func:`~dotformer.export.ct2.id_vocabulary`.
        suppress_specials: PAD and BOS never generated with the default options (see
            :class:`~dotformer.export.ct2.SpecWriter`).
        eos_id: the id CTranslate2 ends a text at by default (its ``eos_token``): an imported model's first EOS id
            (:class:`~dotformer.decoding.inputs.TextRules`); None: dotformer's EOS, the line end.

    Returns:
        The validated spec; ``spec.save(directory)`` writes it (``ctranslate2.Generator(directory)`` loads it).

    Raises:
        ConfigError: not decoder-only, embedding norms, a switch CTranslate2 lacks (naming the field), a
            vocabulary that does not fit the model, or an ``eos_id`` outside it.
    """
    from ctranslate2.specs import common_spec, transformer_spec

    config = model.config
    vocabulary = list(vocabulary) if vocabulary is not None else id_vocabulary(config.tgt_vocab_size)
    check_language_model(config, vocabulary)
    eos_id = EOS_ID if eos_id is None else eos_id
    if not 0 <= eos_id < len(vocabulary):
        raise ConfigError(f"the EOS id {eos_id} is outside the vocabulary of {len(vocabulary)} tokens")
    spec = transformer_spec.TransformerDecoderModelSpec.from_config(
        config.num_decoder_layers,
        config.num_heads,
        pre_norm=config.norm_first,
        activation=getattr(common_spec.Activation, CT2_ACTIVATIONS[config.activation]),
        no_final_norm=model.decoder.final_norm is None,
        **modern_options(config),
    )
    set_layer_options(spec, config)
    spec.config.layer_norm_epsilon = config.layer_norm_eps
    LanguageModelSpecWriter(spec, config, suppress_specials).copy_model(model)
    spec.register_vocabulary(vocabulary)
    spec.config.unk_token = SPECIAL_TOKENS[UNK_ID]
    spec.config.bos_token = SPECIAL_TOKENS[BOS_ID]
    spec.config.eos_token = vocabulary[eos_id]
    spec.validate()
    return spec


def export_language_model(
    model: Transformer,
    output_dir: str | Path,
    vocabulary: Sequence[str] | None = None,
    quantization: str | None = None,
) -> Path:
    """Write a decoder-only ``model`` as a CTranslate2 model directory (load it with ``ctranslate2.Generator``).

    Args:
        model: a decoder-only :class:`Transformer` (see :func:`language_model_spec`).
        output_dir: the directory to create, or an empty one.
        vocabulary: the token strings of ids 0..V-1; default :func:`~dotformer.export.ct2.id_vocabulary`.
        quantization: as :func:`~dotformer.export.ct2.export_ctranslate2`'s.

    Returns:
        The output directory.

    Raises:
        ConfigError: as :func:`language_model_spec`, a quantization CTranslate2 lacks, or a non-empty ``output_dir``.
    """
    check_quantization(quantization)
    require_float_weights(model, "export to CTranslate2 (its own quantization= option quantizes)")
    return save_spec(language_model_spec(model, vocabulary), output_dir, quantization)
