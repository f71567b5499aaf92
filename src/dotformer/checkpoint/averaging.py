"""Checkpoint averaging, the paper's trick for its final models (§6.1)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from torch import Tensor

from dotformer.checkpoint.adapters import LORA_KEY, full_weights
from dotformer.checkpoint.format import (
    CONFIG_FILE,
    MODEL_FILE,
    TRAINING_ONLY,
    _load_safetensors,
    model_config_of,
    read_json,
    verify_checkpoint,
)
from dotformer.checkpoint.rundir import resolve_checkpoint
from dotformer.errors import CheckpointError


def average_checkpoints(paths: Sequence[str | Path]) -> dict[str, Tensor]:
    """The element-wise mean of the weights of several checkpoints of the same model (e.g. the last k).

    Averaging the last checkpoints is the paper's trick for its final models (§6.1: "averaging the last 5
    checkpoints"). Floating tensors are averaged in float64 and cast back; other tensors are taken from the last. A
    checkpoint of LoRA adapters gives its base's weights with the adapters merged. A training-only module's tensors
    (:data:`~dotformer.checkpoint.format.TRAINING_ONLY`: the CTC head) are left out: the average is for decoding.

    Args:
        paths: checkpoint (or run) directories, at least one.

    Returns:
        A full state dict for ``Transformer(config)`` (tied names share one tensor), on the CPU.

    Raises:
        CheckpointError: no paths, a damaged checkpoint, or checkpoints of different model configs or shapes.
    """
    if not paths:
        raise CheckpointError("average_checkpoints needs at least one checkpoint")
    dirs = [resolve_checkpoint(p) for p in paths]
    first_config = None
    sums: dict[str, Tensor] = {}
    last: dict[str, Tensor] = {}
    for directory in dirs:
        verify_checkpoint(directory)
        info = read_json(directory / CONFIG_FILE)
        config = model_config_of(info, directory / CONFIG_FILE)
        if first_config is None:
            first_config = config
        elif config != first_config:
            ours, theirs = config.to_dict(), first_config.to_dict()
            differ = [f"{k} {ours[k]!r} against {theirs.get(k)!r}" for k in ours if ours[k] != theirs.get(k)]
            more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
            raise CheckpointError(
                f"{directory / CONFIG_FILE}: model config differs from that of {dirs[0]} ({', '.join(differ[:3])}"
                f"{more}): not checkpoints of one model"
            )
        if LORA_KEY in info:  # LoRA adapters: the base's weights with them merged (A and B alone do not average)
            tensors, metadata = full_weights(directory), {}
        else:
            tensors, metadata = _load_safetensors(directory / MODEL_FILE)
        tensors = {name: t for name, t in tensors.items() if not name.startswith(TRAINING_ONLY)}
        if sums and set(tensors) != set(sums):
            raise CheckpointError(f"{directory / MODEL_FILE} holds different tensors from {dirs[0] / MODEL_FILE}")
        for name, tensor in tensors.items():
            if name in sums and sums[name].shape != tensor.shape:
                raise CheckpointError(f"{directory / MODEL_FILE}: tensor {name} has a different shape")
            value = tensor.double() if tensor.is_floating_point() else tensor
            sums[name] = sums[name] + value if name in sums else value
        last, aliases = tensors, json.loads(metadata.get("aliases", "{}"))
    averaged = {
        name: (total / len(dirs)).to(last[name].dtype) if last[name].is_floating_point() else last[name]
        for name, total in sums.items()
    }
    for alias, canonical in aliases.items():
        averaged[alias] = averaged[canonical]
    return averaged
