"""Batches by token count, with length bucketing, a (seed, epoch)-pure order, and sharding across ranks.

The paper (§5.1): "Sentence pairs were batched together by approximate sequence length. Each training batch
contained a set of sentence pairs containing approximately 25000 source tokens and 25000 target tokens."
:class:`BatchSampler` does the same with a strict budget: a batch of B examples padded to length L costs B·L
tokens, where an example's length is the longer of its source (+EOS) and target (+BOS or +EOS), and
B·L <= ``max_tokens``. Examples are shuffled, cut into large chunks, sorted by length within each chunk (so
neighbours have similar lengths and little padding), packed greedily, and the batches are shuffled.

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
from typing import Any, Literal, NamedTuple

import numpy as np
import torch
from torch import Tensor

from dotformer.data.tokenizers import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from dotformer.data.types import Pair
from dotformer.errors import ConfigError, DataError


class EncodedPair(NamedTuple):
    """One example as token ids, without BOS/EOS (batching adds them)."""

    src: list[int]  # source token ids
    tgt: list[int]  # target token ids


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


@dataclass(frozen=True)
class Batch:
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

    @property
    def size(self) -> int:
        """B, the number of examples."""
        return int(self.src.shape[0])

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """The same batch with its tensors on ``device``."""
        return dataclasses.replace(
            self,
            src=self.src.to(device, non_blocking=non_blocking),
            tgt_in=self.tgt_in.to(device, non_blocking=non_blocking),
            tgt_out=self.tgt_out.to(device, non_blocking=non_blocking),
        )


def collate(examples: Sequence[EncodedPair], indices: Sequence[int] | None = None) -> Batch:
    """Pad examples into a :class:`Batch` (shapes in its docstring).

    Args:
        examples: B >= 1 encoded pairs.
        indices: their positions in the caller's list (default 0..B-1).

    Raises:
        DataError: no examples.
    """
    if not examples:
        raise DataError("cannot collate an empty batch")
    src_len = max(len(example.src) for example in examples) + 1  # S
    tgt_len = max(len(example.tgt) for example in examples) + 1  # T
    src_rows, tgt_in_rows, tgt_out_rows = [], [], []
    for example in examples:
        src_rows.append([*example.src, EOS_ID] + [PAD_ID] * (src_len - len(example.src) - 1))
        tgt_pad = [PAD_ID] * (tgt_len - len(example.tgt) - 1)
        tgt_in_rows.append([BOS_ID, *example.tgt, *tgt_pad])
        tgt_out_rows.append([*example.tgt, EOS_ID, *tgt_pad])
    src = torch.tensor(src_rows, dtype=torch.int64)  # (B, S)
    return Batch(
        src=src,
        tgt_in=torch.tensor(tgt_in_rows, dtype=torch.int64),  # (B, T)
        tgt_out=torch.tensor(tgt_out_rows, dtype=torch.int64),  # (B, T)
        num_src_tokens=sum(len(example.src) + 1 for example in examples),
        num_tgt_tokens=sum(len(example.tgt) + 1 for example in examples),
        indices=list(range(len(examples))) if indices is None else [int(i) for i in indices],
    )


def padding_fraction(batches: Sequence[Batch]) -> float:
    """Share of PAD cells among all source and target cells: 1 - real / (Σ B·S + Σ B·T); 0.0 for no batches."""
    cells = sum(batch.src.numel() + batch.tgt_out.numel() for batch in batches)
    real = sum(batch.num_src_tokens + batch.num_tgt_tokens for batch in batches)
    return 1.0 - real / cells if cells else 0.0


def check_sampler_arguments(max_tokens: int, seed: int, rank: int, world_size: int, remainder: str) -> None:
    """The arguments every sampler of batches takes (:class:`BatchSampler`, and the language model's
    :class:`~dotformer.data.blocks.BlockSampler`): a positive token budget, a non-negative seed, this process's
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
        examples: the encoded pairs.
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
        examples: Sequence[EncodedPair],
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
        self.examples = list(examples)
        self.max_tokens = max_tokens
        self.seed = seed
        self.shuffle = shuffle
        self.rank = rank
        self.world_size = world_size
        self.max_len = max_len
        self.sort_chunk = sort_chunk
        self.remainder = remainder
        lengths = np.array([example_length(example) for example in self.examples], dtype=np.int64)
        keep = np.arange(len(lengths)) if max_len is None else np.flatnonzero(lengths <= max_len)
        self.num_filtered = len(lengths) - len(keep)  # examples dropped by max_len
        if len(keep) == 0:
            raise DataError(f"no examples to batch ({len(lengths)} given, {self.num_filtered} longer than max_len)")
        too_long = keep[lengths[keep] > max_tokens]
        if len(too_long):
            first = int(too_long[0])
            raise DataError(
                f"{len(too_long)} example(s) need more than max_tokens={max_tokens} tokens, e.g. example {first} "
                f"with {int(lengths[first])} (source {len(self.examples[first].src)} + EOS, target "
                f"{len(self.examples[first].tgt)} + BOS/EOS); raise max_tokens, or set max_len to drop and count them"
            )
        self._lengths = lengths
        self._keep = keep
        self._fingerprint = self._make_fingerprint()

    def _make_fingerprint(self) -> str:
        """A hash of everything the batch order depends on (example lengths and the constructor arguments)."""
        digest = hashlib.sha256(self._lengths.tobytes())
        settings = (self.max_tokens, self.seed, self.shuffle, self.world_size, self.max_len, self.sort_chunk)
        digest.update(repr((settings, self.remainder)).encode())
        return digest.hexdigest()[:16]

    def all_batches_indices(self, epoch: int) -> list[list[int]]:
        """Example indices of every batch of the epoch, for all ranks, in order (before sharding)."""
        rng = np.random.default_rng([self.seed, epoch])
        lengths = self._lengths
        if self.shuffle:
            order = rng.permutation(self._keep)
            chunk = len(order) if self.sort_chunk is None else self.sort_chunk
        else:
            order, chunk = self._keep, len(self._keep)
        batches: list[list[int]] = []
        for start in range(0, len(order), chunk):
            piece = order[start : start + chunk]
            piece = piece[np.argsort(lengths[piece], kind="stable")]  # ascending length: the last one is the longest
            batch: list[int] = []
            for index in piece.tolist():
                if batch and (len(batch) + 1) * lengths[index] > self.max_tokens:
                    batches.append(batch)
                    batch = []
                batch.append(index)
            batches.append(batch)
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    def batch_indices(self, epoch: int) -> list[list[int]]:
        """Example indices of this rank's batches in ``epoch``: a pure function of (seed, epoch) and the arguments.

        Raises:
            DataError: ``remainder="drop"`` leaves no batch for the ranks (fewer batches than ranks).
        """
        batches = self.all_batches_indices(epoch)
        count = len(batches)
        if self.remainder == "pad":
            per_rank = math.ceil(count / self.world_size)
            batches = [batches[i % count] for i in range(per_rank * self.world_size)]
        else:
            per_rank = count // self.world_size
            if per_rank == 0:
                raise DataError(f"{count} batches cannot be shared by {self.world_size} ranks with remainder='drop'")
            batches = batches[: per_rank * self.world_size]
        return batches[self.rank :: self.world_size]

    def num_batches(self, epoch: int = 0) -> int:
        """How many batches this rank gets in ``epoch``."""
        return len(self.batch_indices(epoch))

    def batches(self, epoch: int) -> list[Batch]:
        """This rank's batches of ``epoch``, collated (see :meth:`batch_indices`)."""
        return list(self.iter_batches(epoch))

    def iter_batches(self, epoch: int, start: int = 0) -> Iterator[Batch]:
        """This rank's batches of ``epoch`` from position ``start``, collated one at a time (for resuming)."""
        for indices in self.batch_indices(epoch)[start:]:
            yield self.make_batch(indices, epoch)

    def make_batch(self, indices: Sequence[int], epoch: int) -> Batch:
        """The collated batch of the examples ``indices`` of ``epoch`` (one entry of :meth:`batch_indices`)."""
        return collate([self.examples[i] for i in indices], indices)

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
