"""A valid or test file that shares sources with the training data (the training file itself, at worst) is a warning
on standard error, with and without --no-progress; splits drawn at random give none."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dotformer.cli import main
from dotformer.data.prepared.splits import Splits
from dotformer.data.read.types import Pair


def pairs_file(path: Path, words: list[str]) -> Path:
    path.write_text("".join(f"{w}\t{' '.join(w.upper())}\n" for w in words), encoding="utf-8")
    return path


def splits(train: list[str], valid: list[str], test: list[str]) -> Splits:
    def pairs(words: list[str]) -> list[Pair]:
        return [Pair(w, " ".join(w.upper())) for w in words]

    return Splits(train=pairs(train), valid=pairs(valid), test=pairs(test), info={})


@pytest.mark.parametrize("progress", ["--progress", "--no-progress"])
def test_the_training_file_as_valid_and_test_is_warned_about(
    progress: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    train = pairs_file(tmp_path / "train.tsv", ["ab", "ba", "abc", "cab", "bca", "cc"])
    argv = ["train", "--data", str(train), "--valid", str(train), "--test", str(train), "--task", "g2p",
            "--preset", "tiny", "--max-steps", "1", "--device", "cpu", "--out", str(tmp_path / "run"),
            progress]  # fmt: skip
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    err = capsys.readouterr().err
    for role in ("valid", "test"):
        line = f"dotformer train: warning: --{role} {train} (the training file itself): 6 of its 6 sources are "
        assert err.count(line) == 1, err
