"""``dotformer translate``: decode texts with a trained checkpoint (greedy, beam search or sampling), streaming.

Standard input (or ``--input FILE``) is read in chunks as it arrives: each chunk (at most ``--buffer-size`` lines) is
decoded and its outputs are written and flushed before the next is read, so a line typed into a pipe gets its answer
at once. The decoding itself is :meth:`dotformer.api.Translator.translate`, the Python API's path. Reading and
writing the lines is :mod:`dotformer.cli.lines`; the input flags (shared with ``embed``) are
:mod:`dotformer.cli.inputs`; the decoding flags (shared with ``evaluate``) are :mod:`dotformer.cli.decode_flags`.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NamedTuple

from dotformer.cli.decode_flags import (
    add_decoding_arguments,
    add_option_flags,
    decode_config_from_args,
    load_translator,
)
from dotformer.cli.inputs import check_input_file, check_input_flags, open_input, too_long, utf8_arguments, where
from dotformer.cli.lines import StreamLines, TextAsBytes, argument_chunks, format_result

if TYPE_CHECKING:
    from dotformer.api import TranslationResult, Translator
    from dotformer.decoding import DecodeConfig

OUTPUT_FORMATS = ("text", "nbest", "json")
# most lines decoded (and sorted by length into batches) together before their outputs are written: a file is read
# in chunks this large (a pipe as its lines arrive); a larger pool pads its batches less (CTranslate2's translate_file
# pools 16 batches, OpenNMT-py 10,000 lines)
DEFAULT_BUFFER_SIZE = 4096

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
lengths: an input of more than --max-input-length tokens (EOS included; default: the model's max_len) is an
        error naming its line, after the outputs of the lines before it are written. Inputs are decoded in batches
        of at most --batch-size sentences and --max-tokens padded tokens, so one long line does not pad a batch.
warnings: one line each on standard error, at the end: characters the model's vocabulary does not know (read as
        <unk>), and outputs cut at the maximum output length (--max-len-a, --max-len-b) or at the model's positions
        (its max_len, which caps that length) before the model ended them.

A closed output pipe (| head -1) ends quietly; Ctrl-C ends with the outputs of every decoded chunk written.

examples:
  dotformer translate --checkpoint runs/g2p transformer attention
  dotformer translate --checkpoint runs/bible --beam 5 --n-best 3 < verses.es
  dotformer translate --checkpoint runs/bible --input verses.es --output verses.en --output-format json
  dotformer translate --checkpoint runs/copy --strategy sample --top-p 0.9 --seed 1 "a1 b2 c3"
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``dotformer translate``."""
    parser.epilog = EPILOG
    parser.usage = "%(prog)s --checkpoint DIR [...] [TEXT ...]"
    add_decoding_arguments(parser, exclude=("n_best",))  # --checkpoint leads, then "decoding", "device and speed"
    batching = parser.add_argument_group("batching and long inputs")
    add_option_flags(parser, only=("n_best",))  # --n-best, in the lead section beside --input and --output
    parser.add_argument("--input", default=None, metavar="FILE", help="read the inputs from FILE (default: stdin)")
    parser.add_argument("--output", default=None, metavar="FILE", help="write the outputs to FILE (default: stdout)")
    parser.add_argument(
        "--output-format",
        choices=OUTPUT_FORMATS,
        default=None,
        help="text (best output), nbest (ID ||| TEXT ||| SCORE) or json (one object per input); "
        "default: text, or nbest with --n-best N > 1",
    )
    batching.add_argument(
        "--buffer-size",
        type=int,
        default=DEFAULT_BUFFER_SIZE,
        metavar="LINES",
        help=f"most input lines decoded together, sorted by length into batches, before their outputs are written "
        f"({DEFAULT_BUFFER_SIZE}); fewer when no more input has arrived yet",
    )
    batching.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        metavar="N",
        help="most padded source tokens per batch (8192): a long input is decoded in a smaller batch",
    )
    batching.add_argument(
        "--max-input-length",
        type=int,
        default=None,
        metavar="N",
        help="most tokens (EOS included) an input may have; a longer one is an error naming its line "
        "(default: the model's max_len)",
    )
    parser.add_argument(
        "--inline-prefix",
        action="store_true",
        help='each input is "SOURCE ||| PREFIX" (a line without " ||| " has no prefix); see --prefix-file',
    )
    parser.add_argument("texts", nargs="*", metavar="TEXT", help="texts to translate (default: lines of stdin)")


@dataclass
class Tally:
    """What the warnings at the end count: inputs, symbols read as <unk>, outputs cut at the maximum length."""

    inputs: int = 0
    unknown: int = 0
    with_unknown: list[tuple[str, str]] = field(default_factory=list)  # (where, text) of each input with <unk>
    cut: list[str] = field(default_factory=list)  # where each cut output's input is
    table: int | None = None  # the model's positions (max_len): no output is longer
    positional: str = "learned"  # the kind of those positions, as the warning names them
    cut_by_table: list[str] = field(default_factory=list)  # where each output cut by that table's length is
    prefix_unknown: list[str] = field(default_factory=list)  # the prefixes' symbols read as <unk>, in order

    def add(self, result: TranslationResult, where: str, prefix_unknown: Sequence[str] = ()) -> None:
        self.inputs += 1
        self.prefix_unknown += prefix_unknown
        if result.unknown_symbols:
            self.unknown += result.unknown_symbols
            self.with_unknown.append((where, result.source))
        if not result.finished:
            at_table = self.table is not None and len(result.hypotheses[0].tokens) >= self.table
            (self.cut_by_table if at_table else self.cut).append(where)

    def warnings(self, config: DecodeConfig) -> list[str]:
        lines = []
        if self.unknown:
            where, text = self.with_unknown[0]
            example = text if len(text) <= 40 else text[:37] + "..."
            lines.append(
                f"{self.unknown} input symbol(s) in {len(self.with_unknown)} of {self.inputs} input(s) are not in "
                f"the source vocabulary and were read as <unk> (first: {where}, {example!r})"
            )
        from dotformer.decoding.inputs import unknown_prefix_message

        prefix_line = unknown_prefix_message(self.prefix_unknown)
        if prefix_line is not None:
            lines.append(prefix_line)
        if self.cut:
            lines.append(
                f"{len(self.cut)} of {self.inputs} output(s) reached the maximum output length (--max-len-a "
                f"{config.max_len_a:g} x input length + --max-len-b {config.max_len_b}) before the model ended them "
                f"and are cut (first: {self.cut[0]})"
            )
        if self.cut_by_table:
            from dotformer.decoding.evaluation import positions_phrase

            lines.append(
                f"{len(self.cut_by_table)} of {self.inputs} output(s) reached "
                f"{positions_phrase(self.table, self.positional)}, the most any output can have, before the model "
                f"ended them and are cut (first: {self.cut_by_table[0]}); --max-len-a/--max-len-b cannot lengthen them"
            )
        return lines


# -- the command ------------------------------------------------------------------------------------------------------


def check_arguments(args: argparse.Namespace, n_best: int) -> str:
    """Validate the flags of this command before any work; returns the output format.

    Raises:
        ConfigError: a bad value, TEXT arguments with --input, --output naming the input (or the file on standard
            input), text format with n-best.
    """
    from dotformer.cli.outputs import check_not_stdin, check_output_file
    from dotformer.errors import ConfigError

    check_input_flags(args, ("--buffer-size", args.buffer_size), ("--max-tokens", args.max_tokens))
    if args.prefix is not None and args.inline_prefix:
        raise ConfigError("give the prefixes either with --prefix-file FILE or with --inline-prefix, not both")
    if args.prefix is not None and Path(args.prefix).is_dir():
        raise ConfigError(f"--prefix-file {args.prefix} is a directory; give a file")
    if args.prefix is not None and not Path(args.prefix).is_file():
        from dotformer.errors import MissingDataError

        raise MissingDataError(f"--prefix-file {args.prefix}: no such file")
    output_format = args.output_format or ("text" if n_best == 1 else "nbest")
    if output_format == "text" and n_best > 1:
        raise ConfigError(f"--output-format text writes one output per input; with --n-best {n_best} use nbest or json")
    check_input_file(args.input)
    if args.output is not None and args.output != "-":
        check_output_file(args.output, "--output", (("--input", args.input), ("--prefix-file", args.prefix)))
        if not args.texts and args.input in (None, "-"):
            check_not_stdin(args.output, "--output")
    return output_format


def run(args: argparse.Namespace) -> int:
    """Load the checkpoint, then read, decode and write chunk by chunk. Returns 0 (130 on Ctrl-C)."""
    from dotformer.decoding.inputs import check_max_input_length, encode_prefix
    from dotformer.decoding.options import DecodeRequest
    from dotformer.errors import DataError

    config = decode_config_from_args(args)
    output_format = check_arguments(args, config.n_best)
    translator = load_translator(args, DecodeRequest(config), purpose="translate")
    limit = check_max_input_length(translator.config, args.max_input_length, "--max-input-length")

    close: list[IO[Any]] = []
    if args.texts:
        chunks, name = argument_chunks(utf8_arguments(args.texts), args.buffer_size), None
    else:
        stream, name, from_file = open_input(args.input)
        if from_file:
            close.append(stream)
        chunks = StreamLines(stream, name).chunks(args.buffer_size)
    if args.output not in (None, "-"):
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        out: IO[bytes] = open(args.output, "wb")  # noqa: SIM115 (closed below)
        close.append(out)
    else:
        out = getattr(sys.stdout, "buffer", None) or TextAsBytes(sys.stdout)
    prefix_lines = read_prefix_file(args.prefix) if args.prefix is not None else None
    model_config = translator.config
    tally = Tally(table=model_config.max_len, positional=model_config.positional)
    try:
        for first, lines in chunks:
            malformed = malformed_inline_prefix(lines, first, name) if args.inline_prefix else None
            if malformed is not None:  # the lines before it are decoded and written, then the error
                lines = lines[: malformed.index]
            lines, prefixes = split_prefixes(lines, first, name, args.inline_prefix, prefix_lines, args.prefix)
            done, error = decode_chunk(
                translator, lines, first, name, config, args, limit, prefixes, scores=output_format != "text"
            )
            error = error or (malformed.error if malformed is not None else None)
            text = "".join(format_result(r, i, output_format, translator.tgt_tokenizer) for r, i in done)
            with deferred_interrupt():  # a chunk's outputs are written whole, and counted as written
                out.write(text.encode("utf-8"))
                out.flush()
                for result, index in done:
                    prefix = None if prefixes is None else prefixes[index + 1 - first]
                    tally.add(result, where(name, index + 1), encode_prefix(translator.tgt_tokenizer, prefix).unknown)
            if error is not None:
                raise error
        if prefix_lines is not None and len(prefix_lines) != tally.inputs:
            raise DataError(
                f"--prefix-file {args.prefix} has {len(prefix_lines)} line(s) for {tally.inputs} input(s): "
                f"give one prefix per input"
            )
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
    if not tally.inputs and args.input not in (None, "-"):  # as classify and embed say it (a stream may end at once)
        raise DataError(f"{args.input}: no input lines to translate")
    return 0


def read_prefix_file(path: str) -> list[str]:
    """The lines of ``--prefix-file`` (UTF-8, read as inputs are).

    Raises:
        DataError: bytes that are not UTF-8 (naming ``FILE:LINE``).
    """
    with open(path, "rb") as stream:
        return [line for _, lines in StreamLines(stream, path).chunks(1 << 20) for line in lines]


INLINE_SEPARATOR = " ||| "  # between the source and the prefix of an --inline-prefix line


class Malformed(NamedTuple):
    """The first malformed line of a chunk: its index in the chunk and the error that names it."""

    index: int
    error: Exception


def malformed_inline_prefix(lines: list[str], first: int, name: str | None) -> Malformed | None:
    """The first line of a chunk (its first line is number ``first``) that is not ``SOURCE ||| PREFIX`` or a plain
    source: one that holds ``|||`` more than once, or ``|||`` without a space on each side. None when all are fine.
    """
    from dotformer.errors import DataError

    for i, line in enumerate(lines):
        bars, separators = line.count("|||"), line.count(INLINE_SEPARATOR)
        if bars == separators <= 1:
            continue
        problem = f"holds {bars} '|||'" if bars > 1 else "holds '|||' without a space on each side"
        return Malformed(
            i,
            DataError(
                f"{where(name, first + i)}: the line {problem}: --inline-prefix reads SOURCE ||| PREFIX, one "
                f"separator with a space on each side (a line without one has no prefix)"
            ),
        )
    return None


def split_prefixes(
    lines: list[str],
    first: int,
    name: str | None,
    inline: bool,
    prefix_lines: list[str] | None,
    prefix_file: str | None,
) -> tuple[list[str], list[str | None] | None]:
    """The sources of a chunk (its first line is number ``first``) and their prefixes (None: no prefixes).

    ``inline``: each line is ``SOURCE ||| PREFIX`` (split at the first ``" ||| "``); ``prefix_lines``: the lines of
    ``--prefix-file``, one per input.

    Raises:
        DataError: the input has more lines than ``--prefix-file`` (naming the first line without a prefix).
    """
    if inline:
        parts = [line.partition(INLINE_SEPARATOR) for line in lines]
        return [source for source, _, _ in parts], [prefix if sep else None for _, sep, prefix in parts]
    if prefix_lines is None:
        return lines, None
    last = first - 1 + len(lines)
    if last > len(prefix_lines):
        from dotformer.errors import DataError

        raise DataError(
            f"{where(name, len(prefix_lines) + 1)}: no prefix for this input: --prefix-file {prefix_file} has "
            f"{len(prefix_lines)} line(s); give one prefix per input"
        )
    return lines, list(prefix_lines[first - 1 : last])


def decode_chunk(
    translator: Translator,
    lines: list[str],
    first: int,
    name: str | None,
    config: DecodeConfig,
    args: argparse.Namespace,
    limit: int,
    prefixes: list[str | None] | None = None,
    scores: bool = True,
) -> tuple[list[tuple[TranslationResult, int]], Exception | None]:
    """Decode one chunk (its first line is number ``first``); ``scores`` False: the output shows no score (text),
    so the CTranslate2 engine skips its scoring pass.

    Returns:
        ``(result, 0-based id)`` per decoded input, and None, or a :class:`~dotformer.errors.DataError` naming
        ``FILE:LINE`` when an input is longer than ``limit`` tokens: the inputs before it are decoded.
    """
    import warnings

    from dotformer.decoding.inputs import InputTooLongError, UnknownTokenWarning
    from dotformer.decoding.options import DecodeRequest

    error: Exception | None = None
    request = DecodeRequest(
        config=config,
        prefix=None if prefixes is None else tuple(prefixes),
        batch_size=args.batch_size,
        max_tokens=args.max_tokens,
        max_input_length=limit,
        details=True,
        progress=False,
        scores=scores,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnknownTokenWarning)  # counted over the whole input, warned once at the end
        try:
            results = translator.translate(lines, request)
        except InputTooLongError as exc:
            error = too_long(exc, name, first + exc.index, "EOS")
            before = None if prefixes is None else tuple(prefixes[: exc.index])
            results = translator.translate(lines[: exc.index], replace(request, prefix=before)) if exc.index else []
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
