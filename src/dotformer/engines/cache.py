"""The CTranslate2 copy of a checkpoint: converted on first use, cached, found again without torch.

A copy is a CTranslate2 model directory written by the project's one converter (:func:`dotformer.export.checkpoint
.write_ct2`, what ``dotformer export --to ct2`` runs, with the generator's PAD and BOS left as trained: the engine
suppresses them per call, so that CTranslate2's scoring gives dotformer's log-probabilities). Its name is its key::

    <parent of the checkpoint>/.ct2-cache/<checkpoint name>-<fingerprint>-<quantization>-v<version>/

The fingerprint hashes the checkpoint's weights, config.json and tokenizers
(:attr:`~dotformer.checkpoint.files.CheckpointFiles.fingerprint`), so a changed checkpoint converts again; the
quantization is the stored weight type (float32, int8, ...); the version changes with the converter's output and
CTranslate2's major version. Where the checkpoint's directory cannot be written, the copy goes to the user's cache
directory: ``$DOTFORMER_CACHE_DIR``, else ``$XDG_CACHE_HOME/dotformer``, else ``~/.cache/dotformer`` (subdirectory
``ct2/``). A copy found in either place is used.

Concurrent first uses do not corrupt the cache: a conversion is written into a temporary sibling directory and renamed
into place in one step (a copy is there whole or not at all), and a lock file makes a second process wait for the
first one's copy instead of converting again. A copy is never modified once in place; nothing here deletes a
directory it did not create. The cache holds one copy per checkpoint version and quantization; old ones stay until
removed by hand (``rm -r .ct2-cache``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from dotformer.checkpoint.files import CheckpointFiles

logger = logging.getLogger(__name__)

CACHE_DIR_ENV = "DOTFORMER_CACHE_DIR"  # overrides the user cache directory
CACHE_NAME = ".ct2-cache"  # the directory beside a checkpoint
CONVERSION_VERSION = 2  # raise when the converter writes a different model: old copies are then converted again
STAMP_FILE = "dotformer_conversion.json"  # what a copy was made from; written last, inside the copy

Convert = Callable[[Path], None]  # writes a CTranslate2 model into the (empty) directory it is given


def user_cache_dir() -> Path:
    """``$DOTFORMER_CACHE_DIR``, else ``$XDG_CACHE_HOME/dotformer``, else ``~/.cache/dotformer``."""
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "dotformer"
    return Path.home() / ".cache" / "dotformer"


def cache_roots(checkpoint: Path) -> list[Path]:
    """Where copies of ``checkpoint`` live, in the order they are looked for and written: beside it, then the user
    cache directory."""
    return [checkpoint.parent / CACHE_NAME, user_cache_dir() / "ct2"]


def copy_name(files: CheckpointFiles, quantization: str) -> str:
    """``<checkpoint name>-<16 hex digits of the fingerprint>-<quantization>-v<version>``."""
    import ctranslate2

    major = ctranslate2.__version__.split(".")[0]
    return f"{files.path.name}-{files.fingerprint[:16]}-{quantization}-v{CONVERSION_VERSION}.{major}"


def is_complete(directory: Path) -> bool:
    """Whether ``directory`` is a finished copy (its stamp is written last, before the copy is renamed into place)."""
    return (directory / STAMP_FILE).is_file() and (directory / "model.bin").is_file()


def cached_copy(files: CheckpointFiles, quantization: str, convert: Convert) -> Path:
    """The directory of the CTranslate2 copy of ``files`` stored as ``quantization``: found, or converted now.

    Args:
        files: the checkpoint (:func:`~dotformer.checkpoint.files.read_checkpoint_files`).
        quantization: the stored weight type (``float32``, ``int8``, ``bfloat16``, ``float16``).
        convert: writes the model into a given empty directory (the first use only; it may import torch).

    Raises:
        OSError: neither the checkpoint's directory nor the user cache directory can be written.
        ConfigError: from ``convert`` (a model CTranslate2 cannot hold).
    """
    name = copy_name(files, quantization)
    roots = cache_roots(files.path)
    for root in roots:
        if is_complete(root / name):
            return root / name
    error: OSError | None = None
    for root in roots:
        try:
            root.mkdir(parents=True, exist_ok=True)
            return convert_into(root, name, files, quantization, convert)
        except PermissionError as exc:  # a read-only checkpoint directory: the user cache directory next
            logger.debug("cannot write a CTranslate2 copy in %s (%s)", root, exc)
            error = error or exc
        except OSError as exc:
            if exc.errno not in (30, 13):  # EROFS, EACCES: try the next place; anything else is the user's to see
                raise
            error = error or exc
    assert error is not None
    raise error


def convert_into(root: Path, name: str, files: CheckpointFiles, quantization: str, convert: Convert) -> Path:
    """Convert into a temporary directory under ``root`` and rename it to ``root / name``, holding ``root``'s lock
    for ``name``; a copy that appeared meanwhile (another process) is used instead.

    Raises:
        PermissionError: ``root`` cannot be written.
    """
    target = root / name
    with _locked(root / f".{name}.lock"):
        if is_complete(target):
            return target
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=root))
        try:
            logger.debug("converting %s for CTranslate2 (%s), once: %s", files.path, quantization, target)
            convert(tmp)
            stamp = {"checkpoint": str(files.path), "fingerprint": files.fingerprint, "quantization": quantization}
            (tmp / STAMP_FILE).write_text(json.dumps(stamp, indent=2) + "\n", encoding="utf-8")
            os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700: the copy follows the umask like any directory
            try:
                os.rename(tmp, target)
            except OSError:
                if not is_complete(target):  # not another process's copy: a real error
                    raise
                shutil.rmtree(tmp, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return target


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the file ``path`` (created if missing) while the block runs; where the platform
    has no ``fcntl`` (Windows) the block runs unlocked, and the atomic rename alone keeps the cache whole."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover (Windows)
        yield
        return
    with open(path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _umask() -> int:
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def ct2_copy(files: CheckpointFiles, quantization: str = "float32") -> Path:
    """The CTranslate2 copy of a checkpoint, its weights stored as ``quantization``: found in the cache, or
    converted now by :func:`dotformer.export.checkpoint.write_ct2` (loading the checkpoint with torch, once).

    Raises:
        ConfigError: a model CTranslate2 cannot hold. CheckpointError: the checkpoint cannot be read.
        OSError: no place to write the copy.
    """

    def convert(directory: Path) -> None:
        from dotformer.checkpoint import load_checkpoint
        from dotformer.export.checkpoint import write_ct2

        stored = None if quantization == "float32" else quantization
        write_ct2(load_checkpoint(files.path), directory, stored, suppress_specials=False, announce=False)

    return cached_copy(files, quantization, convert)
