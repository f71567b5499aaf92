"""Pictures of the two masks of an example batch (paper §3.2.3), built by :mod:`dotformer.masks`:

* the source padding mask (B × S): which keys of each sentence are real tokens (True = may attend);
* the causal mask (T × T): target position i may read positions j <= i;
* the decoder's mask per sentence (T × T): causal AND "the key is not padding".
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from dotformer.errors import ConfigError
from dotformer.masks import causal_mask, combine_masks, padding_mask
from dotformer.plots.common import check_output_path, heatmap, new_figure, save_figure

# Example (source, target) pairs of different lengths, so that padding shows.
EXAMPLE_PAIRS: tuple[tuple[str, str], ...] = (
    ("the cat sat down", "le chat s'est assis"),
    ("hello", "bonjour"),
    ("a dog ran", "un chien courait vite"),
)
PAD, BOS, EOS = 0, 1, 2


class MaskData(NamedTuple):
    """The numbers behind the masks figure.

    Attributes:
        src_tokens: B lists of S labels (source words, "</s>", then "<pad>").
        tgt_tokens: B lists of T labels (decoder input: "<s>", target words, then "<pad>").
        src: (B, S) int64 source ids, right-padded with PAD = 0. tgt_in: (B, T) int64 decoder input ids.
        padding: (B, S) bool, ``padding_mask(src, 0)[:, 0, 0, :]`` (True = real token, may be attended to).
        causal: (T, T) bool, ``causal_mask(T)`` (True on and below the diagonal).
        decoder: (B, T, T) bool, ``combine_masks(causal_mask(T), padding_mask(tgt_in, 0))``.
    """

    src_tokens: list[list[str]]
    tgt_tokens: list[list[str]]
    src: np.ndarray
    tgt_in: np.ndarray
    padding: np.ndarray
    causal: np.ndarray
    decoder: np.ndarray


def pad_batch(sentences: Sequence[Sequence[str]], vocab: dict[str, int]) -> torch.Tensor:
    """Right-pad word lists into a (B, L) int64 tensor of ids (new words get new ids in ``vocab``)."""
    length = max(len(s) for s in sentences)
    rows = [[vocab.setdefault(w, len(vocab)) for w in s] + [PAD] * (length - len(s)) for s in sentences]
    return torch.tensor(rows, dtype=torch.int64)  # (B, L)


def mask_data(pairs: Sequence[tuple[str, str]] = EXAMPLE_PAIRS) -> MaskData:
    """Build an example batch from whitespace-tokenised pairs and compute its masks with :mod:`dotformer.masks`.

    Raises:
        ConfigError: no pairs, or an empty source or target.
    """
    if not pairs or any(not s.split() or not t.split() for s, t in pairs):
        raise ConfigError("the masks example needs at least one pair with a non-empty source and target")
    src_words = [[*s.split(), "</s>"] for s, _ in pairs]
    tgt_words = [["<s>", *t.split()] for _, t in pairs]
    vocab = {"<pad>": PAD, "<s>": BOS, "</s>": EOS}
    src = pad_batch(src_words, vocab)  # (B, S)
    tgt_in = pad_batch(tgt_words, vocab)  # (B, T)
    T = tgt_in.size(1)
    padding = padding_mask(src, PAD)  # (B, 1, 1, S)
    causal = causal_mask(T)  # (T, T)
    decoder = combine_masks(causal, padding_mask(tgt_in, PAD))  # (B, 1, T, T)
    assert decoder is not None

    def labels(words: list[list[str]], length: int) -> list[list[str]]:
        return [w + ["<pad>"] * (length - len(w)) for w in words]

    return MaskData(
        src_tokens=labels(src_words, src.size(1)),
        tgt_tokens=labels(tgt_words, T),
        src=src.numpy(),
        tgt_in=tgt_in.numpy(),
        padding=padding[:, 0, 0, :].numpy(),
        causal=causal.numpy(),
        decoder=decoder[:, 0].numpy(),
    )


class MaskPlot(NamedTuple):
    """Result of :func:`plot_masks`: the written file and the numbers drawn."""

    path: Path
    data: MaskData


def plot_masks(path: str | Path, pairs: Sequence[tuple[str, str]] = EXAMPLE_PAIRS) -> MaskPlot:
    """Draw the padding mask of the batch, the causal mask, and the decoder mask of every sentence.

    Raises:
        ConfigError: a bad example batch or file extension.
    """
    path = check_output_path(path)
    data = mask_data(pairs)
    B = data.src.shape[0]
    fig = new_figure(3.2 * (B + 2), 3.8)
    axes = fig.subplots(1, B + 2)
    heatmap(
        axes[0],
        data.padding.astype(np.float32),
        [f"sentence {b}" for b in range(B)],
        data.src_tokens[0],
        "source padding mask (B × S)\nTrue (dark) = real token, may be attended to",
        cmap="Greens",
    )
    for b in range(B):
        for s, token in enumerate(data.src_tokens[b]):
            color = "white" if data.padding[b, s] else "black"
            axes[0].text(s, b, token, ha="center", va="center", fontsize=7, rotation=30, color=color)
    axes[0].set_xticks([])
    heatmap(axes[1], data.causal.astype(np.float32), title="causal mask (T × T)\nTrue = may attend", cmap="Greens")
    for b in range(B):
        tokens = data.tgt_tokens[b]
        title = f"decoder mask, sentence {b}\ncausal AND key not padding"
        heatmap(axes[b + 2], data.decoder[b].astype(np.float32), tokens, tokens, title, cmap="Greens")
    return MaskPlot(save_figure(fig, path), data)
