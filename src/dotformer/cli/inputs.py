"""Where the texts of ``dotformer translate``, ``embed`` and ``classify`` come from: the TEXT arguments,
``--input FILE`` or standard input, one text per line. The flags that say so are checked before any work, the input
is opened, and an input longer than ``--max-input-length`` is named in one line (``FILE:LINE``, ``<stdin>:LINE`` or
``input N``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from dotformer.errors import ConfigError, DataError, MissingDataError

if TYPE_CHECKING:
    from dotformer.decoding.inputs import InputTooLongError


def check_input_flags(args: argparse.Namespace, *counts: tuple[str, int | None]) -> None:
    """Check each of ``counts`` (flag, value) and ``--max-input-length``, when given, and that the inputs come as
    TEXT arguments or with ``--input``, not both.

    Raises:
        ConfigError: a count below 1 (naming the flag), or TEXT arguments with ``--input``.
    """
    for flag, value in (*counts, ("--max-input-length", getattr(args, "max_input_length", None))):
        if value is not None and value < 1:
            raise ConfigError(f"{flag} must be a positive integer, got {value}")
    if args.texts and args.input is not None:
        raise ConfigError("give the inputs either as TEXT arguments or with --input FILE, not both")


def utf8_arguments(texts: Sequence[str], flag: str | None = None) -> list[str]:
    """The TEXT arguments (or the value of ``flag``, ``--prompt``), checked to be UTF-8 as the lines of a file are.

    The shell passes bytes; Python keeps those that are not UTF-8 as lone surrogates, which a tokenizer would read as
    unknown symbols or refuse with a traceback.

    Raises:
        DataError: ``input N: byte 0xNN at byte offset K is not valid UTF-8 (why)`` (``--prompt: ...``).
    """
    for number, text in enumerate(texts, 1):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            where = flag or f"input {number}"
            try:
                data = text.encode("utf-8", "surrogateescape")  # the bytes the shell passed
                data.decode("utf-8")
            except UnicodeDecodeError as bad:
                byte = f"byte 0x{data[bad.start]:02x} at byte offset {bad.start}"
                raise DataError(f"{where}: {byte} is not valid UTF-8 ({bad.reason})") from None
            except UnicodeEncodeError:
                pass
            raise DataError(f"{where}: character {exc.start + 1} is a lone surrogate, not valid UTF-8") from None
    return list(texts)


def check_input_file(name: str | None) -> None:
    """Check that ``--input`` names something to read: a file, or a pipe or device such as ``/dev/stdin`` (None or
    ``-``: standard input, nothing to check).

    Raises:
        ConfigError: a directory. MissingDataError: no such file.
    """
    if name in (None, "-"):
        return
    path = Path(name)
    if path.is_dir():
        raise ConfigError(f"--input {path} is a directory; give a file")
    if not path.exists():
        raise MissingDataError(f"{path}: no such file")


def open_input(name: str | None) -> tuple[BinaryIO, str, bool]:
    """The binary stream of ``--input`` and how messages name it: the file ``name`` opened for reading (the caller
    closes it; third item True), or standard input (``<stdin>``; None or ``-``)."""
    from dotformer.cli.lines import binary_stdin

    if name in (None, "-"):
        return binary_stdin(), "<stdin>", False
    return open(name, "rb"), str(name), True  # noqa: SIM115 (the caller closes it)


def read_texts(args: argparse.Namespace, command: str) -> list[str]:
    """The inputs of ``command`` (``embed``, ``classify``): the TEXT arguments, or the lines of --input or standard
    input, read whole.

    Raises:
        ConfigError: TEXT arguments and --input. DataError: a line that is not UTF-8, or no input at all.
    """
    from dotformer.cli.lines import StreamLines

    if args.texts:
        if args.input is not None:
            raise ConfigError("give the inputs either as TEXT arguments or with --input FILE, not both")
        return utf8_arguments(args.texts)
    stream, name, from_file = open_input(args.input)
    try:
        texts = [line for _, lines in StreamLines(stream, name).chunks(1 << 12) for line in lines]
    finally:
        if from_file:
            stream.close()
    if not texts:
        raise DataError(f"{name}: no input lines to {command}")
    return texts


def where(name: str | None, number: int) -> str:
    """``FILE:LINE`` (``<stdin>:LINE``) for an input read from a stream, ``input N`` for a TEXT argument."""
    return f"input {number}" if name is None else f"{name}:{number}"


def too_long(exc: InputTooLongError, name: str | None, number: int, counted: str) -> DataError:
    """The error for input ``number`` (1-based; ``name`` as in :func:`where`) that has more tokens than
    ``--max-input-length`` allows; ``counted`` says which special tokens its length includes."""
    return DataError(
        f"{where(name, number)}: the input has {exc.length} tokens ({counted} included), more than "
        f"--max-input-length {exc.limit} (default: the model's max_len); shorten it"
    )
