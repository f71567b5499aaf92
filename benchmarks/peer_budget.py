"""dotformer against HF Marian at the same wall-clock budget, on the same data, split, tokenizers and batches.

What it does, one system after the other (never both at once: they would share the cores):

1. **dotformer**, through its real command line: ``python -m dotformer train --config CONFIG --out WORK/dotformer
   --max-minutes M --threads T --no-progress``, then ``python -m dotformer average --out WORK/dotformer/averaged
   <the last K of WORK/dotformer/checkpoints/step_*>`` and ``python -m dotformer evaluate --checkpoint
   WORK/dotformer/averaged --split test --json WORK/dotformer_test.json`` (beam 4, its defaults; ``evaluate`` finds the
   run's ``data/test.tsv`` from a checkpoint directory inside the run, as it does for ``best/``). The run refers to its
   prepared training pairs and keeps ``data/valid.tsv``, ``test.tsv`` and the tokenizers (``data/tokenizer_src.json``,
   ``tokenizer_tgt.json``). With ``--average-last 1`` there is no averaging and ``evaluate --checkpoint
   WORK/dotformer/last`` tests the run's last weights; with ``--average-last 0``, ``evaluate --checkpoint
   WORK/dotformer`` tests its ``best/``.
2. **HF Marian** (``transformers.MarianMTModel``), built from a ``MarianConfig`` of the same shape as the dotformer
   run's model (its ``run.json``), random init, trained in this process on exactly those TSV files, encoded with exactly
   those tokenizers, for the same M minutes on the same T threads, then decoded with HF ``generate`` and scored with
   dotformer's own metric functions on the same test pairs (the same seeded ``--limit`` sample, if any), with the
   weights chosen the same way (the mean of its last K snapshots, its last weights, or its best validation pass's).

Which weights are tested (``--average-last K``), and why: each system is tested the way the task's config is meant to
be used. A config that cools the learning rate down to 0 at the end of the budget (``lr_cooldown`` > 0: g2p.toml,
whose last checkpoint ``scripts/g2p.sh`` evaluates) is tested on its **last** weights (default K = 1), and Marian
cools down the same way; otherwise (bible.toml) the default is K = 5: the mean of the last 5 saved checkpoints
(``dotformer average``, the paper's §6.1 trick: the mean of the last few points of the optimiser's path is a better
model than any one of them). Either way both systems are tested alike:

* dotformer saves a checkpoint every ``save_every`` steps of its config (and one at the end) and keeps the last
  ``keep_last``; the benchmark averages the last K of ``checkpoints/step_*`` (``--keep-last K`` is passed when the
  config keeps fewer). Writing them is inside its training clock.
* Marian keeps in memory a CPU copy of its weights at the very same steps (every ``save_every`` steps of the run's
  ``run.json``, and the final step) and tests the element-wise mean of the last K copies (float64 sums, as
  ``dotformer average``). That is what Marian NMT's own users get from its exponential smoothing of the weights
  (``--exponential-smoothing``): a model that is an average over the last stretch of training, not its last or best
  single point. HF has neither, so the benchmark does the averaging for it. The copies cost time inside the budget,
  as dotformer's checkpoint writes do: they are made inside the training clock.
* Fewer than K saved points (a short run) averages those there are; the JSON and the table record which weights were
  tested (``averaged last 5``, ``last``, ``best``) and the averaged steps. ``--save-every N`` overrides the config's
  interval for both systems (short test runs).

Run::

    python benchmarks/peer_budget.py --task g2p --minutes 10 --out benchmarks/results/peer_budget_g2p.json
    python benchmarks/peer_budget.py --task bible --minutes 20 --test-books Matt,Mark,Luke,John \\
        --out benchmarks/results/peer_budget_bible.json
    python benchmarks/peer_budget.py --task g2p --max-steps 5 --limit 20 --corpus-limit 3000   # a smoke run
    python benchmarks/peer_budget.py --task g2p --max-steps 6 --save-every 2 --limit 20 --corpus-limit 3000

Both budgets are training wall-clock time as ``dotformer train`` counts it: from the first step to the last, the
validation passes included; data preparation, model construction and the test decoding are outside it. ``--max-steps``
caps both runs at N steps as well. ``--reuse-dotformer`` keeps an earlier dotformer run and evaluation of the same work
directory and trains only Marian again (to try other Marian settings against the same dotformer result).

Marian's settings, and why (Marian NMT's transformer recipe, as far as it fits a short CPU budget):

* Shape: :func:`dotformer.export.marian.marian_config` of the run's model config: the same d_model, heads, d_ff, layer
  counts, dropout 0.1 on embeddings and sublayer outputs (0 on attention weights and the FFN inside, as dotformer's),
  post-LN, sinusoidal positions, embeddings scaled by √D, the output layer tied to the target embeddings, and one
  embedding shared by both sides where the vocabulary is shared (Bible). Weights: HF's own random init.
* Optimizer: Adam with β = (0.9, 0.98), ε = 1e-9 (Marian NMT's ``--optimizer-params 0.9 0.98 1e-09``, also the
  paper's), PyTorch's fused implementation as dotformer uses.
* Schedule: linear warmup, then 1/√step (Marian NMT's ``--lr-warmup`` + ``--lr-decay-inv-sqrt``). **Not** Marian
  NMT's warmup of 16,000 steps and peak 3e-4: a 10-minute G2P budget is ~1,500 steps on this CPU, so the learning rate
  would still be rising, at a tenth of its peak, when the run ends. Marian takes the dotformer config's warmup and peak
  instead (G2P: 200 steps, 2e-3; Bible: 500 steps, 1e-3), tuned for these budgets (``--marian-warmup``,
  ``--marian-lr-peak`` try others). The config's cooldown too (g2p.toml's ``lr_cooldown = 0.25``): the rate times
  :func:`dotformer.training.schedule.cooldown_factor` of the budget left before each step (minutes, steps or epochs,
  the nearest limit), as ``dotformer train`` computes it.
* Label smoothing 0.1 with ``F.cross_entropy(..., label_smoothing=0.1, ignore_index=PAD)``, what HF users write (a
  Marian model's own ``labels=`` loss has no smoothing); loss summed and divided by the batch's target tokens.
* Gradient norm clipped at the dotformer config's 1.0 (Marian NMT's recipe uses 5; at these high short-budget peaks
  1.0 is the safer choice; ``--marian-clip-norm``).
* Batches: dotformer's :class:`~dotformer.data.batch.batching.BatchSampler` over the same encoded training pairs with
  the same ``max_tokens`` (4096 padded tokens) and seed, so Marian sees the very batches dotformer sees, in the same
  order. Marian computes them padded (HF has no packing); dotformer skips the padding, as ``dotformer train`` does.
* Validation: label-smoothed loss on the valid split every ``eval_every`` steps of the config (500) and at the end; the
  best pass is logged (and kept in memory, as dotformer writes ``best/``); its weights are the ones tested with
  ``--average-last 0``, as dotformer's ``best/``.
* Weight averaging in place of Marian NMT's exponential smoothing (whose 1e-4 factor averages over ~10,000 steps,
  more than a run holds): the mean of the last K snapshots above. Left out: everything a 1-GPU-hour recipe adds
  beyond the above.
* Decoding: beam 4, length penalty 0.6 as HF applies it (score / length^0.6: Marian NMT's ``--normalize 0.6``;
  dotformer's is GNMT's ((5 + L) / 6)^0.6), ``early_stopping="never"`` (stop only when no alive beam can still win,
  dotformer's rule), PAD and BOS suppressed (dotformer forbids them), at most floor(1.0 · S + 50) new tokens for a
  source of S tokens with its EOS, dotformer's rule, exact per sentence because each generate call holds sources of
  one length.

No tuning sweep of Marian at the full budget has been run by this script's author (the machine was busy); the
options above are there for one.

Output: a Markdown table on standard output and ``--out`` JSON (machine, commit, load before each run, settings, both
systems' steps, epochs, tokens/s, minutes, the weights tested, metrics, test sizes, the gaps against each
task's target).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import subprocess
import sys
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from common import command_line, default_output_dir, format_table, git_commit, machine_info, write_json
from torch import nn

from dotformer.config import ModelConfig
from dotformer.data.batch.batching import Batch, BatchSampler, EncodedPair, encode_pairs
from dotformer.data.prepared.splits import load_split
from dotformer.data.read.types import Pair
from dotformer.data.tokenize.tokenizer_files import load_tokenizer
from dotformer.data.tokenize.tokenizers import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from dotformer.decoding.evaluation import group_references, sample_sources
from dotformer.decoding.inputs import source_normaliser
from dotformer.metrics import bleu, chrf, g2p_error_rates, perplexity
from dotformer.runs.run_data import open_run_data
from dotformer.training.progress import Budget, Position, budget_fraction
from dotformer.training.schedule import cooldown_factor, inverse_sqrt_lr


@dataclass(frozen=True)
class TaskSpec:
    """One job of the comparison: which shipped config, which budget, which metrics."""

    config: str  # shipped dotformer config name (configs/NAME.toml)
    minutes: float  # the training budget of each system
    metrics: tuple[str, ...]  # the headline metrics, in table order
    lower_is_better: bool  # WER/PER (True) or BLEU/chrF (False)
    target_gap: float  # the target: dotformer better by at least this much on metrics[0]
    unit: str  # what one test source is


TASKS = {
    "g2p": TaskSpec("g2p", 10.0, ("wer", "per"), True, 5.0, "words"),
    "bible": TaskSpec("bible", 20.0, ("bleu", "chrf"), False, 3.0, "verses"),
}


@dataclass(frozen=True)
class MarianSettings:
    """Marian's training recipe (see the module docstring for each choice)."""

    lr_peak: float  # learning rate at the end of warmup
    warmup_steps: int  # linear warmup, then peak · √(warmup / step)
    clip_norm: float  # global gradient L2 norm limit (0: none)
    label_smoothing: float  # ε of F.cross_entropy
    adam_betas: tuple[float, float]  # Adam β1, β2
    adam_eps: float  # Adam ε
    max_tokens: int  # padded tokens per batch (dotformer's BatchSampler budget)
    seed: int  # batch order (the sampler's) and torch's initial weights and dropout
    eval_every: int  # steps between validation passes (0: only at the end)
    lr_cooldown: float = 0.0  # the final fraction of the budget over which the rate falls linearly to 0 (0: none)
    max_epochs: float | None = None  # the config's epoch limit (a limit of the cooldown's budget, as dotformer's)
    beam: int = 4  # beam size of generate
    length_penalty: float = 0.6  # HF's: score / length^α
    max_len_a: float = 1.0  # at most floor(a · S + b) new tokens (dotformer's rule)
    max_len_b: int = 50
    decode_batch_size: int = 64  # sources per generate call (all of one length)


@dataclass
class SystemResult:
    """One system's training and test figures (one row of the table)."""

    system: str
    steps: int
    epochs: float
    seconds: float  # training wall-clock seconds, validation passes included
    target_tokens: int  # real target tokens trained on
    best_step: int | None  # the validation pass whose weights were tested
    best_valid_loss: float | None  # its label-smoothed loss per token
    metrics: dict[str, float]  # wer/per (+ _no_stress) or bleu/chrf, and perplexity
    num_sources: int  # distinct test sources decoded
    num_pairs: int  # test pairs scored
    unfinished: int  # outputs cut at the maximum length
    weights: str = "best"  # which weights were tested: "best", "last" or "averaged last K"
    averaged_steps: list[int] | None = None  # the steps whose weights were averaged (None: not averaged)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens_per_second(self) -> float:
        return self.target_tokens / self.seconds if self.seconds > 0 else math.nan


@dataclass
class RunData:
    """What the dotformer run wrote and Marian trains on: its record, split and tokenizers."""

    record: dict[str, Any]  # run.json
    model_config: ModelConfig
    train: list[Pair]
    valid: list[Pair]
    test: list[Pair]
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (``--help`` lists it)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--task", choices=sorted(TASKS), default="g2p", help="g2p (CMUdict, WER/PER) or bible (BLEU/chrF)")
    p.add_argument("--minutes", type=float, default=None, help="training budget of each system (default 10 / 20)")
    p.add_argument("--max-steps", type=int, default=None, help="also stop each system after N steps (smoke runs)")
    p.add_argument("--threads", type=int, default=None, help="torch threads of both (default: torch's choice here)")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N: both systems")
    p.add_argument("--limit", type=int, default=None, help="test on a seeded sample of N test sources (both)")
    p.add_argument("--corpus-limit", type=int, default=None, help="dotformer train --limit N: the first N pairs")
    p.add_argument("--test-books", default=None, help="bible: books held out as the test split, e.g. Matt,Mark")
    p.add_argument("--work-dir", type=Path, default=None, help="runs go here (default benchmarks/out/peer_budget_T)")
    p.add_argument("--out", type=Path, default=None, help="JSON results (default benchmarks/out/peer_budget_T.json)")
    p.add_argument("--reuse-dotformer", action="store_true", help="keep WORK/dotformer and its evaluation if there")
    p.add_argument(
        "--average-last",
        type=int,
        default=None,
        metavar="K",
        help="test the mean of the last K saved weights of each system; 1: the last weights;\n"
        "0: dotformer's best/ and Marian's best validation pass (default: 1 when the config has an\n"
        "lr_cooldown, as scripts/g2p.sh tests g2p.toml's last checkpoint, else 5)",
    )
    p.add_argument(
        "--save-every",
        type=int,
        default=None,
        metavar="N",
        help="dotformer train --save-every N, and Marian's snapshot interval (default: the config's)",
    )
    p.add_argument("--marian-lr-peak", type=float, default=None, help="Marian's peak LR (default: the config's)")
    p.add_argument("--marian-warmup", type=int, default=None, help="Marian's warmup steps (default: the config's)")
    p.add_argument("--marian-clip-norm", type=float, default=None, help="Marian's clip norm (default: the config's)")
    args = p.parse_args(argv)
    args.minutes = TASKS[args.task].minutes if args.minutes is None else args.minutes
    args.threads = torch.get_num_threads() if args.threads is None else args.threads
    if args.test_books and args.task != "bible":
        p.error("--test-books is for --task bible")
    for name in ("max_steps", "limit", "corpus_limit", "threads"):
        value = getattr(args, name)
        if value is not None and value < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    if args.minutes <= 0:
        p.error(f"--minutes must be positive, got {args.minutes}")
    if args.average_last is None:
        args.average_last = default_average_last(TASKS[args.task].config)
    if args.average_last < 0:
        p.error(f"--average-last must be at least 0, got {args.average_last}")
    if args.save_every is not None and args.save_every < 0:
        p.error(f"--save-every must be at least 0, got {args.save_every}")
    return args


def default_average_last(config: str) -> int:
    """``--average-last``'s default for a shipped config: 1 (its last weights) when it cools the learning rate down to
    0 at the end of the budget (``lr_cooldown`` > 0), else 5."""
    return 1 if float(config_train_value(config, "lr_cooldown")) > 0 else 5


def tested_weights(average_last: int) -> str:
    """Which weights ``--average-last K`` tests: "averaged" (K >= 2), "last" (1) or "best" (0)."""
    return "averaged" if average_last >= 2 else "last" if average_last == 1 else "best"


def averaging(args: argparse.Namespace) -> bool:
    """True when the last ``--average-last`` saved weights are averaged (K >= 2); else the last (1) or best (0)."""
    return tested_weights(args.average_last) == "averaged"


# -- dotformer: the command line -----------------------------------------------------------------------------------


DOTFORMER_CLI = [sys.executable, "-m", "dotformer"]


def config_train_value(config: str, name: str) -> Any:
    """The ``[train] name`` of a dotformer config (the shipped one of that name), or TrainConfig's default."""
    from dotformer.runs.config_files import read_config_file
    from dotformer.training.config import TrainConfig

    return read_config_file(config).train.get(name, getattr(TrainConfig(), name))


def dotformer_commands(args: argparse.Namespace, work: Path) -> tuple[list[str], list[str]]:
    """The ``dotformer train`` and ``dotformer evaluate`` command lines (run with this Python).

    With averaging, evaluate tests ``WORK/dotformer/averaged`` (see :func:`average_command`), with K = 1 the run's
    ``last/``, with K = 0 the run (its ``best/``); either way ``--split test`` reads the run's ``data/test.tsv``.
    """
    cli = DOTFORMER_CLI
    train = [*cli, "train", "--config", TASKS[args.task].config, "--out", str(work / "dotformer"), "--overwrite"]
    train += ["--max-minutes", f"{args.minutes:g}", "--threads", str(args.threads), "--device", args.device]
    train += ["--no-progress"]
    if args.max_steps is not None:
        train += ["--max-steps", str(args.max_steps)]
    if args.corpus_limit is not None:
        train += ["--limit", str(args.corpus_limit)]
    if args.test_books:
        train += ["--test-books", args.test_books]
    if args.save_every is not None:
        train += ["--save-every", str(args.save_every)]
    if averaging(args) and int(config_train_value(TASKS[args.task].config, "keep_last")) < args.average_last:
        train += ["--keep-last", str(args.average_last)]  # else the older ones are pruned before they are averaged
    weights = tested_weights(args.average_last)
    checkpoint = work / "dotformer" / ("" if weights == "best" else weights)  # the run itself picks its best/
    evaluate = [*cli, "evaluate", "--checkpoint", str(checkpoint), "--split", "test", "--device", args.device]
    evaluate += ["--json", str(work / "dotformer_test.json"), "--hyps", str(work / "dotformer_test.hyp")]
    if args.limit is not None:
        evaluate += ["--limit", str(args.limit), "--seed", "0"]
    return train, evaluate


def average_command(work: Path, k: int) -> tuple[list[str], list[int]]:
    """``dotformer average --overwrite --out WORK/dotformer/averaged`` of the last ``k`` step checkpoints of the run
    (all of them if it saved fewer), and their steps.

    Raises:
        SystemExit: the run saved no step checkpoint.
    """
    from dotformer.checkpoint import step_checkpoints

    paths = step_checkpoints(work / "dotformer" / "checkpoints")[-k:]  # oldest first, as `ls -d ... | tail -n K`
    if not paths:
        raise SystemExit(f"peer_budget: {work / 'dotformer' / 'checkpoints'} holds no step_* checkpoint to average")
    out = work / "dotformer" / "averaged"
    command = [*DOTFORMER_CLI, "average", "--overwrite", "--out", str(out), *map(str, paths)]
    return command, [int(path.name.removeprefix("step_")) for path in paths]


def weights_label(averaged_steps: Sequence[int] | None, average_last: int) -> str:
    """``"averaged last K"`` (K the number of weights averaged), ``"last"`` or ``"best"`` (``--average-last`` 1, 0)."""
    return tested_weights(average_last) if averaged_steps is None else f"averaged last {len(averaged_steps)}"


def run_command(command: list[str], threads: int) -> None:
    """Run ``command`` with ``threads`` OpenMP threads (evaluate has no --threads); its output goes to ours."""
    print("$ " + " ".join(command[2:] if command[1:3] == ["-m", "dotformer"] else command), flush=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    done = subprocess.run(command, env=env)
    if done.returncode:
        raise SystemExit(
            f"peer_budget: dotformer {command[3]} exited with status {done.returncode} (its message above)"
        )


def dotformer_result(
    work: Path, sampler: BatchSampler, averaged_steps: list[int] | None, average_last: int
) -> SystemResult:
    """The dotformer run's figures: training from ``last/train_state.json``, test from evaluate's JSON (of the
    average of the checkpoints of ``averaged_steps``, or when None of ``last/`` or ``best/``: ``average_last`` 1, 0)."""
    state = json.loads((work / "dotformer" / "last" / "train_state.json").read_text())
    evaluation = json.loads((work / "dotformer_test.json").read_text())
    position = state["data"]  # the next batch: (epoch, index)
    epochs = position["epoch"] + position["index"] / sampler.num_batches(position["epoch"])
    return SystemResult(
        system="dotformer",
        steps=int(state["step"]),
        epochs=epochs,
        seconds=float(state["seconds"]),
        target_tokens=int(state["tokens"]),
        best_step=state.get("best_step"),
        best_valid_loss=state.get("best_valid_loss"),
        metrics=dict(evaluation["metrics"]),
        num_sources=int(evaluation["num_sources"]),
        num_pairs=int(evaluation["num_pairs"]),
        unfinished=int(evaluation.get("unfinished", 0)),
        weights=weights_label(averaged_steps, average_last),
        averaged_steps=averaged_steps,
        extra={
            "checkpoint": evaluation.get("checkpoint"),
            "decode": evaluation.get("decode"),
            "signatures": evaluation.get("signatures", {}),
        },
    )


# -- the data both systems use ---------------------------------------------------------------------------------------


def load_run(run_dir: Path) -> RunData:
    """The dotformer run's record, split and tokenizers (the shared vocabulary as one object, as training has it)."""
    record = json.loads((run_dir / "run.json").read_text())
    data = run_dir / "data"
    src = load_tokenizer(data / "tokenizer_src.json")
    tgt = src if record["data"].get("shared_vocab") else load_tokenizer(data / "tokenizer_tgt.json")
    return RunData(
        record=record,
        model_config=ModelConfig.from_dict(record["model"]),
        train=list(open_run_data(run_dir).training_pairs()),  # type: ignore[union-attr]
        valid=load_split(data, "valid"),
        test=load_split(data, "test"),
        src_tokenizer=src,
        tgt_tokenizer=tgt,
    )


def endless_batches(sampler: BatchSampler) -> Iterator[tuple[float, Batch]]:
    """(epochs done after it, batch) for every batch of epoch 0, 1, 2, ...: dotformer's training order."""
    epoch = 0
    while True:
        count = sampler.num_batches(epoch)
        for index, batch in enumerate(sampler.iter_batches(epoch)):
            yield epoch + (index + 1) / count, batch
        epoch += 1


# -- Marian: build, train, decode ------------------------------------------------------------------------------------


def build_marian(config: ModelConfig, seed: int) -> nn.Module:
    """A randomly initialised ``MarianMTModel`` of ``config``'s shape (HF's init), in training mode."""
    from transformers import MarianMTModel

    from dotformer.export.marian import marian_config

    torch.manual_seed(seed)
    return MarianMTModel(marian_config(config, bos_id=BOS_ID, eos_id=EOS_ID)).train()


def marian_logits(model: nn.Module, batch: Batch) -> torch.Tensor:
    """(B, T, V) logits of ``model`` on a padded batch, called as HF's documentation shows."""
    mask = batch.src != PAD_ID  # (B, S) True at real source tokens
    return model(input_ids=batch.src, attention_mask=mask, decoder_input_ids=batch.tgt_in, use_cache=False).logits


def loss_sums(logits: torch.Tensor, gold: torch.Tensor, label_smoothing: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed label-smoothed loss and summed NLL over the non-PAD positions of (B, T, V) logits and (B, T) gold."""
    flat = logits.reshape(-1, logits.size(-1))  # (B·T, V) in float32, or float64 for a float64 model
    flat, target = flat.to(torch.promote_types(flat.dtype, torch.float32)), gold.reshape(-1)  # (B·T,)
    loss = F.cross_entropy(flat, target, ignore_index=PAD_ID, label_smoothing=label_smoothing, reduction="sum")
    nll = F.cross_entropy(flat.detach(), target, ignore_index=PAD_ID, reduction="sum")
    return loss, nll


@torch.no_grad()
def marian_valid(model: nn.Module, batches: Sequence[Batch], label_smoothing: float, device: str) -> dict[str, float]:
    """Label-smoothed loss and NLL per target token over ``batches`` (eval mode, then back to training mode)."""
    model.eval()
    loss = nll = tokens = 0.0
    for batch in batches:
        batch = batch.to(device)
        sums = loss_sums(marian_logits(model, batch), batch.tgt_out, label_smoothing)
        loss, nll, tokens = loss + float(sums[0]), nll + float(sums[1]), tokens + batch.num_tgt_tokens
    model.train()
    return {"loss": loss / tokens, "nll": nll / tokens, "tokens": int(tokens)}


def cpu_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """A CPU copy of ``model``'s state dict (tied names copied once and kept shared, as a checkpoint stores them)."""
    copies: dict[tuple[int, torch.Size], torch.Tensor] = {}
    weights = {}
    for name, tensor in model.state_dict().items():
        key = (tensor.data_ptr(), tensor.shape)
        if key not in copies:
            copies[key] = tensor.detach().to("cpu", copy=True)
        weights[name] = copies[key]
    return weights


def mean_weights(snapshots: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The element-wise mean of state dicts, as ``dotformer average`` computes it: floating tensors summed in float64
    and cast back, other tensors taken from the last."""
    last = snapshots[-1]
    mean = {}
    for name, tensor in last.items():
        if tensor.is_floating_point():
            total = torch.stack([snapshot[name].double() for snapshot in snapshots]).sum(0)
            mean[name] = (total / len(snapshots)).to(tensor.dtype)
        else:
            mean[name] = tensor
    return mean


def marian_lr(settings: MarianSettings, budget: Budget, done: Position) -> float:
    """The learning rate of the next update after ``done`` (steps, seconds, epochs done): warmup, then 1/√step
    (``inverse_sqrt``), times the cooldown factor of the budget left (1 when ``settings.lr_cooldown`` is 0), as
    ``dotformer train`` computes it before each update."""
    lr = inverse_sqrt_lr(done.step + 1, settings.lr_peak, settings.warmup_steps)
    if settings.lr_cooldown:
        used = budget_fraction(budget, done)
        lr *= cooldown_factor(1.0 if used is None else 1.0 - used, settings.lr_cooldown)
    return lr


def train_marian(
    model: nn.Module,
    sampler: BatchSampler,
    valid_batches: Sequence[Batch],
    settings: MarianSettings,
    minutes: float,
    max_steps: int | None,
    device: str,
    save_every: int = 0,
    average_last: int = 0,
) -> dict[str, Any]:
    """Train until ``minutes`` of wall-clock (validation included) or ``max_steps``; load the weights to test.

    With ``average_last`` K >= 2, a CPU copy of the weights is kept at every ``save_every`` steps (dotformer's
    checkpoint steps; 0: none) and at the final step, the copying inside the clock (as dotformer's checkpoint writes
    are), and the mean of the last K copies is loaded; with K = 1 the last weights stay; with K = 0 the best
    validation pass's weights are loaded. The learning rate follows ``settings`` (warmup, 1/√step, and the cooldown
    over the final ``lr_cooldown`` of the budget: ``minutes``, ``max_steps`` or the config's ``max_epochs``).

    Returns:
        steps, epochs, seconds, target_tokens, stopped_by, best_step, best_valid_loss, the validation log, and
        averaged_steps (the steps of the averaged copies; None: the last or the best weights were tested).
    """
    fused = device.split(":")[0] in ("cpu", "cuda")
    optimizer = torch.optim.Adam(
        model.parameters(), lr=0.0, betas=settings.adam_betas, eps=settings.adam_eps, fused=fused
    )
    step, tokens, epochs = 0, 0, 0.0
    best: dict[str, Any] = {"loss": math.inf, "step": None, "weights": None}
    log: list[dict[str, Any]] = []
    averaging = tested_weights(average_last) == "averaged"
    snapshots: deque[tuple[int, dict[str, torch.Tensor]]] = deque(maxlen=max(1, average_last))
    budget = Budget(max_steps, minutes, settings.max_epochs)
    started = time.monotonic()

    def validate() -> None:
        result = marian_valid(model, valid_batches, settings.label_smoothing, device)
        improved = result["loss"] < best["loss"]
        if improved:
            best.update(loss=result["loss"], step=step, weights=copy.deepcopy(model.state_dict()))
        log.append({"step": step, "epoch": round(epochs, 4), **result, "best": improved})
        shown = f"step {step}: valid loss {result['loss']:.4f}, ppl {math.exp(min(result['nll'], 700.0)):.3f}"
        print(f"marian: {shown}" + (" (best)" if improved else ""), file=sys.stderr, flush=True)

    batches = endless_batches(sampler)
    while True:
        if max_steps is not None and step >= max_steps:
            stopped_by = "max_steps"
            break
        if time.monotonic() - started >= minutes * 60:
            stopped_by = "max_minutes"
            break
        epochs, batch = next(batches)
        batch = batch.to(device)
        lr = marian_lr(settings, budget, Position(step, time.monotonic() - started, epochs))
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad(set_to_none=True)
        loss, _nll = loss_sums(marian_logits(model, batch), batch.tgt_out, settings.label_smoothing)
        loss = loss / batch.num_tgt_tokens
        if not math.isfinite(float(loss.detach())):
            raise RuntimeError(f"marian: step {step + 1}: the training loss is {float(loss.detach())} (lr {lr:.3g})")
        loss.backward()
        if settings.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), settings.clip_norm)
        optimizer.step()
        step += 1
        tokens += batch.num_tgt_tokens
        if settings.eval_every and step % settings.eval_every == 0:
            validate()
        if averaging and save_every and step % save_every == 0:
            snapshots.append((step, cpu_weights(model)))
    if not log or log[-1]["step"] != step:
        validate()
    if averaging and (not snapshots or snapshots[-1][0] != step):
        snapshots.append((step, cpu_weights(model)))  # the final step's, as dotformer's last save
    seconds = time.monotonic() - started
    if averaging:
        averaged_steps: list[int] | None = [at for at, _ in snapshots]
        model.load_state_dict(mean_weights([weights for _, weights in snapshots]))
    else:
        averaged_steps = None
        if tested_weights(average_last) == "best":
            model.load_state_dict(best["weights"])
    model.eval()
    return {
        "steps": step,
        "epochs": epochs,
        "seconds": seconds,
        "target_tokens": tokens,
        "stopped_by": stopped_by,
        "best_step": best["step"],
        "best_valid_loss": best["loss"],
        "valid_log": log,
        "averaged_steps": averaged_steps,
    }


@torch.no_grad()
def marian_translate(
    model: nn.Module, sources: Sequence[str], run: RunData, settings: MarianSettings, device: str
) -> list[tuple[str, bool]]:
    """(text, finished) of HF ``generate``'s best beam for every source, in order.

    Sources are normalised as dotformer's decoding normalises them, encoded with the run's source tokenizer, and
    decoded in calls that each hold sources of one length S (EOS included), so the limit floor(a · S + b) new tokens
    is dotformer's per-sentence rule exactly.
    """
    from transformers import GenerationConfig

    normalise = source_normaliser({"dataset": run.record.get("dataset")})
    ids = [[*run.src_tokenizer.encode(normalise(s)), EOS_ID] for s in sources]
    by_length: dict[int, list[int]] = {}
    for i, row in enumerate(ids):
        by_length.setdefault(len(row), []).append(i)
    results: list[tuple[str, bool]] = [("", False)] * len(sources)
    for length, members in sorted(by_length.items()):
        limit = max(1, math.floor(settings.max_len_a * length + settings.max_len_b))
        config = GenerationConfig(
            num_beams=settings.beam,
            length_penalty=settings.length_penalty,
            early_stopping="never",
            max_new_tokens=limit,
            do_sample=False,
            num_return_sequences=1,
            suppress_tokens=[PAD_ID, BOS_ID],
            decoder_start_token_id=BOS_ID,
            bos_token_id=BOS_ID,
            eos_token_id=EOS_ID,
            pad_token_id=PAD_ID,
        )
        for start in range(0, len(members), settings.decode_batch_size):
            chunk = members[start : start + settings.decode_batch_size]
            src = torch.tensor([ids[i] for i in chunk], dtype=torch.int64, device=device)  # (B, S), no padding
            out = model.generate(input_ids=src, attention_mask=torch.ones_like(src), generation_config=config)
            for i, row in zip(chunk, out[:, 1:].tolist(), strict=True):  # drop the decoder start (BOS)
                finished = EOS_ID in row
                body = row[: row.index(EOS_ID)] if finished else row
                results[i] = (run.tgt_tokenizer.decode(body), finished)
    return results


@torch.no_grad()
def marian_perplexity(model: nn.Module, pairs: Sequence[Pair], run: RunData, device: str) -> float:
    """Teacher-forced perplexity of the test references (no smoothing, EOS included), as dotformer evaluate's."""
    examples = encode_pairs(pairs, run.src_tokenizer, run.tgt_tokenizer)
    batches = BatchSampler(examples, max_tokens=4096, shuffle=False).batches(0)
    result = marian_valid(model, batches, 0.0, device)
    model.eval()
    return perplexity(result["nll"] * result["tokens"], result["tokens"])


def score(task: str, pairs: Sequence[Pair], output_of: dict[str, str]) -> dict[str, float]:
    """dotformer evaluate's metrics of one output per distinct source: a G2P word against all its pronunciations;
    a verse against its reference (one hypothesis per pair)."""
    if task == "g2p":
        grouped = group_references(pairs)
        best = [output_of[source] for source in grouped.sources]
        kept = g2p_error_rates(best, grouped.references, strip_stress=False)
        stripped = g2p_error_rates(best, grouped.references, strip_stress=True)
        return {"wer": kept.wer, "per": kept.per, "wer_no_stress": stripped.wer, "per_no_stress": stripped.per}
    hyps, refs = [output_of[pair.source] for pair in pairs], [pair.target for pair in pairs]
    return {"bleu": bleu(hyps, refs).score, "chrf": chrf(hyps, refs).score}


def run_marian(
    run: RunData,
    test_pairs: Sequence[Pair],
    sampler: BatchSampler,
    valid_batches: Sequence[Batch],
    settings: MarianSettings,
    args: argparse.Namespace,
    work: Path,
) -> SystemResult:
    """Build, train, decode and score Marian; save its tested weights (the average, the last or the best) and test
    outputs under ``WORK/marian``."""
    from transformers.utils import logging as hf_logging

    model = build_marian(run.model_config, settings.seed).to(args.device)
    inner = model.get_decoder().embed_tokens.weight
    tied = model.get_output_embeddings().weight.data_ptr() == inner.data_ptr()
    shared = model.get_encoder().embed_tokens.weight.data_ptr() == inner.data_ptr()
    save_every = run.record["train"]["save_every"]  # dotformer's checkpoint interval (--save-every included)
    trained = train_marian(
        model,
        sampler,
        valid_batches,
        settings,
        args.minutes,
        args.max_steps,
        args.device,
        save_every,
        args.average_last,
    )
    sources = group_references(test_pairs).sources
    outputs = marian_translate(model, sources, run, settings, args.device)
    output_of = {source: text for source, (text, _) in zip(sources, outputs, strict=True)}
    metrics = score(args.task, test_pairs, output_of)
    metrics["perplexity"] = marian_perplexity(model, test_pairs, run, args.device)
    (work / "marian").mkdir(parents=True, exist_ok=True)
    hf_logging.disable_progress_bar()  # save_pretrained's one-shard bar
    model.save_pretrained(str(work / "marian"))
    (work / "marian_test.hyp").write_text("".join(output_of[pair.source] + "\n" for pair in test_pairs))
    extra = {
        "stopped_by": trained["stopped_by"],
        "snapshot_every": save_every,
        "valid_log": trained["valid_log"],
        "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "tied_output": tied,
        "shared_embeddings": shared,
    }
    return SystemResult(
        system="marian",
        steps=trained["steps"],
        epochs=trained["epochs"],
        seconds=trained["seconds"],
        target_tokens=trained["target_tokens"],
        best_step=trained["best_step"],
        best_valid_loss=trained["best_valid_loss"],
        metrics=metrics,
        num_sources=len(sources),
        num_pairs=len(test_pairs),
        unfinished=sum(not finished for _, finished in outputs),
        weights=weights_label(trained["averaged_steps"], args.average_last),
        averaged_steps=trained["averaged_steps"],
        extra=extra,
    )


# -- report ----------------------------------------------------------------------------------------------------------


def table_rows(task: str, results: Sequence[SystemResult]) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows and columns of the Markdown table."""
    spec = TASKS[task]
    names = {"wer": "WER %", "per": "PER %", "bleu": "BLEU", "chrf": "chrF"}
    columns = ["system", "weights", "steps", "epochs", "tgt tokens/s", "minutes"]
    columns += [names[m] for m in spec.metrics] + ["ppl", f"test {spec.unit}", "test pairs", "unfinished"]
    rows = []
    for r in results:
        row = {
            "system": r.system,
            "weights": r.weights,
            "steps": r.steps,
            "epochs": r.epochs,
            "tgt tokens/s": round(r.tokens_per_second),
        }
        row.update({"minutes": r.seconds / 60, "ppl": r.metrics.get("perplexity")})
        row.update({names[m]: r.metrics[m] for m in spec.metrics})
        row.update({f"test {spec.unit}": r.num_sources, "test pairs": r.num_pairs, "unfinished": r.unfinished})
        rows.append(row)
    return rows, columns


def target_check(task: str, dotformer: SystemResult, marian: SystemResult) -> dict[str, Any]:
    """dotformer's lead on the headline metric against the task's target (positive: dotformer better)."""
    spec = TASKS[task]
    metric = spec.metrics[0]
    lead = marian.metrics[metric] - dotformer.metrics[metric]
    lead = lead if spec.lower_is_better else -lead
    return {"metric": metric, "dotformer_lead": lead, "target": spec.target_gap, "met": lead >= spec.target_gap}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    spec = TASKS[args.task]
    work = args.work_dir or default_output_dir() / f"peer_budget_{args.task}"
    out = args.out or default_output_dir() / f"peer_budget_{args.task}.json"
    work.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.threads)
    machine = machine_info(args.device)
    train_cmd, eval_cmd = dotformer_commands(args, work)

    load_before = {"dotformer": machine["load_average_1m"]}
    reused = args.reuse_dotformer and (work / "dotformer" / "last" / "train_state.json").is_file()
    if not reused:
        run_command(train_cmd, args.threads)
    run = load_run(work / "dotformer")
    train_config = run.record["train"]
    budget = (train_config["max_minutes"], train_config["max_steps"])
    if reused and budget != (args.minutes, args.max_steps):
        raise SystemExit(
            f"peer_budget: {work / 'dotformer'} was trained with --max-minutes {budget[0]} --max-steps {budget[1]}, "
            f"not {args.minutes:g} / {args.max_steps}: drop --reuse-dotformer or give its budget"
        )
    if reused and args.save_every is not None and train_config["save_every"] != args.save_every:
        raise SystemExit(
            f"peer_budget: {work / 'dotformer'} saved every {train_config['save_every']} steps, not "
            f"--save-every {args.save_every}: drop --reuse-dotformer or give its interval"
        )
    average_cmd, averaged_steps = average_command(work, args.average_last) if averaging(args) else (None, None)
    tested = {"average_last": args.average_last, "averaged_steps": averaged_steps, "limit": args.limit}
    marker = work / "dotformer_test_weights.json"  # which weights dotformer_test.json is of
    evaluation_reused = (
        reused
        and (work / "dotformer_test.json").is_file()
        and marker.is_file()
        and json.loads(marker.read_text()) == tested
    )
    if not evaluation_reused:  # a reused run is averaged and evaluated again unless it was with these settings
        marker.unlink(missing_ok=True)
        if average_cmd is not None:
            run_command(average_cmd, args.threads)
        run_command(eval_cmd, args.threads)
        marker.write_text(json.dumps(tested) + "\n")
    test_pairs = sample_sources(run.test, args.limit, seed=0)  # evaluate --limit N --seed 0 draws this sample
    settings = MarianSettings(
        lr_peak=train_config["lr_peak"] if args.marian_lr_peak is None else args.marian_lr_peak,
        warmup_steps=train_config["warmup_steps"] if args.marian_warmup is None else args.marian_warmup,
        clip_norm=train_config["clip_norm"] if args.marian_clip_norm is None else args.marian_clip_norm,
        label_smoothing=train_config["label_smoothing"],
        adam_betas=(0.9, 0.98),
        adam_eps=1e-9,
        max_tokens=train_config["max_tokens"],
        seed=train_config["seed"],
        eval_every=train_config["eval_every"],
        lr_cooldown=float(train_config.get("lr_cooldown", 0.0)),
        max_epochs=train_config.get("max_epochs"),
    )
    examples = encode_pairs(run.train, run.src_tokenizer, run.tgt_tokenizer)
    sampler = BatchSampler(examples, settings.max_tokens, settings.seed)  # dotformer's training batches and order
    valid_examples: list[EncodedPair] = encode_pairs(run.valid, run.src_tokenizer, run.tgt_tokenizer)
    valid_batches = BatchSampler(valid_examples, settings.max_tokens, settings.seed, shuffle=False).batches(0)
    dotformer = dotformer_result(work, sampler, averaged_steps, args.average_last)

    load_before["marian"] = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None
    print(f"$ marian: {settings}", flush=True)
    marian = run_marian(run, test_pairs, sampler, valid_batches, settings, args, work)
    if (marian.num_sources, marian.num_pairs) != (dotformer.num_sources, dotformer.num_pairs):
        raise RuntimeError(
            f"the test sets differ: dotformer {dotformer.num_sources} sources / {dotformer.num_pairs} pairs, "
            f"marian {marian.num_sources} / {marian.num_pairs}"
        )

    rows, columns = table_rows(args.task, [dotformer, marian])
    check = target_check(args.task, dotformer, marian)
    print()
    print(format_table(rows, columns))
    print(
        "\nWeights tested: "
        + "; ".join(
            f"{r.system} {r.weights}" + (f" (steps {r.averaged_steps})" if r.averaged_steps else "")
            for r in (dotformer, marian)
        )
        + "."
    )
    verb = "met" if check["met"] else "NOT met"
    same = (settings.warmup_steps, settings.lr_peak) == (train_config["warmup_steps"], train_config["lr_peak"])
    whose = "the dotformer config's" if same else "given by flags, not the dotformer config's"
    print(
        f"\ndotformer's lead on {check['metric']}: {check['dotformer_lead']:+.2f} points (target >= "
        f"{check['target']:g}: {verb}). Marian's warmup {settings.warmup_steps} and peak LR {settings.lr_peak:g} are "
        f"{whose} (Marian NMT's 16k-step warmup cannot work in {args.minutes:g} minutes)."
    )
    payload = {
        "benchmark": "peer_budget",
        "task": args.task,
        "command": command_line(),
        "commit": git_commit(),
        "machine": machine,
        "load_average_1m_before": load_before,
        "budget": {"minutes": args.minutes, "max_steps": args.max_steps, "threads": args.threads},
        "weights": {
            "average_last": args.average_last,
            "save_every": train_config["save_every"],
            "keep_last": train_config.get("keep_last"),
            "tested": {r.system: r.weights for r in (dotformer, marian)},
        },
        "dotformer_commands": {
            "train": train_cmd[1:],
            "average": average_cmd[1:] if average_cmd is not None else None,
            "evaluate": eval_cmd[1:],
            "reused": reused,
            "evaluation_reused": evaluation_reused,
        },
        "data": {
            "config": spec.config,
            "test_books": args.test_books,
            "corpus_limit": args.corpus_limit,
            "test_limit": args.limit,
            "pairs": {"train": len(run.train), "valid": len(run.valid), "test": len(run.test)},
            "split_files": str(work / "dotformer" / "data"),
        },
        "model": run.model_config.to_dict(),
        "marian_settings": {
            **asdict(settings),
            "schedule": "inverse_sqrt",
            "loss": "F.cross_entropy(label_smoothing, ignore_index=PAD), sum / target tokens",
            "init": "HF MarianPreTrainedModel._init_weights (random)",
            "note": "warmup and peak LR are the dotformer config's: Marian NMT's 16000-step warmup (peak 3e-4) "
            "would leave the learning rate rising for the whole budget",
        },
        "systems": {
            r.system: {**asdict(r), "tokens_per_second": r.tokens_per_second, "minutes": r.seconds / 60}
            for r in (dotformer, marian)
        },
        "target": check,
    }
    write_json(out, payload)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
