"""Output paths checked before the work: a command that would fail to write its result (``dotformer evaluate --json
under/a/file/m.json``) fails at once, in one line, not after decoding the whole test set."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from dotformer.errors import ConfigError

# What a run directory holds (see dotformer.runs.run): an output file may sit beside these (e.g.
# RUN/test_metrics.json), never replace one of them or go inside them.
RUN_FILES = frozenset({"run.json", "metrics.jsonl"})
RUN_DIRS = frozenset({"data", "checkpoints", "best", "last", "tensorboard"})
CHECKPOINT_MARKERS = ("model.safetensors", "manifest.json")


def check_output_file(path: str | Path, flag: str, inputs: Sequence[tuple[str, str | Path | None]] = ()) -> Path:
    """Check that ``path`` can be written as a file without destroying anything the command reads or a run holds.

    Refused: a directory; a parent that is a file; a file the command reads (one of ``inputs``, pairs of its flag
    and path, compared with :func:`same_file`: by device and inode, so a hard link, a symbolic link or a ``../``
    form of the input is caught); a file inside a checkpoint directory; a run's own files (``run.json``,
    ``metrics.jsonl``) or anything under its ``data/``, ``checkpoints/``, ``best/``, ``last/``. A new file beside
    them (``RUN/test_metrics.json``) is fine. Missing parents are allowed (they are created on writing). Returns
    ``path`` as a :class:`Path`. Call it before the output is opened: opening it empties it.

    Raises:
        ConfigError: naming ``flag``, the path and why it is refused (the input's flag when it is one).
    """
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{flag} {path} is a directory; give a file name")
    _check_parents(path, flag)
    for source_flag, source in inputs:
        if source is not None and str(source) != "-" and same_file(path, source):
            other = "" if str(source) == str(path) else ", the same file by another name"
            raise ConfigError(
                f"{flag} {path} is a file this command reads ({source_flag} {source}{other}): writing it would "
                f"destroy it; choose another path"
            )
    reason = _protected(path.resolve())
    if reason is not None:
        raise ConfigError(f"{flag} {path} {reason}: refusing to overwrite it (choose another path)")
    return path


def same_file(a: str | Path, b: str | Path) -> bool:
    """True when the paths ``a`` and ``b`` name one existing regular file: the same device and inode after following
    links (a hard link, a symbolic link, ``../`` forms). Two names of a device or a pipe (``/dev/null``) are not
    files whose content can be lost, and a path that does not exist yet is no file at all: False."""
    try:
        first, second = os.stat(a), os.stat(b)
    except (OSError, ValueError):
        return False
    return stat.S_ISREG(first.st_mode) and (first.st_dev, first.st_ino) == (second.st_dev, second.st_ino)


def same_directory(a: str | Path, b: str | Path) -> bool:
    """True when the paths ``a`` and ``b`` name one existing directory (by device and inode, after links)."""
    try:
        first, second = os.stat(a), os.stat(b)
    except (OSError, ValueError):
        return False
    return stat.S_ISDIR(first.st_mode) and (first.st_dev, first.st_ino) == (second.st_dev, second.st_ino)


def check_not_stdin(path: str | Path, flag: str) -> None:
    """Refuse an output file that is the command's standard input (``--output F < F``): opening it for writing would
    empty it before it is read. The two are compared by device and inode, so any name of the file is caught; only a
    regular file can be lost this way (``--output /dev/null < /dev/null`` is fine).

    Raises:
        ConfigError: naming ``flag`` and the path.
    """
    try:
        stdin, target = os.fstat(0), os.stat(path)
    except (OSError, ValueError):  # no standard input, or no such file yet: nothing to destroy
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
