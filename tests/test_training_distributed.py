"""Data parallelism on CPU with 2 gloo processes: half the batch each gives the update of the full batch, step by
step across epoch ends; ranks given different run directories stop with one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from conftest import CLI_TIMEOUT_S
from safetensors.torch import load_file, save_file

from dotformer import checkpoint as ckpt
from dotformer.config import ModelConfig
from dotformer.data.batch.batching import BatchSampler, collate, encode_pairs, example_length
from dotformer.data.read.corpora import load_pairs
from dotformer.data.read.types import CorpusOptions
from dotformer.data.tokenize.tokenizer_files import train_tokenizer
from dotformer.errors import ConfigError
from dotformer.model import Transformer
from dotformer.training.config import TrainConfig
from dotformer.training.distributed import DistContext
from dotformer.training.loop import fit
from dotformer.training.optim import build_optimizer, set_learning_rate
from dotformer.training.state import TrainData
from dotformer.training.step import StepRecipe, train_step

STEPS = 3


def tiny_data() -> TrainData:
    corpus = load_pairs("copy", CorpusOptions(num_examples=48, vocab=8, max_len=6, seed=0))
    tok = train_tokenizer("symbol", [p.source for p in corpus.pairs])
    encoded = encode_pairs(corpus.pairs, tok, tok)
    return TrainData(encoded[:40], encoded[40:], tok, tok)


def tiny_model(vocab: int) -> Transformer:
    torch.manual_seed(0)
    sizes = dict(d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1, num_decoder_layers=1, dropout=0.0)
    return Transformer(ModelConfig(src_vocab_size=vocab, tgt_vocab_size=vocab, **sizes))


def step_config(**changes: object) -> TrainConfig:
    # adam_eps 1e-6: Adam's early updates lr·m/(√v + eps) would turn float noise on near-zero gradients into ±lr
    base = dict(lr_schedule="constant", lr_peak=1e-3, warmup_steps=0, adam_eps=1e-6, max_steps=STEPS, device="cpu")
    base.update(progress=False, max_tokens=24, eval_every=0, save_every=0, log_every=1)
    return TrainConfig(**{**base, **changes})  # type: ignore[arg-type]


def halves(data: TrainData) -> tuple[list, list]:
    """12 examples split unevenly in tokens: the long ones to rank 0, the short ones to rank 1."""
    examples = sorted(data.train[:12], key=example_length, reverse=True)
    return examples[:4], examples[4:]


def flat_params(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _worker(rank: int, world: int, init_file: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        data = tiny_data()
        vocab = data.src_tokenizer.vocab_size
        # 1. train_step: each rank gets its half of one batch
        model = tiny_model(vocab)
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        config = step_config()
        optimizer = build_optimizer(model, config)
        context = DistContext(rank=rank, world_size=world, device=torch.device("cpu"))
        batch = collate(halves(data)[rank])
        set_learning_rate(optimizer, config.lr_peak)  # the constant schedule's
        losses = [
            train_step(ddp, optimizer, [batch], StepRecipe.of(config, context=context)).loss for _ in range(STEPS)
        ]
        save_file({"params": flat_params(model)}, str(Path(out) / f"params{rank}.safetensors"))
        # 2. fit: the sampler shards the batches, rank 0 alone writes
        result = fit(tiny_model(vocab), data, step_config(save_every=2), run_dir=Path(out) / "run")
        summary = {"losses": losses, "steps": result.steps, "tokens": result.tokens, "loss": result.train_loss}
        (Path(out) / f"rank{rank}.json").write_text(json.dumps(summary))
    finally:
        dist.destroy_process_group()


def test_two_processes_equal_one_process_with_the_whole_batch(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    mp.spawn(_worker, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    data = tiny_data()
    vocab = data.src_tokenizer.vocab_size
    # the same steps in one process with the whole batch
    model = tiny_model(vocab)
    config = step_config()
    optimizer = build_optimizer(model, config)
    batch = collate([*halves(data)[0], *halves(data)[1]])
    set_learning_rate(optimizer, config.lr_peak)
    losses = [train_step(model, optimizer, [batch], StepRecipe.of(config)).loss for _ in range(STEPS)]
    rank0, rank1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert rank0["losses"] == pytest.approx(losses, abs=1e-6) and rank1["losses"] == rank0["losses"]
    p0 = load_file(str(tmp_path / "params0.safetensors"))["params"]
    p1 = load_file(str(tmp_path / "params1.safetensors"))["params"]
    assert torch.equal(p0, p1)  # the ranks stay in sync
    assert torch.allclose(p0, flat_params(model), atol=1e-5)

    # fit on 2 ranks = fit on 1 rank with 2 accumulated batches per step (the sampler deals batch i to rank i % 2)
    assert BatchSampler(data.train, 24, seed=1).num_batches(0) >= 2 * STEPS
    single = fit(tiny_model(vocab), data, step_config(accumulation_steps=2, save_every=2), run_dir=tmp_path / "one")
    assert rank0["steps"] == rank1["steps"] == single.steps == STEPS
    assert rank0["tokens"] == single.tokens and rank0["loss"] == pytest.approx(single.train_loss, abs=1e-6)
    two = ckpt.load_weights(tmp_path / "run" / "last" / ckpt.MODEL_FILE)
    one = ckpt.load_weights(tmp_path / "one" / "last" / ckpt.MODEL_FILE)
    assert all(torch.allclose(two[k], one[k], atol=1e-5) for k in one)
    state = ckpt.load_train_state(tmp_path / "run" / "last")
    assert state["world_size"] == 2 and len(state["rng"]["torch"]) == 2  # every rank's dropout RNG is saved
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert len([line for line in lines if '"train"' in line]) == STEPS  # rank 0 alone logs


def train_losses(run_dir: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if r["split"] == "train"}


def _epochs_worker(rank: int, world: int, init_file: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        data = tiny_data()
        config = step_config(max_steps=None, max_epochs=3.0, save_every=0)
        fit(tiny_model(data.src_tokenizer.vocab_size), data, config, run_dir=Path(out) / "two")
    finally:
        dist.destroy_process_group()


def test_two_processes_equal_one_process_across_epoch_ends(tmp_path: Path) -> None:
    """9 batches per epoch, 3 epochs: 2 ranks with one batch each per step take the global batches 2i and 2i + 1,
    across each epoch's end (step 5 takes the last batch of epoch 0 and the first of epoch 1), as one process with
    2 accumulated batches does; at the last, short step rank 1 has no batch and adds nothing. Equal losses at all
    14 steps and equal weights (to float rounding: the gradients are summed in another order)."""
    torch.set_num_threads(1)
    data = tiny_data()
    assert [BatchSampler(data.train, 24, seed=1).num_batches(e) for e in range(3)] == [9, 9, 9]
    mp.spawn(_epochs_worker, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    config = step_config(max_steps=None, max_epochs=3.0, save_every=0, accumulation_steps=2)
    single = fit(tiny_model(data.src_tokenizer.vocab_size), data, config, run_dir=tmp_path / "one")
    assert single.steps == 14 and single.stopped_by == "max_epochs" and single.epochs == pytest.approx(3.0)
    two, one = train_losses(tmp_path / "two"), train_losses(tmp_path / "one")
    assert sorted(two) == sorted(one) == list(range(1, 15))
    assert [two[s] for s in sorted(two)] == pytest.approx([one[s] for s in sorted(one)], abs=1e-6)
    a = ckpt.load_weights(tmp_path / "two" / "last" / ckpt.MODEL_FILE)
    b = ckpt.load_weights(tmp_path / "one" / "last" / ckpt.MODEL_FILE)
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in b)
    assert ckpt.load_train_state(tmp_path / "two" / "last")["tokens"] == single.tokens


def _separate_out_worker(rank: int, world: int, init_file: str, out: str) -> None:
    from dotformer.runs.config_files import ConfigSections
    from dotformer.runs.run import train_run

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        data = {"dataset": "copy", "limit": 40}
        train = {"max_steps": 1, "device": "cpu", "progress": False}
        flags = ConfigSections(model={"preset": "tiny"}, train=train, data=data, source="command line")
        try:
            train_run(ConfigSections(), flags, Path(out) / f"machine{rank}", command=["dotformer", "train"])
            said = "trained"
        except ConfigError as exc:
            said = str(exc)
        (Path(out) / f"said{rank}.txt").write_text(said)
    finally:
        dist.destroy_process_group()


def test_ranks_given_different_run_directories_stop_with_one_line(tmp_path: Path) -> None:
    """Two machines without a shared file system, each with its own --out: every rank stops with the same line."""
    torch.set_num_threads(1)
    mp.spawn(_separate_out_worker, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    said = [(tmp_path / f"said{rank}.txt").read_text() for rank in (0, 1)]
    for rank in (0, 1):
        expected = f"--out {tmp_path / f'machine{rank}'} must be the same shared directory on every machine: rank 1 "
        assert said[rank] == expected + "cannot read the run.json that rank 0 wrote there"


@pytest.mark.slow
def test_torchrun_cli(tmp_path: Path) -> None:
    """The same `dotformer train` command under torchrun with 2 CPU processes."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    command += ["-m", "dotformer", "train", "--data", "copy", "--preset", "tiny", "--limit", "300"]
    command += ["--max-steps", "4", "--out", str(tmp_path / "run"), "--no-progress", "--device", "cpu"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=CLI_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("trained 4 steps") == 1  # rank 0 alone prints
    state = ckpt.load_train_state(tmp_path / "run" / "last")
    assert state["world_size"] == 2


@pytest.mark.slow
def test_torchrun_with_an_out_directory_per_machine_says_so_on_every_rank(tmp_path: Path) -> None:
    """Two machines without a shared file system, simulated: each torchrun process is given its own --out. Every
    rank says in one line that --out must be one shared directory and exits with 2 (no gloo error)."""
    launcher = tmp_path / "launch.py"
    launcher.write_text(
        "import os, sys\nfrom dotformer.cli import main\n"
        "sys.exit(main(sys.argv[1:] + ['--out', os.environ['OUT_BASE'] + os.environ['RANK']]))\n"
    )
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(launcher)]
    command += ["train", "--data", "copy", "--preset", "tiny", "--limit", "100", "--max-steps", "2"]
    command += ["--no-progress", "--device", "cpu"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OUT_BASE": str(tmp_path / "machine")}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode != 0
    for rank in (0, 1):
        line = (
            f"dotformer train: error: --out {tmp_path / f'machine{rank}'} must be the same shared directory on every "
            "machine: rank 1 cannot read the run.json that rank 0 wrote there"
        )
        assert line in done.stderr.splitlines(), done.stderr[-3000:]
    assert "exitcode  : 2" in done.stderr and "gloo" not in done.stderr.lower()  # torchrun's report of each rank
