"""Checkpoints: safetensors weights, JSON config, tokenizer files and training state; never a pickle.

A checkpoint is a directory::

    model.safetensors        the weights (tied weights stored once; the aliases are in the file's metadata)
    config.json              {"model": ModelConfig.to_dict(), "task": ..., "data": {...}, "step": ..., ...}
    tokenizer_src.json       the source tokenizer (dotformer.data.tokenizers)
    tokenizer_tgt.json       the target tokenizer
    train_state.safetensors  optional: optimizer moments, RNG states, ... (every tensor of the training state)
    train_state.json         optional: the rest of the training state (step, epoch, batch index, best metric, ...)
    manifest.json            size and SHA-256 of every file above, checked on load (truncation, corruption)

A run directory ``runs/NAME/`` holds ``checkpoints/step_XXXXXXX/`` (the last few), ``best/`` (lowest validation
loss), ``last/`` (the newest), ``data/`` (the saved split), ``metrics.jsonl`` and ``run.json``.

Every directory is written atomically: into a temporary sibling, flushed with fsync, then renamed into place. An
existing checkpoint is first renamed aside (``.NAME.old-*``) and deleted only once the new one is in place, so a
crash at any moment leaves either the old or the new checkpoint readable (:func:`resolve_checkpoint` finds an
aside copy if the crash came between the two renames). ``best/`` and ``last/`` hold hard links to the files of a
step checkpoint (files are never modified after they are written), or copies where links are not possible.

Loading reads only safetensors and JSON: nothing is unpickled, nothing is executed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch import Tensor, nn

from dotformer.config import ModelConfig
from dotformer.errors import CheckpointError, DotformerError
from dotformer.model import Transformer
from dotformer.quantization import require_float_weights

if TYPE_CHECKING:
    from dotformer.data.tokenizers import Tokenizer

MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
SRC_TOKENIZER_FILE = "tokenizer_src.json"
TGT_TOKENIZER_FILE = "tokenizer_tgt.json"
TRAIN_STATE_TENSORS = "train_state.safetensors"
TRAIN_STATE_JSON = "train_state.json"
MANIFEST_FILE = "manifest.json"
FORMAT_VERSION = 1
STEP_DIR = re.compile(r"^step_(\d+)$")
RUN_ENTRIES = ("run.json", "data", "checkpoints", "best", "last", "metrics.jsonl", "tensorboard")  # what a run holds


class CheckpointWarning(UserWarning):
    """Something about a checkpoint that a user should know but that does not stop the command (a checkpoint
    without a manifest, a damaged newest checkpoint skipped on resume)."""


class ResumePoint(NamedTuple):
    """The checkpoint a run resumes from, and the newer candidates that failed verification.

    Attributes:
        path: the checkpoint directory to resume from.
        skipped: one message per newer candidate that was damaged (file and reason), newest first.
    """

    path: Path
    skipped: list[str]


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


# -- saving -----------------------------------------------------------------------------------------------------------


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
        train_state: optional nested dict of tensors and JSON values (optimizer state, RNG, data position, ...):
            tensors go to train_state.safetensors, everything else to train_state.json.

    Returns:
        The checkpoint directory.

    Raises:
        ConfigError: the model has int8 linear layers (:func:`dotformer.quantization.quantize_int8`).
    """
    directory = Path(directory)
    model = unwrap_model(model)
    require_float_weights(model, "save a checkpoint")
    config = model.config
    with atomic_directory(directory) as tmp:
        _save_weights(model, tmp / MODEL_FILE)
        info = {k: v for k, v in info.items() if k not in ("model", "format_version")}  # the model's own config wins
        _write_json(tmp / CONFIG_FILE, {"model": config.to_dict(), **info, "format_version": FORMAT_VERSION})
        src_tokenizer.save(tmp / SRC_TOKENIZER_FILE)
        tgt_tokenizer.save(tmp / TGT_TOKENIZER_FILE)
        if train_state is not None:
            tensors: dict[str, Tensor] = {}
            skeleton = _split_tensors(train_state, "state", tensors)
            _save_safetensors(tensors, tmp / TRAIN_STATE_TENSORS)
            _write_json(tmp / TRAIN_STATE_JSON, skeleton)
        _write_manifest(tmp)
    return directory


def link_checkpoint(source: str | Path, destination: str | Path) -> Path:
    """Make ``destination`` (e.g. ``best/`` or ``last/``) a copy of the checkpoint ``source``, atomically.

    Files are hard-linked when possible (they are never modified after writing), else copied.
    """
    source, destination = Path(source), Path(destination)
    with atomic_directory(destination) as tmp:
        for file in sorted(source.iterdir()):
            if file.is_file():
                try:
                    os.link(file, tmp / file.name)
                except OSError:
                    shutil.copy2(file, tmp / file.name)
    return destination


@contextlib.contextmanager
def atomic_directory(target: Path) -> Iterator[Path]:
    """Yield a temporary directory next to ``target``; on success fsync it and rename it to ``target``.

    An existing ``target`` is renamed aside first and deleted after the new one is in place; it must be a
    checkpoint directory (or empty): anything else (a run directory, a folder of the user's, a file) is refused
    before anything is written, so no command can delete what is not a checkpoint. On an exception the temporary
    directory is removed and ``target`` is left as it was. Leftovers of crashed writes (``.NAME.tmp-*``) are
    removed before writing.

    Raises:
        CheckpointError: ``target`` exists and is not a checkpoint directory (see :func:`is_replaceable_checkpoint`).
    """
    target = Path(target)
    parent = target.parent
    if target.exists() or target.is_symlink():
        refuse_unless_checkpoint(target)
    for ancestor in target.parents:
        if ancestor.exists():
            if not ancestor.is_dir():
                raise CheckpointError(f"cannot write the checkpoint {target}: {ancestor} is a file, not a directory")
            break
    parent.mkdir(parents=True, exist_ok=True)
    for stale in parent.glob(f".{target.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=parent))
    os.chmod(tmp, 0o777 & ~current_umask())  # mkdtemp makes 0700; a checkpoint follows the umask like other outputs
    try:
        yield tmp
        for file in tmp.iterdir():
            _fsync_path(file)
        _fsync_path(tmp)
        aside = None
        if target.exists():
            aside = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=parent))
            os.rename(target, aside / target.name)  # aside/NAME: a crash now leaves .NAME.old-*/NAME readable
        os.rename(tmp, target)
        _fsync_path(parent)
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)
        for stale in parent.glob(f".{target.name}.old-*"):
            shutil.rmtree(stale, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def current_umask() -> int:
    """The process's file mode creation mask (e.g. 0o022), read without changing it for longer than two calls."""
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def is_replaceable_checkpoint(path: Path) -> bool:
    """True if ``path`` is an empty directory or a checkpoint directory: it holds ``model.safetensors`` or
    ``manifest.json`` and only files (no subdirectory, so never a run directory), and is not a symbolic link."""
    if path.is_symlink() or not path.is_dir():
        return False
    entries = list(path.iterdir())
    if not entries:
        return True
    names = {entry.name for entry in entries}
    return bool(names & {MODEL_FILE, MANIFEST_FILE}) and all(entry.is_file() for entry in entries)


def refuse_unless_checkpoint(path: Path) -> None:
    """Raise :class:`CheckpointError` unless ``path`` may be replaced by a checkpoint (see above)."""
    if is_replaceable_checkpoint(path):
        return
    if path.is_symlink() or not path.is_dir():
        what = "a symbolic link" if path.is_symlink() else "a file"
    elif (path / "run.json").exists() or (path / "checkpoints").is_dir():
        what = "a run directory"
    else:
        what = "a directory that is not a checkpoint"
    raise CheckpointError(f"{path} is {what}: refusing to replace it with a checkpoint (choose another path)")


def prune_checkpoints(checkpoints_dir: str | Path, keep_last: int) -> list[Path]:
    """Delete all but the newest ``keep_last`` ``step_XXXXXXX`` directories; returns the deleted paths.

    Each is first renamed aside (``.step_XXXXXXX.pruned-*``, one atomic rename) and then deleted, so a crash during
    the deletion never leaves a half-deleted ``step_*`` directory; :func:`recover_run_directory` removes such
    leftovers at the next start.
    """
    steps = step_checkpoints(checkpoints_dir)
    doomed = steps[: max(0, len(steps) - keep_last)]
    for path in doomed:
        aside = Path(tempfile.mkdtemp(prefix=f".{path.name}.pruned-", dir=path.parent))
        os.rename(path, aside / path.name)
        shutil.rmtree(aside, ignore_errors=True)
    return doomed


def recover_run_directory(run_dir: str | Path) -> list[str]:
    """Finish what a crash interrupted in a run directory, before a run writes there again.

    * a checkpoint that was renamed aside while being replaced (``.NAME.old-*/NAME``) and whose replacement never
      arrived is renamed back to ``NAME``; once ``NAME`` exists, such aside copies are deleted;
    * unfinished writes (``.NAME.tmp-*``, also of run.json and metrics.jsonl) and interrupted prunes
      (``.NAME.pruned-*``) are deleted.

    Looks at ``run_dir`` (best/, last/) and ``run_dir/checkpoints`` (step_*). Only these hidden leftovers of
    dotformer's own writes are touched.

    Returns:
        One line per action, e.g. "restored best/ from .best.old-ab12/best".
    """
    actions: list[str] = []
    for parent in (Path(run_dir), Path(run_dir) / "checkpoints"):
        if not parent.is_dir():
            continue
        for leftover in sorted(parent.iterdir()):
            if re.match(r"^\.(run\.json|metrics\.jsonl)\.tmp-\d+$", leftover.name) and leftover.is_file():
                leftover.unlink()  # an unfinished atomic rewrite of run.json or metrics.jsonl
                actions.append(f"removed {leftover}")
                continue
            match = re.match(r"^\.(.+)\.(tmp|old|pruned)-[^/]+$", leftover.name)
            if match is None or not leftover.is_dir():
                continue
            name, kind = match.groups()
            target = parent / name
            if kind == "old" and not target.exists() and (leftover / name / CONFIG_FILE).is_file():
                os.rename(leftover / name, target)
                actions.append(f"restored {target} from {leftover / name}")
            shutil.rmtree(leftover, ignore_errors=True)
            actions.append(f"removed {leftover}")
    return actions


def run_has_checkpoint(run_dir: str | Path) -> bool:
    """True when ``run_dir`` holds a checkpoint of its own (last/, best/, checkpoints/step_* or an aside copy)."""
    run_dir = Path(run_dir)
    if step_checkpoints(run_dir / "checkpoints"):
        return True
    return any((run_dir / n).is_dir() or _aside_copy(run_dir / n) is not None for n in ("last", "best"))


def is_run_directory(path: str | Path) -> bool:
    """True when ``path`` looks like a dotformer run directory (run.json, or a last/ or checkpoints/ of its own)."""
    path = Path(path)
    return (path / "run.json").is_file() or run_has_checkpoint(path)


def clear_run_directory(run_dir: str | Path) -> list[Path]:
    """Delete what a dotformer run wrote in ``run_dir`` (``RUN_ENTRIES`` and the hidden leftovers of its writes),
    leaving any other file there alone; for ``dotformer train --overwrite``.

    Each entry is first renamed into one hidden ``.overwrite-*`` directory, then that is deleted: a crash leaves
    either the entry or nothing under its name.

    Returns:
        The entries removed.

    Raises:
        CheckpointError: ``run_dir`` exists but is not a run directory (nothing is deleted).
    """
    run_dir = Path(run_dir)
    if not run_dir.exists():
        return []
    if not is_run_directory(run_dir):
        raise CheckpointError(
            f"{run_dir} is not a dotformer run directory (no run.json, last/ or checkpoints/step_*); "
            f"--overwrite deletes only runs: choose another --out"
        )
    doomed = [run_dir / n for n in RUN_ENTRIES if (run_dir / n).exists() or (run_dir / n).is_symlink()]
    doomed += [p for p in run_dir.iterdir() if re.match(r"^\.(best|last|run\.json)\.(tmp|old)-", p.name)]
    if not doomed:
        return []
    trash = Path(tempfile.mkdtemp(prefix=".overwrite-", dir=run_dir))
    for i, path in enumerate(doomed):
        os.rename(path, trash / f"{i}-{path.name}")
    shutil.rmtree(trash, ignore_errors=True)
    for stale in run_dir.glob(".overwrite-*"):
        shutil.rmtree(stale, ignore_errors=True)
    return doomed


def step_checkpoints(checkpoints_dir: str | Path) -> list[Path]:
    """The ``step_XXXXXXX`` directories under ``checkpoints_dir``, oldest first."""
    checkpoints_dir = Path(checkpoints_dir)
    if not checkpoints_dir.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in checkpoints_dir.iterdir() if (m := STEP_DIR.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found)]


def step_dir_name(step: int) -> str:
    """``step_0000042`` for step 42."""
    return f"step_{step:07d}"


# -- loading ----------------------------------------------------------------------------------------------------------


def resolve_checkpoint(path: str | Path) -> Path:
    """The checkpoint directory meant by ``path``: itself, or for a run directory its ``best/`` else ``last/``.

    A checkpoint that a crash left renamed aside (``.NAME.old-*/NAME``) is found too.

    Raises:
        CheckpointError: nothing checkpoint-like is there.
    """
    path = Path(path)
    if (path / CONFIG_FILE).is_file() or (path / MODEL_FILE).is_file() or (path / MANIFEST_FILE).is_file():
        return path
    for name in ("best", "last"):
        candidate = path / name
        if candidate.is_dir() or _aside_copy(candidate) is not None:
            return resolve_checkpoint(candidate)
    aside = _aside_copy(path)
    if aside is not None:
        return aside
    steps = step_checkpoints(path / "checkpoints")
    if steps:
        return steps[-1]
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist")
    raise CheckpointError(
        f"{path} is neither a checkpoint (no {CONFIG_FILE}, {MODEL_FILE}) nor a run directory (no best/, last/ "
        f"or checkpoints/step_*)"
    )


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu") -> LoadedCheckpoint:
    """Read a checkpoint (or a run directory's best/, else last/) back into a model in eval mode.

    Args:
        path: a checkpoint directory or a run directory.
        device: where to put the model.

    Returns:
        :class:`LoadedCheckpoint` (model, config, src_tokenizer, tgt_tokenizer, info, path).

    Raises:
        CheckpointError: a file is missing, truncated or corrupted, the config is invalid, the tokenizers' vocabulary
            sizes differ from the config, or the weights do not fit the config. The message names the file.
    """
    path = resolve_checkpoint(path)
    verify_checkpoint(path)
    info = read_json(path / CONFIG_FILE)
    config = model_config_of(info, path / CONFIG_FILE)
    src_tokenizer = load_tokenizer_file(path / SRC_TOKENIZER_FILE)
    tgt_tokenizer = load_tokenizer_file(path / TGT_TOKENIZER_FILE)
    check_vocabulary(config, src_tokenizer, tgt_tokenizer, path)
    model = Transformer(config)
    load_weights_into(model, path / MODEL_FILE)
    model.to(device).eval()
    return LoadedCheckpoint(model, config, src_tokenizer, tgt_tokenizer, info, path)


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
        if _sha256(file) != expected.get("sha256"):
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


def load_weights_into(model: nn.Module, path: str | Path) -> None:
    """Copy the weights of ``path`` into ``model`` (strict: same names, same shapes).

    Raises:
        CheckpointError: missing, unexpected or mis-shaped tensors, naming the file and the first names.
    """
    state = load_weights(path)
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{path} does not fit the model config: missing {missing[:3]}, unexpected {unexpected[:3]} "
            f"({len(missing)} missing, {len(unexpected)} unexpected)"
        )
    for name, tensor in state.items():
        if tensor.shape != expected[name].shape:
            raise CheckpointError(
                f"{path}: tensor {name} has shape {tuple(tensor.shape)}, the model config needs "
                f"{tuple(expected[name].shape)}"
            )
    model.load_state_dict(state)


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


def load_tokenizer_file(path: Path) -> Tokenizer:
    """A checkpoint's tokenizer file. Raises CheckpointError naming the file when it is missing or damaged."""
    from dotformer.data.tokenizers import load_tokenizer

    if not path.is_file():
        raise CheckpointError(f"checkpoint file {path} is missing")
    try:
        return load_tokenizer(path)
    except (DotformerError, ValueError, KeyError, TypeError, OSError) as exc:
        raise CheckpointError(f"tokenizer file {path} is corrupted: {exc}") from None


def find_resume_checkpoint(run_dir: str | Path) -> Path:
    """The newest readable checkpoint of a run that carries a training state (see :func:`choose_resume_checkpoint`).

    Raises:
        CheckpointError: the run directory has no readable checkpoint to resume from.
    """
    return choose_resume_checkpoint(run_dir).path


def choose_resume_checkpoint(run_dir: str | Path) -> ResumePoint:
    """The newest checkpoint of a run that carries a training state and passes verification.

    Candidates, newest first: the ``checkpoints/step_*`` directories, then ``last/`` (a hard-linked copy of the
    newest step; also found renamed aside by a crash). Damaged candidates are skipped and reported in
    :attr:`ResumePoint.skipped` (a flipped bit in the newest step breaks ``last/`` too: they share files).

    Raises:
        CheckpointError: the run directory has no readable checkpoint to resume from; the message names each
            damaged candidate, or says the run was stopped before its first checkpoint.
    """
    run_dir = Path(run_dir)
    errors: list[str] = []
    for candidate in [*reversed(step_checkpoints(run_dir / "checkpoints")), run_dir / "last"]:
        if not candidate.is_dir():
            aside = _aside_copy(candidate)
            if aside is None:
                continue
            candidate = aside
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", CheckpointWarning)
                verify_checkpoint(candidate)
        except CheckpointError as exc:
            errors.append(f"{candidate} failed verification: {exc}")
            continue
        if not (candidate / TRAIN_STATE_JSON).is_file():
            continue
        for warning in caught:
            warnings.warn(warning.message, warning.category, stacklevel=2)
        return ResumePoint(candidate, errors)
    if errors:
        raise CheckpointError(f"nothing to resume in {run_dir}: no readable checkpoint ({'; '.join(errors)})")
    raise CheckpointError(
        f"nothing to resume in {run_dir}: the run was stopped before its first checkpoint; "
        f"start it afresh with --overwrite (dotformer train ... --out {run_dir} --overwrite)"
    )


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


def run_data_dir(checkpoint_path: str | Path) -> Path:
    """The ``data/`` directory (the saved split) of the run that a checkpoint belongs to.

    ``checkpoint_path`` may be a run directory, its ``best/`` or ``last/``, or a ``checkpoints/step_*`` directory.

    Raises:
        CheckpointError: no ``data/`` directory in the checkpoint's run.
    """
    path = Path(checkpoint_path).resolve()
    for candidate in (path, path.parent, path.parent.parent):
        if (candidate / "data").is_dir():
            return candidate / "data"
    raise CheckpointError(f"no data/ directory (saved split) found for checkpoint {checkpoint_path}")


def average_checkpoints(paths: Sequence[str | Path]) -> dict[str, Tensor]:
    """The element-wise mean of the weights of several checkpoints of the same model (e.g. the last k).

    Averaging the last checkpoints is the paper's trick for its final models (§6.1: "averaging the last 5
    checkpoints"). Floating tensors are averaged in float64 and cast back; other tensors are taken from the last.

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
        config = model_config_of(read_json(directory / CONFIG_FILE), directory / CONFIG_FILE)
        if first_config is None:
            first_config = config
        elif config != first_config:
            raise CheckpointError(f"{directory / CONFIG_FILE}: model config differs from that of {dirs[0]}")
        tensors, metadata = _load_safetensors(directory / MODEL_FILE)
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
    while True:
        if hasattr(model, "_orig_mod"):  # torch.compile's OptimizedModule
            model = model._orig_mod
        elif isinstance(model, nn.parallel.DistributedDataParallel):
            model = model.module
        else:
            return model


# -- helpers ----------------------------------------------------------------------------------------------------------


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


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")


def _write_manifest(directory: Path) -> None:
    files = {
        file.name: {"bytes": file.stat().st_size, "sha256": _sha256(file)}
        for file in sorted(directory.iterdir())
        if file.is_file() and file.name != MANIFEST_FILE
    }
    _write_json(
        directory / MANIFEST_FILE, {"format": "dotformer-checkpoint", "version": FORMAT_VERSION, "files": files}
    )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync_path(path: Path) -> None:
    """Flush a file or a directory entry to disk (directories: where the OS allows opening them)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _aside_copy(path: Path) -> Path | None:
    """A checkpoint that an interrupted replacement left at ``.NAME.old-*/NAME``, if any."""
    parent = path.parent
    if not parent.is_dir():
        return None
    for aside in sorted(parent.glob(f".{path.name}.old-*")):
        candidate = aside / path.name
        if (candidate / CONFIG_FILE).is_file():
            return candidate
    return None
