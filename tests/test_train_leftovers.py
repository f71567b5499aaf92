"""`dotformer train` that fails before its first checkpoint leaves no run directory it made (the next try with the
same --out starts cleanly), and never deletes a directory it did not make or a run with a checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from dotformer.cli import main
from dotformer.errors import DataError
from dotformer.runs.records import removed_if_unfinished

COPY = ["--data", "copy", "--preset", "tiny", "--limit", "200", "--device", "cpu", "--max-steps", "1"]


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def error_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(["train", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


@pytest.fixture
def short_text(tmp_path: Path) -> Path:
    path = tmp_path / "short.txt"
    path.write_text("hello there\nsmall text\n", encoding="utf-8")
    return path


def test_a_bad_dropout_is_one_line_and_makes_no_run_directory(tmp_path, capsys) -> None:
    out = tmp_path / "runs" / "r"
    err = error_line(capsys, [*COPY, "--dropout", "1.5", "--out", str(out)])
    assert err == "dotformer train: error: --dropout must be in [0, 1), got 1.5\n"
    assert not (tmp_path / "runs").exists()
    err = error_line(capsys, [*COPY, "--dropout", "nan", "--out", str(out)])
    assert err == "dotformer train: error: --dropout must be in [0, 1), got nan\n"
    assert not (tmp_path / "runs").exists()


def test_a_d_model_that_is_no_multiple_of_the_heads_makes_no_run_directory(tmp_path, capsys) -> None:
    config = tmp_path / "c.toml"
    config.write_text("[model]\nd_model = 130\n", encoding="utf-8")
    out = tmp_path / "r"
    argv = [a for a in COPY if a not in ("--preset", "tiny")]  # a preset flag would replace the file's shape
    err = error_line(capsys, [*argv, "--config", str(config), "--out", str(out)])
    assert err == (
        "dotformer train: error: ModelConfig.d_model=130 must be divisible by num_heads=4 (d_k = d_model / num_heads)\n"
    )
    assert not out.exists()


LM = ["--task", "lm", "--device", "cpu", "--max-steps", "1"]
TOO_SHORT = (
    "dotformer train: error: the training text has 23 tokens: too few for blocks of 128 tokens at every offset "
    "(needs at least 257); lower the block size or give more text\n"
)


def test_a_text_too_short_for_a_block_leaves_nothing_and_the_next_try_runs(tmp_path, capsys, short_text) -> None:
    out = tmp_path / "made" / "lm"
    assert error_line(capsys, [*LM, "--data", str(short_text), "--out", str(out)]) == TOO_SHORT
    assert not (tmp_path / "made").exists()  # the parent it made too
    assert main(["train", *LM, "--data", str(short_text), "--out", str(out), "--block-size", "4", "--no-progress"]) == 0
    assert (out / "last").is_dir()  # the same --out, a smaller block: it trains


def test_a_directory_that_was_there_before_is_kept(tmp_path, capsys, short_text) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    assert error_line(capsys, [*LM, "--data", str(short_text), "--out", str(out)]) == TOO_SHORT
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]  # the run's data/ and run.json are gone
    assert error_line(capsys, [*LM, "--data", str(short_text), "--out", str(out)]) == TOO_SHORT  # not "holds a run"


def test_a_run_with_a_checkpoint_is_never_deleted(tmp_path) -> None:
    run = tmp_path / "run"
    with pytest.raises(DataError), removed_if_unfinished(run):
        (run / "last").mkdir(parents=True)
        raise DataError("after the first checkpoint")
    assert (run / "last").is_dir()
    with pytest.raises(DataError), removed_if_unfinished(run / "x"):
        (run / "x" / "data").mkdir(parents=True)
        raise DataError("before the first checkpoint")
    assert not (run / "x").exists() and run.is_dir()
