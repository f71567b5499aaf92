"""Training throughput: one optimizer step of dotformer vs ``torch.nn.Transformer`` vs HF Marian, side by side.

One step = forward, label-smoothed cross-entropy (ε = 0.1, PAD ignored), backward, Adam (β = 0.9, 0.98, ε = 1e-9;
PyTorch's fused implementation for all three, 5x faster than its default on this CPU at the base size).
The three models have identical sizes and see identical batches (same ids, same right padding, see
:func:`peers.make_batch`); all are in training mode with dropout 0.1 on the same places and no attention dropout.
dotformer uses its own loss (:func:`dotformer.training.loss.label_smoothed_cross_entropy`); the peers use
``F.cross_entropy(..., label_smoothing=0.1, ignore_index=PAD)``, what their users write.
``dotformer`` runs the way ``dotformer train`` does, packed (:mod:`dotformer.packing`: every layer and the generator
skip the PAD positions); ``dotformer_padded`` is the same model on the padded batch (``--no-packed``), which shows what
packing is worth in the same run.

The runs are interleaved: every model gets warm-up steps, then the timed repetitions alternate between the models
(in a rotating order), so machine noise hits all of them alike. We report medians and the ratio dotformer / peer.

Figures:

* target tokens/s = real (non-PAD) target tokens of the batch / median step time.
* model TFLOP/s = 3 · F_fwd / median step time, where F_fwd is the analytic matmul count of one forward pass over
  the padded batch (:func:`peers.forward_flops`; backward ≈ 2 · forward)::

      F_fwd = N_enc · (8·B·S·D² + 4·B·S²·D + 4·B·S·D·F)
            + N_dec · (12·B·T·D² + 4·B·S·D² + 4·B·T²·D + 4·B·T·S·D + 4·B·T·D·F)
            + 2·B·T·D·V

* ``ratio_paired``: the median over rounds of (peer's time / dotformer's time) within the same round, where the two
  runs were seconds apart and saw about the same machine load.
* CPU time: the CPU seconds the process used during the step (all threads), a second view that other processes
  on the machine disturb less than wall time; ``ratio_cpu`` = peer CPU time / dotformer CPU time.
* peak memory: the highest resident set size during one step minus the size before it (sampled every ms, see
  ``common.measure_peak_memory``), on CUDA ``max_memory_allocated``.

Run: ``python benchmarks/training.py`` (``--quick`` for a short check, ``--configs small`` for one size,
``--configs long`` for the small model on 4 sentences of 1024 tokens, where the peers' (B·H, T, S) attention masks
start to cost memory).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from common import (
    command_line,
    default_output_dir,
    format_bytes,
    format_table,
    machine_info,
    measure_peak_memory,
    synchronize,
    write_json,
)
from peers import PAD, Batch, build_model, describe, forward_flops, gold_tokens, make_batch, peer_logits

from dotformer import ModelConfig
from dotformer.training.loss import label_smoothed_cross_entropy

MODELS = ("dotformer", "torch", "marian", "dotformer_padded")


@dataclass(frozen=True)
class Setting:
    """One benchmarked size: a model preset and the batch shape."""

    name: str  # label in the tables
    preset: str  # ModelConfig preset
    vocab: int  # V for source and target
    batch_size: int  # B sentences
    src_len: int  # S, longest source
    tgt_len: int  # T, longest target

    def config(self) -> ModelConfig:
        """The model configuration (paper sizes for the preset, dropout 0.1)."""
        return ModelConfig.preset(self.preset, src_vocab_size=self.vocab, tgt_vocab_size=self.vocab)


SETTINGS = {
    "tiny": Setting("tiny", "tiny", 1000, 8, 16, 16),
    "small": Setting("small", "small", 8000, 32, 32, 32),
    "base": Setting("base", "base", 32000, 16, 32, 32),
    "long": Setting("long", "small", 8000, 4, 1024, 1024),  # long inputs: attention and its masks grow as L²
}


def make_step(name: str, model: torch.nn.Module, batch: Batch, autocast: torch.dtype | None) -> Callable[[], float]:
    """A function running one optimizer step of ``model`` on ``batch``; returns the loss per target token."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)
    device_type = batch.src.device.type

    def loss_of(logits: torch.Tensor) -> torch.Tensor:
        if name.startswith("dotformer"):
            return label_smoothed_cross_entropy(logits, gold_tokens(name, batch), epsilon=0.1, pad_id=PAD).loss
        V = logits.size(-1)
        return F.cross_entropy(
            logits.reshape(-1, V).float(),
            batch.tgt_out.reshape(-1),
            ignore_index=PAD,
            label_smoothing=0.1,
            reduction="sum",
        )

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        context = torch.autocast(device_type, dtype=autocast) if autocast is not None else contextlib.nullcontext()
        with context:
            logits = peer_logits(name, model, batch)  # (B, T, V); dotformer: (N_T, V), see peers.py
            loss = loss_of(logits) / batch.num_tgt_tokens
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    return step


def interleaved_times(
    steps: dict[str, Callable[[], Any]], repeats: int, warmup: int, device: str
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Warm each step up, then time ``repeats`` rounds, each round running every step once in a rotating order.

    Returns:
        Per name, the wall-clock seconds of each timed call, and the CPU seconds this process used during it (all
        threads; less sensitive than wall time to other processes competing for the cores).
    """
    for fn in steps.values():
        for _ in range(warmup):
            fn()
    synchronize(device)
    names = list(steps)
    samples: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        order = names[r % len(names) :] + names[: r % len(names)]
        for n in order:
            start, start_cpu = time.perf_counter(), time.process_time()
            steps[n]()
            synchronize(device)
            samples[n].append(time.perf_counter() - start)
            cpu[n].append(time.process_time() - start_cpu)
    return samples, cpu


def run_setting(setting: Setting, repeats: int, warmup: int, device: str, dtype: str, models: tuple[str, ...]) -> list:
    """Benchmark every model of ``models`` at one setting; one result row per model."""
    config = setting.config()
    batch = make_batch(setting.batch_size, setting.src_len, setting.tgt_len, setting.vocab, setting.vocab, seed=0)
    batch = batch.to(device)
    autocast = torch.bfloat16 if dtype == "bf16" else None
    built = {n: build_model(n, config).to(device) for n in models}
    steps = {n: make_step(n, built[n], batch, autocast) for n in models}
    memory = {}
    for n in models:
        steps[n]()  # first call: allocations, kernels chosen
        memory[n] = measure_peak_memory(steps[n], device)
    samples, cpu = interleaved_times(steps, repeats, warmup, device)
    flops = 3 * forward_flops(config, setting.batch_size, setting.src_len, setting.tgt_len)
    rows = []
    for n in models:
        median_s = statistics.median(samples[n])
        rows.append(
            {
                "setting": setting.name,
                "dtype": dtype,
                "model": n,
                "ms_per_step": median_s * 1000,
                "min_ms": min(samples[n]) * 1000,
                "cpu_ms_per_step": statistics.median(cpu[n]) * 1000,
                "tgt_tokens_per_s": batch.num_tgt_tokens / median_s,
                "tflops": flops / median_s / 1e12,
                "peak_memory_bytes": memory[n].peak_bytes,
                "memory_method": memory[n].method,
                "parameters": sum(p.numel() for p in built[n].parameters()),
                "samples_ms": [s * 1000 for s in samples[n]],
            }
        )
    ours = rows[0] if models[0] == "dotformer" else None
    for row in rows:
        row["dotformer_over_this"] = ours["tgt_tokens_per_s"] / row["tgt_tokens_per_s"] if ours else None
        row["dotformer_over_this_cpu"] = row["cpu_ms_per_step"] / ours["cpu_ms_per_step"] if ours else None
        row["dotformer_over_this_paired"] = (
            statistics.median(p / d for p, d in zip(samples[row["model"]], samples["dotformer"], strict=True))
            if ours
            else None
        )
    return [
        {
            **row,
            "sizes": describe(config),
            "batch": {
                "B": setting.batch_size,
                "S": setting.src_len,
                "T": setting.tgt_len,
                "tgt_tokens": batch.num_tgt_tokens,
                "src_tokens": batch.num_src_tokens,
            },
        }
        for row in rows
    ]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse the command line, run the benchmark, print the table and write ``out/training.json``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", default="small,base", help="comma-separated: tiny, small, base, long")
    parser.add_argument("--repeats", type=int, default=7, help="timed rounds (each runs every model once)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per model before timing")
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32", help="bf16: autocast for every model")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of " + ", ".join(MODELS))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, 2 rounds: checks that it runs")
    parser.add_argument("--out", default=str(default_output_dir() / "training.json"))
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    names = ["tiny"] if args.quick else args.configs.split(",")
    repeats, warmup = (2, 1) if args.quick else (args.repeats, args.warmup)
    models = tuple(args.models.split(","))
    rows = []
    for name in names:
        rows += run_setting(SETTINGS[name], repeats, warmup, args.device, args.dtype, models)
    table = format_table(
        [
            {
                **r,
                "peak_memory": format_bytes(r["peak_memory_bytes"]),
                "ratio": r["dotformer_over_this"],
                "ratio_cpu": r["dotformer_over_this_cpu"],
                "ratio_paired": r["dotformer_over_this_paired"],
            }
            for r in rows
        ],
        ["setting", "dtype", "model", "tgt_tokens_per_s", "ms_per_step", "tflops", "peak_memory"]
        + ["ratio", "ratio_paired", "ratio_cpu"],
    )
    print(table)
    payload = {"benchmark": "training", "command": command_line(), "machine": machine_info(args.device), "rows": rows}
    write_json(args.out, payload)
    print(f"wrote {args.out}")
    return payload


if __name__ == "__main__":
    main()
