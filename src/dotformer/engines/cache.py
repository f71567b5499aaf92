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
first one's copy instead of converting again. The copy's stamp, written last, lists each of its files with its size,
modification time and SHA-256: a copy is used only when every listed file is there with its size, and a file whose
modification time changed is hashed again and must match (a truncated, cut, rewritten or deleted file is caught; an
untouched copy costs one ``stat`` per file). A damaged copy, or a partly deleted one, is converted again and
replaced in one step (the new copy renamed into place, the damaged one moved aside first, then removed), with one
warning naming what was wrong. Nothing here deletes a directory it did not create. The cache holds one copy per
checkpoint version and quantization; old ones stay until removed by hand (``rm -r .ct2-cache``).
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
from dotformer.checkpoint.format import file_sha256
from dotformer.errors import DotformerError

logger = logging.getLogger(__name__)

CACHE_DIR_ENV = "DOTFORMER_CACHE_DIR"  # overrides the user cache directory
CACHE_NAME = ".ct2-cache"  # the directory beside a checkpoint
CONVERSION_VERSION = 2  # raise when the converter writes a different model: old copies are then converted again
STAMP_FILE = "dotformer_conversion.json"  # what a copy was made from; written last, inside the copy

READ_ONLY = (13, 30)  # EACCES, EROFS: this place cannot be written, the next one is tried

Convert = Callable[[Path], None]


class CopyWriteError(DotformerError, OSError):
    """The CTranslate2 copy of a checkpoint could not be written: its message names where and why, and what to do."""


# writes a CTranslate2 model into the (empty) directory it is given


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


def copy_manifest(directory: Path) -> dict[str, dict[str, int | str]]:
    """Each file of a converted copy (its stamp excluded, sorted by name) with its ``size``, ``mtime_ns`` and
    ``sha256``: what the stamp records and :func:`copy_damage` checks."""
    manifest: dict[str, dict[str, int | str]] = {}
    for path in sorted(directory.iterdir()):
        if path.name == STAMP_FILE or not path.is_file():
            continue
        info = path.stat()
        manifest[path.name] = {"size": info.st_size, "mtime_ns": info.st_mtime_ns, "sha256": file_sha256(path)}
    return manifest


def copy_damage(directory: Path) -> str | None:
    """What is wrong with the copy in ``directory``, in a few words, or None when it is whole: no directory; no
    stamp, a stamp that is not JSON or lists no files (a copy made before stamps listed them); a listed file missing,
    of another size, or changed (its modification time differs and so does its SHA-256)."""
    if not directory.is_dir():
        return "missing"
    try:
        stamp = json.loads((directory / STAMP_FILE).read_text(encoding="utf-8"))
        listed = stamp["files"]
        entries = [
            (str(name), int(entry["size"]), int(entry["mtime_ns"]), str(entry["sha256"]))
            for name, entry in listed.items()
        ]
    except FileNotFoundError:
        return f"no {STAMP_FILE} (an unfinished or partly deleted copy)"
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"its {STAMP_FILE} is damaged ({type(exc).__name__})"
    if not any(name == "model.bin" for name, *_ in entries):
        return f"its {STAMP_FILE} lists no model.bin"
    for name, size, mtime_ns, sha256 in entries:
        try:
            info = (directory / name).stat()
        except OSError:
            return f"{name} is missing"
        if info.st_size != size:
            return f"{name} has {info.st_size:,} bytes, not the {size:,} it was written with"
        if info.st_mtime_ns != mtime_ns and file_sha256(directory / name) != sha256:
            return f"{name} was changed since it was written (its SHA-256 differs)"
    return None


def is_complete(directory: Path) -> bool:
    """Whether ``directory`` is a whole copy (:func:`copy_damage` finds nothing wrong)."""
    return copy_damage(directory) is None


def cached_copy(files: CheckpointFiles, quantization: str, convert: Convert) -> Path:
    """The directory of the CTranslate2 copy of ``files`` stored as ``quantization``: found, or converted now.

    Args:
        files: the checkpoint (:func:`~dotformer.checkpoint.files.read_checkpoint_files`).
        quantization: the stored weight type (``float32``, ``int8``, ``bfloat16``, ``float16``).
        convert: writes the model into a given empty directory (the first use only; it may import torch).

    Raises:
        CopyWriteError: neither the checkpoint's directory nor the user cache directory can be written (both named),
            or the conversion failed to write (a full disk, a file-size limit: the place and the reason named).
        ConfigError: from ``convert`` (a model CTranslate2 cannot hold).
    """
    name = copy_name(files, quantization)
    roots = cache_roots(files.path)
    for root in roots:
        damage = copy_damage(root / name)
        if damage is None:
            return root / name
        if damage != "missing":
            logger.warning(
                "the CTranslate2 copy %s is damaged (%s): converting the checkpoint again", root / name, damage
            )
    refused: list[tuple[Path, OSError]] = []
    for root in roots:
        try:
            root.mkdir(parents=True, exist_ok=True)
            return convert_into(root, name, files, quantization, convert)
        except OSError as exc:
            if isinstance(exc, CopyWriteError) or exc.errno not in READ_ONLY:
                raise
            logger.debug("cannot write a CTranslate2 copy in %s (%s)", root, exc)
            refused.append((root, exc))
    places = " nor ".join(f"{root} ({exc.strerror or exc})" for root, exc in refused)
    raise CopyWriteError(
        f"cannot write the CTranslate2 copy of {files.path}: neither {places} can be written; set "
        f"{CACHE_DIR_ENV} to a writable directory, or run on the torch engine (--engine torch)"
    )


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
            try:
                convert(tmp)
            except OSError as exc:
                if exc.errno in READ_ONLY or isinstance(exc, DotformerError):
                    raise
                raise CopyWriteError(
                    f"cannot write the CTranslate2 copy of {files.path} into {root} ({exc.strerror or exc}): free "
                    f"space there or lift the limit (ulimit -f), set {CACHE_DIR_ENV} to another directory, or run on "
                    f"the torch engine (--engine torch)"
                ) from exc
            stamp = {
                "checkpoint": str(files.path),
                "fingerprint": files.fingerprint,
                "quantization": quantization,
                "files": copy_manifest(tmp),
            }
            (tmp / STAMP_FILE).write_text(json.dumps(stamp, indent=2) + "\n", encoding="utf-8")
            os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700: the copy follows the umask like any directory
            replace_directory(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return target


def replace_directory(new: Path, target: Path) -> None:
    """Rename the directory ``new`` to ``target`` (same parent). A ``target`` already there (a damaged or partly
    deleted copy: the caller holds the lock and found it unusable) is first renamed aside to a temporary name, so
    that ``target`` is at every moment either the old directory or the new one, then removed."""
    try:
        os.rename(new, target)
        return
    except OSError:
        if not target.exists():
            raise
    aside = Path(tempfile.mkdtemp(prefix=f".{target.name}.damaged-", dir=target.parent))
    os.rename(target, aside / target.name)
    os.rename(new, target)
    shutil.rmtree(aside, ignore_errors=True)


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
