"""dotformer's language model beside HF GPT-2 of the same size, on the same tokens, batches and budget.

One system after the other (never both at once: they would share the cores):

1. **dotformer**, through its command line: ``python -m dotformer train --config CONFIG --out WORK/dotformer
   --max-minutes M --threads T --no-progress`` (configs/lm-bible.toml by default: the KJV, characters, 4 layers,
   4 heads, 128 wide). The run writes its text split and tokenizer (``data/``) and its validation NLL per token at
   every ``eval_every`` steps (``metrics.jsonl``).
2. **HF GPT-2** (``transformers.GPT2LMHeadModel``, the ``bench`` extra), built from a ``GPT2Config`` of the run's
   shape (layers, heads, width, feed-forward size and activation, block size, dropout, tied output), random init,
   trained in this process on exactly the run's training text, tokenizer and blocks (the same
   :class:`~dotformer.data.batch.blocks.BlockSampler` order: seed, block size, tokens per batch), with dotformer's Adam
   settings, learning-rate schedule, cooldown and gradient clipping, for the same minutes on the same threads, and
   validated on the same blocks of the same validation text every ``eval_every`` steps, inside its clock as
   dotformer's passes are.

Both are reported as validation nats per token and bits per character against steps and minutes (a JSON file and a
table). The models differ where GPT-2 differs from the lesson: GPT-2 always has learned positions, pre-LN layers
with a final LayerNorm and unscaled embeddings (the activation, sizes, dropout and tied output follow the config).
Measure on an idle machine; the smoke run only checks that it runs.

Run::

    python benchmarks/lm_peer.py --minutes 10 --out benchmarks/results/lm_peer.json
    python benchmarks/lm_peer.py --max-steps 4 --eval-every 2 --config tiny-lm.toml --data corpus.txt   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from common import command_line, format_table, git_commit, machine_info, write_json

from dotformer.data.batch.blocks import BlockSampler, TokenStream, encode_text
from dotformer.data.tokenize.tokenizer_files import load_tokenizer
from dotformer.data.tokenize.tokenizers import BOS_ID, EOS_ID, PAD_ID
from dotformer.runs.run_data import open_run_data
from dotformer.runs.text import load_text_split
from dotformer.training.config import TrainConfig
from dotformer.training.optim import build_optimizer
from dotformer.training.schedule import cooldown_factor, learning_rate

COLUMNS = ["system", "step", "minutes", "nats_per_token", "bits_per_char"]


def train_dotformer(args: argparse.Namespace, run: Path) -> None:
    """``dotformer train`` of the config into ``run`` (the budget and threads of the benchmark)."""
    command = [sys.executable, "-m", "dotformer", "train", "--config", args.config, "--out", str(run), "--overwrite"]
    command += ["--threads", str(args.threads), "--no-progress"]
    command += ["--max-minutes", str(args.minutes)] if args.minutes else []
    command += ["--max-steps", str(args.max_steps)] if args.max_steps else []
    command += ["--eval-every", str(args.eval_every)] if args.eval_every else []
    command += ["--data", args.data] if args.data else []
    command += ["--limit", str(args.corpus_limit)] if args.corpus_limit else []
    subprocess.run(command, check=True, env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})


def dotformer_curve(run: Path, chars_per_token: float) -> list[dict[str, Any]]:
    """(step, minutes, nats/token, bits/char) of every validation pass of the run (minutes: of the nearest logged
    training step at or before it)."""
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    clock = {r["step"]: r["elapsed_s"] for r in records if r["split"] == "train"}
    points = []
    for r in (r for r in records if r["split"] == "valid"):
        seconds = max((s for step, s in clock.items() if step <= r["step"]), default=0.0)
        points.append(point("dotformer", r["step"], seconds, r["nll"], chars_per_token))
    return points


def point(system: str, step: int, seconds: float, nats: float, chars_per_token: float) -> dict[str, Any]:
    return {"system": system, "step": step, "minutes": round(seconds / 60, 3), "nats_per_token": round(nats, 4),
            "bits_per_char": round(nats / math.log(2) / chars_per_token, 4)}  # fmt: skip


def gpt2_of(model: dict[str, Any]) -> torch.nn.Module:
    """A random-init ``GPT2LMHeadModel`` of the dotformer run's shape (its run.json ``model``)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=model["tgt_vocab_size"], n_positions=model["max_len"], n_embd=model["d_model"],
        n_layer=model["num_decoder_layers"], n_head=model["num_heads"], n_inner=model["d_ff"],
        activation_function="relu" if model["activation"] == "relu" else "gelu",
        resid_pdrop=model["dropout"], embd_pdrop=model["dropout"], attn_pdrop=model["attention_dropout"],
        layer_norm_epsilon=model["layer_norm_eps"], tie_word_embeddings=model["tie_output"],
        initializer_range=model["init_std"] or 0.02, bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID,
    )  # fmt: skip
    return GPT2LMHeadModel(config)


def gpt2_nll(model: torch.nn.Module, batches: list[Any]) -> float:
    """Mean NLL per token of the validation blocks (eval mode, no gradients)."""
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in batches:
            logits = model(input_ids=batch.tgt_in).logits  # (B, T, V)
            total += F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), reduction="sum").item()
            count += batch.tgt_out.numel()
    model.train()
    return total / count


def train_gpt2(
    args: argparse.Namespace, record: dict[str, Any], train: TokenStream, valid: TokenStream, chars_per_token: float
) -> list[dict[str, Any]]:
    """GPT-2 on the run's blocks with the run's recipe, under the same budget; its validation curve."""
    torch.manual_seed(record["train"]["seed"])
    config = TrainConfig.from_dict(record["train"], "run.json [train]")
    model = gpt2_of(record["model"])
    optimizer = build_optimizer(model, config)
    sampler = BlockSampler(train, config.max_tokens, config.seed)
    valid_batches = BlockSampler(valid, config.max_tokens, shuffle=False).batches(0)
    budget_s = args.minutes * 60 if args.minutes else math.inf
    eval_every = args.eval_every or config.eval_every
    points, step, epoch, started = [], 0, 0, time.monotonic()
    while True:
        for batch in sampler.iter_batches(epoch):
            elapsed = time.monotonic() - started
            left = min(1 - elapsed / budget_s, 1 - step / args.max_steps if args.max_steps else 1.0)
            if left <= 0:
                if not points or points[-1]["step"] != step:  # the final pass, unless the last one was at this step
                    points.append(point("gpt2", step, elapsed, gpt2_nll(model, valid_batches), chars_per_token))
                return points
            step += 1
            lr = learning_rate(step, config, record["model"]["d_model"]) * cooldown_factor(left, config.lr_cooldown)
            for group in optimizer.param_groups:
                group["lr"] = lr
            logits = model(input_ids=batch.tgt_in).logits  # (B, T, V)
            loss = F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if config.clip_norm > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm)
            optimizer.step()
            if step % eval_every == 0:
                seconds = time.monotonic() - started
                points.append(point("gpt2", step, seconds, gpt2_nll(model, valid_batches), chars_per_token))
        epoch += 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="lm-bible", help="a language-model config (default: lm-bible)")
    parser.add_argument("--data", default=None, help="another text for the config (a file, bible, bible:WEB)")
    parser.add_argument("--minutes", type=float, default=None, help="training minutes of each system")
    parser.add_argument("--max-steps", type=int, default=None, help="steps of each system (also a budget)")
    parser.add_argument("--eval-every", type=int, default=None, help="validation every N steps (the config's)")
    parser.add_argument("--corpus-limit", type=int, default=None, help="only the first N training lines")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads of each system (2)")
    parser.add_argument("--work-dir", type=Path, default=Path("runs/lm_peer"), help="where the runs go")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()
    if not (args.minutes or args.max_steps):
        parser.error("give a budget: --minutes and/or --max-steps")
    torch.set_num_threads(args.threads)
    run = args.work_dir / "dotformer"
    train_dotformer(args, run)
    record = json.loads((run / "run.json").read_text())
    tokenizer = load_tokenizer(run / "data" / "tokenizer_tgt.json")
    block = record["data"]["block_size"]
    valid_lines = load_text_split(run / "data", "valid")
    train_lines = list(open_run_data(run).training_lines())  # type: ignore[union-attr]
    train, valid = encode_text(train_lines, tokenizer, block), encode_text(valid_lines, tokenizer, block)
    chars_per_token = (sum(len(line) + 1 for line in valid_lines) - 1) / (len(valid) - 1)
    points = dotformer_curve(run, chars_per_token) + train_gpt2(args, record, train, valid, chars_per_token)
    print(format_table(points, COLUMNS))
    if args.out is not None:
        payload = {"command": command_line(), "commit": git_commit(), "machine": machine_info("cpu"),
                   "config": args.config, "threads": args.threads, "points": points}  # fmt: skip
        write_json(args.out, payload)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
