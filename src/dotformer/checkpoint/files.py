"""A checkpoint without its model: the config, the tokenizers and a fingerprint of the files, read without torch.

What a command needs to decode on an engine other than torch (:mod:`dotformer.engines`): the model's shape and its
task (config.json), the tokenizers that turn text into ids and back, and a fingerprint that changes whenever a file the
model is made of changes (the key of a converted copy). The files are checked against ``manifest.json`` as
:func:`~dotformer.checkpoint.format.verify_checkpoint` checks them, but only the four files a model is made of are
read (not the training state).
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dotformer.checkpoint.format import (
    CONFIG_FILE,
    MANIFEST_FILE,
    MODEL_FILE,
    SRC_TOKENIZER_FILE,
    TGT_TOKENIZER_FILE,
    CheckpointWarning,
    check_vocabulary,
    context_window_of,
    file_sha256,
    load_tokenizer_file,
    model_config_of,
    read_json,
)
from dotformer.checkpoint.rundir import resolve_checkpoint
from dotformer.config import ModelConfig
from dotformer.errors import CheckpointError

if TYPE_CHECKING:
    from dotformer.data.tokenize.tokenizers import Tokenizer

MODEL_FILES = (MODEL_FILE, CONFIG_FILE, SRC_TOKENIZER_FILE, TGT_TOKENIZER_FILE)  # what a model is made of


@dataclass(frozen=True)
class CheckpointFiles:
    """A checkpoint's config, tokenizers and file digests (no model).

    Attributes:
        path: the checkpoint directory that was read.
        config: its :class:`ModelConfig`.
        src_tokenizer, tgt_tokenizer: the tokenizers it was trained with.
        info: the contents of config.json.
        digests: SHA-256 (hex) of each of :data:`MODEL_FILES`, by file name.
    """

    path: Path
    config: ModelConfig
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    info: dict[str, Any]
    digests: dict[str, str]

    @property
    def context_window(self) -> int:
        """The most tokens the model reads at once (:func:`~dotformer.checkpoint.format.context_window_of`)."""
        return context_window_of(self.info, self.config)

    @property
    def fingerprint(self) -> str:
        """SHA-256 (hex) of the digests of the weights, config.json and the tokenizers: changes when any of them
        does, the same for two copies of one checkpoint."""
        text = "\n".join(f"{name} {self.digests[name]}" for name in MODEL_FILES)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_checkpoint_files(path: str | Path, digest: Callable[[Path], str] = file_sha256) -> CheckpointFiles:
    """Read a checkpoint's config and tokenizers (or a run directory's best/, else last/), and digest its files
    (``digest``: a file's SHA-256 in hex; :func:`dotformer.engines.digests.checkpoint_sha256` remembers them).

    Raises:
        CheckpointError: a file is missing, truncated or differs from manifest.json, the config is invalid, or the
            tokenizers' vocabulary sizes differ from the config. The message names the file.

    Warns:
        CheckpointWarning: the checkpoint has no manifest.json (its files are read unchecked).
    """
    path = resolve_checkpoint(path)
    for name in MODEL_FILES:
        if not (path / name).is_file():
            raise CheckpointError(f"checkpoint file {path / name} is missing")
    digests = {name: digest(path / name) for name in MODEL_FILES}
    check_digests(path, digests)
    info = read_json(path / CONFIG_FILE)
    config = model_config_of(info, path / CONFIG_FILE)
    src_tokenizer = load_tokenizer_file(path / SRC_TOKENIZER_FILE)
    tgt_tokenizer = load_tokenizer_file(path / TGT_TOKENIZER_FILE)
    check_vocabulary(config, src_tokenizer, tgt_tokenizer, path)
    return CheckpointFiles(path, config, src_tokenizer, tgt_tokenizer, info, digests)


def check_digests(path: Path, digests: dict[str, str]) -> None:
    """Compare ``digests`` (file name -> SHA-256) with the checkpoint's manifest.json.

    Raises:
        CheckpointError: a file whose size or digest differs from the manifest's (truncated or corrupted).

    Warns:
        CheckpointWarning: there is no manifest.json.
    """
    manifest_path = path / MANIFEST_FILE
    if not manifest_path.is_file():
        warnings.warn(
            f"checkpoint {path} has no {MANIFEST_FILE}: its files cannot be checked for corruption",
            CheckpointWarning,
            stacklevel=3,
        )
        return
    files = read_json(manifest_path).get("files")
    if not isinstance(files, dict):
        raise CheckpointError(f"{manifest_path} is corrupted: no 'files' table")
    for name, digest in digests.items():
        expected = files.get(name)
        if not isinstance(expected, dict):
            continue  # a file the manifest does not list is read as it is
        size = (path / name).stat().st_size
        if size != expected.get("bytes"):
            raise CheckpointError(
                f"checkpoint file {path / name} is truncated or altered: {size} bytes, expected {expected.get('bytes')}"
            )
        if digest != expected.get("sha256"):
            raise CheckpointError(
                f"checkpoint file {path / name} is corrupted: its SHA-256 differs from {manifest_path}"
            )
