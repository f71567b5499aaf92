"""``dotformer evaluate``: decode a run's held-out split and print its metrics (and write them as JSON)."""

from __future__ import annotations

import argparse
import sys

from dotformer.cli.translate import add_decoding_arguments, decode_config_from_args, load_for_decoding

EPILOG = """\
The split is the run's saved data/SPLIT.tsv (source<TAB>target). The task recorded in the checkpoint picks the
metrics: g2p: WER and PER with stress kept and stripped (pairs grouped by word: a word is right when it matches
any of its pronunciations); translation: BLEU and chrF (sacrebleu, with signatures); synthetic: exact match.
Every task also reports the teacher-forced perplexity of the references.

example:
  dotformer evaluate --checkpoint runs/g2p --split test --beam 4 --json runs/g2p/test_metrics.json
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``dotformer evaluate``."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    add_decoding_arguments(parser)
    parser.add_argument("--split", choices=["test", "valid"], default="test", help="which held-out split (test)")
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N distinct sources")
    parser.add_argument("--json", default=None, metavar="FILE", help="also write the metrics to FILE as JSON")


def run(args: argparse.Namespace) -> int:
    """Load, decode, score, print; returns 0."""
    import json
    from pathlib import Path

    from dotformer.checkpoint import run_data_dir
    from dotformer.cli.outputs import check_output_file
    from dotformer.data.splits import load_split
    from dotformer.decoding.evaluation import evaluate_pairs, format_evaluation, limit_sources
    from dotformer.errors import CheckpointError, DataError

    config = decode_config_from_args(args)
    loaded = load_for_decoding(args)
    task = loaded.info.get("task")
    if task is None:
        raise CheckpointError(f"{loaded.path}/config.json records no task (g2p, translation or synthetic)")
    if args.json:
        check_output_file(args.json, "--json")  # before the decoding, not after it
    data_dir = run_data_dir(loaded.path)
    pairs = limit_sources(load_split(data_dir, args.split), args.limit)
    if not pairs:
        raise DataError(f"{data_dir}/{args.split}.tsv holds no pairs")
    evaluation = evaluate_pairs(loaded, pairs, task, config, args.batch_size)
    search = f"beam {config.beam_size}, alpha {config.length_penalty}" if config.strategy == "beam" else config.strategy
    print(
        f"{loaded.path} on {args.split} ({evaluation.num_sources} sources, {evaluation.num_pairs} pairs), "
        f"task {task}, {search}, {args.dtype} weights"
    )
    print(format_evaluation(evaluation))
    if args.json:
        payload = {
            "checkpoint": str(loaded.path),
            "split": args.split,
            "data_dir": str(data_dir),
            "decode": config.to_dict(),
            "dtype": args.dtype,
            **evaluation.to_dict(),
        }
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {path}", file=sys.stderr)
    return 0
