"""Data parallelism on CPU with 2 gloo processes: half the batch each gives the update of the full batch."""

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
from dotformer.data.batching import BatchSampler, collate, encode_pairs, example_length
from dotformer.data.corpora import CorpusOptions, load_pairs
from dotformer.data.tokenizers import train_tokenizer
from dotformer.model import Transformer
from dotformer.training.config import TrainConfig
from dotformer.training.distributed import DistContext
from dotformer.training.loop import TrainData, fit, train_step
from dotformer.training.optim import build_optimizer

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
        losses = [train_step(ddp, optimizer, [batch], s, config, 16, 0, context).loss for s in range(1, STEPS + 1)]
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
    losses = [train_step(model, optimizer, [batch], s, config, 16).loss for s in range(1, STEPS + 1)]
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
