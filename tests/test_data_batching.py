"""Batching: tensor layout, token budget, coverage, determinism by (seed, epoch), sharding, resuming."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import torch

from dotformer.data.batch.batching import (
    Batch,
    BatchPlan,
    BatchSampler,
    EncodedPair,
    SamplerPosition,
    collate,
    encode_pairs,
    example_length,
    padding_fraction,
)
from dotformer.data.read.types import Pair
from dotformer.data.tokenize.tokenizer_files import train_tokenizer
from dotformer.data.tokenize.tokenizers import BOS_ID, EOS_ID, PAD_ID
from dotformer.errors import ConfigError, DataError


def lists(plan: BatchPlan) -> list[list[int]]:
    """A sampler's plan as lists of example (or block) indices, batch by batch in the order taken."""
    return [batch.tolist() for batch in plan]


def random_examples(count: int = 500, seed: int = 0, max_len: int = 30) -> list[EncodedPair]:
    rng = random.Random(seed)
    return [
        EncodedPair(
            [rng.randrange(4, 50) for _ in range(rng.randint(0, max_len))],
            [rng.randrange(4, 50) for _ in range(rng.randint(0, max_len))],
        )
        for _ in range(count)
    ]


def test_collate_layout_by_hand():
    batch = collate([EncodedPair([5, 6, 7], [8]), EncodedPair([9], [10, 11, 12, 13])], indices=[4, 2])
    assert batch.src.tolist() == [[5, 6, 7, EOS_ID], [9, EOS_ID, PAD_ID, PAD_ID]]
    assert batch.tgt_in.tolist() == [[BOS_ID, 8, PAD_ID, PAD_ID, PAD_ID], [BOS_ID, 10, 11, 12, 13]]
    assert batch.tgt_out.tolist() == [[8, EOS_ID, PAD_ID, PAD_ID, PAD_ID], [10, 11, 12, 13, EOS_ID]]
    assert batch.src_mask.shape == (2, 1, 1, 4) and batch.src_mask.dtype == torch.bool
    assert batch.src_mask[:, 0, 0].tolist() == [[True, True, True, True], [True, True, False, False]]
    assert batch.src.dtype == batch.tgt_in.dtype == batch.tgt_out.dtype == torch.int64
    assert (batch.num_src_tokens, batch.num_tgt_tokens) == (6, 7)
    assert batch.indices == [4, 2] and batch.size == 2
    # padding: src 8 cells, 6 real; tgt 10 cells, 7 real -> 5 pads of 18
    assert padding_fraction([batch]) == pytest.approx(5 / 18)


def test_teacher_forcing_shift_and_empty_sequences():
    batch = collate([EncodedPair([], []), EncodedPair([4], [5, 6])])
    assert batch.src.tolist() == [[EOS_ID, PAD_ID], [4, EOS_ID]]
    assert batch.tgt_in.tolist() == [[BOS_ID, PAD_ID, PAD_ID], [BOS_ID, 5, 6]]
    assert batch.tgt_out.tolist() == [[EOS_ID, PAD_ID, PAD_ID], [5, 6, EOS_ID]]
    ids = (batch.tgt_out[:, :-1] != PAD_ID) & (batch.tgt_out[:, :-1] != EOS_ID)  # target ids (not EOS, not PAD)
    assert torch.equal(batch.tgt_in[:, 1:][ids], batch.tgt_out[:, :-1][ids])


def test_collate_empty_is_an_error():
    with pytest.raises(DataError):
        collate([])


def test_batch_to_device_keeps_everything():
    batch = collate([EncodedPair([5], [6])]).to("cpu")
    assert isinstance(batch, Batch) and batch.src.device.type == "cpu" and batch.indices == [0]


def test_encode_pairs_uses_both_tokenizers():
    src_tok = train_tokenizer("char", ["ab"])
    tgt_tok = train_tokenizer("symbol", ["A B"])
    encoded = encode_pairs([Pair("ab", "A B"), Pair("ba", "B")], src_tok, tgt_tok)
    assert encoded == [EncodedPair([4, 5], [4, 5]), EncodedPair([5, 4], [5])]
    assert example_length(encoded[0]) == 3 and example_length(EncodedPair([1] * 5, [])) == 6


@pytest.mark.parametrize("max_tokens", [31, 64, 200, 1000])
@pytest.mark.parametrize("sort_chunk", [None, 50])
def test_every_batch_respects_max_tokens(max_tokens, sort_chunk):
    examples = random_examples()
    sampler = BatchSampler(examples, max_tokens=max_tokens, seed=1, sort_chunk=sort_chunk)
    for batch in sampler.batches(0):
        assert batch.src.numel() <= max_tokens and batch.tgt_out.numel() <= max_tokens
        longest = max(example_length(examples[i]) for i in batch.indices)
        assert batch.size * longest <= max_tokens


@pytest.mark.parametrize("shuffle", [True, False])
def test_each_example_exactly_once_per_epoch(shuffle):
    examples = random_examples()
    sampler = BatchSampler(examples, max_tokens=128, seed=3, shuffle=shuffle)
    for epoch in (0, 1):
        batches = sampler.batches(epoch)
        seen = sorted(i for batch in batches for i in batch.indices)
        assert seen == list(range(len(examples)))
        for batch in batches:  # rows hold the examples they claim to hold
            for row, i in enumerate(batch.indices):
                length = len(examples[i].src)
                assert batch.src[row, :length].tolist() == examples[i].src
                assert batch.src[row, length].item() == EOS_ID


def test_deterministic_by_seed_and_different_across_epochs_and_seeds():
    examples = random_examples()

    def plan(seed: int, epoch: int) -> list[list[int]]:
        return lists(BatchSampler(examples, max_tokens=128, seed=seed).plan(epoch))

    assert plan(5, 0) == plan(5, 0)
    assert plan(5, 0) != plan(5, 1)
    assert plan(5, 0) != plan(6, 0)
    first = BatchSampler(examples, max_tokens=128, seed=5).batches(2)
    second = BatchSampler(examples, max_tokens=128, seed=5).batches(2)
    assert all(
        torch.equal(a.src, b.src) and torch.equal(a.tgt_out, b.tgt_out) for a, b in zip(first, second, strict=True)
    )


def test_without_shuffle_batches_are_sorted_by_length_and_the_same_every_epoch():
    examples = random_examples()
    sampler = BatchSampler(examples, max_tokens=128, shuffle=False)
    plan = lists(sampler.plan(0))
    assert plan == lists(sampler.plan(7))
    longest = [max(example_length(examples[i]) for i in batch) for batch in plan]
    assert longest == sorted(longest)


def test_length_bucketing_reduces_padding():
    rng = random.Random(1)
    lengths = [rng.randint(1, 60) for _ in range(2000)]  # translation-like: target length close to source length
    examples = [EncodedPair([4] * n, [5] * max(0, n + rng.randint(-2, 2))) for n in lengths]
    bucketed = padding_fraction(BatchSampler(examples, max_tokens=512, seed=0).batches(0))
    rng = random.Random(0)
    order = list(range(len(examples)))
    rng.shuffle(order)
    unsorted = [collate([examples[i] for i in order[k : k + 16]]) for k in range(0, len(order), 16)]
    assert bucketed < 0.1 and padding_fraction(unsorted) > 0.3


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_shards_are_equal_and_cover_everything_with_pad(world_size):
    examples = random_examples(300)
    full = lists(BatchSampler(examples, max_tokens=100, seed=2).plan(0))
    shards = [
        lists(BatchSampler(examples, max_tokens=100, seed=2, rank=rank, world_size=world_size).plan(0))
        for rank in range(world_size)
    ]
    per_rank = -(-len(full) // world_size)
    assert [len(shard) for shard in shards] == [per_rank] * world_size
    assert shards[0] == ([*full, *full][: per_rank * world_size])[0::world_size]
    seen = Counter(i for shard in shards for batch in shard for i in batch)
    assert set(seen) == set(range(len(examples)))
    repeated = per_rank * world_size - len(full)
    assert sum(seen.values()) == len(examples) + sum(len(batch) for batch in full[:repeated])


@pytest.mark.parametrize("world_size", [2, 3])
def test_shards_drop_the_remainder_when_asked(world_size):
    examples = random_examples(300)
    full = lists(BatchSampler(examples, max_tokens=100, seed=2).plan(0))
    shards = [
        lists(BatchSampler(examples, max_tokens=100, seed=2, rank=r, world_size=world_size, remainder="drop").plan(0))
        for r in range(world_size)
    ]
    assert [len(shard) for shard in shards] == [len(full) // world_size] * world_size
    kept = [batch for shard in shards for batch in shard]
    assert sorted(map(tuple, kept)) == sorted(map(tuple, full[: len(full) // world_size * world_size]))


def test_too_long_example_raises_unless_filtered():
    examples = [EncodedPair([4] * 5, [5] * 5), EncodedPair([4] * 50, [5]), EncodedPair([4], [5] * 3)]
    with pytest.raises(DataError, match=r"1 example\(s\) need more than max_tokens=20 tokens, e.g. example 1 with 51"):
        BatchSampler(examples, max_tokens=20)
    sampler = BatchSampler(examples, max_tokens=20, max_len=20)
    assert sampler.num_filtered == 1
    assert sorted(i for batch in sampler.batches(0) for i in batch.indices) == [0, 2]


def test_resume_in_the_middle_of_an_epoch():
    examples = random_examples()
    sampler = BatchSampler(examples, max_tokens=128, seed=9)
    everything = sampler.batches(3)
    state = sampler.state_dict(SamplerPosition(epoch=3, index=4))
    assert state["epoch"] == 3 and state["index"] == 4
    fresh = BatchSampler(examples, max_tokens=128, seed=9)
    position = fresh.load_state_dict(state)
    resumed = list(fresh.iter_batches(position.epoch, start=position.index))
    assert [b.indices for b in resumed] == [b.indices for b in everything[4:]]
    assert fresh.num_batches(3) == len(everything)
    with pytest.raises(DataError, match="fingerprint"):
        BatchSampler(examples, max_tokens=256, seed=9).load_state_dict(state)
    with pytest.raises(DataError, match="fingerprint"):
        BatchSampler(examples[:-1], max_tokens=128, seed=9).load_state_dict(state)


@pytest.mark.parametrize(
    "arguments",
    [
        dict(max_tokens=0),
        dict(seed=-1),
        dict(rank=2, world_size=2),
        dict(world_size=0),
        dict(max_len=0),
        dict(sort_chunk=0),
        dict(remainder="wrap"),
    ],
)
def test_bad_arguments(arguments):
    with pytest.raises(ConfigError):
        BatchSampler(random_examples(10), **{"max_tokens": 100, **arguments})


def test_no_examples_left():
    with pytest.raises(DataError, match="no examples to batch"):
        BatchSampler([EncodedPair([4] * 9, [])], max_tokens=100, max_len=5)
    with pytest.raises(DataError, match="cannot be shared"):
        lists(BatchSampler([EncodedPair([4], [])], max_tokens=100, world_size=2, remainder="drop").plan(0))


def test_end_to_end_from_a_corpus_to_batches():
    from dotformer.data.config import DataConfig
    from dotformer.data.prepared.pair_kind import read_run_data
    from dotformer.data.tokenize.tokenizer_files import default_kinds, train_tokenizer_pair

    config = DataConfig(dataset="reverse", synthetic_examples=300, synthetic_symbols=10, synthetic_max_len=8,
                        valid_fraction=0.1, test_fraction=0.1)  # fmt: skip
    train = read_run_data(config, seed=0).splits.train
    src_kind, tgt_kind = default_kinds("synthetic")
    tokenizers = train_tokenizer_pair(
        [p.source for p in train], [p.target for p in train], src_kind, tgt_kind, shared=True
    )
    assert tokenizers.src.vocab_size == 4 + 10
    examples = encode_pairs(train, tokenizers.src, tokenizers.tgt)
    batches = BatchSampler(examples, max_tokens=90, seed=0).batches(0)
    assert sum(batch.size for batch in batches) == len(train) == 240
    for batch in batches:
        for row, i in enumerate(batch.indices):
            source = tokenizers.src.decode(batch.src[row].tolist())
            target = tokenizers.tgt.decode(batch.tgt_out[row].tolist())
            assert (source, target) == train[i]
            assert target.split() == source.split()[::-1]
