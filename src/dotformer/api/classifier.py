"""Labels from a classifier or a tagger: ``dotformer.load(path).classify(texts)``, and ``POST /api/classify``.

    model = dotformer.load("runs/genres")                      # a --task classify run (or its checkpoint)
    result = model.classify("Blessed is the man that walketh not in the counsel of the ungodly")
    print(result.label, result.probability)                     # 'poetry' 0.93
    tags = dotformer.load("runs/ner").classify("John lives in Paris")  # a --task tag run: a label per word
    print(list(zip(tags.words, tags.labels)))                   # [('John', 'B-PER'), ('lives', 'O'), ...]

A thin layer over :func:`dotformer.decoding.classify.label_texts` (the path ``dotformer evaluate`` scores with): the
label names are the checkpoint's (``config.json["labels"]``). Symbols the vocabulary reads as ``<unk>`` are one
:class:`~dotformer.decoding.inputs.UnknownTokenWarning` per call, texts cut to the model's length one
:class:`~dotformer.decoding.inputs.TruncationWarning`. The server's side of ``POST /api/classify`` is
:func:`dotformer.api.endpoint.classify_request`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any, NamedTuple


class Classification(NamedTuple):
    """A text's label (a ``--task classify`` checkpoint).

    Attributes:
        text: the input. label: the most probable label. probability: its probability.
        probabilities: every label's probability, in the checkpoint's label order.
    """

    text: str
    label: str
    probability: float
    probabilities: dict[str, float]


class Tagging(NamedTuple):
    """A text's label per word (a ``--task tag`` checkpoint).

    Attributes:
        text: the input. words: its whitespace-separated words. labels: each word's most probable label.
        probabilities: each of those labels' probability.
    """

    text: str
    words: list[str]
    labels: list[str]
    probabilities: list[float]


def classify_texts(
    loaded: Any, texts: Sequence[str], batch_size: int = 64, max_tokens: int | None = None
) -> list[Classification] | list[Tagging]:
    """The label of each text, or of each of its words (module docstring).

    Args:
        loaded: a :class:`~dotformer.checkpoint.LoadedCheckpoint` of a classifier or tagger.
        texts: the inputs (a sentence-pair classifier's: ``TEXT<TAB>TEXT`` each).
        batch_size, max_tokens: texts and padded tokens per batch.

    Raises:
        ConfigError: not a classifier or tagger, a bad batch size. CheckpointError: no label names recorded.
        InputTooLongError: a text to tag longer than the model reads. DataError: an input of a sentence-pair
            classifier that is not TEXT<TAB>TEXT.

    Warns:
        UnknownTokenWarning, TruncationWarning: once per call each (module docstring).
    """
    from dotformer.decoding.classify import check_classifier, checkpoint_labels, label_texts
    from dotformer.decoding.inputs import TruncationWarning, UnknownTokenWarning

    check_classifier(loaded.model, loaded.path)
    names = checkpoint_labels(loaded)
    read = texts
    if loaded.info.get("task") == "classify-pairs":  # TEXT<TAB>TEXT, read as its training pairs were
        from dotformer.runs.sentence_pairs import join_pairs

        read = join_pairs(texts)
    scores = label_texts(loaded.model, loaded.src_tokenizer, read, batch_size, max_tokens or 8192)
    if scores.unknown:
        first = scores.texts_with_unknown[0]
        warnings.warn(
            f"{scores.unknown} input symbol(s) in {len(scores.texts_with_unknown)} of {len(texts)} input(s) are not "
            f"in the vocabulary and were read as <unk> (first: input {first + 1})",
            UnknownTokenWarning,
            stacklevel=3,
        )
    if scores.cut:
        limit = loaded.model.config.max_len
        warnings.warn(
            f"{scores.cut} of {len(texts)} input(s) had more than the {limit} tokens the model reads and were cut",
            TruncationWarning,
            stacklevel=3,
        )
    if loaded.model.config.head == "sequence":
        results = []
        for text, p in zip(texts, scores.probabilities, strict=True):
            best = int(p.argmax())
            results.append(Classification(text, names[best], float(p[best]), dict(zip(names, p.tolist(), strict=True))))
        return results
    tagged = []
    for text, p in zip(texts, scores.probabilities, strict=True):
        best = p.argmax(dim=-1).tolist() if p.numel() else []
        chosen = [float(p[w, i]) for w, i in enumerate(best)]
        tagged.append(Tagging(text, text.split(), [names[i] for i in best], chosen))
    return tagged


__all__ = ["Classification", "Tagging", "classify_texts"]
