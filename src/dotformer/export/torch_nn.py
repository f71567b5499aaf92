"""Moving weights between dotformer and PyTorch's own ``torch.nn.MultiheadAttention`` / ``torch.nn.Transformer``.

The tests use these functions to check dotformer against PyTorch's implementation; users can use them to start from
a model trained with ``torch.nn.Transformer`` or to hand a dotformer model to code that expects PyTorch's modules.
Shapes follow the legend in :mod:`dotformer.attention`.

How the parameters correspond (D = d_model, F = d_ff):

=====================================  ==========================================================================
dotformer                              torch
=====================================  ==========================================================================
``W_q``, ``W_k``, ``W_v`` (D, D) each  ``in_proj_weight`` (3·D, D), the three stacked in the order q, k, v
``W_q.bias`` ... (D,) each             ``in_proj_bias`` (3·D,)
``W_o``                                ``out_proj``
``feed_forward.W_1`` / ``W_2``         ``linear1`` (F, D) / ``linear2`` (D, F)
encoder ``res_attn`` / ``res_ff``      ``norm1`` / ``norm2``
decoder ``res_self`` / ``res_cross``   ``norm1`` / ``norm2`` / ``norm3``
/ ``res_ff``; ``cross_attn``           ``multihead_attn``
``Encoder.final_norm`` (pre-LN only)   ``encoder.norm``; likewise for the decoder
=====================================  ==========================================================================

Differences to know about:

* Masks: dotformer's are True = "may attend"; torch's boolean ``key_padding_mask`` / ``attn_mask`` are True =
  "ignore". Convert with ``~mask``.
* ``torch.nn.Transformer`` always builds final LayerNorms after both stacks. A post-LN dotformer model (the paper's
  layout) has none, because each post-LN layer already ends in a LayerNorm, so :func:`to_torch_transformer` sets
  ``encoder.norm`` and ``decoder.norm`` to ``None``, and :func:`load_from_torch_transformer` refuses a post-LN torch
  model that has them. Pre-LN models have them on both sides.
* Torch applies one ``dropout`` to the sublayer outputs, the FFN's inner activations and the attention weights;
  dotformer has ``dropout`` and ``attention_dropout``. In eval mode (no dropout) both compute the same function.
* Only the encoder and decoder stacks exist in ``torch.nn.Transformer``: embeddings, positional encoding and the
  generator stay in dotformer (``model.src_embed``, ``model.tgt_embed``, ``model.generator``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dotformer.config import ModelConfig
from dotformer.errors import ConfigError, ShapeError
from dotformer.export.params import Converter, EngineNames, LayerNames, join, locate
from dotformer.layers import DecoderLayer, EncoderLayer
from dotformer.model import Transformer
from dotformer.multihead import MultiHeadAttention
from dotformer.stacks import Decoder, Encoder


class _Pair(NamedTuple):
    """One tensor on each side that must hold the same values."""

    ours: Tensor  # dotformer's parameter (or a view of it)
    theirs: Tensor  # torch's parameter (or a view of it, e.g. a third of in_proj_weight)
    name: str  # where it is, for error messages


def _apply_(pairs: list[_Pair], to_torch: bool) -> None:
    """Check every pair's shapes first, then copy (so a mismatch leaves both models untouched).

    Raises:
        ShapeError: a pair's shapes differ (the message names the parameter and both shapes).
    """
    for pair in pairs:
        if pair.ours.shape != pair.theirs.shape:
            raise ShapeError(
                f"{pair.name}: dotformer's tensor has shape {tuple(pair.ours.shape)}, "
                f"torch's has shape {tuple(pair.theirs.shape)}"
            )
    with torch.no_grad():
        for pair in pairs:
            destination, source = (pair.theirs, pair.ours) if to_torch else (pair.ours, pair.theirs)
            destination.copy_(source)


def _bias_pair(ours: Tensor | None, theirs: Tensor | None, name: str) -> list[_Pair]:
    """The pair of two optional biases; both must exist or both be absent."""
    if ours is None and theirs is None:
        return []
    if ours is None or theirs is None:
        raise ConfigError(
            f"{name}: one side has a bias and the other has none (match ModelConfig.bias / the torch module's bias)"
        )
    return [_Pair(ours, theirs, name)]


def _check_torch_multihead(torch_mha: nn.MultiheadAttention, name: str) -> None:
    if (
        torch_mha.in_proj_weight is None
        or torch_mha.kdim != torch_mha.embed_dim
        or torch_mha.vdim != torch_mha.embed_dim
    ):
        raise ShapeError(
            f"{name}: the torch attention has kdim={torch_mha.kdim}, vdim={torch_mha.vdim} != "
            f"embed_dim={torch_mha.embed_dim}; dotformer projects keys and values from D-wide inputs"
        )
    if torch_mha.bias_k is not None or torch_mha.bias_v is not None or torch_mha.add_zero_attn:
        raise ConfigError(
            f"{name}: the torch attention uses add_bias_kv or add_zero_attn, which dotformer does not have"
        )


def _check_attention_sizes(mha: MultiHeadAttention, torch_mha: nn.MultiheadAttention, name: str) -> None:
    """Raise ShapeError unless the two attentions have the same D and H (and torch's kdim = vdim = D).

    Raises:
        ShapeError: D or H differ, or kdim/vdim != D. ConfigError: bias_k/bias_v or add_zero_attn.
    """
    _check_torch_multihead(torch_mha, name)
    if torch_mha.embed_dim != mha.d_model or torch_mha.num_heads != mha.num_heads:
        raise ShapeError(
            f"{name}: dotformer attention has D={mha.d_model}, H={mha.num_heads} but the torch one has "
            f"embed_dim={torch_mha.embed_dim}, num_heads={torch_mha.num_heads}"
        )


TORCH_PROJECTIONS = {"in_proj": ("q", "k", "v"), "out_proj": ("o",)}  # names in an nn.MultiheadAttention


def _torch_layer(stack: str, cross: bool) -> LayerNames:
    """torch's names in one layer of ``stack``: q, k, v stacked in ``in_proj_weight`` (3·D, D); a decoder layer's
    norms are norm1, norm2, norm3 (self, cross, feed-forward), an encoder layer's norm1, norm2."""
    attention = {"self": "self_attn", **({"cross": "multihead_attn"} if cross else {})}
    norms = [*attention, "ffn"]
    return LayerNames(
        path=f"{stack}.layers.{{i}}",
        attention=attention,
        projections={sublayer: TORCH_PROJECTIONS for sublayer in attention},
        ffn={"in": "linear1", "out": "linear2"},
        norms={sublayer: f"norm{k}" for k, sublayer in enumerate(norms, start=1)},
        final_norm=f"{stack}.norm",
    )


TORCH_NAMES = EngineNames(
    layers={"encoder": _torch_layer("encoder", cross=False), "decoder": _torch_layer("decoder", cross=True)}
)  # torch.nn.Transformer has no embeddings or generator


class _TorchPairs(Converter):
    """Pairs dotformer's tensors with a torch module's (names: :data:`TORCH_NAMES`), checking the structures on the
    way; :func:`_apply_` then copies them in the one direction.

    Args:
        root: the torch module (an ``nn.Transformer`` or an ``nn.MultiheadAttention``).
        to_torch: the direction (LayerNorm biases that torch lacks are zeroed on the way in, checked on the way out).
        label: the name of ``root`` in messages ("" for a transformer: names start at its stacks).
        config: the dotformer model's config, to check each torch layer's switches against.
    """

    def __init__(self, root: nn.Module, to_torch: bool, label: str = "", config: ModelConfig | None = None) -> None:
        super().__init__(TORCH_NAMES)
        self.root, self.to_torch, self.label, self.config = root, to_torch, label, config
        self.pairs: list[_Pair] = []

    def copy_linear(self, ours: Sequence[nn.Linear], theirs: str, roles: tuple[str, ...]) -> None:
        """One linear layer, or W_q, W_k, W_v <-> the three (D, D) thirds of ``in_proj_weight`` (biases likewise)."""
        parent, _, last = theirs.rpartition(".")
        if last != "in_proj":
            module, name = locate(self.root, theirs), join(self.label, theirs)
            self.pairs += [_Pair(ours[0].weight, module.weight, name + ".weight")]
            self.pairs += _bias_pair(ours[0].bias, module.bias, name + ".bias")
            return
        module, name = locate(self.root, parent), join(self.label, parent)
        weights = module.in_proj_weight.chunk(len(roles), dim=0)  # 3 × (D, D) views
        biases = [None] * len(roles) if module.in_proj_bias is None else module.in_proj_bias.chunk(len(roles), dim=0)
        for linear, role, weight in zip(ours, roles, weights, strict=True):
            self.pairs.append(_Pair(linear.weight, weight, f"{name}.in_proj_weight[{role}]"))
        for linear, role, bias in zip(ours, roles, biases, strict=True):
            self.pairs += _bias_pair(linear.bias, bias, f"{name}.in_proj_bias[{role}]")

    def copy_norm(self, ours: nn.LayerNorm, theirs: str) -> None:
        self.pairs += _norm_pairs(ours, locate(self.root, theirs), join(self.label, theirs), self.to_torch)

    def copy_attention(self, ours: MultiHeadAttention, theirs: str, projections: Mapping[str, tuple[str, ...]]) -> None:
        _check_attention_sizes(ours, locate(self.root, theirs), join(self.label, theirs))
        super().copy_attention(ours, theirs, projections)

    def copy_layer(self, ours: EncoderLayer | DecoderLayer, names: LayerNames, theirs: str) -> None:
        assert self.config is not None  # a whole transformer
        _check_torch_layer(locate(self.root, theirs), self.config, theirs)
        super().copy_layer(ours, names, theirs)

    def copy_stack(self, stack: str, ours: Encoder | Decoder, names: LayerNames) -> None:
        """The layers, as many on both sides, then the final norms.

        Raises:
            ConfigError: the layer counts differ.
        """
        theirs = locate(self.root, stack)
        if len(theirs.layers) != len(ours.layers):
            raise ConfigError(
                f"{stack}: the torch model has {len(theirs.layers)} layers, the dotformer model {len(ours.layers)}"
            )
        super().copy_stack(stack, ours, names)

    def copy_final_norm(self, stack: str, ours: nn.LayerNorm | None, theirs: str | None) -> None:
        """Pre-LN has final norms on both sides, post-LN none (``nn.Transformer`` builds them unless told not to).

        Raises:
            ConfigError: one side has a final norm and the other none (torch's is ignored when exporting to it).
        """
        has_norm = locate(self.root, stack).norm is not None
        if ours is not None and not has_norm:
            raise ConfigError(f"{stack}: the pre-LN dotformer model has a final LayerNorm, the torch one none")
        if ours is None and has_norm and not self.to_torch:
            raise ConfigError(
                f"{stack}: the torch model has a final LayerNorm ({stack}.norm) after post-LN layers, "
                f"which a post-LN dotformer model does not have; set torch_transformer.{stack}.norm = None "
                f"if it should not be there, or use norm_first=True on both sides"
            )
        super().copy_final_norm(stack, ours, theirs)


def _attention_pairs(mha: MultiHeadAttention, torch_mha: nn.MultiheadAttention, to_torch: bool) -> list[_Pair]:
    """W_q, W_k, W_v <-> the thirds of ``in_proj_weight`` (3·D, D), biases likewise; W_o <-> ``out_proj``."""
    pairs = _TorchPairs(torch_mha, to_torch, label="attention")
    pairs.copy_attention(mha, "", TORCH_PROJECTIONS)
    return pairs.pairs


def to_torch_multihead(mha: MultiHeadAttention) -> nn.MultiheadAttention:
    """A ``torch.nn.MultiheadAttention`` (``batch_first=True``) computing the same function as ``mha``.

    Args:
        mha: a dotformer :class:`MultiHeadAttention` with D = ``d_model``, H = ``num_heads``.

    Returns:
        A new module on ``mha``'s device and dtype, in ``mha``'s train/eval mode, with the same dropout on the
        weights. Called as ``torch_mha(query (B, T, D), key (B, S, D), value (B, S, D), key_padding_mask=~keep (B, S))``
        it returns the (B, T, D) output and the weights; dotformer's boolean masks are True = "may attend",
        torch's are True = "ignore".
    """
    weight = mha.W_q.weight
    torch_mha = nn.MultiheadAttention(
        mha.d_model,
        mha.num_heads,
        dropout=mha.dropout,
        bias=mha.W_q.bias is not None,
        batch_first=True,
        device=weight.device,
        dtype=weight.dtype,
    )
    _apply_(_attention_pairs(mha, torch_mha, to_torch=True), to_torch=True)
    return torch_mha.train(mha.training)


def from_torch_multihead(torch_mha: nn.MultiheadAttention) -> MultiHeadAttention:
    """A dotformer :class:`MultiHeadAttention` computing the same function as ``torch_mha``.

    Args:
        torch_mha: a ``torch.nn.MultiheadAttention`` with kdim = vdim = embed_dim (D), no bias_k/bias_v and no
            add_zero_attn. Its ``batch_first`` does not matter for the weights; the result is batch-first:
            (B, T, D) inputs.

    Returns:
        A new module on ``torch_mha``'s device and dtype, in its train/eval mode, with its dropout on the weights.

    Raises:
        ShapeError: separate key/value sizes (kdim or vdim != D). ConfigError: add_bias_kv or add_zero_attn.
    """
    _check_torch_multihead(torch_mha, "attention")
    weight = torch_mha.out_proj.weight
    mha = MultiHeadAttention(
        torch_mha.embed_dim, torch_mha.num_heads, dropout=torch_mha.dropout, bias=torch_mha.in_proj_bias is not None
    ).to(device=weight.device, dtype=weight.dtype)
    _apply_(_attention_pairs(mha, torch_mha, to_torch=False), to_torch=False)
    return mha.train(torch_mha.training)


# -- whole encoder / decoder stacks ------------------------------------------------------------------------------------


def _torch_activation_name(activation: object) -> str | None:
    """ "relu" / "gelu" / "silu" for the activations a torch Transformer layer may hold, else None."""
    if activation is F.relu or isinstance(activation, nn.ReLU):
        return "relu"
    if activation is F.gelu or (isinstance(activation, nn.GELU) and activation.approximate == "none"):
        return "gelu"
    if activation is F.silu or isinstance(activation, nn.SiLU):
        return "silu"
    return None


def _check_torch_layer(layer: nn.Module, c: ModelConfig, name: str) -> None:
    """The switches of a torch encoder/decoder layer must match the config (sizes are checked while pairing)."""
    norm_first = bool(getattr(layer, "norm_first", False))
    if norm_first != c.norm_first:
        raise ConfigError(f"{name}: torch norm_first={norm_first} but ModelConfig.norm_first={c.norm_first}")
    activation = getattr(layer, "activation", None)
    if _torch_activation_name(activation) != c.activation:
        raise ConfigError(f"{name}: torch activation {activation!r} but ModelConfig.activation={c.activation!r}")
    eps = layer.norm1.eps
    if eps != c.layer_norm_eps:
        raise ConfigError(f"{name}: torch layer_norm_eps={eps} but ModelConfig.layer_norm_eps={c.layer_norm_eps}")


def _norm_pairs(ours: nn.LayerNorm, theirs: nn.LayerNorm, name: str, to_torch: bool) -> list[_Pair]:
    """A LayerNorm's weight and bias. Torch's ``bias=False`` layers have LayerNorms without a bias; dotformer's
    always have one, which is zeroed when loading and must be zero when exporting."""
    pairs = [_Pair(ours.weight, theirs.weight, name + ".weight")]
    if theirs.bias is not None:
        pairs.append(_Pair(ours.bias, theirs.bias, name + ".bias"))
    elif not to_torch:
        pairs.append(_Pair(ours.bias, torch.zeros_like(ours.bias), name + ".bias"))
    elif bool(ours.bias.detach().ne(0).any()):
        raise ConfigError(f"{name}: the torch LayerNorm has no bias (bias=False) but dotformer's bias is not zero")
    return pairs


def _transformer_pairs(model: Transformer, torch_transformer: nn.Transformer, to_torch: bool) -> list[_Pair]:
    """Every parameter pair of the encoder and decoder stacks, after checking that the structures match.

    Raises:
        ConfigError: not an encoder-decoder; layer counts, switches or final norms differ.
        ShapeError: D, H or F differ.
    """
    c = model.config
    if c.arch != "encoder-decoder" or model.encoder is None or model.decoder is None:
        raise ConfigError(f"torch.nn.Transformer is an encoder-decoder; this model is {c.arch!r}")
    c.check_2017_block("torch.nn.Transformer")
    pairs = _TorchPairs(torch_transformer, to_torch, config=c)
    pairs.copy_stacks(model)
    return pairs.pairs


def to_torch_transformer(model: Transformer) -> nn.Transformer:
    """A ``torch.nn.Transformer`` (``batch_first=True``) whose encoder and decoder compute ``model.encoder`` and
    ``model.decoder``.

    Args:
        model: an encoder-decoder dotformer :class:`Transformer`.

    Returns:
        A new module on ``model``'s device and dtype, in its train/eval mode. For a post-LN model its
        ``encoder.norm`` and ``decoder.norm`` are ``None`` (see the module docstring). With ``x = model.src_embed(src)``
        (B, S, D), ``y = model.tgt_embed(tgt)`` (B, T, D) and ``keep = model.source_mask(src)[:, 0, 0]`` (B, S) bool:
        ``torch_model(x, y, tgt_mask=nn.Transformer.generate_square_subsequent_mask(T), tgt_is_causal=True,
        src_key_padding_mask=~keep, memory_key_padding_mask=~keep)`` equals ``model.decode(tgt, memory, src_mask)
        .hidden`` (B, T, D) in eval mode.

    Raises:
        ConfigError: the model is decoder-only or encoder-only, has int8 linear layers, or has ``bias=False`` with
            non-zero LayerNorm biases (torch's ``bias=False`` layers have no LayerNorm biases).
    """
    from dotformer.decoding.quantization import require_float_weights  # loads decoding only when converting

    require_float_weights(model, "copy weights into torch.nn.Transformer")
    c = model.config
    if c.arch != "encoder-decoder":
        raise ConfigError(f"torch.nn.Transformer is an encoder-decoder; this model is {c.arch!r}")
    weight = next(model.parameters())
    torch_model = _empty_torch_transformer(c, weight.device, weight.dtype)
    _apply_(_transformer_pairs(model, torch_model, to_torch=True), to_torch=True)
    return torch_model.train(model.training)


def _empty_torch_transformer(c: ModelConfig, device: torch.device, dtype: torch.dtype) -> nn.Transformer:
    """A ``torch.nn.Transformer`` (``batch_first=True``) of ``c``'s shape and switches, with final norms for pre-LN
    only (post-LN layers already end in a LayerNorm)."""
    factory = {"device": device, "dtype": dtype}
    sizes = {
        "d_model": c.d_model,
        "nhead": c.num_heads,
        "dim_feedforward": c.d_ff,
        "dropout": c.dropout,
        "activation": F.silu if c.activation == "silu" else c.activation,  # torch has no string for SiLU (a callable
        # runs the same layers, off the fused fast path)
        "layer_norm_eps": c.layer_norm_eps,
        "batch_first": True,
        "norm_first": c.norm_first,
        "bias": c.bias,
    }

    def final_norm() -> nn.LayerNorm | None:
        return nn.LayerNorm(c.d_model, eps=c.layer_norm_eps, bias=c.bias, **factory) if c.norm_first else None

    encoder = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(**sizes, **factory),
        c.num_encoder_layers,
        norm=final_norm(),
        enable_nested_tensor=False,  # keep padded positions computed as dotformer does (no nested-tensor fast path)
    )
    decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(**sizes, **factory), c.num_decoder_layers, final_norm())
    return nn.Transformer(
        **sizes,
        num_encoder_layers=c.num_encoder_layers,
        num_decoder_layers=c.num_decoder_layers,
        custom_encoder=encoder,
        custom_decoder=decoder,
        **factory,
    )


def load_from_torch_transformer(model: Transformer, torch_transformer: nn.Transformer) -> Transformer:
    """Copy the encoder and decoder weights of ``torch_transformer`` into ``model``, in place.

    Everything is checked before anything is copied, so on error ``model`` is unchanged. Embeddings, positional
    encodings and the generator are left as they are (``torch.nn.Transformer`` has none).

    Args:
        model: an encoder-decoder dotformer :class:`Transformer` whose config matches the torch model: D, H, F,
            layer counts, ``norm_first``, activation, ``layer_norm_eps`` and biases.
        torch_transformer: a ``torch.nn.Transformer`` (either ``batch_first``: the weights are the same). For a
            post-LN model its ``encoder.norm`` and ``decoder.norm`` must be ``None``.

    Returns:
        ``model`` itself.

    Raises:
        ShapeError: a tensor's size differs (the message names the parameter and both shapes).
        ConfigError: layer counts, norm_first, activation, eps or bias presence differ; the model is not an
            encoder-decoder; or a post-LN torch model has final norms.
    """
    _apply_(_transformer_pairs(model, torch_transformer, to_torch=False), to_torch=False)
    return model
