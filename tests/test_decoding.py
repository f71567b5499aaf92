"""Greedy decoding and the incremental (cached) decoder, against an uncached reference decoder written here."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from decoding_support import (
    COPY_MAX_LEN,
    pad,
    random_model,
    random_sources,
    single_thread,
    sources_of_mixed_lengths,
    with_eos,
)
from scripted_model import copy_model

from dotformer import ModelConfig, Transformer
from dotformer.data.tokenize.tokenizers import BOS_ID, EOS_ID, PAD_ID
from dotformer.decoding import DecodeConfig, decode_batch, greedy_decode, length_penalty
from dotformer.errors import ConfigError, ShapeError

pytestmark = pytest.mark.numerical  # run again under another vector unit by scripts/test.sh

GREEDY = DecodeConfig(strategy="greedy")


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    with single_thread():
        yield


def reference_greedy(model: Transformer, source: list[int], max_len: int) -> tuple[list[int], list[float]]:
    """Greedy decoding of one sentence, recomputing the whole prefix with ``model(src, tgt)`` at every step."""
    src = torch.tensor([source])
    generated: list[int] = []
    log_probs: list[float] = []
    with torch.no_grad():
        for _ in range(max_len):
            logits = model(src, torch.tensor([[BOS_ID, *generated]]))[0, -1]  # (V,)
            lp = logits.log_softmax(-1)
            lp[PAD_ID] = lp[BOS_ID] = float("-inf")
            token = int(lp.argmax())
            generated.append(token)
            log_probs.append(float(lp[token]))
            if token == EOS_ID:
                break
    return generated, log_probs


@pytest.mark.parametrize("which", ["random", "copy"])
def test_cached_greedy_equals_uncached_reference(which: str) -> None:
    model = random_model() if which == "random" else copy_model()
    config = GREEDY.replace(max_len_b=6)
    sources = sources_of_mixed_lengths()
    out = greedy_decode(model, pad(sources), config)
    for source, hyps in zip(sources, out, strict=True):
        (h,) = hyps
        tokens, log_probs = reference_greedy(model, source, config.max_output_length(len(source)))
        assert with_eos(h) == tokens
        assert h.log_probs == pytest.approx(log_probs, abs=1e-5)


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_use_cache_false_gives_the_same_outputs(strategy: str) -> None:
    model = random_model(vocab=12)
    src = pad(sources_of_mixed_lengths())
    config = DecodeConfig(strategy=strategy, max_len_b=5, n_best=1)
    cached = decode_batch(model, src, config)
    uncached = decode_batch(model, src, config.replace(use_cache=False))
    for a, b in zip(cached, uncached, strict=True):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        for ha, hb in zip(a, b, strict=True):
            assert ha.log_probs == pytest.approx(hb.log_probs, abs=1e-5)


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
@pytest.mark.parametrize("which", ["random", "copy"])
def test_batch_gives_the_same_outputs_as_each_sentence_alone(strategy: str, which: str) -> None:
    model = random_model() if which == "random" else copy_model()
    config = DecodeConfig(strategy=strategy, max_len_b=6, n_best=1 if strategy == "greedy" else 3)
    sources = sources_of_mixed_lengths(seed=5, count=6)
    together = decode_batch(model, pad(sources), config)
    for source, hyps in zip(sources, together, strict=True):
        (alone,) = decode_batch(model, pad([source]), config)
        assert [h.tokens for h in hyps] == [h.tokens for h in alone]
        assert [h.score for h in hyps] == pytest.approx([h.score for h in alone], abs=1e-4)


def test_copy_model_copies_and_ends_with_eos() -> None:
    """The hand-set copy model (tests/scripted_model.py) copies every source by construction: all 50, exactly."""
    model = copy_model()
    g = torch.Generator().manual_seed(11)
    sources = random_sources(50, g, max_len=COPY_MAX_LEN)
    out = greedy_decode(model, pad([s + [EOS_ID] for s in sources]), GREEDY)
    assert all(hyps[0].finished for hyps in out)
    assert [hyps[0].tokens for hyps in out] == sources


def test_a_hypothesis_cut_at_the_limit_has_max_len_tokens_and_no_eos() -> None:
    model = random_model(vocab=40)  # random models rarely pick EOS
    config = GREEDY.replace(max_len_a=0.0, max_len_b=4)
    for (h,) in greedy_decode(model, pad(sources_of_mixed_lengths()), config):
        assert EOS_ID not in h.tokens and PAD_ID not in h.tokens and BOS_ID not in h.tokens
        if h.finished:
            assert len(h.tokens) < 4 and len(h.log_probs) == len(h.tokens) + 1
        else:
            assert len(h.tokens) == len(h.log_probs) == 4


def test_max_output_length_is_a_times_source_length_plus_b() -> None:
    config = DecodeConfig(max_len_a=1.5, max_len_b=3)
    assert config.max_output_length(4) == 9  # floor(1.5·4 + 3)
    assert config.max_output_length(5) == 10  # floor(10.5)
    assert DecodeConfig(max_len_a=0.1, max_len_b=0).max_output_length(7) == 1  # floor(0.7) = 0: at least one step
    with pytest.raises(ConfigError, match="max_len_a and max_len_b are both 0: that allows no decoding step"):
        DecodeConfig(max_len_a=0.0, max_len_b=0)  # refused, not one token whatever the input
    assert DecodeConfig().max_output_length(12) == 62  # the paper: input length + 50


def test_score_is_summed_log_prob_over_the_gnmt_penalty() -> None:
    (h,), *_ = greedy_decode(random_model(), pad(sources_of_mixed_lengths()), GREEDY.replace(length_penalty=0.6))
    lp = ((5 + len(h.log_probs)) / 6) ** 0.6
    assert h.score == pytest.approx(sum(h.log_probs) / lp, rel=1e-6)


def test_length_penalty_values() -> None:
    assert float(length_penalty(1, 0.6)) == pytest.approx(1.0)
    assert float(length_penalty(7, 0.6)) == pytest.approx(2**0.6)  # (5 + 7) / 6 = 2
    assert float(length_penalty(13, 1.0)) == pytest.approx(3.0)
    assert length_penalty(torch.tensor([1, 7, 100]), 0.0).tolist() == [1.0, 1.0, 1.0]


def test_decoding_restores_the_training_flag_and_turns_dropout_off() -> None:
    model = random_model(dropout=0.5)
    model.train()
    src = pad(sources_of_mixed_lengths())
    first = greedy_decode(model, src, GREEDY)
    second = greedy_decode(model, src, GREEDY)
    assert model.training
    assert [h[0].tokens for h in first] == [h[0].tokens for h in second]


def test_input_longer_than_a_learned_positional_table_is_a_shape_error() -> None:
    model = random_model(positional="learned", max_len=8)
    with pytest.raises(ShapeError, match="at most 8"):
        greedy_decode(model, pad([[5] * 9 + [EOS_ID]]), GREEDY)


def test_learned_positional_table_caps_the_output_length() -> None:
    model = random_model(vocab=40, positional="learned", max_len=8)
    (h,), *_ = greedy_decode(model, pad([[5, 6, EOS_ID]]), GREEDY)  # a·3 + 50 steps asked, 8 positions exist
    assert len(h.log_probs) <= 8


def test_bad_inputs_raise_clear_errors() -> None:
    model = random_model()
    with pytest.raises(ShapeError, match=r"\(B, S\)"):
        greedy_decode(model, torch.tensor([5, 6, EOS_ID]), GREEDY)
    with pytest.raises(ShapeError):
        greedy_decode(model, torch.zeros(0, 3, dtype=torch.int64), GREEDY)
    lm = Transformer(ModelConfig(0, 16, 32, 4, 64, 0, 2, dropout=0.0, arch="decoder-only"))
    with pytest.raises(ConfigError, match="encoder-decoder"):
        greedy_decode(lm, pad([[5, EOS_ID]]), GREEDY)


@pytest.mark.parametrize(
    "fields",
    [
        dict(strategy="nucleus"),
        dict(beam_size=0),
        dict(n_best=5, beam_size=4),
        dict(strategy="greedy", n_best=2),
        dict(length_penalty=-0.1),
        dict(max_len_b=-1),
        dict(temperature=0.0),
        dict(top_k=-1),
        dict(top_p=0.0),
        dict(top_p=1.5),
        dict(length_penalty=10.5),  # past MAX_LENGTH_PENALTY: the penalty of a long output overflows float32
        dict(length_penalty="1"),  # a string where a number goes, as a JSON body or a Python caller may send it
        dict(length_penalty=True),
        dict(temperature="1"),
        dict(max_len_a="1"),
        dict(min_len_a="1"),
        dict(top_p="0.5"),
    ],
)
def test_decode_config_rejects_bad_values(fields: dict) -> None:
    with pytest.raises(ConfigError):
        DecodeConfig(**fields)


def test_the_largest_length_penalty_keeps_every_engines_penalty_finite() -> None:
    """At α = MAX_LENGTH_PENALTY an output of 4096 tokens has a finite GNMT penalty ((5 + |Y|) / 6)^α in float32
    (the torch engine's) and a finite |Y|^α in float32 (what CTranslate2 divides its scores by); α = 11 does not."""
    from dotformer.decoding.config import MAX_LENGTH_PENALTY
    from dotformer.decoding.hypothesis import length_penalty

    longest = torch.tensor(4096)
    assert torch.isfinite(length_penalty(longest, MAX_LENGTH_PENALTY))
    assert torch.isfinite(longest.float() ** MAX_LENGTH_PENALTY)
    assert not torch.isfinite(longest.float() ** (MAX_LENGTH_PENALTY + 1))
    assert DecodeConfig(length_penalty=MAX_LENGTH_PENALTY).length_penalty == MAX_LENGTH_PENALTY
    with pytest.raises(ConfigError) as caught:
        DecodeConfig(length_penalty=1000.0)
    assert str(caught.value) == f"DecodeConfig.length_penalty must be at most {MAX_LENGTH_PENALTY:g}, got 1000.0"
    with pytest.raises(ConfigError) as caught:
        DecodeConfig(temperature="1")
    assert str(caught.value) == "DecodeConfig.temperature must be a finite number > 0, got '1'"


def test_beam_rows_sharing_one_memory_row_decode_as_if_it_were_expanded() -> None:
    """IncrementalDecoder(rows_per_source=K) over B memory rows == the memory expanded to B·K rows, through steps,
    beam reordering and dropping a finished sentence; and Transformer.decode refuses a non-multiple of B rows."""
    from dotformer.decoding.incremental import IncrementalDecoder, encode_source, expand_rows

    model = random_model(seed=3)
    src = pad(sources_of_mixed_lengths(count=3))  # (3, S)
    K = 2
    with torch.inference_mode():
        source = encode_source(model, src, DecodeConfig())
        grouped = IncrementalDecoder(model, source.memory, source.src_mask, rows_per_source=K)
        expanded = IncrementalDecoder(model, expand_rows(source.memory, K), expand_rows(source.src_mask, K))
        tokens = torch.full((3 * K,), BOS_ID)
        for step in range(4):
            log_probs = grouped.step(tokens)  # (N, V)
            torch.testing.assert_close(log_probs, expanded.step(tokens), atol=1e-5, rtol=1e-5)
            tokens = log_probs.argmax(-1)
            if step == 1:  # beams swap within each sentence
                index = torch.tensor([1, 0, 2, 2, 5, 4])
                grouped.reorder(index)
                expanded.reorder(index)
                tokens = tokens[index]
            if step == 2:  # sentence 1 finished: keep sentences 0 and 2, rows in any order within a sentence
                index = torch.tensor([1, 0, 4, 5])
                grouped.select(index)
                expanded.select(index)
                tokens = tokens[index]
        assert grouped.memory.size(0) == 2 and expanded.memory.size(0) == 4
        with pytest.raises(ShapeError, match="each 2 consecutive entries must be rows of one sentence"):
            grouped.select(torch.tensor([1, 2]))  # one row of sentence 0, one of sentence 1
        with pytest.raises(ShapeError, match=r"N = 2 rows per memory row × 2 memory rows"):
            grouped.step(torch.full((3,), BOS_ID))
        with pytest.raises(ConfigError, match="rows_per_source"):
            IncrementalDecoder(model, source.memory, source.src_mask, rows_per_source=0)
        with pytest.raises(ShapeError, match="tgt may hold a multiple of B rows"):
            model.decode(torch.full((5, 1), BOS_ID), source.memory, source.src_mask)


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_left_padded_sources_are_refused_not_silently_decoded(strategy: str) -> None:
    """[[0, 0, 5, 6, 2]] would decode differently from [[5, 6, 2]] (positions shift): it is refused, naming the row."""
    model = random_model()
    config = DecodeConfig(strategy=strategy, max_len_b=4)
    with pytest.raises(ShapeError, match=r"src must be right-padded .* row 1 .* \[0, 0, 5, 6, 2\]"):
        decode_batch(model, torch.tensor([[5, 6, 7, 8, 2], [0, 0, 5, 6, 2]]), config)
    right = decode_batch(model, torch.tensor([[5, 6, 7, 8, 2], [5, 6, 2, 0, 0]]), config)
    assert right[1][0].tokens == decode_batch(model, torch.tensor([[5, 6, 2]]), config)[0][0].tokens
