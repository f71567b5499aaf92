"""The decoding configuration: which search, how wide, how long, how random.

One frozen dataclass, validated on construction, shared by :func:`dotformer.decoding.decode_batch`,
:func:`dotformer.decoding.translate` and the ``dotformer translate`` / ``dotformer evaluate`` commands.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Any, Literal

from dotformer.config import DEFAULT_SEED, MAX_SEED
from dotformer.errors import ConfigError

Strategy = Literal["greedy", "beam", "sample"]
STRATEGIES: tuple[str, ...] = ("greedy", "beam", "sample")
BeamStop = Literal["finished", "exact"]
BEAM_STOPS: tuple[str, ...] = ("finished", "exact")  # when beam search stops (dotformer.decoding.beam, "When to stop")
MAX_BEAM_SIZE = 1024  # the widest beam: each step scores beam_size x V candidates per sentence
MAX_COUNT = 2**63 - 1  # the largest length, k or n a search takes: a signed 64-bit integer (torch's int64 tensors,
# CTranslate2's size_t arguments); a longer length than the model's positions is cut to them, a larger k or n is off
REPETITION_PENALTY_RANGE = (1e-6, 1e6)  # R and 1/R up to 1e6: a logit up to 1e32 stays finite in float32
MAX_LENGTH_PENALTY = 10.0  # the largest α: an output of 4096 tokens keeps a finite float32 penalty on both engines,
# ((5 + |Y|) / 6)^α on torch's and |Y|^α on CTranslate2's (an infinite one makes every score 0, the ranking arbitrary)


@dataclass(frozen=True)
class DecodeConfig:
    """How to turn a source sentence into output tokens; frozen, validated in ``__post_init__``.

    The defaults are the paper's (§6.1): beam search with beam size 4, length penalty α = 0.6, and a maximum output
    length of input length + 50.

    Raises:
        ConfigError: a field is out of range (``beam_size`` above :data:`MAX_BEAM_SIZE`, ``seed`` outside [0,
            :data:`~dotformer.config.MAX_SEED`], a length, ``top_k`` or ``no_repeat_ngram_size`` above
            :data:`MAX_COUNT`, ``repetition_penalty`` outside :data:`REPETITION_PENALTY_RANGE`, ``length_penalty``
            above :data:`MAX_LENGTH_PENALTY`), a number field given another type (a string, a bool) or two fields
            disagree (the message names them).
    """

    strategy: Strategy = "beam"  # "greedy" (argmax each step), "beam" (beam search), "sample" (random sampling)
    beam_size: int = 4  # K, hypotheses kept per sentence by beam search (§6.1: 4)
    n_best: int = 1  # hypotheses returned per sentence: the n best of the beam, or n independent samples
    beam_stop: BeamStop = "finished"  # "finished": once K hypotheses have finished (fairseq's, CTranslate2's rule);
    # "exact": once no alive hypothesis can still enter the K best finished ones (the bound with L_max)
    length_penalty: float = 0.6  # α of the GNMT length penalty lp(Y) = ((5 + |Y|) / 6)^α; 0 ranks by summed log-prob
    max_len_a: float = 1.0  # maximum output length = floor(max_len_a * source length + max_len_b) decoding steps
    max_len_b: int = 50  # (§6.1: "input length + 50"); steps count the final EOS, see ``max_output_length``
    min_len_a: float = 0.0  # minimum output length = floor(min_len_a * source length + min_len_b) tokens before EOS
    min_len_b: int = 0  # (fairseq's --min-len); EOS is forbidden until then, the maximum length wins over it
    temperature: float = 1.0  # sampling: logits are divided by it before the softmax (< 1 sharper, > 1 flatter)
    top_k: int = 0  # sampling: keep only the k most likely tokens (0 = no limit)
    top_p: float = 1.0  # sampling: keep the smallest set of tokens whose probability reaches p (1.0 = no limit)
    seed: int = DEFAULT_SEED  # sampling: seed of the random generator; the same seed gives the same samples
    alignments: bool = False  # also align each output token to the source token it attended to most
    alignment_layer: int = -1  # the decoder layer whose cross-attention (averaged over heads) aligns; -1 = the last
    replace_unk: bool = False  # replace each <unk> of the output by the source piece it aligns to
    repetition_penalty: float = 1.0  # R: a token already in the output has its logit / R if > 0, · R if not (1: off)
    no_repeat_ngram_size: int = 0  # n: a token completing an n-gram already in the output is forbidden (0: off)
    end_token: tuple[str, ...] = ()  # tokens that end a hypothesis, as EOS does (it always does)
    suppress: tuple[tuple[str, ...], ...] = ()  # tokens never produced, and sequences of tokens never completed
    use_cache: bool = True  # reuse keys/values between steps; False recomputes the whole prefix (for tests, benchmarks)

    def __post_init__(self) -> None:
        object.__setattr__(self, "end_token", token_list(self.end_token, "end_token"))
        object.__setattr__(self, "suppress", sequence_list(self.suppress, "suppress"))
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"DecodeConfig.strategy must be one of {', '.join(STRATEGIES)}, got {self.strategy!r}")
        if self.beam_stop not in BEAM_STOPS:
            raise ConfigError(f"DecodeConfig.beam_stop must be one of {', '.join(BEAM_STOPS)}, got {self.beam_stop!r}")
        for name in ("beam_size", "n_best"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"DecodeConfig.{name} must be a positive integer, got {value!r}")
        if self.beam_size > MAX_BEAM_SIZE:
            raise ConfigError(f"DecodeConfig.beam_size must be at most {MAX_BEAM_SIZE}, got {self.beam_size}")
        if self.strategy == "beam" and self.n_best > self.beam_size:
            raise ConfigError(
                f"DecodeConfig.n_best={self.n_best} cannot exceed beam_size={self.beam_size}: "
                f"beam search keeps only beam_size hypotheses"
            )
        if self.strategy == "greedy" and self.n_best != 1:
            raise ConfigError(
                f"DecodeConfig.n_best={self.n_best} needs strategy 'beam' or 'sample': greedy decoding finds one output"
            )
        if not is_number(self.length_penalty) or not math.isfinite(self.length_penalty) or self.length_penalty < 0:
            raise ConfigError(f"DecodeConfig.length_penalty must be a finite number >= 0, got {self.length_penalty!r}")
        if self.length_penalty > MAX_LENGTH_PENALTY:
            raise ConfigError(
                f"DecodeConfig.length_penalty must be at most {MAX_LENGTH_PENALTY:g}, got {self.length_penalty!r}"
            )
        if not is_number(self.max_len_a) or not math.isfinite(self.max_len_a) or self.max_len_a < 0:
            raise ConfigError(f"DecodeConfig.max_len_a must be a finite number >= 0, got {self.max_len_a!r}")
        check_count("max_len_b", self.max_len_b)
        if self.max_len_a == 0 and self.max_len_b == 0:
            raise ConfigError(
                "DecodeConfig.max_len_a and max_len_b are both 0: that allows no decoding step, and an output needs "
                "one for its end of sentence; give max_len_b >= 1"
            )
        if not is_number(self.min_len_a) or not math.isfinite(self.min_len_a) or self.min_len_a < 0:
            raise ConfigError(f"DecodeConfig.min_len_a must be a finite number >= 0, got {self.min_len_a!r}")
        check_count("min_len_b", self.min_len_b)
        if not is_number(self.temperature) or not math.isfinite(self.temperature) or self.temperature <= 0:
            raise ConfigError(f"DecodeConfig.temperature must be a finite number > 0, got {self.temperature!r}")
        check_count("top_k", self.top_k, " (0 = off)")
        if not is_number(self.top_p) or not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"DecodeConfig.top_p must be in (0, 1] (1 = off), got {self.top_p!r}")
        penalty, (least, most) = self.repetition_penalty, REPETITION_PENALTY_RANGE
        if isinstance(penalty, bool) or not isinstance(penalty, int | float) or not least <= penalty <= most:
            raise ConfigError(
                f"DecodeConfig.repetition_penalty must be a number from {least:g} to {most:g} (1 = off), got "
                f"{penalty!r}"
            )
        check_count("no_repeat_ngram_size", self.no_repeat_ngram_size, " (0 = off)")
        if not isinstance(self.alignment_layer, int) or isinstance(self.alignment_layer, bool):
            raise ConfigError(f"DecodeConfig.alignment_layer must be an integer, got {self.alignment_layer!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or not 0 <= self.seed <= MAX_SEED:
            raise ConfigError(f"DecodeConfig.seed must be an integer in [0, 2**63 - 1], got {self.seed!r}")

    def max_output_length(self, source_length: int) -> int:
        """The most decoding steps for a source of ``source_length`` tokens (its EOS included, PAD excluded).

        Each step produces one token, so a finished hypothesis has at most ``max_output_length - 1`` tokens before
        its EOS, and a hypothesis cut at the limit has exactly ``max_output_length`` tokens and no EOS. At least 1
        (``max_len_a`` and ``max_len_b`` both 0 are refused; a positive ``max_len_a`` of a short source may round
        down to 0). Decoding also caps it at the model's positions
        (:func:`~dotformer.decoding.incremental.output_positions`).
        """
        return max(1, floor_count(self.max_len_a * source_length + self.max_len_b))

    def min_output_length(self, source_length: int) -> int:
        """The fewest tokens before EOS for a source of ``source_length`` tokens (its EOS included, PAD excluded).

        EOS is forbidden until the output has this many tokens; an output cut at :meth:`max_output_length` may still
        be shorter (the maximum wins, so it is at most :meth:`max_output_length`). 0 by default: no minimum.
        """
        least = max(0, floor_count(self.min_len_a * source_length + self.min_len_b))
        return min(least, self.max_output_length(source_length))

    @property
    def has_controls(self) -> bool:
        """Whether a repetition penalty, a no-repeat n-gram size, an end token or a suppressed sequence is set."""
        return self.repetition_penalty != 1.0 or self.no_repeat_ngram_size > 0 or bool(self.end_token or self.suppress)

    def replace(self, **changes: Any) -> DecodeConfig:
        """A copy with some fields changed, validated again."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-serialisable dict."""
        return dataclasses.asdict(self)


def is_number(value: Any) -> bool:
    """Whether ``value`` is a real number: an int, a float, a NumPy scalar (a bool or a string, ``"1"``, is not)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_count(name: str, value: Any, off: str = "") -> None:
    """Check that field ``name`` is an integer in [0, :data:`MAX_COUNT`] (``off``: what 0 means, for the message).

    Raises:
        ConfigError: not an integer (a bool is not), negative, or above :data:`MAX_COUNT` (the message names it).
    """
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"DecodeConfig.{name} must be a non-negative integer{off}, got {value!r}")
    if value > MAX_COUNT:
        raise ConfigError(f"DecodeConfig.{name} must be at most 2**63 - 1{off}, got {value}")


def floor_count(value: float) -> int:
    """``floor(value)`` for a length computed from the fields, at most :data:`MAX_COUNT` (an infinite product of a
    huge ``max_len_a`` included)."""
    return MAX_COUNT if value >= MAX_COUNT else math.floor(value)


def split_tokens(value: str, what: str = "tokens") -> list[str]:
    """``"a,b"`` -> ``["a", "b"]``: a comma-separated list of tokens (a lone ``","`` is the comma token).

    Raises:
        ConfigError: an empty token (``""``, ``"a,,b"``, ``"a,"``): the message names ``what`` and the value.
    """
    if value == ",":
        return [value]
    parts = [part.strip() for part in value.split(",")]
    if not all(parts):
        raise ConfigError(
            f"{what}: an empty token in {value!r} (separate tokens by single commas; a lone ',' is the comma token)"
        )
    return parts


def token_list(value: Any, name: str) -> tuple[str, ...]:
    """End tokens as a tuple of token strings: one string (comma-separated) or a sequence of strings.

    Raises:
        ConfigError: not strings, or an empty token.
    """
    items = split_tokens(value, f"DecodeConfig.{name}") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(item, str) and item for item in items):
        raise ConfigError(f"DecodeConfig.{name} must be tokens (a string or a list of strings), got {value!r}")
    return tuple(items)


def sequence_list(value: Any, name: str) -> tuple[tuple[str, ...], ...]:
    """Suppressed sequences as a tuple of token tuples: one string (comma-separated entries) or a sequence of
    entries, each a string (its tokens separated by spaces) or a sequence of token strings.

    Raises:
        ConfigError: not strings, or an empty entry.
    """
    items = split_tokens(value, f"DecodeConfig.{name}") if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise ConfigError(f"DecodeConfig.{name} must be tokens or sequences of tokens, got {value!r}")
    out = []
    for item in items:
        tokens = item.split() or [item] if isinstance(item, str) else item
        if not isinstance(tokens, list | tuple) or not tokens or not all(isinstance(t, str) and t for t in tokens):
            raise ConfigError(f"DecodeConfig.{name} must be tokens or sequences of tokens, got {value!r}")
        out.append(tuple(tokens))
    return tuple(out)


def generation_config(
    max_new_tokens: int = 200, strategy: str = "sample", n: int = 1, **fields: object
) -> DecodeConfig:
    """The :class:`DecodeConfig` of generating ``max_new_tokens`` tokens (``n`` samples, or the ``n`` best beams).

    Other fields (temperature, top_k, top_p, seed, beam_size, length_penalty, use_cache) pass through; beam search's
    length penalty defaults to 0 (rank by summed log-probability).

    Raises:
        ConfigError: ``max_new_tokens`` < 1, or a field out of range (the message names it).
    """
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ConfigError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
    fields.setdefault("length_penalty", 0.0)
    if strategy == "beam":
        fields.setdefault("beam_size", max(4, n))
    return DecodeConfig(strategy=strategy, n_best=n, max_len_a=0.0, max_len_b=max_new_tokens, **fields)  # type: ignore[arg-type]
