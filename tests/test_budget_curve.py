"""benchmarks/budget_curve.py: which checkpoint stands for which budget, and a tiny run end to end with --average."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Cli

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPT = BENCHMARKS / "budget_curve.py"


@pytest.fixture
def curve(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module("budget_curve")


def test_pick_takes_the_newest_checkpoint_within_the_budget(curve, tmp_path: Path) -> None:
    # logged every 10 steps, 6 s per step; checkpoints at 20, 40 and the final 45
    points = [{"step": s, "epoch": s / 100, "elapsed_s": 6.0 * s, "tokens_per_s": 100.0 + s} for s in range(10, 50, 10)]
    steps = {s: tmp_path / f"step_{s:07d}" for s in (20, 40, 45)}
    assert curve.pick(tmp_path, 1.0, points, steps) is None  # step 20 is logged at 120 s: past a 1-minute budget
    two = curve.pick(tmp_path, 2.0, points, steps)
    assert two["step"] == 20 and two["train_minutes"] == 2.0 and two["mean_target_tokens_per_s"] == 115.0
    # step 40 is logged at 240 s; the final 45, after the last line, takes that line's time (240 s) too
    assert curve.pick(tmp_path, 3.9, points, steps)["step"] == 20
    assert curve.pick(tmp_path, 4.0, points, steps)["step"] == 45


def test_curve_of_a_tiny_run_with_averaging(tmp_path: Path, cli: Cli) -> None:
    run = tmp_path / "copy"
    env = cli.env()
    train = ["train", "--config", "copy", "--out", str(run), "--no-progress"]
    train += ["--max-steps", "6", "--save-every", "2", "--keep-last", "10", "--synthetic-examples", "400"]
    done = cli(*train, "--threads", "1", "--log-every", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    out = tmp_path / "curve.json"
    command = [sys.executable, str(SCRIPT), "--run", str(run), "--minutes", "1000", "--average", "2", "--beam", "2"]
    command += [
        "--split",
        "test,valid",
        "--labels",
        "held out,valid",
        "--out",
        str(out),
        "--plot",
        str(tmp_path / "c.png"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=cli.timeout_s)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["average"] == 2 and result["split"] == "test,valid" and len(result["rows"]) == 1
    row = result["rows"][0]
    assert row["step"] == 6 and row["averaged_steps"] == [4, 6]
    averaged = run / "curve" / "avg2_step_6"
    assert Path(row["checkpoint"]) == averaged
    assert len(json.loads((averaged / "config.json").read_text())["averaged_from"]) == 2
    assert set(row["metrics_by_split"]) == {"test", "valid"} and row["metrics"] == row["metrics_by_split"]["test"]
    for split in ("test", "valid"):
        assert 0.0 <= row["metrics_by_split"][split]["exact_match"] <= 100.0
        saved = json.loads(out.with_suffix(f".{split}.6.avg2.json").read_text())  # dotformer evaluate's own JSON
        assert saved["metrics"]["exact_match"] == row["metrics_by_split"][split]["exact_match"]
    assert "step      6" in done.stdout and "test: exact_match" in done.stdout and "valid: exact_match" in done.stdout
    assert (tmp_path / "c.png").stat().st_size > 1000
