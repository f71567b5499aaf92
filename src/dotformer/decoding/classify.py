"""Labels from an encoder with a classifier head: a label per text (``classify``) or per word (``tag``).

The texts are read as the model was trained to read them, ``[BOS] ids [EOS]``, batched longest first by padded tokens
(:func:`~dotformer.decoding.order.length_sorted_batches`), and the head's logits become probabilities with a softmax
over the C labels: a text's (a sequence head's), or each word's at its first token (a token head's; the words of a
text are its whitespace-separated pieces, encoded as :class:`~dotformer.data.tokenize.words.WordPieces` does in
training). Padding never reaches a text's scores, so they do not depend on the texts batched with it.

A text longer than the model reads (``max_len`` tokens with BOS and EOS) is cut there for a label per text, as
BERT's classifiers truncate, and counted (:attr:`LabelScores.cut`); for a label per word its later words would go
unlabelled, so it is refused (:class:`~dotformer.decoding.inputs.InputTooLongError`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor

from dotformer.data.tokenize.tokenizers import BOS_ID, EOS_ID, UNK_ID
from dotformer.errors import CheckpointError, ConfigError

DEFAULT_BATCH_SIZE = 64


class LabelScores(NamedTuple):
    """Label probabilities of some texts.

    Attributes:
        probabilities: per text, (C,) float32 (a label per text), or (W, C) for its W words (a label per word).
        cut: texts cut to the model's length (a label per text only).
        unknown: tokens read as ``<unk>`` over all texts.
        texts_with_unknown: the indices of the texts holding them.
    """

    probabilities: list[Tensor]
    cut: int
    unknown: int
    texts_with_unknown: list[int]


def check_classifier(model: Any, where: Any) -> str:
    """The head of a classifier checkpoint: "sequence" or "token".

    Raises:
        ConfigError: a model without a classifier head (naming ``where``).
    """
    head = model.config.head
    if head not in ("sequence", "token"):
        kind = {
            "decoder-only": "a language model (dotformer generate)",
            "encoder-decoder": "an encoder-decoder model (dotformer translate)",
        }.get(model.config.arch, "an encoder that predicts tokens, as a masked language model")
        raise ConfigError(
            f"{where} has no classifier: it is {kind}; train one with dotformer train --task classify or --task tag"
        )
    return str(head)


def checkpoint_labels(loaded: Any) -> list[str]:
    """The label names a classifier checkpoint records (``config.json["labels"]``), one per output of its head.

    Raises:
        CheckpointError: missing, or not one per output.
    """
    names = loaded.info.get("labels")
    if not isinstance(names, list) or len(names) != loaded.model.config.num_labels:
        raise CheckpointError(f"{loaded.path}/config.json: its 'labels' do not name the head's outputs")
    return [str(name) for name in names]


def _run(model: Any, inputs: list[list[int]], batch_size: int, max_tokens: int) -> list[Tensor]:
    """The head's probabilities per input: (C,) for a sequence head, (S, C) for a token head."""
    from dotformer.decoding.order import length_sorted_batches
    from dotformer.decoding.translate import model_device, pad_batch

    device = model_device(model)
    out: list[Tensor] = [torch.empty(0)] * len(inputs)
    with torch.inference_mode():
        for batch in length_sorted_batches([len(ids) for ids in inputs], batch_size, max_tokens):
            src = pad_batch([inputs[i] for i in batch], device)  # (B, S)
            probabilities = model(src).float().softmax(dim=-1).cpu()  # (B, C) or (B, S, C)
            for row, i in enumerate(batch):
                out[i] = probabilities[row]
    return out


def label_texts(
    model: Any, tokenizer: Any, texts: Sequence[str], batch_size: int = DEFAULT_BATCH_SIZE, max_tokens: int = 8192
) -> LabelScores:
    """Probabilities of the C labels for each text (a sequence head) or for each of its words (a token head).

    Args:
        model: an encoder-only :class:`~dotformer.model.Transformer` with a classifier head (eval mode).
        tokenizer: its tokenizer. texts: the inputs (an empty text is read as BOS EOS; it has no words to tag).
        batch_size: most texts at once. max_tokens: most padded tokens per batch.

    Returns:
        :class:`LabelScores`.

    Raises:
        ConfigError: no classifier head, or a batch size below 1. InputTooLongError: a text to tag longer than the
            model reads.
    """
    from dotformer.data.tokenize.words import WordPieces
    from dotformer.decoding.inputs import InputTooLongError

    head = check_classifier(model, "the model")
    if batch_size < 1 or max_tokens < 1:
        raise ConfigError(f"batch_size and max_tokens must be positive, got {batch_size}, {max_tokens}")
    room = model.config.max_len - 2
    inputs, firsts, cut = [], [], 0
    pieces = WordPieces(tokenizer)
    for i, text in enumerate(texts):
        if head == "sequence":
            ids = tokenizer.encode(text) if text.strip() else []
            cut += len(ids) > room
            ids, first = ids[:room], []
        else:
            ids, positions = pieces.encode(text.split()) if text.strip() else ([], [])
            if len(ids) > room:
                raise InputTooLongError(
                    f"input {i + 1} has {len(ids) + 2} tokens (BOS and EOS included) but this model reads at most "
                    f"{room + 2}; split it",
                    i,
                    len(ids) + 2,
                    room + 2,
                )
            first = [where[0] + 1 for where in positions]  # + 1: BOS comes first
        inputs.append([BOS_ID, *ids, EOS_ID])
        firsts.append(first)
    probabilities = _run(model, inputs, batch_size, max_tokens)
    if head == "token":
        probabilities = [p[first] for p, first in zip(probabilities, firsts, strict=True)]  # (W, C)
    counts = [ids.count(UNK_ID) for ids in inputs]
    return LabelScores(probabilities, cut, sum(counts), [i for i, n in enumerate(counts) if n])


__all__ = ["DEFAULT_BATCH_SIZE", "LabelScores", "check_classifier", "checkpoint_labels", "label_texts"]
