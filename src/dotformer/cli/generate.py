"""``dotformer generate``: continue prompts with a language-model checkpoint (``dotformer train --task lm``).

    dotformer generate --checkpoint runs/lm --prompt "In the beginning"
    dotformer generate --checkpoint runs/lm --prompt "And God said" --n 3 --top-k 20 --temperature 0.8 --seed 1
    dotformer generate --checkpoint runs/lm --prompt "Blessed are the" --beam 4     # the most likely end of the line
    dotformer generate --checkpoint runs/lm --prompt "Blessed are the" --beam 4 --length-penalty 1.0 --beam-stop exact
    printf 'In the beginning\\nJesus wept' | dotformer generate --checkpoint runs/lm --greedy --max-new-tokens 80

``--strategy`` chooses the search as ``translate``'s does, with another default: sampling, as open-ended text is
drawn (translate's beam search wants the likeliest whole output); ``--greedy`` and ``--beam K`` are short for
``--strategy greedy`` and ``--strategy beam --beam K``. Beam search ranks its beams by summed log-probability
(``--length-penalty`` 0, where ``translate`` takes the paper's 0.6) and stops once K have finished; ``--length-penalty
ALPHA`` and ``--beam-stop exact`` change that as they do for ``translate``.

Each prompt (``--prompt``, else one per line of standard input) is printed followed by its continuation; with
``--n`` above 1, each sample starts with a ``# sample I`` line. Prompt i (from 0) draws with ``--seed`` + i. On a
terminal a single continuation is printed token by token as it is produced.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dotformer.cli.lines import StreamLines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``dotformer generate``."""
    parser.add_argument(
        "--checkpoint",
        required=True,
        action="append",
        metavar="CKPT",
        help="a language-model checkpoint or run dir (one: generate runs no ensemble)",
    )
    parser.add_argument("--prompt", metavar="TEXT", help="the text to continue (default: one prompt per stdin line)")
    parser.add_argument("--max-new-tokens", type=int, default=200, metavar="N", help="tokens to add (200)")
    from dotformer.cli.decode_flags import add_engine_flags, add_engine_threads, add_option_flags
    from dotformer.cli.threads import device_help
    from dotformer.decoding.options import CONTROL_NAMES, strategy_help

    search = parser.add_argument_group("decoding")
    speed = parser.add_argument_group("device and speed")
    how = search.add_mutually_exclusive_group()
    short_forms = "; --greedy and --beam K are its short forms"
    add_option_flags(how, only=("strategy",), surface={"strategy": (None, strategy_help("sample") + short_forms)})
    how.add_argument("--greedy", action="store_true", help="short for --strategy greedy")
    beam_help = (
        "beam search with K beams, the likeliest end of the line: short for --strategy beam --beam K (K: 4, or --n "
        "if more)"
    )
    add_option_flags(search, only=("beam",), surface={"beam": (None, beam_help)})
    alpha_help = (
        "GNMT length penalty alpha of beam search, 0 to 10: beams ranked by summed log-probability / ((5 + length) / "
        "6)^ALPHA (generate's default 0: by summed log-probability; translate's is 0.6)"
    )
    add_option_flags(search, only=BEAM_FLAGS, surface={"length_penalty": (None, alpha_help)})
    add_option_flags(search, only=SAMPLING_FLAGS)
    add_option_flags(search, only=CONTROL_NAMES)  # translate's controls, from the one options table
    parser.add_argument("--n", type=int, default=1, metavar="N", help="samples (or best beams) per prompt (1)")

    add_engine_flags(speed)
    speed.add_argument("--device", default="auto", help=device_help("auto"))
    speed.add_argument(
        "--no-cache", action="store_true", help="recompute every step (slower; the same output; the torch engine)"
    )
    add_engine_threads(speed)


SAMPLING_FLAGS = ("temperature", "top_k", "top_p", "seed")  # the sampling options of the decoding table
BEAM_FLAGS = ("length_penalty", "beam_stop")  # beam search's ranking and stopping rule, from the decoding table


def generate_flags() -> dict[str, str]:
    """DecodeConfig field -> generate's flag, for its error messages: translate's flags, but ``--n`` and
    ``--max-new-tokens``."""
    from dotformer.decoding.options import FLAG_NAMES

    return {**FLAG_NAMES, "n_best": "--n", "max_new_tokens": "--max-new-tokens"}


def chosen_strategy(args: argparse.Namespace) -> tuple[str, str]:
    """``(strategy, how it was chosen)`` from ``--strategy`` and its short forms ``--greedy`` and ``--beam K``
    (``--beam`` alone: beam search); neither: sampling, the default."""
    if args.greedy:
        return "greedy", "--greedy"
    if args.strategy is not None:
        return args.strategy, f"--strategy {args.strategy}"
    if args.beam is not None:
        return "beam", "--beam"
    return "sample", "--strategy sample"


def cli_misplaced(chosen: str) -> Callable[[Sequence[str], str, str], str]:
    """The message for flags of another strategy than the one ``chosen`` (as the user chose it): ``--top-k only
    applies to sampling (the default), not --greedy`` (translate's wording, generate's flags)."""
    from dotformer.decoding.options import only_apply

    def message(names: Sequence[str], wanted: str, strategy: str) -> str:
        flags = generate_flags()
        where = "beam search (--strategy beam)" if wanted == "beam" else "sampling (the default)"
        return f"{only_apply([flags[name] for name in names], where)}, not {chosen}"

    return message


def run(args: argparse.Namespace) -> int:
    """Load the checkpoint, continue each prompt, print prompt and continuation."""
    from dotformer.api.generation import generation_settings, warn_unknown_prompt
    from dotformer.api.translator import check_tokens
    from dotformer.cli.decode_flags import load_translator, option_values
    from dotformer.cli.inputs import utf8_arguments
    from dotformer.cli.lines import StreamLines, binary_stdin
    from dotformer.config import DEFAULT_SEED, MAX_SEED
    from dotformer.decoding.options import CONTROL_NAMES, DecodeRequest, with_surface_names
    from dotformer.engines.choice import torch_only_settings
    from dotformer.errors import ConfigError

    strategy, chosen = chosen_strategy(args)
    given = {name: getattr(args, name) for name in (*SAMPLING_FLAGS, *BEAM_FLAGS) if getattr(args, name) is not None}
    controls = option_values(args, CONTROL_NAMES)
    given.update({name: value for name, value in controls.items() if value is not None and value != ()})
    try:
        config = generation_settings(
            args.max_new_tokens, strategy, args.n, beam_size=args.beam, use_cache=not args.no_cache,
            misplaced=cli_misplaced(chosen), **given,
        )  # fmt: skip
    except ConfigError as exc:
        raise ConfigError(with_surface_names(str(exc), generate_flags())) from None
    if len(args.checkpoint) > 1:  # argparse would keep the last one silently
        raise ConfigError(
            f"generate continues text with one language model, {len(args.checkpoint)} --checkpoint given: give one "
            f"(translate and evaluate decode an ensemble of translation models)"
        )
    torch_only = ["--no-cache"] if args.no_cache else []  # and what else the decoding table runs on torch only:
    searched = DecodeRequest(config=config.replace(use_cache=True))  # (--end-token with --beam), named as flags
    torch_only += torch_only_settings(searched, None, generate_flags())
    translator = load_translator(args, purpose="generate", torch_only=torch_only)
    check_tokens(config, translator.tgt_tokenizer, generate_flags())  # --end-token, --suppress: before any output
    if args.prompt is not None:
        prompts: Iterable[tuple[str, str]] = [("--prompt", utf8_arguments([args.prompt], "--prompt")[0])]
    else:
        prompts = _stdin_prompts(StreamLines(binary_stdin(), "<stdin>"))
    stream = sys.stdout.isatty() and args.n == 1 and strategy != "beam"
    seed = args.seed if args.seed is not None else DEFAULT_SEED
    for i, (where, prompt) in enumerate(prompts):
        warn_unknown_prompt(translator.files, prompt, where)
        if seed + i > MAX_SEED:
            raise ConfigError(f"{where}: prompt {i + 1} would draw with --seed + {i}, above 2**63 - 1; lower --seed")
        config = config.replace(seed=seed + i)  # prompt i draws with seed + i: the same prompts, the same text
        if stream:
            print(prompt, end="", flush=True)
            translator.generate_texts(prompt, config, on_text=lambda piece: print(piece, end="", flush=True))
            print()
            continue
        texts = translator.generate_texts(prompt, config)
        for i, text in enumerate(texts):
            if len(texts) > 1:
                print(f"# sample {i + 1}" if strategy != "beam" else f"# beam {i + 1}")
            print(prompt + text)
    return 0


def _stdin_prompts(lines: StreamLines) -> Iterator[tuple[str, str]]:
    """``(<stdin>:LINE, prompt)`` per line of standard input, read as translate reads it (UTF-8 checked).

    Raises:
        DataError: a line that is not valid UTF-8 (``<stdin>:LINE: byte 0xNN ... is not valid UTF-8``).
    """
    for first, chunk in lines.chunks(1):
        for k, line in enumerate(chunk):
            yield f"<stdin>:{first + k}", line
