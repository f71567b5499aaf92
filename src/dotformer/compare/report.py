"""The whole comparison: :func:`compare` measures every layer at every length and returns a :class:`CompareReport`
(one :class:`LayerReport` of :class:`LengthPoint` per layer), which serialises to the benchmark's JSON."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

import torch

from dotformer.compare.config import LAYER_NAMES, CompareConfig
from dotformer.compare.gradients import GradientProfile, measure_gradients
from dotformer.compare.instrumentation import Timed, count_operations, time_and_memory
from dotformer.compare.layers import SequenceLayer, analytic_flops, analytic_saved_bytes
from dotformer.errors import ConfigError


class LengthPoint(NamedTuple):
    """Measurements of one layer at one sequence length.

    Attributes:
        n: sequence length.
        time_ms: median wall-clock milliseconds of forward + backward (None when skipped).
        min_ms: the fastest of the timed calls (less disturbed by other processes; None when skipped).
        saved_bytes: bytes autograd kept for backward (measured), None when skipped.
        cuda_peak_bytes: CUDA allocator peak above the start (None on CPU).
        analytic_saved_bytes: :func:`analytic_saved_bytes`.
        flops: counted forward FLOPs (None when not counted). analytic_flops: :func:`analytic_flops`.
        chain: longest chain of dependent weight applications (None when not counted).
        sequential_steps: chain(n) - chain(1) + 1 (None when not counted).
        skipped: why this length was not timed ("" when it was).
    """

    n: int
    time_ms: float | None
    min_ms: float | None
    saved_bytes: int | None
    cuda_peak_bytes: int | None
    analytic_saved_bytes: int
    flops: int | None
    analytic_flops: int
    chain: int | None
    sequential_steps: int | None
    skipped: str


@dataclass
class LayerReport:
    """Everything measured for one layer kind."""

    kind: str  # "lstm", "gru", "attention", "attention-fused"
    name: str  # the row name, e.g. "Recurrent (LSTM)"
    points: list[LengthPoint] = field(default_factory=list)  # one per sequence length
    gradients: GradientProfile | None = None  # None for attention-fused (the same function as "attention")

    def time_exponent(self) -> float | None:
        """k in time ∝ n^k, fitted (least squares in log-log) to the fastest calls at the three longest lengths."""
        timed = [(p.n, p.min_ms) for p in self.points if p.min_ms]
        timed = timed[-3:]
        if len(timed) < 2:
            return None
        xs = [math.log(n) for n, _ in timed]
        ys = [math.log(t) for _, t in timed]
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        denom = sum((x - mx) ** 2 for x in xs)
        return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / denom if denom else None


@dataclass
class CompareReport:
    """Result of :func:`compare`: the config, the per-layer measurements and the seconds it took."""

    config: CompareConfig
    layers: list[LayerReport]
    seconds: float
    memory_method: str
    threads: int  # torch intra-op threads used for the timings

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (the benchmark's JSON file)."""
        layers = []
        for layer in self.layers:
            gradients = None
            if layer.gradients is not None:
                g = layer.gradients
                gradients = {
                    "distances": g.distances,
                    "random_init": g.random_init,
                    "trained": g.trained,
                    "training": g.training._asdict() if g.training else None,
                }
            layers.append(
                {
                    "kind": layer.kind,
                    "name": layer.name,
                    "time_exponent": layer.time_exponent(),
                    "points": [p._asdict() for p in layer.points],
                    "gradients": gradients,
                }
            )
        return {
            "config": asdict(self.config),
            "memory_method": self.memory_method,
            "threads": self.threads,
            "seconds": self.seconds,
            "layers": layers,
            "table1": table1_rows(self),
        }


def compare(config: CompareConfig, progress: Callable[[str], None] | None = None) -> CompareReport:
    """Measure every layer of ``config.layers`` at every length (see the module docstring).

    Args:
        config: what to measure.
        progress: called with a short line after each measurement (e.g. ``print``), or None.

    Raises:
        ConfigError: an unusable device.
    """
    try:
        device = torch.device(config.device)
    except RuntimeError as exc:
        raise ConfigError(f"--device {config.device!r}: {exc}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is available")
    say = progress or (lambda line: None)
    started = time.perf_counter()
    reports = []
    for kind in config.layers:
        torch.manual_seed(config.seed)
        layer = SequenceLayer(kind, config.d_model, config.num_heads).to(device)
        report = LayerReport(kind, LAYER_NAMES[kind])
        base_chain = count_operations(layer, 1, config.d_model, device).chain
        too_slow = ""
        for n in config.lengths:
            counts = count_operations(layer, n, config.d_model, device) if n <= config.count_max_length else None
            timed: Timed | None = None
            if not too_slow:
                timed = time_and_memory(layer, n, config, device)
                if timed.slowest_s > config.max_call_seconds:
                    too_slow = f"skipped: a call at n={n} took {timed.slowest_s:.1f} s > {config.max_call_seconds} s"
            point = LengthPoint(
                n=n,
                time_ms=timed.time_ms if timed else None,
                min_ms=timed.min_ms if timed else None,
                saved_bytes=timed.saved_bytes if timed else None,
                cuda_peak_bytes=timed.cuda_peak_bytes if timed else None,
                analytic_saved_bytes=analytic_saved_bytes(kind, n, config.d_model, config.num_heads, config.batch_size),
                flops=counts.flops * config.batch_size if counts and kind != "attention-fused" else None,
                analytic_flops=analytic_flops(kind, n, config.d_model, config.batch_size),
                chain=counts.chain if counts else None,
                sequential_steps=counts.chain - base_chain + 1 if counts else None,
                skipped="" if timed else too_slow,
            )
            report.points.append(point)
            say(f"{kind:>15} n={n:>5}: " + (f"{point.min_ms:9.2f} ms" if point.min_ms else point.skipped))
        if kind != "attention-fused":
            report.gradients = measure_gradients(kind, config, device)
            say(f"{kind:>15} gradient vs distance measured")
        reports.append(report)
    method = "saved-tensor bytes (saved_tensors_hooks)" + (
        " + cuda.max_memory_allocated" if device.type == "cuda" else ""
    )
    return CompareReport(config, reports, time.perf_counter() - started, method, torch.get_num_threads())


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
