"""The training loop: one step end to end, accumulation, budgets, exact resumption, NaN handling, AMP checks."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import pytest
import torch

from dotformer import checkpoint as ckpt
from dotformer.config import ModelConfig
from dotformer.data.batch.batching import collate, encode_pairs
from dotformer.data.read.corpora import load_pairs
from dotformer.data.read.types import CorpusOptions
from dotformer.data.tokenize.tokenizer_files import train_tokenizer
from dotformer.errors import CheckpointError, ConfigError, MissingExtraError, TrainingError
from dotformer.model import Transformer
from dotformer.training import loop
from dotformer.training import objective as objective_module
from dotformer.training.config import TrainConfig
from dotformer.training.loop import fit
from dotformer.training.loss import LossSums
from dotformer.training.optim import build_optimizer, set_learning_rate
from dotformer.training.resume import trim_metrics_log
from dotformer.training.schedule import learning_rate
from dotformer.training.scoring import evaluate_loss
from dotformer.training.state import TrainData
from dotformer.training.step import StepRecipe, StepResult, train_step
from dotformer.training.stopping import TrainingInterrupted

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def tiny_data(num_examples: int = 48, seed: int = 0) -> TrainData:
    corpus = load_pairs("copy", CorpusOptions(num_examples=num_examples, vocab=8, max_len=6, seed=seed))
    tok = train_tokenizer("symbol", [p.source for p in corpus.pairs])
    encoded = encode_pairs(corpus.pairs, tok, tok)
    return TrainData(encoded[:40], encoded[40:], tok, tok)


def tiny_model(vocab: int, seed: int = 0, dropout: float = 0.1) -> Transformer:
    torch.manual_seed(seed)
    config = ModelConfig(
        src_vocab_size=vocab,
        tgt_vocab_size=vocab,
        d_model=16,
        num_heads=2,
        d_ff=32,
        num_encoder_layers=1,
        num_decoder_layers=1,
        dropout=dropout,
    )
    return Transformer(config)


def tiny_config(**changes: object) -> TrainConfig:
    base = dict(max_tokens=64, warmup_steps=10, progress=False, device="cpu", eval_every=0, save_every=0, log_every=1)
    return TrainConfig(**{**base, **changes})  # type: ignore[arg-type]


def one_step(model: Transformer, optimizer: torch.optim.Optimizer, batches: list, config: TrainConfig) -> StepResult:
    """Step 1 of ``config``'s schedule, as the loop takes it: the learning rate set, then :func:`train_step`."""
    set_learning_rate(optimizer, learning_rate(1, config, model.config.d_model))
    return train_step(model, optimizer, batches, StepRecipe.of(config))


def train_lines(run_dir: Path, field: str = "loss") -> dict[int, float]:
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r[field] for r in lines if r["split"] == "train"}


@pytest.mark.numerical
def test_one_train_step_decreases_the_loss_on_copy() -> None:
    data = tiny_data()
    model = tiny_model(data.src_tokenizer.vocab_size, dropout=0.0)
    batch = collate(data.train[:16])
    config = tiny_config(lr_schedule="constant", lr_peak=3e-3, warmup_steps=0, max_steps=1)
    optimizer = build_optimizer(model, config)
    before = evaluate_loss(model, [batch], config.label_smoothing)
    step = one_step(model, optimizer, [batch], config)
    after = evaluate_loss(model, [batch], config.label_smoothing)
    assert step.loss == pytest.approx(before.loss, rel=1e-5)  # the step reports the loss before its update
    assert step.num_tokens == batch.num_tgt_tokens == before.num_tokens
    assert step.lr == pytest.approx(3e-3)
    assert after.loss < before.loss
    assert after.perplexity == pytest.approx(math.exp(after.nll))


@pytest.mark.numerical
def test_accumulation_equals_one_big_batch() -> None:
    data = tiny_data()
    # Adam's first update is lr·g/(|g| + eps): with eps = 1e-9 float noise on near-zero gradients flips signs, so the
    # comparison of parameters uses eps = 1e-6; the gradients are compared directly as well
    config = tiny_config(lr_schedule="constant", lr_peak=1e-3, warmup_steps=0, max_steps=1, adam_eps=1e-6)
    examples = data.train[:12]
    results = []
    for batches in ([collate(examples)], [collate(examples[:3]), collate(examples[3:])]):
        model = tiny_model(data.src_tokenizer.vocab_size, dropout=0.0)
        optimizer = build_optimizer(model, config)
        step = one_step(model, optimizer, batches, config)
        grads = torch.cat([p.grad.flatten() for p in model.parameters()])
        results.append((step, grads, torch.cat([p.detach().flatten() for p in model.parameters()])))
    (one, grads_one, params_one), (two, grads_two, params_two) = results
    assert one.num_tokens == two.num_tokens
    assert one.loss == pytest.approx(two.loss, rel=1e-5)
    assert torch.allclose(grads_one, grads_two, atol=1e-6)
    assert torch.allclose(params_one, params_two, atol=1e-5)


def test_fit_writes_checkpoints_metrics_and_keeps_the_last_n(tmp_path: Path) -> None:
    data = tiny_data()
    config = tiny_config(max_steps=6, save_every=2, eval_every=3, keep_last=2)
    result = fit(tiny_model(data.src_tokenizer.vocab_size), data, config, run_dir=tmp_path, info={"task": "synthetic"})
    assert result.steps == 6 and result.stopped_by == "max_steps"
    assert [p.name for p in ckpt.step_checkpoints(tmp_path / "checkpoints")] == ["step_0000004", "step_0000006"]
    assert result.best_valid_loss is not None and result.checkpoint == tmp_path / "best"
    loaded = ckpt.load_checkpoint(tmp_path / "last")
    assert loaded.info["step"] == 6 and loaded.info["task"] == "synthetic"
    assert ckpt.load_checkpoint(tmp_path).path == tmp_path / "best"
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert sorted(r["step"] for r in records if r["split"] == "valid") == [3, 6]
    assert all(math.isfinite(r["loss"]) and r["lr"] > 0 for r in records if r["split"] == "train")


@pytest.mark.numerical
def test_resume_continues_exactly(tmp_path: Path) -> None:
    """A run interrupted at step 4 and resumed to step 9 equals an uninterrupted 9-step run: same losses at every
    step, same weights (dropout RNG, data position across epochs, accumulation and Adam state restored)."""
    data = tiny_data()
    vocab = data.src_tokenizer.vocab_size
    config = tiny_config(accumulation_steps=2, max_steps=9)
    fit(tiny_model(vocab), data, config, run_dir=tmp_path / "whole")
    fit(tiny_model(vocab), data, config.replace(max_steps=4), run_dir=tmp_path / "parts")
    resumed = fit(tiny_model(vocab, seed=123), data, config, run_dir=tmp_path / "parts", resume=True)
    assert resumed.steps == 9  # the budget counts from the start of the run: 5 more steps
    assert resumed.epochs > 1  # the data position crossed an epoch boundary
    whole, parts = train_lines(tmp_path / "whole"), train_lines(tmp_path / "parts")
    assert sorted(parts) == list(range(1, 10))
    for step in range(1, 10):
        assert parts[step] == pytest.approx(whole[step], abs=1e-6)
    a = ckpt.load_weights(tmp_path / "whole" / "last" / ckpt.MODEL_FILE)
    b = ckpt.load_weights(tmp_path / "parts" / "last" / ckpt.MODEL_FILE)
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_a_cooldown_takes_the_lr_linearly_to_zero_over_the_final_fraction_of_the_budget(tmp_path: Path) -> None:
    """lr_cooldown = 0.25 of 16 steps: steps 1-12 have the schedule's rate, steps 13-16 (the budget left before
    each: 4/16 ... 1/16) 4/4 ... 1/4 of it; an epoch budget counts the same way, and a resumed run continues it."""
    data = tiny_data()
    vocab = data.src_tokenizer.vocab_size
    config = tiny_config(max_steps=16, lr_cooldown=0.25, lr_schedule="constant", lr_peak=1e-3, warmup_steps=0)
    fit(tiny_model(vocab), data, config, run_dir=tmp_path / "steps")
    lrs = train_lines(tmp_path / "steps", "lr")
    expected = {s: 1e-3 * min(1.0, (16 - (s - 1)) / 16 / 0.25) for s in range(1, 17)}
    assert lrs == pytest.approx(expected) and lrs[12] == pytest.approx(1e-3) and lrs[16] == pytest.approx(2.5e-4)

    # as a run interrupted at step 7 (a shorter budget would cool down its own end)
    fit(tiny_model(vocab), data, config.replace(max_steps=7, lr_cooldown=0.0), run_dir=tmp_path / "parts")
    fit(tiny_model(vocab), data, config, run_dir=tmp_path / "parts", resume=True)
    assert train_lines(tmp_path / "parts", "lr") == pytest.approx(lrs)
    assert train_lines(tmp_path / "parts") == pytest.approx(train_lines(tmp_path / "steps"), abs=1e-6)

    epochs = fit(tiny_model(vocab), data, config.replace(max_steps=None, max_epochs=4.0), run_dir=tmp_path / "e")
    per_epoch = epochs.steps // 4
    by_epoch = train_lines(tmp_path / "e", "lr")
    assert by_epoch[3 * per_epoch] == pytest.approx(1e-3)  # the last step before the final quarter
    assert by_epoch[epochs.steps] == pytest.approx(1e-3 / per_epoch)  # the last step: 1/per_epoch of the rate
    assert all(by_epoch[s] > by_epoch[s + 1] for s in range(3 * per_epoch + 1, epochs.steps))


def test_a_cooldown_by_the_clock_ends_near_zero(tmp_path: Path) -> None:
    data = tiny_data()
    config = tiny_config(max_minutes=0.03, lr_cooldown=0.5, lr_schedule="constant", lr_peak=1e-3, warmup_steps=0)
    result = fit(tiny_model(data.src_tokenizer.vocab_size), data, config, run_dir=tmp_path)
    lrs = train_lines(tmp_path, "lr")
    values = [lrs[s] for s in sorted(lrs)]
    assert result.stopped_by == "max_minutes" and values[0] <= 1e-3 and values[0] > values[-1] >= 0
    assert values[-1] < 0.5e-3  # the last step began in the final quarter of the budget (a step takes milliseconds)
    assert all(a >= b for a, b in zip(values, values[1:], strict=False))  # the clock only moves on


def test_the_last_checkpoint_knows_the_final_validation_pass(tmp_path: Path) -> None:
    """Step 6, a save_every step, is saved after the final validation pass: last/ holds the final pass's best_step
    and valid loss (a resume compares the next pass with the true best)."""
    data = tiny_data()
    config = tiny_config(max_steps=6, save_every=3, eval_every=4, lr_schedule="constant", lr_peak=3e-3)
    fit(tiny_model(data.src_tokenizer.vocab_size), data, config, run_dir=tmp_path)
    passes = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    passes = [r for r in passes if r["split"] == "valid"]
    assert [r["step"] for r in passes] == [4, 6]
    best = min(passes, key=lambda r: r["loss"])
    state = ckpt.load_train_state(tmp_path / "last")
    assert state["step"] == 6 and state["best_step"] == best["step"]
    assert state["best_valid_loss"] == pytest.approx(best["loss"])
    assert ckpt.load_checkpoint(tmp_path / "last").info["valid"]["loss"] == pytest.approx(passes[-1]["loss"])


class KilledError(Exception):
    """A crash simulated inside the loop."""


@pytest.mark.numerical
@pytest.mark.parametrize("budget", [{"max_steps": 6}, {"max_epochs": 1.5}])
def test_a_crash_before_the_final_validation_pass_resumes_bit_identical(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget: dict[str, object]
) -> None:
    """The budget's last step is saved once, after the final validation pass: a crash during that pass leaves the
    step before the newest checkpoint, and the resumed run ends bit-identical to one never interrupted (weights,
    optimizer, best_step and best/). A checkpoint of the last step written before the pass would look finished:
    a resume would refuse to step on and never redo the pass."""
    data = tiny_data()
    vocab = data.src_tokenizer.vocab_size
    config = tiny_config(save_every=1, eval_every=4, lr_schedule="constant", lr_peak=3e-3, **budget)
    whole = fit(tiny_model(vocab), data, config, run_dir=tmp_path / "whole")
    assert whole.steps % 4 and whole.best_step == whole.steps  # a final pass of its own, which is the best one
    real = loop.validate

    def killed_in_the_final_pass(setup, state, *args):  # type: ignore[no-untyped-def]
        if state.step == whole.steps:
            raise KilledError
        return real(setup, state, *args)

    monkeypatch.setattr(loop, "validate", killed_in_the_final_pass)
    with pytest.raises(KilledError):
        fit(tiny_model(vocab), data, config, run_dir=tmp_path / "parts")
    assert ckpt.load_train_state(ckpt.find_resume_checkpoint(tmp_path / "parts"))["step"] == whole.steps - 1
    monkeypatch.setattr(loop, "validate", real)
    resumed = fit(tiny_model(vocab), data, config, run_dir=tmp_path / "parts", resume=True)
    assert (resumed.steps, resumed.best_step) == (whole.steps, whole.best_step)
    for name in ("last", "best"):
        a = ckpt.load_weights(tmp_path / "whole" / name / ckpt.MODEL_FILE)
        b = ckpt.load_weights(tmp_path / "parts" / name / ckpt.MODEL_FILE)
        assert all(torch.equal(a[k], b[k]) for k in a), name
    a, b = (ckpt.load_train_state(tmp_path / run / "last") for run in ("whole", "parts"))
    assert all(torch.equal(x, y) for x, y in zip(state_tensors(a), state_tensors(b), strict=True))
    assert {**a, "seconds": 0, "optimizer": 0, "rng": 0} == {**b, "seconds": 0, "optimizer": 0, "rng": 0}


def state_tensors(state: dict) -> list[torch.Tensor]:
    """The optimizer's moments and the random generators' states of a training state, in a fixed order."""
    moments = [t for _, s in sorted(state["optimizer"]["state"].items()) for _, t in sorted(s.items())]
    return [*moments, *state["rng"]["torch"]]


def test_budgets_count_from_the_start_of_the_run(tmp_path: Path) -> None:
    data = tiny_data()
    vocab = data.src_tokenizer.vocab_size
    first = fit(tiny_model(vocab), data, tiny_config(max_epochs=1.0), run_dir=tmp_path)
    assert first.stopped_by == "max_epochs" and first.epochs == pytest.approx(1.0)
    second = fit(tiny_model(vocab), data, tiny_config(max_epochs=2.0), run_dir=tmp_path, resume=True)
    assert second.epochs == pytest.approx(2.0) and second.steps == 2 * first.steps
    with pytest.raises(TrainingError, match="allows no step"):
        fit(tiny_model(vocab), data, tiny_config(max_steps=second.steps), run_dir=tmp_path, resume=True)
    with pytest.raises(TrainingError, match="allows no step"):  # the run has already trained longer than this
        fit(tiny_model(vocab), data, tiny_config(max_minutes=1e-9), run_dir=tmp_path, resume=True)


def test_a_budget_is_required_and_fp16_needs_cuda() -> None:
    data = tiny_data()
    with pytest.raises(ConfigError, match="budget"):
        fit(tiny_model(data.src_tokenizer.vocab_size), data, tiny_config())
    with pytest.raises(ConfigError):
        TrainConfig(max_steps=0)
    with pytest.raises(ConfigError, match="fp16"):
        fit(tiny_model(data.src_tokenizer.vocab_size), data, tiny_config(max_steps=1, amp="fp16"))


@pytest.mark.numerical
def test_a_packed_step_equals_a_padded_step() -> None:
    """Skipping the padding (TrainConfig.packed) changes the work, not the loss or the gradients.

    (Not the updated weights: Adam's first step moves every weight by ±lr whatever the gradient's size, so the
    rounding noise of gradients that are zero in exact arithmetic, such as the key biases', would show.)
    """
    data = tiny_data()
    batch = collate(data.train[:16])
    assert bool((batch.tgt_in == 0).any())  # the batch has padding to skip
    config = tiny_config(lr_schedule="constant", lr_peak=3e-3, warmup_steps=0, max_steps=1)
    results, grads = [], []
    for packed in (False, True):
        model = tiny_model(data.src_tokenizer.vocab_size, dropout=0.0)
        results.append(one_step(model, build_optimizer(model, config), [batch], config.replace(packed=packed)))
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    padded, packed_result = results
    assert packed_result.loss == pytest.approx(padded.loss, rel=1e-6)
    assert packed_result.grad_norm == pytest.approx(padded.grad_norm, rel=1e-5)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-7)


def test_bf16_autocast_trains_on_cpu() -> None:
    data = tiny_data()
    result = fit(tiny_model(data.src_tokenizer.vocab_size), data, tiny_config(max_steps=2, amp="bf16"))
    assert result.steps == 2 and math.isfinite(result.train_loss)


def test_nan_loss_stops_with_the_step_and_keeps_the_last_good_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tiny_data()
    real = objective_module.label_smoothed_cross_entropy
    calls = {"n": 0}

    def poisoned(logits, target, epsilon=0.1, pad_id=0) -> LossSums:  # type: ignore[no-untyped-def]
        calls["n"] += 1
        sums = real(logits, target, epsilon, pad_id)
        if calls["n"] == 5 and torch.is_grad_enabled():  # the 5th training batch = step 5
            return sums._replace(loss=sums.loss * float("nan"))
        return sums

    monkeypatch.setattr(objective_module, "label_smoothed_cross_entropy", poisoned)  # where the objective looks it up
    with pytest.raises(TrainingError, match=r"step 5: .*nan.*step_0000004"):
        fit(tiny_model(data.src_tokenizer.vocab_size), data, tiny_config(max_steps=8, save_every=2), run_dir=tmp_path)
    assert [p.name for p in ckpt.step_checkpoints(tmp_path / "checkpoints")][-1] == "step_0000004"
    loaded = ckpt.load_checkpoint(tmp_path / "last")
    assert loaded.info["step"] == 4
    assert all(torch.isfinite(p).all() for p in loaded.model.parameters())


def test_resume_refuses_other_vocabularies_and_model_configs(tmp_path: Path) -> None:
    data = tiny_data()
    vocab = data.src_tokenizer.vocab_size
    fit(tiny_model(vocab), data, tiny_config(max_steps=2), run_dir=tmp_path)
    other_tok = train_tokenizer("symbol", ["a0 a1 zz", "q r s"])
    other = TrainData(data.train, data.valid, data.src_tokenizer, other_tok)
    with pytest.raises(CheckpointError, match="vocabulary mismatch.*tokenizer_tgt.json"):
        fit(tiny_model(vocab), other, tiny_config(max_steps=4), run_dir=tmp_path, resume=True)
    bigger = Transformer(tiny_model(vocab).config.replace(d_ff=64))
    with pytest.raises(CheckpointError, match="d_ff"):
        fit(bigger, data, tiny_config(max_steps=4), run_dir=tmp_path, resume=True)
    with pytest.raises(CheckpointError, match="nothing to resume"):
        fit(tiny_model(vocab), data, tiny_config(max_steps=4), run_dir=tmp_path / "empty", resume=True)


def test_tensorboard_is_optional(tmp_path: Path) -> None:
    data = tiny_data()
    config = tiny_config(max_steps=1, tensorboard=True)
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        with pytest.raises(MissingExtraError, match=r'pip install "dotformer\[tensorboard\]"'):
            fit(tiny_model(data.src_tokenizer.vocab_size), data, config, run_dir=tmp_path)
    else:
        fit(tiny_model(data.src_tokenizer.vocab_size), data, config, run_dir=tmp_path)
        assert any((tmp_path / "tensorboard").iterdir())


def test_no_validation_split_and_metrics_lines(tmp_path: Path) -> None:
    data = tiny_data()
    data = TrainData(data.train, [], data.src_tokenizer, data.tgt_tokenizer)
    result = fit(tiny_model(data.src_tokenizer.vocab_size), data, tiny_config(max_steps=2), run_dir=tmp_path)
    assert result.best_valid_loss is None and result.last_valid is None
    assert result.checkpoint == tmp_path / "last" and not (tmp_path / "best").exists()
    record = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    expected = {"split", "step", "epoch", "loss", "nll", "ppl", "lr", "grad_norm", "tokens", "tokens_per_s"}
    assert expected | {"elapsed_s", "cpu_s"} == set(record)


# -- fine-tuning, model selection, early stopping, interruption ----------------------------------------------------


def valid_records(run_dir: Path) -> list[dict]:
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in lines if r["split"] == "valid"]


@pytest.mark.numerical
def test_init_from_copies_the_weights_and_starts_a_fresh_optimizer(tmp_path: Path) -> None:
    data = tiny_data()
    vocab = data.src_tokenizer.vocab_size
    fit(tiny_model(vocab), data, tiny_config(max_steps=5), run_dir=tmp_path / "base")
    base = ckpt.load_weights(tmp_path / "base" / "last" / ckpt.MODEL_FILE)
    # one step at a vanishing learning rate: Adam moves each weight by at most ~lr, so the weights stay the base's
    config = tiny_config(max_steps=1, lr_schedule="constant", lr_peak=1e-12, warmup_steps=0)
    result = fit(tiny_model(vocab, seed=7), data, config, run_dir=tmp_path / "tuned", init_from=tmp_path / "base")
    tuned = ckpt.load_weights(tmp_path / "tuned" / "last" / ckpt.MODEL_FILE)
    assert result.steps == 1  # the step count and schedule start afresh
    assert all(torch.allclose(base[k], tuned[k], atol=1e-9) for k in base)
    fresh = tiny_model(vocab, seed=7).state_dict()
    assert not all(torch.allclose(fresh[k], tuned[k], atol=1e-3) for k in fresh)
    state = ckpt.load_train_state(tmp_path / "tuned" / "last")
    assert [float(s["step"]) for s in state["optimizer"]["state"].values()] == [1.0] * len(state["optimizer"]["state"])
    assert ckpt.load_checkpoint(tmp_path / "tuned" / "last").info["init_from"] == str(tmp_path / "base" / "best")


def test_init_from_refuses_another_vocabulary_or_shape_naming_both_sides(tmp_path: Path) -> None:
    data = tiny_data()
    vocab = data.src_tokenizer.vocab_size
    fit(tiny_model(vocab), data, tiny_config(max_steps=1), run_dir=tmp_path / "base")
    other_tok = train_tokenizer("symbol", ["a0 a1 zz", "q r s"])
    other = TrainData(data.train, data.valid, data.src_tokenizer, other_tok)
    with pytest.raises(CheckpointError, match=r"cannot initialise from .*target vocabulary mismatch: .*tokenizer_tgt"):
        fit(tiny_model(vocab), other, tiny_config(max_steps=1), init_from=tmp_path / "base")
    wider = Transformer(tiny_model(vocab).config.replace(d_ff=64))
    with pytest.raises(CheckpointError, match=r"d_ff 32 there, 64 here"):
        fit(wider, data, tiny_config(max_steps=1), init_from=tmp_path / "base")
    more_dropout = Transformer(tiny_model(vocab).config.replace(dropout=0.3))  # dropout may change when fine-tuning
    assert fit(more_dropout, data, tiny_config(max_steps=1), init_from=tmp_path / "base").steps == 1


def test_best_metric_chrf_is_the_metric_of_the_greedy_outputs(tmp_path: Path) -> None:
    """best/ is chosen by chrF; the logged chrF equals sacrebleu's on an independent greedy decoding of the saved
    model, and best/ is the pass with the highest chrF (the first of equals)."""
    import sacrebleu

    from dotformer.data.read.types import Pair
    from dotformer.decoding import DecodeConfig, decode_batch
    from dotformer.decoding.translate import pad_batch

    data = tiny_data()
    pairs = [Pair(data.src_tokenizer.decode(e.src), data.tgt_tokenizer.decode(e.tgt)) for e in data.valid]
    data = TrainData(data.train, data.valid, data.src_tokenizer, data.tgt_tokenizer, valid_pairs=pairs)
    config = tiny_config(max_steps=8, eval_every=2, save_every=2, keep_last=10, best_metric="chrf")
    result = fit(tiny_model(data.src_tokenizer.vocab_size), data, config, run_dir=tmp_path)
    records = valid_records(tmp_path)
    assert [r["step"] for r in records] == [2, 4, 6, 8] and all(r["decoded"] == len(pairs) for r in records)
    scores = [r["chrf"] for r in records]
    best = records[scores.index(max(scores))]
    assert result.best_metric == "chrf" and result.best_score == best["chrf"] and result.best_step == best["step"]
    assert [r["best"] for r in records] == [s > max(scores[:i], default=-1.0) for i, s in enumerate(scores)]
    assert ckpt.load_checkpoint(tmp_path / "best").info["best"] == {"metric": "chrf", "score": best["chrf"]}
    for record in records:  # an independent decoding of each step's checkpoint
        model = ckpt.load_checkpoint(tmp_path / "checkpoints" / ckpt.step_dir_name(record["step"])).model
        src = pad_batch([data.src_tokenizer.encode(p.source) + [2] for p in pairs])
        hyps = decode_batch(model, src, DecodeConfig(strategy="greedy"))
        outputs = [data.tgt_tokenizer.decode(h[0].tokens) for h in hyps]
        expected = sacrebleu.corpus_chrf(outputs, [[p.target for p in pairs]]).score
        assert record["chrf"] == pytest.approx(expected, abs=1e-9)


def test_valid_decode_limit_decodes_a_seeded_sample(tmp_path: Path) -> None:
    data = tiny_data(num_examples=60)
    config = tiny_config(max_steps=2, eval_every=1, best_metric="wer", valid_decode_limit=5)
    fit(tiny_model(data.src_tokenizer.vocab_size), data, config, run_dir=tmp_path)
    assert [r["decoded"] for r in valid_records(tmp_path)] == [5, 5]
    assert all(0.0 <= r["wer"] <= 100.0 for r in valid_records(tmp_path))


def test_patience_stops_when_the_metric_has_not_improved(tmp_path: Path) -> None:
    """An untrained copy model gets every word wrong (WER 100%) pass after pass: with patience 2 the run stops at
    the third pass (the first is the best; ties do not count) and says so; a resume with the same patience is
    refused, a larger patience goes on."""
    data = tiny_data()
    vocab = data.src_tokenizer.vocab_size
    config = tiny_config(max_steps=50, eval_every=1, save_every=1, best_metric="wer", patience=2, lr_peak=1e-9,
                         lr_schedule="constant", warmup_steps=0)  # fmt: skip
    result = fit(tiny_model(vocab), data, config, run_dir=tmp_path)
    records = valid_records(tmp_path)
    assert [r["wer"] for r in records] == [100.0, 100.0, 100.0]
    assert result.stopped_by == "patience" and result.steps == 3 and result.best_step == 1
    with pytest.raises(TrainingError, match=r"stopped early at step 3: .*patience=2"):
        fit(tiny_model(vocab), data, config, run_dir=tmp_path, resume=True)
    more = fit(tiny_model(vocab), data, config.replace(patience=4), run_dir=tmp_path, resume=True)
    assert more.stopped_by == "patience" and more.steps == 5


def test_best_metric_and_patience_need_a_validation_split() -> None:
    data = tiny_data()
    data = TrainData(data.train, [], data.src_tokenizer, data.tgt_tokenizer)
    for changes in ({"best_metric": "bleu"}, {"patience": 3}):
        with pytest.raises(ConfigError, match="needs a validation split"):
            fit(tiny_model(data.src_tokenizer.vocab_size), data, tiny_config(max_steps=1, **changes))
    with pytest.raises(ConfigError, match="best_metric"):
        TrainConfig(best_metric="precision")


def test_a_best_metric_the_data_does_not_offer_is_refused() -> None:
    """Pairs offer the loss and the decoding metrics; a classifier's accuracy needs the task's figures."""
    data = tiny_data()
    for metric in ("accuracy", "f1"):
        with pytest.raises(ConfigError, match=rf"best_metric '{metric}' is not a figure of this run's validation; "
                           r"choose loss, bleu, chrf, wer or per$"):  # fmt: skip
            fit(tiny_model(data.src_tokenizer.vocab_size), data, tiny_config(max_steps=1, best_metric=metric))
    offered = dataclasses.replace(data, best_metrics=("loss", "accuracy"))
    with pytest.raises(ConfigError, match=r"best_metric 'accuracy' needs the task's validation figures"):
        fit(tiny_model(data.src_tokenizer.vocab_size), offered, tiny_config(max_steps=1, best_metric="accuracy"))


def test_a_signal_during_training_saves_the_step_and_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import signal

    data = tiny_data()
    real = loop.train_step
    calls = {"n": 0}

    def step_then_signal(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        result = real(*args, **kwargs)
        if calls["n"] == 3:
            os.kill(os.getpid(), signal.SIGTERM)  # arrives during step 3; the step finishes
        return result

    monkeypatch.setattr(loop, "train_step", step_then_signal)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(TrainingInterrupted, match=r"SIGTERM at step 3: kept .*step_0000003.*--resume"):
        fit(tiny_model(data.src_tokenizer.vocab_size), data, tiny_config(max_steps=50, save_every=100), tmp_path)
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is put back
    assert ckpt.load_train_state(tmp_path / "last")["step"] == 3
    assert sorted(train_lines(tmp_path)) == [1, 2, 3]


def test_resume_trims_metrics_lines_logged_after_the_checkpoint(tmp_path: Path) -> None:
    data = tiny_data()
    vocab = data.src_tokenizer.vocab_size
    fit(tiny_model(vocab), data, tiny_config(max_steps=4, save_every=2), run_dir=tmp_path)
    ckpt.link_checkpoint(tmp_path / "checkpoints" / "step_0000002", tmp_path / "last")  # as if killed after step 4
    for path in ckpt.step_checkpoints(tmp_path / "checkpoints")[1:]:
        shutil.rmtree(path)
    with pytest.warns(ckpt.CheckpointWarning, match=r"removed 3 lines logged after step 2"):  # train 3, 4; valid 4
        fit(tiny_model(vocab), data, tiny_config(max_steps=5, save_every=2), run_dir=tmp_path, resume=True)
    steps = [(r["split"], r["step"]) for r in map(json.loads, (tmp_path / "metrics.jsonl").read_text().splitlines())]
    assert steps == [("train", 1), ("train", 2), ("train", 3), ("train", 4), ("train", 5), ("valid", 5)]


def test_trim_metrics_log_drops_later_and_unfinished_lines(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"split": "train", "step": s}) + "\n" for s in (1, 2, 3)]
    path.write_text("".join(lines) + '{"split": "valid", "st')
    assert trim_metrics_log(path, 2) == 2
    assert path.read_text() == "".join(lines[:2])
    assert trim_metrics_log(path, 2) == 0
    assert trim_metrics_log(tmp_path / "none.jsonl", 2) == 0
