"""The paper's Table 1 with the measured figures beside its O(·) entries, and the text report (Markdown tables)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dotformer.compare.gradients import GradientProfile

if TYPE_CHECKING:
    from dotformer.compare.report import CompareReport

NOISY_REPEATS = 3  # below this many timed calls per point, time exponents are noise on a busy machine

PAPER_TABLE1 = {  # Vaswani et al. 2017, Table 1 (n: sequence length, d: representation dimension)
    "recurrent": ("O(n·d²)", "O(n)", "O(n)"),
    "attention": ("O(n²·d)", "O(1)", "O(1)"),
}


def table1_rows(report: CompareReport) -> list[dict[str, str]]:
    """One row per layer: the paper's O(·) entries with the measured figures beside them."""
    rows = []
    for layer in report.layers:
        family = "attention" if layer.kind.startswith("attention") else "recurrent"
        complexity, sequential, path = PAPER_TABLE1[family]
        counted = [p for p in layer.points if p.flops is not None]
        timed = [p for p in layer.points if p.min_ms is not None]
        measured_complexity = []
        if counted:
            p = counted[-1]
            measured_complexity.append(f"{p.flops:.2e} FLOPs at n={p.n} (formula {p.analytic_flops:.2e})")
        exponent = layer.time_exponent()
        if exponent is not None and timed:
            measured_complexity.append(f"time ∝ n^{exponent:.2f} up to n={timed[-1].n}")
        steps = [p for p in layer.points if p.sequential_steps is not None]
        measured_steps = ", ".join(f"n={p.n}: {p.sequential_steps}" for p in (steps[0], steps[-1])) if steps else "-"
        measured_path = "-"
        if layer.gradients is not None:
            g = layer.gradients
            n = len(g.distances)
            measured_path = f"‖∂y_n/∂x_1‖/‖∂y_n/∂x_n‖ at n={n}: {GradientProfile.ratio(g.random_init):.1e} (random)"
            if g.trained is not None:
                measured_path += f", {GradientProfile.ratio(g.trained):.1e} (trained)"
        rows.append(
            {
                "Layer type": layer.name,
                "Complexity per layer": f"{complexity}: " + ("; ".join(measured_complexity) or "-"),
                "Sequential operations": f"{sequential}: {measured_steps}",
                "Maximum path length": f"{path}: {measured_path}",
            }
        )
    return rows


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """A GitHub Markdown table of ``rows``."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(str(row.get(c, "-")) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def format_bytes(n: float | None) -> str:
    """Bytes as a short string (KiB / MiB / GiB), "-" for None."""
    if n is None:
        return "-"
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n / 1024:.1f} KiB"


def format_report(report: CompareReport) -> str:
    """The Table 1 with measurements, then one table of per-length measurements."""
    c = report.config
    lines = [
        f"Recurrence vs self-attention, width D = {c.d_model}, H = {c.num_heads}, batch {c.batch_size}, "
        f"device {c.device}, {report.seconds:.0f} s",
        "",
        "Table 1 of the paper with measured figures (n: sequence length, d: width)",
        markdown_table(
            table1_rows(report),
            ["Layer type", "Complexity per layer", "Sequential operations", "Maximum path length"],
        ),
        "",
        f"Per length (time: forward + backward, best and median of up to {c.repeats} calls after a warm-up, "
        f"{report.threads} torch thread(s); memory kept for backward: {report.memory_method})",
    ]
    rows = []
    for layer in report.layers:
        for p in layer.points:
            rows.append(
                {
                    "layer": layer.name,
                    "n": p.n,
                    "time (ms, best)": f"{p.min_ms:.2f}" if p.min_ms is not None else p.skipped or "-",
                    "time (ms, median)": f"{p.time_ms:.2f}" if p.time_ms is not None else "-",
                    "saved (measured)": format_bytes(p.saved_bytes),
                    "saved (analytic)": format_bytes(p.analytic_saved_bytes),
                    "FLOPs (counted)": f"{p.flops:.2e}" if p.flops is not None else "-",
                    "FLOPs (formula)": f"{p.analytic_flops:.2e}",
                    "sequential steps": p.sequential_steps if p.sequential_steps is not None else "-",
                }
            )
    columns = list(rows[0]) if rows else []
    lines.append(markdown_table(rows, columns))
    trained = [layer for layer in report.layers if layer.gradients and layer.gradients.training]
    if trained:
        lines += [
            "",
            f"Brief training on recall-the-first-token (n = {c.gradient_length}, {c.train_steps} Adam steps):",
        ]
        for layer in trained:
            t = layer.gradients.training  # type: ignore[union-attr]
            lines.append(f"    {layer.name}: final loss {t.final_loss:.3f} nats, accuracy {t.accuracy:.1%}")
    note = timing_note(report)
    if note:
        lines += ["", note]
    return "\n".join(lines)


def timing_note(report: CompareReport) -> str:
    """A warning when the timings rest on too few calls to read a trend from (empty otherwise)."""
    repeats = report.config.repeats
    if repeats >= NOISY_REPEATS:
        return ""
    return (
        f"Note: --repeats {repeats} times each point {'once' if repeats == 1 else f'{repeats} times'}: on a busy "
        f"machine the 'time ∝ n^k' exponents are noise, not a trend; use --repeats {NOISY_REPEATS} or more "
        "(the default) to read one"
    )
