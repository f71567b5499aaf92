"""Byte-level BPE (Sennrich et al. 2016, as in GPT-2) on Hugging Face ``tokenizers``: the ``"bpe"`` kind of
:mod:`dotformer.data.tokenize.tokenizers`, which trains, saves and reads it back through :func:`train_bpe` and
:func:`bpe_from_json` (and whose :class:`~dotformer.data.tokenize.tokenizers.Tokenizer` interface it implements).

The byte-level pre-tokenizer maps every UTF-8 byte to a symbol of a 256-symbol base alphabet
(:func:`byte_level_alphabet`) and no normaliser is applied, so ``decode(encode(x)) == x`` for every string and no text
has unknown tokens. The ``tokenizers`` package is imported inside the functions that need it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from dotformer.data.tokenize.tokenizers import (
    BYTE_ALPHABET_SIZE,
    FORMAT_VERSION,
    MASK_TOKEN,
    NUM_SPECIAL,
    SPECIAL_TOKENS,
    UNK_ID,
    EncodedChunk,
    Tokenizer,
    chunk_of,
)
from dotformer.errors import ConfigError, DataError


class BPETokenizer(Tokenizer):
    """Byte-level BPE (Sennrich et al. 2016, as in GPT-2) on Hugging Face ``tokenizers``; exact round trips.

    Args:
        hf_tokenizer: a ``tokenizers.Tokenizer`` with a BPE model, byte-level pre-tokenizer and decoder, and the
            four specials at ids 0..3 (as :func:`train_bpe` builds it).

    Raises:
        DataError: the specials are not at ids 0..3.
    """

    kind = "bpe"

    def __init__(self, hf_tokenizer: Any) -> None:
        for index, token in enumerate(SPECIAL_TOKENS):
            if hf_tokenizer.token_to_id(token) != index:
                raise DataError(f"BPE tokenizer must have {token} at id {index}, has {hf_tokenizer.token_to_id(token)}")
        hf_tokenizer.encode_special_tokens = True  # "<s>" typed in a text is text, not BOS (not saved by HF)
        self._hf = hf_tokenizer
        self._byte_of = {char: byte for byte, char in enumerate(byte_level_alphabet())}

    @property
    def vocab_size(self) -> int:
        return self._hf.get_vocab_size(with_added_tokens=True)

    @property
    def mask_id(self) -> int | None:
        """The id of ``<mask>`` when it is one of the special tokens (:func:`train_bpe` with ``mask=True``)."""
        added = self._hf.get_added_tokens_decoder()
        return next((int(index) for index, token in added.items() if token.content == MASK_TOKEN), None)

    def encode(self, text: str) -> list[int]:
        return self._hf.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [encoding.ids for encoding in self._hf.encode_batch(list(texts), add_special_tokens=False)]

    def encode_arrays(self, texts: Sequence[str]) -> EncodedChunk:
        """As :meth:`Tokenizer.encode_arrays`, through ``encode_batch_fast`` (no character offsets), which encodes
        the texts on every core (Rust threads: ``RAYON_NUM_THREADS`` caps them, ``TOKENIZERS_PARALLELISM=false``
        turns them off; a process forked after using them encodes on one)."""
        encodings = self._hf.encode_batch_fast(list(texts), add_special_tokens=False)
        return chunk_of([encoding.ids for encoding in encodings])

    def decode(self, ids: Sequence[int]) -> str:
        ids = [int(index) for index in ids]
        for index in ids:
            self._check_id(index)
        return self._hf.decode([index for index in ids if index >= NUM_SPECIAL], skip_special_tokens=False)

    def id_to_token(self, index: int) -> str:
        """The piece as text: ``" the"``, ``"crió"``; a piece holding part of a multi-byte character shows the
        incomplete bytes as ``\\xNN`` escapes (``"cri\\xc3"``)."""
        self._check_id(int(index))
        token = self._hf.id_to_token(int(index))
        if int(index) < NUM_SPECIAL:
            return token
        return bytes(self._byte_of[char] for char in token).decode("utf-8", errors="backslashreplace")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "format": FORMAT_VERSION, "hf_tokenizer": json.loads(self._hf.to_str())}


def byte_level_alphabet() -> list[str]:
    """The 256 symbols that stand for the bytes 0..255 in byte-level BPE (GPT-2's table, used by HF tokenizers).

    Printable Latin-1 bytes stand for themselves ("a" for 0x61, "ó" for 0xF3); the others (controls, space,
    0x7F-0xA0, 0xAD) are moved to U+0100 and up in byte order, so the space 0x20 is "Ġ" (U+0120).
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    symbols = {byte: chr(byte) for byte in printable}
    moved = [byte for byte in range(BYTE_ALPHABET_SIZE) if byte not in symbols]
    symbols.update({byte: chr(BYTE_ALPHABET_SIZE + offset) for offset, byte in enumerate(moved)})
    return [symbols[byte] for byte in range(BYTE_ALPHABET_SIZE)]


def train_bpe(texts: Iterable[str], vocab_size: int, mask: bool = False) -> BPETokenizer:
    """Train byte-level BPE with Hugging Face ``tokenizers`` (specials first, ``<mask>`` at id 4 with ``mask``, then
    the 256 bytes, then merges) on ``texts``, read once in batches (a generator over a file is never held whole)."""
    specials = [*SPECIAL_TOKENS, MASK_TOKEN] if mask else list(SPECIAL_TOKENS)
    minimum = len(specials) + BYTE_ALPHABET_SIZE + 1
    if vocab_size < minimum:
        raise ConfigError(
            f"bpe vocab_size must be at least {minimum} ({len(specials)} specials + 256 bytes + 1), got {vocab_size}"
        )
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    hf_tokenizer = HFTokenizer(models.BPE(unk_token=SPECIAL_TOKENS[UNK_ID]))
    hf_tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    hf_tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    hf_tokenizer.train_from_iterator(texts, trainer=trainer)
    return BPETokenizer(hf_tokenizer)


def bpe_from_json(hf_json: Any, where: str = "tokenizer") -> BPETokenizer:
    """The BPE tokenizer saved as ``hf_json`` (the ``"hf_tokenizer"`` field of :meth:`BPETokenizer.to_dict`).

    Raises:
        DataError: malformed contents, or the specials not at ids 0..3 (``where`` names the source in the message).
    """
    from tokenizers import Tokenizer as HFTokenizer

    try:
        hf_tokenizer = HFTokenizer.from_str(json.dumps(hf_json))
    except Exception as exc:  # tokenizers raises a plain Exception on a malformed tokenizer.json
        raise DataError(f"{where}: cannot rebuild the BPE tokenizer ({type(exc).__name__}: {exc})") from None
    try:
        return BPETokenizer(hf_tokenizer)
    except DataError as exc:
        raise DataError(f"{where}: {exc}") from None
