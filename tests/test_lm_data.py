"""Language-model data: text read and split by whole groups, the token stream, contiguous blocks without padding."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from tolerance import logit_sums, reordering_bound

from dotformer.data.batch.batching import BatchPlan, BatchSampler, EncodedPair, SamplerPosition, sampler_for
from dotformer.data.batch.blocks import BlockSampler, TokenStream, encode_text
from dotformer.data.config import LMDataConfig
from dotformer.data.prepared.kinds import prepare
from dotformer.data.prepared.splits import TEST, TRAIN, VALID, assign_splits
from dotformer.data.read.text_corpus import PIECE_LINES, TextCorpus, read_file_text
from dotformer.data.tokenize.tokenizer_files import train_tokenizer
from dotformer.data.tokenize.tokenizers import EOS_ID, PAD_ID
from dotformer.errors import ConfigError, DataError
from dotformer.metrics.language import LanguageModelScore
from dotformer.training.scoring import score_text, sliding_windows


def lists(plan: BatchPlan) -> list[list[int]]:
    """A sampler's plan as lists of example (or block) indices, batch by batch in the order taken."""
    return [batch.tolist() for batch in plan]


def stream_of(n: int, block: int) -> TokenStream:
    """A stream whose token at position i is 4 + i (distinct ids, so positions can be read back from tokens)."""
    return TokenStream(np.arange(4, 4 + n, dtype=np.int64), block)


def test_encode_text_ends_every_line_with_eos() -> None:
    tokenizer = train_tokenizer("char", ["ab", "ba c"])
    stream = encode_text(["ab", "", "c"], tokenizer, 4)
    a, b, c = (tokenizer.encode(ch)[0] for ch in "abc")
    assert stream.ids.tolist() == [a, b, EOS_ID, EOS_ID, c, EOS_ID]
    assert len(stream) == 6 and stream.block_size == 4


def test_evaluation_blocks_cover_the_text_once_in_order_without_padding() -> None:
    stream = stream_of(103, 10)  # 102 labels: 10 full blocks and a tail of 2
    sampler = BlockSampler(stream, max_tokens=30, shuffle=False)
    batches = sampler.batches(0)
    inputs = torch.cat([row for batch in batches for row in batch.tgt_in])
    labels = torch.cat([row for batch in batches for row in batch.tgt_out])
    assert inputs.tolist() == stream.ids[:-1].tolist()
    assert labels.tolist() == stream.ids[1:].tolist()
    assert [tuple(b.tgt_in.shape) for b in batches] == [(3, 10), (3, 10), (3, 10), (1, 10), (1, 2)]
    assert all(b.src.shape == (b.size, 0) and b.num_src_tokens == 0 for b in batches)
    assert all(bool((b.tgt_in != PAD_ID).all()) and b.num_tgt_tokens == b.tgt_out.numel() for b in batches)


def test_training_blocks_are_contiguous_and_cover_the_text_after_the_epoch_offset() -> None:
    stream = stream_of(200, 16)
    sampler = BlockSampler(stream, max_tokens=64, seed=3)
    offsets = set()
    for epoch in range(4):
        o = sampler.offset(epoch)
        offsets.add(o)
        batches = sampler.batches(epoch)
        starts = sorted(int(row[0]) - 4 for b in batches for row in b.tgt_in)
        n = sampler.num_blocks(epoch)
        assert n == (200 - 1 - o) // 16 and starts == [o + 16 * j for j in range(n)]  # every block once
        for b in batches:
            assert bool((b.tgt_out == b.tgt_in + 1).all())  # the labels are the next tokens of the stream
            assert bool((b.tgt_in[:, 1:] - b.tgt_in[:, :-1] == 1).all())  # contiguous within a block
    assert len(offsets) > 1  # block boundaries move between epochs


def test_order_is_seeded_and_resumable() -> None:
    stream = stream_of(500, 8)
    a, b = BlockSampler(stream, 32, seed=5), BlockSampler(stream, 32, seed=5)
    assert lists(a.plan(2)) == lists(b.plan(2))
    assert lists(a.plan(0)) != lists(a.plan(1))
    assert lists(a.plan(0)) != lists(BlockSampler(stream, 32, seed=6).plan(0))
    full = [batch.tgt_in for batch in a.iter_batches(1)]
    tail = [batch.tgt_in for batch in b.iter_batches(1, start=3)]
    assert all(torch.equal(x, y) for x, y in zip(full[3:], tail, strict=True))
    state = a.state_dict(SamplerPosition(1, 3))
    assert b.load_state_dict(state) == SamplerPosition(1, 3)
    with pytest.raises(DataError, match="fingerprint"):
        BlockSampler(stream_of(500, 16), 32, seed=5).load_state_dict(state)


def test_ranks_share_the_batches() -> None:
    stream = stream_of(300, 8)
    whole = lists(BlockSampler(stream, 16, seed=1).plan(0))
    ranks = [lists(BlockSampler(stream, 16, seed=1, rank=r, world_size=2).plan(0)) for r in (0, 1)]
    padded = whole + whole[: len(whole) % 2]  # an odd count repeats the first batch, as BatchSampler's "pad"
    assert ranks == [padded[0::2], padded[1::2]]
    assert sorted(sum(ranks[0] + ranks[1], [])) == sorted(sum(padded, []))


def test_sampler_for_picks_by_example_type() -> None:
    assert isinstance(sampler_for(stream_of(50, 4), 16), BlockSampler)
    pairs = [EncodedPair([4, 5], [6]), EncodedPair([7], [8, 9])]
    assert type(sampler_for(pairs, 16)) is BatchSampler


def test_bad_streams_and_settings_are_refused() -> None:
    with pytest.raises(DataError, match="too few"):
        BlockSampler(stream_of(20, 16), 64)
    with pytest.raises(ConfigError, match="block_size"):
        encode_text(["a"], train_tokenizer("char", ["a"]), 0)
    with pytest.raises(ConfigError, match="max_tokens"):
        BlockSampler(stream_of(100, 4), 0)


def test_file_text_is_held_out_in_whole_pieces(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text("".join(f"line {i}\n" for i in range(1000)), encoding="utf-8")
    corpus = read_file_text(path)
    assert len(corpus.lines) == 1000 and corpus.groups[0] == f"lines 1-{PIECE_LINES}"
    config = LMDataConfig(dataset=str(path), valid_fraction=0.1, test_fraction=0.2)
    prepared = prepare(config, seed=1, directory=tmp_path / "p")
    valid, test = prepared.texts("valid"), prepared.texts("test")
    assert (len(prepared.splits["train"]), len(valid), len(test)) == (700, 100, 200)
    for held_out in (valid, test):
        numbers = [int(line.split()[1]) for line in held_out]
        assert all(n % PIECE_LINES == 0 for n in numbers[::PIECE_LINES])  # whole pieces, from their first line
    train = [line for line, code in zip(corpus.lines, prepared.split_of, strict=True) if code == TRAIN]
    assert sorted(train + valid + test) == sorted(corpus.lines)
    assert prepare(config, seed=1, directory=tmp_path / "again").texts("valid") == valid


def test_test_groups_are_held_out_whole() -> None:
    books, book_of_line = ["Gen", "Ruth", "Matt"], np.repeat(np.arange(3), 4)  # 12 lines, 4 a book
    split = assign_splits(12, 0, 0.3, 0.0, book_of_line, books, test_groups=["Ruth"])
    assert np.flatnonzero(split == TEST).tolist() == [4, 5, 6, 7]
    valid = np.flatnonzero(split == VALID)
    assert len(valid) == 4 and len(set(book_of_line[valid].tolist())) == 1
    with pytest.raises(ConfigError, match="Jude"):
        assign_splits(12, 0, 0.05, 0.05, book_of_line, books, test_groups=["Jude"])


def test_language_model_score_worked_example() -> None:
    score = LanguageModelScore(nll_sum=3 * math.log(2), tokens=3, characters=6)
    assert score.nats_per_token == pytest.approx(math.log(2))
    assert score.perplexity == pytest.approx(2.0)
    assert score.bits_per_token == pytest.approx(1.0)
    assert score.bits_per_character == pytest.approx(0.5)
    with pytest.raises(DataError):
        LanguageModelScore(nll_sum=-1.0, tokens=3, characters=6)


def test_a_uniform_model_scores_log2_v_bits_per_character(make_model) -> None:
    """A model whose logits are all equal puts 1/V on every token: log2(V) bits per character-token."""
    model = make_model(arch="decoder-only", tie_output=False)
    torch.nn.init.zeros_(model.generator.weight)
    tokenizer = train_tokenizer("char", ["abcdefghi"])  # 4 specials + 9 letters = the tiny model's 13
    lines = ["abc", "defg", "hi"]
    score = score_text(model, lines, tokenizer, block_size=4, max_tokens=8)
    assert score.tokens == 3 + 4 + 2 + 3 - 1  # every token after the first, line ends included
    assert score.characters == score.tokens  # one character per token
    assert score.bits_per_character == pytest.approx(math.log2(13), rel=1e-6)


@pytest.mark.parametrize("T", [4, 8])
def test_sliding_windows_score_every_token_once_with_at_least_t_minus_s_of_context(T: int) -> None:
    for S in range(1, T + 1):
        for N in range(2, 3 * T + S + 2):  # every length around the multiples of S and T
            batches = list(sliding_windows(stream_of(N, T), S, max_tokens=2 * T, pad_id=PAD_ID))
            scored = []  # (stream position of a scored label, tokens of context it is scored with)
            for batch in batches:
                assert batch.tgt_in.size(0) <= 2 and (batch.tgt_in != PAD_ID).all()  # B = max_tokens // T windows
                for inputs, labels in zip(batch.tgt_in, batch.tgt_out, strict=True):
                    first = int(inputs[0])  # a window of the stream: x[w : w + L] and the labels after each
                    assert inputs.tolist() == list(range(first, first + len(inputs)))
                    assert all(t in (PAD_ID, first + j + 1) for j, t in enumerate(labels.tolist()))
                    scored += [(int(t) - 4, j + 1) for j, t in enumerate(labels.tolist()) if t != PAD_ID]
            assert [p for p, _ in scored] == list(range(1, N)), (S, N)  # in order, each once: N - 1 of them
            assert sum(b.num_tgt_tokens for b in batches) == N - 1
            assert all(context >= min(p, T - S + 1) for p, context in scored), (S, N)  # x_<p: T - S tokens or more


def test_a_stride_of_t_gives_the_evaluation_blocks_and_their_score(make_model) -> None:
    for N in (2, 9, 10, 11, 33):
        blocks = BlockSampler(stream_of(N, 8), max_tokens=16, shuffle=False).batches(0)
        windows = sliding_windows(stream_of(N, 8), 8, max_tokens=16, pad_id=PAD_ID)
        assert [(b.tgt_in.tolist(), b.tgt_out.tolist(), b.num_tgt_tokens) for b in windows] == [
            (b.tgt_in.tolist(), b.tgt_out.tolist(), b.num_tgt_tokens) for b in blocks
        ]
    model = make_model(arch="decoder-only")
    tokenizer = train_tokenizer("char", ["abcdefghi"])
    lines = ["abcdefg", "hi", "ihgfedcba", "a"]
    assert score_text(model, lines, tokenizer, 8, 16, stride=8) == score_text(model, lines, tokenizer, 8, 16)


def test_a_stride_outside_1_to_t_is_refused(make_model) -> None:
    model = make_model(arch="decoder-only")
    tokenizer = train_tokenizer("char", ["abc"])
    for stride in (0, 9):
        with pytest.raises(ConfigError, match=f"between 1 and the block size 8 tokens, got {stride}"):
            score_text(model, ["abc"], tokenizer, 8, 16, stride=stride)
    for stride in (4.0, "4", True):  # a count of tokens: an integer, not a float, a string or a bool
        with pytest.raises(ConfigError, match=f"the stride must be an integer number of tokens, got {stride!r}"):
            score_text(model, ["abc"], tokenizer, 8, 16, stride=stride)
    with pytest.raises(ConfigError, match="max_tokens must be positive, got 0"):  # as the blocks refuse it
        score_text(model, ["abc"], tokenizer, 8, 0, stride=4)


@pytest.mark.numerical
def test_sliding_window_nll_equals_scoring_each_token_alone(make_model) -> None:
    """Token t of the stream is scored by the window that starts at w, the smallest multiple of S with w + T >= t:
    one forward pass over x[w : t], the last position's log-probability of x_t."""
    model = make_model(arch="decoder-only", max_len=8).double()  # float64: a tolerance far below the windows' gain
    tokenizer = train_tokenizer("char", ["abcdefghi"])
    rng = np.random.default_rng(3)
    lines = ["".join(rng.choice(list("abcdefghi"), size=n)) for n in (5, 9, 2, 7, 6)]  # 34 tokens, line ends too
    ids = torch.from_numpy(encode_text(lines, tokenizer, 8).ids)
    T, N, empty = 8, len(ids), torch.zeros(1, 0, dtype=torch.int64)

    def direct_nll(start: Callable[[int], int]) -> tuple[float, float]:
        """Σ_t -log p(x_t | x[start(t) : t]) and the largest |logit| met."""
        total, largest = 0.0, 0.0
        with torch.no_grad():
            for t in range(1, N):
                logits = model(empty, ids[start(t) : t][None])[0, -1]  # (V,): the last position predicts x_t
                total -= float(torch.log_softmax(logits.double(), dim=-1)[ids[t]])
                largest = max(largest, float(logits.abs().max()))
        return total, largest

    for S in (1, 3, 5):
        score = score_text(model, lines, tokenizer, T, max_tokens=2 * T, stride=S)
        assert score.tokens == N - 1
        expected, largest = direct_nll(lambda t, S=S: S * max(0, math.ceil((t - T) / S)))
        per_token = 2 * reordering_bound(logit_sums(model.config, T), largest, torch.float64)  # |Δ log p| <= 2|Δz|
        tolerance = (N - 1) * per_token + reordering_bound([N - 1], expected, torch.float64)
        assert score.nll_sum == pytest.approx(expected, rel=0, abs=tolerance), S
        blocks, _ = direct_nll(lambda t: (t - 1) // T * T)  # the same loop with the blocks' context
        assert abs(blocks - expected) > 10 * tolerance  # the windows change the figure: the test can tell them apart


def kjv_installed() -> bool:
    from dotformer.data.read import bible
    from dotformer.errors import MissingDataError

    try:
        return bible.resolve_module("KJV", bible.find_modules(bible.sword_libraries())) is not None
    except MissingDataError:
        return False


@pytest.mark.skipif(not kjv_installed(), reason="needs pysword and the KJV module (apt-get install -y sword-text-kjv)")
def test_the_kjv_as_text_held_out_by_books(tmp_path: Path) -> None:
    from dotformer.data.read.text_corpus import check_books, read_text_corpus

    corpus = read_text_corpus("bible")
    assert corpus.lines[0] == "In the beginning God created the heaven and the earth."
    assert corpus.groups[0] == "Gen" and corpus.groups[-1] == "Rev" and corpus.report["module"] == "engKJV2006eb"
    assert all(line.strip() for line in corpus.lines)
    books = check_books(corpus, ["Ruth", "jonah"])
    assert books == ["Ruth", "Jonah"]
    config = LMDataConfig(dataset="bible", test_books=("Ruth", "jonah"), valid_fraction=0.02)
    prepared = prepare(config, seed=1, directory=tmp_path / "p")
    test = prepared.texts("test")
    assert len(test) == 85 + 48  # Ruth 85 verses, Jonah 48
    assert test[0].startswith("Now it came to pass in the days when the judges ruled")
    assert prepared.report["split"]["test_groups"] == books
    assert not set(prepared.report["split"]["valid_groups"]) & {"Ruth", "Jonah"}
    with pytest.raises(ConfigError, match="not a Bible"):
        check_books(TextCorpus("t.txt", ["a"], ["lines 1-100"], {"format": "text"}), ["Ruth"])


def test_a_short_file_is_cut_in_smaller_pieces_so_it_splits(tmp_path: Path) -> None:
    path = tmp_path / "short.txt"
    path.write_text("".join(f"line {i}\n" for i in range(100)), encoding="utf-8")
    corpus = read_file_text(path)
    assert corpus.groups[0] == "lines 1-10" and len(set(corpus.groups)) == 10
    prepared = prepare(LMDataConfig(dataset=str(path)), seed=1, directory=tmp_path / "p")  # 5% valid, 5% test
    assert [len(prepared.splits[name]) for name in ("train", "valid", "test")] == [80, 10, 10]
    two = tmp_path / "two.txt"
    two.write_text("a line\nanother line\n", encoding="utf-8")
    config = LMDataConfig(dataset=str(two), valid_fraction=0.4, test_fraction=0.4)
    with pytest.raises(DataError, match="no lines left for training .2 lines in 2 held-out pieces"):
        prepare(config, seed=1, directory=tmp_path / "two")
