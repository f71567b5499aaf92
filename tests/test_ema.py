"""The moving average of the weights (dotformer.training.ema, ``--ema-decay``): it follows its formula step by step,
leaves the training untouched, is what a run validates and saves, and resumes exactly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from test_training_loop import tiny_config, tiny_data, tiny_model
from tolerance import reordering_bound

from dotformer import checkpoint as ckpt
from dotformer.cli import main
from dotformer.data.batch.batching import collate
from dotformer.errors import ConfigError
from dotformer.training.config import TrainConfig
from dotformer.training.ema import WeightAverage, averaged_weights
from dotformer.training.loop import fit
from dotformer.training.scoring import evaluate_loss

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def step_weights(run: Path, step: int) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor] | None]:
    """The weights saved in the checkpoint of ``step`` and the trained weights of its training state (or None)."""
    path = run / "checkpoints" / ckpt.step_dir_name(step)
    return ckpt.load_weights(path / ckpt.MODEL_FILE), ckpt.load_train_state(path).get("raw_weights")


def metrics(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.numerical
def test_the_average_follows_its_formula_and_leaves_the_training_untouched(tmp_path: Path) -> None:
    """θ_ema = θ up to ema_start, then d·θ_ema + (1 - d)·θ at every step, computed by hand from the trained weights
    of each step (float64 run); the trained weights, losses and RNG are bit-identical to a run without the average,
    whose checkpoints hold its trained weights and no copy of them."""
    data = tiny_data()
    vocab, steps, decay, start = data.src_tokenizer.vocab_size, 6, 0.9, 2
    config = tiny_config(max_steps=steps, save_every=1, keep_last=steps)
    fit(tiny_model(vocab).double(), data, config.replace(ema_decay=decay, ema_start=start), run_dir=tmp_path / "ema")
    fit(tiny_model(vocab).double(), data, config, run_dir=tmp_path / "plain")
    average = {name: p.detach().clone() for name, p in tiny_model(vocab).double().named_parameters()}  # step 0
    scale = max(float(t.abs().max()) for t in average.values())
    for step in range(1, steps + 1):
        saved, trained = step_weights(tmp_path / "ema", step)
        plain, none = step_weights(tmp_path / "plain", step)
        assert trained is not None and none is None
        assert set(trained) == set(average) and all(torch.equal(trained[k], plain[k]) for k in trained)
        for name, theta in trained.items():
            average[name] = theta.clone() if step <= start else decay * average[name] + (1 - decay) * theta
        scale = max(scale, *(float(t.abs().max()) for t in trained.values()))
        tolerance = reordering_bound([2 * step], scale, torch.float64)  # two roundings a step, fp64
        for name in average:
            assert torch.allclose(saved[name], average[name], rtol=0, atol=tolerance), (step, name)
        if step > start:  # the average is not the weights: the test can fail
            assert any(not torch.allclose(saved[k], trained[k], atol=1e-6) for k in trained)
    ema, plain = metrics(tmp_path / "ema"), metrics(tmp_path / "plain")
    assert [r["loss"] for r in ema if r["split"] == "train"] == [r["loss"] for r in plain if r["split"] == "train"]


@pytest.mark.numerical
def test_a_run_validates_and_keeps_its_average(tmp_path: Path) -> None:
    """The final validation pass scores the averaged weights, which best/ and last/ hold."""
    data = tiny_data()
    config = tiny_config(max_steps=8, ema_decay=0.7, lr_schedule="constant", lr_peak=3e-3, warmup_steps=0)
    result = fit(tiny_model(data.src_tokenizer.vocab_size), data, config, run_dir=tmp_path)
    best, last = ckpt.load_checkpoint(tmp_path / "best"), ckpt.load_checkpoint(tmp_path / "last")
    assert all(torch.equal(p, q) for p, q in zip(best.model.parameters(), last.model.parameters(), strict=True))
    batch = collate(list(data.valid))
    averaged = evaluate_loss(last.model, [batch], config.label_smoothing).loss
    assert result.last_valid is not None and result.last_valid.loss == pytest.approx(averaged, rel=1e-5)
    raw = ckpt.load_train_state(tmp_path / "last")["raw_weights"]
    for name, p in last.model.named_parameters():
        p.data.copy_(raw[name])
    trained = evaluate_loss(last.model, [batch], config.label_smoothing).loss
    assert abs(trained - averaged) > 1e-3  # the pass did not score the trained weights


@pytest.mark.numerical
def test_resume_continues_the_weights_and_their_average_exactly(tmp_path: Path) -> None:
    """A run stopped at step 4 and resumed to 9 ends with the same trained weights and the same average as a run
    never stopped (dropout RNG, data position, Adam state and the average restored)."""
    data = tiny_data()
    vocab = data.src_tokenizer.vocab_size
    config = tiny_config(accumulation_steps=2, max_steps=9, ema_decay=0.8, ema_start=1)
    fit(tiny_model(vocab), data, config, run_dir=tmp_path / "whole")
    fit(tiny_model(vocab), data, config.replace(max_steps=4), run_dir=tmp_path / "parts")
    fit(tiny_model(vocab, seed=123), data, config, run_dir=tmp_path / "parts", resume=True)
    for part in ("whole", "parts"):
        assert ckpt.load_checkpoint(tmp_path / part / "last").info["step"] == 9
    a, b = (ckpt.load_weights(tmp_path / part / "last" / ckpt.MODEL_FILE) for part in ("whole", "parts"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    a, b = (ckpt.load_train_state(tmp_path / part / "last")["raw_weights"] for part in ("whole", "parts"))
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)


def test_averaged_weights_puts_the_trained_weights_back_exactly() -> None:
    model = tiny_model(13)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    average = WeightAverage(model, 0.5)
    for p in average.averaged.values():
        p.add_(1.0)
    with averaged_weights(average, model) as raw:
        assert raw is not None and all(torch.equal(raw[k], before[k]) for k in before)
        assert all(torch.equal(p, before[name] + 1.0) for name, p in model.named_parameters())
    assert all(torch.equal(p, before[name]) for name, p in model.named_parameters())
    with averaged_weights(None, model) as nothing:
        assert nothing is None


@pytest.mark.parametrize("value", [-0.1, 1.0, 1.5, float("nan")])
def test_a_decay_outside_zero_to_one_is_refused(value: float) -> None:
    with pytest.raises(ConfigError, match="ema_decay must be in"):
        TrainConfig(ema_decay=value)


@pytest.mark.parametrize(("flag", "value"), [("--ema-decay", "1"), ("--ema-decay", "-0.5"), ("--ema-start", "-1")])
def test_the_cli_refuses_a_bad_value_in_one_line(
    flag: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["train", "--data", "copy", "--preset", "tiny", "--max-steps", "1", "--no-progress", "--device", "cpu"]
    assert main([*argv, "--out", str(tmp_path / "run"), flag, value]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and "Traceback" not in lines[0]
    assert not (tmp_path / "run").exists()


COMMON = ["--no-progress", "--device", "cpu", "--lr-schedule", "constant", "--lr-peak", "1e-2", "--warmup", "1"]
COPY = ["--data", "copy", "--preset", "tiny", "--max-tokens", "256", "--synthetic-examples", "300"]
LORA = ["--lora-rank", "4", "--lora-alpha", "8", "--lora-targets", "W_q,W_v"]


def run(*argv: Any) -> int:
    torch.set_num_threads(1)
    return main([str(a) for a in argv])


@pytest.mark.numerical
@pytest.mark.parametrize("adapted", [False, True], ids=["plain", "lora"])
def test_a_run_from_the_cli_averages_and_resumes_exactly(tmp_path: Path, adapted: bool) -> None:
    """``train --ema-decay`` on the copy task, from scratch or fine-tuning LoRA adapters (whose checkpoints save the
    adapters only: the average is theirs): once to 4 steps, and to 2 steps then resumed to 4, give the same average
    and the same trained weights."""
    flags = [*COPY, *COMMON, "--ema-decay", "0.5", "--save-every", "2"]
    if adapted:
        assert run("train", *COPY, *COMMON, "--out", tmp_path / "base", "--max-steps", "2") == 0
        flags += ["--init-from", tmp_path / "base", *LORA]
    assert run("train", *flags, "--out", tmp_path / "once", "--max-steps", "4") == 0
    assert run("train", *flags, "--out", tmp_path / "twice", "--max-steps", "2") == 0
    assert run("train", "--out", tmp_path / "twice", "--resume", "--max-steps", "4", "--no-progress") == 0
    once, twice = (ckpt.load_weights(tmp_path / r / "last" / ckpt.MODEL_FILE) for r in ("once", "twice"))
    assert set(once) == set(twice) and all(torch.equal(once[k], twice[k]) for k in once)
    raw_once, raw_twice = (ckpt.load_train_state(tmp_path / r / "last")["raw_weights"] for r in ("once", "twice"))
    assert set(raw_once) == set(raw_twice) and all(torch.equal(raw_once[k], raw_twice[k]) for k in raw_once)
    assert set(raw_once) <= set(once) and any(not torch.equal(once[k], raw_once[k]) for k in raw_once)
    if adapted:
        assert raw_once and all("lora" in name for name in raw_once)
    info = json.loads((tmp_path / "twice" / "last" / ckpt.CONFIG_FILE).read_text())
    assert info["train"]["ema_decay"] == 0.5


def _two_ranks_worker(rank: int, world: int, init_file: str, out: str) -> None:
    from test_training_distributed import step_config
    from test_training_distributed import tiny_data as shard_data
    from test_training_distributed import tiny_model as shard_model

    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        data = shard_data()
        config = step_config(max_steps=4, ema_decay=0.5, eval_every=2)
        fit(shard_model(data.src_tokenizer.vocab_size), data, config, run_dir=Path(out) / "two")
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.numerical
def test_two_ranks_keep_and_validate_the_same_average_as_one_process(tmp_path: Path) -> None:
    """2 gloo ranks with one batch each per step equal one process with 2 accumulated batches: the same average
    saved, and the same validation losses, whose batches the ranks share (each rank scores its own on its average)."""
    import torch.multiprocessing as mp
    from test_training_distributed import step_config
    from test_training_distributed import tiny_data as shard_data
    from test_training_distributed import tiny_model as shard_model

    mp.spawn(_two_ranks_worker, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    data = shard_data()
    config = step_config(max_steps=4, ema_decay=0.5, eval_every=2, accumulation_steps=2)
    fit(shard_model(data.src_tokenizer.vocab_size), data, config, run_dir=tmp_path / "one")
    a, b = (ckpt.load_weights(tmp_path / r / "last" / ckpt.MODEL_FILE) for r in ("two", "one"))
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in b)
    two, one = ([r["loss"] for r in metrics(tmp_path / r) if r["split"] == "valid"] for r in ("two", "one"))
    assert len(two) == 2 and two == pytest.approx(one, rel=1e-5)
