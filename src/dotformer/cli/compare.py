"""``dotformer compare``: recurrence against self-attention, measured (the paper's Table 1)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from dotformer.cli.threads import add_threads_argument, device_help

if TYPE_CHECKING:
    from dotformer.compare import CompareConfig

EPILOG = """\
Prints the paper's Table 1 with measured figures beside the O(.) entries, and a table per sequence length;
writes OUT/compare.json, OUT/recurrence_vs_attention.png and OUT/gradient_vs_distance.png.
The default run takes about a minute on a 2-core CPU.

examples:
  dotformer compare
  dotformer compare --lengths 16 64 256 1024 --layers lstm attention --out /tmp/cmp
  dotformer compare --device cuda --lengths 256 1024 4096 16384
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Sizes, lengths, layers, budgets and the output directory."""
    from dotformer.compare.config import LAYER_KINDS, CompareConfig

    d = CompareConfig()
    parser.epilog = EPILOG
    parser.add_argument("--d-model", type=int, default=d.d_model, metavar="D", help=f"layer width ({d.d_model})")
    parser.add_argument("--heads", type=int, default=d.num_heads, metavar="H", help=f"attention heads ({d.num_heads})")
    parser.add_argument(
        "--lengths",
        type=int,
        nargs="+",
        default=list(d.lengths),
        metavar="N",
        help=f"sequence lengths ({' '.join(map(str, d.lengths))})",
    )
    parser.add_argument(
        "--layers",
        nargs="+",
        choices=LAYER_KINDS,
        default=list(d.layers),
        metavar="LAYER",
        help=f"layers to measure: {', '.join(LAYER_KINDS)} (all)",
    )
    parser.add_argument("--batch-size", type=int, default=d.batch_size, metavar="B", help=f"batch ({d.batch_size})")
    parser.add_argument("--repeats", type=int, default=d.repeats, help=f"timed calls per point ({d.repeats})")
    parser.add_argument(
        "--count-max-length",
        type=int,
        default=d.count_max_length,
        metavar="N",
        help=f"count sequential steps and FLOPs up to this length ({d.count_max_length})",
    )
    parser.add_argument(
        "--gradient-length",
        type=int,
        default=d.gradient_length,
        metavar="N",
        help=f"n of the gradient test ({d.gradient_length})",
    )
    parser.add_argument(
        "--train-steps", type=int, default=d.train_steps, help=f"brief training steps ({d.train_steps})"
    )
    parser.add_argument(
        "--seed", type=int, default=d.seed, help=f"seed of the layers, the inputs and the training (default {d.seed})"
    )
    parser.add_argument("--device", default=d.device, help=device_help(d.device))
    parser.add_argument(
        "--out", default="compare-out", metavar="DIR", help="where to write JSON and figures (compare-out)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    add_threads_argument(parser)  # timings on one thread: --threads 1


def config_from_args(args: argparse.Namespace) -> CompareConfig:
    """The :class:`CompareConfig` that the parsed flags of :func:`add_arguments` describe (``--device auto``: CUDA if
    available, else the CPU).

    Raises:
        ConfigError: ``--device`` names no device, or CUDA that is not available.
    """
    from dotformer.api import resolve_device
    from dotformer.compare import CompareConfig

    return CompareConfig(
        d_model=args.d_model,
        num_heads=args.heads,
        layers=tuple(dict.fromkeys(args.layers)),
        lengths=tuple(args.lengths),
        batch_size=args.batch_size,
        repeats=args.repeats,
        count_max_length=args.count_max_length,
        gradient_length=args.gradient_length,
        train_steps=args.train_steps,
        seed=args.seed,
        device=resolve_device(args.device),
    )


def run(args: argparse.Namespace) -> int:
    """Measure, print the tables, write JSON and figures."""
    import json

    from dotformer.cli.threads import apply_threads
    from dotformer.compare import compare, format_report
    from dotformer.errors import require_extra
    from dotformer.plots.compare import plot_gradients, plot_report

    config = config_from_args(args)
    require_extra("plots", "matplotlib", "compare's figures")  # before minutes of measuring, not after
    apply_threads(args.threads)
    report = compare(config, progress=None if args.quiet else print)
    print(format_report(report))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.json").write_text(json.dumps(report.to_dict(), indent=2) + "\n", encoding="utf-8")
    figure = plot_report(report, out / "recurrence_vs_attention.png")
    gradients = plot_gradients(report, out / "gradient_vs_distance.png")
    print(f"wrote {out / 'compare.json'}, {figure}, {gradients}")
    return 0
