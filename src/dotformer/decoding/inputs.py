"""A user's text as the model's ids: normalise, tokenise, check the length, count the unknown symbols.

Inputs are first prepared the way the checkpoint's training sources were (:func:`source_normaliser`, e.g. lower case
for a CMUdict model), then tokenised with EOS appended; :func:`encode_sources` is the one place that does both,
shared by :func:`dotformer.decoding.translate`, the Python API (:mod:`dotformer.api`), ``dotformer plot attention``
and ``dotformer explore``. Characters the source vocabulary does not know are read as UNK and counted (one
:class:`UnknownTokenWarning` per call says how many); nothing is dropped. An input longer than ``max_input_length``
tokens is refused with an :class:`InputTooLongError` that names it. A reference to force-decode goes the same way
through :func:`encode_target`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, NamedTuple

from dotformer.data.tokenize.tokenizers import BOS_ID, EOS_ID, UNK_ID
from dotformer.errors import ConfigError, ShapeError

if TYPE_CHECKING:
    from dotformer.config import ModelConfig
    from dotformer.data.batch.blocks import TokenStream
    from dotformer.data.tokenize.tokenizers import Tokenizer
    from dotformer.decoding.config import DecodeConfig


class UnknownTokenWarning(UserWarning):
    """Some input characters are not in the source vocabulary and were read as UNK."""


class TruncationWarning(UserWarning):
    """Some inputs were longer than the model reads and were cut to its length (embeddings, a label per text)."""


class InputTooLongError(ShapeError):
    """An input has more tokens than the model may read.

    Attributes:
        index: 0-based position of the first such input in the texts given.
        length: its number of tokens, EOS included.
        limit: the most tokens (EOS included) allowed.
    """

    def __init__(self, message: str, index: int, length: int, limit: int) -> None:
        super().__init__(message)
        self.index, self.length, self.limit = index, length, limit


class EncodedTexts(NamedTuple):
    """Source texts as token ids ready for the encoder.

    Attributes:
        ids: per text, its token ids followed by EOS.
        unknown: number of UNK tokens over all texts.
        texts_with_unknown: indices of the texts that hold at least one.
        unknown_counts: per text, its number of UNK tokens.
        texts: the texts as they were tokenised (after :func:`source_normaliser` when :func:`encode_sources` made them).
    """

    ids: list[list[int]]
    unknown: int
    texts_with_unknown: list[int]
    unknown_counts: list[int]
    texts: list[str]


def default_max_input_length(config: ModelConfig) -> int:
    """The most source tokens (EOS included) a model reads by default: its positional table's ``max_len``.

    A learned table has exactly ``max_len`` rows; a sinusoidal table is precomputed to ``max_len`` and could be
    extended, but a model trained on shorter sentences has never seen such positions.
    """
    return int(config.max_len)


def check_max_input_length(config: ModelConfig, max_input_length: int | None, name: str = "max_input_length") -> int:
    """``max_input_length`` checked against the model (None: :func:`default_max_input_length`).

    Args:
        name: the setting's name in the messages (``max_seq_length`` for ``embed``).

    Raises:
        ConfigError: not a positive integer, or above a learned positional table's ``max_len``.
    """
    if max_input_length is None:
        return default_max_input_length(config)
    if not isinstance(max_input_length, int) or isinstance(max_input_length, bool) or max_input_length < 1:
        raise ConfigError(f"{name} must be a positive integer, got {max_input_length!r}")
    if config.positional == "learned" and max_input_length > config.max_len:
        raise ConfigError(
            f"{name} {max_input_length} exceeds this model's learned positional table ({config.max_len} positions)"
        )
    return max_input_length


def encode_texts(texts: Sequence[str], tokenizer: Tokenizer, max_len: int | None = None) -> EncodedTexts:
    """Tokenise source texts as they are and append EOS (the form the model was trained on).

    An empty or whitespace-only text (:func:`is_empty_source`) becomes ``[EOS]`` with no unknown symbol.

    Args:
        texts: the inputs (already normalised: see :func:`encode_sources`).
        tokenizer: the checkpoint's source tokenizer.
        max_len: the most tokens (EOS included) the model reads, or None for no limit.

    Raises:
        InputTooLongError: a text is longer than ``max_len`` tokens (the message names the first one, 1-based).
    """
    ids, unknown, with_unknown, counts = [], 0, [], []
    for i, text in enumerate(texts):
        if is_empty_source(text):  # whitespace only: read as the empty input (no <unk> for its spaces)
            ids.append([EOS_ID])
            counts.append(0)
            continue
        tokens = [*tokenizer.encode(text), EOS_ID]
        if max_len is not None and len(tokens) > max_len:
            raise InputTooLongError(
                f"input {i + 1} has {len(tokens)} tokens (EOS included) but this model reads at most {max_len}; "
                f"shorten it",
                i,
                len(tokens),
                max_len,
            )
        n = tokens.count(UNK_ID)  # Tokenizer.count_unknown, on the ids already encoded
        counts.append(n)
        if n:
            unknown += n
            with_unknown.append(i)
        ids.append(tokens)
    return EncodedTexts(ids, unknown, with_unknown, counts, list(texts))


def encode_sources(loaded: Any, texts: Sequence[str], max_len: int | None = None) -> EncodedTexts:
    """Prepare users' inputs for a checkpoint: normalise them as its training sources were, then tokenise (the one
    path from a user's text to source ids: see the module docstring).

    Args:
        loaded: a :class:`~dotformer.checkpoint.LoadedCheckpoint` (anything with ``src_tokenizer`` and, optionally,
            ``info``, the checkpoint's config.json).
        texts: the inputs as the user wrote them.
        max_len: the most tokens (EOS included) allowed, or None.

    Returns:
        :class:`EncodedTexts`; its ``texts`` are the normalised inputs.

    Raises:
        InputTooLongError: see :func:`encode_texts`.
    """
    normalise = source_normaliser(getattr(loaded, "info", None) or {})
    return encode_texts([normalise(text) for text in texts], loaded.src_tokenizer, max_len)


def source_normaliser(info: dict[str, Any]) -> Callable[[str], str]:
    """How to prepare a user's input the way the checkpoint's training sources were prepared.

    A CMUdict G2P model read lower-case words (:func:`dotformer.data.read.cmudict.normalise_word`), so "Transformer"
    becomes "transformer"; other corpora were read as they are, and so are their inputs.

    Args:
        info: the checkpoint's config.json (``info["dataset"]`` names the corpus).
    """
    if info.get("dataset") == "cmudict":
        from dotformer.data.read.cmudict import normalise_word

        return normalise_word
    return str


def target_normaliser(info: dict[str, Any]) -> Callable[[str], str]:
    """How to prepare a target a user gives (a forced reference) the way the checkpoint's training targets were.

    The twin of :func:`source_normaliser`: a CMUdict model trained with ``strip_stress`` (config.json
    ``info["data"]["strip_stress"]``) read phones without stress digits, so "T R AE1 N S" becomes "T R AE N S";
    other targets are read as they are.

    Args:
        info: the checkpoint's config.json.
    """
    data = info.get("data") or {}
    if info.get("dataset") == "cmudict" and isinstance(data, dict) and data.get("strip_stress"):
        from dotformer.data.read.cmudict import strip_stress

        return lambda text: " ".join(strip_stress(phone) for phone in text.split())
    return str


class EncodedTarget(NamedTuple):
    """A user's target text as target ids (for forced decoding).

    Attributes:
        text: the target after :func:`target_normaliser`, with each unknown symbol shown as ``<unk>``.
        ids: its token ids (no BOS, no EOS); an unknown symbol is ``UNK_ID``, never dropped.
        unknown: the symbols outside the target vocabulary, in order (``"<unk>"`` where a tokenizer cannot name them).
    """

    text: str
    ids: list[int]
    unknown: list[str]


def encode_target(loaded: Any, text: str) -> EncodedTarget:
    """Normalise a user's target as the checkpoint's training targets were, then tokenise it (the one path, shared
    by ``dotformer plot attention --target`` and ``dotformer explore --target``).

    Args:
        loaded: anything with ``tgt_tokenizer`` and, optionally, ``info`` (config.json).
        text: the target as the user wrote it.
    """
    tokenizer = loaded.tgt_tokenizer
    text = target_normaliser(getattr(loaded, "info", None) or {})(text)
    ids = list(tokenizer.encode(text))
    split, join = getattr(tokenizer, "split", None), getattr(tokenizer, "join", None)
    pieces = split(text) if callable(split) and callable(join) else None
    if pieces is None or len(pieces) != len(ids):  # a tokenizer that cannot name its pieces (BPE)
        return EncodedTarget(text, ids, ["<unk>"] * ids.count(UNK_ID))
    unknown = [piece for piece, index in zip(pieces, ids, strict=True) if index == UNK_ID]
    shown = [piece if index != UNK_ID else "<unk>" for piece, index in zip(pieces, ids, strict=True)]
    return EncodedTarget(join(shown), ids, unknown)


def unknown_target_message(unknown: Sequence[str]) -> str | None:
    """The one-line warning for target symbols outside the target vocabulary (None when there are none)."""
    if not unknown:
        return None
    names = ", ".join(dict.fromkeys(unknown))
    return (
        f"{len(unknown)} target symbol(s) are not in the target vocabulary and were read as <unk>: {names} "
        f"(after normalising the target as the training targets were)"
    )


def encode_prefix(tokenizer: Tokenizer, prefix: str | None) -> EncodedTarget:
    """A target prefix (written as outputs are, not normalised) as target ids and the symbols among them outside the
    target vocabulary (:class:`EncodedTarget`); no ids for None or a blank prefix."""
    if not prefix or not prefix.strip():
        return EncodedTarget("", [], [])
    return encode_target(SimpleNamespace(tgt_tokenizer=tokenizer), prefix)


def unknown_prefix_message(unknown: Sequence[str]) -> str | None:
    """The one-line warning for prefix symbols outside the target vocabulary (None when there are none)."""
    if not unknown:
        return None
    names = ", ".join(dict.fromkeys(unknown))
    return f"{len(unknown)} prefix symbol(s) are not in the target vocabulary and were read as <unk>: {names}"


def unknown_message(encoded: EncodedTexts, where: Callable[[int], str] | None = None) -> str | None:
    """The one-line summary of the UNK tokens of ``encoded`` (None when there are none).

    Args:
        encoded: from :func:`encode_sources`.
        where: names an input from its 0-based index (default ``input N``, 1-based); the CLI gives ``FILE:LINE``.
    """
    if not encoded.unknown:
        return None
    first = encoded.texts_with_unknown[0]
    text = encoded.texts[first]
    example = text if len(text) <= 40 else text[:37] + "..."
    name = where(first) if where is not None else f"input {first + 1}"
    return (
        f"{encoded.unknown} input symbol(s) in {len(encoded.texts_with_unknown)} of {len(encoded.ids)} input(s) are "
        f"not in the source vocabulary and were read as <unk> (first: {name}, {example!r})"
    )


def warn_unknown(encoded: EncodedTexts, stacklevel: int = 3) -> None:
    """Issue one :class:`UnknownTokenWarning` summarising the UNK tokens of ``encoded``, if any."""
    message = unknown_message(encoded)
    if message is not None:
        warnings.warn(message, UnknownTokenWarning, stacklevel=stacklevel)


def is_empty_source(text: str) -> bool:
    """True for an empty or whitespace-only source text: it has nothing to translate, so its output is empty."""
    return not text.strip()


def check_prefixes(prefixes: Sequence[Sequence[int]], encoded: EncodedTexts, config: DecodeConfig) -> None:
    """Raise unless there is one prefix per source, each shorter than its output's length limit.

    Raises:
        ConfigError: not one prefix per source. ShapeError: a prefix of as many tokens as its output may have
            (the message names the input, 1-based).
    """
    if len(prefixes) != len(encoded.ids):
        raise ConfigError(f"{len(prefixes)} prefixes for {len(encoded.ids)} inputs: give one prefix per input")
    for i, (prefix, ids) in enumerate(zip(prefixes, encoded.ids, strict=True)):
        limit = config.max_output_length(len(ids))
        if len(prefix) >= limit:
            raise ShapeError(
                f"input {i + 1}: its prefix has {len(prefix)} tokens but its output may have at most {limit - 1} "
                f"before the end of sentence (max_len_a · input length + max_len_b); shorten the prefix or raise "
                f"max_len_b"
            )


def encode_prefixes(loaded: Any, prefixes: Sequence[str | None]) -> list[list[int]]:
    """Target prefixes as ids of the target vocabulary of ``loaded`` (anything with ``tgt_tokenizer``), no BOS, no
    EOS; None or "" is no prefix.

    A prefix is written as the outputs are (target side, not normalised like a source): its tokens are forced as
    the first tokens of the output, scored, and kept in it.

    Raises:
        ConfigError: a prefix is not a string or None (the message names its position).

    Warns:
        UnknownTokenWarning: once, naming the prefixes' symbols outside the target vocabulary (read as <unk>).
    """
    ids: list[list[int]] = []
    unknown: list[str] = []
    for i, prefix in enumerate(prefixes):
        if prefix is not None and not isinstance(prefix, str):
            raise ConfigError(f"prefix {i} must be a string or None, got {type(prefix).__name__}")
        encoded = encode_prefix(loaded.tgt_tokenizer, prefix)
        ids.append(encoded.ids)
        unknown += encoded.unknown
    message = unknown_prefix_message(unknown)
    if message is not None:
        warnings.warn(message, UnknownTokenWarning, stacklevel=3)
    return ids


class TextRules(NamedTuple):
    """How a language model's text becomes ids and back, saved in its checkpoint's config.json as ``"text_rules"``.

    A model trained by dotformer reads one stream of lines: EOS stands for a line end, a prompt starts after one, and
    generation runs on across lines (the defaults). An imported model (:mod:`dotformer.imports`) reads texts as its
    own tokenizer encodes them (line breaks included), starts each with BOS when its family does (``add_bos``), and
    ends a continuation at any of its ``eos_ids``.

    Attributes:
        add_bos: prepend BOS to a prompt (Llama, Gemma).
        eos_ids: dotformer ids that end a text; empty: dotformer's line stream.
    """

    add_bos: bool = False
    eos_ids: tuple[int, ...] = ()

    @property
    def lines(self) -> bool:
        """The text is dotformer's stream of lines (EOS = a line end)."""
        return not self.eos_ids


LINES = TextRules()  # dotformer's own language models: one stream of lines


def text_rules(info: dict[str, Any]) -> TextRules:
    """The :class:`TextRules` of a checkpoint's config.json dict (dotformer's line stream when it has none)."""
    rules = info.get("text_rules")
    if not isinstance(rules, dict):
        return LINES
    return TextRules(bool(rules.get("add_bos", False)), tuple(int(i) for i in rules.get("eos_ids", ())))


def encode_prompt(tokenizer: Tokenizer, prompt: str, rules: TextRules = LINES) -> list[int]:
    """``[EOS] + ids`` of ``prompt``, its line breaks as EOS: the model continues it as the start of a line; with an
    imported model's ``rules``, ``[BOS] + ids`` (BOS when the family adds it) as its tokenizer encodes the text."""
    if not rules.lines:
        return [BOS_ID] * rules.add_bos + tokenizer.encode(prompt)
    ids = [EOS_ID]
    for i, line in enumerate(prompt.split("\n")):
        if i:
            ids.append(EOS_ID)
        ids.extend(tokenizer.encode(line))
    return ids


def encode_document(tokenizer: Tokenizer, lines: Sequence[str], rules: TextRules, block_size: int) -> TokenStream:
    """The :class:`~dotformer.data.batch.blocks.TokenStream` an imported model scores (``evaluate --task lm``): the
    text as its file holds it (every line ending in ``\\n``), encoded at once by the model's tokenizer, after BOS
    when the family adds it (``rules.add_bos``); no EOS is added. Its characters count each line end as one, as
    :func:`~dotformer.data.batch.blocks.encode_text` counts them for dotformer's own models.

    Shape:
        the stream's ids: (N,) int64, N = ``add_bos`` + the text's tokens.

    Raises:
        ConfigError: ``block_size`` < 1, or ``rules`` are dotformer's line stream (use ``encode_text``).
    """
    import numpy as np

    from dotformer.data.batch.blocks import TokenStream

    if rules.lines:
        raise ConfigError("encode_document reads an imported model's text; a line stream is encode_text's")
    if block_size < 1:
        raise ConfigError(f"block_size must be a positive number of tokens, got {block_size}")
    text = "".join(line + "\n" for line in lines)
    ids = np.asarray([BOS_ID] * rules.add_bos + tokenizer.encode(text), dtype=np.int64)  # (N,)
    return TokenStream(ids, block_size, len(text))


def generated_text(tokenizer: Tokenizer, ids: Sequence[int], rules: TextRules = LINES) -> str:
    """The text of generated ids: each EOS a line end, the pieces between decoded by ``tokenizer``; with an imported
    model's ``rules``, the ids up to the first of its EOS ids, decoded."""
    if not rules.lines:
        stops = [i for i, token in enumerate(ids) if int(token) in rules.eos_ids]
        return tokenizer.decode(ids[: stops[0]] if stops else ids)
    lines: list[list[int]] = [[]]
    for token in ids:
        if token == EOS_ID:
            lines.append([])
        else:
            lines[-1].append(int(token))
    return "\n".join(tokenizer.decode(line) for line in lines)


MASK_SPELLINGS = ("<mask>", "[MASK]")  # what a user types for the hidden token: dotformer's and RoBERTa's, BERT's


def encode_with_masks(tokenizer: Tokenizer, text: str) -> list[int]:
    """``tokenizer.encode(text)``, where every ``<mask>`` or ``[MASK]`` typed in ``text`` becomes the tokenizer's
    mask token (:attr:`~dotformer.data.tokenize.tokenizers.Tokenizer.mask_id`) instead of the pieces of its letters;
    the text between them is encoded as it stands (its spaces included). A tokenizer without a mask token encodes
    the text as it is."""
    import re

    mask_id = tokenizer.mask_id
    if mask_id is None:
        return tokenizer.encode(text)
    ids: list[int] = []
    parts = re.split("|".join(re.escape(spelling) for spelling in MASK_SPELLINGS), text)
    for k, part in enumerate(parts):
        if k:
            ids.append(mask_id)
        if part:
            ids.extend(tokenizer.encode(part))
    return ids
