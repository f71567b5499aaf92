"""Text in, text out: normalise, tokenise, batch by length, decode, detokenise, with a loaded checkpoint.

Inputs are first prepared the way the checkpoint's training sources were (:func:`source_normaliser`, e.g. lower case
for a CMUdict model), then tokenised; :func:`encode_sources` is the one place that does both, shared by
:func:`translate`, the Python API (:mod:`dotformer.api`), ``dotformer plot attention`` and ``dotformer explore``.

Inputs are sorted by length and cut into batches of at most ``batch_size`` sentences and ``max_tokens`` padded source
tokens, so each batch holds sentences of about the same length (little padding) and one very long input is decoded
alone instead of padding a whole batch; the outputs come back in input order. Characters the source vocabulary does
not know are read as UNK, with one warning per call (an :class:`UnknownTokenWarning`) that counts them; nothing is
dropped. An input longer than ``max_input_length`` tokens is refused with an :class:`InputTooLongError` that names it.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch import Tensor

from dotformer.data.tokenizers import EOS_ID, PAD_ID
from dotformer.decoding.batch import decode_batch
from dotformer.decoding.config import DecodeConfig
from dotformer.errors import ConfigError, ShapeError

if TYPE_CHECKING:
    from dotformer.checkpoint import LoadedCheckpoint
    from dotformer.config import ModelConfig
    from dotformer.data.tokenizers import Tokenizer
    from dotformer.model import Transformer

PROGRESS_THRESHOLD = 500  # inputs from which translate() shows a progress bar on stderr by default
DEFAULT_MAX_TOKENS = 8192  # padded source tokens per batch (B × S); a longer input than this is decoded alone


class UnknownTokenWarning(UserWarning):
    """Some input characters are not in the source vocabulary and were read as UNK."""


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


class Translation(NamedTuple):
    """One output of :func:`translate`: a :class:`~dotformer.decoding.Hypothesis` with its detokenised text.

    Attributes:
        text: the detokenised output.
        tokens: output token ids (no BOS, no EOS).
        score: log P(Y | X) / lp(|Y|), natural log (see :class:`~dotformer.decoding.Hypothesis`).
        log_probs: per-step log-probabilities (EOS included when the output finished).
    """

    text: str
    tokens: list[int]
    score: float
    log_probs: list[float]

    @property
    def finished(self) -> bool:
        """True when the model ended the output with EOS; False when it was cut at the maximum length."""
        return len(self.log_probs) == len(self.tokens) + 1


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


def check_max_input_length(config: ModelConfig, max_input_length: int | None) -> int:
    """``max_input_length`` checked against the model (None: :func:`default_max_input_length`).

    Raises:
        ConfigError: not a positive integer, or above a learned positional table's ``max_len``.
    """
    if max_input_length is None:
        return default_max_input_length(config)
    if not isinstance(max_input_length, int) or isinstance(max_input_length, bool) or max_input_length < 1:
        raise ConfigError(f"max_input_length must be a positive integer, got {max_input_length!r}")
    if config.positional == "learned" and max_input_length > config.max_len:
        raise ConfigError(
            f"max_input_length {max_input_length} exceeds this model's learned positional table "
            f"({config.max_len} positions)"
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
        n = tokenizer.count_unknown(text)
        counts.append(n)
        if n:
            unknown += n
            with_unknown.append(i)
        ids.append(tokens)
    return EncodedTexts(ids, unknown, with_unknown, counts, list(texts))


def encode_sources(loaded: Any, texts: Sequence[str], max_len: int | None = None) -> EncodedTexts:
    """Prepare users' inputs for a checkpoint: normalise them as its training sources were, then tokenise.

    The one path from a user's text to source ids, shared by :func:`translate`, :class:`dotformer.api.Translator`,
    :func:`dotformer.plots.attention_weights` and the explorer, so they all read an input the same way.

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


def pad_batch(sequences: Sequence[Sequence[int]], device: torch.device | str = "cpu") -> Tensor:
    """Right-pad token id lists with PAD into a (B, S) int64 tensor, S = the longest list."""
    width = max(len(s) for s in sequences)
    batch = torch.full((len(sequences), width), PAD_ID, dtype=torch.int64)  # (B, S)
    for row, seq in enumerate(sequences):
        batch[row, : len(seq)] = torch.tensor(seq, dtype=torch.int64)
    return batch.to(device)


def length_sorted_batches(lengths: Sequence[int], batch_size: int, max_tokens: int | None = None) -> list[list[int]]:
    """Indices grouped into batches, longest first (stable), so a batch pads little.

    A batch holds at most ``batch_size`` indices and, when ``max_tokens`` is given, at most ``max_tokens`` padded
    tokens (its size times its longest length); an index longer than ``max_tokens`` is a batch of its own.

    Raises:
        ConfigError: ``batch_size`` or ``max_tokens`` < 1.
    """
    if batch_size < 1:
        raise ConfigError(f"batch_size must be a positive integer, got {batch_size}")
    if max_tokens is not None and max_tokens < 1:
        raise ConfigError(f"max_tokens must be a positive integer, got {max_tokens}")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for i in order:
        if batches:
            batch = batches[-1]
            longest = lengths[batch[0]]  # sorted longest first
            fits_tokens = max_tokens is None or (len(batch) + 1) * longest <= max_tokens
            if len(batch) < batch_size and fits_tokens:
                batch.append(i)
                continue
        batches.append([i])
    return batches


def source_normaliser(info: dict[str, Any]) -> Callable[[str], str]:
    """How to prepare a user's input the way the checkpoint's training sources were prepared.

    A CMUdict G2P model read lower-case words (:func:`dotformer.data.cmudict.normalise_word`), so "Transformer"
    becomes "transformer"; other corpora were read as they are, and so are their inputs.

    Args:
        info: the checkpoint's config.json (``info["dataset"]`` names the corpus).
    """
    if info.get("dataset") == "cmudict":
        from dotformer.data.cmudict import normalise_word

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
        from dotformer.data.cmudict import strip_stress

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
    from dotformer.data.tokenizers import UNK_ID

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


def model_device(model: Transformer) -> torch.device:
    """The device of the model's parameters."""
    return next(model.parameters()).device


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


def warn_unknown(encoded: EncodedTexts, texts: Sequence[str] | None = None, stacklevel: int = 3) -> None:
    """Issue one :class:`UnknownTokenWarning` summarising the UNK tokens of ``encoded``, if any.

    ``texts`` is accepted for compatibility and ignored (the message quotes ``encoded.texts``).
    """
    message = unknown_message(encoded)
    if message is not None:
        warnings.warn(message, UnknownTokenWarning, stacklevel=stacklevel)


def empty_translation() -> Translation:
    """The output of an empty source: no tokens, score 0, finished (its one log-probability stands for the EOS)."""
    return Translation("", [], 0.0, [0.0])


def is_empty_source(text: str) -> bool:
    """True for an empty or whitespace-only source text: it has nothing to translate, so its output is empty."""
    return not text.strip()


def decode_encoded(
    loaded: LoadedCheckpoint,
    encoded: EncodedTexts,
    config: DecodeConfig | None = None,
    batch_size: int = 64,
    progress: bool | None = None,
    max_tokens: int | None = DEFAULT_MAX_TOKENS,
) -> list[list[Translation]]:
    """Decode already encoded sources (:func:`encode_sources`); see :func:`translate` for the arguments.

    An empty or whitespace-only source (:func:`is_empty_source`) is not given to the model: its output is
    :func:`empty_translation`, alone (one hypothesis whatever ``n_best``).
    """
    from tqdm import tqdm

    config = config or DecodeConfig()
    model = loaded.model
    device = model_device(model)
    results: list[list[Translation]] = [[] for _ in encoded.ids]
    empty = [i for i, text in enumerate(encoded.texts) if is_empty_source(text)]
    for i in empty:
        results[i] = [empty_translation()]
    todo = sorted(set(range(len(encoded.ids))) - set(empty))
    batches = [
        [todo[j] for j in batch]
        for batch in length_sorted_batches([len(encoded.ids[i]) for i in todo], batch_size, max_tokens)
    ]
    show = progress if progress is not None else len(encoded.ids) >= PROGRESS_THRESHOLD
    with tqdm(total=len(encoded.ids), unit="sent", file=sys.stderr, disable=not show, desc="translate") as bar:
        bar.update(len(empty))
        for batch in batches:
            src = pad_batch([encoded.ids[i] for i in batch], device)  # (B, S)
            for i, hyps in zip(batch, decode_batch(model, src, config), strict=True):
                results[i] = [
                    Translation(loaded.tgt_tokenizer.decode(h.tokens), h.tokens, h.score, h.log_probs) for h in hyps
                ]
            bar.update(len(batch))
    return results


def translate(
    loaded: LoadedCheckpoint,
    texts: Sequence[str],
    config: DecodeConfig | None = None,
    batch_size: int = 64,
    progress: bool | None = None,
    *,
    max_tokens: int | None = DEFAULT_MAX_TOKENS,
    max_input_length: int | None = None,
) -> list[list[Translation]]:
    """Decode every text with a loaded checkpoint and return detokenised outputs, in input order.

    Args:
        loaded: from :func:`dotformer.checkpoint.load_checkpoint` (model, tokenizers, config).
        texts: source sentences as a user wrote them; they are normalised as the checkpoint's training sources were
            (:func:`source_normaliser`). An empty or whitespace-only text is valid: its output is the empty
            :func:`empty_translation` (score 0, finished, one hypothesis), found without running the model.
        config: how to decode (default :class:`DecodeConfig`: beam 4, α = 0.6).
        batch_size: most sentences decoded together (beam search runs batch_size · K decoder rows).
        progress: show a progress bar on stderr; None shows one from ``PROGRESS_THRESHOLD`` inputs on.
        max_tokens: most padded source tokens per batch (B × S; None: no limit), so one long input does not pad a
            whole batch.
        max_input_length: most tokens (EOS included) an input may have; None: the model's ``max_len``.

    Returns:
        Per text, its hypotheses best first (1 for greedy; ``n_best`` for beam and sampling) as :class:`Translation`.

    Raises:
        InputTooLongError: an input is longer than ``max_input_length`` (a :class:`ShapeError`; it names the input).
        ConfigError: bad ``batch_size``, ``max_tokens``, ``max_input_length`` or model.

    Warns:
        UnknownTokenWarning: once, when inputs hold symbols outside the source vocabulary (read as UNK).
    """
    limit = check_max_input_length(loaded.model.config, max_input_length)
    encoded = encode_sources(loaded, texts, limit)
    warn_unknown(encoded)
    return decode_encoded(loaded, encoded, config, batch_size, progress, max_tokens)
