"""Output paths checked before the work: a command that would fail to write its result fails at once, in one line.

``dotformer evaluate --json under/a/file/m.json`` used to decode the whole test set, then raise a traceback.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from dotformer.errors import ConfigError

# What a run directory holds (see dotformer.runs.run): an output file may sit beside these (e.g.
# RUN/test_metrics.json), never replace one of them or go inside them.
RUN_FILES = frozenset({"run.json", "metrics.jsonl"})
RUN_DIRS = frozenset({"data", "checkpoints", "best", "last", "tensorboard"})
CHECKPOINT_MARKERS = ("model.safetensors", "manifest.json")


def check_output_file(path: str | Path, flag: str, inputs: tuple[str | Path | None, ...] = ()) -> Path:
    """Check that ``path`` can be written as a file without destroying anything the command reads or a run holds.

    Refused: a directory; a parent that is a file; one of ``inputs`` (a file the command reads); a file inside a
    checkpoint directory; a run's own files (``run.json``, ``metrics.jsonl``) or anything under its ``data/``,
    ``checkpoints/``, ``best/``, ``last/``. A new file beside them (``RUN/test_metrics.json``) is fine. Missing
    parents are allowed (they are created on writing). Returns ``path`` as a :class:`Path`.

    Raises:
        ConfigError: naming ``flag``, the path and why it is refused.
    """
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{flag} {path} is a directory; give a file name")
    _check_parents(path, flag)
    resolved = path.resolve()
    for source in inputs:
        if source is not None and str(source) != "-" and Path(source).resolve() == resolved:
            raise ConfigError(f"{flag} {path} is a file this command reads: it would be overwritten while read")
    reason = _protected(resolved)
    if reason is not None:
        raise ConfigError(f"{flag} {path} {reason}: refusing to overwrite it (choose another path)")
    return path


def check_not_stdin(path: str | Path, flag: str) -> None:
    """Refuse an output file that is the command's standard input (``--output F < F``): opening it for writing would
    empty it before it is read. The two are compared by device and inode, so any name of the file is caught; only a
    regular file can be lost this way (``--output /dev/null < /dev/null`` is fine).

    Raises:
        ConfigError: naming ``flag`` and the path.
    """
    try:
        stdin, target = os.fstat(0), os.stat(path)
    except OSError:  # no standard input, or no such file yet: nothing to destroy
        return
    if stat.S_ISREG(stdin.st_mode) and (stdin.st_dev, stdin.st_ino) == (target.st_dev, target.st_ino):
        raise ConfigError(
            f"{flag} {path} is the file on standard input: it would be emptied before it is read (choose another path)"
        )


def _protected(resolved: Path) -> str | None:
    """Why writing the file ``resolved`` would damage a checkpoint or a run, or None."""
    for ancestor in resolved.parents:
        if any((ancestor / marker).is_file() for marker in CHECKPOINT_MARKERS):
            return f"is inside the checkpoint {ancestor}"
        if (ancestor / "run.json").is_file():
            parts = resolved.relative_to(ancestor).parts
            if parts[0] in RUN_DIRS or (len(parts) == 1 and parts[0] in RUN_FILES):
                return f"is part of the run {ancestor}"
            return None
    return None


def check_output_dir(path: str | Path, flag: str) -> Path:
    """Check that ``path`` can be a directory: not a file, no parent a file, not inside a checkpoint, and not one
    of the directories a run manages (``RUN/best``, ``RUN/last``, ``RUN/checkpoints/*``, ``RUN/data``): a new
    directory beside them (``RUN/averaged``) is fine. Returns the path.

    Raises:
        ConfigError: naming ``flag`` and the offending path.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{flag} {path} is a file, not a directory")
    _check_parents(path, flag)
    reason = _protected(path.resolve())
    if reason is not None:
        raise ConfigError(f"{flag} {path} {reason}: refusing to write there (choose another path)")
    return path


def _check_parents(path: Path, flag: str) -> None:
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"{flag} {path}: {parent} is a file, not a directory")
            return
