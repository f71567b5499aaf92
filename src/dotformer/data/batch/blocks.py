"""Language-model batches: the text as one stream of tokens, cut into contiguous blocks, no padding.

A language model learns P(x_t | x_<t) over running text, as nanoGPT and fairseq's language-modelling task batch it:
every line's tokens followed by EOS (the line end: ``</s>`` stands for the newline) make one long stream, and a
block of T tokens is read from any position of it, across line ends:

    stream   x_0 x_1 x_2 ... x_{N-1}
    block j  tgt_in  = x[o + jT : o + jT + T]          (the decoder's input)
             tgt_out = x[o + jT + 1 : o + jT + T + 1]  (the labels: the input shifted left by one)

Every label is a real token, so there is no PAD and no BOS; ``src`` is an empty (B, 0) tensor (a decoder-only model
reads none), and a :class:`~dotformer.data.batch.batching.Batch` of blocks goes through the same ``train_step`` as a
batch of pairs. :class:`BlockSampler` is a :class:`~dotformer.data.batch.batching.BatchSampler` over blocks: its order
is a pure function of (seed, epoch), it shards across ranks and resumes from a :class:`SamplerPosition` the same way. In
training each epoch starts its blocks at a seeded offset o in [0, T), so block boundaries move between epochs; in
evaluation o = 0 and a last, shorter block reads the tail, so every token after the first is scored exactly once.

The stream is a numpy array: in memory (:func:`encode_text`) or memory-mapped from prepared data
(:func:`prepared_stream`); a batch reads only its own blocks of it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from dotformer.data.batch.batching import Batch, BatchPlan, BatchSampler, check_sampler_arguments
from dotformer.data.prepared.text_kind import PreparedText
from dotformer.data.tokenize.tokenizers import Tokenizer
from dotformer.errors import ConfigError, DataError

HASH_TOKENS = 1 << 20  # tokens of the stream hashed at a time for the sampler's fingerprint


@dataclass(frozen=True)
class TokenStream:
    """A text as one stream of token ids, and the block length T to read it in.

    Attributes:
        ids: (N,) integer numpy array (int64 in memory; uint16 or int32 when mapped from prepared data), every line's
            ids followed by EOS.
        block_size: T, tokens per block (the context the model trains on).
        characters: C, the characters the text spells, each line end counted as one (0: not known); with the
            tokenizer it gives bits per character (:func:`dotformer.metrics.language.scored_characters`).
    """

    ids: np.ndarray
    block_size: int
    characters: int = 0

    def __len__(self) -> int:
        """N, the tokens of the stream."""
        return len(self.ids)

    def sampler(self, max_tokens: int, seed: int, shuffle: bool, rank: int, world_size: int) -> BlockSampler:
        """Its batches: contiguous blocks of T tokens (:class:`BlockSampler`)."""
        return BlockSampler(self, max_tokens, seed, shuffle, rank, world_size)


def encode_text(lines: Sequence[str], tokenizer: Tokenizer, block_size: int) -> TokenStream:
    """The :class:`TokenStream` of ``lines``: each line's ids, then EOS (its line end).

    Raises:
        ConfigError: ``block_size`` < 1.
    """
    if block_size < 1:
        raise ConfigError(f"block_size must be a positive number of tokens, got {block_size}")
    characters = sum(len(line) + 1 for line in lines)
    return TokenStream(tokenizer.encode_arrays(list(lines)).with_eos().ids, block_size, characters)


def prepared_stream(prepared: PreparedText, split: str, block_size: int) -> TokenStream:
    """The :class:`TokenStream` of a split of prepared text (:mod:`dotformer.data.prepared`): its mapped ids and its
    characters, read in blocks of ``block_size``."""
    return TokenStream(prepared.stream(split), block_size, prepared.characters(split))  # type: ignore[arg-type]


def collate_blocks(stream: np.ndarray, starts: Sequence[int], length: int, indices: Sequence[int]) -> Batch:
    """The :class:`Batch` of blocks ``stream[s : s + length]`` (inputs) and ``stream[s + 1 : s + length + 1]``
    (labels) for each start s: tgt_in, tgt_out (B, length) int64, src (B, 0). Only these blocks of a mapped
    stream are read."""
    rows = np.asarray(starts, dtype=np.int64)[:, None] + np.arange(length + 1)  # (B, T + 1)
    window = torch.from_numpy(stream[rows].astype(np.int64))  # (B, T + 1)
    return Batch(
        src=torch.zeros(len(starts), 0, dtype=torch.int64),  # (B, 0): a decoder-only model reads no source
        tgt_in=window[:, :-1].contiguous(),  # (B, T)
        tgt_out=window[:, 1:].contiguous(),  # (B, T)
        num_src_tokens=0,
        num_tgt_tokens=len(starts) * length,
        indices=[int(i) for i in indices],
    )


def check_training_stream(stream: TokenStream) -> None:
    """Check that ``stream`` is long enough to train on: a block of T tokens at every offset 0 .. T - 1 (2T + 1
    tokens at least).

    Raises:
        DataError: the text is too short, with its length and the length needed.
    """
    T = stream.block_size
    if len(stream) < 2 * T + 1:
        raise DataError(
            f"the training text has {len(stream)} tokens: too few for blocks of {T} tokens at every offset "
            f"(needs at least {2 * T + 1}); lower the block size or give more text"
        )


class BlockSampler(BatchSampler):
    """Batches of ``max_tokens // block_size`` contiguous blocks of a :class:`TokenStream` (at least one).

    The interface, the sharding across ranks (``remainder``) and resuming (:meth:`state_dict`,
    ``iter_batches(epoch, start)``) are :class:`BatchSampler`'s; what differs is what is batched. Per epoch in
    training: the offset o and the order of the blocks come from ``numpy.random.default_rng([seed, epoch])``; the
    blocks are x[o + jT : o + jT + T + 1] for j = 0 .. ⌊(N - 1 - o) / T⌋ - 1, and the last batch may hold fewer
    blocks. In evaluation (``shuffle=False``) o = 0, the blocks keep their order, and the tail shorter than T
    forms a last batch of one shorter block.

    Args:
        stream: the tokens and T.
        max_tokens: tokens per batch (B = max(1, max_tokens // T) blocks).
        seed, shuffle, rank, world_size, remainder: as :class:`BatchSampler`.

    Raises:
        ConfigError: an argument out of range. DataError: the stream is too short for one block of training.
    """

    def __init__(
        self,
        stream: TokenStream,
        max_tokens: int,
        seed: int = 0,
        shuffle: bool = True,
        rank: int = 0,
        world_size: int = 1,
        remainder: str = "pad",
    ) -> None:
        check_sampler_arguments(max_tokens, seed, rank, world_size, remainder)
        T = stream.block_size
        if shuffle:
            check_training_stream(stream)
        if len(stream) < 2:
            raise DataError(f"the text has {len(stream)} token(s): nothing to predict")
        self.stream = stream
        self.max_tokens = max_tokens
        self.seed, self.shuffle, self.rank, self.world_size = seed, shuffle, rank, world_size
        self.remainder = remainder
        self.blocks_per_batch = max(1, max_tokens // T)
        self.num_filtered = 0
        digest = hashlib.sha256()
        for start in range(0, len(stream), HASH_TOKENS):  # as int64, whatever the stream's dtype (bounded memory)
            digest.update(np.ascontiguousarray(stream.ids[start : start + HASH_TOKENS], dtype=np.int64).tobytes())
        digest.update(repr((T, max_tokens, seed, shuffle, world_size, remainder)).encode())
        self._fingerprint = digest.hexdigest()[:16]

    def offset(self, epoch: int) -> int:
        """o, the position of the first block of ``epoch`` (0 in evaluation)."""
        if not self.shuffle:
            return 0
        return int(np.random.default_rng([self.seed, epoch]).integers(self.stream.block_size))

    def num_blocks(self, epoch: int) -> int:
        """Full blocks of ``epoch`` (blocks of exactly T tokens; evaluation adds one shorter tail block)."""
        return (len(self.stream) - 1 - self.offset(epoch)) // self.stream.block_size

    def global_plan(self, epoch: int) -> BatchPlan:
        """Block numbers j of every batch of the epoch, for all ranks, in order (before sharding)."""
        count = self.num_blocks(epoch)
        order = np.arange(count)
        if self.shuffle:
            rng = np.random.default_rng([self.seed, epoch])
            rng.integers(self.stream.block_size)  # the offset's draw, so the order is the same in every call
            order = rng.permutation(count)
        starts = list(range(0, count, self.blocks_per_batch)) + [count]
        tail = len(self.stream) - 1 - count * self.stream.block_size
        if not self.shuffle and tail > 0:
            order, starts = np.append(order, count), [*starts, count + 1]  # the shorter last block (evaluation only)
        starts_array = np.array(starts, dtype=np.int64)
        return BatchPlan(order.astype(np.int64), starts_array, np.arange(len(starts_array) - 1))

    def padding_fraction(self, plan: BatchPlan) -> float:
        """0.0: blocks are cut from running text, every cell is a real token."""
        return 0.0

    reads_text = True

    def data_line(self, valid: int, src: Tokenizer, tgt: Tokenizer, objective: str, max_tokens: int) -> list[str]:
        """Tokens and blocks, the vocabulary, whole blocks a batch (at least one: ``max(1, max_tokens // T)``)."""
        T, blocks = self.stream.block_size, self.blocks_per_batch
        size = f"{blocks:,} {'block' if blocks == 1 else 'blocks'} ({blocks * T:,} tokens"
        size += f"; max_tokens {max_tokens:,} is less than one block)" if max_tokens < T else ")"
        return [f"{len(self.stream):,} train / {valid:,} valid tokens, blocks of {T:,} tokens",
                f"vocabulary {tgt.vocab_size:,}", size]  # fmt: skip

    def make_batch(self, indices: Sequence[int] | np.ndarray, epoch: int) -> Batch:
        """The batch of blocks ``indices`` of ``epoch`` (one entry of :meth:`plan`)."""
        T, o, full = self.stream.block_size, self.offset(epoch), self.num_blocks(epoch)
        length = T if indices[0] < full else len(self.stream) - 1 - full * T  # the tail block is shorter
        return collate_blocks(self.stream.ids, [o + j * T for j in indices], length, indices)
