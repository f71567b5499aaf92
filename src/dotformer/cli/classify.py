"""``dotformer classify``: the label of each input line (a ``--task classify`` checkpoint), or of each of its words
(a ``--task tag`` checkpoint).

The labels come from :mod:`dotformer.api.classifier`, the path of ``dotformer.load(path).classify(texts)``; this
module reads the lines, checks the flags and writes the results.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from dotformer.cli.decode_flags import add_device_flags, load_for_decoding
from dotformer.cli.inputs import check_input_file, read_texts

FORMATS = ("text", "jsonl")

EPILOG = """\
input:  the TEXT arguments, or else --input FILE, or else standard input: one text per line (UTF-8). A tagger's
        words are the whitespace-separated pieces of a line.
output: standard output or --output FILE, one line per input, in its order (--output-format, or --format):
          text   a classifier: LABEL<TAB>PROBABILITY; a tagger: WORDS<TAB>LABELS (the words and their labels, each
                 separated by spaces: the form --task tag trains on)
          jsonl  a classifier: {"id", "text", "label", "probability", "probabilities": {label: p, ...}};
                 a tagger: {"id", "text", "words", "labels", "probabilities"} (each word's label's probability)
        A text longer than the model reads is cut for a classifier (one warning) and refused for a tagger.

examples:
  dotformer classify --checkpoint runs/genres "Blessed is the man that walketh not in the counsel of the ungodly"
  dotformer classify --checkpoint runs/genres --input verses.txt --output-format jsonl --output labels.jsonl
  echo "John lives in Paris" | dotformer classify --checkpoint runs/ner
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``dotformer classify``."""
    parser.epilog = EPILOG
    parser.add_argument("--checkpoint", required=True, metavar="DIR", help="checkpoint or run directory (run: best/)")
    speed = parser.add_argument_group("device and speed")
    add_device_flags(speed, "precision of the weights (probabilities are computed in float32)")
    speed.add_argument("--batch-size", type=int, default=64, metavar="B", help="texts at once (64)")
    parser.add_argument("--input", default=None, metavar="FILE", help="read the inputs from FILE (default: stdin)")
    parser.add_argument("--output", default=None, metavar="FILE", help="write the results to FILE (default: stdout)")
    parser.add_argument(
        "--output-format",
        "--format",
        dest="format",
        default="text",
        choices=FORMATS,
        help="text (default) or jsonl (--format is the same flag)",
    )
    parser.add_argument("texts", nargs="*", metavar="TEXT", help="texts to label (default: lines of stdin)")


def result_line(result: Any, format: str, index: int) -> str:  # noqa: A002 (the flag's name)
    """One output line (module docstring), without its newline."""
    from dotformer.api.classifier import Classification
    from dotformer.cli.lines import json_line

    if format == "jsonl":
        return json_line({"id": index, **result._asdict()})
    if isinstance(result, Classification):
        return f"{result.label}\t{result.probability:.4f}"
    return f"{' '.join(result.words)}\t{' '.join(result.labels)}"


def run(args: argparse.Namespace) -> int:
    """Read the inputs, label them, write the results. Returns 0."""
    from dotformer.api import Translator
    from dotformer.cli.inputs import where
    from dotformer.cli.outputs import check_output_file
    from dotformer.decoding.inputs import InputTooLongError
    from dotformer.errors import ConfigError, DataError

    if args.batch_size < 1:
        raise ConfigError(f"--batch-size must be a positive integer, got {args.batch_size}")
    check_input_file(args.input)
    to_file = args.output not in (None, "-")
    if to_file:
        check_output_file(args.output, "--output", (("--input", args.input),))
    texts = read_texts(args, "classify")
    model = Translator(load_for_decoding(args), args.dtype)
    try:
        results = model.classify(texts, batch_size=args.batch_size)
    except InputTooLongError as exc:
        name = None if args.texts else (args.input or "<stdin>")
        raise DataError(
            f"{where(name, exc.index + 1)}: {exc.length} tokens with BOS and EOS, more than the {exc.limit} the "
            f"model reads: split it"
        ) from None
    text = "".join(result_line(result, args.format, i) + "\n" for i, result in enumerate(results))
    if to_file:
        path = Path(args.output)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}: {len(results)} results", file=sys.stderr)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0
