"""Progress against the budget (dotformer.training.progress), plain lines off a terminal, and logging routes."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest
from conftest import Cli

from dotformer.cli.log import command_logging
from dotformer.training.progress import Budget, Position, Progress, budget_fraction, clock, seconds_left


def test_fraction_is_the_largest_of_the_limits_set() -> None:
    assert budget_fraction(Budget(max_minutes=10), Position(27_100, 60.0, 0.3)) == pytest.approx(0.1)
    assert budget_fraction(Budget(max_steps=200), Position(50, 999.0, 9.0)) == pytest.approx(0.25)
    both = Budget(max_steps=1000, max_minutes=1)
    assert budget_fraction(both, Position(100, 30.0, 0.0)) == pytest.approx(0.5)  # time is the nearer limit
    assert budget_fraction(Budget(max_epochs=2), Position(7, 5.0, 0.5)) == pytest.approx(0.25)
    assert budget_fraction(Budget(max_minutes=1), Position(9, 75.0, 0.0)) == 1.0  # over the budget: clipped
    assert budget_fraction(Budget(), Position(1, 1.0, 0.1)) is None


def test_time_left_is_exact_for_a_time_budget_and_a_rate_for_steps() -> None:
    start = Position(0, 0.0, 0.0)
    assert seconds_left(Budget(max_minutes=10), start, Position(5, 120.0, 0.1)) == pytest.approx(480.0)
    # 100 steps in 50 s: 400 more steps take 200 s
    assert seconds_left(Budget(max_steps=500), start, Position(100, 50.0, 0.1)) == pytest.approx(200.0)
    # both: the step budget runs out first (200 s) before the 10-minute one (550 s)
    assert seconds_left(Budget(max_steps=500, max_minutes=10), start, Position(100, 50.0, 0.1)) == pytest.approx(200)
    # a resumed run: the rate counts from this call's start, the time from the whole run
    resumed = Position(1000, 600.0, 1.0)
    assert seconds_left(Budget(max_steps=1100), resumed, Position(1050, 610.0, 1.05)) == pytest.approx(10.0)
    assert seconds_left(Budget(max_epochs=2.0), resumed, Position(1050, 610.0, 1.5)) == pytest.approx(10.0)
    assert seconds_left(Budget(max_steps=10), start, start) is None  # no rate yet
    assert clock(3725.2) == "1:02:05" and clock(-3) == "0:00:00"


class FakeRun:
    """A run whose position the test moves by hand."""

    def __init__(self) -> None:
        self.now = Position(0, 0.0, 0.0)

    def __call__(self) -> Position:
        return self.now


def test_off_a_terminal_each_update_is_one_line_and_a_spent_budget_ends_at_100_percent() -> None:
    run, stream = FakeRun(), io.StringIO()
    progress = Progress(Budget(max_minutes=10), run, stream=stream)
    assert not progress.interactive  # a StringIO is no terminal
    for step in (1, 10, 20):
        run.now = Position(step, step * 6.0, step / 100)
        progress.update(loss=2.5, lr=1e-3, tokens_per_second=1234.0)
    progress.write("step 20: valid loss 2.4000, ppl 11.023")
    run.now = Position(23, 600.4, 0.23)  # the time is up
    progress.close()
    lines = stream.getvalue().split("\n")
    assert "\r" not in stream.getvalue() and lines[-1] == "" and len(lines) == 6
    assert lines[0] == (
        "train: step 1 (1.0%), 0:00:06 elapsed, ~0:09:54 left, loss 2.500, lr 1.00e-03, 1,234 tok/s, epoch 0.01"
    )
    assert lines[2].startswith("train: step 20 (20.0%), 0:02:00 elapsed, ~0:08:00 left, loss 2.500")
    assert lines[3] == "step 20: valid loss 2.4000, ppl 11.023"
    # the end: 100% of the time budget, no "left", and no loss of an older step shown as if current
    assert lines[4] == "train: end at step 23 (100.0%), 0:10:00 elapsed, epoch 0.23"
    progress.close()  # closing twice writes nothing more
    assert stream.getvalue().count("\n") == 5


def test_on_a_terminal_the_bar_is_percent_of_the_budget_and_ends_full() -> None:
    run, stream = FakeRun(), io.StringIO()
    progress = Progress(Budget(max_minutes=1), run, stream=stream, interactive=True)
    run.now = Position(27_100, 30.0, 0.5)
    progress.update(loss=1.0, lr=1e-3, tokens_per_second=10.0)
    run.now = Position(54_000, 60.0, 1.0)
    progress.close()
    final = stream.getvalue().rstrip("\n").split("\r")[-1]
    assert final.startswith("train 100%|") and "step 54,000 (100.0%), 0:01:00 elapsed" in final
    assert "/27,100" not in stream.getvalue() and "it/s" not in stream.getvalue()  # no guessed totals or rates


def test_disabled_progress_writes_nothing() -> None:
    stream = io.StringIO()
    progress = Progress(Budget(max_steps=5), FakeRun(), enabled=False, stream=stream)
    progress.update(1.0, 1.0, 1.0)
    progress.write("x")
    progress.close()
    assert stream.getvalue() == ""


def test_cli_routes_library_logging_to_stderr_and_restores_it(capsys: pytest.CaptureFixture[str]) -> None:
    logger = logging.getLogger("dotformer.training.loop")
    with command_logging("train"):
        logger.info("data: 3 pairs")
        logger.warning("a checkpoint without a manifest")
    logger.warning("not shown by the CLI handler any more")
    err = capsys.readouterr().err.splitlines()
    assert err[:2] == ["data: 3 pairs", "dotformer train: warning: a checkpoint without a manifest"]
    assert logging.getLogger("dotformer").handlers == []


def test_cli_prints_python_warnings_as_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    import warnings

    before = warnings.showwarning
    with command_logging("average"):
        warnings.warn("checkpoint a/ has no manifest.json:\nits files are not verified", UserWarning, stacklevel=1)
    assert capsys.readouterr().err == (
        "dotformer average: warning: checkpoint a/ has no manifest.json: its files are not verified\n"
    )
    assert warnings.showwarning is before


def test_training_into_a_file_gives_plain_lines_every_log_every_steps(tmp_path: Path, cli: Cli) -> None:
    args = ["train", "--data", "copy", "--limit", "400", "--out", str(tmp_path / "r")]
    args += ["--log-every", "3", "--eval-every", "0", "--threads", "1", "--preset", "tiny"]
    proc = cli(*args, "--max-steps", "7", "--max-minutes", "60")  # both budgets: the steps end it, at any speed
    assert proc.returncode == 0, proc.stderr
    assert "\r" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("train: ")]
    assert proc.stdout.startswith("trained 7 steps")
    assert [line.split(",")[0].split(" (")[0] for line in lines] == [  # step 1, every 3rd step, the end
        "train: step 1/7",
        "train: step 3/7",
        "train: step 6/7",
        "train: end at step 7/7",
    ]
    assert "left" in lines[1] and lines[-1].startswith("train: end at step 7/7 (100.0%)")
    assert ", loss " in lines[-1] and ", lr " in lines[-1]  # step 7 printed no line: the end shows its loss


def test_the_end_line_shows_the_last_steps_numbers_kept_between_lines() -> None:
    run, stream = FakeRun(), io.StringIO()
    progress = Progress(Budget(max_steps=30), run, stream=stream)
    run.now = Position(20, 60.0, 0.2)
    progress.update(loss=2.5, lr=1e-3, tokens_per_second=1234.0)
    read: list[int] = []
    progress.last_step(2.5, 1e-3, lambda: read.append(1) or 9.0)  # step 20's numbers are shown: nothing read
    run.now = Position(23, 69.0, 0.23)
    progress.last_step(1.25, 5e-4, lambda: read.append(1) or 4321.0)
    progress.close()
    assert read == [1]
    end = stream.getvalue().splitlines()[-1]
    assert end == "train: end at step 23/30 (76.7%), 0:01:09 elapsed, loss 1.250, lr 5.00e-04, 4,321 tok/s, epoch 0.23"


def test_python_users_can_silence_the_library(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from dotformer.runs.config_files import ConfigSections
    from dotformer.runs.run import train_run

    sections = ConfigSections(
        model={"preset": "tiny"},
        train={"max_steps": 2, "eval_every": 0, "progress": True},
        data={"dataset": "copy", "limit": 200},
    )
    with caplog.at_level(logging.INFO, logger="dotformer"):
        train_run(ConfigSections(), sections, tmp_path / "a")
    assert any(r.name.startswith("dotformer") and r.getMessage().startswith("data: ") for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dotformer"):
        train_run(ConfigSections(), sections, tmp_path / "b")
    assert not [r for r in caplog.records if r.name.startswith("dotformer") and r.levelno < logging.WARNING]
