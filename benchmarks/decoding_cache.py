"""Decoding speed on CPU with and without the key/value cache: greedy and beam search, a batch of sentences.

A small randomly initialised model (the "small" preset: D=256, 3+3 layers, V=8000) decodes a batch of random source
sentences, at most ``--steps`` tokens each (a random model rarely emits EOS, so most rows run the whole length).
"cached" feeds one new token per step and reuses the keys/values of earlier steps
(:class:`dotformer.decoding.incremental.IncrementalDecoder`); "uncached" runs the decoder over the whole prefix at
every step. Both give the same outputs (checked). Throughput counts the tokens of the returned best hypotheses,
so beam search's K-fold work shows as a lower rate.

    python benchmarks/decoding_cache.py                  # batch 64, source 20 tokens, 40 output tokens
    python benchmarks/decoding_cache.py --quick          # a short run for a smoke test

Prints a table and writes benchmarks/out/decoding_cache.json.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch
from common import command_line, default_output_dir, format_table, machine_info, write_json

from dotformer import ModelConfig, Transformer
from dotformer.data.tokenize.tokenizers import EOS_ID, NUM_SPECIAL
from dotformer.decoding import DecodeConfig, decode_batch


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=64, help="sentences per batch (64)")
    parser.add_argument("--src-len", type=int, default=20, help="source tokens per sentence (20)")
    parser.add_argument("--steps", type=int, default=40, help="output tokens per sentence (40)")
    parser.add_argument("--beam", type=int, default=4, help="beam size of the beam rows (4)")
    parser.add_argument("--vocab", type=int, default=8000, help="vocabulary size (8000)")
    parser.add_argument("--preset", default="small", help="model preset (small)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per row; the median is reported (3)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--quick", action="store_true", help="batch 8, 10 steps, 1 repeat (a smoke test)")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.quick:
        args.batch, args.steps, args.repeats = 8, 10, 1
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = ModelConfig.preset(args.preset, src_vocab_size=args.vocab, tgt_vocab_size=args.vocab, dropout=0.0)
    model = Transformer(config).eval()
    src = torch.randint(NUM_SPECIAL, args.vocab, (args.batch, args.src_len))  # (B, S)
    src[:, -1] = EOS_ID
    rows: list[dict[str, Any]] = []
    for strategy, beam in (("greedy", 1), ("beam", args.beam)):
        for cached in (True, False):
            decode = DecodeConfig(
                strategy=strategy, beam_size=beam, max_len_a=0.0, max_len_b=args.steps, use_cache=cached
            )
            times, out = [], []
            for _ in range(args.repeats + 1):  # the first run warms up
                start = time.perf_counter()
                out = decode_batch(model, src, decode)
                times.append(time.perf_counter() - start)
            seconds = statistics.median(times[1:])
            tokens = sum(len(hyps[0].tokens) for hyps in out)
            rows.append(
                {
                    "search": strategy if strategy == "greedy" else f"beam {beam}",
                    "cache": "yes" if cached else "no",
                    "decoder rows": args.batch * beam,
                    "output tokens": tokens,
                    "seconds": seconds,
                    "tokens/s": tokens / seconds,
                    "tokens": [h[0].tokens for h in out],
                }
            )
    for row in rows:
        if row["cache"] == "yes":
            uncached = next(r for r in rows if r["search"] == row["search"] and r["cache"] == "no")
            assert uncached.pop("tokens") == row.pop("tokens"), "cached and uncached decoding disagree"
            row["speed-up"] = uncached["seconds"] / row["seconds"]
    columns = ["search", "cache", "decoder rows", "output tokens", "seconds", "tokens/s", "speed-up"]
    info = machine_info("cpu")
    print(
        f"model {args.preset} (D={config.d_model}, {config.num_encoder_layers}+{config.num_decoder_layers} layers, "
        f"V={args.vocab}), batch {args.batch}, source {args.src_len} tokens, {args.steps} output tokens; "
        f"{info['cpu']}, {info['torch_threads']} threads"
    )
    print(format_table(rows, columns))
    path = write_json(
        default_output_dir() / "decoding_cache.json",
        {"command": command_line(), "machine": info, "args": vars(args), "results": rows},
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
