"""LoRA: low-rank adapters on the lesson's linear layers (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large
Language Models", §4.1).

A frozen projection W (out × in) learns a change of rank r at most, written as the product of two small matrices::

    y = x·Wᵀ + b + (α / r) · dropout(x)·Aᵀ·Bᵀ        A: (r, in), Kaiming-uniform;  B: (out, r), zero

Since B starts at zero, an adapted model computes exactly what its base computes until the first step; only A and
B train (r·(in + out) parameters instead of in·out). Folding the product into the weight,
W' = W + (α / r)·B·A, gives a plain ``nn.Linear`` again (:func:`merge_adapters`): the adapters cost nothing at
decoding or export.

The layers are found by name, whatever their shape and whichever block holds them: a target ``W_q`` adapts every
``nn.Linear`` whose attribute name is ``W_q`` (:class:`~dotformer.multihead.MultiHeadAttention`'s W_q, W_k, W_v,
W_o; :class:`~dotformer.layers.FeedForward`'s W_1, W_2 and any other projection a block names; the
:class:`~dotformer.model.Transformer`'s ``generator``). The default targets are the attention's W_q and W_v, as
the paper's GPT-3 experiments (§7.1, Table 5: W_q and W_v together beat any single matrix at the same budget) and
peft do. A classifier's head (``classifier.``) is not adapted: it is new to the task and trains whole.

Shapes: x (..., in) -> y (..., out); the leading dimensions are whatever the layer is called with (padded (B, L, ·)
or packed (N, ·)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dotformer.errors import ConfigError

DEFAULT_TARGETS: tuple[str, ...] = ("W_q", "W_v")  # the paper's §7.1 choice, peft's default for attention
ADAPTER_NAMES = ("lora_A", "lora_B")  # the tensors an adapted linear adds to the state dict
HEAD_PREFIX = "classifier."  # a classifier's head: trained whole beside the adapters, never adapted


@dataclass(frozen=True)
class LoRASpec:
    """Which linears get adapters, and their size.

    Attributes:
        rank: r, the rank of the learned change (A is (r, in), B is (out, r)).
        alpha: α; the change is scaled by α / r, so that another rank needs no other learning rate (§4.1).
        targets: the attribute names of the linears adapted (``W_q``, ``W_v``, ``W_1``, ``generator``, ...).
        dropout: dropout on the adapters' input (not on the frozen path).

    Raises:
        ConfigError: a rank below 1, a non-positive alpha, no targets, a dropout outside [0, 1).
    """

    rank: int
    alpha: float = 16.0
    targets: tuple[str, ...] = DEFAULT_TARGETS
    dropout: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.rank, int) or isinstance(self.rank, bool) or self.rank < 1:
            raise ConfigError(f"LoRA rank must be a positive integer, got {self.rank!r}")
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or not self.alpha > 0:
            raise ConfigError(f"LoRA alpha must be a positive number, got {self.alpha!r}")
        if isinstance(self.targets, str) or not self.targets or not all(isinstance(t, str) and t for t in self.targets):
            raise ConfigError(f"LoRA targets must be a non-empty list of layer names such as W_q, got {self.targets!r}")
        object.__setattr__(self, "targets", tuple(self.targets))
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) or not 0 <= self.dropout < 1:
            raise ConfigError(f"LoRA dropout must be in [0, 1), got {self.dropout!r}")

    @property
    def scaling(self) -> float:
        """α / r."""
        return self.alpha / self.rank

    def to_dict(self) -> dict[str, Any]:
        """JSON: rank, alpha, targets (a list), dropout."""
        return {"rank": self.rank, "alpha": self.alpha, "targets": list(self.targets), "dropout": self.dropout}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoRASpec:
        """Inverse of :meth:`to_dict` (other keys are ignored). Raises ConfigError on a missing or bad field."""
        try:
            return cls(int(data["rank"]), data["alpha"], tuple(data["targets"]), data["dropout"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"a LoRA spec needs rank, alpha, targets and dropout: {exc!r}") from None


class LoRALinear(nn.Module):
    """A frozen ``nn.Linear`` with a trainable low-rank change: y = x·Wᵀ + b + (α/r)·dropout(x)·Aᵀ·Bᵀ.

    It holds the base layer's own ``weight`` and ``bias`` parameters (the same objects, so a tied weight stays
    tied), under the same names, beside ``lora_A`` (r, in) and ``lora_B`` (out, r).

    Args:
        base: the linear layer adapted. spec: rank, alpha and dropout.

    Shape:
        x: (..., in) -> (..., out).
    """

    def __init__(self, base: nn.Linear, spec: LoRASpec) -> None:
        super().__init__()
        self.in_features, self.out_features = base.in_features, base.out_features
        self.weight = base.weight  # (out, in), frozen
        self.bias = base.bias  # (out,) or None, frozen
        self.rank, self.alpha = spec.rank, spec.alpha
        self.scaling = spec.scaling  # α / r
        factory = {"device": base.weight.device, "dtype": base.weight.dtype}
        self.lora_A = nn.Parameter(torch.empty(spec.rank, self.in_features, **factory))  # (r, in)
        self.lora_B = nn.Parameter(torch.zeros(self.out_features, spec.rank, **factory))  # (out, r): ΔW = 0 at start
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # as nn.Linear's own weights (and peft's A)
        self.dropout = nn.Dropout(spec.dropout)

    def forward(self, x: Tensor) -> Tensor:
        """(..., in) -> (..., out)."""
        change = F.linear(F.linear(self.dropout(x), self.lora_A), self.lora_B)  # (..., r) -> (..., out)
        return F.linear(x, self.weight, self.bias) + self.scaling * change

    def merged(self) -> nn.Linear:
        """A plain ``nn.Linear`` with W' = W + (α/r)·B·A and the same bias."""
        linear = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None)
        linear.to(device=self.weight.device, dtype=self.weight.dtype)
        with torch.no_grad():
            linear.weight.copy_(self.weight + self.scaling * (self.lora_B @ self.lora_A))  # (out, in)
            if self.bias is not None:
                linear.bias.copy_(self.bias)
        return linear

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, rank={self.rank}, alpha={self.alpha:g}"
        )


def add_adapters(model: nn.Module, spec: LoRASpec) -> list[str]:
    """Wrap every ``nn.Linear`` of ``model`` named by ``spec.targets`` in a :class:`LoRALinear`, in place, and freeze
    every parameter but the adapters' and a classifier head's (``classifier.``).

    Returns:
        The qualified names of the adapted layers, in model order.

    Raises:
        ConfigError: the model has adapters already; a target names no linear layer of the model (the message lists
            the names it has); the target ``generator`` while the generator's weight is tied to an embedding
            (merging would untie them).
    """
    if is_adapted(model):
        raise ConfigError("the model has LoRA adapters already")
    linears = {
        name: module
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and not name.startswith(HEAD_PREFIX)
    }
    known = sorted({name.rsplit(".", 1)[-1] for name in linears})
    for target in spec.targets:
        if target not in known:
            raise ConfigError(f"LoRA target {target!r} names no linear layer of this model (it has {', '.join(known)})")
    chosen = [name for name in linears if name.rsplit(".", 1)[-1] in spec.targets]
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    for name in chosen:
        if id(linears[name].weight) in embeddings:
            raise ConfigError(
                f"LoRA target {name!r}: its weight is tied to an embedding (tie_output), which the adapters would "
                f"untie when merged; adapt the attention or feed-forward layers instead"
            )
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    for name in chosen:
        parent, _, attribute = name.rpartition(".")
        owner = model.get_submodule(parent) if parent else model
        setattr(owner, attribute, LoRALinear(linears[name], spec))
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(is_trained(name))
    return chosen


def is_trained(name: str) -> bool:
    """Whether the state-dict entry ``name`` of an adapted model trains (and is saved): an adapter's A or B, or a
    classifier head's tensor."""
    return name.rsplit(".", 1)[-1] in ADAPTER_NAMES or name.startswith(HEAD_PREFIX)


def is_adapted(model: nn.Module) -> bool:
    """Whether ``model`` holds LoRA adapters."""
    return any(isinstance(module, LoRALinear) for module in model.modules())


def spec_of(model: nn.Module) -> LoRASpec:
    """The :class:`LoRASpec` of an adapted model, read from its layers (targets in sorted order).

    Raises:
        ConfigError: the model has no adapters.
    """
    layers = [(name, m) for name, m in model.named_modules() if isinstance(m, LoRALinear)]
    if not layers:
        raise ConfigError("the model has no LoRA adapters")
    layer = layers[0][1]
    targets = tuple(sorted({name.rsplit(".", 1)[-1] for name, _ in layers}))
    return LoRASpec(layer.rank, layer.alpha, targets, layer.dropout.p)


def adapter_state(model: nn.Module) -> dict[str, Tensor]:
    """What an adapted model's checkpoint saves: the adapters' A and B, and a classifier head (by state-dict name)."""
    return {name: tensor for name, tensor in model.state_dict().items() if is_trained(name)}


def merge_adapters(model: nn.Module) -> nn.Module:
    """Fold every adapter into its weight, in place: each :class:`LoRALinear` becomes the plain ``nn.Linear`` of
    :meth:`LoRALinear.merged`, and every parameter trains again. Returns ``model`` (a plain model, which saves,
    exports and quantizes as any other)."""
    for name, module in list(model.named_modules()):
        if isinstance(module, LoRALinear):
            parent, _, attribute = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, attribute, module.merged())
    for parameter in model.parameters():
        parameter.requires_grad_(True)
    return model


__all__ = [
    "ADAPTER_NAMES",
    "DEFAULT_TARGETS",
    "LoRALinear",
    "LoRASpec",
    "adapter_state",
    "add_adapters",
    "is_adapted",
    "is_trained",
    "merge_adapters",
    "spec_of",
]
