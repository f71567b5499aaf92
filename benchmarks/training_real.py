"""A training step on real batches (the G2P and Bible configs' own) and on unpadded ones, against the peers, with each
step's achieved FLOP/s beside this machine's own matmul ceiling.

Batches:

* ``g2p`` / ``bible``: the first ``--batches`` batches of a run's training data exactly as ``dotformer train`` cuts
  them (the run's prepared training pairs, :class:`dotformer.data.batch.batching.BatchSampler` with the config's
  ``max_tokens``, epoch 0), at the run's model sizes (``--g2p-run`` / ``--bible-run``: a run directory);
* ``g2p_unpadded`` / ``small_unpadded``: random batches without padding (:func:`peers.make_batch` with every
  sentence at full length) at the G2P size and at ``small``, where packing saves nothing and the step itself is
  compared.

Models and the step are ``training.py``'s (:func:`training.make_step`: forward, label-smoothed loss, backward, fused
Adam; dotformer packed as ``dotformer train`` runs, ``torch.nn.Transformer`` and HF Marian at identical sizes, see
``peers.py``); timings are interleaved the same way (:func:`training.interleaved_times`). One "step" here runs every
listed batch once.

FLOP/s: 3 · F_fwd (:func:`peers.forward_flops` over each padded batch, the work a padded implementation does; packed
dotformer skips some of it) / median step time, beside the ceiling: the FLOP/s of a (2048 × 2048) · (2048 × 2048)
``torch.mm`` measured in the same run and threads (in bf16 with ``--dtype bf16``, where every model runs under bf16
autocast as ``dotformer train --amp bf16`` does). ``dotformer_padded`` is dotformer on the padded batch
(``--no-packed``). ``cpu_ratio`` / ``wall_ratio``: the peer's time over dotformer's (> 1: dotformer faster), by CPU
time of the process and by wall time; on a loaded machine read the CPU ratio.

Run: ``python benchmarks/training_real.py --g2p-run runs/g2p --bible-run runs/bible`` (``--quick``: 1-2 minutes).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from common import command_line, default_output_dir, format_table, machine_info, write_json
from peers import Batch, build_model, forward_flops, make_batch
from training import interleaved_times, make_step

from dotformer import ModelConfig

MODELS = ("dotformer", "dotformer_padded", "torch", "marian")  # dotformer_padded: --no-packed


def matmul_ceiling(n: int = 2048, repeats: int = 3, dtype: torch.dtype = torch.float32) -> float:
    """FLOP per CPU second of one large ``torch.mm`` (n × n by n × n) in ``dtype``, the best of ``repeats``."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        torch.mm(a, b)
        best = min(best, time.process_time() - start)
    return 2 * n**3 / best  # per CPU second: process time sums the threads, as the steps' figures do


def run_batches(run: Path, count: int) -> tuple[ModelConfig, list[Batch]]:
    """The model config of run directory ``run`` and the first ``count`` batches of its training data (epoch 0)."""
    import json

    from dotformer.data.batch.batching import BatchSampler
    from dotformer.runs.run_data import open_run_data

    record = json.loads((run / "run.json").read_text())
    model = {k: v for k, v in record["model"].items() if k in ModelConfig.__dataclass_fields__}
    config = ModelConfig(**model)
    max_tokens = record.get("train", {}).get("max_tokens", 1024)
    examples = open_run_data(run).splits["train"]  # the run's prepared training pairs, memory-mapped
    sampler = BatchSampler(examples, max_tokens=max_tokens, seed=record.get("train", {}).get("seed", 1))
    batches = sampler.batches(0)[:count]
    return config, [Batch(b.src, b.tgt_in, b.tgt_out, b.num_tgt_tokens, b.num_src_tokens) for b in batches]


def unpadded_batches(config: ModelConfig, batch_size: int, length: int, count: int) -> list[Batch]:
    """``count`` random batches of ``batch_size`` sentences, all of ``length`` tokens (no padding)."""
    S, V = config.src_vocab_size, config.tgt_vocab_size
    return [make_batch(batch_size, length, length, S, V, seed=i, min_fraction=1.0) for i in range(count)]


def measure(
    name: str, config: ModelConfig, batches: list[Batch], repeats: int, warmup: int, ceiling: float, dtype: str
) -> list:
    """One row per model: a step over every batch, interleaved, with FLOP/s and ratios to dotformer (``dtype``
    "bf16": every model under bf16 autocast, as ``dotformer train --amp bf16``)."""
    built = {m: build_model(m, config) for m in MODELS}
    autocast = torch.bfloat16 if dtype == "bf16" else None
    per_batch = {m: [make_step(m, built[m], b, autocast) for b in batches] for m in MODELS}
    steps = {m: (lambda fns=fns: [fn() for fn in fns]) for m, fns in per_batch.items()}
    wall, cpu = interleaved_times(steps, repeats, warmup, "cpu")
    flops = sum(3 * forward_flops(config, b.src.size(0), b.src.size(1), b.tgt_in.size(1)) for b in batches)
    tokens = sum(b.num_tgt_tokens for b in batches)
    padded = sum(b.tgt_out.numel() for b in batches)
    rows = []
    for m in MODELS:
        cpu_s, wall_s = statistics.median(cpu[m]), statistics.median(wall[m])
        rows.append(
            {
                "batches": name,
                "dtype": dtype,
                "model": m,
                "tgt_tokens_per_s": tokens / wall_s,
                "cpu_tgt_tokens_per_s": tokens / cpu_s,
                "gflops_cpu": flops / cpu_s / 1e9,
                "ceiling_gflops": ceiling / 1e9,
                "of_ceiling": flops / cpu_s / ceiling,
                "cpu_ratio": cpu_s / statistics.median(cpu["dotformer"]),
                "wall_ratio": wall_s / statistics.median(wall["dotformer"]),
                "target_padding": 1 - tokens / padded,
                "num_batches": len(batches),
                "wall_s": wall[m],
                "cpu_s": cpu[m],
            }
        )
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse the command line, run the benchmark, print the table and write ``out/training_real.json``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--g2p-run", default=None, help="a G2P run directory (its data/ and run.json)")
    parser.add_argument("--bible-run", default=None, help="a Bible run directory (skipped without one)")
    parser.add_argument("--batches", type=int, default=4, help="real batches per step")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (each runs every model once)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps per model before timing")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32", help="bf16: autocast for every model")
    parser.add_argument("--quick", action="store_true", help="2 batches, 2 rounds, no small_unpadded")
    parser.add_argument("--out", default=str(default_output_dir() / "training_real.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    count, repeats = (2, 2) if args.quick else (args.batches, args.repeats)
    ceiling = matmul_ceiling(dtype=torch.bfloat16 if args.dtype == "bf16" else torch.float32)
    g2p_config = ModelConfig(
        d_model=128,
        num_heads=4,
        d_ff=512,
        num_encoder_layers=3,
        num_decoder_layers=3,
        dropout=0.0,
        src_vocab_size=33,
        tgt_vocab_size=43,
    )  # the G2P default's sizes (configs/g2p.toml, CMUdict vocabularies)
    settings: list[tuple[str, ModelConfig, list[Batch]]] = []
    for name, run in (("g2p", args.g2p_run), ("bible", args.bible_run)):
        if run is not None:
            config, batches = run_batches(Path(run), count)
            settings.append((name, config, batches))
            g2p_config = config if name == "g2p" else g2p_config
    settings.append(("g2p_unpadded", g2p_config, unpadded_batches(g2p_config, 64, 12, count)))
    if not args.quick:
        small = ModelConfig.preset("small", src_vocab_size=8000, tgt_vocab_size=8000)
        settings.append(("small_unpadded", small, unpadded_batches(small, 32, 32, count)))
    rows = []
    for name, config, batches in settings:
        rows += measure(name, config, batches, repeats, args.warmup, ceiling, args.dtype)
    columns = ["batches", "dtype", "model", "tgt_tokens_per_s", "cpu_tgt_tokens_per_s", "gflops_cpu", "ceiling_gflops"]
    print(format_table(rows, [*columns, "of_ceiling", "target_padding", "cpu_ratio", "wall_ratio"]))
    print("cpu_ratio / wall_ratio: the model's step time over dotformer's (> 1: dotformer faster)")
    payload = {
        "benchmark": "training_real",
        "command": command_line(),
        "machine": machine_info("cpu"),
        "matmul_ceiling_flops": ceiling,
        "rows": rows,
    }
    write_json(args.out, payload)
    print(f"wrote {args.out}")
    return payload


if __name__ == "__main__":
    main()
