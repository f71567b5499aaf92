"""Every GPU benchmark in one prepared script, about 6 minutes on one H200 (bf16), with its own time limit.

    python benchmarks/gpu.py                    # CUDA if present, else CPU with tiny sizes (a correctness run)
    python benchmarks/gpu.py --time-limit 330   # seconds; sections that would not fit are skipped, never cut

Sections (on CUDA; the CPU fallback runs the same code at tiny sizes):

1. training: one optimizer step (forward, label-smoothed loss, backward, Adam) of dotformer vs ``torch.nn.Transformer``
   (+ embeddings, sinusoids, tied generator) vs HF Marian, paper-base sizes (6+6 layers, D 512, 8 heads, F 2048,
   V 32000), a batch of 128 sentences of 128 source and 128 target tokens (with padding), bf16 autocast; interleaved
   rounds, medians. Then dotformer under ``torch.compile`` (compile time reported separately).
2. decoding: 64 sentences, 64 new tokens, greedy and beam 4, dotformer vs HF ``generate`` on the same weights
   (:func:`dotformer.export.marian.to_marian`), both in bf16.
3. long inputs: peak memory and time of one dotformer training step at S = T = 1024 / 2048 / 4096 (B = 4), reference
   vs fused attention does not apply here (the model always uses the fused kernel): the figure shows that memory grows
   about linearly in the length, not quadratically.

Needs PyTorch; transformers is optional (its rows are skipped without it). No internet is used. Writes
``$OUT/gpu.json`` when the environment variable OUT is set, else ``benchmarks/out/gpu.json``; prints a short table
last.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


class Clock:
    """The script's time budget: sections ask it whether their estimated cost still fits."""

    def __init__(self, limit_s: float) -> None:
        self.start = time.perf_counter()
        self.limit_s = limit_s

    def left(self) -> float:
        """Seconds left before the limit."""
        return self.limit_s - (time.perf_counter() - self.start)

    def fits(self, estimate_s: float) -> bool:
        """Whether a section estimated at ``estimate_s`` seconds fits in what is left (with a 10 % margin)."""
        return estimate_s * 1.1 < self.left()


def sizes(on_gpu: bool) -> dict[str, Any]:
    """The benchmark sizes: the paper's base model on a GPU, tiny ones on a CPU (a correctness run)."""
    if on_gpu:
        return dict(
            preset="base",
            vocab=32000,
            train_batch=(128, 128, 128),
            decode_batch=(64, 32, 64),
            long_lengths=(1024, 2048, 4096),
            long_batch=4,
            repeats=10,
            warmup=3,
        )
    return dict(
        preset="tiny",
        vocab=500,
        train_batch=(4, 12, 12),
        decode_batch=(2, 8, 6),
        long_lengths=(32, 64),
        long_batch=2,
        repeats=1,
        warmup=1,
    )


def interleave(fns: dict[str, Callable[[], Any]], repeats: int, warmup: int, sync: Callable[[], None]) -> dict:
    """Warm each up, then ``repeats`` rounds running each once in a rotating order; per name, the seconds taken."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    sync()
    names = list(fns)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            start = time.perf_counter()
            fns[n]()
            sync()
            samples[n].append(time.perf_counter() - start)
    return samples


def section_training(ctx: dict[str, Any], clock: Clock, rows: list[dict[str, Any]]) -> None:
    """Training throughput of dotformer, torch.nn.Transformer and HF Marian (bf16 autocast), then torch.compile."""
    import torch
    from peers import build_model, forward_flops, make_batch
    from training import make_step

    device, s, config = ctx["device"], ctx["sizes"], ctx["config"]
    B, S, T = s["train_batch"]
    batch = make_batch(B, S, T, s["vocab"], s["vocab"], seed=0)
    batch = batch.to(device)
    names = ["dotformer", "torch"] + (["marian"] if ctx["has_transformers"] else [])
    models = {n: build_model(n, config).to(device) for n in names}
    steps = {n: make_step(n, models[n], batch, ctx["autocast"]) for n in names}
    samples = interleave(steps, s["repeats"], s["warmup"], ctx["sync"])
    flops = 3 * forward_flops(config, B, S, T)
    for n in names:
        median = statistics.median(samples[n])
        rows.append(
            {
                "section": "training",
                "system": n,
                "tokens_per_s": batch.num_tgt_tokens / median,
                "ms": median * 1000,
                "tflops": flops / median / 1e12,
            }
        )
    del steps, models
    if not ctx["compile"]:
        rows.append({"section": "training", "system": "dotformer+compile", "note": "skipped (use --compile)"})
        return
    if not clock.fits(ctx["compile_estimate_s"]):
        rows.append({"section": "training", "system": "dotformer+compile", "note": "skipped: out of time"})
        return
    model = build_model("dotformer", config).to(device)
    compiled = torch.compile(model)
    step = make_step("dotformer", compiled, batch, ctx["autocast"])
    start = time.perf_counter()
    step()
    ctx["sync"]()
    compile_s = time.perf_counter() - start
    samples = interleave({"compiled": step}, s["repeats"], s["warmup"], ctx["sync"])
    median = statistics.median(samples["compiled"])
    rows.append(
        {
            "section": "training",
            "system": "dotformer+compile",
            "tokens_per_s": batch.num_tgt_tokens / median,
            "ms": median * 1000,
            "tflops": flops / median / 1e12,
            "note": f"first step (compile) {compile_s:.0f} s",
        }
    )


def section_decoding(ctx: dict[str, Any], clock: Clock, rows: list[dict[str, Any]]) -> None:
    """Greedy and beam-4 decoding: dotformer vs HF generate on the same weights (bf16 on CUDA)."""
    import torch
    from decoding import dotformer_system, hf_system
    from peers import make_batch

    from dotformer import Transformer

    device, s, config = ctx["device"], ctx["sizes"], ctx["config"]
    B, S, new_tokens = s["decode_batch"]
    torch.manual_seed(0)
    model = Transformer(config).eval()
    marian = None
    if ctx["has_transformers"]:
        from dotformer.export.marian import to_marian

        marian = to_marian(model).to(device=device, dtype=ctx["dtype"])
    model = model.to(device=device, dtype=ctx["dtype"])
    src = make_batch(B, S, 2, s["vocab"], s["vocab"], seed=1).src.to(device)
    for search, beam in (("greedy", 1), ("beam4", 4)):
        systems = {"dotformer": dotformer_system(model, src, new_tokens, beam)}
        if marian is not None:
            systems["hf_generate"] = hf_system(marian, src, new_tokens, beam)
        outputs = {n: run() for n, run in systems.items()}
        samples = interleave(systems, max(3, s["repeats"] // 2), 1, ctx["sync"])
        for n in systems:
            median = statistics.median(samples[n])
            agree = sum(a == b for a, b in zip(outputs["dotformer"], outputs[n], strict=True)) / B
            rows.append(
                {
                    "section": f"decoding {search}",
                    "system": n,
                    "tokens_per_s": sum(len(o) for o in outputs[n]) / median,
                    "ms": median * 1000,
                    "note": f"agree {agree:.2f}",
                }
            )


def section_long(ctx: dict[str, Any], clock: Clock, rows: list[dict[str, Any]]) -> None:
    """Peak memory and time of one dotformer training step at long inputs (S = T)."""
    from common import measure_peak_memory
    from peers import build_model, make_batch
    from training import make_step

    device, s, config = ctx["device"], ctx["sizes"], ctx["config"]
    model = build_model("dotformer", config.replace(max_len=max(s["long_lengths"]))).to(device)
    for length in s["long_lengths"]:
        if not clock.fits(ctx["long_estimate_s"]):
            rows.append({"section": "long inputs", "system": f"dotformer L={length}", "note": "skipped: out of time"})
            continue
        batch = make_batch(s["long_batch"], length, length, s["vocab"], s["vocab"], seed=2, min_fraction=1.0)
        batch = batch.to(device)
        step = make_step("dotformer", model, batch, ctx["autocast"])
        step()
        memory = measure_peak_memory(step, device)
        samples = interleave({"step": step}, 3, 0, ctx["sync"])
        rows.append(
            {
                "section": "long inputs",
                "system": f"dotformer L={length}",
                "ms": statistics.median(samples["step"]) * 1000,
                "peak_gib": memory.peak_bytes / 2**30,
                "note": memory.method,
            }
        )


def main(argv: list[str] | None = None) -> int:
    """Run every section that fits in the time limit, print the table, write the JSON; 0 unless a section failed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--time-limit", type=float, default=340.0, help="seconds for the whole script (default 340)")
    parser.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    parser.add_argument(
        "--compile", choices=("auto", "on", "off"), default="auto", help="torch.compile variant (auto: on CUDA only)"
    )
    parser.add_argument("--out", default=None, help="JSON path (default $OUT/gpu.json or benchmarks/out/gpu.json)")
    args = parser.parse_args(argv)
    clock = Clock(args.time_limit)

    sys.path.insert(0, str(HERE))  # common.py, peers.py, training.py, decoding.py
    sys.path.insert(1, str(HERE.parent / "src"))  # dotformer, when it is not installed
    import torch
    from common import format_table, machine_info, write_json

    from dotformer import ModelConfig

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    on_gpu = torch.device(device).type == "cuda"
    if on_gpu:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    s = sizes(on_gpu)
    try:
        import transformers  # noqa: F401

        has_transformers = True
    except ImportError:
        has_transformers = False
    ctx: dict[str, Any] = {
        "device": device,
        "sizes": s,
        "config": ModelConfig.preset(s["preset"], src_vocab_size=s["vocab"], tgt_vocab_size=s["vocab"]),
        "autocast": torch.bfloat16,
        "dtype": torch.bfloat16 if on_gpu else torch.float32,
        "sync": (lambda: torch.cuda.synchronize()) if on_gpu else (lambda: None),
        "has_transformers": has_transformers,
        "compile": args.compile == "on" or (args.compile == "auto" and on_gpu),
        "compile_estimate_s": 120.0 if on_gpu else 60.0,
        "long_estimate_s": 20.0 if on_gpu else 2.0,
    }
    estimates = {"training": 60.0 if on_gpu else 5.0, "decoding": 90.0 if on_gpu else 5.0, "long inputs": 30.0}
    sections = {"training": section_training, "decoding": section_decoding, "long inputs": section_long}
    rows: list[dict[str, Any]] = []
    failed = False
    for name, section in sections.items():
        if not clock.fits(estimates[name]):
            rows.append({"section": name, "note": f"skipped: {clock.left():.0f} s left"})
            continue
        started = time.perf_counter()
        try:
            section(ctx, clock, rows)
        except Exception as exc:  # keep going: one broken section must not lose the others' figures
            failed = True
            traceback.print_exc()
            rows.append({"section": name, "note": f"FAILED: {type(exc).__name__}: {exc}"[:200]})
        print(f"[gpu.py] {name}: {time.perf_counter() - started:.0f} s, {clock.left():.0f} s left", flush=True)
        if on_gpu:
            torch.cuda.empty_cache()

    out = Path(args.out) if args.out else Path(os.environ.get("OUT") or HERE / "out") / "gpu.json"
    payload = {
        "benchmark": "gpu",
        "machine": machine_info(device),
        "sizes": {k: list(v) if isinstance(v, tuple) else v for k, v in s.items()},
        "elapsed_s": round(args.time_limit - clock.left(), 1),
        "rows": rows,
    }
    with contextlib.suppress(OSError):
        write_json(out, payload)
        print(f"wrote {out}")
    print(format_table(rows, ["section", "system", "tokens_per_s", "ms", "tflops", "peak_gib", "note"]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
