"""One map of dotformer's parameters per kind of layer, walked by every exporter and importer.

dotformer names each weight once, here, by its *role* in the paper's layers:

================  ===========================================================================================
kind of layer     roles (dotformer's modules)
================  ===========================================================================================
attention         ``q``, ``k``, ``v``, ``o``: ``W_q``, ``W_k``, ``W_v``, ``W_o`` (§3.2.2)
feed-forward      ``in``, ``out``: ``W_1``, ``W_2`` (§3.3)
norms             ``self``, ``cross``, ``ffn``: the LayerNorm of each sublayer's residual connection (§3.1);
                  a pre-LN stack's ``final_norm``
embeddings        ``src``, ``tgt``: ``src_embed.token``, ``tgt_embed.token`` (positions: ``*.position``)
generator         ``generator``, the (V, D) projection to the logits
================  ===========================================================================================

An engine is a table of its own names for those roles (:class:`EngineNames`, one :class:`LayerNames` per stack):
HF Marian calls the ``q`` of encoder layer 3 ``encoder.layers.3.self_attn.q_proj``, CTranslate2 stacks ``q``, ``k``,
``v`` into ``encoder.layer.3.self_attention.linear.0``. A :class:`Converter` walks dotformer's layers once and hands
each (dotformer module, engine name) to the engine's :meth:`~Converter.copy_linear` and
:meth:`~Converter.copy_norm`, the only two things an engine says (and how it copies its embeddings). The engines:
:mod:`~dotformer.export.ct2`, :mod:`~dotformer.export.marian`, :mod:`~dotformer.export.torch_nn`,
:mod:`dotformer.imports.marian`, :mod:`dotformer.imports.bert`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from dotformer.errors import ConfigError
from dotformer.layers import DecoderLayer, EncoderLayer, FeedForward
from dotformer.model import Transformer
from dotformer.multihead import MultiHeadAttention
from dotformer.stacks import Decoder, Encoder

SUPPRESSED_LOGIT = -1e4  # generator bias of a token never to be generated: exp(-1e4) is 0 in float32 and float16
READS_STREAM = ("q", "k", "v", "in")  # linear layers whose input is the (B, ·, D) residual stream
WRITES_STREAM = ("o", "out")  # linear layers whose output is added to it


def layer_attentions(layer: EncoderLayer | DecoderLayer) -> dict[str, MultiHeadAttention]:
    """``self`` (and ``cross`` for a decoder layer that has it) -> the layer's attention modules."""
    cross = getattr(layer, "cross_attn", None)
    return {"self": layer.self_attn, **({"cross": cross} if cross is not None else {})}


def layer_norms(layer: EncoderLayer | DecoderLayer) -> dict[str, nn.LayerNorm]:
    """``self``, ``cross`` (when there), ``ffn`` -> the LayerNorm of each sublayer's residual connection."""
    if isinstance(layer, EncoderLayer):
        return {"self": layer.res_attn.norm, "ffn": layer.res_ff.norm}
    cross = {"cross": layer.res_cross.norm} if layer.res_cross is not None else {}
    return {"self": layer.res_self.norm, **cross, "ffn": layer.res_ff.norm}


def embedding_params(model: Transformer) -> dict[str, nn.Embedding]:
    """``src``, ``tgt`` -> the token embedding tables (V, D) the model has (one object when they are shared)."""
    sides = {"src": model.src_embed, "tgt": model.tgt_embed}
    return {side: embed.token for side, embed in sides.items() if embed is not None}


@dataclass(frozen=True)
class LayerNames:
    """One engine's names for the parameters of one stack's layers, by role; paths are dotted, relative to the layer.

    Attributes:
        path: the layer, with ``{i}`` for its index in the stack (``"encoder.layers.{i}"``).
        attention: ``self``, ``cross`` -> the attention module.
        projections: ``self``, ``cross`` -> {the engine's projection in that module: the roles it holds, stacked on
            its output axis when several (CTranslate2 and torch hold ``q``, ``k``, ``v`` in one matrix)}.
        ffn: ``in``, ``out`` -> the feed-forward's linear layers.
        norms: ``self``, ``cross``, ``ffn`` -> the sublayers' LayerNorms.
        final_norm: the stack's final LayerNorm (pre-LN), from the engine's root; None: the engine has none.
    """

    path: str
    attention: Mapping[str, str]
    projections: Mapping[str, Mapping[str, tuple[str, ...]]]
    ffn: Mapping[str, str]
    norms: Mapping[str, str]
    final_norm: str | None = None


@dataclass(frozen=True)
class EngineNames:
    """One engine's names for every dotformer parameter, by role (dotted paths from the engine's root).

    Attributes:
        layers: ``encoder``, ``decoder`` -> :class:`LayerNames` (only the stacks the engine has).
        embeddings: ``src``, ``tgt`` -> the token tables.
        positions: ``src``, ``tgt`` -> the positional tables.
        embedding_norms: ``src``, ``tgt`` -> the LayerNorms of the embeddings (``ModelConfig.embedding_norm``).
        generator: the output projection; None when the engine has none.
    """

    layers: Mapping[str, LayerNames]
    embeddings: Mapping[str, str] = field(default_factory=dict)
    positions: Mapping[str, str] = field(default_factory=dict)
    embedding_norms: Mapping[str, str] = field(default_factory=dict)
    generator: str | None = None


def join(*parts: str) -> str:
    """Dotted path of the non-empty ``parts``: ``join("a", "", "b") == "a.b"``."""
    return ".".join(part for part in parts if part)


def locate(root: Any, path: str) -> Any:
    """The object at dotted ``path`` under ``root``: attributes, and list indices for parts that are integers."""
    for part in path.split(".") if path else ():
        root = root[int(part)] if part.lstrip("-").isdigit() else getattr(root, part)
    return root


class Converter(ABC):
    """Copies weights between dotformer and one engine, one kind of layer at a time, in the lesson's order.

    A subclass says how one group of linear layers and one LayerNorm are copied (and in which direction); the walk
    over stacks, layers, attention, feed-forward and norms is this class's, the same for every engine.

    Args:
        names: the engine's names for dotformer's parameters.
    """

    def __init__(self, names: EngineNames) -> None:
        self.names = names

    @abstractmethod
    def copy_linear(self, ours: Sequence[nn.Linear], theirs: str, roles: tuple[str, ...]) -> None:
        """Copy the linear layers ``ours`` (of ``roles``, stacked on the output axis) and the engine's ``theirs``."""

    @abstractmethod
    def copy_norm(self, ours: nn.LayerNorm, theirs: str) -> None:
        """Copy the LayerNorm ``ours`` and the engine's ``theirs``."""

    def copy_attention(self, ours: MultiHeadAttention, theirs: str, projections: Mapping[str, tuple[str, ...]]) -> None:
        """W_q, W_k, W_v, W_o and the engine's attention module ``theirs`` (its ``projections``)."""
        params = {"q": ours.W_q, "k": ours.W_k, "v": ours.W_v, "o": ours.W_o}  # (D, D) each
        for name, roles in projections.items():
            self.copy_linear([params[role] for role in roles], join(theirs, name), roles)

    def copy_ffn(self, ours: FeedForward, theirs: str, names: Mapping[str, str]) -> None:
        """W_1, W_2 and the engine's linear layers ``names`` under ``theirs``."""
        params = {"in": ours.W_1, "out": ours.W_2}  # (F, D), (D, F)
        for role, name in names.items():
            self.copy_linear([params[role]], join(theirs, name), (role,))

    def copy_layer(self, ours: EncoderLayer | DecoderLayer, names: LayerNames, theirs: str) -> None:
        """One layer: each attention sublayer and its norm, then the feed-forward and its norm.

        Raises:
            ConfigError: the layer's attention sublayers are not the engine's (a decoder layer without
                cross-attention for an encoder-decoder engine).
        """
        attentions, norms = layer_attentions(ours), layer_norms(ours)
        if set(attentions) != set(names.attention):
            raise ConfigError(
                f"{theirs}: the dotformer layer has {'/'.join(attentions)} attention, the engine's layer "
                f"{'/'.join(names.attention)}"
            )
        for sublayer, name in names.attention.items():
            self.copy_attention(attentions[sublayer], join(theirs, name), names.projections[sublayer])
            self.copy_norm(norms[sublayer], join(theirs, names.norms[sublayer]))
        self.copy_ffn(ours.feed_forward, theirs, names.ffn)
        self.copy_norm(norms["ffn"], join(theirs, names.norms["ffn"]))

    def copy_stack(self, stack: str, ours: Encoder | Decoder, names: LayerNames) -> None:
        """Every layer of ``stack`` (``"encoder"``, ``"decoder"``), then its final LayerNorm."""
        for i, layer in enumerate(ours.layers):
            self.copy_layer(layer, names, names.path.format(i=i))
        self.copy_final_norm(stack, ours.final_norm, names.final_norm)

    def copy_final_norm(self, stack: str, ours: nn.LayerNorm | None, theirs: str | None) -> None:
        """A stack's final LayerNorm (pre-LN), when both sides have one."""
        if ours is not None and theirs is not None:
            self.copy_norm(ours, theirs)

    def copy_stacks(self, model: Transformer) -> None:
        """The encoder and decoder stacks the engine has (``model`` must have them too)."""
        for stack, names in self.names.layers.items():
            ours = getattr(model, stack)
            if ours is None:
                raise ConfigError(f"the engine has a {stack}, this {model.config.arch} model none")
            self.copy_stack(stack, ours, names)
