"""Line plots of training: the learning-rate schedule (paper §5.3, Eq. 3) and the loss curves of a run.

The schedule comes from :mod:`dotformer.training.schedule` (the functions the trainer calls); the losses from the
run's ``metrics.jsonl``, one JSON object per line with a "split" ("train" or "valid"), the "step" and the numbers
measured then (see :mod:`dotformer.training.logging`).
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
    """

    label: str
    steps: np.ndarray
    lrs: np.ndarray

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
    return ScheduleCurve(label, xs, lrs)


def config_curve(path: str | Path, steps: int | None = None, d_model: int | None = None) -> ScheduleCurve:
    """The schedule of a training config file (TOML with [model], [train], [data]), as the trainer computes it.

    The width is ``d_model`` if given, else ``[model] d_model``, else the d_model of ``[model] preset``, else of the
    preset ``dotformer train`` picks for ``[data] dataset`` (tiny for copy/reverse, small otherwise).
    ``steps`` defaults to ``[train] max_steps``, else 10 × warmup.

    Raises:
        ConfigError: not TOML, an unknown key, or an invalid [train] value. FileNotFoundError: no such file.
    """
    from dotformer.config import PRESETS
    from dotformer.training.config import TrainConfig
    from dotformer.training.run import NAMED_TASKS, TASK_PRESETS, read_config_file
    from dotformer.training.schedule import learning_rate

    sections = read_config_file(path)
    train = TrainConfig.from_dict(sections.train, source=f"{path} [train]")
    if d_model is None:
        dataset = str(sections.data.get("dataset", "copy"))
        preset = sections.model.get("preset") or TASK_PRESETS.get(NAMED_TASKS.get(dataset, "translation"), "small")
        d_model = int(sections.model.get("d_model", PRESETS.get(preset, PRESETS["small"])["d_model"]))
    steps = steps or train.max_steps or 10 * max(train.warmup_steps, 1)
    xs = np.arange(1, steps + 1)
    lrs = np.array([learning_rate(int(s), train, d_model) for s in xs])
    label = f"{Path(path).name}: {train.lr_schedule}, d_model={d_model}, warmup={train.warmup_steps}"
    return ScheduleCurve(label, xs, lrs)


class SchedulePlot(NamedTuple):
    """Result of :func:`plot_schedule`: the written file and the curves drawn."""

    path: Path
    curves: list[ScheduleCurve]


def plot_schedule(curves: Sequence[ScheduleCurve], path: str | Path) -> SchedulePlot:
    """Draw learning rate against step for each curve, marking each peak (the end of warmup).

    Raises:
        ConfigError: no curves, or a bad file extension.
    """
    path = check_output_path(path)
    if not curves:
        raise ConfigError("plot_schedule needs at least one curve")
    fig = new_figure(7, 4)
    ax = fig.subplots()
    for curve in curves:
        (line,) = ax.plot(curve.steps, curve.lrs, label=curve.label)
        peak = curve.peak_step
        ax.plot([peak], [curve.lrs[peak - curve.steps[0]]], "o", color=line.get_color())
        ax.annotate(f"peak {curve.lrs.max():.2e} at step {peak}", (peak, curve.lrs.max()), fontsize=7)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("learning rate")
    ax.set_title("learning-rate schedule: linear warmup, then ∝ 1/√step (paper Eq. 3)", fontsize=9)
    ax.legend(fontsize=8)
    return SchedulePlot(save_figure(fig, path), list(curves))


# Field names the loss may have in a metrics line, in order of preference.
LOSS_FIELDS = ("loss", "train_loss", "valid_loss", "val_loss", "nll")
VALID_SPLITS = ("valid", "validation", "val", "dev", "eval")


class LossCurves(NamedTuple):
    """Losses read from a run's metrics.jsonl.

    Attributes:
        source: the metrics file.
        field: the loss field used (e.g. "loss": label-smoothed cross-entropy per target token, in nats).
        train_steps, train_loss: (N,) steps and losses of the "train" lines.
        valid_steps, valid_loss: (M,) steps and losses of the "valid" lines (empty when none were logged).
        valid_nll: (M,) the validation NLL per token where logged (NaN elsewhere), or an empty array.
    """

    source: Path
    field: str
    train_steps: np.ndarray
    train_loss: np.ndarray
    valid_steps: np.ndarray
    valid_loss: np.ndarray
    valid_nll: np.ndarray


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


def read_loss_curves(run: str | Path) -> LossCurves:
    """Read the train and validation losses of a run directory (or of a metrics.jsonl file).

    Lines without a step or a loss (e.g. a final summary) are skipped; a line that is not JSON is an error.

    Raises:
        MissingDataError: no metrics file. DataError: a line is not a JSON object (FILE:LINE), or no line has a loss.
    """
    path = metrics_file(run)
    points: dict[str, list[tuple[int, float, float]]] = {"train": [], "valid": []}
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
            nll = record.get("nll")
            nll = float(nll) if isinstance(nll, (int, float)) and not isinstance(nll, bool) else math.nan
            points[split].append((step, loss[1], nll))
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
    )


class CurvesPlot(NamedTuple):
    """Result of :func:`plot_loss_curves`: the written file and the curves drawn."""

    path: Path
    curves: LossCurves


def plot_loss_curves(run: str | Path, path: str | Path) -> CurvesPlot:
    """Draw the training and validation loss of a run against the optimizer step.

    Raises:
        MissingDataError, DataError: see :func:`read_loss_curves`. ConfigError: bad file extension.
    """
    path = check_output_path(path)
    curves = read_loss_curves(run)
    fig = new_figure(7, 4)
    ax = fig.subplots()
    if curves.train_steps.size:
        ax.plot(curves.train_steps, curves.train_loss, label=f"train {curves.field}", alpha=0.8)
    if curves.valid_steps.size:
        ax.plot(curves.valid_steps, curves.valid_loss, "o-", label=f"valid {curves.field}")
        if np.isfinite(curves.valid_nll).any():
            ax.plot(curves.valid_steps, curves.valid_nll, "s--", label="valid nll", alpha=0.8)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss per target token (nats)")
    ax.set_title(f"loss curves of {curves.source.parent.name}", fontsize=9)
    ax.legend(fontsize=8)
    return CurvesPlot(save_figure(fig, path), curves)
