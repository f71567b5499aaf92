"""Quality against training minutes: evaluate a run's step checkpoints at chosen budgets, as a table, JSON and a plot.

A long run saves a step checkpoint every ``save_every`` steps (keep them all with a large ``keep_last``); its
``metrics.jsonl`` records the training seconds of every logged step. For each budget in ``--minutes`` this script
takes the newest step checkpoint saved within that many training minutes, runs ``dotformer evaluate`` on it (the
run's saved test split, the same decoding for every point), and reports the metrics next to the steps, epochs and
target tokens/s reached by then::

    python benchmarks/budget_curve.py --run runs/g2p-long --minutes 10,30,60,120 --beam 4 --average 5 \\
        --out benchmarks/out/g2p_curve.json --plot docs/images/g2p_curve.png

With ``--average K`` each point is what averaging ships at that budget (the README's 2-hour curves): the mean of
the K newest step checkpoints saved within it (``dotformer average``, paper §6.1), written to
``RUN/curve/avgK_step_S`` and evaluated there (fewer than K saved by then: those there are). ``--split valid``
scores the run's valid split instead, e.g. the random verses of a Bible run whose test split is whole held-out
books (``--test-books``): nothing in training is chosen by them when step or averaged checkpoints are evaluated
(only ``best/`` is picked by the valid loss).

The budgets are training time as the run counted it (validation passes and checkpoint writes excluded), on the
machine and under the load the run had: give the tokens/s beside every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

METRIC_KEYS = ("wer", "per", "bleu", "chrf", "exact_match")


def train_points(run: Path) -> list[dict[str, Any]]:
    """The training lines of ``RUN/metrics.jsonl`` (step, epoch, elapsed_s, tokens_per_s), in order."""
    lines = (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [row for row in map(json.loads, lines) if row.get("split") == "train" and "elapsed_s" in row]


def checkpoint_steps(run: Path) -> dict[int, Path]:
    """Step number -> step checkpoint directory, for every ``checkpoints/step_*`` of the run."""
    found = {}
    for path in sorted((run / "checkpoints").glob("step_*")):
        if path.is_dir() and path.name[5:].isdigit():
            found[int(path.name[5:])] = path
    return found


def pick(run: Path, minutes: float, points: list[dict[str, Any]], steps: dict[int, Path]) -> dict[str, Any] | None:
    """The newest step checkpoint within ``minutes`` of training, with the run's figures at that step.

    A checkpoint's time is that of the first logged step at or after it (lines come every ``log_every`` steps); the
    final checkpoint of a run, saved after its last logged line, takes that line's time.
    """
    if not points:
        return None

    def row_of(step: int) -> dict[str, Any]:
        return next((r for r in points if r["step"] >= step), points[-1])

    eligible = [s for s in steps if row_of(s)["elapsed_s"] <= minutes * 60]
    if not eligible:
        return None
    step = max(eligible)
    row = row_of(step)
    window = [r["tokens_per_s"] for r in points if r["step"] <= step]
    return {
        "minutes": minutes,
        "step": step,
        "epoch": row["epoch"],
        "train_minutes": round(row["elapsed_s"] / 60, 2),
        "mean_target_tokens_per_s": round(sum(window) / len(window), 1),
        "checkpoint": str(steps[step]),
    }


def average(run: Path, step: int, steps: dict[int, Path], k: int, reuse: bool) -> tuple[str, list[int]]:
    """Average the ``k`` newest step checkpoints at or before ``step`` into ``RUN/curve/avgK_step_S`` (with
    ``reuse``, an average written there by an earlier call is kept).

    Returns:
        The averaged checkpoint's directory and the steps averaged (one step: that checkpoint, not averaged).
    """
    chosen = sorted(s for s in steps if s <= step)[-k:]
    if len(chosen) == 1:
        return str(steps[step]), chosen
    out = run / "curve" / f"avg{k}_step_{step}"
    if reuse and (out / "config.json").is_file():
        return str(out), chosen
    command = [sys.executable, "-m", "dotformer", "average", "--overwrite", "--out", str(out)]
    done = subprocess.run(command + [str(steps[s]) for s in chosen], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"averaging steps {chosen} of {run} failed:\n{done.stderr}")
    return str(out), chosen


def evaluate(checkpoint: str, beam: int, split: str, json_path: Path, threads: int) -> dict[str, Any]:
    """Run ``dotformer evaluate`` on one checkpoint and return its metrics JSON."""
    command = [
        sys.executable,
        "-m",
        "dotformer",
        "evaluate",
        "--checkpoint",
        checkpoint,
        "--split",
        split,
        "--beam",
        str(beam),
        "--device",
        "cpu",
        "--json",
        str(json_path),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:  # the progress bar is dropped; an error is shown whole
        raise SystemExit(f"evaluating {checkpoint} failed:\n{done.stderr}")
    return json.loads(json_path.read_text(encoding="utf-8"))


def plot(rows: list[dict[str, Any]], path: Path, title: str, labels: dict[str, str]) -> None:
    """WER and PER (or BLEU and chrF) of each split against training minutes, log-scaled minutes.

    ``labels`` maps each evaluated split to its name in the legend (one split: the metric names alone).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 3.6), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    minutes = [r["train_minutes"] for r in rows]
    for style, (split, label) in zip(("-", "--", ":", "-."), labels.items(), strict=False):
        for key in METRIC_KEYS:
            values = [r["metrics_by_split"][split].get(key) for r in rows]
            if all(v is not None for v in values):
                name = key.upper() if len(labels) == 1 else f"{key.upper()}, {label}"
                ax.plot(minutes, values, style, marker="o", label=name)
                for x, y in zip(minutes, values, strict=True):
                    ax.annotate(f"{y:.1f}", (x, y), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
    ax.set_xscale("log")
    ax.set_xticks(minutes, [f"{m:.0f}\n{r['step']:,}" for m, r in zip(minutes, rows, strict=True)], fontsize=8)
    ax.minorticks_off()
    ax.set_xlabel("training minutes, steps")
    ax.set_ylabel("%")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--run", required=True, type=Path, help="the run directory")
    parser.add_argument("--minutes", default="10,30,60,120", help="comma-separated training budgets in minutes")
    parser.add_argument("--beam", type=int, default=4, help="beam size of every evaluation (default 4)")
    parser.add_argument("--split", default="test", help="the saved splits to evaluate, e.g. test,valid (default test)")
    parser.add_argument("--labels", default=None, help="the splits' names in the plot, e.g. 'held-out books,verses'")
    parser.add_argument("--average", type=int, default=1, help="average the last K step checkpoints (default 1: none)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each evaluation (default 1)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/out/budget_curve.json"), help="JSON written")
    parser.add_argument("--plot", type=Path, default=None, help="PNG/SVG of the curve (optional)")
    parser.add_argument("--title", default=None, help="plot title (default: the run directory)")
    parser.add_argument("--reuse", action="store_true", help="reuse a checkpoint's metrics JSON from an earlier call")
    args = parser.parse_args(argv)

    splits = args.split.split(",")
    names = args.labels.split(",") if args.labels else splits
    if len(names) != len(splits):
        parser.error(f"--labels names {len(names)} splits, --split {len(splits)}")
    labels = dict(zip(splits, names, strict=True))
    points, steps = train_points(args.run), checkpoint_steps(args.run)
    rows = []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for minutes in (float(m) for m in args.minutes.split(",")):
        row = pick(args.run, minutes, points, steps)
        if row is None:
            print(f"{minutes:g} min: no step checkpoint saved within that budget", file=sys.stderr)
            continue
        if rows and rows[-1]["step"] == row["step"]:
            print(f"{minutes:g} min: the same checkpoint as {rows[-1]['minutes']:g} min (step {row['step']})")
            continue
        if args.average > 1:
            row["checkpoint"], row["averaged_steps"] = average(args.run, row["step"], steps, args.average, args.reuse)
        row["metrics_by_split"] = {}
        for split in splits:
            json_path = args.out.with_suffix(f".{split}.{row['step']}.avg{args.average}.json")
            result = json.loads(json_path.read_text()) if args.reuse and json_path.is_file() else None
            if result is None or result.get("decode", {}).get("beam_size") != args.beam:
                result = evaluate(row["checkpoint"], args.beam, split, json_path, args.threads)
            row["metrics_by_split"][split] = {k: v for k, v in result["metrics"].items() if k in METRIC_KEYS}
        row["metrics"] = row["metrics_by_split"][splits[0]]
        rows.append(row)
        shown = "  ".join(
            f"{split}: " + " ".join(f"{k} {v:.2f}" for k, v in metrics.items())
            for split, metrics in row["metrics_by_split"].items()
        )
        print(
            f"{minutes:>6g} min  step {row['step']:>6}  epoch {row['epoch']:>6.2f}  "
            f"{row['mean_target_tokens_per_s']:>8,.0f} tok/s  {shown}",
            flush=True,
        )
    summary = {"run": str(args.run), "beam": args.beam, "split": args.split, "average": args.average, "rows": rows}
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {args.out}")
    if args.plot is not None and rows:
        plot(rows, args.plot, args.title or str(args.run), labels)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
