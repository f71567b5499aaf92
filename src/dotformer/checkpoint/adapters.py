"""Checkpoints of models with LoRA adapters (:mod:`dotformer.lora`): only what trained is saved, with a reference to
the base checkpoint it sits on, and read back onto that base.

An adapted run's checkpoint has the usual files (:mod:`dotformer.checkpoint`); its ``model.safetensors`` holds only
the adapters' A and B (and a classifier head, which trains whole), and its config.json says what they sit on::

    "lora": {"rank": 8, "alpha": 16.0, "targets": ["W_q", "W_v"], "dropout": 0.0,
             "base": "/abs/path/runs/lm/best", "base_sha256": "<SHA-256 of the base's model.safetensors>"}

The base is any checkpoint: a trained or imported one, or another adapted one (read with its own adapters merged).
A base that is missing, or whose weights changed since (another SHA-256), is refused in one line. Reading an adapted
checkpoint for decoding (:func:`load_model_weights`) merges the adapters into the weights: what decodes and exports
is a plain model.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dotformer.checkpoint.format import (
    CONFIG_FILE,
    MODEL_FILE,
    _save_safetensors,
    check_fits,
    file_sha256,
    load_weights,
    load_weights_into,
    model_config_of,
    read_json,
    verify_checkpoint,
    without_training_only,
)
from dotformer.errors import CheckpointError, ConfigError
from dotformer.lora import HEAD_PREFIX, LoRASpec, adapter_state, add_adapters, is_trained, merge_adapters, spec_of
from dotformer.model import Transformer

if TYPE_CHECKING:
    from torch import Tensor, nn

LORA_KEY = "lora"  # config.json's table of an adapted checkpoint


def base_reference(model: nn.Module, base: str | Path) -> dict[str, Any]:
    """config.json's ``"lora"`` table for an adapted ``model`` whose frozen weights are the checkpoint ``base``'s:
    its spec, the base's absolute path and the SHA-256 of its weights file."""
    base = Path(base).resolve()
    return {**spec_of(model).to_dict(), "base": str(base), "base_sha256": file_sha256(base / MODEL_FILE)}


def spec_in(info: dict[str, Any], where: Path) -> LoRASpec:
    """The :class:`LoRASpec` of an adapted checkpoint's config.json (``info``, read from ``where``).

    Raises:
        CheckpointError: the ``"lora"`` table is damaged.
    """
    table = info.get(LORA_KEY)
    try:
        if not isinstance(table, dict):
            raise ConfigError(f"'{LORA_KEY}' is not a table")
        return LoRASpec.from_dict(table)
    except ConfigError as exc:
        raise CheckpointError(f"{where}: damaged '{LORA_KEY}' table: {exc}") from None


def checked_base(path: Path, info: dict[str, Any]) -> Path:
    """The base checkpoint an adapted checkpoint ``path`` refers to, checked: there, whole, and with the weights
    the adapters were trained on.

    Raises:
        CheckpointError: no base recorded, the base is missing or damaged, or its weights changed.
    """
    table = info.get(LORA_KEY) or {}
    if not isinstance(table.get("base"), str):
        raise CheckpointError(f"{path / CONFIG_FILE}: the LoRA adapters name no base checkpoint")
    base = Path(table["base"])
    if not (base / MODEL_FILE).is_file():
        raise CheckpointError(
            f"the LoRA adapters of {path} sit on the base checkpoint {base}, which is missing (its weights are not "
            f"saved with the adapters)"
        )
    verify_checkpoint(base)
    if file_sha256(base / MODEL_FILE) != table.get("base_sha256"):
        raise CheckpointError(
            f"the LoRA adapters of {path} were trained on other weights than {base / MODEL_FILE} holds now (its "
            f"SHA-256 differs from the one in {path / CONFIG_FILE})"
        )
    return base


def full_weights(path: Path) -> dict[str, Tensor]:
    """The whole state dict of the checkpoint ``path``: its weights file, or for an adapted checkpoint its base's
    weights with the adapters merged in.

    Raises:
        CheckpointError: a damaged checkpoint or base, or weights that do not fit its config.
    """
    info = read_json(path / CONFIG_FILE)
    if LORA_KEY not in info:
        return load_weights(path / MODEL_FILE)

    model = Transformer(model_config_of(info, path / CONFIG_FILE))
    return load_model_weights(model, path, info).state_dict()


def load_base(model: nn.Module, weights: dict[str, Tensor], where: Path, head: bool = True) -> None:
    """Copy a base's ``weights`` into every frozen tensor of ``model`` (strict: same names, same shapes): its
    adapters keep their values, and so does its classifier head unless ``head`` asks for the base's (one of the
    same task and labels). A model without adapters takes every tensor (its head as ``head`` says).

    Raises:
        CheckpointError: tensors missing, unexpected or of another shape, naming ``where``.
    """
    state = model.state_dict()
    weights = without_training_only(weights, state)  # a base trained with a CTC head: the head stays behind
    kept = {name for name in state if is_trained(name) and not (head and name.startswith(HEAD_PREFIX))}
    expected = {name: t for name, t in state.items() if name not in kept}
    given = {name: t for name, t in weights.items() if not (name.startswith(HEAD_PREFIX) and name not in expected)}
    check_fits(given, expected, where, "the model")
    model.load_state_dict(given, strict=False)


def load_adapted(model: nn.Module, path: Path, info: dict[str, Any]) -> None:
    """Fill an adapted ``model`` from the adapted checkpoint ``path`` (``info``: its config.json): the base's weights
    into the frozen tensors, then the checkpoint's adapters (and head).

    Raises:
        CheckpointError: another spec than the model's, a missing, damaged or changed base, or tensors that do not fit.
    """
    spec = spec_in(info, path / CONFIG_FILE)
    if spec != spec_of(model):
        raise CheckpointError(
            f"{path}: its LoRA adapters are {_described(spec)}, the model's are {_described(spec_of(model))}"
        )
    base = checked_base(path, info)
    load_base(model, full_weights(base), base, head=False)
    expected = {name: t for name, t in model.state_dict().items() if is_trained(name)}
    adapters = load_weights(path / MODEL_FILE)
    check_fits(adapters, expected, path / MODEL_FILE, "the model")
    model.load_state_dict(adapters, strict=False)


def load_model_weights(model: nn.Module, path: Path, info: dict[str, Any]) -> nn.Module:
    """Fill a plain model built from the checkpoint's config with its weights; an adapted checkpoint's adapters are
    put on the base and merged (:func:`dotformer.lora.merge_adapters`). Returns ``model``.

    Raises:
        CheckpointError: what :func:`~dotformer.checkpoint.format.load_weights_into` and :func:`load_adapted` raise.
    """
    if LORA_KEY not in info:
        load_weights_into(model, path / MODEL_FILE)
        return model
    try:
        add_adapters(model, spec_in(info, path / CONFIG_FILE))
    except ConfigError as exc:
        raise CheckpointError(f"{path / CONFIG_FILE}: {exc}") from None
    load_adapted(model, path, info)
    return merge_adapters(model)


def save_adapters(model: nn.Module, path: Path, info: dict[str, Any]) -> None:
    """Write what an adapted ``model`` trained (:func:`dotformer.lora.adapter_state`) to the weights file ``path``.

    Raises:
        ConfigError: ``info`` has no ``"lora"`` table naming the base (the adapters would be unreadable).
    """
    table = info.get(LORA_KEY)
    if not isinstance(table, dict) or not isinstance(table.get("base"), str):
        raise ConfigError(
            "a model with LoRA adapters saves them with a reference to its base checkpoint: the checkpoint's info "
            "needs a 'lora' table (dotformer.checkpoint.adapters.base_reference)"
        )
    _save_safetensors(adapter_state(model), path, {"aliases": "{}"})


def _described(spec: LoRASpec) -> str:
    return f"rank {spec.rank}, alpha {spec.alpha:g}, dropout {spec.dropout:g} on {', '.join(spec.targets)}"


__all__ = [
    "LORA_KEY",
    "base_reference",
    "checked_base",
    "full_weights",
    "load_adapted",
    "load_base",
    "load_model_weights",
    "save_adapters",
    "spec_in",
]
