"""The output directory of an export or import: written whole, or not at all, and never over someone's files.

:func:`fresh_output_dir` refuses a directory that exists and is not empty (an export never deletes or overwrites
files it did not write), builds everything in a temporary sibling, and moves the result into place only on success;
on an error nothing is left behind, and a directory that existed (empty) is left as it was.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from dotformer.errors import ConfigError


def check_output_dir(path: str | Path) -> Path:
    """``path`` as a Path, after checking it is absent or an empty directory.

    Raises:
        ConfigError: ``path`` is a file, a directory that is not empty, or under a regular file.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"output {path} exists and is not a directory; choose a new path")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"output {path}: its parent {parent} is a file, not a directory; choose another path")
            break
    if path.is_dir() and any(path.iterdir()):
        raise ConfigError(f"output directory {path} exists and is not empty; choose a new or empty directory")
    return path


@contextlib.contextmanager
def fresh_output_dir(path: str | Path) -> Iterator[Path]:
    """Yield a temporary directory next to ``path``; on success its files become ``path``.

    Raises:
        ConfigError: ``path`` exists and is not an empty directory (checked before anything is written).
    """
    path = check_output_dir(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700; outputs follow the umask like any other
        if path.is_dir():  # an empty directory the user made: fill it, keep it
            check_output_dir(path)
            for entry in tmp.iterdir():
                os.rename(entry, path / entry.name)
            tmp.rmdir()
        else:
            os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
