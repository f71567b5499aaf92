"""Recurrence vs self-attention, measured: the paper's Table 1 with numbers (a thin wrapper over dotformer.compare).

    python benchmarks/recurrence_vs_attention.py                    # CPU defaults, about a minute on 2 cores
    python benchmarks/recurrence_vs_attention.py --threads 1        # less disturbed by other jobs
    python benchmarks/recurrence_vs_attention.py --device cuda --lengths 256 1024 4096 16384

Same flags as ``dotformer compare`` (see ``dotformer compare --help``), plus ``--threads``. Prints the tables, writes
``recurrence_vs_attention.json`` (with the machine, date, commit and command) and two figures to ``--out``
(default ``benchmarks/out``): ``recurrence_vs_attention.png`` and ``gradient_vs_distance.png``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from common import command_line, default_output_dir, machine_info, write_json

from dotformer.cli.compare import add_arguments, config_from_args
from dotformer.compare import compare, format_report
from dotformer.plots.compare import plot_gradients, plot_report


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and write its JSON and figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)  # dotformer compare's flags, --threads included
    parser.set_defaults(out=str(default_output_dir()))
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    config = config_from_args(args)
    started = time.perf_counter()
    report = compare(config, progress=None if args.quiet else print)
    print(format_report(report))
    out = Path(args.out)
    payload = {
        "benchmark": "recurrence_vs_attention",
        "command": command_line(),
        "machine": machine_info(config.device),
        "wall_seconds": round(time.perf_counter() - started, 1),
        **report.to_dict(),
    }
    json_path = write_json(out / "recurrence_vs_attention.json", payload)
    figure = plot_report(report, out / "recurrence_vs_attention.png")
    gradients = plot_gradients(report, out / "gradient_vs_distance.png")
    print(f"wrote {json_path}, {figure}, {gradients}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
