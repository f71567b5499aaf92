"""An encoder's examples and batches: texts to be read whole, each with what the encoder should say about it.

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

An :class:`EncoderExample` keeps ``src`` = ``[BOS] ids`` (the encoder's input without its EOS) and ``tgt`` = its
labels, the two fields of an :class:`~dotformer.data.batching.EncodedPair`: so :class:`LabelledSampler` is a
:class:`~dotformer.data.batching.BatchSampler` (token-budget batches, length-bucketed, a (seed, epoch)-pure order,
shards, resume) that collates :class:`LabelledBatch` es instead of pairs.

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
from typing import Literal, NamedTuple

import numpy as np
import torch
from torch import Tensor

from dotformer.data.batching import BatchPlan, BatchSampler
from dotformer.data.tokenizers import BOS_ID, EOS_ID, NUM_SPECIAL, PAD_ID, UNK_ID, Tokenizer
from dotformer.errors import ConfigError, DataError

IGNORE_LABEL = -100  # a position the loss does not score (PyTorch's and HF's ignore_index)
LabelKind = Literal["masked", "sequence", "token"]


class EncoderExample(NamedTuple):
    """One text as the encoder reads it, and its labels (the fields of an EncodedPair: see the module docstring).

    Attributes:
        src: ``[BOS] + ids``; the batch appends EOS.
        tgt: its labels: one per position of ``src`` (token kind; :data:`IGNORE_LABEL` where none), one label id
            (sequence kind), or none (masked kind).
    """

    src: list[int]
    tgt: list[int]


@dataclass(frozen=True)
class Masking:
    """BERT's masking recipe (module docstring).

    Attributes:
        mask_id: the mask token's id (:attr:`~dotformer.data.tokenizers.Tokenizer.mask_id`).
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


def mask_tokens(ids: Sequence[int], masking: Masking, rng: np.random.Generator) -> tuple[list[int], list[int]]:
    """BERT's masking of one example (module docstring).

    Args:
        ids: the encoder's input, ``[BOS] ids [EOS]`` (BOS, EOS and PAD are never chosen).
        masking: the recipe. rng: the example's generator.

    Returns:
        (inputs, labels): ``ids`` with the chosen tokens replaced, and the original token at each chosen position,
        :data:`IGNORE_LABEL` elsewhere.
    """
    inputs, labels = list(ids), [IGNORE_LABEL] * len(ids)
    maskable = [i for i, token in enumerate(ids) if token not in (PAD_ID, BOS_ID, EOS_ID)]
    if not maskable:
        return inputs, labels
    count = max(1, round(len(maskable) * masking.probability))
    chosen = rng.choice(len(maskable), size=count, replace=False)  # positions in maskable
    draws = rng.random(count)  # < mask_share: the mask token; < mask_share + random_share: a random token
    random_ids = rng.integers(NUM_SPECIAL, masking.vocab_size, size=count)
    for k, position in enumerate(chosen.tolist()):
        i = maskable[position]
        labels[i] = inputs[i]
        if draws[k] < masking.mask_share:
            inputs[i] = masking.mask_id
        elif draws[k] < masking.mask_share + masking.random_share:
            inputs[i] = int(random_ids[k])
    return inputs, labels


@dataclass(frozen=True)
class LabelledExamples:
    """The encoded examples of an encoder task, what a :class:`LabelledSampler` batches.

    Attributes:
        examples: the :class:`EncoderExample` s.
        kind: "masked", "sequence" or "token" (module docstring).
        masking: the masked kind's recipe (None for the others).
        num_texts: the texts (lines, sentences) they were made from.
    """

    examples: list[EncoderExample]
    kind: LabelKind
    masking: Masking | None = None
    num_texts: int = 0

    def __len__(self) -> int:
        return len(self.examples)


@dataclass(frozen=True)
class LabelledBatch:
    """A padded batch for an encoder (module docstring).

    Attributes:
        src: (B, S) int64, ``[BOS] ids [EOS]`` right-padded with PAD (masked tokens replaced for the masked kind).
        labels: (B, S) int64 per-position labels, :data:`IGNORE_LABEL` where none (masked, token kinds), or (B,)
            one label per text (sequence kind; IGNORE: a row not scored).
        num_src_tokens: real tokens of ``src``, BOS and EOS included.
        num_tgt_tokens: the labels scored: the loss normaliser (what the training step counts as its target tokens).
        indices: (B,) position of each row's example in the sampler's list.
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

    @property
    def size(self) -> int:
        """B, the number of examples."""
        return int(self.src.shape[0])

    def to(self, device: torch.device | str, non_blocking: bool = False) -> LabelledBatch:
        """The same batch with its tensors on ``device``."""
        return dataclasses.replace(
            self,
            src=self.src.to(device, non_blocking=non_blocking),
            labels=self.labels.to(device, non_blocking=non_blocking),
        )

    def without_targets(self) -> LabelledBatch:
        """The batch with nothing scored: a rank's stand-in in the last, short step of an epoch budget (the forward
        and backward run, the loss and gradient are zero)."""
        return dataclasses.replace(self, labels=torch.full_like(self.labels, IGNORE_LABEL), num_tgt_tokens=0)


def collate_labelled(
    examples: Sequence[EncoderExample],
    indices: Sequence[int],
    data: LabelledExamples,
    seed: int = 0,
    epoch: int = 0,
) -> LabelledBatch:
    """Pad examples into a :class:`LabelledBatch` (masking the masked kind's: module docstring).

    Raises:
        DataError: no examples.
    """
    if not examples:
        raise DataError("cannot collate an empty batch")
    S = max(len(example.src) for example in examples) + 1  # + EOS
    src_rows, label_rows = [], []
    for example, index in zip(examples, indices, strict=True):
        ids = [*example.src, EOS_ID]
        if data.kind == "masked":
            assert data.masking is not None
            ids, labels = mask_tokens(ids, data.masking, np.random.default_rng([seed, epoch, int(index)]))
        elif data.kind == "token":
            labels = [*example.tgt, IGNORE_LABEL]  # EOS has no label
        else:
            labels = list(example.tgt)
        pad = S - len(ids)
        src_rows.append(ids + [PAD_ID] * pad)
        label_rows.append(labels if data.kind == "sequence" else labels + [IGNORE_LABEL] * pad)
    src = torch.tensor(src_rows, dtype=torch.int64)  # (B, S)
    labels = torch.tensor(label_rows, dtype=torch.int64)  # (B, S), or (B, 1) for the sequence kind
    if data.kind == "sequence":
        labels = labels[:, 0]  # (B,)
    scored = int((labels != IGNORE_LABEL).sum())
    return LabelledBatch(src, labels, int((src != PAD_ID).sum()), scored, [int(i) for i in indices])


class LabelledSampler(BatchSampler):
    """Token-budget batches of an encoder's examples: :class:`~dotformer.data.batching.BatchSampler`'s order,
    shards and resume, collated as :class:`LabelledBatch` es (masked anew each epoch for the masked kind).

    Args:
        data: the examples. max_tokens, seed, shuffle, rank, world_size: as :class:`BatchSampler`.

    Raises:
        ConfigError, DataError: as :class:`BatchSampler`.
    """

    def __init__(
        self,
        data: LabelledExamples,
        max_tokens: int,
        seed: int = 0,
        shuffle: bool = True,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        super().__init__(data.examples, max_tokens, seed, shuffle, rank, world_size)
        self.data = data

    def make_batch(self, indices: Sequence[int] | np.ndarray, epoch: int) -> LabelledBatch:  # type: ignore[override]
        """The batch of the examples ``indices`` of ``epoch`` (masked as epoch 0 in evaluation)."""
        rows = [int(i) for i in indices]
        return collate_labelled([self.data.examples[i] for i in rows], rows, self.data, self.seed, epoch)

    def padding_fraction(self, plan: BatchPlan) -> float:
        """Share of PAD cells among the inputs of the batches of ``plan``, counted from the lengths: a batch of B
        examples has B·S cells, S its longest ``[BOS] ids`` + EOS."""
        if len(plan) == 0:
            return 0.0
        lengths = (self.examples.src.lengths + 1)[plan.rows]
        first = plan.starts[:-1]
        cells = np.diff(plan.starts) * np.maximum.reduceat(lengths, first)
        total = int(cells[plan.order].sum())
        return 1.0 - int(np.add.reduceat(lengths, first)[plan.order].sum()) / total if total else 0.0


# -- texts to examples -------------------------------------------------------------------------------------------------


class Encoded(NamedTuple):
    """Examples and what encoding them said.

    Attributes:
        examples: the :class:`LabelledExamples`.
        cut: texts longer than an example holds (cut into pieces for the masked kind; cut short for the others).
        unknown: tokens read as ``<unk>``.
    """

    examples: LabelledExamples
    cut: int
    unknown: int


def check_block_size(block_size: int) -> int:
    """The most ids an example holds besides BOS and EOS.

    Raises:
        ConfigError: a block of fewer than 3 tokens.
    """
    if not isinstance(block_size, int) or block_size < 3:
        raise ConfigError(f"block_size must be an integer >= 3 tokens ([BOS], a token, [EOS]), got {block_size!r}")
    return block_size - 2


def masked_examples(
    lines: Sequence[str], tokenizer: Tokenizer, block_size: int, masking: Masking, unit: str = "lines"
) -> Encoded:
    """A masked language model's examples of a text.

    Args:
        lines: the text's lines (empty ones are skipped: nothing to predict).
        tokenizer: its vocabulary. block_size: most tokens of an example, BOS and EOS included.
        masking: the recipe. unit: ``"lines"``: each line an example (a longer line is cut into consecutive
            pieces, each an example); ``"blocks"``: the text as one stream, every line's ids followed by EOS (its
            line end, as a language model reads it), cut into consecutive blocks of ``block_size`` tokens.
    """
    room = check_block_size(block_size)
    encoded = tokenizer.encode_batch([line for line in lines if line.strip()])
    unknown = sum(ids.count(UNK_ID) for ids in encoded)
    if unit == "blocks":
        stream = [token for ids in encoded for token in (*ids, EOS_ID)]
        pieces = [stream[i : i + room] for i in range(0, len(stream), room)]
        pieces = [piece[:-1] if piece[-1] == EOS_ID else piece for piece in pieces]  # the batch's EOS ends it
        cut = 0
    elif unit == "lines":
        pieces = [ids[i : i + room] for ids in encoded for i in range(0, max(len(ids), 1), room)]
        cut = sum(len(ids) > room for ids in encoded)
    else:
        raise ConfigError(f"the unit of a masked language model's examples is lines or blocks, got {unit!r}")
    examples = [EncoderExample([BOS_ID, *piece], []) for piece in pieces if piece]
    return Encoded(LabelledExamples(examples, "masked", masking, len(encoded)), cut, unknown)


def sequence_examples(texts: Sequence[str], labels: Sequence[int], tokenizer: Tokenizer, block_size: int) -> Encoded:
    """A classifier's examples: each text's ``[BOS] ids`` (cut to ``block_size`` tokens with BOS and EOS, as BERT
    truncates, and counted) and its label id."""
    room = check_block_size(block_size)
    encoded = tokenizer.encode_batch(list(texts))
    examples = [EncoderExample([BOS_ID, *ids[:room]], [int(label)]) for ids, label in zip(encoded, labels, strict=True)]
    cut = sum(len(ids) > room for ids in encoded)
    unknown = sum(ids.count(UNK_ID) for ids in encoded)
    return Encoded(LabelledExamples(examples, "sequence", None, len(texts)), cut, unknown)


class WordPieces:
    """The tokens of whitespace-separated words, and which of them carries each word's label.

    A word is encoded as it reads inside its text: the first alone, each later one after a space (``" word"``,
    as byte-level BPE and sentencepiece read a word within a sentence; a char tokenizer reads the space as its own
    token, a WordPiece vocabulary drops it). A word's labelled token is its first token that is not whitespace.

    Args:
        tokenizer: the vocabulary.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self._blank: dict[int, bool] = {}

    def blank(self, index: int) -> bool:
        """Whether token ``index`` stands for whitespace only (never true of <unk>)."""
        if index not in self._blank:
            self._blank[index] = index != UNK_ID and not self.tokenizer.decode([index]).strip()
        return self._blank[index]

    def encode(self, words: Sequence[str]) -> tuple[list[int], list[list[int]]]:
        """(ids, per word the positions in ``ids`` of its non-whitespace tokens, the first one labelled).

        Raises:
            DataError: a word that encodes to whitespace only.
        """
        ids: list[int] = []
        positions: list[list[int]] = []
        pieces = self.tokenizer.encode_batch([word if i == 0 else f" {word}" for i, word in enumerate(words)])
        for word, word_ids in zip(words, pieces, strict=True):
            mine = [len(ids) + k for k, index in enumerate(word_ids) if not self.blank(index)]
            if not mine:
                raise DataError(f"the word {word!r} encodes to whitespace only")
            positions.append(mine)
            ids.extend(word_ids)
        return ids, positions


def token_examples(
    sentences: Sequence[Sequence[str]],
    tags: Sequence[Sequence[int]],
    tokenizer: Tokenizer,
    block_size: int,
    subtokens: str = "first",
) -> Encoded:
    """A tagger's examples: each sentence's words encoded (:class:`WordPieces`), each word's label id on its first
    token (``subtokens="first"``, the standard way) or on all its tokens (``"all"``); a sentence longer than
    ``block_size`` tokens with BOS and EOS is cut there (its later words go unlabelled, counted)."""
    room = check_block_size(block_size)
    pieces = WordPieces(tokenizer)
    examples, cut, unknown = [], 0, 0
    for words, word_tags in zip(sentences, tags, strict=True):
        ids, positions = pieces.encode(words)
        labels = [IGNORE_LABEL] * len(ids)
        for tag, where in zip(word_tags, positions, strict=True):
            for position in where if subtokens == "all" else where[:1]:
                labels[position] = int(tag)
        cut += len(ids) > room
        unknown += ids.count(UNK_ID)
        examples.append(EncoderExample([BOS_ID, *ids[:room]], [IGNORE_LABEL, *labels[:room]]))
    return Encoded(LabelledExamples(examples, "token", None, len(sentences)), cut, unknown)


__all__ = [
    "IGNORE_LABEL",
    "Encoded",
    "EncoderExample",
    "LabelledBatch",
    "LabelledExamples",
    "LabelledSampler",
    "Masking",
    "WordPieces",
    "check_block_size",
    "collate_labelled",
    "mask_tokens",
    "masked_examples",
    "sequence_examples",
    "token_examples",
]
