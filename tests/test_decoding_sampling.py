"""Sampling: the filters by hand, the temperature by counting, top-k = 1 against greedy, and seeds."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import torch
from decoding_support import (
    pad,
    random_model,
    single_thread,
    sources_of_mixed_lengths,
    teacher_forced_log_probs,
    with_eos,
)
from scripted_model import copy_model

from dotformer.decoding import DecodeConfig, greedy_decode, sample
from dotformer.decoding.sampling import filter_top_k, filter_top_p, sampling_picker

pytestmark = pytest.mark.numerical  # run again under another vector unit by scripts/test.sh

INF = float("inf")


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    with single_thread():
        yield


def test_top_k_keeps_the_k_largest_logits() -> None:
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0]])
    assert filter_top_k(logits, 2).tolist() == [[-INF, 3.0, 2.0, -INF]]
    assert filter_top_k(logits, 0).tolist() == logits.tolist()  # 0 = off
    assert filter_top_k(logits, 9).tolist() == logits.tolist()


def test_top_p_keeps_the_smallest_set_reaching_p() -> None:
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()  # mass before each token: 0, 0.5, 0.8, 0.95
    kept = filter_top_p(logits, 0.7).softmax(-1)
    assert kept.tolist()[0] == pytest.approx([0.625, 0.375, 0.0, 0.0])  # 0.5 / 0.8, 0.3 / 0.8
    assert filter_top_p(logits, 0.5).softmax(-1).tolist()[0] == pytest.approx([1.0, 0.0, 0.0, 0.0])
    assert filter_top_p(logits, 0.81).softmax(-1).tolist()[0] == pytest.approx([0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0])
    shuffled = logits[:, [2, 0, 3, 1]]  # the filter works in vocabulary order, whatever the ranking
    assert torch.isinf(filter_top_p(shuffled, 0.7)).tolist() == [[True, False, True, False]]


def test_temperature_reshapes_the_distribution() -> None:
    probs = torch.tensor([0.5, 0.3, 0.2])
    log_probs = probs.log().expand(40_000, 3).clone()
    generator = torch.Generator().manual_seed(0)
    drawn = sampling_picker(DecodeConfig(strategy="sample", temperature=2.0), generator)(log_probs)
    frequencies = torch.bincount(drawn, minlength=3).float() / drawn.numel()
    expected = probs.sqrt() / probs.sqrt().sum()  # p^(1/T), renormalised: [0.415, 0.322, 0.263]
    assert frequencies.tolist() == pytest.approx(expected.tolist(), abs=0.01)


@pytest.mark.parametrize("which", ["random", "copy"])
@pytest.mark.parametrize("filters", [dict(top_k=1), dict(top_p=1e-6), dict(top_k=1, temperature=3.0)])
def test_a_filter_that_keeps_one_token_is_greedy(which: str, filters: dict) -> None:
    model = random_model() if which == "random" else copy_model()
    src = pad(sources_of_mixed_lengths(count=6))
    config = DecodeConfig(strategy="sample", max_len_b=6, seed=7, **filters)
    sampled = sample(model, src, config)
    greedy = greedy_decode(model, src, DecodeConfig(strategy="greedy", max_len_b=6))
    for (s,), (g,) in zip(sampled, greedy, strict=True):
        assert s.tokens == g.tokens
        assert s.log_probs == pytest.approx(g.log_probs, abs=1e-5)


def test_the_same_seed_gives_the_same_samples_and_another_seed_other_ones() -> None:
    model = random_model()
    src = pad(sources_of_mixed_lengths(count=6))
    config = DecodeConfig(strategy="sample", n_best=3, temperature=1.5, max_len_b=6, seed=1)
    first, again = sample(model, src, config), sample(model, src, config)
    other = sample(model, src, config.replace(seed=2))
    tokens = [[h.tokens for h in hyps] for hyps in first]
    assert tokens == [[h.tokens for h in hyps] for hyps in again]
    assert tokens != [[h.tokens for h in hyps] for hyps in other]


def test_samples_record_the_models_log_probs_and_come_sorted() -> None:
    model = random_model(vocab=8)
    sources = sources_of_mixed_lengths(count=4)
    config = DecodeConfig(strategy="sample", n_best=4, temperature=2.0, top_k=5, max_len_b=6, seed=3)
    for source, hyps in zip(sources, sample(model, pad(sources), config), strict=True):
        assert len(hyps) == 4
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        for h in hyps:
            assert all(math.isfinite(p) for p in h.log_probs)
            # the untempered, unfiltered model log-probabilities, comparable with greedy and beam scores
            assert h.log_probs == pytest.approx(teacher_forced_log_probs(model, source, with_eos(h)), abs=1e-5)
