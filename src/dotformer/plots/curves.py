"""Line plots of training: the learning-rate schedule (paper §5.3, Eq. 3) and the curves of one or more runs.

The schedule comes from :mod:`dotformer.training.schedule` (the functions the trainer calls); the curves from each
run's ``metrics.jsonl``, one JSON object per line with a "split" ("train" or "valid"), the "step" and the numbers
measured then (see :mod:`dotformer.training.logging`): loss, perplexity and learning rate against the step, and a
language model's bits per character of its validation text, several runs overlaid in one colour each.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from dotformer.errors import ConfigError, DataError, MissingDataError
from dotformer.plots.common import check_output_path, new_figure, save_figure


class ScheduleCurve(NamedTuple):
    """A learning-rate schedule sampled at every step.

    Attributes:
        label: legend text (the schedule and its parameters).
        steps: (N,) int64, 1 .. N.
        lrs: (N,) float64, the learning rate at each step.
        schedule: "noam" (the paper's Eq. 3), "inverse_sqrt" or "constant" (see :mod:`dotformer.training.schedule`).
    """

    label: str
    steps: np.ndarray
    lrs: np.ndarray
    schedule: str = "noam"

    @property
    def peak_step(self) -> int:
        """The step with the highest learning rate (the end of warmup)."""
        return int(self.steps[int(np.argmax(self.lrs))])


def noam_curve(d_model: int, warmup: int, scale: float = 1.0, steps: int | None = None) -> ScheduleCurve:
    """The paper's schedule lr = scale · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5) for steps 1..N.

    ``steps`` defaults to 10 × warmup. Values come from :func:`dotformer.training.schedule.noam_lr`.

    Raises:
        ConfigError: non-positive d_model, warmup or steps.
    """
    from dotformer.training.schedule import noam_lr

    steps = 10 * warmup if steps is None else steps
    if steps < 1:
        raise ConfigError(f"the schedule needs at least one step, got {steps}")
    xs = np.arange(1, steps + 1)
    lrs = np.array([noam_lr(int(s), d_model, warmup, scale) for s in xs])
    label = f"noam: d_model={d_model}, warmup={warmup}" + (f", scale={scale:g}" if scale != 1.0 else "")
    return ScheduleCurve(label, xs, lrs, "noam")


def config_curve(path: str | Path, steps: int | None = None, d_model: int | None = None) -> ScheduleCurve:
    """The schedule of a training config file (TOML with [model], [train], [data]), as the trainer computes it.

    The width is ``d_model`` if given, else ``[model] d_model``, else the d_model of ``[model] preset``, else of the
    preset ``dotformer train`` picks for ``[data] dataset`` (tiny for copy/reverse, small otherwise).
    ``steps`` defaults to ``[train] max_steps``, else 10 × warmup. A ``lr_cooldown`` is drawn over the final
    fraction of ``max_steps``; a budget in minutes or epochs has no step count before the run, so its cooldown is
    drawn as if the budget ended at the last step drawn (the label says so).

    Raises:
        ConfigError: not TOML, an unknown key, or an invalid [train] value. FileNotFoundError: no such file.
    """
    from dotformer.config import PRESETS
    from dotformer.data.read.types import NAMED_TASKS
    from dotformer.runs.config_files import read_config_file
    from dotformer.runs.pairs import TASK_PRESETS
    from dotformer.training.config import TrainConfig
    from dotformer.training.schedule import cooldown_factor, learning_rate

    sections = read_config_file(path)
    train = TrainConfig.from_dict(sections.train, source=f"{path} [train]")
    if d_model is None:
        dataset = str(sections.data.get("dataset", "copy"))
        preset = sections.model.get("preset") or TASK_PRESETS.get(NAMED_TASKS.get(dataset, "translation"), "small")
        d_model = int(sections.model.get("d_model", PRESETS.get(preset, PRESETS["small"])["d_model"]))
    steps = steps or train.max_steps or 10 * max(train.warmup_steps, 1)
    xs = np.arange(1, steps + 1)
    lrs = np.array([learning_rate(int(s), train, d_model) for s in xs])
    if train.lr_schedule == "noam":
        label = f"{Path(path).name}: noam, d_model={d_model}, warmup={train.warmup_steps}"
    else:  # the peak is given, d_model plays no part
        label = f"{Path(path).name}: {train.lr_schedule}, peak {train.lr_peak:g}, warmup={train.warmup_steps}"
    if train.lr_cooldown:  # the budget left before step s: (budget - s + 1) / budget
        budget = train.max_steps if train.max_steps is not None else steps
        left = (budget - xs + 1) / budget
        lrs = lrs * np.array([cooldown_factor(float(f), train.lr_cooldown) for f in left])
        label += f", cooldown {train.lr_cooldown:g}"
        if train.max_steps is None:  # a budget of minutes or epochs: its steps are not known before the run
            label += f" (drawn as if the budget ended at step {steps:,})"
    return ScheduleCurve(label, xs, lrs, train.lr_schedule)


class SchedulePlot(NamedTuple):
    """Result of :func:`plot_schedule`: the written file and the curves drawn."""

    path: Path
    curves: list[ScheduleCurve]


# What each schedule is, for the legend (only noam is the paper's Eq. 3).
SCHEDULE_FORMULAS = {
    "noam": "d_model^-0.5 · min(step^-0.5, step · warmup^-1.5), paper Eq. 3",
    "inverse_sqrt": "linear warmup to the peak, then peak · √(warmup / step)",
    "constant": "linear warmup to the peak, then constant",
}


def schedule_title(curves: Sequence[ScheduleCurve]) -> str:
    """The figure title: the paper's Eq. 3 is named only when every curve is the noam schedule."""
    kinds = {curve.schedule for curve in curves}
    if kinds == {"noam"}:
        return "learning-rate schedule: linear warmup, then ∝ 1/√step (paper Eq. 3)"
    return "learning-rate schedule" + (f" ({', '.join(sorted(kinds))})" if kinds else "")


def plot_schedule(curves: Sequence[ScheduleCurve], path: str | Path) -> SchedulePlot:
    """Draw learning rate against step for each curve, marking each peak (the end of warmup).

    Each legend entry names its schedule and formula; each peak's note sits beside its dot, offset so that it
    covers neither the dot nor the curve's top.

    Raises:
        ConfigError: no curves, or a bad file extension (.png, .svg or .pdf).
    """
    path = check_output_path(path)
    if not curves:
        raise ConfigError("plot_schedule needs at least one curve")
    fig = new_figure(7.5, 4.2)
    ax = fig.subplots()
    highest = max(float(curve.lrs.max()) for curve in curves)
    for curve in curves:
        formula = SCHEDULE_FORMULAS.get(curve.schedule, curve.schedule)
        (line,) = ax.plot(curve.steps, curve.lrs, label=f"{curve.label}\n  ({formula})")
        peak = curve.peak_step
        top = float(curve.lrs[peak - curve.steps[0]])
        ax.plot([peak], [top], "o", color=line.get_color(), markersize=5)
        ax.annotate(
            f"peak {top:.2e} at step {peak}",
            (peak, top),
            xytext=(9, 4),  # points: right of and above the dot, so that the text never covers it
            textcoords="offset points",
            ha="left",
            va="bottom",
            fontsize=7,
            color=line.get_color(),
        )
    ax.set_ylim(0, highest * 1.2)  # room above the highest peak for its note
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("learning rate")
    ax.set_title(schedule_title(curves), fontsize=9)
    ax.legend(fontsize=7, loc="upper right")
    return SchedulePlot(save_figure(fig, path), list(curves))


# Field names the loss may have in a metrics line, in order of preference.
LOSS_FIELDS = ("loss", "train_loss", "valid_loss", "val_loss", "nll")
VALID_SPLITS = ("valid", "validation", "val", "dev", "eval")


class LossCurves(NamedTuple):
    """The curves of one run, read from its metrics.jsonl.

    Attributes:
        source: the metrics file.
        field: the loss field used (e.g. "loss": label-smoothed cross-entropy per target token, in nats).
        train_steps, train_loss: (N,) steps and losses of the "train" lines.
        valid_steps, valid_loss: (M,) steps and losses of the "valid" lines (empty when none were logged).
        valid_nll: (M,) the validation NLL per token where logged (NaN elsewhere), or an empty array.
        train_lr: (N,) the learning rate of each train line (NaN where not logged).
        train_ppl, valid_ppl: (N,), (M,) perplexity per target token: the logged "ppl" (or "perplexity"), else
            exp(nll) where an NLL was logged, else NaN.
        label: the run's name in legends (its directory name).
        valid_bpc: (M,) a language model's bits per character of the validation text ("bits_per_char"; NaN where
            not logged: a translation run).
    """

    source: Path
    field: str
    train_steps: np.ndarray
    train_loss: np.ndarray
    valid_steps: np.ndarray
    valid_loss: np.ndarray
    valid_nll: np.ndarray
    train_lr: np.ndarray
    train_ppl: np.ndarray
    valid_ppl: np.ndarray
    label: str
    valid_bpc: np.ndarray


def metrics_file(run: str | Path) -> Path:
    """``run/metrics.jsonl``, or ``run`` itself when it is the file.

    Raises:
        MissingDataError: neither exists.
    """
    run = Path(run)
    path = run if run.is_file() else run / "metrics.jsonl"
    if not path.is_file():
        raise MissingDataError(f"{path}: no metrics.jsonl (train a run with `dotformer train --out DIR` first)")
    return path


def record_split(record: dict[str, Any]) -> str:
    """ "train" or "valid" for one metrics line, read from "split" (or "kind"/"phase"/"mode"), or from its keys."""
    for key in ("split", "kind", "phase", "mode"):
        value = record.get(key)
        if isinstance(value, str):
            return "valid" if value.lower() in VALID_SPLITS else value.lower()
    if any(k in record for k in ("valid_loss", "val_loss")):
        return "valid"
    return "train"


def record_loss(record: dict[str, Any], fields: Sequence[str] = LOSS_FIELDS) -> tuple[str, float] | None:
    """The first finite number among ``fields`` in the record, with its name; None if there is none."""
    for name in fields:
        value = record.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return name, float(value)
    return None


def record_number(record: dict[str, Any], *fields: str) -> float:
    """The first finite number among ``fields`` in the record; NaN if there is none."""
    found = record_loss(record, fields)
    return math.nan if found is None else found[1]


def record_perplexity(record: dict[str, Any]) -> float:
    """The logged perplexity ("ppl" or "perplexity"), else exp(nll) (capped at exp(700)), else NaN."""
    ppl = record_number(record, "ppl", "perplexity")
    if math.isnan(ppl):
        nll = record_number(record, "nll")
        ppl = math.exp(min(nll, 700.0)) if not math.isnan(nll) else math.nan
    return ppl


def read_loss_curves(run: str | Path, label: str | None = None) -> LossCurves:
    """Read the loss, perplexity and learning-rate curves of a run directory (or of a metrics.jsonl file).

    Lines without a step or a loss (e.g. a final summary) are skipped; a line that is not JSON is an error.

    Args:
        run: the run directory or its metrics.jsonl.
        label: the run's name in legends (default: the run directory's name).

    Raises:
        MissingDataError: no metrics file. DataError: a line is not a JSON object (FILE:LINE), or no line has a loss.
    """
    path = metrics_file(run)
    # per split: (step, loss, nll, lr, ppl, bits per char)
    points: dict[str, list[tuple[int, float, float, float, float, float]]] = {"train": [], "valid": []}
    fields_used: list[str] = []
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{number}: not a JSON line ({exc.msg})") from None
            if not isinstance(record, dict):
                raise DataError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
            split, step, loss = record_split(record), record.get("step"), record_loss(record)
            if split not in points or not isinstance(step, int) or loss is None:
                continue
            nll, lr = record_number(record, "nll"), record_number(record, "lr", "learning_rate")
            bpc = record_number(record, "bits_per_char")
            points[split].append((step, loss[1], nll, lr, record_perplexity(record), bpc))
            fields_used.append(loss[0])
    if not fields_used:
        raise DataError(f"{path}: no line has a step and a loss (fields looked for: {', '.join(LOSS_FIELDS)})")

    def column(split: str, index: int) -> np.ndarray:
        return np.array([p[index] for p in points[split]], dtype=np.int64 if index == 0 else np.float64)

    return LossCurves(
        source=path,
        field=max(set(fields_used), key=fields_used.count),
        train_steps=column("train", 0),
        train_loss=column("train", 1),
        valid_steps=column("valid", 0),
        valid_loss=column("valid", 1),
        valid_nll=column("valid", 2),
        train_lr=column("train", 3),
        train_ppl=column("train", 4),
        valid_ppl=column("valid", 4),
        label=label if label is not None else (path.parent.name if path.name == "metrics.jsonl" else path.stem),
        valid_bpc=column("valid", 5),
    )


class CurvesPlot(NamedTuple):
    """Result of :func:`plot_loss_curves`: the written file and the curves of each run drawn, in order."""

    path: Path
    runs: list[LossCurves]

    @property
    def curves(self) -> LossCurves:
        """The first run's curves (the only one when a single run was drawn)."""
        return self.runs[0]


def run_labels(runs: Sequence[str | Path]) -> list[str]:
    """Legend names of runs: each directory's name, or its whole path where two runs share a name."""
    paths = [Path(r) for r in runs]
    names = [p.parent.name if p.is_file() else p.name for p in paths]
    return [str(p) if names.count(n) > 1 else n for p, n in zip(paths, names, strict=True)]


def _finite(steps: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    keep = np.isfinite(values)
    return steps[keep], values[keep]


def plot_loss_curves(runs: str | Path | Sequence[str | Path], path: str | Path) -> CurvesPlot:
    """Draw the loss, perplexity and learning rate of one or more runs against the optimizer step, overlaid.

    Three panels: loss per target token (train solid, validation dashed with markers), perplexity (log scale;
    validation, and train faint) and learning rate; a fourth, bits per character of the validation text, when a
    run is a language model that logged them. Each run has one colour; a quantity a run did not log is left out.

    Args:
        runs: a run directory (or its metrics.jsonl), or several.
        path: the .png, .svg or .pdf file to write.

    Raises:
        MissingDataError, DataError: see :func:`read_loss_curves`. ConfigError: no run, or a bad file extension.
    """
    path = check_output_path(path)
    run_list = [runs] if isinstance(runs, (str, Path)) else list(runs)
    if not run_list:
        raise ConfigError("plot curves needs at least one run (--run DIR)")
    all_curves = [read_loss_curves(r, label) for r, label in zip(run_list, run_labels(run_list), strict=True)]
    language = any(np.isfinite(curves.valid_bpc).any() for curves in all_curves)
    fig = new_figure(18.5 if language else 14, 4)
    axes = fig.subplots(1, 4 if language else 3)
    ax_loss, ax_ppl, ax_lr = axes[:3]
    colours = [f"C{i % 10}" for i in range(len(all_curves))]
    for curves, colour in zip(all_curves, colours, strict=True):
        name = curves.label
        if curves.train_steps.size:
            ax_loss.plot(curves.train_steps, curves.train_loss, color=colour, alpha=0.8, label=f"{name} train")
        if curves.valid_steps.size:
            ax_loss.plot(curves.valid_steps, curves.valid_loss, "o--", color=colour, label=f"{name} valid")
        steps, ppl = _finite(curves.train_steps, curves.train_ppl)
        if ppl.size:
            ax_ppl.plot(steps, ppl, color=colour, alpha=0.35, label=f"{name} train")
        steps, ppl = _finite(curves.valid_steps, curves.valid_ppl)
        if ppl.size:
            ax_ppl.plot(steps, ppl, "o--", color=colour, label=f"{name} valid")
        steps, lr = _finite(curves.train_steps, curves.train_lr)
        if lr.size:
            ax_lr.plot(steps, lr, color=colour, label=name)
        steps, bpc = _finite(curves.valid_steps, curves.valid_bpc)
        if language and bpc.size:
            axes[3].plot(steps, bpc, "o--", color=colour, label=f"{name} valid")
    field = all_curves[0].field
    panels = [
        (ax_loss, f"{field} per target token (nats)", "loss"),
        (ax_ppl, "perplexity (exp of NLL per token)", "perplexity"),
        (ax_lr, "learning rate", "learning rate"),
    ]
    if language:
        panels.append((axes[3], "bits per character (NLL / ln 2 per character)", "bits per character (validation)"))
    for ax, ylabel, title in panels:
        ax.set_xlabel("optimizer step")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=9)
        if ax.lines:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
    if ax_ppl.lines:
        ax_ppl.set_yscale("log")
    names = ", ".join(c.label for c in all_curves)
    fig.suptitle(f"training curves of {names}", fontsize=10)
    return CurvesPlot(save_figure(fig, path), all_curves)
