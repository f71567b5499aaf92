"""How well a language model predicts held-out text: nats per token, perplexity, bits per character.

For a text x_1 … x_N scored by teacher forcing, with L = -Σ ln P(x_t | x_<t) summed over the N scored tokens:

    nats per token   L / N                  (the training loss without label smoothing)
    perplexity       exp(L / N)             (:func:`dotformer.metrics.decoded.perplexity`)
    bits per token   L / (N · ln 2)
    bits per char    L / (C · ln 2)         C = the characters those tokens spell (each line end counts as one)

Perplexity depends on the tokenizer (a BPE token holds several characters); bits per character does not, so it
compares a character model with a BPE one, or with another library's model of the same text (nanoGPT's
Shakespeare character model reaches about 1.88 nats = 2.7 bits per character).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dotformer.errors import DataError
from dotformer.metrics.decoded import perplexity

if TYPE_CHECKING:
    from dotformer.data.batch.blocks import TokenStream
    from dotformer.data.tokenize.tokenizers import Tokenizer


@dataclass(frozen=True)
class LanguageModelScore:
    """The summed NLL of a scored text and what it was summed over.

    Attributes:
        nll_sum: L, natural-log negative log-likelihood summed over the scored tokens (nats).
        tokens: N, tokens scored. characters: C, characters they spell (line ends included).

    Raises:
        DataError: no tokens, negative counts, or a negative or non-finite ``nll_sum``.
    """

    nll_sum: float
    tokens: int
    characters: int

    def __post_init__(self) -> None:
        if self.tokens < 1 or self.characters < 0:
            raise DataError(f"a language-model score needs tokens >= 1 and characters >= 0, got {self}")
        if not math.isfinite(self.nll_sum) or self.nll_sum < 0:
            raise DataError(f"a language-model score needs a finite non-negative summed NLL, got {self.nll_sum}")

    @property
    def nats_per_token(self) -> float:
        """L / N."""
        return self.nll_sum / self.tokens

    @property
    def perplexity(self) -> float:
        """exp(L / N) (``math.inf`` on overflow)."""
        return perplexity(self.nll_sum, self.tokens)

    @property
    def bits_per_token(self) -> float:
        """L / (N · ln 2)."""
        return self.nll_sum / (self.tokens * math.log(2))

    @property
    def bits_per_character(self) -> float:
        """L / (C · ln 2) (nan when C = 0)."""
        return self.nll_sum / (self.characters * math.log(2)) if self.characters else math.nan

    def to_dict(self) -> dict[str, float | int]:
        """Every figure, JSON-serialisable."""
        return {
            "nll_sum": self.nll_sum,
            "tokens": self.tokens,
            "characters": self.characters,
            "nats_per_token": self.nats_per_token,
            "perplexity": self.perplexity,
            "bits_per_token": self.bits_per_token,
            "bits_per_character": self.bits_per_character,
        }


def scored_characters(stream: TokenStream, tokenizer: Tokenizer) -> int:
    """C of bits per character: the characters the scored tokens of ``stream`` spell, i.e. all of the text's
    (``stream.characters``, line ends included) but those of its first token, which has no context and is never
    scored (an EOS spells one: the line end).

    Raises:
        DataError: an empty stream.
    """
    from dotformer.data.tokenize.tokenizers import EOS_ID

    if len(stream) == 0:
        raise DataError("an empty text has no characters to score")
    first = int(stream.ids[0])
    unscored = 1 if first == EOS_ID else len(tokenizer.decode([first]))
    return max(0, stream.characters - unscored)
