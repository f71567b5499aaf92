"""Every option's package is checked before the data is read and before step 1: ``--best-metric wer`` without
rapidfuzz is one line and exit status 2, not a run stopped at its first validation pass with nothing saved."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dotformer.cli import main
from dotformer.errors import MissingExtraError
from dotformer.runs.run import check_requirements
from dotformer.training.config import TrainConfig

CASES = [
    (["--best-metric", "wer"], "rapidfuzz", "--best-metric wer needs rapidfuzz", "eval"),
    (["--best-metric", "per"], "rapidfuzz", "--best-metric per needs rapidfuzz", "eval"),
    (["--best-metric", "bleu"], "sacrebleu", "--best-metric bleu needs sacrebleu", "eval"),
    (["--best-metric", "chrf"], "sacrebleu", "--best-metric chrf needs sacrebleu", "eval"),
    (["--tensorboard"], "tensorboard", "--tensorboard needs tensorboard", "tensorboard"),
]


@pytest.mark.parametrize(("flags", "module", "message", "extra"), CASES)
def test_a_missing_package_stops_the_run_before_anything_is_read_or_written(
    flags: list[str], module: str, message: str, extra: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setitem(sys.modules, module, None)  # "import MODULE" now fails as when it is not installed
    data = tmp_path / "pairs.tsv"  # never read: the check comes first
    out = tmp_path / "run"
    argv = ["train", "--data", str(data), "--task", "g2p", "--max-minutes", "1", "--out", str(out), *flags]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == f'dotformer train: error: {message}, which is not installed: pip install "dotformer[{extra}]"\n'
    assert not out.exists()


def test_installed_packages_and_options_without_needs_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    for metric in ("loss", "wer", "bleu"):
        pytest.importorskip("rapidfuzz" if metric == "wer" else "sacrebleu")
        check_requirements(TrainConfig(best_metric=metric))  # type: ignore[arg-type]
    monkeypatch.setitem(sys.modules, "rapidfuzz", None)
    monkeypatch.setitem(sys.modules, "sacrebleu", None)
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    check_requirements(TrainConfig(best_metric="loss"))  # needs nothing beyond the core
    with pytest.raises(MissingExtraError) as caught:
        check_requirements(TrainConfig(best_metric="wer"))
    assert (caught.value.extra, caught.value.module) == ("eval", "rapidfuzz")


def test_a_language_model_checks_its_packages_first_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    out = tmp_path / "lm"
    argv = ["train", "--task", "lm", "--data", str(tmp_path / "text.txt"), "--max-minutes", "1", "--out", str(out)]
    assert main([*argv, "--tensorboard"]) == 2  # the text file does not exist: never read, the check comes first
    err = capsys.readouterr().err
    needs = '--tensorboard needs tensorboard, which is not installed: pip install "dotformer[tensorboard]"'
    assert err == f"dotformer train: error: {needs}\n"
    assert not out.exists()
