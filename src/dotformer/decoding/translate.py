"""Text in, text out: normalise, tokenise, batch by length, decode, detokenise, with a loaded checkpoint.

Inputs become ids as :mod:`dotformer.decoding.inputs` says (:func:`~dotformer.decoding.inputs.encode_sources`:
normalised as the checkpoint's training sources were, tokenised, checked against ``max_input_length``, unknown symbols
counted). They are then sorted by length and cut into batches of at most ``batch_size`` sentences and ``max_tokens``
padded source tokens, so each batch holds sentences of about the same length (little padding) and one very long input
is decoded alone instead of padding a whole batch; the outputs come back in input order.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from dotformer.data.tokenize.tokenizers import PAD_ID, UNK_ID
from dotformer.decoding.alignment import (
    check_alignment_layer,
    check_replace_unk,
    hard_alignments,
    unknowns_replaced,
)
from dotformer.decoding.batch import decode_batch
from dotformer.decoding.config import DecodeConfig
from dotformer.decoding.controls import controls_of
from dotformer.decoding.inputs import (
    EncodedTexts,
    check_max_input_length,
    check_prefixes,
    encode_prefixes,
    encode_sources,
    is_empty_source,
    warn_unknown,
)
from dotformer.decoding.order import DEFAULT_BATCH_SIZE, DEFAULT_MAX_TOKENS, length_sorted_batches, show_progress
from dotformer.decoding.results import Translation, empty_translation

if TYPE_CHECKING:
    from dotformer.checkpoint import LoadedCheckpoint
    from dotformer.model import Transformer

__all__ = [
    "decode_encoded",
    "model_device",
    "pad_batch",
    "translate",
]


def pad_batch(sequences: Sequence[Sequence[int]], device: torch.device | str = "cpu") -> Tensor:
    """Right-pad token id lists with PAD into a (B, S) int64 tensor, S = the longest list (at least 1)."""
    width = max(1, max(len(s) for s in sequences))
    batch = torch.full((len(sequences), width), PAD_ID, dtype=torch.int64)  # (B, S)
    for row, seq in enumerate(sequences):
        batch[row, : len(seq)] = torch.tensor(seq, dtype=torch.int64)
    return batch.to(device)


def model_device(model: Transformer) -> torch.device:
    """The device of the model's parameters."""
    return next(model.parameters()).device


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
    controls = controls_of(config, loaded.tgt_tokenizer)  # an unknown end or suppressed token is named
    results: list[list[Translation]] = [[] for _ in encoded.ids]
    empty = [i for i, text in enumerate(encoded.texts) if is_empty_source(text) and not (prefixes and prefixes[i])]
    for i in empty:
        results[i] = [empty_translation()._replace(alignment=[] if config.alignments else None)]
    todo = sorted(set(range(len(encoded.ids))) - set(empty))
    batches = [
        [todo[j] for j in batch]
        for batch in length_sorted_batches([len(encoded.ids[i]) for i in todo], batch_size, max_tokens)
    ]
    progress = show_progress(progress, len(encoded.ids))
    with tqdm(total=len(encoded.ids), unit="sent", file=sys.stderr, disable=not progress, desc="translate") as bar:
        bar.update(len(empty))
        for batch in batches:
            src = pad_batch([encoded.ids[i] for i in batch], device)  # (B, S)
            prefix = None if prefixes is None else pad_batch([prefixes[i] for i in batch], device)  # (B, P)
            for i, hyps in zip(batch, decode_batch(model, src, config, prefix, controls), strict=True):
                results[i] = [
                    Translation(loaded.tgt_tokenizer.decode(h.tokens), h.tokens, h.score, h.log_probs, h.finished)
                    for h in hyps
                ]
            if config.alignments or config.replace_unk:
                add_alignments(loaded, encoded, batch, results, config)
            bar.update(len(batch))
    return results


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
            hyp = hyp._replace(text=unknowns_replaced(loaded, encoded.texts[i], hyp.tokens, alignment))
        results[i][k] = hyp


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
