"""Strict reading of UTF-8 text files, line by line, with errors that name FILE:LINE.

Every file reader of :mod:`dotformer.data` goes through :func:`read_text_lines`, so a bad byte, an empty file or a
missing file is reported the same way everywhere.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dotformer.errors import DataError, MissingDataError


def read_text(path: str | Path) -> str:
    """The whole file decoded as UTF-8 (a leading byte-order mark is dropped).

    Raises:
        MissingDataError: the file does not exist (or is not a file).
        DataError: a directory, the file is empty, or holds bytes that are not UTF-8; the message is
            ``FILE:LINE: byte 0xNN at byte offset K (column C of the line) is not valid UTF-8``.
    """
    path = Path(path)
    if path.is_dir():
        raise DataError(f"{path} is a directory; give a file")
    if not path.is_file():
        raise MissingDataError(f"{path}: no such file")
    data = path.read_bytes()
    if not data.strip():
        raise DataError(f"{path}:1: " + ("the file holds only blank lines (no text)" if data else "the file is empty"))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        line_start = data.rfind(b"\n", 0, exc.start) + 1
        raise DataError(
            f"{path}:{line}: byte 0x{data[exc.start]:02x} at byte offset {exc.start} "
            f"(byte {exc.start - line_start + 1} of the line) is not valid UTF-8 ({exc.reason})"
        ) from None
    return text.removeprefix("\ufeff")


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
