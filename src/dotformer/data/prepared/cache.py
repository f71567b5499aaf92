"""The cache of prepared data: :func:`prepared_for` maps the prepared directory of a data config, preparing it first
when no directory has its fingerprint.

A directory's name holds the fingerprint of what it was made from
(:meth:`~dotformer.data.prepared.skeleton.DataKind.fingerprint`): the content of every
input file, the options that change the result, the seed when a random split depends on it, the tokenizers given.
So a changed file gives another fingerprint, and its data is prepared again, never read stale; the cache keeps an
index of the newest preparation of each config, and says in one line which file changed. A lock keeps two processes
(two runs, or the ranks of one run) from preparing the same directory at once: the second waits, with a message,
and then maps what the first wrote.

Layout::

    CACHE/prepared/pairs-FINGERPRINT/     a prepared directory (:mod:`dotformer.data.prepared.layout`), or text-...,
                                          labelled-...
    CACHE/prepared/pairs-FINGERPRINT.lock the lock of its preparation (and .owner: who holds it)
    CACHE/prepared/index/SETTINGS.json    the fingerprint and inputs of the newest preparation of these settings

CACHE is ``$DOTFORMER_CACHE``, else ``$XDG_CACHE_HOME/dotformer``, else ``~/.cache/dotformer``
(:func:`default_cache_root`). Nothing in the cache is deleted but the leftovers of a preparation that died, and an
entry that cannot be opened (damaged, partly deleted), which is prepared again with one warning.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from dotformer.data.prepared.fingerprint import changed_inputs, fingerprint, json_digest
from dotformer.data.prepared.kinds import Prepared, kind_of, open_prepared
from dotformer.data.prepared.layout import REPORT_FILE
from dotformer.data.prepared.skeleton import CHUNK_EXAMPLES, DEFAULT_SAMPLE_LINES
from dotformer.errors import DataError

logger = logging.getLogger(__name__)

CACHE_ENV = "DOTFORMER_CACHE"


def default_cache_root() -> Path:
    """``$DOTFORMER_CACHE``, else ``$XDG_CACHE_HOME/dotformer``, else ``~/.cache/dotformer``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "dotformer"
    return Path("~/.cache/dotformer").expanduser()


def prepared_for(
    config: Any,
    seed: int,
    cache_root: str | Path | None = None,
    tokenizers: Any = None,
    *,
    sample_lines: int = DEFAULT_SAMPLE_LINES,
    chunk: int = CHUNK_EXAMPLES,
    wait_seconds: float | None = None,
) -> Prepared:
    """The prepared data of ``config``: mapped from the cache when a directory has its fingerprint, else prepared
    there first (by its kind: :func:`~dotformer.data.prepared.kinds.kind_of`).

    Args:
        config: the data config of any kind (pairs, text, labelled texts).
        seed: the seed of a random split.
        cache_root: the cache (None: :func:`default_cache_root`).
        tokenizers: tokenizers to use instead of learning them (a :class:`TokenizerPair`, or one tokenizer for text
            and labelled texts).
        sample_lines, chunk: as :meth:`~dotformer.data.prepared.skeleton.DataKind.prepare`.
        wait_seconds: how long to wait for another process preparing the same data (None: as long as it takes).

    Raises:
        DataError: the wait took longer than ``wait_seconds``; else what preparing raises.
    """
    root = default_cache_root() if cache_root is None else Path(cache_root).expanduser()
    kind = kind_of(config)
    settings = kind.settings(seed, tokenizers, sample_lines)
    inputs = kind.inputs()
    entries = root / "prepared"
    directory = entries / f"{settings['kind']}-{fingerprint(settings, inputs)}"
    if (directory / REPORT_FILE).is_file() and (opened := _open_cached(directory, warn=False)) is not None:
        return opened
    entries.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(directory) + ".lock")
    owner = Path(str(directory) + ".owner")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        holder = owner.read_text(encoding="utf-8").strip() if owner.is_file() else "another process"
        logger.info(f"waiting for {holder} preparing the same data into {directory}")
        try:
            lock.acquire(timeout=-1 if wait_seconds is None else wait_seconds)
        except Timeout:
            raise DataError(
                f"{directory}: still being prepared by {holder} after {wait_seconds:,.0f} s; try again when it is done"
            ) from None
    try:
        if directory.exists():  # prepared while this process waited, or damaged: prepared again
            opened = _open_cached(directory, warn=True)
            if opened is not None:
                return opened
            os.replace(directory, entries / f".{directory.name}.partial-damaged")  # removed below, with leftovers
        owner.write_text(f"process {os.getpid()} on {socket.gethostname()} since {time.ctime()}\n", encoding="utf-8")
        index = entries / "index" / f"{settings['kind']}-{json_digest(settings)}.json"
        for line in _what_changed(index):
            logger.info(f"{line}: preparing the data again")
        for leftover in entries.glob(f".{directory.name}.partial-*"):  # a preparation that died (the lock is ours)
            shutil.rmtree(leftover, ignore_errors=True)
        prepared = kind.prepare(seed, directory, tokenizers, sample_lines=sample_lines, chunk=chunk, inputs=inputs)
        index.parent.mkdir(exist_ok=True)
        record = {"fingerprint": prepared.fingerprint, "directory": directory.name, "inputs": prepared.report["inputs"]}
        partial = index.with_name(index.name + ".partial")
        partial.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        os.replace(partial, index)
        return prepared
    finally:
        owner.unlink(missing_ok=True)
        lock.release()


def _open_cached(directory: Path, warn: bool) -> Prepared | None:
    """``open_prepared(directory)`` of a cache entry, or None when it cannot be opened (a damaged or partly deleted
    entry, which the caller prepares again; ``warn``: say so in one line naming the entry and what is wrong)."""
    try:
        return open_prepared(directory)
    except (ValueError, OSError) as exc:  # DataError, CheckpointError, a missing or unreadable file
        if warn:
            logger.warning(f"the prepared data in {directory} is damaged ({exc}): preparing it again")
        return None


def _what_changed(index: Path) -> list[str]:
    """One line per input file changed since the newest preparation of these settings (none without one)."""
    if not index.is_file():
        return []
    try:
        record = json.loads(index.read_text(encoding="utf-8"))
        return changed_inputs(record["inputs"])
    except (ValueError, KeyError, TypeError):
        return []
