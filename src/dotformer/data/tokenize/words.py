"""A tagger's words as tokens: which token of each word carries the word's label.

A tagged sentence is whitespace-separated words with a label each; the encoder reads tokens. A word is encoded as it
reads inside its sentence: the first alone, each later one after a space (``" word"``, as byte-level BPE and
sentencepiece read a word within a sentence; a char tokenizer reads the space as its own token, a WordPiece
vocabulary drops it). A word's tokens that are not whitespace are its *real* tokens; the first of them carries the
word's label (``subtokens="first"``, the standard way) or all of them do (``"all"``), and every other position holds
:data:`IGNORE_LABEL`, which the loss does not score.

:class:`WordPieces` encodes many sentences at once through the tokenizer's batch encoder
(:meth:`~dotformer.data.tokenize.tokenizers.Tokenizer.encode_arrays`), as arrays: what preparing a tagger's data writes
(:func:`token_labels`), and what labelling a text at inference reads (:meth:`WordPieces.encode`). No torch here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from dotformer.data.tokenize.tokenizers import UNK_ID, EncodedChunk, Tokenizer
from dotformer.errors import ConfigError, DataError

IGNORE_LABEL = -100  # a position the loss does not score (PyTorch's and HF's ignore_index)
SUBTOKENS = ("first", "all")


class WordTokens(NamedTuple):
    """The tokens of n sentences of W words in all (T tokens).

    Attributes:
        ids: every sentence's token ids one after the other; ``ids.lengths`` (n,) the tokens of each sentence.
        word_lengths: (W,) int64, the tokens of each word, sentence after sentence.
        word_of: (T,) int64, the word (0 .. W - 1) each token belongs to.
        real: (T,) bool, whether a token is one of its word's real tokens (not whitespace only).
    """

    ids: EncodedChunk
    word_lengths: np.ndarray
    word_of: np.ndarray
    real: np.ndarray


class WordPieces:
    """The tokens of whitespace-separated words, and which of them carry each word's label (module docstring).

    Args:
        tokenizer: the vocabulary.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self._blank: dict[int, bool] = {}

    def blank(self, ids: np.ndarray) -> np.ndarray:
        """(T,) bool: whether each token stands for whitespace only (never true of <unk>); each distinct id is
        decoded once per tokenizer."""
        distinct = np.unique(ids)
        for index in distinct.tolist():
            if index not in self._blank:
                self._blank[index] = index != UNK_ID and not self.tokenizer.decode([index]).strip()
        table = np.array([self._blank[index] for index in distinct.tolist()], dtype=bool)
        return table[np.searchsorted(distinct, ids)] if len(ids) else np.zeros(0, dtype=bool)

    def encode_sentences(self, sentences: Sequence[Sequence[str]]) -> WordTokens:
        """The :class:`WordTokens` of ``sentences`` (each a list of words), encoded in one batch.

        Raises:
            DataError: a word that encodes to whitespace only (it could carry no label).
        """
        pieces = [word if i == 0 else f" {word}" for words in sentences for i, word in enumerate(words)]
        encoded = self.tokenizer.encode_arrays(pieces)  # one row per word
        word_lengths = encoded.lengths
        word_of = np.repeat(np.arange(len(pieces), dtype=np.int64), word_lengths)  # (T,)
        real = ~self.blank(encoded.ids)
        has_real = np.bincount(word_of[real], minlength=len(pieces)) > 0  # (W,)
        if not has_real.all():
            raise DataError(f"the word {pieces[int(np.argmin(has_real))].strip()!r} encodes to whitespace only")
        words = np.fromiter(map(len, sentences), dtype=np.int64, count=len(sentences))
        word_ends = np.concatenate([[0], np.cumsum(word_lengths)])  # tokens before each word, and all
        sentence_ends = word_ends[np.cumsum(words)]  # tokens up to the end of each sentence
        lengths = np.diff(np.concatenate([[0], sentence_ends]))
        return WordTokens(EncodedChunk(encoded.ids, lengths), word_lengths, word_of, real)

    def encode(self, words: Sequence[str]) -> tuple[list[int], list[list[int]]]:
        """One sentence: (its ids, per word the positions in the ids of its real tokens, the first one labelled).

        Raises:
            DataError: a word that encodes to whitespace only.
        """
        if not words:
            return [], []
        tokens = self.encode_sentences([words])
        positions = np.flatnonzero(tokens.real)
        owners = tokens.word_of[positions]
        per_word = np.split(positions, np.searchsorted(owners, np.arange(1, len(words))))
        return tokens.ids.ids.tolist(), [where.tolist() for where in per_word]


def label_positions(tokens: WordTokens, subtokens: str = "first") -> np.ndarray:
    """(T,) bool: the tokens that carry their word's label, its first real token (``"first"``) or every real one
    (``"all"``).

    Raises:
        ConfigError: another ``subtokens``.
    """
    if subtokens not in SUBTOKENS:
        raise ConfigError(f"label_subtokens must be one of {', '.join(SUBTOKENS)}, got {subtokens!r}")
    if subtokens == "all":
        return tokens.real.copy()
    real = np.flatnonzero(tokens.real)
    owners = tokens.word_of[real]
    first = real[np.concatenate([[True], owners[1:] != owners[:-1]])] if len(real) else real
    labelled = np.zeros(len(tokens.real), dtype=bool)
    labelled[first] = True
    return labelled


def token_labels(tokens: WordTokens, word_labels: np.ndarray, subtokens: str = "first") -> EncodedChunk:
    """A label per token of ``tokens``, aligned with its ids: each word's label id (``word_labels``, (W,)) on the
    tokens :func:`label_positions` picks, :data:`IGNORE_LABEL` on every other."""
    labels = np.full(len(tokens.word_of), IGNORE_LABEL, dtype=np.int64)  # (T,)
    where = label_positions(tokens, subtokens)
    labels[where] = np.asarray(word_labels, dtype=np.int64)[tokens.word_of[where]]
    return EncodedChunk(labels, tokens.ids.lengths)
