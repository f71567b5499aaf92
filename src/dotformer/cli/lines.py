"""The lines of ``dotformer translate``: inputs read as they arrive, one text per line, and outputs written one line
per input (``text``), N lines per input (``nbest``) or one JSON object per input (``json``).

Lines end at ``\\n`` (or ``\\r\\n``) only, on input and output; input must be UTF-8.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from typing import IO, TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:
    from dotformer.api import TranslationResult
    from dotformer.data.tokenize.tokenizers import Tokenizer

READ_SIZE = 1 << 16  # bytes asked of the input per read; a pipe returns what has arrived
BOM = b"\xef\xbb\xbf"


# -- reading ----------------------------------------------------------------------------------------------------------


class StreamLines:
    """The lines of a binary stream, read in chunks as they arrive, split and decoded as training files are.

    Lines end at ``\\n`` (a ``\\r`` before it is dropped); no other character splits a line. A UTF-8 byte-order mark
    at the start is dropped; bytes that are not UTF-8 raise :class:`~dotformer.errors.DataError` naming
    ``NAME:LINE``, after the lines before them were returned. A final line without ``\\n`` is a line.

    Args:
        stream: a binary stream (``sys.stdin.buffer``, a file opened ``"rb"``, ``io.BytesIO``).
        name: how messages name the input (``<stdin>`` or the file's path).
    """

    def __init__(self, stream: BinaryIO, name: str) -> None:
        self.stream, self.name = stream, name
        self.pending = b""  # bytes read but not yet returned as lines
        self.offset = 0  # byte offset of pending[0] in the stream
        self.line = 0  # lines returned so far
        self.eof = False
        self.bom_checked = False
        self.error: Exception | None = None

    def _read(self) -> None:
        """One read of at most READ_SIZE bytes (a pipe returns what has arrived; it blocks only when nothing has)."""
        read = getattr(self.stream, "read1", None) or self.stream.read
        self._wait_readable()
        data = read(READ_SIZE)
        if not data:
            self.eof = True
        self.pending += data
        if not self.bom_checked and (self.eof or len(self.pending) >= len(BOM) or not BOM.startswith(self.pending)):
            if self.pending.startswith(BOM):
                self.pending, self.offset = self.pending[len(BOM) :], self.offset + len(BOM)
            self.bom_checked = True

    def _wait_readable(self) -> None:
        """Wait until the input can be read, waking every 0.25 s.

        A Ctrl-C may be delivered to another thread of the process (torch's); Python then runs its handler in the
        main thread only when that thread next runs bytecode, which a read blocked in the kernel never does. Waiting
        in short ``select`` calls lets the KeyboardInterrupt through within 0.25 s. ``read1`` of a buffered stream
        (all reads here ask for more than its buffer) leaves nothing buffered, so the file descriptor tells the truth.
        """
        try:
            fd = self.stream.fileno()
            import select

            while not select.select([fd], [], [], 0.25)[0]:
                pass
        except (AttributeError, OSError, ValueError, TypeError):
            return  # in-memory streams, or a descriptor select cannot watch: read as it is

    def _ready(self) -> bool:
        """Whether more input can be read at once (in-memory streams: always; pipes and terminals: ask select)."""
        try:
            fd = self.stream.fileno()
        except (AttributeError, OSError, ValueError):
            return True
        try:
            import select

            return bool(select.select([fd], [], [], 0)[0])
        except (OSError, ValueError, TypeError):
            return False

    def _complete_lines(self) -> int:
        return self.pending.count(b"\n") if self.bom_checked else 0

    def read_chunk(self, size: int) -> list[str]:
        """The next lines: at least one unless the input has ended, at most ``size``; fewer when no more has arrived.

        Raises:
            DataError: the next line is not valid UTF-8 (``NAME:LINE: byte 0xNN at byte offset K ...``).
        """
        if self.error is not None:
            raise self.error
        while not self.eof and self._complete_lines() == 0:
            self._read()
        while not self.eof and self._complete_lines() < size and self._ready():
            self._read()
        lines: list[str] = []
        pending, start = self.pending, 0  # cut pending once at the end, not once per line
        while len(lines) < size:
            end = pending.find(b"\n", start)
            if end < 0 and not (self.eof and start < len(pending)):
                break
            stop = end if end >= 0 else len(pending)
            body = pending[start:stop]
            body = body[:-1] if body.endswith(b"\r") else body  # "\r\n"; a last "\r" at the end of input too
            try:
                lines.append(body.decode("utf-8"))
            except UnicodeDecodeError as exc:
                self.error = self._decode_error(body, exc, self.offset + start)
                break
            self.line += 1
            start = stop + 1 if end >= 0 else stop
        self.pending, self.offset = pending[start:], self.offset + start
        if not lines and self.error is not None:
            raise self.error
        return lines

    def _decode_error(self, body: bytes, exc: UnicodeDecodeError, line_offset: int) -> Exception:
        from dotformer.errors import DataError

        return DataError(
            f"{self.name}:{self.line + 1}: byte 0x{body[exc.start]:02x} at byte offset {line_offset + exc.start} "
            f"(byte {exc.start + 1} of the line) is not valid UTF-8 ({exc.reason})"
        )

    def chunks(self, size: int) -> Iterator[tuple[int, list[str]]]:
        """``(first line number, lines)`` per chunk (1-based line numbers), until the input ends."""
        while True:
            first = self.line + 1
            lines = self.read_chunk(size)
            if not lines:
                return
            yield first, lines


def argument_chunks(texts: Sequence[str], size: int) -> Iterator[tuple[int, list[str]]]:
    """The TEXT arguments in chunks of ``size``, as ``(first input number, texts)``."""
    for start in range(0, len(texts), size):
        yield start + 1, list(texts[start : start + size])


def binary_stdin() -> BinaryIO:
    """Standard input as bytes (a text stream without ``buffer``, as in tests, is encoded back to UTF-8)."""
    import io

    stdin = sys.stdin
    buffer = getattr(stdin, "buffer", None)
    if buffer is not None:
        return buffer
    return io.BytesIO(stdin.read().encode("utf-8", "surrogateescape"))


# -- writing ----------------------------------------------------------------------------------------------------------


def one_line(text: str) -> str:
    """An output on one line: ``\\r\\n``, ``\\n`` and ``\\r`` (which a BPE vocabulary can produce) become spaces.

    Other characters that :meth:`str.splitlines` would split on (U+2028, form feed, ...) are kept: lines are
    separated by ``\\n`` only, on input and output.
    """
    if "\n" not in text and "\r" not in text:
        return text
    return text.replace("\r\n", " ").replace("\n", " ").replace("\r", " ")


def json_line(payload: dict[str, Any]) -> str:
    """One JSON object on one line (U+2028, U+2029 and U+0085 escaped too, so no reader splits it)."""
    import json

    text = json.dumps(payload, ensure_ascii=False)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").replace("\x85", "\\u0085")


def format_result(result: TranslationResult, index: int, output_format: str, tokenizer: Tokenizer) -> str:
    """The output lines of one input (``index``: its 0-based id), each ending with ``\\n``."""
    if output_format == "text":
        return one_line(result.text) + "\n" + alignment_line(result.hypotheses[0], index)
    if output_format == "nbest":
        return "".join(
            f"{index} ||| {one_line(h.text)} ||| {h.score:.4f}\n" + alignment_line(h, index) for h in result.hypotheses
        )
    hypotheses = [
        {
            "text": h.text,
            "tokens": [tokenizer.id_to_token(t) for t in h.tokens],
            "token_ids": list(h.tokens),
            "score": h.score,
            "finished": h.finished,
            **({} if h.alignment is None else {"alignment": [list(pair) for pair in h.alignment]}),
        }
        for h in result.hypotheses
    ]
    return json_line({"id": index, "source": result.source, "hypotheses": hypotheses}) + "\n"


def alignment_line(hypothesis: Any, index: int) -> str:
    """fairseq's ``A-ID<TAB>S-T S-T ...`` line of a hypothesis with an alignment (``""`` without one)."""
    if hypothesis.alignment is None:
        return ""
    from dotformer.decoding.alignment import format_alignment

    return f"A-{index}\t{format_alignment(hypothesis.alignment)}\n"


class TextAsBytes:
    """A text stream (``sys.stdout`` replaced by a test) seen as the bytes stream ``run`` writes to."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, data: bytes) -> int:
        return self.stream.write(data.decode("utf-8"))

    def flush(self) -> None:
        self.stream.flush()
