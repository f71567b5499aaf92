"""Every kind of tokenizer in one place: train one (char, symbol, BPE), or read one back from a file (a tokenizer
dotformer saved, a Hugging Face ``tokenizer.json``, a sentencepiece ``.model``).

:mod:`dotformer.data.tokenize.tokenizers` defines what a tokenizer is and the two vocabulary kinds;
:mod:`dotformer.data.tokenize.bpe` and :mod:`dotformer.data.tokenize.pretrained` the others. This module sits above them
all, so none of them imports it."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from itertools import chain
from pathlib import Path
from typing import Any, NamedTuple

from dotformer.data.read.textio import read_json
from dotformer.data.tokenize.bpe import bpe_from_json, train_bpe
from dotformer.data.tokenize.pretrained import (
    PRETRAINED_KINDS,
    HFFileTokenizer,
    SentencePieceTokenizer,
    hf_from_str,
    pretrained_from_dict,
)
from dotformer.data.tokenize.tokenizers import (
    DEFAULT_BPE_VOCAB_SIZE,
    FORMAT_VERSION,
    KINDS,
    MASK_TOKEN,
    SPECIAL_TOKENS,
    CharTokenizer,
    SymbolTokenizer,
    Tokenizer,
    TokenizerKind,
)
from dotformer.errors import ConfigError, DataError, MissingDataError


def train_tokenizer(
    kind: TokenizerKind, texts: Iterable[str], vocab_size: int | None = None, mask: bool = False
) -> Tokenizer:
    """Build a vocabulary from training texts.

    Args:
        kind: ``"char"``, ``"symbol"`` or ``"bpe"``.
        texts: the training texts (one side of the training split, or both sides for a shared vocabulary): any
            iterable, read once (a generator over a file is never held whole).
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
    iterator = iter(texts)
    first = next(iterator, None)
    if first is None:
        raise DataError(f"cannot train a {kind} tokenizer on no texts")
    texts = chain([first], iterator)
    if kind == "bpe":
        return train_bpe(texts, DEFAULT_BPE_VOCAB_SIZE if vocab_size is None else vocab_size, mask)
    specials = [*SPECIAL_TOKENS, MASK_TOKEN] if mask else list(SPECIAL_TOKENS)
    if vocab_size is not None and vocab_size <= len(specials):
        raise ConfigError(f"vocab_size must exceed the {len(specials)} special tokens, got {vocab_size}")
    tokenizer_class = CharTokenizer if kind == "char" else SymbolTokenizer
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(text if kind == "char" else text.split())
    for special in specials:  # a symbol spelled like a special token stays unknown
        counts.pop(special, None)
    ranked = sorted(counts, key=lambda piece: (-counts[piece], piece))
    if vocab_size is not None:
        ranked = ranked[: vocab_size - len(specials)]
    return tokenizer_class([*specials, *ranked])


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
    sources: Iterable[str],
    targets: Iterable[str],
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
        tokenizer = train_tokenizer(src_kind, chain(sources, targets), src_vocab_size)
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
    if kind in ("hf", "sentencepiece"):  # an existing tokenizer read from a file (dotformer.data.tokenize.pretrained)
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
    return bpe_from_json(data["hf_tokenizer"], where)


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Read a tokenizer saved by :meth:`Tokenizer.save`.

    Raises:
        MissingDataError: no such file.
        DataError: not JSON, or not a tokenizer this version can read (the path in the message).
    """
    path = Path(path)
    return tokenizer_from_dict(read_json(path, "no such tokenizer file"), where=str(path))


def read_tokenizer_file(path: str | Path) -> Tokenizer:
    """An existing tokenizer from a file, for ``--src-tokenizer-file`` / ``--tgt-tokenizer-file``.

    Accepted: a Hugging Face ``tokenizer.json``; a sentencepiece ``.model`` (any file that is not JSON is tried as
    one); a tokenizer file dotformer saved (``RUN/data/tokenizer_src.json``, a checkpoint's ``tokenizer_*.json``).

    Raises:
        MissingDataError: no such file (or sentencepiece not installed for a .model).
        DataError: the file is none of the accepted formats (the path in the message).
    """
    path = Path(path)
    if not path.is_file():
        raise MissingDataError(f"{path}: no such tokenizer file")
    raw = path.read_bytes()
    if raw.lstrip()[:1] != b"{":
        if raw[:1] != b"\n" and b"\x00" not in raw[: 1 << 16]:  # a .model is a protobuf: 0x0A first, NULs inside
            raise DataError(
                f"{path}: a text file, not a tokenizer (a tokenizer file is a Hugging Face tokenizer.json, a "
                f"sentencepiece .model or a dotformer tokenizer_*.json)"
            )
        return SentencePieceTokenizer(raw, str(path))
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{path}: neither a tokenizer.json nor a sentencepiece model ({exc})") from None
    if isinstance(data, dict) and data.get("kind") in (*KINDS, *PRETRAINED_KINDS):
        return tokenizer_from_dict(data, where=str(path))
    if isinstance(data, dict) and "model" in data:
        return HFFileTokenizer(hf_from_str(raw.decode("utf-8"), str(path)), str(path))
    raise DataError(
        f"{path}: a JSON file, but not a Hugging Face tokenizer.json (no 'model') nor a dotformer tokenizer"
    )
