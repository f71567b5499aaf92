"""The text report of :func:`~dotformer.compare.report.compare`: Table 1 and the measurements as Markdown tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dotformer.compare.report import CompareReport, table1_rows

NOISY_REPEATS = 3  # below this many timed calls per point, time exponents are noise on a busy machine


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
