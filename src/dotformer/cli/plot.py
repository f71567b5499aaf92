"""``dotformer plot``: attention maps, positional encodings, masks, the learning-rate schedule, loss curves.

Every plot is written as PNG, SVG or PDF (chosen by the --out extension) and the command prints where.
"""

from __future__ import annotations

import argparse

from dotformer.cli.threads import device_help

EPILOG = """\
examples:
  dotformer plot attention --checkpoint runs/g2p transformer --out attention.png
  dotformer plot attention --checkpoint runs/g2p transformer --layer 1 --head 0 --out head.svg
  dotformer plot attention --checkpoint runs/g2p transformer --target "T R AE2 N S F AO1 R M ER0" --out forced.png
  dotformer plot attention --checkpoint runs/genres "In the beginning God created" --out encoder.png
  dotformer plot positional --d-model 128 --length 100 --out positional.png
  dotformer plot masks --out masks.png
  dotformer plot schedule --d-model 512 --warmup 4000 --out schedule.png
  dotformer plot schedule --config configs/g2p.toml --out schedule.png
  dotformer plot curves --run runs/g2p --out curves.png
  dotformer plot curves --run runs/g2p --run runs/g2p-long --out compare.png
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The five plot kinds, each a sub-subcommand with its own flags."""
    parser.epilog = EPILOG
    kinds = parser.add_subparsers(dest="plot_kind", metavar="KIND", required=True)

    attention = kinds.add_parser(
        "attention",
        help="attention maps of a checkpoint on one input (greedy decoding, or --target forced; a language "
        "model's or an encoder's over the text itself)",
    )
    attention.add_argument("--checkpoint", required=True, metavar="DIR", help="checkpoint or run directory")
    attention.add_argument("text", metavar="TEXT", help="the input to decode and look inside")
    attention.add_argument(
        "--target",
        metavar="REF",
        help="force-decode this reference (teacher forcing) instead of the model's greedy output",
    )
    attention.add_argument(
        "--layer", type=int, default=None, metavar="L", help="only this layer (0-based; default all)"
    )
    attention.add_argument("--head", type=int, default=None, metavar="H", help="only head H (0-based; default all)")
    attention.add_argument(
        "--kind",
        action="append",
        choices=["encoder", "decoder_self", "cross"],
        help="which maps (repeatable; default: all three, or the model's one kind)",
    )
    attention.add_argument("--device", default="cpu", help=device_help("cpu"))
    attention.add_argument("--out", default="attention.png", metavar="FILE", help=".png, .svg or .pdf (attention.png)")

    positional = kinds.add_parser("positional", help="the sinusoidal positional encoding (paper §3.5)")
    positional.add_argument("--d-model", type=int, default=128, metavar="D", help="encoding width (128)")
    positional.add_argument("--length", type=int, default=100, metavar="N", help="number of positions (100)")
    positional.add_argument(
        "--out", default="positional.png", metavar="FILE", help=".png, .svg or .pdf (positional.png)"
    )

    masks = kinds.add_parser("masks", help="padding and causal masks of an example batch (paper §3.2.3)")
    masks.add_argument("--out", default="masks.png", metavar="FILE", help=".png, .svg or .pdf (masks.png)")

    schedule = kinds.add_parser("schedule", help="the learning-rate schedule (paper §5.3, Eq. 3)")
    schedule.add_argument(
        "--config", metavar="FILE.toml", help="a training config file, or a shipped one by name: g2p (its [train])"
    )
    schedule.add_argument(
        "--d-model", type=int, default=None, metavar="D", help="model width (512; with --config: its)"
    )
    schedule.add_argument("--warmup", type=int, default=None, metavar="STEPS", help="warmup steps (4000)")
    schedule.add_argument("--scale", type=float, default=None, help="multiplier of the paper's formula (1.0)")
    schedule.add_argument("--steps", type=int, default=None, help="steps drawn (default: 10 × warmup or max_steps)")
    schedule.add_argument("--out", default="schedule.png", metavar="FILE", help=".png, .svg or .pdf (schedule.png)")

    curves = kinds.add_parser(
        "curves", help="loss, perplexity and learning rate of one or more runs, overlaid (their metrics.jsonl)"
    )
    curves.add_argument(
        "--run", required=True, action="append", metavar="DIR", help="run directory or its metrics.jsonl (repeatable)"
    )
    curves.add_argument("--out", default="curves.png", metavar="FILE", help=".png, .svg or .pdf (curves.png)")


def run(args: argparse.Namespace) -> int:
    """Draw the requested plot and print the file written."""
    from dotformer import plots
    from dotformer.cli.outputs import check_output_file
    from dotformer.errors import ConfigError
    from dotformer.plots.common import check_output_path

    check_output_path(args.out)  # a bad extension fails before any work
    check_output_file(args.out, "--out")  # so does a directory, or a parent that is a file
    if args.plot_kind == "attention":
        from dotformer.api import resolve_device
        from dotformer.checkpoint import load_checkpoint
        from dotformer.decoding import attention_maps

        loaded = load_checkpoint(args.checkpoint, device=resolve_device(args.device))
        arch = loaded.model.config.arch
        if arch in ("decoder-only", "encoder-only"):  # a language model or an encoder: one kind, over the text itself
            lm = arch == "decoder-only"
            what = "a language model" if lm else "an encoder"
            kinds = attention_maps.LM_MAP_KINDS if lm else attention_maps.ENCODER_MAP_KINDS
            check_one_text(args, what, kinds[0])
            read = attention_maps.lm_attention_weights if lm else attention_maps.encoder_attention_weights
            maps = read(loaded, args.text)
        else:
            maps = attention_maps.attention_weights(loaded, args.text, target=args.target)
            kinds = tuple(dict.fromkeys(args.kind)) if args.kind else attention_maps.MAP_KINDS
        result = plots.plot_attention(maps, args.out, layer=args.layer, head=args.head, kinds=kinds)
        print(f"{maps.source_text} -> {maps.output_text}" + (" (forced: the reference given)" if maps.forced else ""))
        drawn = sorted({panel.layer for panel in result.panels})
        if args.layer is None and len(drawn) < maps.num_layers:
            print(f"drew layer {drawn[-1]} (of layers 0..{maps.num_layers - 1}): all of them would be too many maps "
                  f"for one picture; --layer N draws another, --head H one head of each layer")  # fmt: skip
        print(f"wrote {result.path} ({len(result.panels)} maps)")
    elif args.plot_kind == "positional":
        print(f"wrote {plots.plot_positional(args.d_model, args.length, args.out).path}")
    elif args.plot_kind == "masks":
        print(f"wrote {plots.plot_masks(args.out).path}")
    elif args.plot_kind == "schedule":
        if args.config:
            if args.warmup is not None or args.scale is not None:
                raise ConfigError("--warmup and --scale come from the config file's [train] section with --config")
            curve = plots.config_curve(args.config, args.steps, args.d_model)
        else:
            warmup = 4000 if args.warmup is None else args.warmup
            scale = 1.0 if args.scale is None else args.scale
            curve = plots.noam_curve(args.d_model or 512, warmup, scale, args.steps)
        result = plots.plot_schedule([curve], args.out)
        print(f"wrote {result.path} (peak lr {curve.lrs.max():.3e} at step {curve.peak_step})")
    else:
        result = plots.plot_loss_curves(args.run, args.out)
        from dotformer.training.progress import count

        counts = "; ".join(
            f"{c.label}: {count(c.train_steps.size, 'train point')}, {count(c.valid_steps.size, 'validation point')}"
            for c in result.runs
        )
        print(f"wrote {result.path} ({counts})")
    return 0


def check_one_text(args: argparse.Namespace, what: str, kind: str) -> None:
    """Refuse what a model that reads one text (a language model, an encoder) cannot draw: a --target, another
    --kind than its own.

    Raises:
        ConfigError: naming the checkpoint, what it is and the flag.
    """
    from dotformer.errors import ConfigError

    if args.target is not None:
        raise ConfigError(f"{args.checkpoint} is {what}: it reads one text, so --target does not apply")
    others = sorted(set(args.kind or ()) - {kind})
    if others:
        raise ConfigError(
            f"{args.checkpoint} is {what}: its only attention is {kind}, not {', '.join(others)} "
            f"(--kind {kind}, or leave --kind out)"
        )
