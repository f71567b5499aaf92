"""Batches by token count, with length bucketing, a (seed, epoch)-pure order, and sharding across ranks.

The paper (§5.1): "Sentence pairs were batched together by approximate sequence length. Each training batch
contained a set of sentence pairs containing approximately 25000 source tokens and 25000 target tokens."
:class:`BatchSampler` does the same with a strict budget: a batch of B examples padded to length L costs B·L
tokens, where an example's length is the longer of its source (+EOS) and target (+BOS or +EOS), and
B·L <= ``max_tokens``. Examples are shuffled, cut into large chunks, sorted by length within each chunk (so
neighbours have similar lengths and little padding), packed greedily, and the batches are shuffled.

The sampler reads only the lengths (a :class:`~dotformer.data.prepared.arrays.PairArrays` of mapped token arrays, or a
list of :class:`EncodedPair` made into arrays in memory); an epoch's order is a :class:`BatchPlan` of index arrays, and
a batch is collated when it is taken, reading only its own rows (:func:`collate_rows`). The padding of an epoch is
counted from the lengths (:meth:`BatchSampler.padding_fraction`), without collating it.

Shape legend (see :mod:`dotformer.attention`): B batch, S source length, T target length. Tensors are right-padded
with ``PAD_ID`` (0); ``src`` ends each row with EOS, ``tgt_in`` starts with BOS (teacher forcing input), and
``tgt_out`` ends with EOS (the labels): ``tgt_in[:, 1:] == tgt_out[:, :-1]`` on real tokens.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Protocol, TypeVar

import numpy as np
import torch
from torch import Tensor

from dotformer.data.prepared.arrays import PairArrays, RaggedArray
from dotformer.data.read.types import Pair
from dotformer.data.tokenize.tokenizers import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from dotformer.errors import ConfigError, DataError

_Batch = TypeVar("_Batch", bound="TensorBatch")


class EncodedPair(NamedTuple):
    """One example as token ids, without BOS/EOS (batching adds them)."""

    src: list[int]  # source token ids
    tgt: list[int]  # target token ids


class Examples(Protocol):
    """What a :class:`BatchSampler` plans batches of: N examples and the padded length each needs (an encoder's
    :class:`~dotformer.data.batch.labelled.LabelledExamples`; pairs are
    :class:`~dotformer.data.prepared.arrays.PairArrays`)."""

    def __len__(self) -> int: ...

    @property
    def lengths(self) -> np.ndarray: ...


class SamplerPosition(NamedTuple):
    """Where training stands in the data: the epoch, and the index of the next batch of this rank in it."""

    epoch: int
    index: int


def example_length(example: EncodedPair) -> int:
    """The padded length an example needs: max(len(src) + 1, len(tgt) + 1) (EOS on the source, BOS/EOS on the
    target)."""
    return max(len(example.src), len(example.tgt)) + 1


def encode_pairs(pairs: Sequence[Pair], src_tok: Tokenizer, tgt_tok: Tokenizer) -> list[EncodedPair]:
    """Token ids of every pair: ``EncodedPair(src_tok.encode(source), tgt_tok.encode(target))``, in order."""
    sources = src_tok.encode_batch([pair.source for pair in pairs])
    targets = tgt_tok.encode_batch([pair.target for pair in pairs])
    return [EncodedPair(src, tgt) for src, tgt in zip(sources, targets, strict=True)]


class TensorBatch:
    """What every batch has (:class:`Batch`, :class:`~dotformer.data.batch.labelled.LabelledBatch`): ``src`` (B, S)
    first, and its tensors moved to a device together."""

    src: Tensor

    @property
    def size(self) -> int:
        """B, the number of examples."""
        return int(self.src.shape[0])

    def to(self: _Batch, device: torch.device | str, non_blocking: bool = False) -> _Batch:
        """The same batch with its tensors on ``device``."""
        values = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}  # type: ignore[arg-type]
        moved = {name: v.to(device, non_blocking=non_blocking) for name, v in values.items() if torch.is_tensor(v)}
        return dataclasses.replace(self, **moved)  # type: ignore[type-var]


@dataclass(frozen=True)
class Batch(TensorBatch):
    """A padded batch for teacher-forced training (paper §3: the decoder sees the target shifted right).

    Attributes:
        src: (B, S) int64, source ids + EOS, right-padded with PAD.
        tgt_in: (B, T) int64, BOS + target ids, right-padded (the decoder's input).
        tgt_out: (B, T) int64, target ids + EOS, right-padded (the labels; PAD positions are ignored by the loss).
        num_src_tokens: real source tokens, EOS included.
        num_tgt_tokens: real target labels, EOS included (the loss normaliser).
        indices: (B,) position of each row's example in the sampler's example list (to restore input order).
    """

    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    num_src_tokens: int
    num_tgt_tokens: int
    indices: list[int]

    @property
    def src_mask(self) -> Tensor:
        """(B, 1, 1, S) bool, True at real source tokens: the key-padding mask the model builds itself from ``src``
        (``Transformer.source_mask``); kept for callers that read it, computed on demand."""
        return (self.src != PAD_ID)[:, None, None, :]  # (B, 1, 1, S)

    def without_targets(self) -> Batch:
        """The batch with nothing scored (every label PAD): a rank's stand-in in the last, short step of an epoch
        budget (the forward and backward run, the loss and gradient are zero)."""
        return dataclasses.replace(self, tgt_out=torch.full_like(self.tgt_out, PAD_ID), num_tgt_tokens=0)


def collate(examples: Sequence[EncodedPair], indices: Sequence[int] | None = None) -> Batch:
    """Pad examples into a :class:`Batch` (shapes in its docstring): :func:`collate_rows` of all of them.

    Args:
        examples: B >= 1 encoded pairs.
        indices: their positions in the caller's list (default 0..B-1).

    Raises:
        DataError: no examples.
    """
    if not examples:
        raise DataError("cannot collate an empty batch")
    arrays = PairArrays.from_rows([example.src for example in examples], [example.tgt for example in examples])
    batch = collate_rows(arrays, np.arange(len(examples)))
    return batch if indices is None else dataclasses.replace(batch, indices=[int(i) for i in indices])


def collate_rows(examples: PairArrays, indices: Sequence[int] | np.ndarray) -> Batch:
    """The :class:`Batch` of the examples ``indices`` of ``examples``: only their rows of the (mapped) arrays are read.

    Raises:
        DataError: no indices.
    """
    rows = np.asarray(indices, dtype=np.int64)
    if len(rows) == 0:
        raise DataError("cannot collate an empty batch")
    src, src_len = _rows(examples.src, rows)  # (B, max source length), (B,)
    tgt, tgt_len = _rows(examples.tgt, rows)
    B, every = len(rows), np.arange(len(rows))
    src_ids = np.full((B, src.shape[1] + 1), PAD_ID, dtype=np.int64)  # (B, S): ids + EOS
    src_ids[:, :-1] = src
    src_ids[every, src_len] = EOS_ID
    tgt_in = np.full((B, tgt.shape[1] + 1), PAD_ID, dtype=np.int64)  # (B, T): BOS + ids
    tgt_in[:, 0] = BOS_ID
    tgt_in[:, 1:] = tgt
    tgt_out = np.full_like(tgt_in, PAD_ID)  # (B, T): ids + EOS
    tgt_out[:, :-1] = tgt
    tgt_out[every, tgt_len] = EOS_ID
    return Batch(
        src=torch.from_numpy(src_ids),
        tgt_in=torch.from_numpy(tgt_in),
        tgt_out=torch.from_numpy(tgt_out),
        num_src_tokens=int(src_len.sum()) + B,
        num_tgt_tokens=int(tgt_len.sum()) + B,
        indices=rows.tolist(),
    )


def _rows(array: RaggedArray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``array`` right-padded with PAD into (B, L) int64, L the longest, and their lengths (B,)."""
    starts, lengths = array.offsets[rows], array.offsets[rows + 1] - array.offsets[rows]
    return gather(array.ids, starts, lengths), lengths


def gather(ids: np.ndarray, starts: np.ndarray, lengths: np.ndarray, fill: int = PAD_ID) -> np.ndarray:
    """The pieces ``ids[starts[b] : starts[b] + lengths[b]]`` right-padded with ``fill`` into (B, L) int64, L the
    longest: only these ids of a mapped array are read."""
    starts, lengths = np.asarray(starts, dtype=np.int64), np.asarray(lengths, dtype=np.int64)
    out = np.full((len(starts), int(lengths.max(initial=0))), fill, dtype=np.int64)
    row_of = np.repeat(np.arange(len(starts)), lengths)
    column = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    out[row_of, column] = ids[np.repeat(starts, lengths) + column]
    return out


def padding_fraction(batches: Sequence[Batch]) -> float:
    """Share of PAD cells among all source and target cells: 1 - real / (Σ B·S + Σ B·T); 0.0 for no batches."""
    cells = sum(batch.src.numel() + batch.tgt_out.numel() for batch in batches)
    real = sum(batch.num_src_tokens + batch.num_tgt_tokens for batch in batches)
    return 1.0 - real / cells if cells else 0.0


@dataclass(frozen=True)
class BatchPlan:
    """The batches of an epoch as three index arrays (no list per batch): the packed batches one after another,
    where each begins, and the order they are taken in.

    Attributes:
        rows: (N,) int64, example indices (block numbers for a language model), batch after batch as packed.
        starts: (C + 1,) int64, packed batch c is ``rows[starts[c] : starts[c + 1]]``.
        order: (K,) int64, the packed batches in the order they are taken (a batch may come twice: ``"pad"``).
    """

    rows: np.ndarray
    starts: np.ndarray
    order: np.ndarray

    def __len__(self) -> int:
        """K, the batches taken."""
        return len(self.order)

    def __getitem__(self, i: int) -> np.ndarray:
        """The example indices of the i-th batch taken."""
        c = int(self.order[i])
        return self.rows[self.starts[c] : self.starts[c + 1]]

    def select(self, which: slice | np.ndarray) -> BatchPlan:
        """The plan of the batches ``order[which]`` (a rank's share: ``slice(rank, None, world_size)``)."""
        return dataclasses.replace(self, order=self.order[which])


class PlannedBatches(Sequence[Batch]):
    """The batches of a :class:`BatchPlan`, collated one at a time when read (validation holds no epoch of tensors).

    Args:
        sampler: the sampler whose ``make_batch`` collates them. plan: which batches. epoch: the plan's epoch.
    """

    def __init__(self, sampler: BatchSampler, plan: BatchPlan, epoch: int = 0) -> None:
        self.sampler, self.plan, self.epoch = sampler, plan, epoch

    def __len__(self) -> int:
        return len(self.plan)

    def __getitem__(self, i: int) -> Batch:  # type: ignore[override]
        if not -len(self) <= i < len(self):
            raise IndexError(f"batch {i} of {len(self)}")
        return self.sampler.make_batch(self.plan[i % len(self)], self.epoch)


def pack(lengths: np.ndarray, max_tokens: int) -> np.ndarray:
    """Greedy batches of examples sorted by length (ascending): where each batch begins, and the end, ((C + 1,) int64).

    A batch grows while (its size + 1) × the next length <= ``max_tokens`` (the next example is the longest so far):
    the batch starting at p holds the largest k with k · lengths[p + k - 1] <= max_tokens (at least one example).
    k · lengths[p + k - 1] grows with k, so k is found by a binary search; the loop runs once per batch.
    """
    starts, p, n = [0], 0, len(lengths)
    while p < n:
        width = min(n - p, max(1, max_tokens // int(lengths[p])))
        cost = lengths[p : p + width] * np.arange(1, width + 1)  # the cost of a batch of 1, 2, ... examples
        p += max(1, int(np.searchsorted(cost, max_tokens, side="right")))
        starts.append(p)
    return np.array(starts, dtype=np.int64)


def check_sampler_arguments(max_tokens: int, seed: int, rank: int, world_size: int, remainder: str) -> None:
    """The arguments every sampler of batches takes (:class:`BatchSampler`, and the language model's
    :class:`~dotformer.data.batch.blocks.BlockSampler`): a positive token budget, a non-negative seed, this process's
    shard ``0 <= rank < world_size``, and what becomes of the batches left over (``"pad"`` or ``"drop"``).

    Raises:
        ConfigError: the first argument out of range, named with its value.
    """
    if max_tokens <= 0:
        raise ConfigError(f"max_tokens must be positive, got {max_tokens}")
    if seed < 0:
        raise ConfigError(f"seed must be non-negative, got {seed}")
    if world_size <= 0 or not 0 <= rank < world_size:
        raise ConfigError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
    if remainder not in ("pad", "drop"):
        raise ConfigError(f"remainder must be 'pad' or 'drop', got {remainder!r}")


class BatchSampler:
    """Token-budget batches of ``examples``, length-bucketed, in an order that is a pure function of (seed, epoch).

    Per epoch: shuffle the examples with ``numpy.random.default_rng([seed, epoch])``, cut them into chunks of
    ``sort_chunk`` examples, sort each chunk by length, pack greedily while B·L <= ``max_tokens``, shuffle the
    batches, then give rank r the batches ``r, r + world_size, ...``. Without shuffling (evaluation), all examples
    are sorted by length and the batches keep that order.

    Every rank gets the same number of batches: when the batch count is not a multiple of ``world_size`` the
    remainder is padded by repeating the epoch's first batches (``remainder="pad"``, the default, so every example
    is seen at least once per epoch) or dropped (``remainder="drop"``; the dropped batches differ between epochs).

    Because ``batches(epoch)`` depends only on (seed, epoch) and the constructor arguments, a trainer resumes in
    the middle of an epoch by storing :class:`SamplerPosition` (epoch, index) via :meth:`state_dict` and calling
    ``iter_batches(epoch, start=index)``.

    Args:
        examples: the encoded pairs: arrays (memory-mapped by :mod:`dotformer.data.prepared`), or a list; or other
            :class:`Examples` that a subclass collates (an encoder's).
        max_tokens: the budget B·L per batch (L = longest example length in the batch, see :func:`example_length`).
        seed: non-negative seed of the order.
        shuffle: shuffle examples and batches (training) or sort by length and keep order (evaluation).
        rank, world_size: this process's shard (0 <= rank < world_size).
        max_len: drop examples longer than this (counted in ``num_filtered``); None keeps all.
        sort_chunk: examples sorted together by length; None sorts the whole epoch at once (fairseq style: least
            padding, least variety between epochs).
        remainder: ``"pad"`` or ``"drop"``, see above.

    Raises:
        ConfigError: an argument out of range.
        DataError: an example longer than ``max_tokens`` (never dropped silently: raise max_tokens or set
            max_len), or no examples left.
    """

    def __init__(
        self,
        examples: PairArrays | Sequence[EncodedPair] | Examples,
        max_tokens: int,
        seed: int = 0,
        shuffle: bool = True,
        rank: int = 0,
        world_size: int = 1,
        max_len: int | None = None,
        sort_chunk: int | None = 8192,
        remainder: Literal["pad", "drop"] = "pad",
    ) -> None:
        check_sampler_arguments(max_tokens, seed, rank, world_size, remainder)
        if max_len is not None and max_len <= 0:
            raise ConfigError(f"max_len must be positive or None, got {max_len}")
        if sort_chunk is not None and sort_chunk <= 0:
            raise ConfigError(f"sort_chunk must be positive or None, got {sort_chunk}")
        if isinstance(examples, Sequence):  # a list of EncodedPair, made into arrays in memory
            examples = PairArrays.from_rows([e.src for e in examples], [e.tgt for e in examples])
        self.examples: Any = examples
        self.max_tokens = max_tokens
        self.seed = seed
        self.shuffle = shuffle
        self.rank = rank
        self.world_size = world_size
        self.max_len = max_len
        self.sort_chunk = sort_chunk
        self.remainder = remainder
        lengths = examples.lengths  # (N,) int64: max(source, target) + 1, as example_length
        keep = np.arange(len(lengths)) if max_len is None else np.flatnonzero(lengths <= max_len)
        self.num_filtered = len(lengths) - len(keep)  # examples dropped by max_len
        if len(keep) == 0:
            raise DataError(f"no examples to batch ({len(lengths)} given, {self.num_filtered} longer than max_len)")
        too_long = keep[lengths[keep] > max_tokens]
        if len(too_long):
            first = int(too_long[0])
            raise DataError(
                f"{len(too_long)} example(s) need more than max_tokens={max_tokens} tokens, e.g. example {first} "
                f"with {int(lengths[first])} ({self.describe_length(first)}); raise max_tokens, or set max_len to "
                f"drop and count them"
            )
        self._lengths = lengths
        self._keep = keep
        self._fingerprint = self._make_fingerprint()

    def describe_length(self, i: int) -> str:
        """What example i's padded length is made of (for the message of an example longer than the budget)."""
        return f"source {len(self.examples.src[i])} + EOS, target {len(self.examples.tgt[i])} + BOS/EOS"

    def _make_fingerprint(self) -> str:
        """A hash of everything the batch order depends on (example lengths and the constructor arguments)."""
        digest = hashlib.sha256(self._lengths.tobytes())
        settings = (self.max_tokens, self.seed, self.shuffle, self.world_size, self.max_len, self.sort_chunk)
        digest.update(repr((settings, self.remainder)).encode())
        return digest.hexdigest()[:16]

    def global_plan(self, epoch: int) -> BatchPlan:
        """Every batch of the epoch, for all ranks, in order (before sharding): the :class:`BatchPlan` of the rule
        in the class docstring."""
        rng = np.random.default_rng([self.seed, epoch])
        lengths = self._lengths
        if self.shuffle:
            order = rng.permutation(self._keep)
            chunk = len(order) if self.sort_chunk is None else self.sort_chunk
        else:
            order, chunk = self._keep, len(self._keep)
        rows, starts = [], []
        for start in range(0, len(order), chunk):
            piece = order[start : start + chunk]
            piece = piece[np.argsort(lengths[piece], kind="stable")]  # ascending length: the last one is the longest
            starts.append(pack(lengths[piece], self.max_tokens)[:-1] + start)
            rows.append(piece)
        starts.append(np.array([len(order)]))
        count = sum(len(piece) for piece in starts) - 1
        batches = rng.permutation(count) if self.shuffle else np.arange(count)
        return BatchPlan(np.concatenate(rows), np.concatenate(starts), batches)

    def plan(self, epoch: int) -> BatchPlan:
        """This rank's batches of ``epoch``: a pure function of (seed, epoch), the lengths and the arguments.

        Raises:
            DataError: ``remainder="drop"`` leaves no batch for the ranks (fewer batches than ranks).
        """
        full = self.global_plan(epoch)
        count = len(full)
        if self.remainder == "pad":
            which = np.arange(math.ceil(count / self.world_size) * self.world_size) % count
        else:
            per_rank = count // self.world_size
            if per_rank == 0:
                raise DataError(f"{count} batches cannot be shared by {self.world_size} ranks with remainder='drop'")
            which = np.arange(per_rank * self.world_size)
        return full.select(which[self.rank :: self.world_size])

    def num_batches(self, epoch: int = 0) -> int:
        """How many batches this rank gets in ``epoch``."""
        return len(self.plan(epoch))

    def batches(self, epoch: int) -> list[Batch]:
        """This rank's batches of ``epoch``, collated (see :meth:`plan`)."""
        return list(self.iter_batches(epoch))

    def iter_batches(self, epoch: int, start: int = 0) -> Iterator[Batch]:
        """This rank's batches of ``epoch`` from position ``start``, collated one at a time (for resuming)."""
        plan = self.plan(epoch)
        for i in range(start, len(plan)):
            yield self.make_batch(plan[i], epoch)

    def make_batch(self, indices: Sequence[int] | np.ndarray, epoch: int) -> Batch:
        """The collated batch of the examples ``indices`` of ``epoch`` (one batch of :meth:`plan`)."""
        return collate_rows(self.examples, indices)

    reads_text = False  # whether its examples are running text, whose characters give bits per character

    def data_line(self, valid: int, src: Tokenizer, tgt: Tokenizer, objective: str, max_tokens: int) -> list[str]:
        """What the line before training says of this sampler's examples: their counts (``valid`` validation
        examples), the vocabulary, the size of a batch."""
        return [f"{len(self.examples):,} train / {valid:,} valid pairs",
                f"vocabulary {src.vocab_size:,} -> {tgt.vocab_size:,}", f"<= {max_tokens:,} tokens"]  # fmt: skip

    def padded_sides(self) -> tuple[np.ndarray, ...]:
        """Per tensor of a batch, (N,) int64: the padded length each example needs in it (source + EOS, target +
        BOS/EOS)."""
        return self.examples.src.lengths + 1, self.examples.tgt.lengths + 1

    def padding_fraction(self, plan: BatchPlan) -> float:
        """The :func:`padding_fraction` of the batches of ``plan``, counted from the lengths (nothing is collated):
        a batch of B examples has B·L cells per tensor, L its longest example there (:meth:`padded_sides`)."""
        if len(plan) == 0:
            return 0.0
        sides, first = [side[plan.rows] for side in self.padded_sides()], plan.starts[:-1]
        cells = np.diff(plan.starts) * sum(np.maximum.reduceat(side, first) for side in sides)
        real = sum(np.add.reduceat(side, first) for side in sides)
        total = int(cells[plan.order].sum())
        return 1.0 - int(real[plan.order].sum()) / total if total else 0.0

    def state_dict(self, position: SamplerPosition) -> dict[str, Any]:
        """What a checkpoint stores to resume at ``position``: the position and a fingerprint of the data."""
        return {"epoch": int(position.epoch), "index": int(position.index), "fingerprint": self._fingerprint}

    def load_state_dict(self, state: dict[str, Any]) -> SamplerPosition:
        """The position stored by :meth:`state_dict`.

        Raises:
            DataError: the state was saved for other data or other sampler settings (the order would differ).
        """
        if state.get("fingerprint") != self._fingerprint:
            raise DataError(
                "the saved data position belongs to other examples or sampler settings (fingerprint "
                f"{state.get('fingerprint')} != {self._fingerprint}); resume with the same data, seed, max_tokens "
                "and world size"
            )
        return SamplerPosition(int(state["epoch"]), int(state["index"]))


def sampler_for(
    examples: Any, max_tokens: int, seed: int = 0, shuffle: bool = True, rank: int = 0, world_size: int = 1
) -> BatchSampler:
    """The sampler of a training loop's examples: their own (``examples.sampler``: a language model's text in
    blocks, an encoder's examples with their labels), else a :class:`BatchSampler` of pairs (arrays or a list).

    Raises:
        ConfigError, DataError: as the sampler's constructor.
    """
    own = getattr(examples, "sampler", None)
    if own is None:
        return BatchSampler(examples, max_tokens, seed, shuffle, rank, world_size)
    return own(max_tokens, seed, shuffle, rank, world_size)  # type: ignore[no-any-return]
