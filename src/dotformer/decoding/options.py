"""The decoding options, defined once for every surface: ``dotformer translate``/``evaluate`` flags, the keywords of
:meth:`dotformer.api.Translator.translate`, and the JSON fields of ``POST /api/translate``; and the request object
they all build, :class:`DecodeRequest`.

Each :class:`DecodeOption` names its keyword (also its JSON field), its command-line flag, its type and the
:class:`~dotformer.decoding.DecodeConfig` field it sets; :func:`decode_config` turns given values (None: not given)
into a checked :class:`DecodeConfig` with the same rules everywhere (a sampling option needs strategy "sample", a
beam width strategy "beam"). A new option added to :data:`DECODE_OPTIONS` reaches the three surfaces, and a test
checks that each accepts exactly this set. :func:`decode_request` makes the whole request of one call: the search
(its :class:`DecodeConfig`), the per-input prefixes and how the call batches and what it returns; every surface builds
one, the engine that runs it is chosen from it once (:func:`dotformer.engines.choice.torch_only_settings`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from dotformer.config import DEFAULT_SEED
from dotformer.decoding.config import BEAM_STOPS, STRATEGIES, DecodeConfig
from dotformer.decoding.order import DEFAULT_BATCH_SIZE
from dotformer.errors import ConfigError


@dataclass(frozen=True)
class DecodeOption:
    """One decoding option.

    Attributes:
        name: the API keyword and the JSON field.
        kind: its type: int, float, bool or str (a JSON int is accepted for a float).
        flag: the command-line flag (``--beam``); a per-input option (``prefix``) reads its values from a file.
        field: the :class:`DecodeConfig` field it sets; None for options that are not search settings (``prefix``).
        help: the flag's help text.
        strategy: the only strategy it applies to (None: all).
        choices: the allowed values, for a str option.
        metavar: how the flag's help names its value (default: the last word of the name, upper case).
        ctranslate2: what the CTranslate2 engine lacks of this option, when it runs the default value only (None: it
            runs every value); another value runs on the torch engine only (:mod:`dotformer.engines.choice`; end
            tokens: with beam search only).
        many: the option takes several values (a str option): its flag repeated or comma-separated, a list of
            strings or one string in the API and in JSON.
    """

    name: str
    kind: type
    flag: str
    field: str | None
    help: str
    strategy: str | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    ctranslate2: str | None = None
    many: bool = False

    @property
    def default(self) -> Any:
        """The value when not given: the :class:`DecodeConfig` field's default (None for ``prefix``)."""
        if self.field is None:
            return None
        return DecodeConfig.__dataclass_fields__[self.field].default


def strategy_help(default: str) -> str:
    """The help of ``--strategy`` on a surface whose default is ``default``, saying why: ``translate`` (and
    ``evaluate``, ``POST /api/translate``) default to beam search, as a translation wants the likeliest whole output
    (the paper's search, fairseq's and Marian's default); ``generate`` samples, as open-ended text is drawn (the
    likeliest continuation tends to repeat itself).

    Raises:
        KeyError: ``default`` is not "beam" or "sample".
    """
    why = {
        "beam": "beam, as a translation wants the likeliest whole output (the paper's search, as in fairseq and "
        "Marian); generate defaults to sample",
        "sample": "sample, as open-ended text is drawn (the likeliest continuation tends to repeat itself); "
        "translate defaults to beam",
    }[default]
    return (
        "how each output is chosen: greedy (the likeliest token each step), beam (beam search, --beam K wide) or "
        f"sample (drawn at random: --temperature, --top-k, --top-p, --seed); default {why}"
    )


DECODE_OPTIONS: tuple[DecodeOption, ...] = (
    DecodeOption("strategy", str, "--strategy", "strategy", strategy_help("beam"), choices=STRATEGIES),
    DecodeOption("beam", int, "--beam", "beam_size", "beam size (default 4, the paper's)", "beam", metavar="K"),
    DecodeOption("n_best", int, "--n-best", "n_best", "outputs per input (1)", metavar="N"),
    DecodeOption(
        "length_penalty",
        float,
        "--length-penalty",
        "length_penalty",
        "GNMT length penalty alpha, 0 to 10 (0.6)",
        metavar="ALPHA",
    ),
    DecodeOption(
        "beam_stop",
        str,
        "--beam-stop",
        "beam_stop",
        "when beam search stops: finished (the default), once K hypotheses have finished, as fairseq and "
        "CTranslate2 stop; exact, once no unfinished hypothesis can still enter the K best finished ones (the exact "
        "K-best search, which runs longer)",
        "beam",
        choices=BEAM_STOPS,
        metavar="RULE",
    ),
    DecodeOption(
        "max_len_a",
        float,
        "--max-len-a",
        "max_len_a",
        "max output length = A * input length + B, at most the model's positions (1.0)",
    ),
    DecodeOption("max_len_b", int, "--max-len-b", "max_len_b", "see --max-len-a (50)"),
    DecodeOption(
        "min_len_a", float, "--min-len-a", "min_len_a", "min output length = A * input length + --min-len (0.0)"
    ),
    DecodeOption(
        "min_len_b",
        int,
        "--min-len",
        "min_len_b",
        "fewest output tokens before the end of sentence, which is forbidden until then (0); --max-len-a/-b win "
        "where they are lower",
        metavar="N",
    ),
    DecodeOption(
        "temperature", float, "--temperature", "temperature", "sampling temperature (1.0)", "sample", metavar="T"
    ),
    DecodeOption(
        "top_k", int, "--top-k", "top_k", "sample from the K likeliest tokens (0, the default: all)", "sample"
    ),
    DecodeOption(
        "top_p", float, "--top-p", "top_p", "nucleus sampling mass P in (0, 1] (1.0, the default: off)", "sample"
    ),
    DecodeOption("seed", int, "--seed", "seed", f"sampling seed (default {DEFAULT_SEED})", "sample", metavar="N"),
    DecodeOption(
        "alignments",
        bool,
        "--alignments",
        "alignments",
        'after each output, an "A-ID<TAB>S-T ..." line (json: an "alignment" list): output token T attends most to '
        "source token S (0-based), in --alignment-layer's cross-attention averaged over the heads",
    ),
    DecodeOption(
        "alignment_layer",
        int,
        "--alignment-layer",
        "alignment_layer",
        "the decoder layer whose cross-attention aligns (0-based; -1, the default, is the last)",
        metavar="L",
        ctranslate2="CTranslate2 aligns with the last decoder layer",
    ),
    DecodeOption(
        "replace_unk",
        bool,
        "--replace-unk",
        "replace_unk",
        "replace each <unk> of an output by the source symbol it aligns to (char or symbol vocabularies)",
    ),
    DecodeOption(
        "repetition_penalty",
        float,
        "--repetition-penalty",
        "repetition_penalty",
        "a token already in the output has its logit divided by R where positive, multiplied by R where not (the "
        "CTRL paper's rule; 1, the default, is off; > 1 discourages repeats)",
        metavar="R",
    ),
    DecodeOption(
        "no_repeat_ngram_size",
        int,
        "--no-repeat-ngram-size",
        "no_repeat_ngram_size",
        "no n-gram of N tokens occurs twice in an output: a token that would complete one is forbidden (0, the "
        "default, is off)",
        metavar="N",
    ),
    DecodeOption(
        "end_token",
        str,
        "--end-token",
        "end_token",
        "an output also ends at this target token, as at the end of sentence (repeat the flag, or separate tokens "
        "by commas); the token is not part of the output",
        metavar="TOKEN",
        many=True,
        ctranslate2="CTranslate2's beam search runs on past an end token other than </s>",
    ),
    DecodeOption(
        "suppress",
        str,
        "--suppress",
        "suppress",
        "target tokens never produced (repeat the flag, or separate them by commas); an entry of several tokens "
        'separated by spaces ("a b") is a sequence never completed',
        metavar="TOKENS",
        many=True,
    ),
    DecodeOption(
        "prefix",
        str,
        "--prefix-file",
        None,
        "one target prefix per input line (an empty line: none): each output starts with its prefix, whose tokens "
        "are forced, scored and kept in the output",
        metavar="FILE",
    ),
)
OPTION_NAMES: tuple[str, ...] = tuple(option.name for option in DECODE_OPTIONS)
# the controls (dotformer.decoding.controls): translate's options that generate and /v1/completions take too
CONTROL_NAMES: tuple[str, ...] = ("repetition_penalty", "no_repeat_ngram_size", "end_token", "suppress")
CONTROL_OPTIONS: tuple[DecodeOption, ...] = tuple(option for option in DECODE_OPTIONS if option.name in CONTROL_NAMES)
SEARCH_OPTIONS: tuple[DecodeOption, ...] = tuple(option for option in DECODE_OPTIONS if option.field is not None)


def has_controls(config: DecodeConfig) -> bool:
    """Whether ``config`` sets any of the controls of :data:`CONTROL_OPTIONS` to another value than its default."""
    return any(getattr(config, option.field) != option.default for option in CONTROL_OPTIONS if option.field)


def with_surface_names(message: str, names: Mapping[str, str]) -> str:
    """``message`` (a :class:`DecodeConfig` error) with each field it names written as ``names`` says, for a
    surface that calls its options otherwise: ``"DecodeConfig.beam_size must be a positive integer, got 0"`` with
    ``{"beam_size": "--beam"}`` -> ``"--beam must be a positive integer, got 0"``. ``DecodeConfig.FIELD`` and a
    bare field name with an underscore (``n_best=5``) are renamed; other words are kept."""

    def rename(match: re.Match[str]) -> str:
        field = match.group(1) or match.group(2)
        return names.get(field, match.group(0))

    return re.sub(r"DecodeConfig\.(\w+)|\b([a-z]+_\w+)\b", rename, message)


FLAG_NAMES: dict[str, str] = {option.field: option.flag for option in SEARCH_OPTIONS if option.field}  # -> --beam


Misplaced = Callable[[list[DecodeOption], str, str], str]  # (options, their strategy, the strategy asked) -> message


def only_apply(names: Sequence[str], where: str) -> str:
    """``"temperature, seed only apply to WHERE"`` (one name: ``"seed only applies to WHERE"``): the start of every
    surface's message for options of another strategy."""
    return f"{', '.join(names)} only {'applies' if len(names) == 1 else 'apply'} to {where}"


def misplaced_message(options: list[DecodeOption], wanted: str, strategy: str) -> str:
    """The default message for options of another strategy: ``"temperature, seed only apply to strategy='sample',
    not strategy='beam'"`` (one option: ``"seed only applies ..."``)."""
    return f"{only_apply([o.name for o in options], f'strategy={wanted!r}')}, not strategy={strategy!r}"


def decode_config(values: Mapping[str, Any], misplaced: Misplaced = misplaced_message) -> DecodeConfig:
    """The :class:`DecodeConfig` of the given option values (a missing or None value: the default).

    Args:
        values: option name -> value, for the options of :data:`SEARCH_OPTIONS` (others are ignored).
        misplaced: the message for options given with another strategy (the CLI names its flags).

    Raises:
        ConfigError: an option of another strategy (sampling options without sampling, then ``beam`` without beam
            search; the message names them), or a value :class:`DecodeConfig` refuses.
    """
    strategy = values.get("strategy") or DecodeConfig.strategy
    for wanted in ("sample", "beam"):
        given = [o for o in SEARCH_OPTIONS if o.strategy == wanted and values.get(o.name) is not None]
        if given and strategy != wanted:
            raise ConfigError(misplaced(given, wanted, strategy))
    fields = {o.field: values[o.name] for o in SEARCH_OPTIONS if o.field and values.get(o.name) is not None}
    return DecodeConfig(**fields)


@dataclass(frozen=True)
class DecodeRequest:
    """One call's decoding, as every surface asks for it: what :meth:`dotformer.api.Translator.translate` runs.

    Attributes:
        config: the search (the options of :data:`SEARCH_OPTIONS`).
        prefix: the forced start of each output (the ``prefix`` option): a string for one text, one string or None
            per text for several; None: no prefixes.
        batch_size: most inputs decoded together. max_tokens: most padded source tokens per batch (None: the
            default of :mod:`dotformer.decoding.order`). max_input_length: most tokens (EOS included) an input may
            have (None: the model's). progress: a progress bar on stderr (None: from 500 inputs on).
        details: results with scores and tokens instead of texts. attention: also each input's attention maps (the
            torch engine only). scores: with details, each hypothesis's exact score (False lets CTranslate2 skip
            its scoring pass).
    """

    config: DecodeConfig = field(default_factory=DecodeConfig)
    prefix: str | tuple[str | None, ...] | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    max_tokens: int | None = None
    max_input_length: int | None = None
    progress: bool | None = None
    details: bool = False
    attention: bool = False
    scores: bool = True

    @property
    def wants_details(self) -> bool:
        """Whether the call returns results rather than texts (details, attention maps or alignments asked for)."""
        return self.details or self.attention or self.config.alignments


REQUEST_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(DecodeRequest))  # config, prefix, batch_size, ...
REQUEST_NAMES: tuple[str, ...] = tuple(dict.fromkeys((*OPTION_NAMES, *REQUEST_FIELDS)))  # what a call may name


def decode_request(values: Mapping[str, Any], misplaced: Misplaced = misplaced_message) -> DecodeRequest:
    """The :class:`DecodeRequest` of the given values: options of :data:`DECODE_OPTIONS` by name (None: not given)
    and fields of :class:`DecodeRequest`; a ready ``config`` replaces the search options.

    Raises:
        ConfigError: an unknown name, a search option beside ``config`` (the message names it), or see
            :func:`decode_config`.
    """
    unknown = [name for name in values if name not in REQUEST_NAMES]
    if unknown:
        known = ", ".join(REQUEST_NAMES)
        raise ConfigError(f"unknown decoding option(s) {', '.join(unknown)}; the options are {known}")
    config = values.get("config")
    if config is not None:
        given = [o.name for o in SEARCH_OPTIONS if values.get(o.name) is not None]
        if given:
            raise ConfigError(f"config= replaces the search arguments; leave out {', '.join(given)}")
    else:
        config = decode_config(values, misplaced)
    prefix = values.get("prefix")
    if prefix is not None and not isinstance(prefix, str):
        prefix = tuple(prefix) if isinstance(prefix, Sequence) else prefix
    settings = {name: values[name] for name in REQUEST_FIELDS if name not in ("config", "prefix") and name in values}
    return DecodeRequest(config=config, prefix=prefix, **settings)
