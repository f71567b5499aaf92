"""``dotformer evaluate`` on a language-model checkpoint: perplexity and bits per character of held-out text.

    dotformer evaluate --checkpoint runs/lm                  # the run's held-out test text (data/test.txt)
    dotformer evaluate --checkpoint runs/lm --split valid
    dotformer evaluate --checkpoint runs/lm --data other.txt --json lm_metrics.json

The text is read as one stream and scored block by block with the training block size
(:func:`dotformer.metrics.language.score_text`); decoding flags do not apply.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dotformer.checkpoint import LoadedCheckpoint


def evaluate_lm(args: argparse.Namespace, loaded: LoadedCheckpoint, outputs: dict[str, Path]) -> int:
    """Score ``--data`` (a text file) or the run's ``--split`` (test), its first ``--limit`` lines when given; print
    one line of figures; write ``--json``.

    Raises:
        ConfigError: --hyps (a language model decodes nothing here), a --limit below 1. CheckpointError: no run
            directory and no --data. DataError / MissingDataError: an unreadable or empty text.
    """
    from dotformer.api.generation import context_window
    from dotformer.errors import ConfigError, DataError
    from dotformer.metrics.language import score_text
    from dotformer.training.progress import count

    if "--hyps" in outputs:
        raise ConfigError("--hyps writes decoded outputs; a language model's evaluation scores the text itself")
    lines, where = _read_text(args, loaded)
    if not lines:
        raise DataError(f"{where} holds no text to score")
    if args.limit is not None:
        if args.limit < 1:
            raise ConfigError(f"--limit must be a positive number of lines, got {args.limit}")
        shown = f"the first {min(args.limit, len(lines)):,} of {count(len(lines), 'line')}"
        lines = lines[: args.limit]
    else:
        shown = count(len(lines), "line")
    block = context_window(loaded)
    score = score_text(loaded.model, lines, loaded.tgt_tokenizer, block, args.batch_size * block)  # B blocks a batch
    print(
        f"{loaded.path} on {where} ({shown}, {score.tokens:,} tokens scored), task lm, "
        f"blocks of {block} tokens, {args.dtype} weights"
    )
    print(
        f"perplexity {score.perplexity:.3f}  nats/token {score.nats_per_token:.4f}  bits/token "
        f"{score.bits_per_token:.4f}  bits/char {score.bits_per_character:.4f}"
    )
    if "--json" in outputs:
        payload: dict[str, Any] = {"checkpoint": str(loaded.path), "data": where, "limit": args.limit}
        payload["dtype"] = args.dtype
        payload.update(score.to_dict())
        outputs["--json"].parent.mkdir(parents=True, exist_ok=True)
        outputs["--json"].write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {outputs['--json']}", file=sys.stderr)
    return 0


def _read_text(args: argparse.Namespace, loaded: LoadedCheckpoint) -> tuple[list[str], str]:
    from dotformer.checkpoint import run_data_dir
    from dotformer.data.text import read_text_corpus
    from dotformer.errors import CheckpointError
    from dotformer.training.lm_run import load_text_split

    if args.data is not None:
        return read_text_corpus(args.data).lines, args.data
    split = args.split or "test"
    try:
        data_dir = run_data_dir(loaded.path)
    except CheckpointError as exc:
        raise CheckpointError(f"{exc}; pass --data FILE to evaluate a text file") from None
    return load_text_split(data_dir, split), str(data_dir / f"{split}.txt")
