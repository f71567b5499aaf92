"""``dotformer average``: average the weights of several checkpoints into a new one (the paper §6.1)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``dotformer average``."""
    parser.add_argument(
        "--out", required=True, metavar="DIR", help="the checkpoint directory to write (a new one, see --overwrite)"
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace --out if it is already a checkpoint (never a run or any other directory)",
    )
    parser.add_argument(
        "--last",
        type=int,
        default=None,
        metavar="K",
        help="average the last K step checkpoints (RUN/checkpoints/step_*) of the one run directory given",
    )
    parser.add_argument(
        "checkpoints", nargs="*", metavar="CHECKPOINT", help="checkpoint directories of one model (e.g. the last 5)"
    )
    parser.add_argument(
        "--checkpoint",
        dest="checkpoint_flags",
        action="append",
        default=[],
        metavar="DIR",
        help="a checkpoint directory, as CHECKPOINT (repeat it)",
    )


def run(args: argparse.Namespace) -> int:
    """Average, save with the tokenizers and info of the last checkpoint; returns 0.

    Raises:
        CheckpointError: --out exists and is not a checkpoint (never replaced), or is one and --overwrite is not
            given; the checkpoints are not of one model; --last names no run with step checkpoints.
    """
    from dotformer.checkpoint import (
        average_checkpoints,
        load_checkpoint,
        refuse_unless_checkpoint,
        resolve_checkpoint,
        save_checkpoint,
        step_checkpoints,
    )
    from dotformer.cli.outputs import check_output_dir, same_directory
    from dotformer.data.tokenize.tokenizer_files import load_tokenizer
    from dotformer.errors import CheckpointError

    args.checkpoints = [*args.checkpoint_flags, *args.checkpoints]
    if not args.checkpoints:
        raise CheckpointError("give the checkpoints to average: CHECKPOINT ... or --checkpoint DIR (repeated)")
    out = check_output_dir(args.out, "--out")  # never a run's best/, last/ or step checkpoints: training owns them
    if out.exists() or out.is_symlink():
        refuse_unless_checkpoint(out)  # a run directory, a user's folder or a file: never replaced
        if not args.overwrite and any(out.iterdir()):
            raise CheckpointError(f"{out} already holds a checkpoint: pass --overwrite to replace it")
    if args.last is not None:
        if args.last < 1 or len(args.checkpoints) != 1:
            raise CheckpointError("--last K needs K >= 1 and one run directory")
        paths = step_checkpoints(Path(args.checkpoints[0]) / "checkpoints")[-args.last :]
        if not paths:
            raise CheckpointError(f"{args.checkpoints[0]}/checkpoints holds no step_* checkpoint")
        if len(paths) < args.last:
            print(
                f"dotformer average: warning: {args.checkpoints[0]}/checkpoints holds {len(paths)} step checkpoint(s):"
                f" averaging {len(paths)} of the {args.last} asked for by --last {args.last}",
                file=sys.stderr,
            )
    else:
        paths = [resolve_checkpoint(p) for p in args.checkpoints]
    names = args.checkpoints if args.last is None else [str(path) for path in paths]  # as the user wrote them
    for i, path in enumerate(paths):  # a checkpoint named twice would weigh twice in the mean
        twice = next((j for j in range(i) if same_directory(paths[j], path)), None)
        if twice is not None:
            also = "" if names[twice] == names[i] else f" (as {names[twice]} and {names[i]})"
            raise CheckpointError(f"checkpoint {path} is given twice{also}: give each checkpoint once")
    for path in paths:  # --overwrite replaces a checkpoint, never one of those it averages
        if same_directory(out, path):
            raise CheckpointError(
                f"--out {out} is one of the checkpoints averaged ({path}): the average would replace it; give "
                f"another --out"
            )
    state = average_checkpoints(paths)  # checks that every checkpoint has the same model config
    loaded = load_checkpoint(paths[-1])
    for path in paths[:-1]:
        for name, tokenizer in (
            ("tokenizer_src.json", loaded.src_tokenizer),
            ("tokenizer_tgt.json", loaded.tgt_tokenizer),
        ):
            if load_tokenizer(path / name).to_dict() != tokenizer.to_dict():
                raise CheckpointError(f"{path / name} differs from {paths[-1] / name}: not checkpoints of one run")
    loaded.model.load_state_dict(state)
    info = {k: v for k, v in loaded.info.items() if k not in ("model", "format_version", "lora")}  # merged weights
    info["averaged_from"] = [str(p) for p in paths]
    out = save_checkpoint(out, loaded.model, loaded.src_tokenizer, loaded.tgt_tokenizer, info)
    print(f"averaged {len(paths)} checkpoint(s) into {out}")
    return 0
