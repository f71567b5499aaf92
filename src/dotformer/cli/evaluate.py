"""``dotformer evaluate``: decode a test file (or a run's held-out split) and print its metrics (and write them)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from dotformer.cli.data_flags import READER_FLAGS, add_reader_arguments, named_by_flags, reader_values
from dotformer.cli.decode_flags import (
    add_decoding_arguments,
    decode_config_from_args,
    load_translator,
)

EPILOG = """\
data: --data FILE evaluates any test file with any checkpoint (also one copied out of its run directory): a TSV/CSV
file of pairs, SRC,TGT line-aligned files, hf:NAME (its test split), or cmudict/bible. The file is read with the
checkpoint's own reader settings (delimiter, columns, header), which the reader flags override; a source seen on
several lines is decoded once, and all its targets are its references (a word's pronunciations). Without --data,
the run's saved data/SPLIT.tsv is evaluated.

metrics: the task recorded in the checkpoint picks them: g2p: WER and PER with stress kept and stripped (a word is
right when it matches any of its pronunciations); translation: BLEU and chrF (sacrebleu, with signatures); exact
and copy/reverse: exact match. Every task also reports the teacher-forced perplexity of the references. A test file
of another task (--task, or a named corpus) is refused. Outputs cut at the maximum length are counted
("unfinished" in the JSON) and reported in one warning line.

--limit N decodes a random sample of N distinct sources, drawn with --seed (default 1): the same N and seed give
the same sample. --hyps FILE writes the output of every evaluated pair, one line each, in the file's order.

examples:
  dotformer evaluate --checkpoint runs/g2p --data test.tsv --hyps test.hyp --json test_metrics.json
  dotformer evaluate --checkpoint runs/g2p --split test --beam 4 --limit 500 --seed 1
  dotformer evaluate --checkpoint best/ --data ids.tsv --source-column word --target-column phones --header

language models (dotformer train --task lm): perplexity, nats and bits per token and bits per character of the run's
held-out text (--split test or valid) or of a text file (--data FILE), scored in blocks of the training block size
T, or with --stride S in a window of T tokens moved S tokens at a time, each window scoring its last S tokens (HF
transformers' sliding-window perplexity: more context for each token, T / S times the work); --limit N scores its
first N lines; the decoding flags and the reader flags of pairs do not apply.

an encoder's tasks: a masked language model (--task mlm): masked-token accuracy and perplexity of held-out text,
masked as in training (seeded by --seed); a classifier (--task classify) or tagger (--task tag): accuracy and macro-F1
of the labels it gives the run's held-out split or a --data file of its form (scikit-learn; seqeval's entity F1 for
BIO tags), with a line per label; --limit N scores a seeded sample of N texts; the reader flags of pairs do not
apply.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``dotformer evaluate``."""
    parser.epilog = EPILOG
    parser.usage = "%(prog)s --checkpoint DIR [--data FILE] [--split SPLIT] [...]"
    add_decoding_arguments(parser, exclude=("n_best", "prefix", "alignments", "alignment_layer"))
    parser.add_argument(
        "--data",
        default=None,
        metavar="FILE",
        help="the test pairs: a TSV/CSV file, SRC,TGT files, hf:NAME, cmudict or bible (default: the run's --split)",
    )
    parser.add_argument("--split", choices=["test", "valid"], default=None, help="the run's saved split (test)")
    parser.add_argument(
        "--limit", type=int, default=None, metavar="N", help="a random sample of N distinct sources (seeded: --seed)"
    )
    parser.add_argument("--hyps", default=None, metavar="FILE", help="write every pair's output to FILE, in order")
    parser.add_argument(
        "--stride",
        type=int,
        default=None,
        metavar="S",
        help="a language model: tokens the window moves; each token scored with at least T - S tokens of context, "
        "or all those before it (default: blocks of T, as training reads the text)",
    )
    parser.add_argument("--json", default=None, metavar="FILE", help="also write the metrics to FILE as JSON")
    add_reader_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Check the outputs, load, let the checkpoint's task score the data, print and write; returns 0."""
    import json
    from pathlib import Path

    from dotformer.cli.lines import one_line
    from dotformer.cli.outputs import check_output_file, same_file
    from dotformer.config import DEFAULT_SEED, MAX_SEED
    from dotformer.data.read.types import TASKS as PAIR_TASKS
    from dotformer.decoding.options import DecodeRequest
    from dotformer.errors import CheckpointError, ConfigError
    from dotformer.runs.task import EvalRequest
    from dotformer.runs.tasks import task_named

    decoding = _decoding_flags_given(args)  # a task that decodes nothing refuses them
    seed = args.seed if args.seed is not None else DEFAULT_SEED
    if not 0 <= seed <= MAX_SEED:  # also the --limit sample's seed, with any strategy
        raise ConfigError(f"--seed must be an integer in [0, 2**63 - 1], got {seed}")
    if args.strategy != "sample":  # --seed then only draws the --limit sample
        args = argparse.Namespace(**{**vars(args), "seed": None})
    config = decode_config_from_args(args)
    if args.batch_size < 1:  # sentences, texts, blocks or windows a batch, whatever the task
        raise ConfigError(f"--batch-size must be a positive integer, got {args.batch_size}")
    if args.limit is not None and args.limit < 1:  # sources, lines or texts, whatever the task
        raise ConfigError(f"--limit must be a positive integer, got {args.limit}")
    if args.data is not None and args.split is not None:
        raise ConfigError("give --data FILE (a test file) or --split (the run's saved split), not both")
    if args.data is None and reader_values(args):
        raise ConfigError(f"{', '.join(_flag(f) for f in reader_values(args))} read a --data file; none was given")
    read = tuple(("--data", path) for path in args.data.split(",")) if args.data else ()  # a TSV, or SRC,TGT files
    wanted = (("--json", args.json), ("--hyps", args.hyps))
    outputs = {flag: check_output_file(path, flag, read) for flag, path in wanted if path}
    if (
        args.json
        and args.hyps
        and (Path(args.json).resolve() == Path(args.hyps).resolve() or same_file(args.json, args.hyps))
    ):
        raise ConfigError(f"--json and --hyps name one file ({args.json}); give two")
    translator = load_translator(args, DecodeRequest(config), purpose="evaluate")
    files = translator.files
    if files.info.get("task") is None:
        raise CheckpointError(f"{files.path}/config.json records no task (g2p, translation, exact or synthetic)")
    task = task_named(str(files.info["task"]))
    if not task.decodes:
        decoding = [flag for flag in decoding if not (flag == "--seed" and task.seeded)]  # a sample's, a masking's
        them, sets = ("them", "set") if len(decoding) > 1 else ("it", "sets")
        if decoding:
            raise ConfigError(
                f"{', '.join(decoding)} {sets} how outputs are decoded; {task.title}'s evaluation decodes nothing "
                f"(it scores the text itself): leave {them} out"
            )
        if "--hyps" in outputs:
            raise ConfigError(f"--hyps writes decoded outputs; {task.title}'s evaluation scores the text itself")
    asked = reader_values(args).get("task")
    if task.reads_pairs and asked is not None and asked not in PAIR_TASKS:  # a task that reads no file of pairs
        raise ConfigError(
            f"--task {asked}: {files.path} is {task.title} (task {task.name}), which evaluates a file of pairs; "
            f"--task {asked}'s data is another kind: leave --task out, or evaluate with {task_named(asked).title}"
        )
    if not task.reads_pairs:  # the reader flags read a file of pairs; this task reads its own kind of data
        given = {field: value for field, value in reader_values(args).items() if (field, value) != ("task", task.name)}
        if "task" in given:
            raise ConfigError(
                f"--task {given['task']}: {files.path} is {task.title} (task {task.name}), which evaluates its own "
                "kind of data: leave --task out"
            )
        if given:
            sets, them = ("set", "them") if len(given) > 1 else ("sets", "it")
            raise ConfigError(
                f"{', '.join(_flag(f) for f in given)} {sets} how a file of pairs is read; {task.title}'s evaluation "
                f"reads its --data file as its own kind of data: leave {them} out"
            )
    if args.stride is not None and not task.slides:
        raise ConfigError(
            f"--stride moves the sliding window of a language model's evaluation; {task.title}'s has none: leave it out"
        )
    request = EvalRequest(
        data=args.data,
        split=args.split or "test",
        limit=args.limit,
        seed=seed,
        decode=config if task.decodes else None,
        batch_size=args.batch_size,
        reader=reader_values(args),
        stride=args.stride,
    )
    try:
        report = task.evaluate(translator.translation_engine(), request)
    except ConfigError as exc:  # a reader flag's value, named as the flag (not DataConfig.FIELD)
        flags = {field: flag for flag, field, _ in READER_FLAGS if field in request.reader}
        raise ConfigError(named_by_flags(str(exc), flags)) from None
    for note in report.notes:
        print(f"dotformer evaluate: {note}", file=sys.stderr)
    print(f"{files.path} on {report.where} {report.description}, {args.dtype} weights, engine {translator.engine}")
    print(report.table)
    for warning in report.warnings:
        print(f"dotformer evaluate: warning: {warning}", file=sys.stderr)
    if "--hyps" in outputs and report.hypotheses is not None:
        _write(outputs["--hyps"], "".join(f"{one_line(text)}\n" for text in report.hypotheses))
    if "--json" in outputs:
        payload: dict[str, Any] = {
            "checkpoint": str(files.path),
            "data": report.where,
            "split": None if args.data is not None else request.split,
            "limit": args.limit,
            "seed": seed if args.limit is not None and (task.decodes or task.seeded) else None,  # a sample's
            "dtype": args.dtype,
            "engine": translator.engine,
            **report.payload,
        }
        _write(outputs["--json"], json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    return 0


def _decoding_flags_given(args: argparse.Namespace) -> list[str]:
    """The decoding flags given on the command line (``--beam``, ``--temperature``, ...): those whose value is not
    the flag's default."""
    from dotformer.decoding.options import SEARCH_OPTIONS

    return [
        option.flag
        for option in SEARCH_OPTIONS
        if hasattr(args, option.name)
        and getattr(args, option.name) != (None if option.strategy or option.many else option.default)
    ]


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def _write(path: Any, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}", file=sys.stderr)
