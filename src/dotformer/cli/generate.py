"""``dotformer generate``: continue prompts with a language-model checkpoint (``dotformer train --task lm``).

    dotformer generate --checkpoint runs/lm --prompt "In the beginning"
    dotformer generate --checkpoint runs/lm --prompt "And God said" --n 3 --top-k 20 --temperature 0.8 --seed 1
    dotformer generate --checkpoint runs/lm --prompt "Blessed are the" --beam 4     # the most likely end of the line
    printf 'In the beginning\\nJesus wept' | dotformer generate --checkpoint runs/lm --greedy --max-new-tokens 80

Each prompt (``--prompt``, else one per line of standard input) is printed followed by its continuation; with
``--n`` above 1, each sample starts with a ``# sample I`` line. Prompt i (from 0) draws with ``--seed`` + i. On a
terminal a single continuation is printed token by token as it is produced.
"""

from __future__ import annotations

import argparse
import sys

from dotformer.cli.threads import add_threads_argument, apply_threads

# DecodeConfig field -> generate's flag, for its error messages
FLAGS = {
    "beam_size": "--beam", "n_best": "--n", "seed": "--seed", "temperature": "--temperature", "top_k": "--top-k",
    "top_p": "--top-p", "max_new_tokens": "--max-new-tokens",
}  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``dotformer generate``."""
    parser.add_argument("--checkpoint", required=True, metavar="CKPT", help="a language-model checkpoint or run dir")
    parser.add_argument("--prompt", metavar="TEXT", help="the text to continue (default: one prompt per stdin line)")
    parser.add_argument("--max-new-tokens", type=int, default=200, metavar="N", help="tokens to add (200)")
    search = parser.add_argument_group("decoding")
    speed = parser.add_argument_group("device and speed")
    how = search.add_mutually_exclusive_group()
    how.add_argument("--greedy", action="store_true", help="take the most likely token each step (default: sample)")
    how.add_argument("--beam", type=int, metavar="K", help="beam search with K beams: the most likely end of the line")
    search.add_argument("--temperature", type=float, default=1.0, metavar="T", help="sampling temperature (1.0)")
    search.add_argument("--top-k", type=int, default=0, metavar="K", help="sample among the K likeliest (0: all)")
    search.add_argument("--top-p", type=float, default=1.0, metavar="P", help="nucleus sampling mass (1.0: off)")
    search.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the draws (0)")
    parser.add_argument("--n", type=int, default=1, metavar="N", help="samples (or best beams) per prompt (1)")
    speed.add_argument("--device", default="auto", help="auto (CUDA if available), cpu, cuda, cuda:N")
    speed.add_argument("--no-cache", action="store_true", help="recompute every step (slower; the same output)")
    add_threads_argument(speed)


def run(args: argparse.Namespace) -> int:
    """Load the checkpoint, continue each prompt, print prompt and continuation."""
    from dotformer.api.generation import generate_text, generation_settings
    from dotformer.api.translator import load_checkpoint_for_decoding
    from dotformer.decoding.config import MAX_SEED
    from dotformer.decoding.options import with_surface_names
    from dotformer.errors import ConfigError

    apply_threads(args.threads)
    strategy = "beam" if args.beam is not None else "greedy" if args.greedy else "sample"
    try:
        config = generation_settings(
            args.max_new_tokens, strategy, args.n, args.temperature, args.top_k, args.top_p, args.seed,
            beam_size=args.beam, use_cache=not args.no_cache,
        )  # fmt: skip
    except ConfigError as exc:
        raise ConfigError(with_surface_names(str(exc), FLAGS)) from None
    checkpoint = load_checkpoint_for_decoding(args.checkpoint, args.device)
    prompts = [args.prompt] if args.prompt is not None else [line.rstrip("\r\n") for line in sys.stdin]
    if args.seed + len(prompts) - 1 > MAX_SEED:
        raise ConfigError(
            f"--seed {args.seed} is too large for {len(prompts)} prompts: prompt i draws with --seed + i, "
            f"at most 2**63 - 1"
        )
    stream = sys.stdout.isatty() and args.n == 1 and strategy != "beam"
    for i, prompt in enumerate(prompts):
        config = config.replace(seed=args.seed + i)  # prompt i draws with seed + i: the same prompts, the same text
        if stream:
            print(prompt, end="", flush=True)
            generate_text(checkpoint, prompt, config, on_text=lambda piece: print(piece, end="", flush=True))
            print()
            continue
        texts = generate_text(checkpoint, prompt, config)
        for i, text in enumerate(texts):
            if len(texts) > 1:
                print(f"# sample {i + 1}" if strategy != "beam" else f"# beam {i + 1}")
            print(prompt + text)
    return 0
