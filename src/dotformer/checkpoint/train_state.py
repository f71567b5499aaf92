"""The training state saved with a checkpoint: a nested dict whose tensors go to ``train_state.safetensors`` and
whose JSON skeleton (with ``{"__tensor__": "state.a.b"}`` placeholders) goes to ``train_state.json``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import Tensor

from dotformer.checkpoint.format import (
    TRAIN_STATE_JSON,
    TRAIN_STATE_TENSORS,
    _load_safetensors,
    _save_safetensors,
    _write_json,
    read_json,
)
from dotformer.errors import CheckpointError


def save_train_state(directory: Path, train_state: dict[str, Any]) -> None:
    """Write ``train_state`` (tensors and JSON values) into the checkpoint being written at ``directory``.

    Raises:
        TypeError: a value that is neither a tensor nor JSON, or a dict with mixed key types.
        CheckpointError: the tensors could not be written (a full disk).
    """
    tensors: dict[str, Tensor] = {}
    skeleton = _split_tensors(train_state, "state", tensors)
    _save_safetensors(tensors, directory / TRAIN_STATE_TENSORS)
    _write_json(directory / TRAIN_STATE_JSON, skeleton)


def load_train_state(path: str | Path) -> dict[str, Any]:
    """The training state saved with a checkpoint (tensors put back in place).

    Raises:
        CheckpointError: the checkpoint has no training state, or its files are missing or damaged.
    """
    path = Path(path)
    if not (path / TRAIN_STATE_JSON).is_file() or not (path / TRAIN_STATE_TENSORS).is_file():
        raise CheckpointError(
            f"checkpoint {path} has no training state ({TRAIN_STATE_JSON}, {TRAIN_STATE_TENSORS}); it cannot resume"
        )
    skeleton = read_json(path / TRAIN_STATE_JSON)
    tensors, _ = _load_safetensors(path / TRAIN_STATE_TENSORS)
    return _join_tensors(skeleton, tensors, path / TRAIN_STATE_TENSORS)


def _split_tensors(obj: Any, prefix: str, tensors: dict[str, Tensor]) -> Any:
    """A JSON skeleton of ``obj`` with every tensor moved into ``tensors`` under a dotted path."""
    if isinstance(obj, Tensor):
        tensors[prefix] = obj
        return {"__tensor__": prefix}
    if isinstance(obj, dict):
        if all(isinstance(k, int) and not isinstance(k, bool) for k in obj) and obj:
            return {"__int_keys__": {str(k): _split_tensors(v, f"{prefix}.{k}", tensors) for k, v in obj.items()}}
        if not all(isinstance(k, str) for k in obj):
            raise TypeError(f"train state keys must be all str or all int at {prefix}")
        return {k: _split_tensors(v, f"{prefix}.{k}", tensors) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_split_tensors(v, f"{prefix}.{i}", tensors) for i, v in enumerate(obj)]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"train state value at {prefix} has unsupported type {type(obj).__name__}")


def _join_tensors(obj: Any, tensors: dict[str, Tensor], source: Path) -> Any:
    """Inverse of :func:`_split_tensors`."""
    if isinstance(obj, dict):
        if set(obj) == {"__tensor__"}:
            if obj["__tensor__"] not in tensors:
                raise CheckpointError(f"{source} is missing tensor {obj['__tensor__']}")
            return tensors[obj["__tensor__"]]
        if set(obj) == {"__int_keys__"}:
            return {int(k): _join_tensors(v, tensors, source) for k, v in obj["__int_keys__"].items()}
        return {k: _join_tensors(v, tensors, source) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_join_tensors(v, tensors, source) for v in obj]
    return obj
