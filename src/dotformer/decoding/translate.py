"""Text in, text out: normalise, tokenise, batch by length, decode, detokenise, with a loaded checkpoint.

Inputs become ids as :mod:`dotformer.decoding.inputs` says (:func:`~dotformer.decoding.inputs.encode_sources`:
normalised as the checkpoint's training sources were, tokenised, checked against ``max_input_length``, unknown symbols
counted). They are then sorted by length and cut into batches of at most ``batch_size`` sentences and ``max_tokens``
padded source tokens, so each batch holds sentences of about the same length (little padding) and one very long input
is decoded alone instead of padding a whole batch; the outputs come back in input order.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import torch
from torch import Tensor

from dotformer.data.tokenizers import PAD_ID, UNK_ID
from dotformer.decoding.alignment import check_alignment_layer, hard_alignments, replace_unknown_pieces
from dotformer.decoding.batch import decode_batch
from dotformer.decoding.config import DecodeConfig
from dotformer.decoding.inputs import (
    EncodedTexts,
    UnknownTokenWarning,
    check_max_input_length,
    encode_prefix,
    encode_sources,
    is_empty_source,
    unknown_prefix_message,
    warn_unknown,
)
from dotformer.errors import ConfigError, ShapeError

if TYPE_CHECKING:
    from dotformer.checkpoint import LoadedCheckpoint
    from dotformer.model import Transformer

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_MAX_TOKENS",
    "PROGRESS_THRESHOLD",
    "Translation",
    "decode_encoded",
    "empty_translation",
    "encode_prefixes",
    "length_sorted_batches",
    "model_device",
    "pad_batch",
    "translate",
]

PROGRESS_THRESHOLD = 500  # inputs from which translate() shows a progress bar on stderr by default
DEFAULT_MAX_TOKENS = 8192  # padded source tokens per batch (B × S); a longer input than this is decoded alone
DEFAULT_BATCH_SIZE = 256  # sentences per batch: a small model's step is mostly fixed cost, so wide batches pay


def _is_terminal(stream: object) -> bool:
    """Whether ``stream`` (sys.stderr, which may be None or closed) is a terminal."""
    try:
        return bool(stream is not None and stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError):
        return False


class Translation(NamedTuple):
    """One output of :func:`translate`: a :class:`~dotformer.decoding.Hypothesis` with its detokenised text.

    Attributes:
        text: the detokenised output.
        tokens: output token ids (no BOS, no EOS).
        score: log P(Y | X) / lp(|Y|), natural log (see :class:`~dotformer.decoding.Hypothesis`).
        log_probs: per-step log-probabilities (EOS included when the output finished).
        alignment: with ``DecodeConfig.alignments`` (or ``replace_unk``), one ``(source index, output index)`` pair
            per output token (:mod:`dotformer.decoding.alignment`); else None.
    """

    text: str
    tokens: list[int]
    score: float
    log_probs: list[float]
    alignment: list[tuple[int, int]] | None = None

    @property
    def finished(self) -> bool:
        """True when the model ended the output with EOS; False when it was cut at the maximum length."""
        return len(self.log_probs) == len(self.tokens) + 1


def pad_batch(sequences: Sequence[Sequence[int]], device: torch.device | str = "cpu") -> Tensor:
    """Right-pad token id lists with PAD into a (B, S) int64 tensor, S = the longest list (at least 1)."""
    width = max(1, max(len(s) for s in sequences))
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


def model_device(model: Transformer) -> torch.device:
    """The device of the model's parameters."""
    return next(model.parameters()).device


def empty_translation() -> Translation:
    """The output of an empty source: no tokens, score 0, finished (its one log-probability stands for the EOS)."""
    return Translation("", [], 0.0, [0.0])


def decode_encoded(
    loaded: LoadedCheckpoint,
    encoded: EncodedTexts,
    config: DecodeConfig | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: bool | None = None,
    max_tokens: int | None = DEFAULT_MAX_TOKENS,
    prefixes: Sequence[Sequence[int]] | None = None,
) -> list[list[Translation]]:
    """Decode already encoded sources (:func:`encode_sources`); see :func:`translate` for the arguments.

    An empty or whitespace-only source (:func:`is_empty_source`) without a prefix is not given to the model: its
    output is :func:`empty_translation`, alone (one hypothesis whatever ``n_best``).

    Args:
        prefixes: None, or per source the target ids its outputs must start with (:func:`encode_prefixes`; an
            empty list: no prefix).

    Raises:
        ConfigError: ``prefixes`` does not hold one entry per source; ``alignment_layer`` names no decoder layer.
            ShapeError: a prefix as long as its output's length limit.
    """
    from tqdm import tqdm

    config = config or DecodeConfig()
    model = loaded.model
    device = model_device(model)
    if prefixes is not None:
        check_prefixes(prefixes, encoded, config)
    if config.replace_unk:
        check_replace_unk(loaded)
    check_alignment_layer(model, config.alignment_layer)  # with or without alignments: a wrong value is named
    results: list[list[Translation]] = [[] for _ in encoded.ids]
    empty = [i for i, text in enumerate(encoded.texts) if is_empty_source(text) and not (prefixes and prefixes[i])]
    for i in empty:
        results[i] = [empty_translation()._replace(alignment=[] if config.alignments else None)]
    todo = sorted(set(range(len(encoded.ids))) - set(empty))
    batches = [
        [todo[j] for j in batch]
        for batch in length_sorted_batches([len(encoded.ids[i]) for i in todo], batch_size, max_tokens)
    ]
    if progress is None:  # a bar's redraws are for a terminal, not for a log file or a pipe
        progress = len(encoded.ids) >= PROGRESS_THRESHOLD and _is_terminal(sys.stderr)
    with tqdm(total=len(encoded.ids), unit="sent", file=sys.stderr, disable=not progress, desc="translate") as bar:
        bar.update(len(empty))
        for batch in batches:
            src = pad_batch([encoded.ids[i] for i in batch], device)  # (B, S)
            prefix = None if prefixes is None else pad_batch([prefixes[i] for i in batch], device)  # (B, P)
            for i, hyps in zip(batch, decode_batch(model, src, config, prefix), strict=True):
                results[i] = [
                    Translation(loaded.tgt_tokenizer.decode(h.tokens), h.tokens, h.score, h.log_probs) for h in hyps
                ]
            if config.alignments or config.replace_unk:
                add_alignments(loaded, encoded, batch, results, config)
            bar.update(len(batch))
    return results


def check_replace_unk(loaded: LoadedCheckpoint) -> None:
    """Raise unless both tokenizers split text into pieces that can be copied (char or symbol vocabularies).

    Raises:
        ConfigError: a byte-level BPE tokenizer (it has no <unk> to replace).
    """
    from dotformer.data.tokenizers import VocabularyTokenizer

    for side, tokenizer in (("source", loaded.src_tokenizer), ("target", loaded.tgt_tokenizer)):
        if not isinstance(tokenizer, VocabularyTokenizer):
            raise ConfigError(
                f"replace_unk needs char or symbol tokenizers; the {side} tokenizer is {tokenizer.kind}, which has "
                f"no <unk> to replace"
            )


def add_alignments(
    loaded: LoadedCheckpoint,
    encoded: EncodedTexts,
    batch: Sequence[int],
    results: list[list[Translation]],
    config: DecodeConfig,
) -> None:
    """Align every hypothesis of the inputs ``batch`` (in place), and replace its <unk> pieces when asked."""
    rows = [(i, k) for i in batch for k in range(len(results[i]))]
    alignments = hard_alignments(
        loaded.model,
        [encoded.ids[i] for i, _ in rows],
        [results[i][k].tokens for i, k in rows],
        config.alignment_layer,
    )
    for (i, k), alignment in zip(rows, alignments, strict=True):
        hyp = results[i][k]._replace(alignment=alignment if config.alignments else None)
        if config.replace_unk and UNK_ID in hyp.tokens:
            source_pieces = loaded.src_tokenizer.split(encoded.texts[i])  # type: ignore[attr-defined]
            target = loaded.tgt_tokenizer
            pieces = [target.id_to_token(t) for t in hyp.tokens]
            replaced = replace_unknown_pieces(pieces, hyp.tokens, alignment, source_pieces)
            hyp = hyp._replace(text=target.join(replaced))  # type: ignore[attr-defined]
        results[i][k] = hyp


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


def encode_prefixes(loaded: LoadedCheckpoint, prefixes: Sequence[str | None]) -> list[list[int]]:
    """Target prefixes as ids of the target vocabulary (no BOS, no EOS); None or "" is no prefix.

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


def translate(
    loaded: LoadedCheckpoint,
    texts: Sequence[str],
    config: DecodeConfig | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: bool | None = None,
    *,
    max_tokens: int | None = DEFAULT_MAX_TOKENS,
    max_input_length: int | None = None,
    prefixes: Sequence[str | None] | None = None,
) -> list[list[Translation]]:
    """Decode every text with a loaded checkpoint and return detokenised outputs, in input order.

    Args:
        loaded: from :func:`dotformer.checkpoint.load_checkpoint` (model, tokenizers, config).
        texts: source sentences as a user wrote them; they are normalised as the checkpoint's training sources were
            (:func:`~dotformer.decoding.inputs.source_normaliser`). An empty or whitespace-only text is valid: its
            output is the empty :func:`empty_translation` (score 0, finished, one hypothesis), found without running
            the model.
        config: how to decode (default :class:`DecodeConfig`: beam 4, α = 0.6).
        batch_size: most sentences decoded together (beam search runs batch_size · K decoder rows).
        progress: show a progress bar on stderr; None shows one from ``PROGRESS_THRESHOLD`` inputs on when stderr
            is a terminal.
        max_tokens: most padded source tokens per batch (B × S; None: no limit), so one long input does not pad a
            whole batch.
        max_input_length: most tokens (EOS included) an input may have; None: the model's ``max_len``.
        prefixes: None, or per text the start its outputs must have, in the target's writing (None or "": none);
            its tokens are forced, scored and kept in the output text.

    Returns:
        Per text, its hypotheses best first (1 for greedy; ``n_best`` for beam and sampling) as :class:`Translation`.

    Raises:
        InputTooLongError: an input is longer than ``max_input_length`` (a :class:`ShapeError`; it names the input).
        ConfigError: bad ``batch_size``, ``max_tokens``, ``max_input_length`` or model.

    Warns:
        UnknownTokenWarning: once, when inputs hold symbols outside the source vocabulary (read as UNK); once
            more when prefixes hold symbols outside the target vocabulary (:func:`encode_prefixes`).
    """
    limit = check_max_input_length(loaded.model.config, max_input_length)
    encoded = encode_sources(loaded, texts, limit)
    warn_unknown(encoded)
    ids = None if prefixes is None else encode_prefixes(loaded, prefixes)
    return decode_encoded(loaded, encoded, config, batch_size, progress, max_tokens, ids)
