"""The data path at the paper's scale: preparing WMT-shaped parallel text once, and mapping it again.

For each corpus size (pairs of :mod:`wmt_synthetic`: 0.1M, 0.4M, 1.6M, 4.5M, the last WMT14 En-De's size) two runs
of a child process, each under ``/usr/bin/time -v`` (Debian package ``time``):

* **first run**: ``dotformer.data.cache.prepared_for`` on the corpus files and an empty cache: read in passes, a
  32k shared BPE learned on a sample of at most 1M pairs, every split encoded into memory-mapped arrays;
* **second run**: the same call maps what the first wrote, then walks one epoch of training batches (25k-token
  batches planned from the lengths and collated from the mapped arrays, as training reads them).

Reported per run: wall time, tokens per second (prepared tokens / wall time), peak resident memory above the child's
own after its imports (``Maximum resident set size`` minus the RSS the child reads before it starts), that per token,
and the prepared directory's bytes on disk. Timings need a quiet machine: every result carries the load average.

    python benchmarks/data_scale.py --sizes 0.1            # the first figures (a few minutes on 2 cores)
    python benchmarks/data_scale.py                        # all four sizes (the 4.5M corpus is ~1.3 GB of text)

Results: a table on standard output, JSON in ``benchmarks/results/data_scale.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SIZES = (0.1, 0.4, 1.6, 4.5)  # millions of training pairs
TIME = "/usr/bin/time"
BATCH_TOKENS = 25_000  # the paper's batch: about 25k source and 25k target tokens
VOCAB = 32_000  # a shared BPE vocabulary (the paper's: about 37k)


def rss_bytes() -> int:
    """This process's resident set size now (``/proc/self/statm``)."""
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child(args: argparse.Namespace) -> int:
    """One measured run: prepare (or map) the corpus, and in the second run walk an epoch of batches; print JSON."""
    import filelock  # noqa: F401 (loaded before the base is read: what every run loads)
    import tokenizers  # noqa: F401

    from dotformer.data.batching import BatchSampler
    from dotformer.data.cache import prepared_for
    from dotformer.data.config import DataConfig

    config = DataConfig(dataset=args.data, valid=args.valid, test=args.test, vocab_size=args.vocab_size)
    base = rss_bytes()
    started = time.perf_counter()
    prepared = prepared_for(config, seed=1, cache_root=args.cache, sample_lines=args.sample_lines)
    opened = time.perf_counter() - started
    result: dict[str, Any] = {"base_rss": base, "prepare_or_open_s": opened, "directory": str(prepared.directory)}
    splits = prepared.report["splits"]
    result["tokens"] = sum(sum(split["tokens"].values()) for split in splits.values())
    result["train_pairs"] = splits["train"]["examples"]
    result["disk_bytes"] = sum(path.stat().st_size for path in prepared.directory.iterdir())
    result["tokenizer_sample"] = prepared.report["tokenizers"]["sample"]
    if args.child == "reopen":
        started = time.perf_counter()
        sampler = BatchSampler(prepared.splits["train"], BATCH_TOKENS, seed=1)  # type: ignore[union-attr]
        plan = sampler.plan(0)
        for i in range(len(plan)):
            sampler.make_batch(plan[i], 0)
        result.update(epoch_s=time.perf_counter() - started, batches=len(plan), padding=sampler.padding_fraction(plan))
    print(json.dumps(result))
    return 0


def timed_child(mode: str, specs: dict[str, str], cache: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Run the child under ``/usr/bin/time -v``; its JSON with the wall time and peak RSS added."""
    command = [TIME, "-v", sys.executable, __file__, "--child", mode, "--data", specs["train"], "--valid",
               specs["valid"], "--test", specs["test"], "--cache", str(cache), "--vocab-size", str(args.vocab_size),
               "--sample-lines", str(args.sample_lines)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{mode} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    peak = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)[1]) * 1024  # type: ignore[index]
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", done.stderr)[1]  # type: ignore[index]
    seconds = sum(float(part) * 60**i for i, part in enumerate(reversed(wall.split(":"))))
    result.update(run=mode, wall_s=round(seconds, 2), peak_rss=peak, above_base=peak - result["base_rss"])
    result["bytes_per_token"] = round(result["above_base"] / result["tokens"], 2)
    result["tokens_per_s"] = round(result["tokens"] / result["prepare_or_open_s"])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=float, nargs="+", default=SIZES, help="millions of training pairs")
    parser.add_argument("--out", type=Path, default=HERE / "out" / "data_scale", help="corpora and caches")
    parser.add_argument("--json", type=Path, default=HERE / "results" / "data_scale.json", help="results")
    parser.add_argument("--vocab-size", type=int, default=VOCAB, help="the shared BPE vocabulary")
    parser.add_argument("--sample-lines", type=int, default=1_000_000, help="pairs the BPE learns from at most")
    parser.add_argument("--child", choices=("prepare", "reopen"), help=argparse.SUPPRESS)
    for name in ("data", "valid", "test", "cache"):
        parser.add_argument(f"--{name}", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args)
    if not Path(TIME).is_file():
        raise SystemExit(f"{TIME} is missing: apt-get install -y time")
    sys.path.insert(0, str(HERE))
    from common import command_line, format_bytes, format_table, machine_info, write_json
    from wmt_synthetic import write_corpus

    rows = []
    for size in args.sizes:
        pairs = int(round(size * 1e6))
        corpus = args.out / f"wmt-{size}M"
        if not (corpus / "train.tgt").is_file():
            print(f"writing {pairs:,} pairs to {corpus} ...", file=sys.stderr)
            write_corpus(corpus, pairs)
        specs = {name: f"{corpus / name}.src,{corpus / name}.tgt" for name in ("train", "valid", "test")}
        cache = args.out / f"cache-{size}M"
        shutil.rmtree(cache, ignore_errors=True)  # the benchmark's own cache: the first run prepares
        for mode in ("prepare", "reopen"):
            result = timed_child(mode, specs, cache, args)
            result.update(pairs=pairs, load_average_1m=round(os.getloadavg()[0], 2))
            rows.append(result)
            print(f"{size}M {mode}: {result['wall_s']} s", file=sys.stderr)
    table = [
        {
            "pairs": f"{row['pairs']:,}",
            "tokens": f"{row['tokens']:,}",
            "run": "first (prepare)" if row["run"] == "prepare" else "second (map + epoch)",
            "wall s": f"{row['wall_s']:.1f}",
            "tokens/s": f"{row['tokens_per_s']:,}" if row["run"] == "prepare" else "-",
            "peak above base": format_bytes(row["above_base"]),
            "bytes/token": f"{row['bytes_per_token']:.2f}",
            "on disk": format_bytes(row["disk_bytes"]),
            "load": f"{row['load_average_1m']:.1f}",
        }
        for row in rows
    ]
    print(format_table(table, list(table[0])))
    payload = {"command": command_line(), "machine": machine_info("cpu"), "batch_tokens": BATCH_TOKENS,
               "vocab_size": args.vocab_size, "sample_lines": args.sample_lines, "results": rows}  # fmt: skip
    print(f"wrote {write_json(args.json, payload)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
