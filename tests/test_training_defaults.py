"""A task's defaults give a model that learns within minutes: ``--task g2p`` (and ``--data cmudict``) without
``--config`` trains the g2p config's model and recipe, translation the bible config's, copy/reverse the copy
config's, a language model the lm-bible config's; the warmup never depends on the budget (a resumed run with a larger
budget takes the steps a longer run takes); a warmup that the budget cannot reach is warned about before step 1."""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import dotformer.runs.run as run_module
from dotformer.checkpoint import load_weights
from dotformer.cli import main
from dotformer.config import ModelConfig
from dotformer.model import Transformer
from dotformer.runs.config_files import read_config_file
from dotformer.runs.tasks import task_named
from dotformer.training.config import TrainConfig
from dotformer.training.warmup import (
    known_steps,
    minutes_bound,
    peak_flops,
    steps_per_epoch,
    warmup_warning,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """train/valid/test TSVs of made-up words and one phone per letter, no word in two files."""
    rng = random.Random(0)
    words = sorted({"".join(rng.choice("abcdefgh") for _ in range(rng.randint(2, 6))) for _ in range(400)})
    rng.shuffle(words)
    parts = {"train": words[:300], "valid": words[300:330], "test": words[330:360]}
    out = {}
    for name, part in parts.items():
        out[name] = tmp_path / f"{name}.tsv"
        out[name].write_text("".join(f"{w}\t{' '.join(c.upper() for c in w)}\n" for w in part), encoding="utf-8")
    return out


def prepared_by(monkeypatch: pytest.MonkeyPatch, argv: list[str], seen: dict[str, Any] | None = None) -> Any:
    """Run ``dotformer train ARGV`` up to the training itself and return what it prepared (model and recipe); ``seen``
    also gets the run.json written by then (``"record"``: the stopped run removes what it created)."""
    seen = {} if seen is None else seen

    def capture(task: Any, record: dict[str, Any], loaded: Any, lines: Any, train_config: TrainConfig,
                *args: Any, **kwargs: Any) -> Any:  # fmt: skip
        model_config = ModelConfig.from_dict(record["model"])
        seen["prepared"] = SimpleNamespace(task=task.name, model_config=model_config, train_config=train_config)
        seen["record"] = record
        raise SystemExit(0)

    monkeypatch.setattr(run_module, "_train", capture)
    with pytest.raises(SystemExit):
        main(["train", *argv])
    return seen["prepared"]


def test_the_readme_own_data_command_trains_the_g2p_configs_model_and_recipe(
    files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["--data", str(files["train"]), "--valid", str(files["valid"]), "--test", str(files["test"]),
            "--task", "g2p", "--out", str(tmp_path / "mine"), "--max-minutes", "4"]  # fmt: skip
    p = prepared_by(monkeypatch, argv)
    g2p = read_config_file("g2p")
    for key, value in g2p.model.items():
        assert getattr(p.model_config, key) == value, key
    for key, value in g2p.train.items():
        if key != "max_epochs":  # a budget is never a default
            assert getattr(p.train_config, key) == value, key
    assert p.train_config.max_epochs is None and p.train_config.max_minutes == 4
    assert (p.train_config.max_tokens, p.train_config.warmup_steps, p.train_config.lr_schedule) == (
        1024,
        200,
        "inverse_sqrt",
    )
    # 4 minutes hold far more than 200 steps of this 1.4M-parameter model even on one thread: no warning
    params = Transformer(p.model_config).num_parameters()
    assert warmup_warning(p.train_config, None, params, peak_flops("cpu", 1)) is None


def test_translation_files_train_the_bible_configs_model_and_recipe(
    files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["--data", str(files["train"]), "--valid", str(files["valid"]), "--out", str(tmp_path / "t"),
            "--max-minutes", "10", "--vocab-size", "300"]  # fmt: skip
    p = prepared_by(monkeypatch, argv)
    bible = read_config_file("bible")
    assert p.task == "translation"
    assert p.model_config.init_std == bible.model["init_std"] == 0.02 and p.model_config.d_model == 256
    assert (p.train_config.lr_schedule, p.train_config.lr_peak, p.train_config.warmup_steps) == (
        "inverse_sqrt",
        bible.train["lr_peak"],
        bible.train["warmup_steps"],
    )


def test_the_file_and_the_flags_override_the_task_defaults(
    files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "mine.toml"
    config.write_text(f'[data]\ntrain = "{files["train"]}"\ntask = "g2p"\n[train]\nmax_tokens = 512\n')
    argv = ["--config", str(config), "--preset", "tiny", "--lr-peak", "1e-3", "--out", str(tmp_path / "o"),
            "--max-minutes", "4"]  # fmt: skip
    p = prepared_by(monkeypatch, argv)
    assert p.model_config.d_model == 64 and p.model_config.dropout == 0.1  # the preset's whole shape
    assert (p.train_config.max_tokens, p.train_config.lr_peak, p.train_config.warmup_steps) == (512, 1e-3, 200)


def test_task_defaults_are_the_shipped_configs_without_budgets() -> None:
    g2p = task_named("g2p").defaults()
    assert g2p.model == read_config_file("g2p").model and "max_epochs" not in g2p.train and g2p.data == {}
    assert task_named("exact").defaults().train == g2p.train
    assert task_named("translation").defaults().model == read_config_file("bible").model
    copy = read_config_file("copy")
    assert task_named("synthetic").defaults().model == copy.model
    assert task_named("synthetic").defaults().train == {k: v for k, v in copy.train.items() if k != "max_steps"}
    lm = task_named("lm").defaults()
    assert lm.model == read_config_file("lm-bible").model and "max_minutes" not in lm.train
    tuned = task_named("g2p").defaults(fine_tuning=True)  # the checkpoint's model, dropout included
    assert tuned.model == {} and tuned.train == g2p.train


def test_the_warmup_is_the_recipes_whatever_the_budget(
    files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = ["--data", str(files["train"]), "--valid", str(files["valid"]), "--task", "g2p"]
    for budget in (["--max-steps", "50"], ["--max-steps", "5000"], ["--max-epochs", "2"]):
        p = prepared_by(monkeypatch, [*base, *budget, "--out", str(tmp_path / budget[1])])
        assert p.train_config.warmup_steps == 200  # the g2p recipe's, never a share of the budget
    p = prepared_by(monkeypatch, [*base, "--max-steps", "50", "--warmup", "5", "--out", str(tmp_path / "w")])
    assert p.train_config.warmup_steps == 5


def test_a_resumed_run_with_a_larger_budget_takes_the_steps_of_a_longer_run(tmp_path: Path) -> None:
    """20 steps, then --resume to 40, equals 40 steps straight: the schedule does not depend on the budget (no
    cooldown set). Bit-identical: the same operations in the same order on the same numbers."""
    common = ["--data", "copy", "--synthetic-examples", "200", "--preset", "tiny", "--seed", "1", "--device", "cpu",
              "--no-progress", "--eval-every", "0", "--save-every", "0", "--max-tokens", "256"]  # fmt: skip
    assert main(["train", *common, "--max-steps", "20", "--out", str(tmp_path / "b")]) == 0
    assert main(["train", "--out", str(tmp_path / "b"), "--resume", "--max-steps", "40", "--no-progress"]) == 0
    assert main(["train", *common, "--max-steps", "40", "--out", str(tmp_path / "straight")]) == 0
    resumed = load_weights(tmp_path / "b" / "last" / "model.safetensors")
    straight = load_weights(tmp_path / "straight" / "last" / "model.safetensors")
    assert resumed.keys() == straight.keys()
    for name, tensor in straight.items():
        assert torch.equal(resumed[name], tensor), name
    record = json.loads((tmp_path / "b" / "run.json").read_text())
    assert record["train"]["warmup_steps"] == record["resumes"][0]["train"]["warmup_steps"] == 300


def test_the_warmup_against_the_budget_in_numbers() -> None:
    config = TrainConfig(max_steps=300, warmup_steps=4000)
    assert known_steps(config, None) == 300
    assert known_steps(TrainConfig(max_epochs=2.5, max_steps=1000), 59) == 148  # ceil(2.5 × 59) < 1000
    assert known_steps(TrainConfig(max_minutes=4), 59) is None and steps_per_epoch(59, 2) == 30
    assert peak_flops("cpu", 2) == 8e11 and peak_flops("cuda", 2) == 2e15
    # the README's own-data run under the old defaults: small preset, 4,096-token batches, noam with 4,000 steps
    small = TrainConfig(max_minutes=4)
    params = 5_549_312
    assert minutes_bound(small, params, 8e11) == int(240 * 8e11 / (6 * params * 4096)) == 1407
    message = warmup_warning(small, None, params, 8e11)
    assert message == (
        "the learning-rate warmup of 4,000 steps is longer than the 1,407 steps that 4 minutes can hold at most for "
        "this model and batch (5,549,312 parameters, 4,096 tokens a step, at a peak of 8e+11 floating-point "
        "operations per second): the learning rate stays below its peak throughout; pass --warmup N (e.g. a tenth "
        "of the steps) or a larger budget"
    )
    assert warmup_warning(TrainConfig(max_minutes=60), None, params, 8e11) is None  # 21,000 steps: it may end
    exact = warmup_warning(TrainConfig(max_steps=300, max_minutes=600), None, params, 8e11)
    assert exact is not None and "longer than the 300 steps of the budget" in exact  # the smaller bound speaks
    assert warmup_warning(TrainConfig(max_steps=300, warmup_steps=300), None, params, 8e11) is None
    assert warmup_warning(config, None, params, 8e11, first_step=4000) is None  # resumed past its warmup


def test_a_warmup_longer_than_the_step_budget_is_warned_about_before_step_1(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["train", "--data", str(files["train"]), "--valid", str(files["valid"]), "--task", "g2p",
            "--preset", "tiny", "--max-steps", "2", "--warmup", "50", "--device", "cpu", "--no-progress",
            "--out", str(tmp_path / "w")]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert err == (
        "dotformer train: warning: the learning-rate warmup of 50 steps is longer than the 2 steps of the budget: "
        "the learning rate stays below its peak throughout; pass --warmup N (e.g. a tenth of the steps) or a larger "
        "budget\n"
    )


def test_fine_tuning_without_a_config_takes_the_task_recipe_and_the_checkpoints_model(
    files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    base = tmp_path / "base"
    data = ["--data", str(files["train"]), "--valid", str(files["valid"]), "--task", "g2p"]
    argv = ["train", *data, "--preset", "tiny", "--max-steps", "1", "--device", "cpu", "--no-progress",
            "--out", str(base)]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    p = prepared_by(monkeypatch, [*data, "--init-from", str(base), "--max-minutes", "4", "--out", str(tmp_path / "t")])
    assert p.model_config == ModelConfig.from_dict(json.loads((base / "run.json").read_text())["model"])
    assert p.model_config.d_model == 64 and p.model_config.dropout == 0.1  # not the g2p config's 128 and 0
    assert (p.train_config.max_tokens, p.train_config.warmup_steps, p.train_config.lr_peak) == (1024, 200, 2e-3)
