"""Text in, text out: tokenise, batch by length, decode, detokenise, with a loaded checkpoint.

Inputs are sorted by length and cut into batches of ``batch_size`` sentences, so each batch holds sentences of about
the same length (little padding); the outputs come back in input order. Characters the source vocabulary does not know
are read as UNK, with one warning per call (an :class:`UnknownTokenWarning`) that counts them; nothing is dropped.
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
    from dotformer.data.tokenizers import Tokenizer
    from dotformer.model import Transformer

PROGRESS_THRESHOLD = 500  # inputs from which translate() shows a progress bar on stderr by default


class UnknownTokenWarning(UserWarning):
    """Some input characters are not in the source vocabulary and were read as UNK."""


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
    """

    ids: list[list[int]]
    unknown: int
    texts_with_unknown: list[int]


def encode_texts(texts: Sequence[str], tokenizer: Tokenizer, max_len: int | None = None) -> EncodedTexts:
    """Tokenise source texts and append EOS (the form the model was trained on).

    Args:
        texts: the inputs.
        tokenizer: the checkpoint's source tokenizer.
        max_len: the most tokens (EOS included) the model reads, or None for no limit.

    Raises:
        ShapeError: a text is longer than ``max_len`` tokens (the message names the first such input, 1-based).
    """
    ids, unknown, with_unknown = [], 0, []
    for i, text in enumerate(texts):
        tokens = [*tokenizer.encode(text), EOS_ID]
        if max_len is not None and len(tokens) > max_len:
            raise ShapeError(
                f"input {i + 1} has {len(tokens)} tokens (EOS included) but this model reads at most {max_len} "
                f"(learned positional encoding); shorten it"
            )
        n = tokenizer.count_unknown(text)
        if n:
            unknown += n
            with_unknown.append(i)
        ids.append(tokens)
    return EncodedTexts(ids, unknown, with_unknown)


def pad_batch(sequences: Sequence[Sequence[int]], device: torch.device | str = "cpu") -> Tensor:
    """Right-pad token id lists with PAD into a (B, S) int64 tensor, S = the longest list."""
    width = max(len(s) for s in sequences)
    batch = torch.full((len(sequences), width), PAD_ID, dtype=torch.int64)  # (B, S)
    for row, seq in enumerate(sequences):
        batch[row, : len(seq)] = torch.tensor(seq, dtype=torch.int64)
    return batch.to(device)


def length_sorted_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of at most ``batch_size``, longest first (stable), so a batch pads little.

    Raises:
        ConfigError: ``batch_size`` < 1.
    """
    if batch_size < 1:
        raise ConfigError(f"batch_size must be a positive integer, got {batch_size}")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


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


def model_device(model: Transformer) -> torch.device:
    """The device of the model's parameters."""
    return next(model.parameters()).device


def warn_unknown(encoded: EncodedTexts, texts: Sequence[str]) -> None:
    """Issue one :class:`UnknownTokenWarning` summarising the UNK tokens of ``encoded``, if any."""
    if not encoded.unknown:
        return
    first = encoded.texts_with_unknown[0]
    example = texts[first] if len(texts[first]) <= 40 else texts[first][:37] + "..."
    warnings.warn(
        f"{encoded.unknown} input symbol(s) in {len(encoded.texts_with_unknown)} of {len(texts)} input(s) are not in "
        f"the source vocabulary and were read as <unk> (first: input {first + 1}, {example!r})",
        UnknownTokenWarning,
        stacklevel=3,
    )


def translate(
    loaded: LoadedCheckpoint,
    texts: Sequence[str],
    config: DecodeConfig | None = None,
    batch_size: int = 64,
    progress: bool | None = None,
) -> list[list[Translation]]:
    """Decode every text with a loaded checkpoint and return detokenised outputs, in input order.

    Args:
        loaded: from :func:`dotformer.checkpoint.load_checkpoint` (model, tokenizers, config).
        texts: source sentences (an empty string is a valid input).
        config: how to decode (default :class:`DecodeConfig`: beam 4, α = 0.6).
        batch_size: sentences decoded together (beam search runs batch_size · K decoder rows).
        progress: show a progress bar on stderr; None shows one from ``PROGRESS_THRESHOLD`` inputs on.

    Returns:
        Per text, its hypotheses best first (1 for greedy; ``n_best`` for beam and sampling) as :class:`Translation`.

    Raises:
        ShapeError: an input is longer than the model can read. ConfigError: bad ``batch_size`` or model.

    Warns:
        UnknownTokenWarning: once, when inputs hold symbols outside the source vocabulary (read as UNK).
    """
    from tqdm import tqdm

    config = config or DecodeConfig()
    model = loaded.model
    limit = model.config.max_len if model.config.positional == "learned" else None
    encoded = encode_texts(texts, loaded.src_tokenizer, limit)
    warn_unknown(encoded, texts)
    device = model_device(model)
    batches = length_sorted_batches([len(ids) for ids in encoded.ids], batch_size)
    results: list[list[Translation]] = [[] for _ in texts]
    show = progress if progress is not None else len(texts) >= PROGRESS_THRESHOLD
    with tqdm(total=len(texts), unit="sent", file=sys.stderr, disable=not show, desc="translate") as bar:
        for batch in batches:
            src = pad_batch([encoded.ids[i] for i in batch], device)  # (B, S)
            for i, hyps in zip(batch, decode_batch(model, src, config), strict=True):
                results[i] = [
                    Translation(loaded.tgt_tokenizer.decode(h.tokens), h.tokens, h.score, h.log_probs) for h in hyps
                ]
            bar.update(len(batch))
    return results
