"""The ``dotformer`` command line: thin subcommands that parse flags, build configs and call the library.

Each subcommand lives in its own module with two functions, ``add_arguments(parser)`` and ``run(args) -> int``.
A user's mistake (any :class:`dotformer.DotformerError`, a missing file, bad UTF-8) prints one line on standard
error and exits with status 2; it never shows a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Collection, Sequence

from dotformer.cli.help_layout import ArgumentParser
from dotformer.errors import DotformerError

# subcommand name -> (module, one-line help). A command's module is imported when its flags are built (only the
# command that runs: see build_parser), and imports nothing heavy at module level.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "train": (
        "dotformer.cli.train",
        "train a Transformer on real pairs (CMUdict, Bible, TSV, parallel files), text (--task lm, mlm) or labelled "
        "texts (--task classify, tag)",
    ),
    "prepare": (
        "dotformer.cli.prepare",
        "encode a corpus once into memory-mapped token arrays that every train run and rank maps",
    ),
    "translate": ("dotformer.cli.translate", "decode inputs with a trained checkpoint (greedy, beam, sampling)"),
    "generate": ("dotformer.cli.generate", "continue prompts with a language model (sampling, greedy, beam)"),
    "evaluate": ("dotformer.cli.evaluate", "metrics (BLEU/chrF, WER/PER, accuracy/F1, perplexity) on a held-out split"),
    "average": ("dotformer.cli.average", "average the weights of several checkpoints"),
    "plot": ("dotformer.cli.plot", "draw attention maps, positional encodings, masks, schedules, curves"),
    "explain": ("dotformer.cli.explain", "print the lesson's worked attention example step by step"),
    "compare": ("dotformer.cli.compare", "measure recurrence against self-attention (the paper's Table 1)"),
    "explore": ("dotformer.cli.explore", "serve or write an HTML attention explorer for a checkpoint"),
    "export": (
        "dotformer.cli.export",
        "write a checkpoint for Hugging Face (GPT-2, Llama, BERT, Marian), CTranslate2 or ONNX",
    ),
    "serve": ("dotformer.cli.serve", "serve POST /api/translate (generate, classify) for a checkpoint on 127.0.0.1"),
    "import": (
        "dotformer.cli.import_",
        "turn a Hugging Face (GPT-2, Llama, Mistral, Qwen, Gemma, BERT, Marian) or GGUF model into a checkpoint",
    ),
    "embed": ("dotformer.cli.embed", "sentence embeddings (mean or CLS pooling) from a checkpoint's encoder"),
    "classify": ("dotformer.cli.classify", "the label of each text, or of each word, from a classifier or tagger"),
}

# the top-level --help's epilog: the main job (grapheme-to-phoneme on CMUdict) from training to pronouncing words
START_HERE = """\
Start here with the main job: train a grapheme-to-phoneme model on CMUdict (about 10 minutes on a 2-core CPU),
score it on the held-out words and pronounce a few (pip install -c constraints.txt -e ".[g2p,eval]" first; bash
scripts/g2p.sh runs the same). Then train on your own pairs, one tab-separated source and target per line.

start here, examples:
  dotformer train --config g2p --out runs/g2p --max-minutes 10
  dotformer evaluate --checkpoint runs/g2p/last --split test
  dotformer translate --checkpoint runs/g2p/last transformer attention
  dotformer train --data pairs.tsv --out runs/mine --max-minutes 30
"""


def build_parser(commands: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The top-level parser with every subcommand, and the flags of those in ``commands`` (None: all).

    A command's flags import its module (and what its flags need), so :func:`main` builds only the command it runs:
    ``dotformer --help`` imports no command at all.
    """
    parser = ArgumentParser(
        prog="dotformer",
        description="The Transformer of 'Attention Is All You Need', from the dot product up. Each command has "
        "its own --help (dotformer train --help), which shows the flags most runs need first.",
        epilog=START_HERE,
    )
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        if commands is not None and name not in commands:
            continue
        module = importlib.import_module(module_name)
        module.add_arguments(sub_parser)
        sub_parser.set_defaults(handler=module.run)
    return parser


def command_of(argv: Sequence[str]) -> str | None:
    """The subcommand named by ``argv`` (its first word that is not an option), or None."""
    first = next((word for word in argv if not word.startswith("-")), None)
    return first if first in SUBCOMMANDS else None


def _version() -> str:
    from dotformer import __version__

    return f"dotformer {__version__}"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dotformer`` console script. Returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = command_of(argv)
    parser = build_parser(set() if command is None else {command})
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # told by the command's parser: its usage line and "dotformer train: error: ..."
        _command_parser(parser, getattr(args, "command", None)).error(f"unrecognized arguments: {' '.join(unknown)}")
    if getattr(args, "handler", None) is None:
        parser.print_help()
        return 2
    empty = _empty_path(_command_parser(parser, args.command), args)
    if empty is not None:  # "" (an unset shell variable) would name the current directory
        print(f"dotformer {args.command}: error: {empty} is empty: give a path", file=sys.stderr)
        return 2
    from dotformer.cli.log import command_logging

    try:
        with command_logging(args.command):  # the library's log lines and warnings on stderr
            return int(args.handler(args) or 0)
    except DotformerError as exc:
        print(f"dotformer {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return _closed_pipe()
    except OSError as exc:  # a missing file, a path under a regular file, a full disk, no permission, ...
        print(f"dotformer {args.command}: error: {_os_error_text(exc)}", file=sys.stderr)
        return 2
    except UnicodeDecodeError as exc:
        print(
            f"dotformer {args.command}: error: input is not valid UTF-8 ({exc.reason} at byte {exc.start})",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print(f"dotformer {args.command}: interrupted", file=sys.stderr)
        return 130


def _command_parser(parser: argparse.ArgumentParser, command: str | None) -> argparse.ArgumentParser:
    """The parser of subcommand ``command`` (``parser`` itself when there is none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            return action.choices[command]
    return parser


# how the flags and arguments that name a file or a directory show their value in --help
PATH_METAVARS = frozenset(
    {"FILE", "FILE.html", "FILE.toml", "DIR", "CKPT", "CHECKPOINT", "CHECKPOINT OUT", "OUT", "DATASET", "TEST", "VALID"}
)


def _empty_path(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str | None:
    """The first flag (or argument, by its metavar) naming a file or a directory whose value is empty or blank, or
    None."""
    for action in parser._actions:
        if action.metavar not in PATH_METAVARS:
            continue
        value = getattr(args, action.dest, None)
        if any(isinstance(item, str) and not item.strip() for item in (value if isinstance(value, list) else [value])):
            return action.option_strings[0] if action.option_strings else str(action.metavar)
    return None


def _os_error_text(exc: OSError) -> str:
    """``No space left on device: runs/g2p/last/model.safetensors`` (the reason, then the path(s) involved)."""
    reason = exc.strerror or str(exc)
    paths = [str(p) for p in (exc.filename, exc.filename2) if p is not None]
    return f"{reason}: {' -> '.join(paths)}" if paths else reason


def _closed_pipe() -> int:
    """The reader of standard output went away (``dotformer translate ... | head -1``): stop quietly.

    Returns 141 (128 + SIGPIPE), what a shell reports for a command ended by a closed pipe. Standard output is
    pointed at /dev/null so that the interpreter's final flush cannot raise a second time.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 141


if __name__ == "__main__":
    raise SystemExit(main())
