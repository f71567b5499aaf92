"""``dotformer train --task lm``: train a decoder-only language model on text (:mod:`dotformer.training.lm_run`).

    dotformer train --task lm --data corpus.txt --out runs/lm --max-minutes 10
    dotformer train --task lm --data bible --test-books Ruth,Jonah --block-size 128 --max-minutes 10
    dotformer train --config lm-bible --out runs/lm-bible --max-minutes 10

``dotformer train`` hands over to :func:`run_lm` when ``--task lm`` is given or the config file sets
``[data] task = "lm"``; the flags are ``dotformer train``'s (those of pairs, such as ``--delimiter``, are refused by
the language model's ``[data]`` keys) plus ``--block-size``. The last line sums the run up with the validation
text's bits per character.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from dotformer.data.config import LM_TASK


def add_lm_arguments(parser: argparse._ActionsContainer) -> None:
    """``--block-size``, the one flag only a language model reads."""
    parser.add_argument(
        "--block-size", dest="opt_block_size", type=int, default=None, metavar="T",
        help="--task lm: tokens per training block, the model's context (default 128)",
    )  # fmt: skip


def is_lm_run(args: argparse.Namespace) -> bool:
    """``--task lm``, a config file whose ``[data] task`` is "lm", or ``--resume`` of a run whose run.json records
    task "lm" (without ``--task``: what the "continue with" line of an interrupted run says)."""
    from dotformer.training.lm_config import is_lm_config_file

    if getattr(args, "opt_task", None) is None and args.resume and args.out is not None:
        task = _recorded_task(Path(args.out) / "run.json")
        if task is not None:
            return task == LM_TASK
    return getattr(args, "opt_task", None) == LM_TASK or bool(args.config and is_lm_config_file(args.config))


def _recorded_task(path: Path) -> str | None:
    """The ``task`` run.json at ``path`` records (None when it cannot be read: resuming reports that)."""
    import json

    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record.get("task") if isinstance(record, dict) else None


def run_lm(args: argparse.Namespace, flags: dict[str, dict[str, Any]]) -> int:
    """Train the language model of the configs and flags; print the summary and the valid bits per character."""
    from dotformer.training.config_files import ConfigSections
    from dotformer.training.lm_config import read_lm_config_file
    from dotformer.training.lm_run import train_lm_run

    if args.init_from is not None:
        print("dotformer train: error: --init-from is for pairs; a language model starts afresh", file=sys.stderr)
        return 2
    if args.opt_block_size is not None:
        flags["data"]["block_size"] = args.opt_block_size
    file_sections = read_lm_config_file(args.config) if args.config else ConfigSections()
    flag_sections = ConfigSections(**flags, source="command line")
    result = train_lm_run(file_sections, flag_sections, args.out, args.resume, sys.argv, args.overwrite)
    if result.is_main:
        bits = valid_bits_per_character(result.run_dir, result.fit.best_valid_loss)
        shown = f"; valid {bits:.3f} bits/char" if bits is not None else ""
        print(result.summary() + shown)
    return 0


def valid_bits_per_character(run_dir: Path, nats_per_token: float | None) -> float | None:
    """Bits per character of the run's validation text at ``nats_per_token`` (the best validation loss, which is
    the NLL without label smoothing): nats · scored tokens / (scored characters · ln 2)."""
    from dotformer.checkpoint import TGT_TOKENIZER_FILE
    from dotformer.data.blocks import encode_text
    from dotformer.data.tokenizer_files import load_tokenizer
    from dotformer.metrics.language import LanguageModelScore, scored_characters
    from dotformer.training.lm_run import load_text_split

    if nats_per_token is None:
        return None
    tokenizer = load_tokenizer(run_dir / "data" / TGT_TOKENIZER_FILE)
    stream = encode_text(load_text_split(run_dir / "data", "valid"), tokenizer, block_size=1)
    if len(stream) < 2:
        return None
    scored = len(stream) - 1  # every token but the first
    return LanguageModelScore(nats_per_token * scored, scored, scored_characters(stream, tokenizer)).bits_per_character
