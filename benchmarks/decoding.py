"""Decoding speed: dotformer's greedy and beam-4 search vs HF ``generate`` vs CTranslate2, on the same model.

One random dotformer model (seeded) is copied into a HF ``MarianMTModel`` (:func:`dotformer.export.marian.to_marian`)
and exported to CTranslate2 (:func:`dotformer.export.ct2.export_ctranslate2`), so every system runs the same
function; greedy outputs are compared (``agree`` = fraction of sentences whose tokens equal dotformer's).
``dotformer_int8`` is the same model with int8 linear layers (:func:`dotformer.decoding.quantization.quantize_int8`,
what ``--dtype int8`` decodes with); its outputs may differ from the float32 ones by rounding.

Every system decodes the same batch of B source sentences (lengths drawn in [0.6·S, S], each ending with EOS) for at
most ``new_tokens`` tokens, never emitting PAD or BOS (dotformer forbids them; HF gets ``suppress_tokens``, CTranslate2
``suppress_sequences``). Beam search uses K = 4 and each system's own length normalisation (dotformer: GNMT α = 0.6;
HF and CTranslate2: score / length^0.6), so beam outputs may differ; the work per step is the same.

Figure: output tokens/s = tokens generated (EOS counted, for beam search the returned hypothesis) / median wall time of
decoding the batch (encoder included). Runs are interleaved as in ``training.py``; CTranslate2 runs with
``intra_threads`` = torch's thread count, float32 and int8 (weights quantised on load).

``ratio_paired`` is the median over rounds of the ratio within one round (runs seconds apart, under about the same
machine load). ``ratio_cpu`` compares tokens per CPU second of the process instead (all threads, CTranslate2's
included), a view that other processes on the machine disturb less than wall time.

Run: ``python benchmarks/decoding.py`` (``--quick`` for a short check).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from common import command_line, default_output_dir, format_table, machine_info, synchronize, write_json
from peers import BOS, EOS, PAD, make_batch

from dotformer import ModelConfig, Transformer
from dotformer.decoding import DecodeConfig, decode_batch
from dotformer.decoding.quantization import quantize_int8

Tokens = list[list[int]]  # one output per sentence, EOS included when generated, no BOS/PAD


@dataclass(frozen=True)
class Setting:
    """One benchmarked size: model preset, vocabulary, batch of sources, output length."""

    name: str  # label in the tables
    preset: str  # ModelConfig preset
    vocab: int  # V for source and target
    batch_size: int  # B sentences
    src_len: int  # S, longest source (EOS included)
    new_tokens: int  # most tokens generated per sentence

    def config(self) -> ModelConfig:
        """The model configuration (no dropout at inference anyway)."""
        return ModelConfig.preset(self.preset, src_vocab_size=self.vocab, tgt_vocab_size=self.vocab)


SETTINGS = {
    "tiny": Setting("tiny", "tiny", 1000, 4, 12, 12),
    "small": Setting("small", "small", 8000, 16, 32, 32),
    "base": Setting("base", "base", 32000, 16, 32, 32),
}


def trim(row: list[int]) -> list[int]:
    """Cut a generated row after its first EOS and drop PAD fill."""
    out = []
    for token in row:
        if token == PAD:
            break
        out.append(token)
        if token == EOS:
            break
    return out


def dotformer_system(model: Transformer, src: torch.Tensor, new_tokens: int, beam: int) -> Callable[[], Tokens]:
    """dotformer's :func:`decode_batch`, greedy (beam = 1) or beam search."""
    if beam == 1:
        config = DecodeConfig(strategy="greedy", max_len_a=0.0, max_len_b=new_tokens)
    else:
        config = DecodeConfig(strategy="beam", beam_size=beam, length_penalty=0.6, max_len_a=0.0, max_len_b=new_tokens)

    def run() -> Tokens:
        hyps = decode_batch(model, src, config)
        return [h[0].tokens + ([EOS] if h[0].finished else []) for h in hyps]

    return run


def hf_system(marian: torch.nn.Module, src: torch.Tensor, new_tokens: int, beam: int) -> Callable[[], Tokens]:
    """HF ``generate`` on the Marian copy of the model."""
    kwargs: dict[str, Any] = dict(
        max_new_tokens=new_tokens,
        num_beams=beam,
        do_sample=False,
        suppress_tokens=[PAD, BOS],
        pad_token_id=PAD,
        eos_token_id=EOS,
        decoder_start_token_id=BOS,
    )
    if beam > 1:
        kwargs.update(length_penalty=0.6, early_stopping=False)

    def run() -> Tokens:
        with torch.inference_mode():
            out = marian.generate(input_ids=src, attention_mask=src != PAD, **kwargs)
        return [trim(row[1:]) for row in out.tolist()]

    return run


def ct2_system(
    model_dir: Path, config: ModelConfig, src: torch.Tensor, new_tokens: int, beam: int, compute_type: str
) -> Callable[[], Tokens]:
    """CTranslate2's ``translate_batch`` on the exported model (``compute_type`` "float32" or "int8")."""
    import ctranslate2

    from dotformer.export.ct2 import id_vocabulary, ids_to_tokens, tokens_to_ids

    translator = ctranslate2.Translator(
        str(model_dir), device="cpu", compute_type=compute_type, intra_threads=torch.get_num_threads()
    )
    src_vocab, tgt_vocab = id_vocabulary(config.src_vocab_size), id_vocabulary(config.tgt_vocab_size)
    batch = [ids_to_tokens([t for t in row if t != PAD][:-1], src_vocab) for row in src.tolist()]  # the model adds </s>

    def run() -> Tokens:
        results = translator.translate_batch(
            batch,
            beam_size=beam,
            max_decoding_length=new_tokens,
            min_decoding_length=0,  # the default 1 forbids EOS first; dotformer and HF allow it
            max_input_length=0,  # no truncation of long inputs
            length_penalty=0.6 if beam > 1 else 1.0,
            return_end_token=True,
            suppress_sequences=[["<pad>"], ["<s>"]],
        )
        return [tokens_to_ids(r.hypotheses[0], tgt_vocab) for r in results]

    return run


def interleaved(
    systems: dict[str, Callable[[], Tokens]], repeats: int, warmup: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Warm every system up, then time ``repeats`` rounds that run each system once, in a rotating order.

    Returns:
        Per system, the wall-clock seconds of each timed run and the CPU seconds the process used during it.
    """
    for run in systems.values():
        for _ in range(warmup):
            run()
    names = list(systems)
    samples: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            start, start_cpu = time.perf_counter(), time.process_time()
            systems[n]()
            synchronize("cpu")
            samples[n].append(time.perf_counter() - start)
            cpu[n].append(time.process_time() - start_cpu)
    return samples, cpu


def agreement(ours: Tokens, theirs: Tokens) -> float:
    """Fraction of sentences whose outputs are identical."""
    return sum(a == b for a, b in zip(ours, theirs, strict=True)) / len(ours)


def run_setting(setting: Setting, repeats: int, warmup: int, with_ct2: bool, workdir: Path) -> list[dict[str, Any]]:
    """Benchmark greedy and beam-4 decoding of every system at one setting; one row per (search, system)."""
    from dotformer.export.marian import to_marian

    config = setting.config()
    torch.manual_seed(0)
    model = Transformer(config).eval()
    marian = to_marian(model)
    model_int8 = quantize_int8(model)
    src = make_batch(setting.batch_size, setting.src_len, 2, setting.vocab, setting.vocab, seed=1).src  # (B, S)
    ct2_dir = None
    if with_ct2:
        from dotformer.export.ct2 import export_ctranslate2

        ct2_dir = export_ctranslate2(model, workdir / f"ct2_{setting.name}")
    rows = []
    for search, beam in (("greedy", 1), ("beam4", 4)):
        systems = {
            "dotformer": dotformer_system(model, src, setting.new_tokens, beam),
            "dotformer_int8": dotformer_system(model_int8, src, setting.new_tokens, beam),
            "hf_generate": hf_system(marian, src, setting.new_tokens, beam),
        }
        if ct2_dir is not None:
            for compute_type in ("float32", "int8"):
                systems[f"ct2_{compute_type}"] = ct2_system(
                    ct2_dir, config, src, setting.new_tokens, beam, compute_type
                )
        outputs = {n: run() for n, run in systems.items()}
        samples, cpu = interleaved(systems, repeats, warmup)
        ours: dict[str, Any] = {}
        for n in systems:
            generated = sum(len(o) for o in outputs[n])
            median_s = statistics.median(samples[n])
            row = {
                "setting": setting.name,
                "search": search,
                "system": n,
                "tokens_per_s": generated / median_s,
                "ms_per_batch": median_s * 1000,
                "cpu_ms_per_batch": statistics.median(cpu[n]) * 1000,
                "generated_tokens": generated,
                "agree_with_dotformer": agreement(outputs["dotformer"], outputs[n]),
                "samples_ms": [s * 1000 for s in samples[n]],
                "batch": {"B": setting.batch_size, "S": setting.src_len, "new_tokens": setting.new_tokens},
            }
            ours = row if n == "dotformer" else ours
            row["dotformer_over_this"] = ours["tokens_per_s"] / row["tokens_per_s"]
            cpu_rate = generated / row["cpu_ms_per_batch"]
            row["dotformer_over_this_cpu"] = (ours["generated_tokens"] / ours["cpu_ms_per_batch"]) / cpu_rate
            per_round = (
                (ours["generated_tokens"] / d) / (generated / p)
                for p, d in zip(samples[n], samples["dotformer"], strict=True)
            )
            row["dotformer_over_this_paired"] = statistics.median(per_round)
            rows.append(row)
        hf_rate = next(r["tokens_per_s"] for r in rows if r["search"] == search and r["system"] == "hf_generate")
        for row in rows:
            if row["search"] == search:
                row["speed_vs_hf_generate"] = row["tokens_per_s"] / hf_rate
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse the command line, run the benchmark, print the table and write ``out/decoding.json``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", default="small,base", help="comma-separated: tiny, small, base")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (each runs every system once)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs per system before timing")
    parser.add_argument("--no-ct2", action="store_true", help="skip CTranslate2")
    parser.add_argument("--threads", type=int, default=None, help="torch and CTranslate2 threads (default: torch's)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, 2 rounds: checks that it runs")
    parser.add_argument("--out", default=str(default_output_dir() / "decoding.json"))
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    names = ["tiny"] if args.quick else args.configs.split(",")
    repeats, warmup = (2, 1) if args.quick else (args.repeats, args.warmup)
    rows = []
    with tempfile.TemporaryDirectory(prefix="dotformer_ct2_") as tmp:
        for name in names:
            rows += run_setting(SETTINGS[name], repeats, warmup, not args.no_ct2, Path(tmp))
    columns = ["setting", "search", "system", "tokens_per_s", "ms_per_batch", "agree_with_dotformer"]
    table = [
        {
            **r,
            "ratio": r["dotformer_over_this"],
            "ratio_paired": r["dotformer_over_this_paired"],
            "ratio_cpu": r["dotformer_over_this_cpu"],
        }
        for r in rows
    ]
    print(format_table(table, [*columns, "ratio", "ratio_paired", "ratio_cpu", "speed_vs_hf_generate"]))
    payload = {"benchmark": "decoding", "command": command_line(), "machine": machine_info("cpu"), "rows": rows}
    write_json(args.out, payload)
    print(f"wrote {args.out}")
    return payload


if __name__ == "__main__":
    main()
