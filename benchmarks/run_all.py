"""Run every benchmark, one after the other, each in its own process, then print the ratios side by side.

    python benchmarks/run_all.py            # training and decoding at the small and base sizes, the decoding floor
                                            # (small, without --compile), attention quick
    python benchmarks/run_all.py --quick    # every script's --quick mode: a check that all of them run

Each script prints its own table and writes its JSON into ``benchmarks/out/`` (git-ignored); this driver adds
``benchmarks/out/summary.json`` with the dotformer / peer ratios of the run. The GPU script (``gpu.py``) is not run
here: it is meant for a machine with a GPU.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def scripts(quick: bool) -> list[list[str]]:
    """The command line of every benchmark (attention.py always in its quick mode)."""
    extra = ["--quick"] if quick else []
    return [
        ["training.py", *extra],
        ["decoding.py", *extra],
        ["decoding_floor.py", *extra],
        ["attention.py", "--quick"],
    ]


def ratios(out_dir: Path) -> list[dict[str, Any]]:
    """The dotformer / peer ratios found in the JSON files of training and decoding."""
    rows: list[dict[str, Any]] = []
    training = out_dir / "training.json"
    if training.exists():
        for r in json.loads(training.read_text())["rows"]:
            if r["model"] != "dotformer":
                what = f"training {r['setting']} {r['dtype']}"
                rows.append({"what": what, "peer": r["model"], "dotformer_over_peer": r["dotformer_over_this"]})
    decoding = out_dir / "decoding.json"
    if decoding.exists():
        for r in json.loads(decoding.read_text())["rows"]:
            if r["system"] != "dotformer":
                what = f"decoding {r['setting']} {r['search']}"
                rows.append({"what": what, "peer": r["system"], "dotformer_over_peer": r["dotformer_over_this"]})
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks; 0 when all succeeded, 1 otherwise (the others still run)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="every script in its quick mode")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(HERE))
    from common import default_output_dir, format_table, machine_info, write_json

    failures = []
    for command in scripts(args.quick):
        print(f"\n=== {' '.join(command)}", flush=True)
        start = time.perf_counter()
        result = subprocess.run([sys.executable, str(HERE / command[0]), *command[1:]], cwd=HERE.parent)
        print(f"=== {command[0]}: exit {result.returncode}, {time.perf_counter() - start:.0f} s", flush=True)
        if result.returncode != 0:
            failures.append(command[0])
    out_dir = default_output_dir()
    summary = ratios(out_dir)
    print("\n" + format_table(summary, ["what", "peer", "dotformer_over_peer"]))
    write_json(out_dir / "summary.json", {"machine": machine_info("cpu"), "failures": failures, "ratios": summary})
    if failures:
        print(f"failed: {', '.join(failures)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
