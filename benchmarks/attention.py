"""Reference vs fused attention: time and peak memory as the length T = S grows.

    python benchmarks/attention.py                      # CPU, lengths 256..4096, then fused-only at 24576
    python benchmarks/attention.py --quick              # a few seconds
    python benchmarks/attention.py --device cuda --dtype bfloat16 --lengths 1024,4096,16384,65536

The reference (:func:`dotformer.attention.scaled_dot_product_attention`) materialises the (B, H, T, S) score and
weight matrices; the fused path (:func:`dotformer.attention.fused_attention`, PyTorch's SDPA kernels) does not on its
flash / memory-efficient backends. Past the length where the reference's matrices would not fit (in the memory that
is available, or under ``--max-reference-gib``) the reference is reported as "skipped: needs X" and only the fused
path runs, which shows that it never builds the T×S matrix.

Memory: on CUDA, ``torch.cuda.max_memory_allocated`` above the memory in use before the call; on CPU, the process's
resident set size sampled every millisecond (peak minus baseline), next to an analytic count of the bytes the
reference must hold (2 × B·H·T·S elements: the scores and the softmax weights). See ``benchmarks/common.py``.

Writes a table to stdout and JSON to ``benchmarks/out/attention.json`` (or ``--json PATH``).
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import torch
from common import (
    GIB,
    available_memory_bytes,
    command_line,
    default_output_dir,
    format_bytes,
    format_table,
    machine_info,
    measure_peak_memory,
    time_ms,
    write_json,
)

from dotformer.attention import fused_attention, scaled_dot_product_attention
from dotformer.masks import causal_mask

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DEFAULT_LENGTHS = "256,512,1024,2048,4096"
DEFAULT_BIG_LENGTH = 24576
QUICK_LENGTHS = "128,256,512,1024"
QUICK_BIG_LENGTH = 8192
QUICK_MAX_REFERENCE_GIB = 0.25


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; see the module docstring."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N] (default cpu)")
    p.add_argument("--lengths", default=None, help=f"comma-separated T = S values (default {DEFAULT_LENGTHS})")
    p.add_argument(
        "--big-length",
        type=int,
        default=None,
        help=f"one more length run after --lengths, where the reference is expected not to fit "
        f"(default {DEFAULT_BIG_LENGTH}; 0 to skip)",
    )
    p.add_argument("--batch", type=int, default=1, help="B, sentences per batch (default 1)")
    p.add_argument("--heads", type=int, default=8, help="H, attention heads (default 8)")
    p.add_argument("--head-dim", type=int, default=64, help="Dh, the head size (default 64)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float32", help="tensor dtype (default float32)")
    p.add_argument(
        "--causal", action="store_true", help="causal attention (reference: explicit mask; fused: is_causal)"
    )
    p.add_argument(
        "--max-reference-gib",
        type=float,
        default=None,
        help="skip the reference when its matrices would need more than this (default: 80%% of the memory available)",
    )
    p.add_argument("--budget-s", type=float, default=1.5, help="seconds of timed repeats per measurement (default 1.5)")
    p.add_argument(
        "--json", default=None, help="where to write the JSON results (default benchmarks/out/attention.json)"
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"lengths {QUICK_LENGTHS}, big length {QUICK_BIG_LENGTH}, "
        f"reference limit {QUICK_MAX_REFERENCE_GIB} GiB: a smoke test of a few seconds",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed of the inputs")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    return p.parse_args(argv)


def reference_bytes(B: int, H: int, T: int, S: int, element_size: int) -> int:
    """Bytes the reference holds at its peak: the (B, H, T, S) scores and the (B, H, T, S) weights."""
    return 2 * B * H * T * S * element_size


def measure(fn, device: torch.device, budget_s: float) -> dict[str, Any]:
    """One call measured for peak memory (it also warms up), then timed repeats filling about ``budget_s``."""
    start = time.perf_counter()
    memory = measure_peak_memory(fn, device)
    first_ms = (time.perf_counter() - start) * 1000.0
    repeats = int(min(10, budget_s * 1000.0 / max(first_ms, 1e-3)))
    if repeats >= 1:
        timing = time_ms(fn, device, repeats=repeats, warmup=0)
        median, best, n = timing.median_ms, timing.min_ms, timing.repeats
    else:  # a single call already took longer than the budget: report it (it includes warm-up effects)
        median, best, n = first_ms, first_ms, 1
    return {
        "ms": median,
        "best_ms": best,
        "repeats": n,
        "peak_bytes": memory.peak_bytes,
        "memory_method": memory.method,
    }


def run_length(args: argparse.Namespace, T: int, limit_bytes: int, limit_reason: str) -> dict[str, Any]:
    """Benchmark both paths at T = S; the reference only if its matrices fit under ``limit_bytes``."""
    device, dtype = torch.device(args.device), DTYPES[args.dtype]
    B, H, Dh = args.batch, args.heads, args.head_dim
    g = torch.Generator(device="cpu").manual_seed(args.seed)
    q, k, v = (torch.randn(B, H, T, Dh, generator=g).to(device=device, dtype=dtype) for _ in range(3))
    element = torch.finfo(dtype).bits // 8
    need = reference_bytes(B, H, T, T, element)
    row: dict[str, Any] = {
        "T": T,
        "S": T,
        "weights_matrix_bytes": need // 2,  # one (B, H, T, S) matrix
        "reference_needs_bytes": need,
        "output_bytes": B * H * T * Dh * element,
    }
    mask = causal_mask(T, device=device) if args.causal else None

    def fused() -> torch.Tensor:
        return fused_attention(q, k, v, is_causal=args.causal)

    def reference() -> torch.Tensor:
        return scaled_dot_product_attention(q, k, v, mask).output

    with torch.inference_mode():
        f = measure(fused, device, args.budget_s)
        row.update(fused_ms=f["ms"], fused_best_ms=f["best_ms"], fused_repeats=f["repeats"])
        row["fused_peak_bytes"] = f["peak_bytes"]
        row["memory_method"] = f["memory_method"]
        if need > limit_bytes:
            row["reference_status"] = (
                f"skipped: needs {format_bytes(need)} > {format_bytes(limit_bytes)} ({limit_reason})"
            )
            row.update(reference_ms=None, reference_best_ms=None, reference_peak_bytes=None)
            row.update(max_abs_diff=None, speedup=None)
        else:
            r = measure(reference, device, args.budget_s)
            row["reference_status"] = "ran"
            row.update(reference_ms=r["ms"], reference_best_ms=r["best_ms"], reference_repeats=r["repeats"])
            row["reference_peak_bytes"] = r["peak_bytes"]
            row["speedup"] = r["best_ms"] / f["best_ms"] if f["best_ms"] > 0 else math.nan
            row["max_abs_diff"] = float((fused().float() - reference().float()).abs().max()) if T > 0 else 0.0
    return row


def table_rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The results as display strings for :func:`format_table`."""
    rows = []
    for r in results:
        ran = r["reference_status"] == "ran"
        rows.append(
            {
                "T = S": r["T"],
                "T×S matrix": format_bytes(r["weights_matrix_bytes"]),
                "reference ms": f"{r['reference_best_ms']:.1f}" if ran else "-",
                "reference peak": format_bytes(r["reference_peak_bytes"]) if ran else r["reference_status"],
                "fused ms": f"{r['fused_best_ms']:.1f}",
                "fused peak": format_bytes(r["fused_peak_bytes"]),
                "fused speed-up": f"{r['speedup']:.2f}x" if ran else "-",
                "max |diff|": f"{r['max_abs_diff']:.1e}" if ran else "-",
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table, write the JSON; returns the exit status."""
    args = parse_args(argv)
    if args.quick:
        args.lengths = args.lengths or QUICK_LENGTHS
        args.big_length = QUICK_BIG_LENGTH if args.big_length is None else args.big_length
        args.max_reference_gib = args.max_reference_gib or QUICK_MAX_REFERENCE_GIB
    lengths = [int(x) for x in (args.lengths or DEFAULT_LENGTHS).split(",") if x.strip()]
    big = DEFAULT_BIG_LENGTH if args.big_length is None else args.big_length
    if big > 0:
        lengths.append(big)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    available = available_memory_bytes(device)
    if args.max_reference_gib is not None:
        limit, reason = int(args.max_reference_gib * GIB), "--max-reference-gib"
    else:
        limit, reason = int(0.8 * available), f"80% of the {format_bytes(available)} available"

    machine = machine_info(device)
    print(f"# attention: reference vs fused  ({command_line()})")
    print(
        f"# {machine['date']}, commit {machine['commit']}, torch {machine['torch']}, device {device}"
        f" ({machine.get('gpu', machine['cpu'])}, {machine['torch_threads']} threads, "
        f"load average {machine['load_average_1m']})"
    )
    print(
        f"# B={args.batch} H={args.heads} Dh={args.head_dim} dtype={args.dtype} causal={args.causal}; "
        f"reference limit {format_bytes(limit)} ({reason})"
    )
    results = []
    for T in lengths:
        results.append(run_length(args, T, limit, reason))
        r = results[-1]
        print(f"  T={T}: fused {r['fused_best_ms']:.1f} ms, reference {r['reference_status']}", flush=True)
    method = results[0]["memory_method"] if results else "none"
    print()
    print(format_table(table_rows(results), list(table_rows(results[:1])[0]) if results else []))
    print()
    print("Times: the fastest of the timed calls (median in the JSON); speed-up = reference / fused.")
    if method == "rss-sampled":
        print(
            "Peak memory: process RSS sampled every ~1 ms during one call, minus the RSS before it (an estimate; "
            "'T×S matrix' is the exact size of one (B, H, T, S) matrix, the reference holds two)."
        )
    else:
        print("Peak memory: torch.cuda.max_memory_allocated during one call, minus the memory allocated before it.")
    payload = {
        "benchmark": "attention",
        "command": command_line(),
        "machine": machine,
        "settings": {
            "batch": args.batch,
            "heads": args.heads,
            "head_dim": args.head_dim,
            "dtype": args.dtype,
            "causal": args.causal,
            "reference_limit_bytes": limit,
            "reference_limit_reason": reason,
            "budget_s": args.budget_s,
            "seed": args.seed,
        },
        "memory_method": method,
        "results": results,
    }
    path = write_json(args.json or default_output_dir() / "attention.json", payload)
    print(f"JSON: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
