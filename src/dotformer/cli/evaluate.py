"""``dotformer evaluate``: decode a test file (or a run's held-out split) and print its metrics (and write them)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from dotformer.cli.data_flags import add_reader_arguments, reader_values
from dotformer.cli.decode_flags import (
    add_decoding_arguments,
    decode_config_from_args,
    load_translator,
    option_refusals,
)

if TYPE_CHECKING:
    from dotformer.data.corpora import Pair
    from dotformer.decoding.engine import CheckpointLike

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

--limit N decodes a random sample of N distinct sources, drawn with --seed (default 0): the same N and seed give
the same sample. --hyps FILE writes the output of every evaluated pair, one line each, in the file's order.

examples:
  dotformer evaluate --checkpoint runs/g2p --data test.tsv --hyps test.hyp --json test_metrics.json
  dotformer evaluate --checkpoint runs/g2p --split test --beam 4 --limit 500 --seed 1
  dotformer evaluate --checkpoint best/ --data ids.tsv --source-column word --target-column phones --header

language models (dotformer train --task lm): perplexity, nats and bits per token and bits per character of the run's
held-out text (--split test or valid) or of a text file (--data FILE), scored in blocks of the training block size;
--limit N scores its first N lines; the decoding flags do not apply.
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
    parser.add_argument("--json", default=None, metavar="FILE", help="also write the metrics to FILE as JSON")
    add_reader_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Check the outputs, load, read the pairs, decode, score, print and write; returns 0."""
    import json
    from pathlib import Path

    from dotformer.cli.outputs import check_output_file
    from dotformer.config import MAX_SEED
    from dotformer.decoding.evaluation import (
        evaluate_pairs,
        format_evaluation,
        sample_sources,
        unfinished_warning,
    )
    from dotformer.errors import CheckpointError, ConfigError

    decoding = _decoding_flags_given(args)  # a language model refuses them
    seed = args.seed if args.seed is not None else 0
    if not 0 <= seed <= MAX_SEED:  # also the --limit sample's seed, with any strategy
        raise ConfigError(f"--seed must be an integer in [0, 2**63 - 1], got {seed}")
    if args.strategy != "sample":  # --seed then only draws the --limit sample
        args = argparse.Namespace(**{**vars(args), "seed": None})
    config = decode_config_from_args(args)
    if args.data is not None and args.split is not None:
        raise ConfigError("give --data FILE (a test file) or --split (the run's saved split), not both")
    if args.data is None and reader_values(args):
        raise ConfigError(f"{', '.join(_flag(f) for f in reader_values(args))} read a --data file; none was given")
    read = tuple(args.data.split(",")) if args.data else ()  # a TSV, or SRC,TGT files
    wanted = (("--json", args.json), ("--hyps", args.hyps))
    outputs = {flag: check_output_file(path, flag, read) for flag, path in wanted if path}
    if args.json and args.hyps and Path(args.json).resolve() == Path(args.hyps).resolve():
        raise ConfigError(f"--json and --hyps name one file ({args.json}); give two")
    translator = load_translator(args, evaluation_refusals(config))
    files = translator.files
    task = files.info.get("task")
    if task == "lm":  # a language model: perplexity and bits per character of text, nothing decoded
        from dotformer.cli.evaluate_lm import evaluate_lm

        if decoding:
            raise ConfigError(
                f"{', '.join(decoding)} set how outputs are decoded; a language model's evaluation decodes nothing "
                f"(it scores the text itself): leave {'them' if len(decoding) > 1 else 'it'} out"
            )
        return evaluate_lm(args, translator.checkpoint, outputs)
    if task is None:
        raise CheckpointError(f"{files.path}/config.json records no task (g2p, translation, exact or synthetic)")
    if args.data is not None:
        pairs, where = _read_test_file(args, files, task), args.data
    else:
        pairs, where = _read_run_split(files, args.split or "test")
    pairs = sample_sources(pairs, args.limit, seed)
    evaluation = evaluate_pairs(translator.translation_engine(), pairs, task, config, args.batch_size)
    search = f"beam {config.beam_size}, alpha {config.length_penalty}" if config.strategy == "beam" else config.strategy
    sample = f", a random sample (seed {seed})" if args.limit is not None else ""
    print(
        f"{files.path} on {where} ({evaluation.num_sources} sources, {evaluation.num_pairs} pairs{sample}), "
        f"task {task}, {search}, {args.dtype} weights, engine {translator.engine}"
    )
    print(format_evaluation(evaluation))
    table = files.config.max_len
    warning = unfinished_warning(
        evaluation.unfinished, evaluation.num_sources, config, evaluation.unfinished_at_table, table
    )
    if warning:
        print(f"dotformer evaluate: warning: {warning}", file=sys.stderr)
    if "--hyps" in outputs:
        _write(outputs["--hyps"], "".join(f"{_one_line(text)}\n" for text in evaluation.hypotheses))
    if "--json" in outputs:
        payload: dict[str, Any] = {
            "checkpoint": str(files.path),
            "data": where,
            "split": None if args.data is not None else (args.split or "test"),
            "limit": args.limit,
            "seed": seed if args.limit is not None else None,
            "decode": config.to_dict(),
            "dtype": args.dtype,
            "engine": translator.engine,
            **evaluation.to_dict(),
        }
        _write(outputs["--json"], json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    return 0


def evaluation_refusals(config: Any) -> Any:
    """The ``refuse`` of :func:`~dotformer.cli.decode_flags.load_translator`: a language model's evaluation (its
    perplexity, nothing decoded) and the decoding flags CTranslate2 lacks run on the torch engine only."""
    torch_only = option_refusals(config)

    def refuse(checkpoint: Any) -> list[str]:
        lm = ["a language model's evaluation (perplexity)"] if checkpoint.info.get("task") == "lm" else []
        return [*lm, *torch_only(checkpoint)]

    return refuse


def _decoding_flags_given(args: argparse.Namespace) -> list[str]:
    """The decoding flags given on the command line (``--beam``, ``--temperature``, ...): those whose value is not
    the flag's default."""
    from dotformer.decoding.options import SEARCH_OPTIONS

    return [
        option.flag
        for option in SEARCH_OPTIONS
        if hasattr(args, option.name) and getattr(args, option.name) != (None if option.strategy else option.default)
    ]


def _read_test_file(args: argparse.Namespace, loaded: CheckpointLike, task: str) -> list[Pair]:
    """The pairs of ``--data``, read with the checkpoint's reader settings overridden by the reader flags.

    Raises:
        DataError: a file of another task, a target side the checkpoint's vocabulary cannot read (a test file of
            another task), no pairs. ConfigError / MissingDataError: from the reader.
    """
    from dotformer.cli.data_flags import READER_FLAGS
    from dotformer.data.config import DataConfig
    from dotformer.data.corpora import NAMED_TASKS, Pair, describe_corpus, load_pairs
    from dotformer.decoding.evaluation import check_same_task, metric_task, unknown_fraction
    from dotformer.decoding.inputs import source_normaliser
    from dotformer.errors import DataError

    saved = loaded.info.get("data") if isinstance(loaded.info.get("data"), dict) else {}
    flags = reader_values(args)
    reader = {field: saved[field] for _, field, _ in READER_FLAGS if saved.get(field) is not None}
    reader.update(flags)
    if args.data in NAMED_TASKS:  # cmudict, bible, copy, reverse have their own task
        reader.pop("task", None)
    else:  # a file has the task given by --task, else the checkpoint's
        reader["task"] = flags.get("task") or metric_task(task)
    split = reader.pop("hf_split", None)
    data = DataConfig.from_dict({"dataset": args.data, "hf_test_split": split, **reader}, "evaluate flags")
    corpus = load_pairs(args.data, data.corpus_options("test"))
    check_same_task(task, corpus.task, args.data, str(loaded.path))
    normalise = source_normaliser(loaded.info)  # a CMUdict model reads lower-case words
    pairs = [Pair(normalise(pair.source), pair.target) for pair in corpus.pairs]
    targets = [pair.target for pair in pairs]
    share = unknown_fraction(loaded.tgt_tokenizer, targets)
    if share > 0.5:
        raise DataError(
            f"{args.data}: {share:.0%} of its target tokens are unknown to the checkpoint's target vocabulary: is it "
            f"{task} data, and are the columns right (--source-column/--target-column)?"
        )
    print(f"dotformer evaluate: data: {describe_corpus(corpus, 'test')}", file=sys.stderr)  # after the checks
    return pairs


def _read_run_split(loaded: CheckpointLike, split: str) -> tuple[list[Pair], str]:
    """The pairs of the checkpoint's run's saved split, and its path.

    Raises:
        CheckpointError: the checkpoint is not inside a run directory (pass --data). DataError: an empty split.
    """
    from dotformer.checkpoint import run_data_dir
    from dotformer.data.splits import load_split
    from dotformer.errors import CheckpointError, DataError

    try:
        data_dir = run_data_dir(loaded.path)
    except CheckpointError as exc:
        raise CheckpointError(f"{exc}; pass --data FILE to evaluate a test file") from None
    pairs = load_split(data_dir, split)
    if not pairs:
        hint = " (the run was trained on given files without --test)" if split == "test" else ""
        raise DataError(f"{data_dir}/{split}.tsv holds no pairs{hint}; pass --data FILE to evaluate a test file")
    return pairs, str(data_dir / f"{split}.tsv")


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def _one_line(text: str) -> str:
    """An output on one line: line breaks (which a BPE vocabulary can produce) become spaces."""
    return text.replace("\r\n", " ").replace("\n", " ").replace("\r", " ")


def _write(path: Any, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}", file=sys.stderr)
