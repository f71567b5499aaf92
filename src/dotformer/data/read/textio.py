"""Strict reading of UTF-8 text files, line by line, with errors that name FILE:LINE.

Every file reader of :mod:`dotformer.data` goes through :func:`read_text_lines` (a small file, whole) or
:func:`iter_text_lines` (a corpus of any size, in blocks of :data:`BLOCK_BYTES`), so a bad byte, an empty file or a
missing file is reported the same way everywhere.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dotformer.errors import DataError, MissingDataError

BLOCK_BYTES = 1 << 22  # bytes read and decoded at a time by iter_text_lines (4 MiB)


def _check_is_file(path: Path) -> None:
    """Raise MissingDataError for no such file, DataError for a directory, a device or a pipe (read more than once)."""
    if path.is_dir():
        raise DataError(f"{path} is a directory; give a file")
    if path.exists() and not path.is_file():
        raise DataError(f"{path} is not a regular file (a device, a pipe or a socket); give a file")
    if not path.is_file():
        raise MissingDataError(f"{path}: no such file")


def _decode(data: bytes, path: Path, lines_before: int, bytes_before: int) -> str:
    """``data`` (which starts at a line start) decoded as UTF-8.

    Raises:
        DataError: ``FILE:LINE: byte 0xNN at byte offset K (byte C of the line) is not valid UTF-8 (why)``.
    """
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = lines_before + data.count(b"\n", 0, exc.start) + 1
        line_start = data.rfind(b"\n", 0, exc.start) + 1
        raise DataError(
            f"{path}:{line}: byte 0x{data[exc.start]:02x} at byte offset {bytes_before + exc.start} "
            f"(byte {exc.start - line_start + 1} of the line) is not valid UTF-8 ({exc.reason})"
        ) from None


def read_text(path: str | Path) -> str:
    """The whole file decoded as UTF-8 (a leading byte-order mark is dropped).

    Raises:
        MissingDataError: the file does not exist (or is not a file).
        DataError: a directory, the file is empty, or holds bytes that are not UTF-8; the message is
            ``FILE:LINE: byte 0xNN at byte offset K (column C of the line) is not valid UTF-8``.
    """
    path = Path(path)
    _check_is_file(path)
    data = path.read_bytes()
    if not data.strip():
        raise DataError(f"{path}:1: " + ("the file holds only blank lines (no text)" if data else "the file is empty"))
    return _decode(data, path, 0, 0).removeprefix("\ufeff")


def read_json(path: Path, missing: str) -> Any:
    """The JSON value of a UTF-8 file (see :func:`read_text`).

    Raises:
        MissingDataError: the file does not exist: ``PATH: MISSING``.
        DataError: empty, invalid UTF-8, or not JSON: ``PATH:LINE: not valid JSON (why)``.
    """
    if not path.is_file():
        raise MissingDataError(f"{path}: {missing}")
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None


def split_lines(text: str) -> list[str]:
    """Lines of ``text`` without their ending (``\\n``, ``\\r\\n`` or ``\\r``); a final newline adds no empty line.

    Unlike :meth:`str.splitlines`, only the three newline conventions split, so a form feed or U+2028 inside a
    sentence stays in it and line numbers match what an editor shows.
    """
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def read_text_lines(path: str | Path) -> list[str]:
    """The lines of a UTF-8 file (see :func:`read_text` for the errors, :func:`split_lines` for line ends).

    Raises:
        MissingDataError: no such file.
        DataError: empty file or invalid UTF-8 (FILE:LINE and byte offset in the message).
    """
    return split_lines(read_text(path))


def iter_text_lines(path: str | Path, block_bytes: int = BLOCK_BYTES) -> Iterator[str]:
    """The lines of a UTF-8 file, as :func:`read_text_lines` gives them, read ``block_bytes`` at a time: memory is
    bounded by a block (and the longest line), whatever the file's size.

    The checks of :func:`read_text` are made before the first line (missing file, directory, empty file, blank
    lines only); a byte that is not UTF-8 raises when its block is reached, with the same ``FILE:LINE`` message.

    Raises:
        MissingDataError: no such file.
        DataError: empty file, only blank lines, or invalid UTF-8 (FILE:LINE and byte offset in the message).
    """
    path = Path(path)
    _check_is_file(path)
    with path.open("rb") as handle:
        block = handle.read(block_bytes)
        if not block:
            raise DataError(f"{path}:1: the file is empty")
        while not block.strip():  # a file of blank lines: scanned until its first text, or its end
            more = handle.read(block_bytes)
            if not more:
                raise DataError(f"{path}:1: the file holds only blank lines (no text)")
            block = more
        handle.seek(0)
        carry, lines_before, bytes_before, first = b"", 0, 0, True
        while True:
            data = handle.read(block_bytes)
            block = carry + data
            if data:
                cut = block.rfind(b"\n") + 1  # whole lines only: "\r\n" is never cut in two
                if cut == 0:  # a line longer than a block: read on
                    carry = block
                    continue
                block, carry = block[:cut], block[cut:]
            text = _decode(block, path, lines_before, bytes_before)
            if first:
                text, first = text.removeprefix("\ufeff"), False
            yield from split_lines(text)
            lines_before += block.count(b"\n")
            bytes_before += len(block)
            if not data:
                return
