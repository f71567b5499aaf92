"""Tests of dotformer.compare: sequential steps n vs 1, FLOPs and memory against the formulas, finite gradients."""

from __future__ import annotations

import importlib
import json
import math
from pathlib import Path

import pytest
import torch

from dotformer.cli import main
from dotformer.compare import (
    CompareConfig,
    CompareReport,
    GradientProfile,
    RecallModel,
    SequenceLayer,
    analytic_flops,
    analytic_saved_bytes,
    compare,
    count_operations,
    format_report,
    gradient_by_distance,
    table1_rows,
    timing_note,
)
from dotformer.errors import ConfigError
from dotformer.plots.compare import Series, draw_series, plot_gradients, plot_report, tidy_log_axis

ROOT = Path(__file__).resolve().parents[1]


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def report() -> CompareReport:
    config = CompareConfig(
        d_model=16, num_heads=2, lengths=(3, 12), repeats=1, gradient_length=10, train_steps=3, train_batch=4
    )
    return compare(config)


def test_sequential_steps_are_n_for_rnns_and_1_for_attention(report: CompareReport) -> None:
    for layer in report.layers:
        steps = [p.sequential_steps for p in layer.points]
        if layer.kind in ("lstm", "gru"):
            assert steps == [3, 12]
        else:
            assert steps == [1, 1]


@pytest.mark.parametrize("kind", ["lstm", "gru", "attention"])
@pytest.mark.parametrize("n", [1, 5, 17])
def test_counted_flops_equal_the_formula(kind: str, n: int) -> None:
    torch.manual_seed(0)
    layer = SequenceLayer(kind, 8, 2)
    counts = count_operations(layer, n, 8, torch.device("cpu"))
    assert counts.flops == analytic_flops(kind, n, 8)
    expected_chain = n if kind in ("lstm", "gru") else 2  # attention: W_q/W_k/W_v, then W_o
    assert counts.chain == expected_chain


def test_memory_matches_the_analytic_count(report: CompareReport) -> None:
    by_kind = {layer.kind: layer for layer in report.layers}
    for p in by_kind["attention"].points:  # the (H, n, n) weights and 4 (n, D) activations, exactly
        assert p.saved_bytes == p.analytic_saved_bytes == 4 * (2 * p.n * p.n + 4 * p.n * 16)
    for p in by_kind["gru"].points:
        assert p.saved_bytes == analytic_saved_bytes("gru", p.n, 16, 2) == 4 * 7 * p.n * 16
    for p in by_kind["attention-fused"].points:  # no (n, n) matrix is kept
        assert p.saved_bytes == analytic_saved_bytes("attention-fused", p.n, 16, 2)
    for p in by_kind["lstm"].points:  # the oneDNN kernel keeps a workspace: at least the textbook count
        assert p.saved_bytes is not None and p.saved_bytes >= p.analytic_saved_bytes


def test_gradient_vs_distance_is_finite_and_decays_for_rnns(report: CompareReport) -> None:
    for layer in report.layers:
        g = layer.gradients
        if layer.kind == "attention-fused":
            assert g is None
            continue
        assert g is not None and g.trained is not None and g.training is not None
        assert g.distances == list(range(10))
        for values in (g.random_init, g.trained):
            assert len(values) == 10 and all(math.isfinite(v) and v >= 0 for v in values)
        ratio = GradientProfile.ratio(g.random_init)
        if layer.kind in ("lstm", "gru"):
            assert ratio < 0.05  # 9 hops through the recurrence
        else:
            assert ratio > 0.05  # one hop, whatever the distance


@pytest.mark.numerical
def test_exact_gradient_norm_equals_autograd_jacobian() -> None:
    config = CompareConfig(d_model=4, num_heads=2, gradient_length=5)
    torch.manual_seed(0)
    model = RecallModel("gru", config).eval()
    tokens = torch.randint(0, config.vocab_size, (1, 5))
    x = model.embed_tokens(tokens).detach()
    jac = torch.autograd.functional.jacobian(lambda e: model.last_output(e)[0], x)  # (D, 1, n, D)
    expected = jac[:, 0].pow(2).sum(dim=(0, 2)).sqrt().flip(0)  # by distance
    torch.testing.assert_close(gradient_by_distance(model, tokens).float(), expected.float(), rtol=1e-5, atol=1e-7)


def test_table_json_and_figures(report: CompareReport, tmp_path: Path) -> None:
    rows = table1_rows(report)
    assert [r["Layer type"] for r in rows][:3] == ["Recurrent (LSTM)", "Recurrent (GRU)", "Self-attention"]
    assert rows[0]["Sequential operations"] == "O(n): n=3: 3, n=12: 12"
    assert rows[2]["Sequential operations"] == "O(1): n=3: 1, n=12: 1"
    assert rows[2]["Complexity per layer"].startswith("O(n²·d): ")
    text = format_report(report)
    assert "| Layer type | Complexity per layer | Sequential operations | Maximum path length |" in text
    data = json.loads(json.dumps(report.to_dict()))
    assert data["layers"][0]["points"][1]["sequential_steps"] == 12
    assert plot_report(report, tmp_path / "r.png").stat().st_size > 0
    assert plot_gradients(report, tmp_path / "g.svg").stat().st_size > 0


def test_figure_tells_equal_lines_and_noisy_timings_apart(report: CompareReport, tmp_path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure()
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    series = [Series("Recurrent (LSTM)", [3, 12], [3, 12]), Series("Recurrent (GRU)", [3, 12], [3, 12])]
    series.append(Series("Self-attention", [3, 12], [1, 1]))
    assert draw_series(ax, series, {}) == ["GRU = LSTM"]
    lstm, gru, _ = ax.get_lines()
    assert lstm.get_linestyle() == "-" and gru.get_linestyle() != "-"  # the second of two equal lines is dashed
    assert gru.get_markersize() > lstm.get_markersize() and gru.get_markerfacecolor() == "none"  # ... ringed
    # steps of LSTM and GRU are equal in the measured report: the figure notes it
    rows = {layer.kind: [p.sequential_steps for p in layer.points] for layer in report.layers}
    assert rows["lstm"] == rows["gru"]
    assert "--repeats 1" in format_report(report) and "noise, not a trend" in format_report(report)
    assert timing_note(CompareReport(CompareConfig(repeats=3), [], 0.0, "", 1)) == ""


@pytest.mark.parametrize("limits", [(20.0, 60.0), (1.5, 9.0), (3.0, 3000.0)])
def test_log_axis_tick_labels_do_not_overlap(limits: tuple[float, float]) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4, 3))
    canvas = FigureCanvasAgg(fig)
    ax = fig.subplots()
    ax.plot(limits, limits)
    ax.set_xscale("log")
    ax.set_yscale("log")
    tidy_log_axis(ax, "x")
    tidy_log_axis(ax, "y")
    canvas.draw()
    renderer = canvas.get_renderer()
    for axis in (ax.xaxis, ax.yaxis):
        assert not any(label.get_text() for label in axis.get_minorticklabels() if label.get_visible())
        low, high = sorted(axis.get_view_interval())
        shown = [
            t.label1.get_window_extent(renderer)
            for t in axis.get_major_ticks()
            if t.label1.get_visible() and t.label1.get_text() and low <= t.get_loc() <= high
        ]
        assert len(shown) >= 2  # a narrow axis still gets numbers
        assert not any(a.overlaps(b) for i, a in enumerate(shown) for b in shown[i + 1 :])


def test_config_validation() -> None:
    with pytest.raises(ConfigError, match="unknown layer"):
        CompareConfig(layers=("transformer",))
    with pytest.raises(ConfigError, match="divisible"):
        CompareConfig(d_model=10, num_heads=4)
    with pytest.raises(ConfigError, match="lengths"):
        CompareConfig(lengths=(0,))
    with pytest.raises(ConfigError, match="gradient_length"):
        CompareConfig(gradient_length=1)


def test_cli_and_benchmark_script(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    small = ["--d-model", "8", "--heads", "2", "--lengths", "4", "--layers", "gru", "attention"]
    small += ["--gradient-length", "6", "--train-steps", "1", "--repeats", "1", "--quiet"]
    assert main(["compare", *small, "--out", str(tmp_path / "cli")]) == 0
    assert "| Recurrent (GRU) |" in capsys.readouterr().out
    assert {p.name for p in (tmp_path / "cli").iterdir()} == {
        "compare.json",
        "recurrence_vs_attention.png",
        "gradient_vs_distance.png",
    }
    assert main(["compare", "--layers", "gru", "--lengths", "0", "--out", str(tmp_path / "x")]) == 2
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    script = importlib.import_module("recurrence_vs_attention")
    assert script.main([*small, "--out", str(tmp_path / "bench"), "--threads", "1"]) == 0
    saved = json.loads((tmp_path / "bench" / "recurrence_vs_attention.json").read_text())
    assert saved["machine"]["torch"] == torch.__version__
    assert [layer["kind"] for layer in saved["layers"]] == ["gru", "attention"]
