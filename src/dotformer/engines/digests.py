"""The SHA-256 of a checkpoint's files without reading them again: a memo keyed by each file's (size, mtime_ns, inode).

Finding a checkpoint's CTranslate2 copy needs the fingerprint of its files (:mod:`dotformer.engines.cache`), and
hashing the weights of a large model on every command costs more than the decoding of a few sentences. The memo is a
small JSON file beside the cache (``<parent of the checkpoint>/.ct2-cache/digests.json``, else in the user cache
directory), mapping each file's resolved path to its size, modification time (ns), inode and digest; a file whose
three figures are unchanged gets the remembered digest, any other is hashed again and remembered.

The one change a memo cannot see: a file rewritten in place (the same inode) with the same size and its modification
time set back to the old one (``os.utime``, ``touch -d``, a copy tool keeping times). Every ordinary way of changing a
checkpoint (saving it again, copying another over it, training on) changes the size, the time or the inode. Delete
``digests.json`` after such a rewrite.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

from dotformer.checkpoint.format import file_sha256
from dotformer.engines.cache import cache_roots

MEMO_FILE = "digests.json"  # in the cache directory beside the checkpoint (or the user's)


def memo_sha256(path: Path, memo: Path) -> str:
    """The SHA-256 (hex) of ``path``, from ``memo`` when the file's size, mtime_ns and inode are those remembered,
    else computed and remembered there (a memo that cannot be written is skipped: the digest is still right).

    The module docstring says which change a memo cannot see.

    Raises:
        OSError: ``path`` cannot be read.
    """
    stat = os.stat(path)
    key, figures = str(Path(path).resolve()), [stat.st_size, stat.st_mtime_ns, stat.st_ino]
    entries = _read(memo)
    entry = entries.get(key)
    if isinstance(entry, list) and len(entry) == 4 and entry[:3] == figures:
        return str(entry[3])
    digest = file_sha256(path)
    entries[key] = [*figures, digest]
    with contextlib.suppress(OSError):  # a read-only place: no memo, the digest computed each time
        memo.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=".digests-", dir=memo.parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as f:
                json.dump(entries, f)
            os.replace(temporary, memo)  # whole or not at all: a reader never sees half a memo
        except OSError:
            Path(temporary).unlink(missing_ok=True)
            raise
    return digest


def checkpoint_sha256(path: Path) -> str:
    """:func:`memo_sha256` of a checkpoint's file, its memo in the first cache directory that has one or can be
    written (:func:`~dotformer.engines.cache.cache_roots` of the checkpoint)."""
    roots = cache_roots(Path(path).parent)
    memo = next((root / MEMO_FILE for root in roots if (root / MEMO_FILE).is_file()), None)
    if memo is None:
        memo = next((root / MEMO_FILE for root in roots if _writable(root)), roots[-1] / MEMO_FILE)
    return memo_sha256(Path(path), memo)


def _read(memo: Path) -> dict[str, list[object]]:
    """The memo's entries ({} when it is missing or unreadable)."""
    try:
        entries = json.loads(memo.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return entries if isinstance(entries, dict) else {}


def _writable(root: Path) -> bool:
    """Whether ``root`` exists writable, or can be made where its nearest existing parent is writable."""
    existing = root
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return os.access(existing, os.W_OK)
