"""Tokenizers: text <-> token ids, with the same four special tokens in every vocabulary.

Three kinds to train, one interface (:class:`Tokenizer`); existing tokenizers (a Hugging Face tokenizer.json, a
sentencepiece .model) are read behind the same interface by :mod:`dotformer.data.tokenize.pretrained`:

* ``"char"``: one token per character (G2P sources: the letters of a word).
* ``"symbol"``: one token per whitespace-separated symbol (ARPAbet phones "AH0 B AE1 N", synthetic "a3 b7");
  decoding joins the symbols with single spaces.
* ``"bpe"``: byte-level BPE trained with Hugging Face ``tokenizers`` (translation; :mod:`dotformer.data.tokenize.bpe`).
  The byte-level pre-tokenizer maps every UTF-8 byte to a symbol of a 256-symbol base alphabet and no normaliser is
  applied, so ``decode(encode(x)) == x`` for every string, spaces, tabs and accents included, and no text has
  unknown tokens. Pieces are shown decoded (``" the"``, ``"crió"``), not in the byte alphabet (``"Ġthe"``, ``"criÃ³"``);
  a piece that holds only part of a multi-byte character shows its bytes as ``\\xNN``.

Ids 0..3 are always ``<pad>``, ``<s>`` (BOS), ``</s>`` (EOS), ``<unk>``; ``encode`` adds no BOS/EOS (batching
does) and ``decode`` skips the four. A tokenizer trained for a masked language model has a fifth special token,
``<mask>`` at id 4 (:data:`MASK_TOKEN`; an imported BERT's tokenizer has its own ``[MASK]``): :attr:`Tokenizer.mask_id`
finds it. A tokenizer is saved as one JSON file with a ``"kind"`` field.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Sequence
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NamedTuple

from dotformer.errors import DataError

if TYPE_CHECKING:  # numpy is imported by the array paths that use it: decoding on CTranslate2 starts without it
    import numpy as np

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")
NUM_SPECIAL = len(SPECIAL_TOKENS)
MASK_TOKEN = "<mask>"  # the masked language model's stand-in for a hidden token: id 4 in the vocabularies made for it
FORMAT_VERSION = 1
DEFAULT_BPE_VOCAB_SIZE = 8000
BYTE_ALPHABET_SIZE = 256
MAX_CODE_POINT = 0x10FFFF
TokenizerKind = Literal["char", "symbol", "bpe"]
KINDS = ("char", "symbol", "bpe")


class EncodedChunk(NamedTuple):
    """The ids of many texts at once, as arrays (what preparing data writes to disk,
    :mod:`dotformer.data.prepared.arrays`).

    Attributes:
        ids: (T,) int64, every text's ids one after the other, without BOS/EOS.
        lengths: (n,) int64, the number of ids of each text (summing to T).
    """

    ids: np.ndarray
    lengths: np.ndarray

    def with_eos(self) -> EncodedChunk:
        """Each text's ids followed by EOS (a language model's line and its end): lengths + 1."""
        import numpy as np

        lengths = self.lengths + 1
        is_end = np.zeros(int(lengths.sum()), dtype=bool)
        is_end[np.cumsum(lengths) - 1] = True  # where each EOS goes
        ids = np.empty(len(is_end), dtype=np.int64)
        ids[is_end] = EOS_ID
        ids[~is_end] = self.ids
        return EncodedChunk(ids, lengths)

    def with_bos(self) -> EncodedChunk:
        """BOS before the first text's ids (a released model's document that its family starts with BOS)."""
        import numpy as np

        if not len(self.lengths):
            return self
        lengths = self.lengths.copy()
        lengths[0] += 1
        return EncodedChunk(np.concatenate([np.array([BOS_ID], dtype=np.int64), self.ids]), lengths)


def chunk_of(rows: Sequence[Sequence[int]]) -> EncodedChunk:
    """The :class:`EncodedChunk` of lists of ids."""
    import numpy as np

    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    return EncodedChunk(np.fromiter(chain.from_iterable(rows), dtype=np.int64, count=int(lengths.sum())), lengths)


class Tokenizer(ABC):
    """Text <-> ids. Subclasses: :class:`CharTokenizer`, :class:`SymbolTokenizer`,
    :class:`~dotformer.data.tokenize.bpe.BPETokenizer`."""

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

    @property
    def mask_id(self) -> int | None:
        """The id of the mask token (``<mask>``, or an imported vocabulary's ``[MASK]``), or None: no such token."""
        return None

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """``[encode(text) for text in texts]`` (BPE does it in parallel)."""
        return [self.encode(text) for text in texts]

    def encode_arrays(self, texts: Sequence[str]) -> EncodedChunk:
        """The ids of ``texts`` as two arrays (:class:`EncodedChunk`), equal to :meth:`encode_batch`'s lists; the
        kinds give a faster path where they have one (characters through numpy, BPE through the batch encoder on
        every core)."""
        return chunk_of(self.encode_batch(texts))

    def encode_document(self, lines: Sequence[str]) -> EncodedChunk:
        """The ids of the text ``lines`` make, each ending in ``"\\n"``, one row per line (no BOS, no EOS: a line end
        is the tokenizer's own newline piece). Here each line is read by itself (``encode(line + "\\n")``); a
        tokenizer that knows its pieces' offsets (:class:`~dotformer.data.tokenize.pretrained.HFFileTokenizer`) encodes
        the text at once, as a released model reads a document, and gives each line the pieces that start in it."""
        return chunk_of([self.encode(line + "\n") for line in lines])

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

    @property
    def mask_id(self) -> int | None:
        return self._ids.get(MASK_TOKEN)

    def encode(self, text: str) -> list[int]:
        ids = self._ids
        return [ids.get(piece, UNK_ID) for piece in self.split(text)]

    def decode(self, ids: Sequence[int]) -> str:
        vocab, size = self._vocab, len(self._vocab)
        pieces = []
        for index in ids:
            index = int(index)
            if not 0 <= index < size:
                self._check_id(index)  # raises, naming the id
            if index >= NUM_SPECIAL:
                pieces.append(vocab[index])
        return self.join(pieces)

    def id_to_token(self, index: int) -> str:
        self._check_id(int(index))
        return self._vocab[int(index)]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "format": FORMAT_VERSION, "vocab": self._vocab}


class CharTokenizer(VocabularyTokenizer):
    """One token per character: ``"read" -> ["r", "e", "a", "d"]``."""

    kind = "char"

    def __init__(self, vocab: Sequence[str]) -> None:
        super().__init__(vocab)
        self._table: np.ndarray | None = None  # id of every code point (built on first use by encode_arrays)

    def split(self, text: str) -> list[str]:
        return list(text)

    def join(self, pieces: list[str]) -> str:
        return "".join(pieces)

    def encode_arrays(self, texts: Sequence[str]) -> EncodedChunk:
        """As :meth:`Tokenizer.encode_arrays`, through numpy: the texts' code points (UTF-32) looked up in a table
        of the id of every code point (4.5 MB, made once)."""
        import numpy as np

        if self._table is None:
            table = np.full(MAX_CODE_POINT + 1, UNK_ID, dtype=np.int64)
            for token, index in self._ids.items():
                if len(token) == 1:
                    table[ord(token)] = index
            self._table = table
        lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        code_points = np.frombuffer("".join(texts).encode("utf-32-le", errors="surrogatepass"), dtype="<u4")
        return EncodedChunk(self._table[code_points], lengths)


class SymbolTokenizer(VocabularyTokenizer):
    """One token per whitespace-separated symbol: ``"R EH1 D" -> ["R", "EH1", "D"]``; decode joins with spaces."""

    kind = "symbol"

    def split(self, text: str) -> list[str]:
        return text.split()

    def join(self, pieces: list[str]) -> str:
        return " ".join(pieces)

    def encode_arrays(self, texts: Sequence[str]) -> EncodedChunk:
        """As :meth:`Tokenizer.encode_arrays`, one dictionary lookup per symbol and no list per text."""
        import numpy as np

        pieces = [text.split() for text in texts]
        lengths = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
        get = self._ids.get
        ids = np.fromiter((get(piece, UNK_ID) for piece in chain.from_iterable(pieces)), np.int64, int(lengths.sum()))
        return EncodedChunk(ids, lengths)
