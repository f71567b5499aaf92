"""Tokenizers: text <-> token ids, with the same four special tokens in every vocabulary.

Three kinds to train, one interface (:class:`Tokenizer`); existing tokenizers (a Hugging Face tokenizer.json, a
sentencepiece .model) are read behind the same interface by :mod:`dotformer.data.pretrained`:

* ``"char"``: one token per character (G2P sources: the letters of a word).
* ``"symbol"``: one token per whitespace-separated symbol (ARPAbet phones "AH0 B AE1 N", synthetic "a3 b7");
  decoding joins the symbols with single spaces.
* ``"bpe"``: byte-level BPE trained with Hugging Face ``tokenizers`` (translation; :mod:`dotformer.data.bpe`).
  The byte-level pre-tokenizer maps every UTF-8 byte to a symbol of a 256-symbol base alphabet and no normaliser is
  applied, so ``decode(encode(x)) == x`` for every string, spaces, tabs and accents included, and no text has
  unknown tokens. Pieces are shown decoded (``" the"``, ``"crió"``), not in the byte alphabet (``"Ġthe"``, ``"criÃ³"``);
  a piece that holds only part of a multi-byte character shows its bytes as ``\\xNN``.

Ids 0..3 are always ``<pad>``, ``<s>`` (BOS), ``</s>`` (EOS), ``<unk>``; ``encode`` adds no BOS/EOS (batching
does) and ``decode`` skips the four. A tokenizer is saved as one JSON file with a ``"kind"`` field.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal, NamedTuple

from dotformer.data.textio import read_text
from dotformer.errors import ConfigError, DataError, MissingDataError

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")
NUM_SPECIAL = len(SPECIAL_TOKENS)
FORMAT_VERSION = 1
DEFAULT_BPE_VOCAB_SIZE = 8000
BYTE_ALPHABET_SIZE = 256
TokenizerKind = Literal["char", "symbol", "bpe"]
KINDS = ("char", "symbol", "bpe")


class Tokenizer(ABC):
    """Text <-> ids. Subclasses: :class:`CharTokenizer`, :class:`SymbolTokenizer`,
    :class:`~dotformer.data.bpe.BPETokenizer`."""

    kind: ClassVar[str]

    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """V, the number of ids, specials included (the model's embedding rows)."""

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, without BOS/EOS; unknown pieces become ``UNK_ID``."""

    @abstractmethod
    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``; PAD, BOS, EOS and UNK are skipped (decoding does not stop at EOS).

        Raises:
            DataError: an id outside ``[0, vocab_size)``.
        """

    @abstractmethod
    def id_to_token(self, index: int) -> str:
        """The text piece of one id (the special tokens' own strings for 0..3).

        Raises:
            DataError: an id outside ``[0, vocab_size)``.
        """

    @abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable contents, with ``"kind"`` and ``"format"``; :func:`tokenizer_from_dict` inverts it."""

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """``[encode(text) for text in texts]`` (BPE does it in parallel)."""
        return [self.encode(text) for text in texts]

    def tokens(self, text: str) -> list[str]:
        """The pieces of ``text`` as the model sees them: ``[id_to_token(i) for i in encode(text)]``."""
        return [self.id_to_token(index) for index in self.encode(text)]

    def count_unknown(self, text: str) -> int:
        """How many pieces of ``text`` encode to ``UNK_ID`` (always 0 for byte-level BPE)."""
        return sum(index == UNK_ID for index in self.encode(text))

    def save(self, path: str | Path) -> Path:
        """Write the tokenizer as one JSON file (parents created). Returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), ensure_ascii=False) + "\n", encoding="utf-8")
        return path

    def _check_id(self, index: int) -> None:
        """Raise DataError unless ``0 <= index < vocab_size``."""
        if not 0 <= index < self.vocab_size:
            raise DataError(f"token id {index} is outside the {self.kind} vocabulary of size {self.vocab_size}")


class VocabularyTokenizer(Tokenizer):
    """A tokenizer whose pieces are looked up in a list of tokens: id = position in ``vocab``.

    Args:
        vocab: all tokens by id; the first four must be :data:`SPECIAL_TOKENS`.

    Raises:
        DataError: the specials are not at 0..3, or a token appears twice.
    """

    def __init__(self, vocab: Sequence[str]) -> None:
        vocab = list(vocab)
        if tuple(vocab[:NUM_SPECIAL]) != SPECIAL_TOKENS:
            raise DataError(f"{self.kind} vocabulary must start with {SPECIAL_TOKENS}, got {vocab[:NUM_SPECIAL]}")
        if len(set(vocab)) != len(vocab):
            repeated = sorted(token for token, count in Counter(vocab).items() if count > 1)
            raise DataError(f"{self.kind} vocabulary lists tokens more than once: {repeated[:10]}")
        self._vocab = vocab
        # Specials are not looked up: a text containing "<s>" encodes it as ordinary pieces (or UNK).
        self._ids = {token: index for index, token in enumerate(vocab) if index >= NUM_SPECIAL}

    @abstractmethod
    def split(self, text: str) -> list[str]:
        """The pieces of ``text`` before lookup."""

    @abstractmethod
    def join(self, pieces: list[str]) -> str:
        """Inverse of :meth:`split` for known pieces."""

    @property
    def vocab_size(self) -> int:
        return len(self._vocab)

    @property
    def vocab(self) -> list[str]:
        """All tokens by id (a copy)."""
        return list(self._vocab)

    def encode(self, text: str) -> list[int]:
        ids = self._ids
        return [ids.get(piece, UNK_ID) for piece in self.split(text)]

    def decode(self, ids: Sequence[int]) -> str:
        pieces = []
        for index in ids:
            index = int(index)
            self._check_id(index)
            if index >= NUM_SPECIAL:
                pieces.append(self._vocab[index])
        return self.join(pieces)

    def id_to_token(self, index: int) -> str:
        self._check_id(int(index))
        return self._vocab[int(index)]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "format": FORMAT_VERSION, "vocab": self._vocab}


class CharTokenizer(VocabularyTokenizer):
    """One token per character: ``"read" -> ["r", "e", "a", "d"]``."""

    kind = "char"

    def split(self, text: str) -> list[str]:
        return list(text)

    def join(self, pieces: list[str]) -> str:
        return "".join(pieces)


class SymbolTokenizer(VocabularyTokenizer):
    """One token per whitespace-separated symbol: ``"R EH1 D" -> ["R", "EH1", "D"]``; decode joins with spaces."""

    kind = "symbol"

    def split(self, text: str) -> list[str]:
        return text.split()

    def join(self, pieces: list[str]) -> str:
        return " ".join(pieces)


def train_tokenizer(kind: TokenizerKind, texts: Iterable[str], vocab_size: int | None = None) -> Tokenizer:
    """Build a vocabulary from training texts.

    Args:
        kind: ``"char"``, ``"symbol"`` or ``"bpe"``.
        texts: the training texts (one side of the training split, or both sides for a shared vocabulary).
        vocab_size: at most this many ids, specials included. char/symbol: the most frequent pieces are kept
            (ties by code point order), None = all; bpe: the merge budget, None = 8000, at least 4 + 256 (the
            byte alphabet) + 1. A small corpus may give fewer ids than asked.

    Returns:
        A deterministic tokenizer: the same texts give the same vocabulary.

    Raises:
        ConfigError: unknown kind, or a vocab_size too small for the kind.
        DataError: no texts.
    """
    if kind not in KINDS:
        raise ConfigError(f"tokenizer kind must be one of {', '.join(KINDS)}, got {kind!r}")
    texts = list(texts)
    if not texts:
        raise DataError(f"cannot train a {kind} tokenizer on no texts")
    if kind == "bpe":
        from dotformer.data.bpe import train_bpe

        return train_bpe(texts, DEFAULT_BPE_VOCAB_SIZE if vocab_size is None else vocab_size)
    if vocab_size is not None and vocab_size <= NUM_SPECIAL:
        raise ConfigError(f"vocab_size must exceed the {NUM_SPECIAL} special tokens, got {vocab_size}")
    tokenizer_class = CharTokenizer if kind == "char" else SymbolTokenizer
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(text if kind == "char" else text.split())
    for special in SPECIAL_TOKENS:  # a symbol spelled like a special token stays unknown
        counts.pop(special, None)
    ranked = sorted(counts, key=lambda piece: (-counts[piece], piece))
    if vocab_size is not None:
        ranked = ranked[: vocab_size - NUM_SPECIAL]
    return tokenizer_class([*SPECIAL_TOKENS, *ranked])


class TokenizerPair(NamedTuple):
    """The source and target tokenizers of a task (the same object when the vocabulary is shared)."""

    src: Tokenizer
    tgt: Tokenizer


def default_kinds(task: str) -> tuple[TokenizerKind, TokenizerKind]:
    """The (source, target) tokenizer kinds of a task: g2p (char, symbol), synthetic (symbol, symbol), exact
    (char, char: a file scored by exact match keeps every character, spaces included), else bpe."""
    if task == "g2p":
        return "char", "symbol"
    if task == "synthetic":
        return "symbol", "symbol"
    if task == "exact":
        return "char", "char"
    return "bpe", "bpe"


def train_tokenizer_pair(
    sources: Sequence[str],
    targets: Sequence[str],
    src_kind: TokenizerKind,
    tgt_kind: TokenizerKind,
    src_vocab_size: int | None = None,
    tgt_vocab_size: int | None = None,
    shared: bool = False,
) -> TokenizerPair:
    """Train the source and target tokenizers, separately or as one shared vocabulary.

    A shared vocabulary (needed by ``ModelConfig.share_embeddings``) is trained on sources and targets together,
    with ``src_vocab_size``, and both fields of the result are the same object.

    Raises:
        ConfigError: ``shared`` with two different kinds.
    """
    if shared:
        if src_kind != tgt_kind:
            raise ConfigError(f"a shared vocabulary needs one tokenizer kind, got {src_kind} and {tgt_kind}")
        tokenizer = train_tokenizer(src_kind, [*sources, *targets], src_vocab_size)
        return TokenizerPair(tokenizer, tokenizer)
    return TokenizerPair(
        train_tokenizer(src_kind, sources, src_vocab_size), train_tokenizer(tgt_kind, targets, tgt_vocab_size)
    )


def tokenizer_from_dict(data: dict[str, Any], where: str = "tokenizer") -> Tokenizer:
    """Inverse of :meth:`Tokenizer.to_dict`.

    Raises:
        DataError: unknown kind or format, or malformed contents (``where`` names the source in the message).
    """
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind not in (*KINDS, "hf", "sentencepiece"):
        raise DataError(
            f"{where}: unknown tokenizer kind {kind!r}; expected one of {', '.join(KINDS)}, hf, sentencepiece"
        )
    if data.get("format") != FORMAT_VERSION:
        raise DataError(f"{where}: tokenizer format {data.get('format')!r}, this dotformer reads {FORMAT_VERSION}")
    if kind in ("hf", "sentencepiece"):  # an existing tokenizer read from a file (dotformer.data.pretrained)
        from dotformer.data.pretrained import pretrained_from_dict

        return pretrained_from_dict(data, where)
    field = "hf_tokenizer" if kind == "bpe" else "vocab"
    if field not in data:
        raise DataError(f"{where}: the {kind} tokenizer lacks its {field!r} field")
    if kind != "bpe":
        vocab = data["vocab"]
        if not isinstance(vocab, list) or not all(isinstance(token, str) for token in vocab):
            raise DataError(f"{where}: 'vocab' must be a list of strings")
        tokenizer_class = CharTokenizer if kind == "char" else SymbolTokenizer
        try:
            return tokenizer_class(vocab)
        except DataError as exc:
            raise DataError(f"{where}: {exc}") from None
    from dotformer.data.bpe import bpe_from_json

    return bpe_from_json(data["hf_tokenizer"], where)


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Read a tokenizer saved by :meth:`Tokenizer.save`.

    Raises:
        MissingDataError: no such file.
        DataError: not JSON, or not a tokenizer this version can read (the path in the message).
    """
    path = Path(path)
    if not path.is_file():
        raise MissingDataError(f"{path}: no such tokenizer file")
    try:
        data = json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    return tokenizer_from_dict(data, where=str(path))
