"""``dotformer translate``: decode texts with a trained checkpoint (greedy, beam search or sampling)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dotformer.checkpoint import LoadedCheckpoint
    from dotformer.decoding import DecodeConfig

EPILOG = """\
input:  the TEXT arguments, or else standard input, one text per line (an empty line is an empty text).
output: one line per input, in input order. With --n-best N > 1, each input gets N lines "SCORE<TAB>TEXT",
        best first, followed by an empty line; SCORE is log P(output | input) / ((5 + length) / 6)^alpha
        (natural log, length in tokens including the end of sentence; higher is better).
Characters the model's vocabulary does not know are read as <unk>, with one warning on standard error.

examples:
  dotformer translate --checkpoint runs/g2p transformer attention
  dotformer translate --checkpoint runs/bible --beam 5 --n-best 3 < verses.es
  dotformer translate --checkpoint runs/copy --strategy sample --top-p 0.9 --seed 1 "a1 b2 c3"
"""


def add_decoding_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags shared by ``translate`` and ``evaluate``: checkpoint, device, batch size and the search."""
    parser.add_argument("--checkpoint", required=True, metavar="DIR", help="checkpoint or run directory (run: best/)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... (default: cuda if available)")
    parser.add_argument(
        "--dtype",
        choices=["float32", "bfloat16", "float16", "int8"],
        default="float32",
        help="precision of the weights while decoding (scores are still summed in float32): bfloat16 halves the "
        "weights' memory and suits GPUs; float16 needs CUDA; int8 (CPU only; --device auto then picks the CPU) "
        "stores the linear layers' weights in 8 bits and multiplies in integers, 1.2-3.5x faster on this "
        "project's CPU; its outputs may differ slightly from float32's, and with --batch-size (default float32)",
    )
    parser.add_argument("--batch-size", type=int, default=64, metavar="B", help="sentences decoded together (64)")
    parser.add_argument(
        "--strategy", choices=["greedy", "beam", "sample"], default="beam", help="search strategy (default: beam)"
    )
    parser.add_argument("--beam", type=int, default=None, metavar="K", help="beam size (default 4, the paper's)")
    parser.add_argument(
        "--length-penalty", type=float, default=0.6, metavar="ALPHA", help="GNMT length penalty alpha (0.6)"
    )
    parser.add_argument(
        "--max-len-a", type=float, default=1.0, metavar="A", help="max output length = A * input length + B (1.0)"
    )
    parser.add_argument("--max-len-b", type=int, default=50, metavar="B", help="see --max-len-a (50)")
    parser.add_argument("--temperature", type=float, default=None, metavar="T", help="sampling temperature (1.0)")
    parser.add_argument("--top-k", type=int, default=None, metavar="K", help="sample from the K likeliest tokens")
    parser.add_argument("--top-p", type=float, default=None, metavar="P", help="nucleus sampling mass P in (0, 1]")
    parser.add_argument("--seed", type=int, default=None, help="sampling seed (0)")


def decode_config_from_args(args: argparse.Namespace, n_best: int = 1) -> DecodeConfig:
    """Build the :class:`DecodeConfig` from the flags of :func:`add_decoding_arguments`.

    Raises:
        ConfigError: a flag that does not belong to the chosen strategy, or an invalid value.
    """
    from dotformer.decoding import DecodeConfig
    from dotformer.errors import ConfigError

    sampling = {"--temperature": args.temperature, "--top-k": args.top_k, "--top-p": args.top_p, "--seed": args.seed}
    given = [flag for flag, value in sampling.items() if value is not None]
    if given and args.strategy != "sample":
        raise ConfigError(f"{', '.join(given)} only apply to --strategy sample")
    if args.beam is not None and args.strategy != "beam":
        raise ConfigError("--beam only applies to --strategy beam")
    return DecodeConfig(
        strategy=args.strategy,
        beam_size=args.beam if args.beam is not None else 4,
        n_best=n_best,
        length_penalty=args.length_penalty,
        max_len_a=args.max_len_a,
        max_len_b=args.max_len_b,
        temperature=args.temperature if args.temperature is not None else 1.0,
        top_k=args.top_k if args.top_k is not None else 0,
        top_p=args.top_p if args.top_p is not None else 1.0,
        seed=args.seed if args.seed is not None else 0,
    )


def resolve_device(name: str) -> str:
    """``auto`` -> ``cuda`` if available else ``cpu``; other names are checked.

    Raises:
        ConfigError: not a device name, or CUDA asked for but not available.
    """
    import torch

    from dotformer.errors import ConfigError

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise ConfigError(f"--device {name!r} is not a device (cpu, cuda, cuda:N)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device {name}: CUDA is not available on this machine")
    return name


def load_for_decoding(args: argparse.Namespace) -> LoadedCheckpoint:
    """Load ``--checkpoint`` on ``--device`` with its weights cast to ``--dtype`` (int8: quantized, CPU only).

    Raises:
        ConfigError: float16 asked for on a CPU, int8 on a GPU, or a bad device. CheckpointError: see
        ``load_checkpoint``.
    """
    import dataclasses

    import torch

    from dotformer.checkpoint import load_checkpoint
    from dotformer.errors import ConfigError

    device = resolve_device("cpu" if args.dtype == "int8" and args.device == "auto" else args.device)
    if args.dtype == "float16" and torch.device(device).type != "cuda":
        raise ConfigError("--dtype float16 needs a CUDA device; on a CPU use --dtype bfloat16")
    if args.dtype == "int8" and torch.device(device).type != "cpu":
        raise ConfigError(f"--dtype int8 is for CPU decoding (--device cpu); on {device} use --dtype bfloat16")
    loaded = load_checkpoint(args.checkpoint, device=device)
    if args.dtype == "int8":
        from dotformer.quantization import quantize_int8

        return dataclasses.replace(loaded, model=quantize_int8(loaded.model))
    loaded.model.to(getattr(torch, args.dtype))
    return loaded


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``dotformer translate``."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    add_decoding_arguments(parser)
    parser.add_argument("--n-best", type=int, default=1, metavar="N", help="outputs per input, as SCORE<TAB>TEXT")
    parser.add_argument("texts", nargs="*", metavar="TEXT", help="texts to translate (default: lines of stdin)")


def one_line(text: str) -> str:
    """An output on one line: line breaks (which a BPE vocabulary can produce) become spaces."""
    return " ".join(text.splitlines()) if ("\n" in text or "\r" in text) else text


def run(args: argparse.Namespace) -> int:
    """Load the checkpoint, decode the inputs, print the outputs. Returns 0."""
    import warnings

    from dotformer.decoding import translate
    from dotformer.decoding.translate import UnknownTokenWarning, source_normaliser

    config = decode_config_from_args(args, n_best=args.n_best)
    loaded = load_for_decoding(args)
    texts = list(args.texts) if args.texts else sys.stdin.read().splitlines()
    normalise = source_normaliser(loaded.info)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UnknownTokenWarning)
        outputs = translate(loaded, [normalise(t) for t in texts], config, args.batch_size)
    for warning in caught:
        print(f"dotformer translate: warning: {warning.message}", file=sys.stderr)
    out = sys.stdout
    for hyps in outputs:
        if args.n_best == 1:
            out.write(one_line(hyps[0].text) + "\n")
        else:
            out.writelines(f"{h.score:.4f}\t{one_line(h.text)}\n" for h in hyps)
            out.write("\n")
    out.flush()
    return 0
