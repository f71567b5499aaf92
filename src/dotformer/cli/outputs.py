"""Output paths checked before the work: a command that would fail to write its result fails at once, in one line.

``dotformer evaluate --json under/a/file/m.json`` used to decode the whole test set, then raise a traceback.
"""

from __future__ import annotations

from pathlib import Path

from dotformer.errors import ConfigError


def check_output_file(path: str | Path, flag: str) -> Path:
    """Check that ``path`` can be written as a file: it is not a directory, and no parent is a file.

    Missing parents are allowed (they are created on writing). Returns ``path`` as a :class:`Path`.

    Raises:
        ConfigError: naming ``flag`` and the path (a directory given for a file, or a parent that is a file).
    """
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{flag} {path} is a directory; give a file name")
    _check_parents(path, flag)
    return path


def check_output_dir(path: str | Path, flag: str) -> Path:
    """Check that ``path`` can be a directory: it is not a file, and no parent is a file. Returns the path.

    Raises:
        ConfigError: naming ``flag`` and the offending path.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{flag} {path} is a file, not a directory")
    _check_parents(path, flag)
    return path


def _check_parents(path: Path, flag: str) -> None:
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"{flag} {path}: {parent} is a file, not a directory")
            return
