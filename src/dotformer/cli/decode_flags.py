"""The flags that say how to decode, shared by ``dotformer translate`` and ``dotformer evaluate``: the checkpoint,
the device, CPU threads and dtype, the batch size and the search (greedy, beam, sampling), and the
:class:`DecodeConfig` they make.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from dotformer.cli.threads import add_threads_argument, apply_threads

if TYPE_CHECKING:
    from dotformer.checkpoint import LoadedCheckpoint
    from dotformer.decoding import DecodeConfig


def add_decoding_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags shared by ``translate`` and ``evaluate``: checkpoint, device, batch size and the search."""
    parser.add_argument("--checkpoint", required=True, metavar="DIR", help="checkpoint or run directory (run: best/)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... (default: cuda if available)")
    add_threads_argument(parser)
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
    parser.add_argument(
        "--min-len",
        "--min-len-b",
        dest="min_len_b",
        type=int,
        default=0,
        metavar="N",
        help="fewest output tokens before the end of sentence: the end is forbidden until then (0); with "
        "--min-len-a A the minimum is A * input length + N; --max-len-a/-b win where they are lower",
    )
    parser.add_argument("--min-len-a", type=float, default=0.0, metavar="A", help="see --min-len (0.0)")
    parser.add_argument(
        "--alignments",
        action="store_true",
        help='after each output, an "A-ID<TAB>S-T ..." line (json: an "alignment" list): output token T attends most '
        "to source token S (0-based), in --alignment-layer's cross-attention averaged over the heads",
    )
    parser.add_argument(
        "--alignment-layer",
        type=int,
        default=-1,
        metavar="L",
        help="the decoder layer whose cross-attention aligns (0-based; -1, the default, is the last)",
    )
    parser.add_argument(
        "--replace-unk",
        action="store_true",
        help="replace each <unk> of an output by the source symbol it aligns to (char or symbol vocabularies)",
    )
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
        min_len_a=args.min_len_a,
        min_len_b=args.min_len_b,
        alignments=args.alignments,
        alignment_layer=args.alignment_layer,
        replace_unk=args.replace_unk,
        temperature=args.temperature if args.temperature is not None else 1.0,
        top_k=args.top_k if args.top_k is not None else 0,
        top_p=args.top_p if args.top_p is not None else 1.0,
        seed=args.seed if args.seed is not None else 0,
    )


def resolve_device(name: str) -> str:
    """``auto`` -> ``cuda`` if available else ``cpu``; other names checked (:func:`dotformer.api.resolve_device`).

    Raises:
        ConfigError: not a device name, or CUDA asked for but not available.
    """
    from dotformer.api import resolve_device as resolve

    return resolve(name)


def load_for_decoding(args: argparse.Namespace) -> LoadedCheckpoint:
    """Load ``--checkpoint`` on ``--device`` with its weights cast to ``--dtype`` (int8: quantized, CPU only), on
    ``--threads`` CPU threads when given.

    Raises:
        ConfigError: float16 asked for on a CPU, int8 on a GPU, a bad device, or ``--threads`` below 1.
        CheckpointError: see ``load_checkpoint``.
    """
    from dotformer.api import load_checkpoint_for_decoding

    apply_threads(args.threads)
    return load_checkpoint_for_decoding(args.checkpoint, args.device, args.dtype)
