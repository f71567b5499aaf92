"""The flags that say how to decode, shared by ``dotformer translate`` and ``dotformer evaluate``: the checkpoint,
the engine, the device, CPU threads and dtype, the batch size and the search (greedy, beam, sampling), and the
:class:`DecodeConfig` they make. ``dotformer embed`` loads its checkpoint with the same device flags; ``generate``
and ``serve`` take the same engine flags (:func:`add_engine_flags`).
"""

from __future__ import annotations

import argparse
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from dotformer.cli.threads import add_threads_argument, apply_threads, device_help

if TYPE_CHECKING:
    from dotformer.api.translator import Translator
    from dotformer.checkpoint import LoadedCheckpoint
    from dotformer.decoding import DecodeConfig
    from dotformer.decoding.options import DecodeOption, DecodeRequest


DTYPE_HELP = (
    "precision of the weights while decoding (default float32; scores are still summed in float32): bfloat16 "
    "halves the weights' memory and suits GPUs; float16 needs CUDA; int8 (torch: CPU only; --device auto then picks "
    "the CPU) stores the linear layers' weights in 8 bits and multiplies in integers, 1.2-3.5x faster on this "
    "project's CPU, with outputs that may differ slightly from float32's and change with --batch-size; on "
    "CTranslate2, its compute type of that name"
)
ENGINE_HELP = (
    'what decodes: auto (default) is CTranslate2 when it is installed (pip install "dotformer[ct2]") and runs '
    "the model and every flag given, else torch; torch is the lesson's own decoder (the reference); ctranslate2 "
    "refuses a flag it cannot run. The first CTranslate2 use of a checkpoint converts it once into .ct2-cache/ "
    "beside it (or $DOTFORMER_CACHE_DIR, $XDG_CACHE_HOME/dotformer, ~/.cache/dotformer)"
)


def add_decoding_arguments(parser: argparse.ArgumentParser, exclude: Collection[str] = ()) -> None:
    """The flags shared by ``translate`` and ``evaluate``: checkpoint, device, batch size and the decoding options
    (:mod:`dotformer.decoding.options`) but those named in ``exclude``.

    ``--checkpoint`` leads the help; the decoding options follow under "decoding", the rest under "device and speed".
    """
    parser.add_argument(
        "--checkpoint",
        required=True,
        action="append",
        metavar="DIR",
        help="checkpoint or run directory (run: best/); repeated, an ensemble: the models' distributions are averaged "
        "at every step (same vocabularies; alignments come from the first)",
    )
    search = parser.add_argument_group("decoding")
    speed = parser.add_argument_group("device and speed")
    add_engine_flags(speed)
    add_device_flags(speed, DTYPE_HELP, engines=True)
    speed.add_argument("--batch-size", type=int, default=256, metavar="B", help="sentences decoded together (256)")
    add_option_flags(search, exclude)


def add_device_flags(group: argparse._ActionsContainer, dtype_help: str, engines: bool = False) -> None:
    """``--device``, ``--threads`` and ``--dtype`` (its help ``dtype_help``): where and in which precision the
    checkpoint of :func:`load_for_decoding` runs (``engines``: also ``--inter-threads``, for CTranslate2)."""
    group.add_argument("--device", default="auto", help=device_help("auto"))
    if engines:
        add_engine_threads(group)
    else:
        add_threads_argument(group)
    group.add_argument(
        "--dtype", choices=["float32", "bfloat16", "float16", "int8"], default="float32", help=dtype_help
    )


def add_engine_flags(group: argparse._ActionsContainer) -> None:
    """``--engine auto|torch|ctranslate2``."""
    from dotformer.engines.choice import ENGINES

    group.add_argument("--engine", choices=ENGINES, default="auto", help=ENGINE_HELP)


def add_engine_threads(group: argparse._ActionsContainer) -> None:
    """``--threads N`` (torch's kernels, or CTranslate2's threads per batch) and ``--inter-threads N``."""
    from dotformer.cli.threads import MAX_THREADS

    group.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help=f"CPU threads, 1 to {MAX_THREADS}: torch's kernels (default: torch's choice, all cores), or "
        "CTranslate2's per batch, its intra_threads (default: CTranslate2's choice)",
    )
    group.add_argument(
        "--inter-threads",
        type=int,
        default=None,
        metavar="N",
        help="CTranslate2 only: batches decoded at once, each on --threads threads (1)",
    )


def engine_threads(args: argparse.Namespace, engine: str) -> tuple[int, int]:
    """``(intra_threads, inter_threads)`` for CTranslate2 from ``--threads`` and ``--inter-threads``, checked
    (torch's threads are set once torch is the engine: :func:`load_translator`).

    Raises:
        ConfigError: a count out of range, or ``--inter-threads`` with ``--engine torch``.
    """
    from dotformer.cli.threads import MAX_THREADS, check_threads
    from dotformer.errors import ConfigError

    check_threads(args.threads)
    inter = getattr(args, "inter_threads", None)
    if inter is not None:
        if engine == "torch":
            raise ConfigError("--inter-threads sets CTranslate2's parallel batches; --engine torch has none")
        if not 1 <= inter <= MAX_THREADS:
            raise ConfigError(f"--inter-threads must be from 1 to {MAX_THREADS}, got {inter}")
    return args.threads or 0, inter or 1


def load_translator(
    args: argparse.Namespace,
    request: DecodeRequest | None = None,
    purpose: str = "any",
    torch_only: Collection[str] = (),
) -> Translator:
    """The :class:`~dotformer.api.translator.Translator` of ``--checkpoint`` on ``--engine`` (with ``--device``,
    ``--dtype``, ``--threads``, ``--inter-threads``), for ``request`` (its flags only torch runs choose torch, or are
    refused by ``--engine ctranslate2``, named as flags) and ``purpose`` (:func:`~dotformer.api.translator
    .open_translator`).

    Args:
        torch_only: flags given that only torch runs (``--no-cache``).

    Raises:
        ConfigError: a flag ``--engine ctranslate2`` cannot run (named), a checkpoint that does not serve
            ``purpose``, a bad device, dtype or thread count.
        CheckpointError: see ``load_checkpoint``.
    """
    from dotformer.api.translator import open_translator
    from dotformer.decoding.options import FLAG_NAMES
    from dotformer.engines.heap import keep_heap_top

    paths = args.checkpoint if isinstance(args.checkpoint, list) else [args.checkpoint]
    intra, inter = engine_threads(args, args.engine)
    translator = open_translator(
        paths, args.device, getattr(args, "dtype", "float32"), args.engine, request=request, purpose=purpose,
        torch_only=list(torch_only), names=FLAG_NAMES, intra_threads=intra, inter_threads=inter,
    )  # fmt: skip
    if translator.engine == "torch":
        apply_threads(args.threads)
    else:  # CTranslate2's per-step buffers: the heap's top kept, not handed back to the kernel at each step
        keep_heap_top()
    return translator


def add_option_flags(
    parser: argparse._ActionsContainer,
    exclude: Collection[str] = (),
    only: Collection[str] | None = None,
    surface: Mapping[str, tuple[Any, str]] | None = None,
) -> None:
    """One flag per option of :data:`dotformer.decoding.options.DECODE_OPTIONS` (but those named in ``exclude``;
    with ``only``, just those), defaulting to the :class:`DecodeConfig` default; an option of one strategy only
    (``--beam``, the sampling flags) defaults to None, so :func:`decode_config_from_args` knows whether it was asked
    for. ``surface``: option name -> (default, help) where a command's differ from the table's (``generate``'s
    ``--strategy`` defaults to sampling)."""
    from dotformer.decoding.options import DECODE_OPTIONS

    for option in DECODE_OPTIONS:
        if option.name in exclude or (only is not None and option.name not in only):
            continue
        default = None if option.strategy is not None else option.default
        help_text = option.help
        if surface and option.name in surface:
            default, help_text = surface[option.name]
        if option.kind is bool:
            parser.add_argument(option.flag, dest=option.name, action="store_true", default=default, help=help_text)
        elif option.many:  # repeated or comma-separated: decode_config_from_args splits the values
            parser.add_argument(
                option.flag, dest=option.name, action="append", default=None, metavar=option.metavar, help=help_text
            )
        else:
            metavar = None if option.choices else option.metavar or option.name.split("_")[-1].upper()
            kind = str if option.kind is str else option.kind
            parser.add_argument(
                option.flag,
                dest=option.name,
                type=kind,
                default=default,
                choices=option.choices,
                metavar=metavar,
                help=help_text,
            )


def cli_misplaced(options: list[DecodeOption], wanted: str, strategy: str) -> str:
    """``--temperature, --seed only apply to --strategy sample`` (one flag: ``--seed only applies ...``)."""
    from dotformer.decoding.options import only_apply

    return only_apply([o.flag for o in options], f"--strategy {wanted}")


def decode_config_from_args(args: argparse.Namespace, n_best: int = 1) -> DecodeConfig:
    """Build the :class:`DecodeConfig` from the flags of :func:`add_decoding_arguments` (``n_best`` when the command
    has no ``--n-best``).

    Raises:
        ConfigError: a flag that does not belong to the chosen strategy, or an invalid value (the message names
            the flag, ``--beam``, not the :class:`DecodeConfig` field).
    """
    from dotformer.decoding.options import FLAG_NAMES, OPTION_NAMES, decode_config, with_surface_names
    from dotformer.errors import ConfigError

    values = option_values(args, OPTION_NAMES)
    if values["n_best"] is None:
        values["n_best"] = n_best
    try:
        return decode_config(values, cli_misplaced)
    except ConfigError as exc:
        raise ConfigError(with_surface_names(str(exc), FLAG_NAMES)) from None


def option_values(args: argparse.Namespace, names: Collection[str]) -> dict[str, Any]:
    """The values of the option flags ``names`` (None: not given); an option of several values (``--end-token``,
    ``--suppress``) as one list, each flag's value split at its commas: ``["a,b", "c"]`` -> ``["a", "b", "c"]``."""
    from dotformer.decoding.config import split_tokens
    from dotformer.decoding.options import DECODE_OPTIONS

    values = {name: getattr(args, name, None) for name in names}
    for option in DECODE_OPTIONS:
        if option.many and values.get(option.name) is not None:
            values[option.name] = [token for value in values[option.name] for token in split_tokens(value, option.flag)]
    return values


def load_for_decoding(args: argparse.Namespace) -> LoadedCheckpoint:
    """Load ``--checkpoint`` on ``--device`` with its weights cast to ``--dtype`` (int8: quantized, CPU only), on
    ``--threads`` CPU threads when given.

    Raises:
        ConfigError: float16 asked for on a CPU, int8 on a GPU, a bad device, or ``--threads`` below 1.
        CheckpointError: see ``load_checkpoint``.
    """
    from dotformer.api import load_checkpoint_for_decoding, load_ensemble_for_decoding

    apply_threads(args.threads)
    paths = args.checkpoint if isinstance(args.checkpoint, list) else [args.checkpoint]
    if len(paths) == 1:
        return load_checkpoint_for_decoding(paths[0], args.device, args.dtype)
    return load_ensemble_for_decoding(paths, args.device, args.dtype)
