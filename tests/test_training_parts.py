"""The training loop's parts, each alone: the loop's length and the classes of training/ (no mixins), the state's
counters, choosing best/, the stop checks, saving, the batch stream's dealing across ranks, counts in messages."""

from __future__ import annotations

import ast
import math
import signal
from pathlib import Path

import pytest
from test_training_loop import tiny_config, tiny_data, tiny_model

import dotformer.training
from dotformer import checkpoint as ckpt
from dotformer.data.batch.batching import BatchSampler
from dotformer.errors import TrainingError
from dotformer.training.loop import set_up
from dotformer.training.progress import count
from dotformer.training.saving import save
from dotformer.training.scoring import EvalResult
from dotformer.training.selection import select_best
from dotformer.training.state import TrainState
from dotformer.training.stopping import TrainingInterrupted, check_budget_allows_a_step, stop_before_step
from dotformer.training.stream import BatchStream

TRAINING = Path(dotformer.training.__file__).parent
PLAIN_BASES = {"object", "Protocol", "NamedTuple"}


def test_the_loop_fits_a_screen() -> None:
    tree = ast.parse((TRAINING / "loop.py").read_text())
    loop = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "train_loop")
    assert loop.end_lineno is not None and loop.end_lineno - loop.lineno + 1 <= 80


def test_no_class_of_training_mixes_classes_in() -> None:
    mixed = []
    for path in sorted(TRAINING.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(base).split(".")[-1] for base in node.bases]
                if len([b for b in bases if b not in PLAIN_BASES]) > 1:
                    mixed.append(f"{path.name}:{node.name}({', '.join(bases)})")
    assert mixed == []


def valid(loss: float, nll: float) -> EvalResult:
    return EvalResult(loss=loss, nll=nll, perplexity=math.exp(nll), num_tokens=5)


def test_select_best_keeps_the_best_pass_and_counts_the_others() -> None:
    state = TrainState(step=10)
    first = valid(2.0, 1.9)
    assert select_best(state, "wer", 40.0, first)
    assert (state.best_step, state.best_score, state.best_loss, state.evals_without_gain) == (10, 40.0, 2.0, 0)
    state.step = 20
    assert not select_best(state, "wer", 40.0, valid(1.0, 0.9))  # a tie is no gain
    assert not select_best(state, "wer", 55.0, first)
    assert (state.best_step, state.best_loss, state.evals_without_gain) == (10, 2.0, 2)
    state.step = 30
    assert select_best(state, "wer", 12.5, valid(3.0, 2.9))  # lower WER wins
    assert (state.best_step, state.best_score, state.best_loss, state.evals_without_gain) == (30, 12.5, 3.0, 0)
    assert state.best_perplexity == pytest.approx(math.exp(2.9))


def small_setup(tmp_path: Path | None, **changes: object):  # type: ignore[no-untyped-def]
    from dotformer.training.distributed import DistContext

    data = tiny_data()
    config = tiny_config(**{"max_steps": 5, **changes})
    return set_up(tiny_model(data.src_tokenizer.vocab_size), data, config, tmp_path, {"task": "t"}, DistContext())


def test_stop_checks_before_a_step() -> None:
    setup = small_setup(None, max_steps=5)
    assert stop_before_step(setup, TrainState(step=4), first_step=0) is None
    assert stop_before_step(setup, TrainState(step=5), first_step=0) == "max_steps"
    with pytest.raises(TrainingError, match="allows no step: the run is at step 5, max_steps=5"):
        check_budget_allows_a_step(setup, TrainState(step=5))
    clock = small_setup(None, max_steps=None, max_minutes=1.0)
    spent = TrainState(step=3, seconds=61.0)
    assert stop_before_step(clock, spent, first_step=2) == "max_minutes"
    with pytest.raises(TrainingError, match="ran out before the first step"):
        stop_before_step(clock, spent, first_step=3)
    with pytest.raises(TrainingInterrupted, match="SIGTERM at step 4: nothing saved"):
        stop_before_step(setup, TrainState(step=4, signal=signal.SIGTERM), first_step=0)
    patient = small_setup(None, max_steps=50, patience=2)
    with pytest.raises(TrainingError, match="stopped early at step 7"):
        check_budget_allows_a_step(patient, TrainState(step=7, evals_without_gain=2))


def test_save_writes_a_checkpoint_of_the_state(tmp_path: Path) -> None:
    setup = small_setup(tmp_path, keep_last=1)
    state = TrainState(step=1_234, tokens=99, best_loss=1.5, best_step=1_000, best_score=1.5, evals_without_gain=2)
    save(setup, state)
    path = tmp_path / "checkpoints" / ckpt.step_dir_name(1_234)
    assert state.saved_step == 1_234 and state.last_checkpoint == path
    assert ckpt.load_train_state(tmp_path / "last")["step"] == 1_234
    saved = ckpt.load_train_state(path)
    assert (saved["step"], saved["tokens"], saved["best_step"], saved["evals_without_improvement"]) == (
        1234,
        99,
        1000,
        2,
    )
    assert saved["best_valid_loss"] == 1.5 and saved["world_size"] == 1 and saved["data"]["epoch"] == 0
    assert ckpt.load_checkpoint(path).info["task"] == "t"


def test_the_stream_deals_the_global_order_to_the_ranks() -> None:
    """Rank r of N takes the batches r, r + N, ... of each step's N·A global batches, across an epoch's end; at the
    last, short step of an epoch budget a rank without a batch gets one with no targets."""
    data = tiny_data()
    sampler = BatchSampler(data.train, 24, seed=1)
    order = [rows.tolist() for e in range(2) for rows in sampler.plan(e)]
    assert len(order) == 18
    streams = [BatchStream(sampler, max_epochs=2.0, rank=r, world_size=2) for r in (0, 1)]
    single = BatchStream(sampler, max_epochs=2.0)
    for step in range(9):
        mine = [stream.take(2) for stream in streams]  # accumulation 2 on 2 ranks: 4 global batches
        whole = single.take(4)
        taken = order[4 * step : 4 * step + 4]
        if step < 4:
            assert [b.indices for b in whole] == taken
            assert [b.indices for b in mine[0]] == taken[0::2] and [b.indices for b in mine[1]] == taken[1::2]
        else:  # the 17th and 18th batches, then nothing
            assert [b.indices for b in mine[0]] == taken[0::2] and [b.indices for b in mine[1]] == taken[1::2]
            break
    assert streams[0].epochs_done == streams[1].epochs_done == single.epochs_done == 2.0
    short = [BatchStream(sampler, max_epochs=1.0, rank=r, world_size=2, index=8) for r in (0, 1)]
    first, second = (stream.take(1) for stream in short)
    assert first[0].indices == order[8] and first[0].num_tgt_tokens > 0
    assert second[0].num_tgt_tokens == 0 and bool((second[0].tgt_out == 0).all())  # all PAD: adds nothing
    assert short[0].take(1) == short[1].take(1) == []


def test_counts_in_messages() -> None:
    assert count(1, "step") == "1 step" and count(0, "step") == "0 steps" and count(1320, "step") == "1,320 steps"
    assert count(2, "pass", "passes") == "2 passes" and count(1, "validation point") == "1 validation point"


def test_the_state_counts_the_time_of_earlier_runs() -> None:
    state = TrainState(seconds=100.0)
    assert 100.0 <= state.elapsed() < 200.0 and math.isnan(state.train_loss) and math.isinf(state.best_loss)


def test_the_metrics_log_has_its_own_cadence(tmp_path: Path) -> None:
    """metrics_every sets the train lines of metrics.jsonl (first step always), log_every only the progress lines."""
    import json

    from dotformer.training.loop import fit

    data = tiny_data()
    for every, steps in ((1, list(range(1, 10))), (4, [1, 4, 8])):
        run = tmp_path / f"every{every}"
        config = tiny_config(max_steps=9, log_every=5, metrics_every=every)
        fit(tiny_model(data.src_tokenizer.vocab_size), data, config, run_dir=run)
        lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in lines if r["split"] == "train"] == steps
    from dotformer.errors import ConfigError
    from dotformer.training.config import TrainConfig

    with pytest.raises(ConfigError, match="metrics_every"):
        TrainConfig(metrics_every=-1)


def test_the_summary_counts_steps_in_words() -> None:
    from dotformer.runs.run import RunResult
    from dotformer.runs.tasks import task_named
    from dotformer.training.loop import FitResult

    def summary(steps: int, best_step: int | None) -> str:
        fit = FitResult(steps, 1.0, 2.0, 2.0, 10, 5.0, 1.0, 1.0 if best_step else None, 2.7, best_step, None,
                        "max_steps", Path("r/last"))  # fmt: skip
        return RunResult(fit, Path("r"), True, task_named("g2p")).summary()

    assert summary(1, None).startswith("trained 1 step (1.00 epochs, stopped by max_steps)")
    assert summary(1320, 1320).startswith("trained 1,320 steps (") and "at step 1,320;" in summary(1320, 1320)
