"""Figures of :func:`dotformer.compare.compare`: time, memory, sequential steps, FLOPs and gradient against distance
(:func:`plot_report`), and the two gradient panels alone (:func:`plot_gradients`).

matplotlib is imported inside the functions, so importing this module stays cheap and changes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from dotformer.compare.report import CompareReport


def tidy_log_axis(ax: Any, which: str) -> None:
    """Log-axis ticks that never overlap: minor ticks unlabelled; when the axis spans under ~1.5 decades (so that
    matplotlib would label the minor ticks "2×10¹3×10¹..."), major ticks at 1, 2 and 5 × 10^k in plain numbers."""
    from matplotlib.ticker import FuncFormatter, LogFormatterSciNotation, LogLocator, NullFormatter

    axis = ax.yaxis if which == "y" else ax.xaxis
    low, high = ax.get_ylim() if which == "y" else ax.get_xlim()
    if low <= 0 or high <= 0:
        return
    if math.log10(high / low) < 1.5:
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    else:
        axis.set_major_locator(LogLocator(base=10, numticks=8))
        axis.set_major_formatter(LogFormatterSciNotation())
    axis.set_minor_formatter(NullFormatter())


class Series(NamedTuple):
    """One line of a panel: legend label, x and y values."""

    label: str
    xs: list[float]
    ys: list[float]


def draw_series(ax: Any, series: Sequence[Series], colours: dict[str, str]) -> list[str]:
    """Draw each series; a series equal to one drawn before it is dashed, with a larger hollow marker around the
    earlier one's, so that both stay visible. Returns notes such as "GRU = LSTM" (empty when none coincide)."""
    drawn: list[Series] = []
    notes = []
    for line in series:
        same = [
            other
            for other in drawn
            if other.xs == line.xs
            and len(line.ys) == len(other.ys)
            and all(math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0) for a, b in zip(line.ys, other.ys, strict=True))
        ]
        colour = colours.get(line.label)
        if same and line.xs:
            ax.plot(
                line.xs,
                line.ys,
                linestyle=(0, (4, 3)),
                marker="o",
                markersize=6 + 4 * len(same),
                markerfacecolor="none",
                markeredgewidth=1.4,
                color=colour,
                label=line.label,
                zorder=3,
            )
            notes.append(f"{short_name(line.label)} = {short_name(same[0].label)}")
        else:
            ax.plot(line.xs, line.ys, "o-", color=colour, label=line.label, zorder=2)
        drawn.append(line)
    return notes


def short_name(name: str) -> str:
    """ "Recurrent (LSTM)" -> "LSTM", "Self-attention (fused SDPA)" -> "fused", "Self-attention" -> "attention"."""
    if name.startswith("Recurrent ("):
        return name[len("Recurrent (") : -1]
    return "fused" if "fused" in name else "attention" if name.startswith("Self-attention") else name


def coinciding_note(notes: Sequence[str]) -> str:
    """A second title line naming the lines that lie on top of each other ("" when none do)."""
    return "\nequal (dashed, ringed): " + ", ".join(notes) if notes else ""


def plot_report(report: CompareReport, path: Any) -> Any:
    """Draw time, memory, sequential steps and gradient-vs-distance (random and trained) in one figure.

    Lines with equal values are drawn dashed with hollow markers and named in a note; the memory panel draws the
    analytic counts as dotted lines with square markers above the measured ones; log axes label no minor ticks.

    Returns the written path. Raises ConfigError for an extension other than .png / .svg / .pdf.
    """
    from matplotlib.lines import Line2D

    from dotformer.compare.table import NOISY_REPEATS
    from dotformer.plots.common import check_output_path, new_figure, save_figure

    path = check_output_path(path)
    fig = new_figure(13, 9)
    (ax_time, ax_mem, ax_steps), (ax_rand, ax_train, ax_flops) = fig.subplots(2, 3)
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]
    colours = {layer.name: palette[i % len(palette)] for i, layer in enumerate(report.layers)}
    panels: dict[str, list[Series]] = {"time": [], "memory": [], "steps": [], "flops": []}
    for layer in report.layers:
        timed = [p for p in layer.points if p.min_ms is not None]
        panels["time"].append(Series(layer.name, [p.n for p in timed], [p.min_ms for p in timed]))
        saved = [p for p in layer.points if p.saved_bytes is not None]
        panels["memory"].append(Series(layer.name, [p.n for p in saved], [p.saved_bytes / 2**20 for p in saved]))
        counted = [p for p in layer.points if p.sequential_steps is not None]
        panels["steps"].append(Series(layer.name, [p.n for p in counted], [p.sequential_steps for p in counted]))
        flops = [p for p in layer.points if p.flops is not None]
        if flops:
            panels["flops"].append(Series(layer.name, [p.n for p in flops], [p.flops for p in flops]))
        if layer.gradients is not None:
            g = layer.gradients
            ax_rand.plot(
                g.distances, [max(v, 1e-30) for v in g.random_init], label=layer.name, color=colours[layer.name]
            )
            if g.trained is not None:
                ax_train.plot(
                    g.distances, [max(v, 1e-30) for v in g.trained], label=layer.name, color=colours[layer.name]
                )
    notes = {
        key: coinciding_note(draw_series(ax, panels[key], colours))
        for ax, key in ((ax_time, "time"), (ax_mem, "memory"), (ax_steps, "steps"), (ax_flops, "flops"))
    }
    for layer in report.layers:  # analytic memory above the measured lines, so that it can be seen
        ns = [p.n for p in layer.points]
        ax_mem.plot(
            ns,
            [p.analytic_saved_bytes / 2**20 for p in layer.points],
            linestyle=":",
            linewidth=2.2,
            marker="s",
            markersize=8,
            markerfacecolor="none",
            color=colours[layer.name],
            alpha=0.9,
            zorder=4,
        )
    repeats = report.config.repeats
    time_title = "time of forward + backward (best call)" + (
        f"\n{repeats} call(s) per point: noisy, read no trend" if repeats < NOISY_REPEATS else ""
    )
    for ax, title, ylabel in (
        (ax_time, time_title + notes["time"], "milliseconds"),
        (ax_mem, "memory kept for backward (dotted, squares: analytic)" + notes["memory"], "MiB"),
        (ax_steps, "sequential steps (dependent weight applications)" + notes["steps"], "steps"),
        (ax_flops, "forward FLOPs (counted)" + notes["flops"], "FLOPs"),
    ):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.margins(y=0.08)  # a line at the lowest value (attention's 1 step) stays off the frame
        ax.set_xlabel("sequence length n")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=9)
        handles, labels = ax.get_legend_handles_labels()
        if ax is ax_mem:
            handles.append(Line2D([], [], linestyle=":", marker="s", markerfacecolor="none", color="#555"))
            labels.append("analytic count")
        ax.legend(handles, labels, fontsize=7, loc="upper left")
        tidy_log_axis(ax, "x")
        tidy_log_axis(ax, "y")
    n = report.config.gradient_length
    for ax, title in ((ax_rand, "random initialisation"), (ax_train, "after brief training (recall first token)")):
        ax.set_yscale("log")
        ax.set_xlabel(f"distance n - j (n = {n})")
        ax.set_ylabel("‖∂y_n / ∂x_j‖")
        ax.set_title(f"gradient vs distance, {title}", fontsize=9)
        ax.legend(fontsize=7)
        tidy_log_axis(ax, "y")
    return save_figure(fig, path)


def plot_gradients(report: CompareReport, path: Any) -> Any:
    """A two-panel figure of gradient norm against distance (random and trained), for the README."""
    from dotformer.plots.common import check_output_path, new_figure, save_figure

    path = check_output_path(path)
    fig = new_figure(10, 3.8)
    axes = fig.subplots(1, 2, sharey=True)
    for layer in report.layers:
        if layer.gradients is None:
            continue
        g = layer.gradients
        axes[0].plot(g.distances, [max(v, 1e-30) for v in g.random_init], label=layer.name)
        if g.trained is not None:
            axes[1].plot(g.distances, [max(v, 1e-30) for v in g.trained], label=layer.name)
    n = report.config.gradient_length
    for ax, title in zip(axes, ("random initialisation", "after brief training"), strict=True):
        ax.set_yscale("log")
        ax.set_xlabel(f"distance from the last position (n = {n})")
        ax.set_title(f"‖∂y_n / ∂x_j‖, {title}", fontsize=9)
        ax.legend(fontsize=7)
        tidy_log_axis(ax, "y")
    axes[0].set_ylabel("gradient norm")
    fig.suptitle("Maximum path length: the RNN's gradient decays with distance, attention's does not", fontsize=10)
    return save_figure(fig, path)
