"""The on-disk format of one checkpoint directory: file names, safetensors weights, JSON, manifest, verification.

The files of a checkpoint (see :mod:`dotformer.checkpoint`) are written once and never modified; this module reads
and writes each of them and checks them against ``manifest.json`` (sizes and SHA-256). Loading reads only
safetensors and JSON: nothing is unpickled, nothing is executed.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dotformer.config import ModelConfig
from dotformer.errors import CheckpointError, ConfigError, DotformerError

if TYPE_CHECKING:
    from torch import Tensor, nn

    from dotformer.data.tokenize.tokenizers import Tokenizer


MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
SRC_TOKENIZER_FILE = "tokenizer_src.json"
TGT_TOKENIZER_FILE = "tokenizer_tgt.json"
TRAIN_STATE_TENSORS = "train_state.safetensors"
TRAIN_STATE_JSON = "train_state.json"
MANIFEST_FILE = "manifest.json"
FORMAT_VERSION = 1
# tensors of modules that only training reads (the CTC head of joint CTC/attention training, dotformer.training.ctc):
# saved with the weights, so that a resumed run continues them; a model built for decoding or export has no such
# module, and its loading leaves them out
TRAINING_ONLY = ("ctc_head.",)


class CheckpointWarning(UserWarning):
    """Something about a checkpoint that a user should know but that does not stop the command (a checkpoint
    without a manifest, a damaged newest checkpoint skipped on resume)."""


def verify_checkpoint(path: str | Path) -> None:
    """Check that every file of the checkpoint is there, complete and unchanged (sizes and SHA-256 of manifest.json).

    Raises:
        CheckpointError: naming the missing, truncated or corrupted file.

    Warns:
        CheckpointWarning: the checkpoint has no manifest.json (its files are read unchecked).
    """
    path = Path(path)
    for name in (MODEL_FILE, CONFIG_FILE, SRC_TOKENIZER_FILE, TGT_TOKENIZER_FILE):
        if not (path / name).is_file():
            raise CheckpointError(f"checkpoint file {path / name} is missing")
    manifest_path = path / MANIFEST_FILE
    if not manifest_path.is_file():  # written by another tool, or edited: the readers still reject truncated files
        warnings.warn(
            f"checkpoint {path} has no {MANIFEST_FILE}: its files cannot be checked for corruption",
            CheckpointWarning,
            stacklevel=2,
        )
        return
    manifest = read_json(manifest_path)
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise CheckpointError(f"{manifest_path} is corrupted: no 'files' table")
    for name, expected in files.items():
        file = path / name
        if not file.is_file():
            raise CheckpointError(f"checkpoint file {file} is missing (listed in {manifest_path})")
        size = file.stat().st_size
        if size != expected.get("bytes"):
            raise CheckpointError(
                f"checkpoint file {file} is truncated or altered: {size} bytes, expected {expected.get('bytes')}"
            )
        if file_sha256(file) != expected.get("sha256"):
            raise CheckpointError(f"checkpoint file {file} is corrupted: its SHA-256 differs from {manifest_path}")


def load_weights(path: str | Path) -> dict[str, Tensor]:
    """The full state dict stored in a ``model.safetensors`` file (tied names point to the same tensor).

    Raises:
        CheckpointError: the file is missing, truncated or not a safetensors file.
    """
    tensors, metadata = _load_safetensors(Path(path))
    aliases = json.loads(metadata.get("aliases", "{}"))
    for alias, canonical in aliases.items():
        if canonical not in tensors:
            raise CheckpointError(f"{path} is corrupted: alias {alias} points to a missing tensor {canonical}")
        tensors[alias] = tensors[canonical]
    return tensors


def load_weights_into(model: nn.Module, path: str | Path, fresh: tuple[str, ...] = ()) -> None:
    """Copy the weights of ``path`` into ``model`` (strict: same names, same shapes). The tensors of a training-only
    module (:data:`TRAINING_ONLY`: the CTC head) are left out when ``model`` has none (decoding, export).

    Args:
        model: the model to fill. path: a ``model.safetensors`` file.
        fresh: name prefixes of tensors that keep the model's own values (a fine-tuned encoder's new head,
            ``("classifier.",)``): neither needed in the file nor copied from it.

    Raises:
        CheckpointError: missing, unexpected or mis-shaped tensors, naming the file and the first names.
    """
    expected = {name: t for name, t in model.state_dict().items() if not name.startswith(fresh)}
    state = without_training_only(load_weights(path), expected)
    state = {name: t for name, t in state.items() if not name.startswith(fresh)}
    check_fits(state, expected, path, "the model config")
    model.load_state_dict(state, strict=not fresh)


def check_fits(state: dict[str, Tensor], expected: dict[str, Tensor], where: Any, model: str) -> None:
    """Raise CheckpointError unless ``state`` has the names and shapes of ``expected`` (``model`` names its owner in
    the message, ``where`` the file): the first missing, unexpected or mis-shaped tensors are named."""
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{where} does not fit {model}: missing {missing[:3]}, unexpected {unexpected[:3]} "
            f"({len(missing)} missing, {len(unexpected)} unexpected)"
        )
    for name, tensor in state.items():
        if tensor.shape != expected[name].shape:
            raise CheckpointError(
                f"{where}: tensor {name} has shape {tuple(tensor.shape)}, {model} needs {tuple(expected[name].shape)}"
            )


def without_training_only(weights: dict[str, Tensor], expected: dict[str, Tensor]) -> dict[str, Tensor]:
    """``weights`` without the tensors of training-only modules (:data:`TRAINING_ONLY`) that ``expected`` (a model's
    state dict) does not hold: what decoding and export read of a checkpoint trained with a CTC head."""
    kept = tuple(prefix for prefix in TRAINING_ONLY if any(name.startswith(prefix) for name in expected))
    dropped = tuple(prefix for prefix in TRAINING_ONLY if prefix not in kept)
    return {name: t for name, t in weights.items() if not (dropped and name.startswith(dropped))}


def load_tokenizer_file(path: Path) -> Tokenizer:
    """A checkpoint's tokenizer file. Raises CheckpointError naming the file when it is missing or damaged."""
    from dotformer.data.tokenize.tokenizer_files import load_tokenizer

    if not path.is_file():
        raise CheckpointError(f"checkpoint file {path} is missing")
    try:
        return load_tokenizer(path)
    except (DotformerError, ValueError, KeyError, TypeError, OSError) as exc:
        raise CheckpointError(f"tokenizer file {path} is corrupted: {exc}") from None


def model_config_of(info: dict[str, Any], source: Path) -> ModelConfig:
    """The :class:`ModelConfig` stored under "model" in a config.json dict.

    Raises:
        CheckpointError: missing or invalid, naming ``source``.
    """
    if not isinstance(info.get("model"), dict):
        raise CheckpointError(f"{source} has no 'model' section")
    try:
        return ModelConfig.from_dict(info["model"])
    except DotformerError as exc:
        raise CheckpointError(f"{source}: invalid model config: {exc}") from None


def context_window_of(info: dict[str, Any], config: ModelConfig) -> int:
    """The most tokens a model reads at once: the block size it trained on (``info["data"]["block_size"]``, a
    language model's), else its ``max_len``."""
    data = info.get("data") or {}
    block = data.get("block_size") if isinstance(data, dict) else None
    return int(block) if block else config.max_len


def check_vocabulary(config: ModelConfig, src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer, path: Path) -> None:
    """Raise CheckpointError unless the tokenizers' vocabulary sizes equal the model's."""
    pairs = (
        (SRC_TOKENIZER_FILE, src_tokenizer, config.src_vocab_size),
        (TGT_TOKENIZER_FILE, tgt_tokenizer, config.tgt_vocab_size),
    )
    for name, tokenizer, size in pairs:
        if name == SRC_TOKENIZER_FILE and config.arch == "decoder-only":
            continue
        if tokenizer.vocab_size != size:
            raise CheckpointError(
                f"vocabulary mismatch: {path / name} has {tokenizer.vocab_size} tokens, the model config expects {size}"
            )


def read_json(path: Path) -> dict[str, Any]:
    """Read a JSON object. Raises CheckpointError naming the file when it is missing, truncated or not an object."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint file {path} is missing") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"checkpoint file {path} is truncated or corrupted: {exc}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"checkpoint file {path} is corrupted: expected a JSON object")
    return data


def unwrap_model(model: nn.Module) -> nn.Module:
    """The plain model inside a DistributedDataParallel and/or torch.compile wrapper."""
    from torch import nn

    while True:
        if hasattr(model, "_orig_mod"):  # torch.compile's OptimizedModule
            model = model._orig_mod
        elif isinstance(model, nn.parallel.DistributedDataParallel):
            model = model.module
        else:
            return model


def require_plain_weights(model: nn.Module) -> None:
    """Raise :class:`ConfigError` unless every entry of ``model``'s state dict is a plain (not quantized) tensor.

    A checkpoint stores float weights only: int8 copies (:func:`dotformer.decoding.quantization.quantize_int8`) hold
    packed parameters (tuples, dtypes) in their state dict, and are for decoding only.
    """
    from torch import Tensor

    for name, value in model.state_dict().items():
        if not isinstance(value, Tensor) or value.is_quantized:
            raise ConfigError(
                f"cannot save a checkpoint from a model with int8 linear layers or other packed weights ({name} is "
                "not a plain tensor; quantize_int8 / --dtype int8 is for decoding only): use the float32 model it "
                "was made from"
            )


def _save_weights(model: nn.Module, path: Path) -> None:
    """Save the state dict with tied tensors stored once; the other names go to the metadata as aliases."""
    tensors: dict[str, Tensor] = {}
    aliases: dict[str, str] = {}
    seen: dict[tuple[int, int, tuple[int, ...]], str] = {}
    for name, tensor in model.state_dict().items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if key in seen:
            aliases[name] = seen[key]
        else:
            seen[key] = name
            tensors[name] = tensor
    _save_safetensors(tensors, path, {"aliases": json.dumps(aliases)})


def _save_safetensors(tensors: dict[str, Tensor], path: Path, metadata: dict[str, str] | None = None) -> None:
    """Write a safetensors file; a failed write (a full disk) raises :class:`CheckpointError` naming the file."""
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    try:
        save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(path), metadata=metadata)
    except SafetensorError as exc:  # safetensors reports I/O errors (ENOSPC, EIO) as its own exception type
        raise CheckpointError(f"could not write {path}: {exc}") from None


def _load_safetensors(path: Path) -> tuple[dict[str, Tensor], dict[str, str]]:
    from safetensors import SafetensorError, safe_open

    if not path.is_file():
        raise CheckpointError(f"checkpoint file {path} is missing")
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            metadata = f.metadata() or {}
            tensors = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118 (safe_open has no __iter__)
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise CheckpointError(f"checkpoint file {path} is truncated or corrupted: {exc}") from None
    return tensors, metadata


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")


def _write_manifest(directory: Path) -> None:
    files = {
        file.name: {"bytes": file.stat().st_size, "sha256": file_sha256(file)}
        for file in sorted(directory.iterdir())
        if file.is_file() and file.name != MANIFEST_FILE
    }
    _write_json(
        directory / MANIFEST_FILE, {"format": "dotformer-checkpoint", "version": FORMAT_VERSION, "files": files}
    )


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, in hex (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
