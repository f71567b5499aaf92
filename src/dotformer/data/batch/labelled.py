"""An encoder's examples and batches: texts read whole, each with what the encoder should say about it, planned from
length arrays and collated from the prepared token arrays a batch at a time.

The three encoder tasks read texts the way BERT reads them, ``[BOS] ids [EOS]`` (BERT's ``[CLS] ... [SEP]``: an
imported BERT's rows 1 and 2 are its ``[CLS]`` and ``[SEP]``), and differ in their labels:

=========  ==================================================  ===============================================
kind       labels of an example                                 a batch's ``labels``
=========  ==================================================  ===============================================
masked     none stored: BERT's masking draws them per epoch    (B, S): the hidden tokens at the masked
           (:func:`mask_tokens`)                               positions, :data:`IGNORE_LABEL` elsewhere
sequence   one label id per text                                (B,) (IGNORE: a row not scored)
token      one label id per position, :data:`IGNORE_LABEL`     (B, S): the labels of the labelled positions
           where there is none (a word's later pieces)          (each word's first token), IGNORE elsewhere
=========  ==================================================  ===============================================

:class:`LabelledExamples` holds no list per example: it is a view of token arrays (memory-mapped prepared data,
:mod:`dotformer.data.prepared`, or arrays in memory) as a start and a size per example, ``(N,)`` int64 each, with a
label per example or a label per token beside. What batching decides is applied here, so one preparation serves every
choice: the block size (a text longer than an example holds is cut there, as BERT truncates, and counted; a masked
language model's line is cut into pieces instead), a masked language model's unit (lines, or blocks of the running
text) and its masking. :class:`LabelledSampler` is a :class:`~dotformer.data.batch.batching.BatchSampler` (token-budget
batches planned from the lengths, length-bucketed, a (seed, epoch)-pure order, shards, resume) that collates
:class:`LabelledBatch` es, reading only the rows of the batch.

Masking (BERT, Devlin et al. 2019, §3.1): of the real tokens of an example (not BOS, EOS or PAD), 15% are chosen,
``max(1, round(0.15 n))`` of them; a chosen token is replaced by the mask token with probability 0.8, by a random
token of the vocabulary (ids from 4: never PAD, BOS, EOS or UNK) with 0.1, and kept with 0.1; the loss scores the
chosen positions only. The choice is drawn from ``numpy.random.default_rng([seed, epoch, example])``: a pure function
of the seed, the epoch and the example's position, so an example is masked anew each epoch, identically on every rank
and after an exact resume; validation batches are masked as epoch 0, the same at every pass.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from dotformer.data.batch.batching import BatchSampler, TensorBatch, gather
from dotformer.data.prepared.arrays import LabelledArrays, RaggedArray
from dotformer.data.tokenize.tokenizers import BOS_ID, EOS_ID, NUM_SPECIAL, PAD_ID, Tokenizer
from dotformer.data.tokenize.words import IGNORE_LABEL
from dotformer.errors import ConfigError, DataError

LabelKind = Literal["masked", "sequence", "token"]


@dataclass(frozen=True)
class Masking:
    """BERT's masking recipe (module docstring).

    Attributes:
        mask_id: the mask token's id (:attr:`~dotformer.data.tokenize.tokenizers.Tokenizer.mask_id`).
        vocab_size: V; random replacements are drawn from ids 4 .. V - 1.
        probability: share of the real tokens chosen (0.15).
        mask_share: share of the chosen replaced by the mask token (0.8).
        random_share: share of the chosen replaced by a random token (0.1); the rest are kept.

    Raises:
        ConfigError: a probability outside (0, 1), shares that do not fit in [0, 1], or no room for random tokens.
    """

    mask_id: int
    vocab_size: int
    probability: float = 0.15
    mask_share: float = 0.8
    random_share: float = 0.1

    def __post_init__(self) -> None:
        if not 0.0 < self.probability < 1.0:
            raise ConfigError(f"mask_probability must be in (0, 1), got {self.probability!r}")
        if min(self.mask_share, self.random_share) < 0.0 or self.mask_share + self.random_share > 1.0:
            raise ConfigError(f"mask shares {self.mask_share}, {self.random_share} must be >= 0 and sum to <= 1")
        if not NUM_SPECIAL <= self.mask_id < self.vocab_size or self.vocab_size <= NUM_SPECIAL + 1:
            raise ConfigError(f"mask id {self.mask_id} does not fit a vocabulary of {self.vocab_size} tokens")


def mask_tokens(
    ids: Sequence[int] | np.ndarray, masking: Masking, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """BERT's masking of one example (module docstring).

    Args:
        ids: the encoder's input, ``[BOS] ids [EOS]`` (BOS, EOS and PAD are never chosen).
        masking: the recipe. rng: the example's generator.

    Returns:
        (inputs, labels), (S,) int64 each: ``ids`` with the chosen tokens replaced, and the original token at each
        chosen position, :data:`IGNORE_LABEL` elsewhere.
    """
    ids = np.asarray(ids, dtype=np.int64)
    inputs, labels = ids.copy(), np.full(len(ids), IGNORE_LABEL, dtype=np.int64)
    maskable = np.flatnonzero((ids != PAD_ID) & (ids != BOS_ID) & (ids != EOS_ID))
    if not len(maskable):
        return inputs, labels
    count = max(1, round(len(maskable) * masking.probability))
    chosen = maskable[rng.choice(len(maskable), size=count, replace=False)]  # positions in ids
    draws = rng.random(count)  # < mask_share: the mask token; < mask_share + random_share: a random token
    random_ids = rng.integers(NUM_SPECIAL, masking.vocab_size, size=count)
    labels[chosen] = ids[chosen]
    masked = draws < masking.mask_share
    randomised = ~masked & (draws < masking.mask_share + masking.random_share)
    inputs[chosen[masked]] = masking.mask_id
    inputs[chosen[randomised]] = random_ids[randomised]
    return inputs, labels


@dataclass(frozen=True)
class LabelledExamples:
    """The examples of an encoder task, what a :class:`LabelledSampler` batches: example i is
    ``[BOS] ids[starts[i] : starts[i] + sizes[i]] [EOS]`` and its labels (module docstring).

    Made by :func:`masked_examples` (text) or :func:`labelled_examples` (a classifier's or a tagger's texts).

    Attributes:
        kind: "masked", "sequence" or "token".
        ids: (T,) the token ids the examples are cut from (memory-mapped, or in memory).
        starts: (N,) int64, where each example's ids begin in ``ids``.
        sizes: (N,) int64, how many ids each example holds (at most the block size less BOS and EOS).
        labels: (N,) a label id per example (sequence kind), else None.
        tags: (T,) a label id per token of ``ids`` (token kind; :data:`IGNORE_LABEL` where none), else None.
        masking: the masked kind's recipe (None for the others).
        num_texts: the texts (lines, sentences) they were made from.
        cut: texts longer than an example holds (cut into pieces for the masked kind; cut short for the others).
    """

    kind: LabelKind
    ids: np.ndarray
    starts: np.ndarray
    sizes: np.ndarray
    labels: np.ndarray | None = None
    tags: np.ndarray | None = None
    masking: Masking | None = None
    num_texts: int = 0
    cut: int = 0

    def __len__(self) -> int:
        """N, the examples."""
        return len(self.starts)

    @property
    def lengths(self) -> np.ndarray:
        """(N,) int64, the padded length each example needs: its ids, BOS and EOS."""
        return self.sizes + 2

    def sampler(self, max_tokens: int, seed: int, shuffle: bool, rank: int, world_size: int) -> LabelledSampler:
        """Its batches: token-budget batches of whole examples with their labels (:class:`LabelledSampler`)."""
        return LabelledSampler(self, max_tokens, seed, shuffle, rank, world_size)


def check_block_size(block_size: int) -> int:
    """The most ids an example holds besides BOS and EOS.

    Raises:
        ConfigError: a block of fewer than 3 tokens.
    """
    if not isinstance(block_size, int) or block_size < 3:
        raise ConfigError(f"block_size must be an integer >= 3 tokens ([BOS], a token, [EOS]), got {block_size!r}")
    return block_size - 2


def masked_examples(lines: RaggedArray, block_size: int, masking: Masking, unit: str = "lines") -> LabelledExamples:
    """A masked language model's examples of a text.

    Args:
        lines: the text, a row per line: its ids and EOS (a split of prepared text,
            :class:`~dotformer.data.prepared.PreparedText`, or :func:`encode_texts`); a line of EOS alone is empty and
            skipped (nothing to predict).
        block_size: most tokens of an example, BOS and EOS included. masking: the recipe.
        unit: ``"lines"``: each line an example (a longer line is cut into consecutive pieces, each an example);
            ``"blocks"``: the text as one stream, every line's ids followed by EOS (its line end, as a language
            model reads it), cut into consecutive blocks of ``block_size`` tokens (an EOS that ends a block is
            dropped: the example's own EOS ends it).

    Raises:
        ConfigError: a block size below 3, another unit.
    """
    room = check_block_size(block_size)
    sizes = lines.lengths - 1  # (N,) each line's ids without its EOS
    num_texts = int((sizes > 0).sum())
    if unit == "lines":
        pieces = (sizes + room - 1) // room  # (N,) the examples of each line (none for an empty one)
        line_of = np.repeat(np.arange(len(lines), dtype=np.int64), pieces)
        k = np.arange(int(pieces.sum()), dtype=np.int64) - np.repeat(np.cumsum(pieces) - pieces, pieces)
        starts = lines.offsets[:-1][line_of] + k * room
        size = np.minimum(room, sizes[line_of] - k * room)
        cut = int((sizes > room).sum())
    elif unit == "blocks":
        starts = np.arange(0, lines.num_tokens, room, dtype=np.int64)
        size = np.minimum(room, lines.num_tokens - starts)
        if len(size):
            size = size - (lines.ids[starts + size - 1] == EOS_ID)  # a block's last EOS: the example's EOS ends it
        starts, size, cut = starts[size > 0], size[size > 0], 0
    else:
        raise ConfigError(f"the unit of a masked language model's examples is lines or blocks, got {unit!r}")
    return LabelledExamples("masked", lines.ids, starts, size.astype(np.int64), masking=masking,
                            num_texts=num_texts, cut=cut)  # fmt: skip


def labelled_examples(texts: LabelledArrays, block_size: int) -> LabelledExamples:
    """A classifier's examples (``texts.labels``: one label id per text) or a tagger's (``texts.tags``: a label id
    per token): each text's ``[BOS] ids [EOS]``, cut to ``block_size`` tokens as BERT truncates (a tagger's later
    words then go unlabelled), counted.

    Raises:
        ConfigError: a block size below 3. DataError: texts with neither kind of labels.
    """
    room = check_block_size(block_size)
    lengths = texts.text.lengths
    starts, sizes = texts.text.offsets[:-1], np.minimum(lengths, room)
    cut = int((lengths > room).sum())
    if texts.labels is not None:
        return LabelledExamples("sequence", texts.text.ids, starts, sizes, labels=texts.labels,
                                num_texts=len(texts), cut=cut)  # fmt: skip
    if texts.tags is None:
        raise DataError(f"{texts.text.name}: texts without labels")
    return LabelledExamples("token", texts.text.ids, starts, sizes, tags=texts.tags.ids, num_texts=len(texts), cut=cut)


def encode_texts(texts: Sequence[str], tokenizer: Tokenizer, eos: bool = False) -> RaggedArray:
    """Texts encoded in memory as prepared data holds them: a row per text, its ids (a classifier's texts), and
    EOS with ``eos`` (a masked language model's lines, what :func:`masked_examples` reads)."""
    encoded = tokenizer.encode_arrays(list(texts))
    encoded = encoded.with_eos() if eos else encoded
    offsets = np.concatenate([[0], np.cumsum(encoded.lengths)]).astype(np.int64)
    return RaggedArray(encoded.ids, offsets, "texts")


@dataclass(frozen=True)
class LabelledBatch(TensorBatch):
    """A padded batch for an encoder (module docstring).

    Attributes:
        src: (B, S) int64, ``[BOS] ids [EOS]`` right-padded with PAD (masked tokens replaced for the masked kind).
        labels: (B, S) int64 per-position labels, :data:`IGNORE_LABEL` where none (masked, token kinds), or (B,)
            one label per text (sequence kind; IGNORE: a row not scored).
        num_src_tokens: real tokens of ``src``, BOS and EOS included.
        num_tgt_tokens: the labels scored: the loss normaliser (what the training step counts as its target tokens).
        indices: (B,) position of each row's example among the sampler's examples.
    """

    src: Tensor
    labels: Tensor
    num_src_tokens: int
    num_tgt_tokens: int
    indices: list[int]

    @property
    def scored(self) -> Tensor:
        """``labels``' shape, bool: True where a label is scored (a position, or a text)."""
        return self.labels != IGNORE_LABEL

    def without_targets(self) -> LabelledBatch:
        """The batch with nothing scored: a rank's stand-in in the last, short step of an epoch budget (the forward
        and backward run, the loss and gradient are zero)."""
        return dataclasses.replace(self, labels=torch.full_like(self.labels, IGNORE_LABEL), num_tgt_tokens=0)


def collate_labelled(
    data: LabelledExamples, indices: Sequence[int] | np.ndarray, seed: int = 0, epoch: int = 0
) -> LabelledBatch:
    """The :class:`LabelledBatch` of the examples ``indices`` of ``data``, reading only their rows of the arrays
    (masking the masked kind's with ``(seed, epoch, example)``: module docstring).

    Raises:
        DataError: no indices.
    """
    rows = np.asarray(indices, dtype=np.int64)
    if len(rows) == 0:
        raise DataError("cannot collate an empty batch")
    starts, sizes = data.starts[rows], data.sizes[rows]  # (B,), (B,)
    B, S, every = len(rows), int(sizes.max()) + 2, np.arange(len(rows))
    src = np.full((B, S), PAD_ID, dtype=np.int64)  # (B, S): [BOS] ids [EOS], padded
    src[:, 0] = BOS_ID
    src[:, 1 : S - 1] = gather(data.ids, starts, sizes)
    src[every, sizes + 1] = EOS_ID
    if data.kind == "sequence":
        assert data.labels is not None
        labels = np.asarray(data.labels[rows], dtype=np.int64)  # (B,)
    else:
        labels = np.full((B, S), IGNORE_LABEL, dtype=np.int64)  # (B, S): BOS, EOS and PAD have none
        if data.kind == "token":
            assert data.tags is not None
            labels[:, 1 : S - 1] = gather(data.tags, starts, sizes, fill=IGNORE_LABEL)
        else:
            assert data.masking is not None
            for b, index in enumerate(rows.tolist()):
                n = int(sizes[b]) + 2
                rng = np.random.default_rng([seed, epoch, index])
                src[b, :n], labels[b, :n] = mask_tokens(src[b, :n], data.masking, rng)
    scored = int((labels != IGNORE_LABEL).sum())
    return LabelledBatch(torch.from_numpy(src), torch.from_numpy(labels), int(sizes.sum()) + 2 * B, scored,
                         rows.tolist())  # fmt: skip


class LabelledSampler(BatchSampler):
    """Token-budget batches of an encoder's examples: :class:`~dotformer.data.batch.batching.BatchSampler`'s plan from
    the lengths, order, shards and resume, collated as :class:`LabelledBatch` es (masked anew each epoch for the
    masked kind).

    Args:
        examples: the examples (:class:`LabelledExamples`). max_tokens, seed, shuffle, rank, world_size: as
            :class:`BatchSampler`.

    Raises:
        ConfigError, DataError: as :class:`BatchSampler`.
    """

    examples: LabelledExamples

    def describe_length(self, i: int) -> str:
        return f"[BOS] + {int(self.examples.sizes[i])} tokens + [EOS]"

    def make_batch(self, indices: Sequence[int] | np.ndarray, epoch: int) -> LabelledBatch:  # type: ignore[override]
        """The batch of the examples ``indices`` of ``epoch`` (masked as epoch 0 in evaluation)."""
        return collate_labelled(self.examples, indices, self.seed, epoch)

    def data_line(self, valid: int, src: Tokenizer, tgt: Tokenizer, objective: str, max_tokens: int) -> list[str]:
        """Examples and the objective, the vocabulary, the size of a batch."""
        return [f"{len(self.examples):,} train / {valid:,} valid examples, objective {objective}",
                f"vocabulary {tgt.vocab_size:,}", f"<= {max_tokens:,} tokens"]  # fmt: skip

    def padded_sides(self) -> tuple[np.ndarray, ...]:
        """The inputs alone: each example's ``[BOS] ids [EOS]``."""
        return (self.examples.lengths,)
