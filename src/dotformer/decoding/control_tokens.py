"""The tokens a user's controls name, as ids of the model's target vocabulary: the end tokens and the suppressed
tokens and sequences of a :class:`~dotformer.decoding.DecodeConfig` (:mod:`dotformer.decoding.controls`). Both engines
read them here, and check them the same way: the CTranslate2 engine runs without torch, and so does this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from dotformer.data.tokenize.tokenizers import EOS_ID
from dotformer.errors import ConfigError

if TYPE_CHECKING:
    from dotformer.data.tokenize.tokenizers import Tokenizer


def token_ids(tokenizer: Tokenizer, tokens: Sequence[str], what: str) -> list[int]:
    """The ids of ``tokens`` (vocabulary pieces) in ``tokenizer``'s vocabulary.

    Raises:
        ConfigError: a token not in the vocabulary (the message names it and ``what`` it was given as).
    """
    vocabulary = {tokenizer.id_to_token(i): i for i in range(tokenizer.vocab_size)}
    unknown = [token for token in tokens if token not in vocabulary]
    if unknown:
        raise ConfigError(
            f"{what}: {', '.join(repr(t) for t in unknown)} is not a token of the model's target vocabulary"
            if len(unknown) == 1
            else f"{what}: {', '.join(repr(t) for t in unknown)} are not tokens of the model's target vocabulary"
        )
    return [vocabulary[token] for token in tokens]


def control_token_ids(
    config: object, tokenizer: Tokenizer | None
) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """``(end ids, suppressed sequences as ids)`` of a :class:`~dotformer.decoding.DecodeConfig`'s ``end_token`` and
    ``suppress``, read with the target ``tokenizer`` (None: the config may hold no token); EOS, which always ends a
    hypothesis, is left out of the end ids.

    Raises:
        ConfigError: an end token or a suppressed token not in the vocabulary (named), or tokens without a tokenizer.
    """
    end_tokens: tuple[str, ...] = getattr(config, "end_token", ())
    suppress: tuple[tuple[str, ...], ...] = getattr(config, "suppress", ())
    if tokenizer is None and (end_tokens or suppress):
        raise ConfigError("end_token and suppress need the model's target vocabulary")
    if tokenizer is None:
        return (), ()
    ends = tuple(i for i in token_ids(tokenizer, end_tokens, "end_token") if i != EOS_ID)
    return ends, tuple(tuple(token_ids(tokenizer, seq, "suppress")) for seq in suppress)
