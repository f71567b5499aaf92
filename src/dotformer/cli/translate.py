"""``dotformer translate``: decode texts with a trained checkpoint (greedy, beam search or sampling), streaming.

Standard input (or ``--input FILE``) is read in chunks as it arrives: each chunk (at most ``--buffer-size`` lines) is
decoded and its outputs are written and flushed before the next is read, so a line typed into a pipe gets its answer
at once. The decoding itself is :meth:`dotformer.api.Translator.translate`, the Python API's path.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:
    from dotformer.api import TranslationResult, Translator
    from dotformer.checkpoint import LoadedCheckpoint
    from dotformer.data.tokenizers import Tokenizer
    from dotformer.decoding import DecodeConfig

OUTPUT_FORMATS = ("text", "nbest", "json")
DEFAULT_BUFFER_SIZE = 256  # most lines decoded (and sorted by length) together before their outputs are written
READ_SIZE = 1 << 16  # bytes asked of the input per read; a pipe returns what has arrived
BOM = b"\xef\xbb\xbf"

EPILOG = """\
input:  the TEXT arguments, or else --input FILE, or else standard input: one text per line (an empty line is an
        empty text). Lines end at "\\n" or "\\r\\n" only: a form feed, \\v, U+0085, U+001C-U+001E or U+2028 inside a
        line stays in it. The input must be UTF-8 (a leading byte-order mark is dropped); a bad byte is an error
        naming FILE:LINE (<stdin>:LINE). Standard input is read as it arrives: each chunk of at most --buffer-size
        lines is decoded and its outputs are flushed before more is read, so a pipe gets each answer at once.
output: one line per input, in input order, on standard output or --output FILE (line breaks in an output become
        spaces). --output-format:
          text   the best output (the default with --n-best 1)
          nbest  N lines per input, "ID ||| TEXT ||| SCORE", best first (the default with --n-best N > 1)
          json   one JSON object per input: {"id", "source", "hypotheses": [{"text", "tokens", "token_ids",
                 "score", "finished"}, ...]}
        ID is the input's 0-based index. SCORE is log P(output | input) / ((5 + length) / 6)^alpha (natural log,
        length in tokens including the end of sentence; higher is better).
long inputs: an input of more than --max-input-length tokens (EOS included; default: the model's max_len) is an
        error naming its line, after the outputs of the lines before it are written. Inputs are decoded in batches
        of at most --batch-size sentences and --max-tokens padded tokens, so one long line does not pad a batch.
warnings (standard error, one line each, at the end): characters the model's vocabulary does not know (read as
        <unk>), and outputs cut at the maximum output length (--max-len-a, --max-len-b) before the model ended them.
A closed output pipe (| head -1) ends quietly; Ctrl-C ends with the outputs of every decoded chunk written.

examples:
  dotformer translate --checkpoint runs/g2p transformer attention
  dotformer translate --checkpoint runs/bible --beam 5 --n-best 3 < verses.es
  dotformer translate --checkpoint runs/bible --input verses.es --output verses.en --output-format json
  dotformer translate --checkpoint runs/copy --strategy sample --top-p 0.9 --seed 1 "a1 b2 c3"
"""


def add_decoding_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags shared by ``translate`` and ``evaluate``: checkpoint, device, batch size and the search."""
    parser.add_argument("--checkpoint", required=True, metavar="DIR", help="checkpoint or run directory (run: best/)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... (default: cuda if available)")
    parser.add_argument(
        "--dtype",
        choices=["float32", "bfloat16", "float16", "int8"],
        default="float32",
        help="precision of the weights while decoding (scores are still summed in float32): bfloat16 halves the "
        "weights' memory and suits GPUs; float16 needs CUDA; int8 (CPU only; --device auto then picks the CPU) "
        "stores the linear layers' weights in 8 bits and multiplies in integers, 1.2-3.5x faster on this "
        "project's CPU; its outputs may differ slightly from float32's, and with --batch-size (default float32)",
    )
    parser.add_argument("--batch-size", type=int, default=64, metavar="B", help="sentences decoded together (64)")
    parser.add_argument(
        "--strategy", choices=["greedy", "beam", "sample"], default="beam", help="search strategy (default: beam)"
    )
    parser.add_argument("--beam", type=int, default=None, metavar="K", help="beam size (default 4, the paper's)")
    parser.add_argument(
        "--length-penalty", type=float, default=0.6, metavar="ALPHA", help="GNMT length penalty alpha (0.6)"
    )
    parser.add_argument(
        "--max-len-a", type=float, default=1.0, metavar="A", help="max output length = A * input length + B (1.0)"
    )
    parser.add_argument("--max-len-b", type=int, default=50, metavar="B", help="see --max-len-a (50)")
    parser.add_argument("--temperature", type=float, default=None, metavar="T", help="sampling temperature (1.0)")
    parser.add_argument("--top-k", type=int, default=None, metavar="K", help="sample from the K likeliest tokens")
    parser.add_argument("--top-p", type=float, default=None, metavar="P", help="nucleus sampling mass P in (0, 1]")
    parser.add_argument("--seed", type=int, default=None, help="sampling seed (0)")


def decode_config_from_args(args: argparse.Namespace, n_best: int = 1) -> DecodeConfig:
    """Build the :class:`DecodeConfig` from the flags of :func:`add_decoding_arguments`.

    Raises:
        ConfigError: a flag that does not belong to the chosen strategy, or an invalid value.
    """
    from dotformer.decoding import DecodeConfig
    from dotformer.errors import ConfigError

    sampling = {"--temperature": args.temperature, "--top-k": args.top_k, "--top-p": args.top_p, "--seed": args.seed}
    given = [flag for flag, value in sampling.items() if value is not None]
    if given and args.strategy != "sample":
        raise ConfigError(f"{', '.join(given)} only apply to --strategy sample")
    if args.beam is not None and args.strategy != "beam":
        raise ConfigError("--beam only applies to --strategy beam")
    return DecodeConfig(
        strategy=args.strategy,
        beam_size=args.beam if args.beam is not None else 4,
        n_best=n_best,
        length_penalty=args.length_penalty,
        max_len_a=args.max_len_a,
        max_len_b=args.max_len_b,
        temperature=args.temperature if args.temperature is not None else 1.0,
        top_k=args.top_k if args.top_k is not None else 0,
        top_p=args.top_p if args.top_p is not None else 1.0,
        seed=args.seed if args.seed is not None else 0,
    )


def resolve_device(name: str) -> str:
    """``auto`` -> ``cuda`` if available else ``cpu``; other names checked (:func:`dotformer.api.resolve_device`).

    Raises:
        ConfigError: not a device name, or CUDA asked for but not available.
    """
    from dotformer.api import resolve_device as resolve

    return resolve(name)


def load_for_decoding(args: argparse.Namespace) -> LoadedCheckpoint:
    """Load ``--checkpoint`` on ``--device`` with its weights cast to ``--dtype`` (int8: quantized, CPU only).

    Raises:
        ConfigError: float16 asked for on a CPU, int8 on a GPU, or a bad device. CheckpointError: see
        ``load_checkpoint``.
    """
    from dotformer.api import load_checkpoint_for_decoding

    return load_checkpoint_for_decoding(args.checkpoint, args.device, args.dtype)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``dotformer translate``."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    add_decoding_arguments(parser)
    parser.add_argument("--n-best", type=int, default=1, metavar="N", help="outputs per input (1)")
    parser.add_argument("--input", default=None, metavar="FILE", help="read the inputs from FILE (default: stdin)")
    parser.add_argument("--output", default=None, metavar="FILE", help="write the outputs to FILE (default: stdout)")
    parser.add_argument(
        "--output-format",
        choices=OUTPUT_FORMATS,
        default=None,
        help="text (best output), nbest (ID ||| TEXT ||| SCORE) or json (one object per input); "
        "default: text, or nbest with --n-best N > 1",
    )
    parser.add_argument(
        "--buffer-size",
        type=int,
        default=DEFAULT_BUFFER_SIZE,
        metavar="LINES",
        help=f"most input lines decoded before their outputs are written ({DEFAULT_BUFFER_SIZE}); fewer when "
        "no more input has arrived yet",
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        metavar="N",
        help="most padded source tokens per batch (8192): a long input is decoded in a smaller batch",
    )
    parser.add_argument(
        "--max-input-length",
        type=int,
        default=None,
        metavar="N",
        help="most tokens (EOS included) an input may have; a longer one is an error naming its line "
        "(default: the model's max_len)",
    )
    parser.add_argument("texts", nargs="*", metavar="TEXT", help="texts to translate (default: lines of stdin)")


def one_line(text: str) -> str:
    """An output on one line: ``\\r\\n``, ``\\n`` and ``\\r`` (which a BPE vocabulary can produce) become spaces.

    Other characters that :meth:`str.splitlines` would split on (U+2028, form feed, ...) are kept: lines are
    separated by ``\\n`` only, on input and output.
    """
    if "\n" not in text and "\r" not in text:
        return text
    return text.replace("\r\n", " ").replace("\n", " ").replace("\r", " ")


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


def json_line(payload: dict[str, Any]) -> str:
    """One JSON object on one line (U+2028, U+2029 and U+0085 escaped too, so no reader splits it)."""
    import json

    text = json.dumps(payload, ensure_ascii=False)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").replace("\x85", "\\u0085")


def format_result(result: TranslationResult, index: int, output_format: str, tokenizer: Tokenizer) -> str:
    """The output lines of one input (``index``: its 0-based id), each ending with ``\\n``."""
    if output_format == "text":
        return one_line(result.text) + "\n"
    if output_format == "nbest":
        return "".join(f"{index} ||| {one_line(h.text)} ||| {h.score:.4f}\n" for h in result.hypotheses)
    hypotheses = [
        {
            "text": h.text,
            "tokens": [tokenizer.id_to_token(t) for t in h.tokens],
            "token_ids": list(h.tokens),
            "score": h.score,
            "finished": h.finished,
        }
        for h in result.hypotheses
    ]
    return json_line({"id": index, "source": result.source, "hypotheses": hypotheses}) + "\n"


@dataclass
class Tally:
    """What the warnings at the end count: inputs, symbols read as <unk>, outputs cut at the maximum length."""

    inputs: int = 0
    unknown: int = 0
    with_unknown: list[tuple[str, str]] = field(default_factory=list)  # (where, text) of each input with <unk>
    cut: list[str] = field(default_factory=list)  # where each cut output's input is

    def add(self, result: TranslationResult, where: str) -> None:
        self.inputs += 1
        if result.unknown_symbols:
            self.unknown += result.unknown_symbols
            self.with_unknown.append((where, result.source))
        if not result.finished:
            self.cut.append(where)

    def warnings(self, config: DecodeConfig) -> list[str]:
        lines = []
        if self.unknown:
            where, text = self.with_unknown[0]
            example = text if len(text) <= 40 else text[:37] + "..."
            lines.append(
                f"{self.unknown} input symbol(s) in {len(self.with_unknown)} of {self.inputs} input(s) are not in "
                f"the source vocabulary and were read as <unk> (first: {where}, {example!r})"
            )
        if self.cut:
            lines.append(
                f"{len(self.cut)} of {self.inputs} output(s) reached the maximum output length (--max-len-a "
                f"{config.max_len_a:g} x input length + --max-len-b {config.max_len_b}) before the model ended them "
                f"and are cut (first: {self.cut[0]})"
            )
        return lines


# -- the command ------------------------------------------------------------------------------------------------------


def check_arguments(args: argparse.Namespace, n_best: int) -> str:
    """Validate the flags of this command before any work; returns the output format.

    Raises:
        ConfigError: a bad value, TEXT arguments with --input, --output naming the input, text format with n-best.
    """
    from dotformer.cli.outputs import check_output_file
    from dotformer.errors import ConfigError

    for flag, value in (("--buffer-size", args.buffer_size), ("--max-tokens", args.max_tokens)):
        if value is not None and value < 1:
            raise ConfigError(f"{flag} must be a positive integer, got {value}")
    if args.max_input_length is not None and args.max_input_length < 1:
        raise ConfigError(f"--max-input-length must be a positive integer, got {args.max_input_length}")
    if args.texts and args.input is not None:
        raise ConfigError("give the inputs either as TEXT arguments or with --input FILE, not both")
    output_format = args.output_format or ("text" if n_best == 1 else "nbest")
    if output_format == "text" and n_best > 1:
        raise ConfigError(f"--output-format text writes one output per input; with --n-best {n_best} use nbest or json")
    if args.input is not None and args.input != "-":
        path = Path(args.input)
        if path.is_dir():
            raise ConfigError(f"--input {path} is a directory; give a file")
        if not path.is_file():
            from dotformer.errors import MissingDataError

            raise MissingDataError(f"{path}: no such file")
    if args.output is not None and args.output != "-":
        check_output_file(args.output, "--output", (args.input,))
    return output_format


def input_limit(args: argparse.Namespace, translator: Translator) -> int:
    """``--max-input-length``, or the model's max_len.

    Raises:
        ConfigError: above a learned positional table's size.
    """
    from dotformer.errors import ConfigError

    config = translator.model.config
    if args.max_input_length is None:
        return translator.max_input_length
    if config.positional == "learned" and args.max_input_length > config.max_len:
        raise ConfigError(
            f"--max-input-length {args.max_input_length} exceeds this model's learned positional table "
            f"({config.max_len} positions)"
        )
    return int(args.max_input_length)


def run(args: argparse.Namespace) -> int:
    """Load the checkpoint, then read, decode and write chunk by chunk. Returns 0 (130 on Ctrl-C)."""
    from dotformer.api import Translator
    from dotformer.errors import DataError

    config = decode_config_from_args(args, n_best=args.n_best)
    output_format = check_arguments(args, args.n_best)
    translator = Translator(load_for_decoding(args), args.dtype)
    limit = input_limit(args, translator)

    close: list[IO[Any]] = []
    if args.texts:
        chunks, name = argument_chunks(args.texts, args.buffer_size), None
    else:
        from_file = args.input not in (None, "-")
        stream: BinaryIO = open(args.input, "rb") if from_file else binary_stdin()  # noqa: SIM115 (closed below)
        if from_file:
            close.append(stream)
        name = args.input if from_file else "<stdin>"
        chunks = StreamLines(stream, name).chunks(args.buffer_size)
    if args.output not in (None, "-"):
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        out: IO[bytes] = open(args.output, "wb")  # noqa: SIM115 (closed below)
        close.append(out)
    else:
        out = getattr(sys.stdout, "buffer", None) or _TextAsBytes(sys.stdout)
    tally = Tally()
    try:
        for first, lines in chunks:
            done, error = decode_chunk(translator, lines, first, name, config, args, limit)
            text = "".join(format_result(r, i, output_format, translator.tgt_tokenizer) for r, i in done)
            with deferred_interrupt():  # a chunk's outputs are written whole, and counted as written
                out.write(text.encode("utf-8"))
                out.flush()
                for result, index in done:
                    tally.add(result, where(name, index + 1))
            if error is not None:
                raise error
    except DataError as exc:  # a bad line (UTF-8, length): say that the outputs before it are kept
        if tally.inputs:
            raise DataError(f"{exc} (the outputs of the {tally.inputs} input(s) before it are written)") from None
        raise
    except KeyboardInterrupt:
        print(
            f"dotformer translate: interrupted after {tally.inputs} input(s); their outputs are written",
            file=sys.stderr,
        )
        return 130
    finally:
        for stream_to_close in close:
            stream_to_close.close()
        for line in tally.warnings(config):
            print(f"dotformer translate: warning: {line}", file=sys.stderr)
    return 0


def where(name: str | None, number: int) -> str:
    """``FILE:LINE`` (``<stdin>:LINE``) for an input read from a stream, ``input N`` for a TEXT argument."""
    return f"input {number}" if name is None else f"{name}:{number}"


def decode_chunk(
    translator: Translator,
    lines: list[str],
    first: int,
    name: str | None,
    config: DecodeConfig,
    args: argparse.Namespace,
    limit: int,
) -> tuple[list[tuple[TranslationResult, int]], Exception | None]:
    """Decode one chunk (its first line is number ``first``).

    Returns:
        ``(result, 0-based id)`` per decoded input, and None, or a :class:`~dotformer.errors.DataError` naming
        ``FILE:LINE`` when an input is longer than ``limit`` tokens: the inputs before it are decoded.
    """
    import warnings

    from dotformer.decoding.translate import InputTooLongError, UnknownTokenWarning
    from dotformer.errors import DataError

    error: Exception | None = None
    options: dict[str, Any] = dict(
        config=config,
        batch_size=args.batch_size,
        max_tokens=args.max_tokens,
        max_input_length=limit,
        details=True,
        progress=False,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnknownTokenWarning)  # counted over the whole input, warned once at the end
        try:
            results = translator.translate(lines, **options)
        except InputTooLongError as exc:
            error = DataError(
                f"{where(name, first + exc.index)}: the input has {exc.length} tokens (EOS included), more than "
                f"--max-input-length {exc.limit} (default: the model's max_len); shorten it"
            )
            results = translator.translate(lines[: exc.index], **options) if exc.index else []
    return [(result, first - 1 + i) for i, result in enumerate(results)], error


@contextlib.contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Hold a Ctrl-C that arrives inside the block until the block ends; a second Ctrl-C interrupts at once.

    Only where Python's own SIGINT handler is installed, in the main thread (elsewhere the block runs as it is).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.default_int_handler:
        yield
        return
    received: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        if received:
            raise KeyboardInterrupt
        received.append(signum)

    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt


class _TextAsBytes:
    """A text stream (``sys.stdout`` replaced by a test) seen as the bytes stream ``run`` writes to."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, data: bytes) -> int:
        return self.stream.write(data.decode("utf-8"))

    def flush(self) -> None:
        self.stream.flush()
