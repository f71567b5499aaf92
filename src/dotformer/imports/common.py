"""What every importer shares: reading a Hugging Face directory (config.json, safetensors only), and copying its
tensors into a dotformer model layer by layer (:class:`TensorReader`, the walk of :mod:`dotformer.export.params`)
with every tensor and every parameter accounted for."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from dotformer.errors import CheckpointError, ConfigError
from dotformer.export.params import READS_STREAM, Converter, EngineNames

PICKLE_NAMES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5", "flax_model.msgpack")


def read_hf_config(directory: Path) -> dict[str, Any]:
    """``directory/config.json`` as a dict.

    Raises:
        CheckpointError: no directory, no config.json, or not a JSON object (naming the file).
    """
    if not directory.is_dir():
        raise CheckpointError(f"{directory} is not a directory (give a local Hugging Face model directory)")
    path = directory / "config.json"
    data = read_json_file(path, ": not a Hugging Face model directory")
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} is not a JSON object")
    return data


def read_safetensors(directory: Path) -> dict[str, Tensor]:
    """Every tensor of ``model.safetensors`` (or of the shards listed in ``model.safetensors.index.json``).

    Nothing else is read: a ``pytorch_model.bin`` is a pickle, which can run code when it is loaded.

    Raises:
        CheckpointError: no safetensors file (with the reason when only a pickle is there), or a damaged one.
    """
    from safetensors import SafetensorError, safe_open

    single, index = directory / "model.safetensors", directory / "model.safetensors.index.json"
    if single.is_file():
        files = [single]
    elif index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            files = [directory / name for name in sorted(set(weight_map.values()))]
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise CheckpointError(f"{index} is not a safetensors index ({exc})") from None
    else:
        pickles = [name for name in PICKLE_NAMES if (directory / name).exists()]
        if pickles:
            raise CheckpointError(
                f"{directory} has {pickles[0]} but no model.safetensors: dotformer reads safetensors only (a .bin is a "
                f"pickle, which can run code when loaded); convert it where you trust it, e.g. save_pretrained()"
            )
        raise CheckpointError(f"{single} is missing")
    tensors: dict[str, Tensor] = {}
    for file in files:
        try:
            with safe_open(str(file), framework="pt", device="cpu") as f:
                for name in f.keys():  # noqa: SIM118 (safe_open has no __iter__)
                    tensors[name] = f.get_tensor(name)
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            raise CheckpointError(f"{file} is missing, truncated or not safetensors ({exc})") from None
    return tensors


def read_json_file(path: Path, missing: str = "") -> Any:
    """A JSON file's contents. Raises CheckpointError naming the file when it is missing (``missing`` says more) or
    not JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing{missing}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path} is not valid JSON ({exc})") from None


class TensorSource:
    """The tensors of a Hugging Face checkpoint, handed out by name; :meth:`check_all_used` finds leftovers.

    Args:
        tensors: name -> tensor (names with or without a ``prefix`` such as ``"model."``).
        where: the directory, for messages.
        prefixes: prefixes tried in order when a name is looked up.
    """

    def __init__(self, tensors: dict[str, Tensor], where: Path, prefixes: tuple[str, ...] = ("",)) -> None:
        self.tensors = tensors
        self.where = where
        self.prefixes = prefixes
        self.used: set[str] = set()

    def find(self, *names: str) -> Tensor | None:
        """The first of ``names`` (under any prefix) that is present, marked as used; None if none is."""
        for name in names:
            for prefix in self.prefixes:
                key = prefix + name
                if key in self.tensors:
                    self.used.add(key)
                    return self.tensors[key]
        return None

    def get(self, name: str, shape: tuple[int, ...] | None = None) -> Tensor:
        """The tensor ``name``, checked against ``shape``.

        Raises:
            CheckpointError: missing, or of another shape (naming both).
        """
        tensor = self.find(name)
        if tensor is None:
            raise CheckpointError(f"{self.where}: the weights have no tensor {name!r}")
        if shape is not None and tuple(tensor.shape) != shape:
            raise CheckpointError(
                f"{self.where}: tensor {name!r} has shape {tuple(tensor.shape)}, config.json implies {shape}"
            )
        return tensor

    def check_all_used(self, ignore: Callable[[str], bool] = lambda name: False) -> None:
        """Raise CheckpointError if some tensor was not copied (a part of the model dotformer would drop)."""
        left = sorted(name for name in self.tensors if name not in self.used and not ignore(name))
        if left:
            raise CheckpointError(
                f"{self.where}: {len(left)} tensor(s) have no place in the dotformer model, e.g. {left[:3]}; "
                f"refusing to drop them"
            )


class Copier:
    """Copies tensors into a model's parameters and checks that every parameter got one."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.filled: set[int] = set()

    @torch.no_grad()
    def copy(self, target: Tensor, value: Tensor, name: str) -> None:
        """target <- value (same shape; cast to target's dtype).

        Raises:
            CheckpointError: the shapes differ (naming ``name``).
        """
        if tuple(target.shape) != tuple(value.shape):
            raise CheckpointError(f"{name}: shape {tuple(value.shape)} does not fit dotformer's {tuple(target.shape)}")
        target.copy_(value.to(target.dtype))
        self.filled.add(id(target))

    def check_all_filled(self) -> None:
        """Raise CheckpointError naming a parameter that received nothing (a bug in the mapping, never silent)."""
        for name, parameter in self.model.named_parameters():
            if id(parameter) not in self.filled:
                raise CheckpointError(f"the import left dotformer parameter {name} unset")


class TensorReader(Converter):
    """Copies a checkpoint's flat tensors (``NAME.weight``, ``NAME.bias``) into a dotformer model, by an engine's names.

    Args:
        names: the engine's names for dotformer's parameters (:mod:`dotformer.export.params`).
        source: the checkpoint's tensors.
        copier: the copier of the model being filled.
        perm: (D,) LongTensor or None: dotformer's dimension j is the checkpoint's ``perm[j]`` (HF Marian's
            sines-first D axis); every tensor that reads or writes the residual stream is permuted by it.
    """

    def __init__(self, names: EngineNames, source: TensorSource, copier: Copier, perm: Tensor | None = None) -> None:
        super().__init__(names)
        self.source, self.copier, self.perm = source, copier, perm

    def copy_linear(self, ours: Sequence[nn.Linear], theirs: str, roles: tuple[str, ...]) -> None:
        """One linear layer: ``theirs.weight`` (out, in), ``theirs.bias`` (out,), permuted on the D side.

        Raises:
            CheckpointError: a tensor is missing or of another shape. ConfigError: the dotformer layer has no bias.
        """
        (target,) = ours
        shape = tuple(target.weight.shape)
        weight = self.source.get(theirs + ".weight", shape)
        if target.bias is None:
            raise ConfigError(f"{theirs}: dotformer layer without bias")
        bias = self.source.get(theirs + ".bias", (shape[0],))
        if self.perm is not None and roles[0] in READS_STREAM:
            weight = weight[:, self.perm]
        elif self.perm is not None:
            weight, bias = weight[self.perm], bias[self.perm]
        self.copier.copy(target.weight, weight, theirs)
        self.copier.copy(target.bias, bias, theirs + ".bias")

    def copy_norm(self, ours: nn.LayerNorm, theirs: str) -> None:
        """``theirs.weight`` and ``theirs.bias`` (D,), permuted."""
        shape = tuple(ours.weight.shape)
        for part in ("weight", "bias"):
            tensor = self.source.get(f"{theirs}.{part}", shape)
            tensor = tensor[self.perm] if self.perm is not None else tensor
            self.copier.copy(getattr(ours, part), tensor, theirs if part == "weight" else f"{theirs}.bias")
