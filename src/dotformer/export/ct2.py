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
``feed_forward.activation``            ``activation``: ``RELU``, ``GELU``, ``SWISH`` (SiLU)
=====================================  ====================================================

The modern block's switches (RMSNorm, gated feed-forwards, rotary positions, shared key/value heads, ``head_size``,
the attention scale, biases on W_q, W_k, W_v alone) become the options of both stacks' specs, and of the
cross-attention where dotformer's has them too (shared key/value heads, ``head_size``, the scale; rotary positions
turn the self-attentions only, in both): :mod:`dotformer.export.ct2_modern`; the logits' soft cap is the decoder's
``final_logit_softcapping``. What the Translator lacks is refused in one line naming the field
(:func:`~dotformer.export.ct2_rules.modern_problem`).

The exported model decodes as dotformer does with CTranslate2's *default* options, because the rules dotformer's
search applies are carried by the model itself:

* ``config.json`` says ``add_source_eos: true``: CTranslate2 appends ``</s>`` to every source, as dotformer's
  decoding does, so callers pass the pieces alone.
* The projection's bias is :data:`~dotformer.export.params.SUPPRESSED_LOGIT` for PAD and BOS (dotformer never
  generates them; CTranslate2 reads no suppression rule from a model directory, and its ``suppress_sequences`` is a
  per-call option). The probabilities CTranslate2 reports are therefore dotformer's renormalised over the tokens
  other than PAD and BOS: the same greedy outputs, log-probabilities higher by ``-log(1 - p_PAD - p_BOS)`` a step.
* A sinusoidal model carries :data:`~dotformer.export.ct2_rules.CT2_POSITIONS` positions (or ``max_len``, if
  larger), enough for CTranslate2's default ``max_input_length`` (1024) and ``max_decoding_length`` (256); longer
  inputs need a model re-exported with a larger ``ModelConfig.max_len``. A learned table stops at ``max_len``, as
  dotformer does.

One rule the model cannot carry: CTranslate2's default ``min_decoding_length=1`` forbids an empty output, which
dotformer allows; pass ``min_decoding_length=0`` to get dotformer's output where it is empty.

CTranslate2 speaks in token *strings*: we register a vocabulary whose i-th string stands for id i
(:func:`id_vocabulary`; specials ``<pad> <s> </s> <unk>`` at ids 0-3 as in the contract), and
:func:`ids_to_tokens` / :func:`tokens_to_ids` translate batches both ways. int8 (and other compute types) are chosen
when loading: ``ctranslate2.Translator(path, compute_type="int8")`` quantises the float32 weights on load.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dotformer.config import ModelConfig
from dotformer.data.tokenize.tokenizers import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, UNK_ID, Tokenizer
from dotformer.decoding.quantization import require_float_weights
from dotformer.errors import ConfigError
from dotformer.export.ct2_modern import set_attention_options, stack_options
from dotformer.export.ct2_rules import (
    CT2_ACTIVATIONS,
    check_quantization,
    exported_positions,
    model_problem,
)
from dotformer.export.outdir import fresh_output_dir
from dotformer.export.params import (
    SUPPRESSED_LOGIT,
    Converter,
    EngineNames,
    LayerNames,
    embedding_params,
    join,
    layer_attentions,
    locate,
)
from dotformer.layers import DecoderLayer, EncoderLayer, RMSNorm
from dotformer.model import Transformer


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
    if config.arch == "decoder-only":
        raise ConfigError(
            "only encoder-decoder models make a CTranslate2 Translator, got arch='decoder-only' (a language model: "
            "dotformer.export.ct2_lm.export_language_model)"
        )
    if config.arch != "encoder-decoder":
        from dotformer.export.hf_encoder import bert_problem

        ways = ["--to hf (BertModel)"] if bert_problem(config) is None else []  # the exports that write it
        ways += ["--to onnx"] if not config.modern_switches() else []  # ONNX writes the 2017 block only
        raise ConfigError(
            f"CTranslate2 export holds encoder-decoders (a Translator) and language models (a Generator), not an "
            f"arch={config.arch!r} model" + (f"; export an encoder with {' or '.join(ways)}" if ways else "")
        )
    problem = model_problem(config)
    if problem is not None:
        raise ConfigError(problem)
    check_pieces(src_vocab, config.src_vocab_size, "source ")
    check_pieces(tgt_vocab, config.tgt_vocab_size, "target ")


def check_pieces(vocab: Sequence[str], size: int, side: str = "") -> None:
    """Raise ConfigError unless ``vocab`` is ``size`` unique token strings, the specials first (``side``: "source "
    or "target " in the message)."""
    if len(vocab) != size:
        raise ConfigError(f"the {side}vocabulary has {len(vocab)} tokens but the model has {size}")
    if len(set(vocab)) != len(vocab):
        raise ConfigError(f"the {side}vocabulary has duplicate token strings; CTranslate2 needs unique ones")
    if tuple(vocab[: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
        raise ConfigError(f"the {side}vocabulary must start with {SPECIAL_TOKENS}, got {tuple(vocab[:4])}")


def _layer_names(stack: str, cross: bool) -> LayerNames:
    """CTranslate2's names in one layer of ``stack``: q, k, v fused into one (3D, D) matrix for self-attention; for
    cross-attention q alone and k, v fused (2D, D); the output projection last."""
    attention = {"self": "self_attention", **({"cross": "attention"} if cross else {})}
    projections = {
        "self": {"linear.0": ("q", "k", "v"), "linear.1": ("o",)},
        "cross": {"linear.0": ("q",), "linear.1": ("k", "v"), "linear.2": ("o",)},
    }
    norms = {sublayer: f"{name}.layer_norm" for sublayer, name in attention.items()}
    return LayerNames(
        path=f"{stack}.layer.{{i}}",
        attention=attention,
        projections={sublayer: projections[sublayer] for sublayer in attention},
        ffn={"in": "ffn.linear_0", "out": "ffn.linear_1"},
        norms={**norms, "ffn": "ffn.layer_norm"},
        final_norm=f"{stack}.layer_norm",
    )


CT2_NAMES = EngineNames(
    layers={"encoder": _layer_names("encoder", cross=False), "decoder": _layer_names("decoder", cross=True)},
    embeddings={"src": "encoder.embeddings.0", "tgt": "decoder.embeddings"},
    positions={"src": "encoder.position_encodings", "tgt": "decoder.position_encodings"},
    generator="decoder.projection",
)


def gated_names(layer: LayerNames, config: ModelConfig) -> LayerNames:
    """``layer``'s names with a gated feed-forward's where ``config`` has one: W_1 is ``ffn.linear_0_noact``, W_gate
    takes ``ffn.linear_0`` (the activated one; :meth:`SpecWriter.copy_layer`)."""
    return replace(layer, ffn={"in": "ffn.linear_0_noact", "out": "ffn.linear_1"}) if config.ffn_gated else layer


def _tensor(parameter: torch.Tensor) -> torch.Tensor:
    """A parameter as CTranslate2 takes it: float32 on the CPU, out of autograd."""
    return parameter.detach().float().cpu()


class SpecWriter(Converter):
    """Writes a dotformer model's weights into a ``TransformerSpec`` (the spec's names: :data:`CT2_NAMES`).

    ``suppress_specials`` (the default) writes the generator's bias with PAD and BOS at :data:`SUPPRESSED_LOGIT`, so
    that CTranslate2's default options never generate them; False keeps the trained bias, for a caller that passes
    ``suppress_sequences=[["<pad>"], ["<s>"]]`` itself and wants ``score_batch`` to give dotformer's own
    log-probabilities (the CTranslate2 engine, :mod:`dotformer.engines`).
    """

    def __init__(self, spec: Any, suppress_specials: bool = True, names: EngineNames = CT2_NAMES) -> None:
        super().__init__(names)
        self.spec = spec
        self.suppress_specials = suppress_specials

    def copy_layer(self, ours: EncoderLayer | DecoderLayer, names: LayerNames, theirs: str) -> None:
        """The 2017 layer's weights (:class:`~dotformer.export.params.Converter`), then the modern block's where the
        layer has them: W_gate (``ffn.linear_0``, the activated half), each attention's QK-norms."""
        super().copy_layer(ours, names, theirs)
        if ours.feed_forward.W_gate is not None:
            self.copy_linear([ours.feed_forward.W_gate], join(theirs, "ffn.linear_0"), ("gate",))
        for sublayer, attention in layer_attentions(ours).items():
            for side in ("q", "k"):
                norm = getattr(attention, f"{side}_norm", None)
                if norm is not None:
                    self.copy_norm(norm, join(theirs, names.attention[sublayer], f"{side}_norm"))

    def copy_linear(self, ours: Sequence[nn.Linear], theirs: str, roles: tuple[str, ...]) -> None:
        """spec.weight <- the weights stacked on the output axis (fused projections); the same for biases if any."""
        target = locate(self.spec, theirs)
        target.weight = torch.cat([_tensor(linear.weight) for linear in ours])
        if ours[0].bias is not None:
            target.bias = torch.cat([_tensor(linear.bias) for linear in ours])

    def copy_norm(self, ours: nn.Module, theirs: str) -> None:
        """A LayerNorm's weight and bias (``gamma``, ``beta``), or an RMSNorm's weight: its (1 + w) is CTranslate2's
        ``layer_norm_use_residual``."""
        target = locate(self.spec, theirs)
        target.gamma = _tensor(ours.weight)
        if isinstance(ours, RMSNorm):
            if ours.unit_offset:
                target.layer_norm_use_residual = True
        else:
            target.beta = _tensor(ours.bias)

    def copy_embeddings(self, model: Transformer) -> None:
        """Token tables, the positional tables (×√D is CTranslate2's ``scale_embeddings``): ``max_len`` rows of a
        learned table, :func:`~dotformer.export.ct2_rules.exported_positions` rows of sinusoids, none for rotary
        positions (they turn q and k in each self-attention: the spec's ``rotary_dim``)."""
        scale = math.sqrt(model.config.d_model) if model.config.scale_embeddings else 1.0
        for side, embedding in embedding_params(model).items():
            locate(self.spec, self.names.embeddings[side]).weight = _tensor(embedding.weight)
        for side, embed in (("src", model.src_embed), ("tgt", model.tgt_embed)):
            assert embed is not None  # encoder-decoder, checked
            if embed.position is None:  # rotary positions
                continue
            positions = embed.position.encoding(exported_positions(model.config))  # (L, D)
            locate(self.spec, self.names.positions[side]).encodings = _tensor(positions)
        self.spec.encoder.scale_embeddings = self.spec.decoder.scale_embeddings = scale

    def copy_model(self, model: Transformer) -> None:
        """Embeddings, both stacks (and their final norms, pre-LN), the generator (PAD and BOS suppressed, unless
        ``suppress_specials`` is False)."""
        self.copy_embeddings(model)
        self.copy_stacks(model)
        self.copy_linear([model.generator], self.names.generator or "", ("generator",))
        projection = locate(self.spec, self.names.generator or "")
        bias = (
            _tensor(model.generator.bias).clone()  # a copy: the model's own bias stays as it is
            if model.generator.bias is not None
            else torch.zeros(model.config.tgt_vocab_size)
        )
        if self.suppress_specials:
            bias[[PAD_ID, BOS_ID]] = SUPPRESSED_LOGIT  # (V,): never generated, with CTranslate2's default options
        projection.bias = bias


def _empty_spec(config: ModelConfig) -> Any:
    """A ``TransformerSpec`` of ``config``'s shape, with its switches set (the modern block's:
    :mod:`dotformer.export.ct2_modern`) and no weights yet."""
    import numpy as np
    from ctranslate2.specs import common_spec, transformer_spec

    activation = getattr(common_spec.Activation, CT2_ACTIVATIONS[config.activation])  # checked by _check
    shared = dict(pre_norm=config.norm_first, activation=activation, **stack_options(config))
    encoder = transformer_spec.TransformerEncoderSpec(config.num_encoder_layers, config.num_heads, **shared)
    decoder = transformer_spec.TransformerDecoderSpec(
        config.num_decoder_layers,
        config.num_heads,
        alignment_heads=config.num_heads,  # return_attention: the last layer's heads averaged, as dotformer aligns
        **shared,
    )
    rotary = config.positional == "rotary"
    for layer in encoder.layer:
        set_attention_options(layer.self_attention, config, rotary)
    for layer in decoder.layer:
        set_attention_options(layer.self_attention, config, rotary)
        set_attention_options(layer.attention, config, rotary=False)  # cross-attention: no positions
    if config.logit_softcap is not None:
        decoder.final_logit_softcapping = np.float32(config.logit_softcap)
    spec = transformer_spec.TransformerSpec(encoder, decoder)
    spec.config.layer_norm_epsilon = config.layer_norm_eps
    return spec


def transformer_spec(
    model: Transformer,
    src_vocab: Sequence[str] | None = None,
    tgt_vocab: Sequence[str] | None = None,
    suppress_specials: bool = True,
) -> Any:
    """Build the ``ctranslate2.specs.TransformerSpec`` holding ``model``'s weights (float32) and vocabularies.

    Args:
        model: an encoder-decoder :class:`Transformer` (post-LN or pre-LN, ReLU, GELU or SiLU, any positions), or of
            the modern block (module docstring).
        src_vocab, tgt_vocab: the token strings of ids 0..V-1 (unique, specials first); default :func:`id_vocabulary`.
        suppress_specials: PAD and BOS never generated with the default options (see :class:`SpecWriter`).

    Returns:
        The validated spec; ``spec.save(directory)`` writes it.

    Raises:
        ConfigError: not an encoder-decoder, an activation or switch CTranslate2 lacks (naming the field), or a
            vocabulary that does not fit the model.
    """
    config = model.config
    src_vocab = list(src_vocab) if src_vocab is not None else id_vocabulary(config.src_vocab_size)
    tgt_vocab = list(tgt_vocab) if tgt_vocab is not None else id_vocabulary(config.tgt_vocab_size)
    _check(config, src_vocab, tgt_vocab)
    spec = _empty_spec(config)
    layers = {stack: gated_names(names, config) for stack, names in CT2_NAMES.layers.items()}
    SpecWriter(spec, suppress_specials, replace(CT2_NAMES, layers=layers)).copy_model(model)
    spec.register_source_vocabulary(src_vocab)
    spec.register_target_vocabulary(tgt_vocab)
    spec.config.unk_token = SPECIAL_TOKENS[UNK_ID]
    spec.config.bos_token = SPECIAL_TOKENS[BOS_ID]
    spec.config.eos_token = SPECIAL_TOKENS[EOS_ID]
    spec.config.decoder_start_token = SPECIAL_TOKENS[BOS_ID]  # dotformer's decoder starts from BOS
    spec.config.add_source_eos = True  # CTranslate2 appends </s> to each source, as dotformer's decoding does
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
        ``translate_batch([ids_to_tokens(src_ids, vocab), ...])`` where each source is the pieces *without* ``</s>``
        (the model's ``add_source_eos`` appends it); the default options decode as dotformer does (module docstring).

    Raises:
        ConfigError: the model or vocabularies cannot be exported (see :func:`transformer_spec`), the model has
            int8 linear layers, ``output_dir`` exists and is not empty, or ``quantization`` is unknown.
    """
    check_quantization(quantization)
    require_float_weights(model, "export to CTranslate2 (its own quantization= option quantizes)")
    return save_spec(transformer_spec(model, src_vocab, tgt_vocab), output_dir, quantization)


def save_spec(spec: Any, output_dir: str | Path, quantization: str | None = None) -> Path:
    """Write a CTranslate2 ``spec`` (weights quantised as asked) into ``output_dir``, new or empty; return it.

    Raises:
        ConfigError: ``output_dir`` exists and is not empty.
    """

    spec.optimize(quantization=quantization)
    with fresh_output_dir(output_dir) as tmp:
        spec.save(str(tmp))
    return Path(output_dir)
