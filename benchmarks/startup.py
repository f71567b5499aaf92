"""Start-up: how long ``dotformer --help``, every command's ``--help`` and translating one word take, and what a
start imports.

Each command runs as a user runs it (``python -m dotformer ...`` in a fresh process); its wall time is the median
of ``--repeats`` runs. The word is translated with the default engine on a cached CTranslate2 copy (converted before
the timed runs), and with ``--engine torch`` for comparison. ``python -X importtime`` lists the modules of
``dotformer --help`` and of the cached translation that take the longest (cumulative microseconds), and whether torch
is among them. Target: ``dotformer --help`` in at most 0.3 s.

Run: ``python benchmarks/startup.py --checkpoint runs/g2p`` (without one, a tiny model is written first).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import command_line, default_output_dir, format_table, machine_info, write_json

HELP_TARGET_S = 0.3


def dotformer(*argv: str) -> list[str]:
    """``dotformer ARGV`` as this interpreter runs it (the tree on PYTHONPATH)."""
    return [sys.executable, "-m", "dotformer", *argv]


def wall_times(command: list[str], repeats: int) -> list[float]:
    """Wall seconds of ``repeats`` runs of ``command`` (each checked to succeed)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return times


def import_times(argv: list[str], top: int) -> tuple[list[dict[str, Any]], bool]:
    """The ``top`` slowest imports of ``dotformer ARGV`` (cumulative µs, ``python -X importtime``), and whether it
    imported torch."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "dotformer", *argv], capture_output=True, text=True, check=False
    )
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        own, cumulative, name = line.removeprefix("import time:").split("|")  # "  360 |  52196 |    torch.x"
        rows.append({"module": name.strip(), "self_us": int(own), "cumulative_us": int(cumulative)})
    torch_loaded = any(row["module"] == "torch" for row in rows)
    return sorted(rows, key=lambda row: -row["cumulative_us"])[:top], torch_loaded


def tiny_checkpoint(directory: Path) -> Path:
    """A small random encoder-decoder with a character tokenizer, for a start-up measure without a trained run."""
    import torch

    from dotformer import ModelConfig, Transformer
    from dotformer.checkpoint import save_checkpoint
    from dotformer.data.tokenize.tokenizer_files import train_tokenizer

    letters = train_tokenizer("char", ["abcdefghijklmnopqrstuvwxyz"])
    torch.manual_seed(0)
    config = ModelConfig.preset("tiny", src_vocab_size=letters.vocab_size, tgt_vocab_size=letters.vocab_size)
    return save_checkpoint(directory / "tiny", Transformer(config).eval(), letters, letters, {"task": "synthetic"})


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Measure, print the table and write ``out/startup.json``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", default=None, help="a trained checkpoint or run (default: a tiny model)")
    parser.add_argument("--word", default="transformer", help="the word translated (transformer)")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each command (median reported)")
    parser.add_argument("--commands", default="", help="comma-separated commands whose --help is timed (default all)")
    parser.add_argument("--top", type=int, default=12, help="slowest imports listed")
    parser.add_argument("--out", default=str(default_output_dir() / "startup.json"))
    args = parser.parse_args(argv)
    from dotformer.cli import SUBCOMMANDS

    commands = [c for c in args.commands.split(",") if c] or list(SUBCOMMANDS)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="dotformer_startup_") as tmp:
        checkpoint = args.checkpoint or str(tiny_checkpoint(Path(tmp)))
        subprocess.run(dotformer("translate", "--checkpoint", checkpoint, args.word), capture_output=True, check=True)
        timed = {"dotformer --help": dotformer("--help")}
        timed.update({f"dotformer {c} --help": dotformer(c, "--help") for c in commands})
        timed["translate one word (cached CTranslate2)"] = dotformer("translate", "--checkpoint", checkpoint, args.word)
        timed["translate one word (--engine torch)"] = dotformer(
            "translate", "--checkpoint", checkpoint, "--engine", "torch", args.word
        )
        for name, command in timed.items():
            times = wall_times(command, args.repeats)
            rows.append({"command": name, "median_s": statistics.median(times), "min_s": min(times), "runs_s": times})
        imports = {
            "dotformer --help": import_times(["--help"], args.top),
            "translate one word (cached CTranslate2)": import_times(
                ["translate", "--checkpoint", checkpoint, args.word], args.top
            ),
        }
    for row in rows:
        row["imports_torch"] = imports[row["command"]][1] if row["command"] in imports else None
    print(format_table(rows, ["command", "median_s", "min_s", "imports_torch"]))
    help_s = rows[0]["median_s"]
    verdict = "met" if help_s <= HELP_TARGET_S else "missed"
    print(f"dotformer --help: {help_s:.3f} s (target <= {HELP_TARGET_S} s: {verdict})")
    for name, (slowest, torch_loaded) in imports.items():
        print(f"\nslowest imports of {name} (torch imported: {torch_loaded}):")
        print(format_table(slowest, ["module", "cumulative_us", "self_us"]))
    payload = {
        "benchmark": "startup",
        "command": command_line(),
        "machine": machine_info("cpu"),
        "checkpoint": args.checkpoint or "a tiny random model",
        "rows": rows,
        "imports": {name: {"slowest": slowest, "torch": loaded} for name, (slowest, loaded) in imports.items()},
    }
    write_json(args.out, payload)
    print(f"wrote {args.out}")
    return payload


if __name__ == "__main__":
    main()
