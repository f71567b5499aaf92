"""The run directory: its step checkpoints, ``best/`` and ``last/``, finding what to load or resume, and recovery.

``runs/NAME/`` holds ``checkpoints/step_XXXXXXX/`` (the last few), ``best/`` (lowest validation loss), ``last/``
(the newest), ``data/`` (the saved split), ``metrics.jsonl`` and ``run.json``. Every function here touches only what
a dotformer run wrote (``RUN_ENTRIES`` and the hidden leftovers of its atomic writes). While a process trains in a run
directory it holds the lock ``.dotformer-train.lock`` there (:func:`training_lock`), and ``.dotformer-train.owner``
names it, so a second process is refused in one line instead of writing the same files.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from dotformer.checkpoint.atomic import _aside_copy, link_checkpoint
from dotformer.checkpoint.format import (
    CONFIG_FILE,
    MANIFEST_FILE,
    MODEL_FILE,
    TRAIN_STATE_JSON,
    CheckpointWarning,
    model_config_of,
    read_json,
    verify_checkpoint,
)
from dotformer.errors import CheckpointError, TrainingError

if TYPE_CHECKING:
    from dotformer.config import ModelConfig

STEP_DIR = re.compile(r"^step_(\d+)$")
RUN_ENTRIES = ("run.json", "data", "checkpoints", "best", "last", "metrics.jsonl", "tensorboard")  # what a run holds
TRAIN_LOCK = ".dotformer-train.lock"  # held while a process trains in the run directory
TRAIN_OWNER = ".dotformer-train.owner"  # who holds it: "process PID on HOST since TIME"


class RunBusyError(TrainingError):
    """Another process is training in the run directory (it holds :data:`TRAIN_LOCK`)."""


@contextlib.contextmanager
def training_lock(run_dir: str | Path) -> Iterator[None]:
    """Hold the run directory's training lock while the block runs (the directory is made if missing); its owner
    file names this process, and is removed when the block ends. The lock is the operating system's (``filelock``):
    a process that dies, even by kill -9, releases it.

    Raises:
        RunBusyError: another process holds it; the message names it (process id, host, since when).
    """
    from filelock import FileLock, Timeout

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    lock, owner = FileLock(str(run_dir / TRAIN_LOCK)), run_dir / TRAIN_OWNER
    try:
        lock.acquire(timeout=0)
    except Timeout:
        try:
            holder = owner.read_text(encoding="utf-8").strip() or "another process"
        except OSError:
            holder = "another process"
        raise RunBusyError(
            f"{run_dir} is in use: {holder} is training in it; wait for it to end (or stop it) before training there"
        ) from None
    try:
        owner.write_text(f"process {os.getpid()} on {socket.gethostname()} since {time.ctime()}\n", encoding="utf-8")
        yield
    finally:
        owner.unlink(missing_ok=True)
        lock.release()


class ResumePoint(NamedTuple):
    """The checkpoint a run resumes from, and the newer candidates that failed verification.

    Attributes:
        path: the checkpoint directory to resume from.
        skipped: one message per newer candidate that was damaged (file and reason), newest first.
    """

    path: Path
    skipped: list[str]


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
      (``.NAME.pruned-*``) are deleted;
    * ``last/``, when it is missing or older than the newest ``checkpoints/step_*`` (a crash between writing a step
      and linking ``last/`` to it), is linked to that step again, if it passes verification.

    Looks at ``run_dir`` (best/, last/) and ``run_dir/checkpoints`` (step_*). Only these hidden leftovers of
    dotformer's own writes, and ``last/``, are touched.

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
    newest = _step_ahead_of_last(Path(run_dir))
    if newest is not None:
        link_checkpoint(newest, Path(run_dir) / "last")
        actions.append(f"linked {Path(run_dir) / 'last'} to {newest}")
    return actions


def _step_ahead_of_last(run_dir: Path) -> Path | None:
    """The newest ``checkpoints/step_*`` when it is newer than ``last/`` (or ``last/`` is missing or unreadable) and
    passes verification; else None."""
    steps = step_checkpoints(run_dir / "checkpoints")
    if not steps:
        return None
    newest, last = _saved_step(steps[-1]), _saved_step(run_dir / "last")
    if newest is None or (last is not None and last >= newest):
        return None
    try:
        verify_checkpoint(steps[-1])
    except CheckpointError:
        return None  # a damaged step: resuming skips it, and last/ stays as it is
    return steps[-1]


def _saved_step(checkpoint: Path) -> int | None:
    """The step in a checkpoint's train_state.json; None when it has none or it cannot be read."""
    try:
        return int(read_json(checkpoint / TRAIN_STATE_JSON)["step"])
    except (CheckpointError, KeyError, TypeError, ValueError):
        return None


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
    if not run_dir.is_dir() or not any(p.name not in (TRAIN_LOCK, TRAIN_OWNER) for p in run_dir.iterdir()):
        return []  # nothing there but this process's lock (an empty directory is a run's start as a missing one is)
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


def open_checkpoint(path: str | Path) -> tuple[Path, dict[str, Any], ModelConfig]:
    """The checkpoint meant by ``path`` (:func:`resolve_checkpoint`), verified: its directory, config.json and model
    config. Raises CheckpointError: nothing checkpoint-like there, or a damaged checkpoint (the file named)."""
    path = resolve_checkpoint(path)
    verify_checkpoint(path)
    info = read_json(path / CONFIG_FILE)
    return path, info, model_config_of(info, path / CONFIG_FILE)


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
