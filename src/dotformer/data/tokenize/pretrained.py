"""Existing tokenizers read from files: a Hugging Face ``tokenizer.json`` or a sentencepiece ``.model``.

Both are wrapped in the :class:`~dotformer.data.tokenize.tokenizers.Tokenizer` interface and saved with a checkpoint
like the tokenizers dotformer trains (one JSON file with a ``"kind"``: ``"hf"`` holds the tokenizer.json,
``"sentencepiece"`` the model file in base64), so ``translate`` and ``evaluate`` read them back without the original
file.

Ids. dotformer's ids 0..3 are ``<pad>``, ``<s>``, ``</s>``, ``<unk>`` everywhere (batching and decoding rely on
them). A file whose vocabulary already has those four at 0..3 (a sentencepiece model trained with ``pad_id=0
bos_id=1 eos_id=2 unk_id=3``, as Marian's are, or a tokenizer.json with those tokens first) keeps its ids. Any other
file's ids are shifted by four (its id ``i`` is dotformer's ``i + 4``) and its own unknown token is read as
``<unk>``; the model's vocabulary is then the file's plus four rows. ``encode`` adds no special tokens (batching
adds BOS/EOS), and a tokenizer.json's padding and truncation settings are switched off (nothing is cut).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from typing import Any

from dotformer.data.tokenize.tokenizers import (
    FORMAT_VERSION,
    NUM_SPECIAL,
    SPECIAL_TOKENS,
    UNK_ID,
    EncodedChunk,
    Tokenizer,
    chunk_of,
)
from dotformer.errors import DataError, MissingDataError

PRETRAINED_KINDS = ("hf", "sentencepiece")
_HF_UNKNOWN_NAMES = ("<unk>", "[UNK]", "<UNK>", "[unk]")
_MASK_NAMES = ("[MASK]", "<mask>")  # BERT's, RoBERTa's (and dotformer's)


class _ShiftedIds:
    """The map between a file's ids and dotformer's: ``offset`` (0 or 4) and the file's unknown id."""

    def __init__(self, offset: int, unknown_id: int | None) -> None:
        self.offset = offset
        self.unknown_id = unknown_id

    def to_ours(self, ids: Sequence[int]) -> list[int]:
        unknown, offset = self.unknown_id, self.offset
        return [UNK_ID if index == unknown else index + offset for index in ids]

    def chunk_to_ours(self, rows: Sequence[Sequence[int]]) -> EncodedChunk:
        """:meth:`to_ours` of many rows at once, as arrays."""
        chunk = chunk_of(rows)
        ids = chunk.ids + self.offset
        if self.unknown_id is not None:
            ids[chunk.ids == self.unknown_id] = UNK_ID
        return EncodedChunk(ids, chunk.lengths)

    def to_theirs(self, ids: Sequence[int]) -> list[int]:
        return [index - self.offset for index in ids if index >= NUM_SPECIAL]


class HFFileTokenizer(Tokenizer):
    """A Hugging Face ``tokenizers.Tokenizer`` (from a tokenizer.json) with dotformer's ids (module docstring).

    Args:
        hf_tokenizer: the tokenizer; its padding and truncation are switched off.
        source: where it came from (recorded in :meth:`to_dict`).
    """

    kind = "hf"

    def __init__(self, hf_tokenizer: Any, source: str = "") -> None:
        hf_tokenizer.no_padding()
        hf_tokenizer.no_truncation()
        hf_tokenizer.encode_special_tokens = True  # "[CLS]" typed in a text is text
        self._hf = hf_tokenizer
        self.source = source
        first = [hf_tokenizer.id_to_token(index) for index in range(NUM_SPECIAL)]
        offset = 0 if tuple(first) == SPECIAL_TOKENS else NUM_SPECIAL
        unknown = getattr(hf_tokenizer.model, "unk_token", None)
        names = (unknown, *_HF_UNKNOWN_NAMES) if isinstance(unknown, str) else _HF_UNKNOWN_NAMES
        unknown_id = next((hf_tokenizer.token_to_id(n) for n in names if hf_tokenizer.token_to_id(n) is not None), None)
        self._ids = _ShiftedIds(offset, unknown_id)

    @property
    def offset(self) -> int:
        """0 when the file already has dotformer's specials at 0..3, else 4 (its ids are shifted by it)."""
        return self._ids.offset

    @property
    def vocab_size(self) -> int:
        return self._hf.get_vocab_size(with_added_tokens=True) + self._ids.offset

    @property
    def mask_id(self) -> int | None:
        """The id (dotformer's) of the file's ``[MASK]`` (or ``<mask>``), or None."""
        index = next((self._hf.token_to_id(n) for n in _MASK_NAMES if self._hf.token_to_id(n) is not None), None)
        return None if index is None else int(index) + self._ids.offset

    def encode(self, text: str) -> list[int]:
        return self._ids.to_ours(self._hf.encode(text, add_special_tokens=False).ids)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        encodings = self._hf.encode_batch(list(texts), add_special_tokens=False)
        return [self._ids.to_ours(encoding.ids) for encoding in encodings]

    def encode_arrays(self, texts: Sequence[str]) -> EncodedChunk:
        """As :meth:`Tokenizer.encode_arrays`, through the batch encoder without offsets, on every core."""
        encodings = self._hf.encode_batch_fast(list(texts), add_special_tokens=False)
        return self._ids.chunk_to_ours([encoding.ids for encoding in encodings])

    def encode_document(self, lines: Sequence[str]) -> EncodedChunk:
        """As :meth:`Tokenizer.encode_document`: ``"".join(line + "\\n")`` encoded at once (so its pieces are those
        the released tokenizer reads in the document), each piece given to the line its first character is in (a
        piece that spans a line end, such as a run of newlines, belongs to the line it starts in; a line may then
        have none)."""
        import numpy as np

        if not lines:
            return chunk_of([])
        text = "".join(line + "\n" for line in lines)
        encoding = self._hf.encode(text, add_special_tokens=False)
        ids = self._ids.chunk_to_ours([encoding.ids]).ids  # (T,)
        starts = np.cumsum([0, *(len(line) + 1 for line in lines[:-1])])  # (n,) each line's first character
        first = np.fromiter((start for start, _ in encoding.offsets), dtype=np.int64, count=len(ids))  # (T,)
        line_of = np.searchsorted(starts, first, side="right") - 1  # (T,) non-decreasing
        lengths = np.bincount(np.clip(line_of, 0, len(lines) - 1), minlength=len(lines)).astype(np.int64)
        return EncodedChunk(ids, lengths)

    def decode(self, ids: Sequence[int]) -> str:
        ids = [int(index) for index in ids]
        for index in ids:
            self._check_id(index)
        return self._hf.decode(self._ids.to_theirs(ids), skip_special_tokens=True)

    def id_to_token(self, index: int) -> str:
        index = int(index)
        self._check_id(index)
        if index < NUM_SPECIAL:
            return SPECIAL_TOKENS[index]
        return self._hf.id_to_token(index - self._ids.offset)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "format": FORMAT_VERSION,
            "source": self.source,
            "hf_tokenizer": json.loads(self._hf.to_str()),
        }


class SentencePieceTokenizer(Tokenizer):
    """A sentencepiece model (from a ``.model`` file) with dotformer's ids (module docstring).

    Args:
        model_proto: the bytes of the ``.model`` file.
        source: where it came from (recorded in :meth:`to_dict`).

    Raises:
        MissingDataError: the ``sentencepiece`` package is not installed.
        DataError: the bytes are not a sentencepiece model.
    """

    kind = "sentencepiece"

    def __init__(self, model_proto: bytes, source: str = "") -> None:
        try:
            import sentencepiece
        except ImportError:
            raise MissingDataError("sentencepiece .model files need the package: pip install sentencepiece") from None
        processor = sentencepiece.SentencePieceProcessor()
        try:
            processor.LoadFromSerializedProto(model_proto)
        except (RuntimeError, OSError, TypeError):  # sentencepiece's own message names its C++ source lines
            raise DataError(
                f"{source or 'sentencepiece model'}: not a sentencepiece model (nor a tokenizer.json: a tokenizer "
                "file is a Hugging Face tokenizer.json, a sentencepiece .model or a dotformer tokenizer_*.json)"
            ) from None
        self._sp = processor
        self._proto = bytes(model_proto)
        self.source = source
        specials = (processor.pad_id(), processor.bos_id(), processor.eos_id(), processor.unk_id())
        offset = 0 if specials == (0, 1, 2, 3) else NUM_SPECIAL
        self._ids = _ShiftedIds(offset, processor.unk_id())

    @property
    def offset(self) -> int:
        """0 when the model has pad/bos/eos/unk at 0..3, else 4 (its ids are shifted by it)."""
        return self._ids.offset

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size() + self._ids.offset

    @property
    def mask_id(self) -> int | None:
        """The id (dotformer's) of the model's ``<mask>`` or ``[MASK]`` piece, or None."""
        for name in reversed(_MASK_NAMES):
            index = self._sp.piece_to_id(name)
            if index != self._sp.unk_id():
                return int(index) + self._ids.offset
        return None

    def encode(self, text: str) -> list[int]:
        return self._ids.to_ours(self._sp.encode(text, out_type=int))

    def encode_arrays(self, texts: Sequence[str]) -> EncodedChunk:
        """As :meth:`Tokenizer.encode_arrays`, sentencepiece encoding the list on its own threads."""
        return self._ids.chunk_to_ours(self._sp.encode(list(texts), out_type=int))

    def decode(self, ids: Sequence[int]) -> str:
        ids = [int(index) for index in ids]
        for index in ids:
            self._check_id(index)
        return self._sp.decode(self._ids.to_theirs(ids))

    def id_to_token(self, index: int) -> str:
        index = int(index)
        self._check_id(index)
        if index < NUM_SPECIAL:
            return SPECIAL_TOKENS[index]
        return self._sp.id_to_piece(index - self._ids.offset)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "format": FORMAT_VERSION,
            "source": self.source,
            "model": base64.b64encode(self._proto).decode("ascii"),
        }


def pretrained_from_dict(data: dict[str, Any], where: str) -> Tokenizer:
    """Inverse of :meth:`HFFileTokenizer.to_dict` and :meth:`SentencePieceTokenizer.to_dict`.

    Raises:
        DataError: a missing or malformed field (``where`` names the file).
    """
    kind = data.get("kind")
    source = str(data.get("source", ""))
    if kind == "hf":
        if not isinstance(data.get("hf_tokenizer"), dict):
            raise DataError(f"{where}: the hf tokenizer lacks its 'hf_tokenizer' field")
        return HFFileTokenizer(hf_from_str(json.dumps(data["hf_tokenizer"]), where), source)
    if kind == "sentencepiece":
        try:
            proto = base64.b64decode(data["model"], validate=True)
        except (KeyError, TypeError, binascii.Error):
            raise DataError(f"{where}: the sentencepiece tokenizer lacks a base64 'model' field") from None
        return SentencePieceTokenizer(proto, source)
    raise DataError(f"{where}: unknown tokenizer kind {kind!r}; expected one of {', '.join(PRETRAINED_KINDS)}")


def hf_from_str(text: str, where: str) -> Any:
    from tokenizers import Tokenizer as HFTokenizer

    try:
        return HFTokenizer.from_str(text)
    except Exception as exc:  # tokenizers raises a plain Exception on a malformed tokenizer.json
        raise DataError(f"{where}: not a valid tokenizer.json ({type(exc).__name__}: {exc})") from None
