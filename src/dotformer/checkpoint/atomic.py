"""Atomic writes of checkpoint directories: a temporary sibling, fsync, then a rename; never a half-written checkpoint.

An existing checkpoint is first renamed aside (``.NAME.old-*/NAME``) and deleted only once the new one is in place,
so a crash at any moment leaves either the old or the new checkpoint readable (the loaders find the aside copy if
the crash came between the two renames). Only an empty directory or a checkpoint is ever replaced: a run directory,
a user's folder or a file is refused. ``best/`` and ``last/`` hold hard links to a step's files.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from dotformer.checkpoint.format import CONFIG_FILE, MANIFEST_FILE, MODEL_FILE
from dotformer.errors import CheckpointError


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
