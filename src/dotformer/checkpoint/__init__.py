"""Checkpoints: safetensors weights, JSON config, tokenizer files and training state; never a pickle.

A checkpoint is a directory::

    model.safetensors        the weights (tied weights stored once; the aliases are in the file's metadata)
    config.json              {"model": ModelConfig.to_dict(), "task": ..., "data": {...}, "step": ..., ...}
    tokenizer_src.json       the source tokenizer (dotformer.data.tokenize.tokenizers)
    tokenizer_tgt.json       the target tokenizer
    train_state.safetensors  optional: optimizer moments, RNG states, ... (every tensor of the training state)
    train_state.json         optional: the rest of the training state (step, epoch, batch index, best metric, ...)
    manifest.json            size and SHA-256 of every file above, checked on load (truncation, corruption)

A run directory holds the last few step checkpoints, ``best/`` and ``last/`` (:mod:`~dotformer.checkpoint.rundir`).
Every directory is written atomically (:mod:`~dotformer.checkpoint.atomic`): a crash at any moment leaves either the
old or the new checkpoint readable. Loading reads only safetensors and JSON: nothing is unpickled, nothing is executed.

The package, by concern (every name is also reachable here, ``from dotformer.checkpoint import X``; those of averaging,
store and train_state, which need torch, are imported on first use: reading a checkpoint's files does not load torch):

* :mod:`~dotformer.checkpoint.format`       file names, safetensors weights, JSON, manifest, verification
* :mod:`~dotformer.checkpoint.files`        the config, tokenizers and fingerprint of a checkpoint, without torch
* :mod:`~dotformer.checkpoint.atomic`       atomic directory writes, what may be replaced, hard-linked copies
* :mod:`~dotformer.checkpoint.rundir`       a run's step checkpoints, best/ and last/, resume choice, crash recovery
* :mod:`~dotformer.checkpoint.train_state`  the training state (tensors + JSON skeleton)
* :mod:`~dotformer.checkpoint.store`        save_checkpoint / load_checkpoint: a whole checkpoint
* :mod:`~dotformer.checkpoint.averaging`    averaging the last checkpoints (§6.1)
"""

import os  # noqa: F401  (tests patch ``dotformer.checkpoint.os.rename`` and ``.shutil.rmtree``)
import shutil  # noqa: F401
from typing import Any

from dotformer.checkpoint.atomic import (
    atomic_directory,
    current_umask,
    is_replaceable_checkpoint,
    link_checkpoint,
    refuse_unless_checkpoint,
)
from dotformer.checkpoint.files import MODEL_FILES, CheckpointFiles, read_checkpoint_files
from dotformer.checkpoint.format import (
    CONFIG_FILE,
    FORMAT_VERSION,
    MANIFEST_FILE,
    MODEL_FILE,
    SRC_TOKENIZER_FILE,
    TGT_TOKENIZER_FILE,
    TRAIN_STATE_JSON,
    TRAIN_STATE_TENSORS,
    TRAINING_ONLY,
    CheckpointWarning,
    check_vocabulary,
    load_tokenizer_file,
    load_weights,
    load_weights_into,
    model_config_of,
    read_json,
    require_plain_weights,
    unwrap_model,
    verify_checkpoint,
    without_training_only,
)
from dotformer.checkpoint.rundir import (
    RUN_ENTRIES,
    STEP_DIR,
    TRAIN_LOCK,
    ResumePoint,
    RunBusyError,
    choose_resume_checkpoint,
    clear_run_directory,
    find_resume_checkpoint,
    is_run_directory,
    open_checkpoint,
    prune_checkpoints,
    recover_run_directory,
    resolve_checkpoint,
    run_data_dir,
    run_has_checkpoint,
    step_checkpoints,
    step_dir_name,
    training_lock,
)
from dotformer.errors import CheckpointError  # raised by every function here

# names whose modules need torch -> those modules, imported on first use (PEP 562)
_LAZY = {
    "average_checkpoints": "dotformer.checkpoint.averaging",
    "LoadedCheckpoint": "dotformer.checkpoint.store",
    "load_checkpoint": "dotformer.checkpoint.store",
    "save_checkpoint": "dotformer.checkpoint.store",
    "load_train_state": "dotformer.checkpoint.train_state",
    "save_train_state": "dotformer.checkpoint.train_state",
}


def __getattr__(name: str) -> Any:
    """The names of the modules that need torch (``load_checkpoint``, ``LoadedCheckpoint``, ...), on first use."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'dotformer.checkpoint' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "CheckpointError",
    "CONFIG_FILE",
    "CheckpointFiles",
    "CheckpointWarning",
    "FORMAT_VERSION",
    "LoadedCheckpoint",
    "MANIFEST_FILE",
    "MODEL_FILE",
    "MODEL_FILES",
    "RUN_ENTRIES",
    "ResumePoint",
    "RunBusyError",
    "TRAIN_LOCK",
    "SRC_TOKENIZER_FILE",
    "STEP_DIR",
    "TGT_TOKENIZER_FILE",
    "TRAIN_STATE_JSON",
    "TRAIN_STATE_TENSORS",
    "TRAINING_ONLY",
    "atomic_directory",
    "average_checkpoints",
    "check_vocabulary",
    "choose_resume_checkpoint",
    "clear_run_directory",
    "current_umask",
    "find_resume_checkpoint",
    "training_lock",
    "is_replaceable_checkpoint",
    "is_run_directory",
    "link_checkpoint",
    "load_checkpoint",
    "load_tokenizer_file",
    "load_train_state",
    "load_weights",
    "load_weights_into",
    "model_config_of",
    "open_checkpoint",
    "prune_checkpoints",
    "read_checkpoint_files",
    "read_json",
    "recover_run_directory",
    "refuse_unless_checkpoint",
    "require_plain_weights",
    "resolve_checkpoint",
    "run_data_dir",
    "run_has_checkpoint",
    "save_checkpoint",
    "save_train_state",
    "step_checkpoints",
    "step_dir_name",
    "unwrap_model",
    "verify_checkpoint",
    "without_training_only",
]
