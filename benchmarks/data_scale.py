"""The data path at the paper's scale, through the real commands: ``dotformer prepare`` alone, and ``dotformer train``
on WMT-shaped parallel text with one process and with ``torchrun --nproc_per_node=2`` (CPU, gloo), each run twice:
first on an empty cache of prepared data (the run prepares it), then again (the run maps what the first wrote).

For each corpus size (pairs of :mod:`wmt_synthetic`: 0.1M, 0.4M, 1.6M and 4.5M, WMT14 En-De's size; ``--sizes``):

* **prepare**: ``dotformer prepare --data TRAIN --valid VALID --test TEST --vocab-size 32000 --out DIR``: tokens per
  second (every split's tokens over the preparation's own seconds in ``prepared.json``, and over the command's wall
  time, its start included), peak RSS, bytes on disk; then the same with that BPE given (``--src-tokenizer-file``):
  the encoding alone, which is what the peer below does.
* **train**, 1 and 2 ranks, first and second run: ``dotformer train`` on the same files (``--preset tiny
  --max-steps 2 --max-tokens 2048 --eval-every 0``) with ``$DOTFORMER_CACHE`` a directory of its own: the time from
  launch to the first training step (the first line of ``RUN/metrics.jsonl``, polled every 0.1 s); the peak memory
  (1 rank: ``/usr/bin/time -v``'s maximum RSS; 2 ranks: the peak of the sum of the RSS of the whole process tree,
  torchrun's agent included, sampled every 0.1 s from ``/proc``; the sum of PSS beside it, which counts a page the
  ranks map together once); bytes on disk of the prepared directory and of the run directory (its ``data/``).
* **base**: the same train command on the 1,000 pairs of the valid files, with the corpus's BPE given: what a run
  holds that does not grow with the corpus (torch, the model and its optimizer, a batch's activations, the
  vocabulary). Peak minus base over the corpus's tokens is the memory a token of the data path costs.
* **peer** (when the ``datasets`` extra is installed): Hugging Face ``datasets`` as users of transformers prepare
  parallel text: both files loaded into Arrow (``load_dataset("text")``), tokenized with the same BPE by
  ``Dataset.map(batched=True, num_proc=cores)``, cached by fingerprint; first run and second run. fairseq-preprocess
  is not among the peers: its only PyPI release (0.12.2) fails at import on Python 3.11 (a dataclass with a mutable
  default, facebookresearch/fairseq#5012), and it needs torchaudio.

Targets, printed beside the figures: peak memory above the base <= 8 bytes a token; at 4.5M pairs a peak <= 4 GiB on
one process and <= 1.3x that in all on two ranks; the second run at step 1 within 15 s at 4.5M pairs; preparing
>= 1M tokens a second on 2 cores. Timings need a quiet machine: every row carries the load average.

    python benchmarks/data_scale.py --sizes 0.1            # the smallest size (minutes on 2 cores)
    python benchmarks/data_scale.py                        # all four sizes (the 4.5M corpus is ~1.3 GB of text)
    python benchmarks/data_scale.py --sizes 0.1 0.4 --ranks 1 --no-peer
    python benchmarks/data_scale.py --sizes 0.002 --vocab-size 1000 --json /tmp/ds.json   # a check that it runs

Each command is printed on standard error before it runs (``$ ...``, with the variables it is given), as it can be
pasted into a shell, and kept in the JSON (``shell``). Results: a table on standard output, JSON in
``benchmarks/results/data_scale.json`` (``--json``). Needs ``/usr/bin/time`` (Debian package ``time``) and Linux's
``/proc``; the corpora are written once into ``--out`` and kept (the 4.5M pairs are ~1.3 GB of text).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SIZES = (0.1, 0.4, 1.6, 4.5)  # millions of training pairs
HELD_OUT = 1_000  # pairs of the valid and the test files (each train run validates once, at its end)
TIME = "/usr/bin/time"
VOCAB = 32_000  # a shared BPE vocabulary (wmt_synthetic's ~31 tokens a sentence are counted with it)
SAMPLE_S = 0.1  # seconds between samples of the process tree and of metrics.jsonl
TRAIN_FLAGS = ["--preset", "tiny", "--max-steps", "2", "--max-tokens", "2048", "--warmup", "1", "--eval-every", "0",
               "--save-every", "0", "--no-progress", "--device", "cpu"]  # fmt: skip
GIB = 2**30
TARGETS = {
    "bytes_per_token": 8.0,  # peak memory above the base, per token of the prepared corpus
    "peak_1_rank_gib": 4.0,  # at 4.5M pairs
    "two_ranks_over_one": 1.3,  # at 4.5M pairs: both ranks (and torchrun) in all, over one process
    "second_run_to_step_1_s": 15.0,  # at 4.5M pairs
    "prepare_tokens_per_s": 1_000_000.0,  # on 2 cores
}
TARGET_SIZE = 4.5  # the size the absolute targets are set for


# --- measuring a process tree -------------------------------------------------------------------------------------


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process (``/proc/PID/stat``)."""
    parents = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as handle:
                    fields = handle.read().rsplit(b")", 1)[1].split()
                parents[int(entry.name)] = int(fields[1])
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
    return parents


def tree(root: int) -> list[int]:
    """``root`` and every process below it."""
    children: dict[int, list[int]] = {}
    for pid, parent in _parents().items():
        children.setdefault(parent, []).append(pid)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _memory(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of a process in bytes; (0, 0) when it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            values = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in handle if line.endswith("kB\n")}
        return values.get("Rss", 0), values.get("Pss", 0)
    except (OSError, ValueError):
        return 0, 0


@dataclass
class Sampler:
    """Samples a process tree every :data:`SAMPLE_S` seconds in a thread: the peak of its summed RSS and PSS, and
    when ``metrics`` (a run's ``metrics.jsonl``) first holds a line: the seconds from ``started`` to the first step."""

    root: int
    started: float
    metrics: Path | None = None
    peak_rss: int = 0
    peak_pss: int = 0
    first_step_s: float | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Sampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.metrics is not None and self.first_step_s is None and self._stepped():
                self.first_step_s = time.perf_counter() - self.started
            rss = pss = 0
            for pid in tree(self.root):
                one = _memory(pid)
                rss, pss = rss + one[0], pss + one[1]
            self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, pss)
            self._stop.wait(SAMPLE_S)

    def _stepped(self) -> bool:
        try:
            return b"\n" in self.metrics.read_bytes()[:4096]  # type: ignore[union-attr]
        except OSError:
            return False


def measured(command: list[str], env: dict[str, str], log: Path, metrics: Path | None = None) -> dict[str, Any]:
    """Run ``command`` under ``/usr/bin/time -v`` with the tree sampled, printing it first (with the variables of
    ``env`` that differ from this process's) as it can be pasted into a shell; that line (``shell``), its wall time,
    the seconds to its first step (with ``metrics``), the peaks (time's maximum RSS of one process, the tree's summed
    RSS and PSS).

    Raises:
        SystemExit: the command failed (the end of its output in the message).
    """
    report = log.with_suffix(".time")
    shown = " ".join(f"{key}={shlex.quote(value)}" for key, value in env.items() if os.environ.get(key) != value)
    shell = f"{shown} {shlex.join(command)}".strip()
    print(f"$ {shell}", file=sys.stderr, flush=True)
    started = time.perf_counter()
    with log.open("w") as out:
        process = subprocess.Popen([TIME, "-v", "-o", str(report), *command], stdout=out, stderr=subprocess.STDOUT,
                                   env=env)  # fmt: skip
        with Sampler(process.pid, started, metrics) as sampler:
            code = process.wait()
    wall = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"{' '.join(command)} exited {code}:\n{log.read_text()[-3000:]}")
    max_rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", report.read_text())[1]) * 1024  # type: ignore[index]
    return {"shell": shell, "wall_s": round(wall, 2), "first_step_s": sampler.first_step_s, "max_rss": max_rss,
            "tree_rss": sampler.peak_rss, "tree_pss": sampler.peak_pss}  # fmt: skip


def disk_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (their sizes)."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def prepared_tokens(directory: Path) -> tuple[int, float]:
    """Every split's tokens, and the preparation's own seconds, from a prepared directory's report."""
    report = json.loads((directory / "prepared.json").read_text())
    return sum(sum(split["tokens"].values()) for split in report["splits"].values()), float(report["seconds"])


# --- the commands ---------------------------------------------------------------------------------------------------


def dotformer(*argv: str) -> list[str]:
    return [sys.executable, "-m", "dotformer", *argv]


def torchrun(ranks: int, *argv: str) -> list[str]:
    if ranks == 1:
        return dotformer(*argv)
    return [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}", "-m", "dotformer", *argv]


def data_flags(specs: dict[str, str], vocab_size: int) -> list[str]:
    flags = ["--data", specs["train"], "--valid", specs["valid"], "--test", specs["test"]]
    return [*flags, "--vocab-size", str(vocab_size)]


def run_prepare(specs: dict[str, str], work: Path, name: str, args: argparse.Namespace, extra: list[str]) -> dict:
    """``dotformer prepare`` into ``work/name`` (fresh): its figures."""
    out = work / name
    shutil.rmtree(out, ignore_errors=True)
    command = dotformer("prepare", *data_flags(specs, args.vocab_size), *extra, "--out", str(out))
    result = measured(command, dict(os.environ), work / f"{name}.log")
    tokens, seconds = prepared_tokens(out)
    return {**result, "peak": result["max_rss"], "tokens": tokens, "prepare_s": seconds,
            "tokens_per_s": round(tokens / seconds), "tokens_per_wall_s": round(tokens / result["wall_s"]),
            "prepared_bytes": disk_bytes(out), "directory": str(out)}  # fmt: skip


def run_train(specs: dict[str, str], work: Path, name: str, ranks: int, cache: Path, args, extra: list[str]) -> dict:
    """``dotformer train`` (under torchrun with 2 ranks) into ``work/name`` (fresh), with ``cache`` as the cache of
    prepared data: its figures."""
    out = work / name
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "DOTFORMER_CACHE": str(cache)}
    if ranks > 1:
        env["OMP_NUM_THREADS"] = "1"  # torchrun's default, said here to keep its warning out of the log
    argv = ["train", *data_flags(specs, args.vocab_size), *extra, *TRAIN_FLAGS, "--out", str(out)]
    result = measured(torchrun(ranks, *argv), env, work / f"{name}.log", out / "metrics.jsonl")
    reference = json.loads((out / "data" / "data.json").read_text())
    prepared = Path(reference["prepared"])
    tokens, seconds = prepared_tokens(prepared)
    # what the memory target reads: one process's peak (time -v), or the tree's sum with two ranks
    peak = result["max_rss"] if ranks == 1 else result["tree_rss"]
    return {**result, "peak": peak, "tokens": tokens, "prepared_s": seconds, "prepared_bytes": disk_bytes(prepared),
            "run_bytes": disk_bytes(out), "run_data_bytes": disk_bytes(out / "data")}  # fmt: skip


# --- the peer: Hugging Face datasets ----------------------------------------------------------------------------------


def peer_child(args: argparse.Namespace) -> int:
    """The peer's run (a child process): load both files into Arrow, tokenize them with the BPE, print JSON."""
    import datasets
    import pyarrow.compute
    import tokenizers

    datasets.disable_progress_bars()
    started = time.perf_counter()
    report = json.loads(Path(args.tokenizer).read_text(encoding="utf-8"))
    bpe = tokenizers.Tokenizer.from_str(json.dumps(report["hf_tokenizer"]))
    sides = [
        datasets.load_dataset("text", data_files=path, split="train", cache_dir=args.cache).rename_column("text", name)
        for path, name in ((args.src, "src"), (args.tgt, "tgt"))
    ]
    pairs = datasets.concatenate_datasets(sides, axis=1)

    def encode(batch: dict[str, list[str]]) -> dict[str, list[list[int]]]:
        return {f"{side}_ids": [e.ids for e in bpe.encode_batch_fast(batch[side])] for side in ("src", "tgt")}

    encoded = pairs.map(encode, batched=True, num_proc=args.num_proc, remove_columns=["src", "tgt"])
    seconds = time.perf_counter() - started
    lengths = (pyarrow.compute.list_value_length(encoded.data.column(side)) for side in ("src_ids", "tgt_ids"))
    tokens = sum(pyarrow.compute.sum(length).as_py() for length in lengths)
    print(json.dumps({"seconds": seconds, "pairs": len(encoded), "tokens": tokens}))
    return 0


def run_peer(specs: dict[str, str], work: Path, name: str, cache: Path, tokenizer: Path, args) -> dict:
    """The peer in a child process under ``/usr/bin/time -v``: its figures (train split only)."""
    src, tgt = specs["train"].split(",")
    command = [sys.executable, __file__, "--child", "hf", "--src", src, "--tgt", tgt, "--tokenizer", str(tokenizer),
               "--cache", str(cache), "--num-proc", str(os.cpu_count() or 1)]  # fmt: skip
    log = work / f"{name}.log"
    result = measured(command, {**os.environ, "HF_DATASETS_OFFLINE": "1"}, log)
    child = json.loads(log.read_text().strip().splitlines()[-1])
    rate = round(child["tokens"] / child["seconds"])
    return {**result, **child, "peak": result["max_rss"], "tokens_per_s": rate, "cache_bytes": disk_bytes(cache)}


# --- the table --------------------------------------------------------------------------------------------------------


def gib(n: float | None) -> str:
    return "-" if n is None else f"{n / GIB:.2f} GiB"


def mib(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**20:,.1f} MiB"


def rows_table(rows: list[dict[str, Any]]) -> list[dict[str, str]]:
    table = []
    for row in rows:
        per_token = row.get("bytes_per_token")
        table.append({
            "pairs": f"{row['pairs']:,}",
            "tokens": f"{row['tokens']:,}",
            "command": row["command"],
            "run": row["run"],
            "to step 1": "-" if row.get("first_step_s") is None else f"{row['first_step_s']:.1f} s",
            "wall": f"{row['wall_s']:.1f} s",
            "tokens/s": f"{row['tokens_per_s']:,}" if row.get("tokens_per_s") else "-",
            "peak": gib(row.get("peak")),
            "PSS (tree)": gib(row.get("tree_pss")),
            "above base": gib(row.get("above_base")),
            "B/token": "-" if per_token is None else f"{per_token:.2f}",
            "prepared": mib(row.get("prepared_bytes") or row.get("cache_bytes")),
            "run dir (data/)": f"{mib(row['run_bytes'])} ({mib(row['run_data_bytes'])})" if "run_bytes" in row else "-",
            "load": f"{row['load_average_1m']:.1f}",
        })  # fmt: skip
    return table


def target_checks(rows: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Each target beside the figure it reads (the largest size measured; the absolute ones only at 4.5M pairs)."""
    checks = []

    def check(target: str, figure: float | None, limit: float, unit: str, higher: bool = False, note: str = "") -> None:
        if figure is None:
            checks.append({"target": target, "figure": "-", "met": "-", "note": note})
            return
        met = figure >= limit if higher else figure <= limit
        checks.append({"target": target, "figure": f"{figure:,.2f}{unit}", "met": "yes" if met else "NO", "note": note})

    trains = [row for row in rows if "ranks" in row and row["run"] != "base"]  # train, and train under torchrun
    worst = max((row for row in trains if row.get("bytes_per_token") is not None),
                key=lambda row: row["bytes_per_token"], default=None)  # fmt: skip
    check(f"peak above base <= {TARGETS['bytes_per_token']:g} B/token", worst and worst["bytes_per_token"],
          TARGETS["bytes_per_token"], " B", note=worst and f"worst: {worst['pairs']:,} pairs, {worst['command']}, "
          f"{worst['run']}" or "")  # fmt: skip
    at = [row for row in trains if abs(row["size"] - TARGET_SIZE) < 1e-9]
    one = max((row["peak"] for row in at if row["ranks"] == 1), default=None)
    two = max((row["peak"] for row in at if row["ranks"] == 2), default=None)
    note = "" if at else f"not measured at {TARGET_SIZE}M pairs"
    check(f"{TARGET_SIZE}M pairs, 1 process: peak <= {TARGETS['peak_1_rank_gib']:g} GiB", one and one / GIB,
          TARGETS["peak_1_rank_gib"], " GiB", note=note)  # fmt: skip
    check(f"{TARGET_SIZE}M pairs, 2 ranks in all <= {TARGETS['two_ranks_over_one']:g}x 1 process",
          two / one if one and two else None, TARGETS["two_ranks_over_one"], "x", note=note)  # fmt: skip
    second = max((row["first_step_s"] for row in at if row["run"] == "second" and row["first_step_s"]), default=None)
    check(f"{TARGET_SIZE}M pairs, second run at step 1 <= {TARGETS['second_run_to_step_1_s']:g} s", second,
          TARGETS["second_run_to_step_1_s"], " s", note=note)  # fmt: skip
    prepares = [row for row in rows if row["command"] == "prepare"]
    slowest = min((row["tokens_per_s"] for row in prepares), default=None)
    check(f"prepare >= {TARGETS['prepare_tokens_per_s']:,.0f} tokens/s (2 cores)", slowest,
          TARGETS["prepare_tokens_per_s"], " tok/s", higher=True, note=f"{os.cpu_count()} cores here")  # fmt: skip
    return checks


# --- main -------------------------------------------------------------------------------------------------------------


def measure_size(size: float, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every command's figures at one corpus size."""
    from wmt_synthetic import write_corpus

    pairs = int(round(size * 1e6))
    corpus = args.out / f"wmt-{size}M"
    if not (corpus / "test.tgt").is_file():
        print(f"writing {pairs:,} pairs to {corpus} ...", file=sys.stderr)
        write_corpus(corpus, pairs, held_out=HELD_OUT)
    specs = {name: f"{corpus / name}.src,{corpus / name}.tgt" for name in ("train", "valid", "test")}
    work = args.out / f"work-{size}M"
    shutil.rmtree(work, ignore_errors=True)  # the benchmark's own caches and runs: every first run prepares
    work.mkdir(parents=True)
    rows: list[dict[str, Any]] = []

    def add(row: dict[str, Any], **labels: Any) -> dict[str, Any]:
        row.update(size=size, pairs=pairs, load_average_1m=round(os.getloadavg()[0], 2), **labels)
        rows.append(row)
        print(f"{size}M {labels['command']} {labels['run']}: {row['wall_s']:.1f} s", file=sys.stderr)
        return row

    prepared = add(run_prepare(specs, work, "prepare", args, []), command="prepare", run="learn BPE + encode")
    tokenizer = Path(prepared["directory"]) / "tokenizer_src.json"
    given = ["--src-tokenizer-file", str(tokenizer), "--tgt-tokenizer-file", str(tokenizer)]
    add(run_prepare(specs, work, "prepare-given", args, given), command="prepare", run="encode (BPE given)")
    if args.peer:
        try:
            import datasets  # noqa: F401
        except ImportError:
            print("the peer needs the datasets package: pip install 'dotformer[datasets]'", file=sys.stderr)
        else:
            for run in ("first", "second"):
                row = run_peer(specs, work, f"hf-{run}", work / "hf-cache", tokenizer, args)
                add(row, command="HF datasets map", run=run)
    for ranks in args.ranks:
        label = "train" if ranks == 1 else f"torchrun x{ranks}"
        base_specs = {"train": specs["valid"], "valid": specs["valid"], "test": specs["test"]}
        base = add(run_train(base_specs, work, f"base-{ranks}", ranks, work / f"base-cache-{ranks}", args, given),
                   command=label, run="base", ranks=ranks)  # fmt: skip
        for run in ("first", "second"):
            row = run_train(specs, work, f"train-{ranks}-{run}", ranks, work / f"cache-{ranks}", args, [])
            row.update(above_base=row["peak"] - base["peak"])
            row.update(bytes_per_token=round(row["above_base"] / row["tokens"], 2))
            add(row, command=label, run=run, ranks=ranks)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=float, nargs="+", default=SIZES, help="millions of training pairs")
    parser.add_argument("--ranks", type=int, nargs="+", default=(1, 2), choices=(1, 2), help="processes of a run")
    parser.add_argument("--out", type=Path, default=HERE / "out" / "data_scale", help="corpora, caches and runs")
    parser.add_argument("--json", type=Path, default=HERE / "results" / "data_scale.json", help="results")
    parser.add_argument("--vocab-size", type=int, default=VOCAB, help="the shared BPE vocabulary")
    parser.add_argument("--no-peer", dest="peer", action="store_false", help="leave out Hugging Face datasets")
    parser.add_argument("--keep", action="store_true", help="keep the caches and runs (the corpora are always kept)")
    parser.add_argument("--child", choices=("hf",), help=argparse.SUPPRESS)
    for name in ("src", "tgt", "tokenizer", "cache"):
        parser.add_argument(f"--{name}", help=argparse.SUPPRESS)
    parser.add_argument("--num-proc", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return peer_child(args)
    if not Path(TIME).is_file():
        raise SystemExit(f"{TIME} is missing: apt-get install -y time")
    sys.path.insert(0, str(HERE))
    from common import command_line, format_table, machine_info, write_json

    args.out = args.out.resolve()
    rows = [row for size in args.sizes for row in measure_size(size, args)]
    table = rows_table(rows)
    print(format_table(table, list(table[0])))
    checks = target_checks(rows)
    print()
    print(format_table(checks, ["target", "figure", "met", "note"]))
    payload = {"command": command_line(), "machine": machine_info("cpu"), "vocab_size": args.vocab_size,
               "held_out": HELD_OUT, "train_flags": TRAIN_FLAGS, "targets": TARGETS, "checks": checks,
               "results": rows}  # fmt: skip
    print(f"wrote {write_json(args.json, payload)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
