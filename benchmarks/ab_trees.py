"""Two source trees of dotformer side by side on the jobs users run: a change's before and after, interleaved.

A refactor or a speed change must not slow what users do. This script runs the same commands with two trees of the
package (``--before`` and ``--after``, each a ``src`` directory, put first on ``PYTHONPATH``), one after the other in
rounds (A B, B A, A B, ... so drift in the machine's speed hits both alike), and reports medians and the paired ratio
after / before:

* ``startup``: ``dotformer translate`` of one word, from a cold process to its output (imports, loading, one decode).
* ``train_g2p``: milliseconds per training step of ``configs/g2p.toml`` on real CMUdict batches (1,024 tokens), as
  (time of ``--max-steps LONG`` - time of ``--max-steps SHORT``) / (LONG - SHORT): data preparation, start-up and the
  final save cancel out.
* ``train_small``: the same with the ``small`` preset (256 wide, 3 + 3 layers, dropout 0.1) and 4,096-token batches.
* ``train_bible`` and ``train_lm``: the same with ``configs/bible.toml`` (Spanish to English verses) and
  ``configs/lm-bible.toml`` (the character language model), the other real jobs (``--small-steps``).
* ``greedy`` and ``beam4``: ``dotformer translate`` of held-out CMUdict words with a G2P checkpoint, words per second.

The G2P checkpoint and the word list are made once, with the ``--after`` tree (``dotformer train --config g2p
--max-steps 300``), unless ``--checkpoint`` and ``--words`` are given. Both trees must read the same checkpoint format.

Run (the machine otherwise idle; ``--threads 1`` leaves the other core free)::

    git worktree add /tmp/before HEAD~5
    python benchmarks/ab_trees.py --before /tmp/before/src --after src --threads 1 --rounds 5 \\
        --out benchmarks/results/ab_trees.json

A step of the ``small`` preset on 4,096-token batches takes over a second on one CPU thread: its default step
counts are small (``--small-steps 4,24``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import command_line, format_table, machine_info, write_json

ROOT = Path(__file__).resolve().parent.parent
JOBS = ("startup", "train_g2p", "train_small", "train_bible", "train_lm", "greedy", "beam4")


def run(tree: Path, args: list[str], threads: int, stdin: str | None = None) -> float:
    """Wall seconds of ``python -m dotformer ARGS`` with ``tree`` first on the import path.

    Raises:
        RuntimeError: the command failed (its stderr's last lines in the message).
    """
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": str(threads)}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "dotformer", *args], input=stdin, env=env, capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"{tree}: dotformer {' '.join(args)} exited {done.returncode}:\n{tail}")
    return seconds


def train_args(config: str, out: Path, steps: int, threads: int, extra: list[str]) -> list[str]:
    """The ``dotformer train`` arguments of a timed run: no validation or saving before the end."""
    return [
        "train", "--config", config, "--out", str(out), "--overwrite", "--max-steps", str(steps), "--threads",
        str(threads), "--eval-every", "1000000", "--save-every", "1000000", "--no-progress", *extra,
    ]  # fmt: skip


def prepare(tree: Path, workdir: Path, threads: int, num_words: int) -> tuple[Path, Path]:
    """A 300-step G2P checkpoint and ``num_words`` of its held-out test words, one per line."""
    run_dir = workdir / "g2p"
    run(tree, train_args("g2p", run_dir, 300, threads, []), threads)
    words = []
    for line in (run_dir / "data" / "test.tsv").read_text(encoding="utf-8").splitlines():
        word = line.split("\t")[0]
        if word and word not in words:
            words.append(word)
    path = workdir / "words.txt"
    path.write_text("\n".join(words[:num_words]) + "\n", encoding="utf-8")
    return run_dir / "last", path


def small_config(workdir: Path) -> Path:
    """configs/g2p.toml with the ``small`` preset's model and 4,096-token batches."""
    text = (ROOT / "configs" / "g2p.toml").read_text(encoding="utf-8")
    head, _, rest = text.partition("[model]")
    _, _, train = rest.partition("[train]")
    model = '[model]\npreset = "small"\n\n'
    path = workdir / "g2p-small.toml"
    path.write_text(head + model + "[train]" + train.replace("max_tokens = 1024", "max_tokens = 4096"), "utf-8")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the src directory of the tree before the change")
    parser.add_argument("--after", type=Path, default=ROOT / "src", help="the src directory after (default: ./src)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds of every job and tree (default 5)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of every command (default 1)")
    parser.add_argument("--checkpoint", type=Path, help="a G2P checkpoint to decode with (default: train one)")
    parser.add_argument("--words", type=Path, help="words to pronounce, one per line (default: its test words)")
    parser.add_argument("--num-words", type=int, default=2000, help="words decoded per run (default 2,000)")
    parser.add_argument("--steps", default="20,220", help="SHORT,LONG training steps of g2p (default 20,220)")
    parser.add_argument("--small-steps", default="4,24", help="SHORT,LONG steps of the small preset (default 4,24)")
    parser.add_argument("--jobs", default=",".join(JOBS), help=f"comma-separated jobs (default: {','.join(JOBS)})")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args()
    short, long = (int(s) for s in args.steps.split(","))
    small_short, small_long = (int(s) for s in args.small_steps.split(","))
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    with tempfile.TemporaryDirectory(prefix="dotformer-ab-") as tmp:
        workdir = Path(tmp)
        checkpoint, words_file = args.checkpoint, args.words
        if checkpoint is None or words_file is None:
            checkpoint, words_file = prepare(trees["after"], workdir, args.threads, args.num_words)
        words = words_file.read_text(encoding="utf-8")
        num_words = len(words.split())
        small = small_config(workdir)
        decode = ["translate", "--checkpoint", str(checkpoint), "--threads", str(args.threads)]
        jobs = {
            "startup": lambda tree: run(tree, decode, args.threads, "abandon\n"),
            "train_g2p": lambda tree: step_ms(tree, "g2p", workdir, short, long, args.threads),
            "train_small": lambda tree: step_ms(tree, str(small), workdir, small_short, small_long, args.threads),
            "train_bible": lambda tree: step_ms(tree, "bible", workdir, small_short, small_long, args.threads),
            "train_lm": lambda tree: step_ms(tree, "lm-bible", workdir, small_short, small_long, args.threads),
            "greedy": lambda tree: num_words / run(tree, [*decode, "--beam", "1"], args.threads, words),
            "beam4": lambda tree: num_words / run(tree, [*decode, "--beam", "4"], args.threads, words),
        }
        unknown = sorted(set(args.jobs.split(",")) - set(jobs))
        if unknown:
            parser.error(f"--jobs: unknown {', '.join(unknown)}; choose from {', '.join(jobs)}")
        jobs = {name: measure for name, measure in jobs.items() if name in args.jobs.split(",")}
        units = {job: "ms/step" for job in JOBS if job.startswith("train_")}
        units.update(startup="s", greedy="words/s", beam4="words/s")
        higher_is_better = {"greedy", "beam4"}
        samples: dict[str, dict[str, list[float]]] = {job: {"before": [], "after": []} for job in jobs}
        for job, measure in jobs.items():
            for name in trees:  # one warm-up each: file caches, compiled bytecode
                measure(trees[name])
            for r in range(args.rounds):
                order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
                for name in order:
                    samples[job][name].append(measure(trees[name]))
                print(f"{job} round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
    rows: list[dict[str, object]] = []
    results = {}
    for job, by_tree in samples.items():
        pairs = [a / b for a, b in zip(by_tree["after"], by_tree["before"], strict=True)]
        ratio = statistics.median(pairs)  # after / before within one round
        speedup = ratio if job in higher_is_better else 1 / ratio
        before, after = statistics.median(by_tree["before"]), statistics.median(by_tree["after"])
        results[job] = {"unit": units[job], "before": by_tree["before"], "after": by_tree["after"], "speedup": speedup}
        rows.append({"job": job, "unit": units[job], "before": before, "after": after, "speed after/before": speedup})
    print(format_table(rows, ["job", "unit", "before", "after", "speed after/before"]))
    if args.out:
        paths = {name: str(tree) for name, tree in trees.items()}
        write_json(args.out, {"command": command_line(), "machine": machine_info(), "trees": paths, "results": results})


def step_ms(tree: Path, config: str, workdir: Path, short: int, long: int, threads: int) -> float:
    """Milliseconds per training step: the difference of a LONG and a SHORT run of the same config."""
    out = workdir / f"train-{os.getpid()}"
    t_short = run(tree, train_args(config, out, short, threads, []), threads)
    t_long = run(tree, train_args(config, out, long, threads, []), threads)
    return 1000 * (t_long - t_short) / (long - short)


if __name__ == "__main__":
    main()
