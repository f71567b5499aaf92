"""The modern block, change by change, the way the paper's Table 3 varies the base model: the 2017 block, each change
alone, and all of them together, at the same parameter count and the same training budget.

Every variant is the job's shipped config (``--job lm``: configs/lm-bible.toml, the KJV character language model;
``--job g2p``: configs/g2p.toml, the CMUdict encoder-decoder) with some ``[model]`` fields set (:data:`VARIANTS`),
and ``d_ff`` chosen (a multiple of 8) so that its parameter count (:func:`dotformer.model.expected_num_parameters`)
is the closest to the 2017 block's. Each runs through the real commands, one after the other (never two at once:
they would share the cores), on the same data, seed, recipe, budget and threads::

    dotformer train --config WORK/configs/VARIANT.toml --out WORK/VARIANT --max-minutes M (or --max-steps N)
        --threads T --eval-every 0 --no-progress --overwrite
    dotformer evaluate --checkpoint WORK/VARIANT/last --split test --threads T --json WORK/VARIANT/test.json

The table gives, for each variant, the held-out figure (lm: bits per character of the test books; g2p: WER and PER
of greedy outputs on a seeded sample of the test words, and the loss in nats per phone of their pronunciations), the
steps it made in the budget, its training speed (target tokens per second over the run) and its parameters; the JSON
has the commands too. A variant that sets nothing new (pre-norm on lm-bible.toml, which is pre-norm already) is not run
again: its row says so.

Time budgets (the paper's way: the same minutes) are valid only on an idle machine; ``--steps`` compares the same
number of updates instead, which load does not change: two invocations of one thread each may then share a
2-core machine, the second reading the first's 2017 run (``--baseline``) rather than training it again.

Run::

    python benchmarks/modern_ablation.py                         # lm, 10 minutes a variant, 2 threads (~1.5 hours)
    python benchmarks/modern_ablation.py --job g2p
    python benchmarks/modern_ablation.py --steps 300 --threads 1 # the same number of updates: valid under load
    python benchmarks/modern_ablation.py --steps 300 --threads 1 --variants rotary --work-dir runs/other \
        --baseline runs/modern_ablation/lm/2017 --out other.json  # beside the first, its 2017 run shared
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import command_line, format_table, git_commit, machine_info, write_json

from dotformer import ModelConfig
from dotformer.model import expected_num_parameters
from dotformer.runs.config_files import read_config_file

RESULTS = Path(__file__).resolve().parent / "results"
JOBS = {"lm": "lm-bible", "g2p": "g2p"}  # the job's shipped config


@dataclass(frozen=True)
class Variant:
    """One row of the ablation: ``[model]`` fields set over the 2017 block (``d_ff`` is then matched)."""

    name: str
    what: str
    fields: dict[str, Any] = field(default_factory=dict)


def gqa(config: ModelConfig) -> dict[str, Any]:
    """Grouped-query attention: half as many key/value heads (multi-query when the model has 2 heads)."""
    return {"num_kv_heads": max(1, config.num_heads // 2)}


LLAMA = dict(norm_first=True, norm="rmsnorm", ffn_gated=True, activation="silu", positional="rotary", bias=False)
VARIANTS = [
    Variant("2017", "the shipped config"),
    Variant("pre-norm", "x + Sublayer(Norm(x)), a final norm", dict(norm_first=True)),
    Variant("rmsnorm", "RMSNorm for every LayerNorm", dict(norm="rmsnorm")),
    Variant("swiglu", "(silu(x·W_gate) ⊙ x·W_1)·W_2", dict(ffn_gated=True, activation="silu")),
    Variant("rotary", "RoPE in place of sinusoids", dict(positional="rotary")),
    Variant("gqa", "H/2 key/value heads"),
    Variant("no-bias", "no biases in projections and FFN", dict(bias=False)),
    Variant("qk-norm", "RMSNorm of each head's q and k", dict(qk_norm=True)),
    Variant("modern", "all but QK-norm (Llama's block)", LLAMA),
    Variant("modern+qk-norm", "all of them (Qwen3's block)", {**LLAMA, "qk_norm": True}),
]
COLUMNS = {
    "lm": ["variant", "what", "test_bits_per_char", "valid_bits_per_char", "steps", "tokens_per_s", "parameters",
           "d_ff"],
    "g2p": ["variant", "what", "test_wer", "test_per", "test_nats", "steps", "tokens_per_s", "parameters", "d_ff"],
}  # fmt: skip


def variant_fields(variant: Variant, base: ModelConfig) -> dict[str, Any]:
    """The fields a variant sets (grouped-query attention's depend on the head count)."""
    fields = dict(variant.fields)
    if variant.name in ("gqa", "modern", "modern+qk-norm"):
        fields.update(gqa(base))
    return fields


def changes(fields: dict[str, Any], base: ModelConfig) -> dict[str, Any]:
    """The fields whose value differs from the base config's."""
    return {name: value for name, value in fields.items() if getattr(base, name) != value}


def matched_d_ff(config: ModelConfig, target: int) -> int:
    """The d_ff (a multiple of 8) that brings ``config``'s parameter count closest to ``target``."""
    candidates = range(8, 8 * config.d_ff + 8, 8)
    return min(candidates, key=lambda f: (abs(expected_num_parameters(config.replace(d_ff=f)) - target), f))


def toml_value(value: Any) -> str:
    """A TOML literal of a config value (str, bool, int, float, a list of them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML literal for {value!r}")


def write_config(path: Path, sections: dict[str, dict[str, Any]]) -> Path:
    """Write ``[model]``, ``[train]``, ``[data]`` tables as a TOML file."""
    lines = []
    for name, table in sections.items():
        lines.append(f"[{name}]")
        lines += [f"{key} = {toml_value(value)}" for key, value in table.items() if value is not None]
        lines.append("")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def run(command: list[str], threads: int) -> float:
    """Run a dotformer command (printed on stderr first) on ``threads`` threads; its wall time in seconds.

    Raises:
        subprocess.CalledProcessError: the command failed.
    """
    print("$ " + shlex.join(["dotformer", *command]), file=sys.stderr, flush=True)
    started = time.monotonic()
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    subprocess.run([sys.executable, "-m", "dotformer", *command], check=True, env=env)
    return time.monotonic() - started


def train_command(args: argparse.Namespace, config: Path, out: Path) -> list[str]:
    """``dotformer train`` of one variant: the budget, threads and data of the benchmark."""
    command = ["train", "--config", str(config), "--out", str(out), "--overwrite", "--no-progress"]
    command += ["--task", args.job, "--threads", str(args.threads), "--eval-every", "0"]
    command += ["--max-minutes", str(args.minutes)] if args.minutes else []
    command += ["--max-steps", str(args.steps)] if args.steps else []
    command += ["--data", args.data] if args.data else []
    command += ["--limit", str(args.limit)] if args.limit else []
    return command


def evaluate_command(args: argparse.Namespace, out: Path) -> list[str]:
    """``dotformer evaluate`` of one variant's last checkpoint on the test split."""
    command = ["evaluate", "--checkpoint", str(out / "last"), "--split", "test", "--threads", str(args.threads)]
    command += ["--json", str(out / "test.json"), "--engine", "torch"]
    if args.job == "g2p":
        command += ["--strategy", "greedy", "--limit", str(args.test_words)]
    return command


def finished_commands(out: Path, args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The train and evaluate commands a finished 2017 run (``--baseline``) would have had in this invocation, once
    its budget is checked against this invocation's.

    Raises:
        SystemExit: the run has no test figures, or it trained another number of steps than ``--steps`` (a time
            budget cannot be checked: it is taken as given).
    """
    if not (out / "test.json").is_file() or not (out / "metrics.jsonl").is_file():
        sys.exit(f"--baseline {out}: not a finished run of this benchmark (no metrics.jsonl and test.json)")
    steps = run_figures(out)["steps"]
    if args.steps is not None and steps != args.steps:
        sys.exit(f"--baseline {out}: trained {steps} steps, this comparison {args.steps}")
    return train_command(args, out.parent / "configs" / "2017.toml", out), evaluate_command(args, out)


def run_figures(out: Path) -> dict[str, Any]:
    """Steps, target tokens per second and the last validation pass of a finished run (its metrics.jsonl)."""
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["split"] == "train"]
    valid = [r for r in records if r["split"] == "valid"]
    figures: dict[str, Any] = {
        "steps": train[-1]["step"],
        "train_s": train[-1]["elapsed_s"],
        "tokens_per_s": round(sum(r["tokens"] for r in train) / max(train[-1]["elapsed_s"], 1e-9), 1),
    }
    if valid:
        figures["valid_nats"] = round(valid[-1]["nll"], 4)
        if "bits_per_char" in valid[-1]:
            figures["valid_bits_per_char"] = round(valid[-1]["bits_per_char"], 4)
    return figures


def test_figures(out: Path, job: str) -> dict[str, Any]:
    """The held-out figures of ``dotformer evaluate``'s JSON."""
    result = json.loads((out / "test.json").read_text())
    if job == "lm":
        return {"test_bits_per_char": round(result["bits_per_character"], 4)}
    metrics = result["metrics"]
    return {
        "test_wer": round(metrics["wer"], 2),
        "test_per": round(metrics["per"], 2),
        "test_nats": round(metrics["nll_per_token"], 4),
    }


def base_sections(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The job's config file's tables, the budget left to the benchmark's flags."""
    sections = read_config_file(args.config or JOBS[args.job])
    train = {k: v for k, v in sections.train.items() if k not in ("max_minutes", "max_steps", "max_epochs")}
    return {"model": dict(sections.model), "train": train, "data": dict(sections.data)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", choices=sorted(JOBS), default="lm", help="lm (KJV characters) or g2p (CMUdict)")
    parser.add_argument("--config", default=None, help="the 2017 block's config (default: the job's shipped one)")
    parser.add_argument("--data", default=None, help="another corpus for the config (as dotformer train --data)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N lines or pairs of the corpus")
    parser.add_argument("--minutes", type=float, default=None, help="training minutes of each variant (default 10)")
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps of each variant (a fixed budget)")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads of every command (2)")
    parser.add_argument("--variants", default=None, help="comma-separated names (default: all; 2017 always runs)")
    parser.add_argument("--test-words", type=int, default=1000, help="g2p: test words decoded (a seeded sample)")
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        metavar="RUN",
        help="a finished run of the 2017 block at the same budget and threads (another invocation's WORK/2017): its "
        "figures are read, not trained again, so that variants can run in two processes beside one baseline",
    )
    parser.add_argument("--work-dir", type=Path, default=Path("runs/modern_ablation"), help="where the runs go")
    parser.add_argument("--out", type=Path, default=None, help="JSON (default benchmarks/results/modern_ablation_JOB)")
    args = parser.parse_args(argv)
    if args.minutes is None and args.steps is None:
        args.minutes = 10.0
    names = [v.name for v in VARIANTS]
    chosen = names if args.variants is None else ["2017", *args.variants.split(",")]
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        parser.error(f"unknown variant {unknown[0]!r}; choose from {', '.join(names)}")
    work = args.work_dir / args.job
    sections = base_sections(args)
    rows: list[dict[str, Any]] = []
    base: ModelConfig | None = None
    target = 0
    for variant in (v for v in VARIANTS if v.name in chosen):
        row: dict[str, Any] = {"variant": variant.name, "what": variant.what}
        model = dict(sections["model"])
        if base is not None:
            fields = changes(variant_fields(variant, base), base)
            if not fields:
                rows.append({**row, "what": f"{variant.what}: the 2017 config's own", "skipped": True})
                continue
            config = base.replace(**fields)
            model.update(fields, d_ff=matched_d_ff(config, target))
            row["fields"] = fields
        out = work / variant.name
        if base is None and args.baseline is not None:  # the 2017 block, trained by another invocation
            out = args.baseline
            train, evaluate = finished_commands(out, args)
        else:
            config_file = write_config(work / "configs" / f"{variant.name}.toml", {**sections, "model": model})
            train = train_command(args, config_file, out)
            evaluate = evaluate_command(args, out)
            row["train_s_wall"] = round(run(train, args.threads), 1)
            row["evaluate_s_wall"] = round(run(evaluate, args.threads), 1)
        record = json.loads((out / "run.json").read_text())
        trained = ModelConfig.from_dict(record["model"])
        if base is None:
            base, target = trained, expected_num_parameters(trained)
        row.update(parameters=expected_num_parameters(trained), d_ff=trained.d_ff)
        row.update(run_figures(out), **test_figures(out, args.job))
        row["commands"] = [shlex.join(["dotformer", *train]), shlex.join(["dotformer", *evaluate])]
        rows.append(row)
        print(format_table(rows[-1:], COLUMNS[args.job]), file=sys.stderr, flush=True)
    print(format_table(rows, COLUMNS[args.job]))
    payload = {
        "command": command_line(),
        "commit": git_commit(),
        "machine": machine_info("cpu"),
        "job": args.job,
        "budget": {"minutes": args.minutes, "steps": args.steps},
        "threads": args.threads,
        "rows": rows,
    }
    out_json = args.out or RESULTS / f"modern_ablation_{args.job}.json"
    write_json(out_json, payload)
    print(f"wrote {out_json}", file=sys.stderr)
    return payload


if __name__ == "__main__":
    main()
