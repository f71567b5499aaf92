"""A whole checkpoint written and read back: :func:`save_checkpoint` and :func:`load_checkpoint`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from dotformer.checkpoint.adapters import load_model_weights, save_adapters
from dotformer.checkpoint.atomic import atomic_directory
from dotformer.checkpoint.format import (
    CONFIG_FILE,
    FORMAT_VERSION,
    MODEL_FILE,
    SRC_TOKENIZER_FILE,
    TGT_TOKENIZER_FILE,
    _save_weights,
    _write_json,
    _write_manifest,
    check_vocabulary,
    context_window_of,
    load_tokenizer_file,
    require_plain_weights,
    unwrap_model,
)
from dotformer.checkpoint.rundir import open_checkpoint
from dotformer.checkpoint.train_state import save_train_state
from dotformer.config import ModelConfig
from dotformer.lora import is_adapted
from dotformer.model import Transformer

if TYPE_CHECKING:
    from dotformer.data.tokenize.tokenizers import Tokenizer


@dataclass
class LoadedCheckpoint:
    """A checkpoint read back from disk.

    Attributes:
        model: the :class:`Transformer`, in eval mode, on the requested device.
        config: its :class:`ModelConfig`.
        src_tokenizer, tgt_tokenizer: the tokenizers it was trained with.
        info: the contents of config.json (model config, task, data config, step, ...).
        path: the checkpoint directory that was read.
    """

    model: Transformer
    config: ModelConfig
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    info: dict[str, Any]
    path: Path

    @property
    def context_window(self) -> int:
        """The most tokens the model reads at once: the block size it trained on (``info["data"]["block_size"]``),
        else its ``max_len`` (:func:`~dotformer.checkpoint.format.context_window_of`)."""
        return context_window_of(self.info, self.config)


def save_checkpoint(
    directory: str | Path,
    model: nn.Module,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    info: dict[str, Any],
    train_state: dict[str, Any] | None = None,
) -> Path:
    """Write a checkpoint directory atomically (temporary sibling, fsync, rename; an old one is replaced safely).

    Args:
        directory: the checkpoint directory to create or replace.
        model: a :class:`Transformer` (its ``config`` is saved as ``config.json["model"]``); a DDP or compiled
            wrapper is unwrapped.
        src_tokenizer, tgt_tokenizer: saved as tokenizer_src.json and tokenizer_tgt.json.
        info: JSON-serialisable facts saved in config.json next to "model" (task, data config, step, ...).
            A model with LoRA adapters (:mod:`dotformer.lora`) saves only what trained, and needs ``info["lora"]``
            naming its base (:mod:`~dotformer.checkpoint.adapters`).
        train_state: optional nested dict of tensors and JSON values (optimizer state, RNG, data position, ...):
            tensors go to train_state.safetensors, everything else to train_state.json.

    Returns:
        The checkpoint directory.

    Raises:
        ConfigError: the model has int8 linear layers (:func:`dotformer.decoding.quantization.quantize_int8`) or other
            packed weights (:func:`~dotformer.checkpoint.format.require_plain_weights`).
    """
    directory = Path(directory)
    model = unwrap_model(model)
    require_plain_weights(model)  # an int8 copy is for decoding only
    config = model.config
    with atomic_directory(directory) as tmp:
        if is_adapted(model):  # LoRA: the adapters (and a head) only, with info["lora"] naming the base
            save_adapters(model, tmp / MODEL_FILE, info)
        else:
            _save_weights(model, tmp / MODEL_FILE)
        info = {k: v for k, v in info.items() if k not in ("model", "format_version")}  # the model's own config wins
        _write_json(tmp / CONFIG_FILE, {"model": config.to_dict(), **info, "format_version": FORMAT_VERSION})
        src_tokenizer.save(tmp / SRC_TOKENIZER_FILE)
        tgt_tokenizer.save(tmp / TGT_TOKENIZER_FILE)
        if train_state is not None:
            save_train_state(tmp, train_state)
        _write_manifest(tmp)
    return directory


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu") -> LoadedCheckpoint:
    """Read a checkpoint (or a run directory's best/, else last/) back into a model in eval mode.

    Args:
        path: a checkpoint directory or a run directory.
        device: where to put the model.

    Returns:
        :class:`LoadedCheckpoint` (model, config, src_tokenizer, tgt_tokenizer, info, path).

    An adapted checkpoint (LoRA) is read onto its base and its adapters merged into the weights: the model is plain.

    Raises:
        CheckpointError: a file is missing, truncated or corrupted, the config is invalid, the tokenizers' vocabulary
            sizes differ from the config, or the weights do not fit the config (an adapted checkpoint: its base is
            missing or changed). The message names the file.
    """
    path, info, config = open_checkpoint(path)
    src_tokenizer = load_tokenizer_file(path / SRC_TOKENIZER_FILE)
    tgt_tokenizer = load_tokenizer_file(path / TGT_TOKENIZER_FILE)
    check_vocabulary(config, src_tokenizer, tgt_tokenizer, path)
    model = Transformer(config)
    load_model_weights(model, path, info)  # LoRA adapters: put on their base and merged
    model.to(device).eval()
    return LoadedCheckpoint(model, config, src_tokenizer, tgt_tokenizer, info, path)
