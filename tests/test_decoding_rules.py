"""Minimum length and forced target prefixes (decoding/rules.py), on hand-set scores and on real models."""

from __future__ import annotations

import math

import pytest
import torch
from decoding_support import pad, random_model, sources_of_mixed_lengths, teacher_forced_log_probs, with_eos

from dotformer.data.tokenize.tokenizers import EOS_ID, PAD_ID
from dotformer.decoding import DecodeConfig, decode_batch
from dotformer.decoding.rules import StepRules, forbid_eos_before, force_prefix
from dotformer.errors import ConfigError, ShapeError

# Hand-set scores: the generator ignores the decoder (weight 0) and its bias is these logits, so every step's
# distribution is log_softmax(SCORES) whatever the source and prefix. EOS (id 2) is the most likely token, then 5.
SCORES = [0.0, 0.0, 3.0, 0.0, 1.0, 2.0, 0.5, 0.0]
LOG_P = torch.tensor(SCORES).log_softmax(-1).tolist()


def set_score_model() -> torch.nn.Module:
    """A tiny model whose next-token log-probabilities are always ``LOG_P``."""
    model = random_model(vocab=len(SCORES), tie_output=False, generator_bias=True)
    with torch.no_grad():
        model.generator.weight.zero_()
        model.generator.bias.copy_(torch.tensor(SCORES))
    return model


STRATEGIES = [
    DecodeConfig(strategy="greedy"),
    DecodeConfig(strategy="beam", beam_size=3, length_penalty=0.0),
    DecodeConfig(strategy="sample", seed=1, top_k=1),
]


def test_forbid_eos_before_masks_only_rows_under_their_minimum() -> None:
    log_probs = torch.zeros(3, 5)
    out = forbid_eos_before(log_probs, 2, torch.tensor([0, 2, 3]))
    assert out[:, EOS_ID].tolist() == [0.0, 0.0, -math.inf]
    assert bool((out[:, [0, 1, 3, 4]] == 0).all())


def test_force_prefix_keeps_the_forced_tokens_log_prob_and_nothing_else() -> None:
    log_probs = torch.tensor([[-1.0, -2.0, -3.0, -4.0, -5.0], [-1.0, -2.0, -3.0, -4.0, -5.0]])
    out = force_prefix(log_probs.clone(), 0, torch.tensor([[4, 3], [PAD_ID, PAD_ID]]))
    assert out[0].tolist() == [-math.inf, -math.inf, -math.inf, -math.inf, -5.0]
    assert out[1].tolist() == log_probs[1].tolist()  # no prefix: unchanged
    assert force_prefix(log_probs.clone(), 2, torch.tensor([[4, 3]] * 2)).tolist() == log_probs.tolist()


def test_step_rules_follow_each_rows_sentence() -> None:
    rules = StepRules(torch.tensor([0, 5]), torch.tensor([[4], [PAD_ID]]))
    out = rules.apply(torch.zeros(3, 6), 0, torch.tensor([1, 0, 1]))
    assert out[0, EOS_ID] == -math.inf and out[2, EOS_ID] == -math.inf  # sentence 1: min_len 5
    assert out[1].tolist() == [-math.inf] * 4 + [0.0, -math.inf]  # sentence 0: forced token 4


@pytest.mark.parametrize("config", STRATEGIES, ids=lambda c: c.strategy)
def test_min_len_holds_eos_back_on_set_scores(config: DecodeConfig) -> None:
    model = set_score_model()
    src = pad([[4, 5, EOS_ID]])
    assert decode_batch(model, src, config)[0][0].tokens == []  # EOS is the best first token
    hyp = decode_batch(model, src, config.replace(min_len_b=3))[0][0]
    assert hyp.tokens == [5, 5, 5]  # the best non-EOS token three times, then EOS (the best again)
    assert hyp.log_probs == pytest.approx([LOG_P[5]] * 3 + [LOG_P[EOS_ID]])
    assert hyp.finished


def test_min_len_a_scales_with_the_source_length() -> None:
    model = set_score_model()
    config = DecodeConfig(strategy="greedy", min_len_a=1.0, min_len_b=1)
    hyps = decode_batch(model, pad([[4, EOS_ID], [4, 4, 4, EOS_ID]]), config)
    assert [len(h[0].tokens) for h in hyps] == [3, 5]  # floor(1.0 · |X| + 1), |X| counting the source's EOS


def test_the_maximum_length_wins_over_the_minimum() -> None:
    hyp = decode_batch(
        set_score_model(), pad([[4, EOS_ID]]), DecodeConfig(strategy="greedy", max_len_a=0.0, max_len_b=2, min_len_b=5)
    )[0][0]
    assert hyp.tokens == [5, 5] and not hyp.finished


@pytest.mark.parametrize("config", STRATEGIES, ids=lambda c: c.strategy)
def test_prefix_is_forced_scored_and_kept_on_set_scores(config: DecodeConfig) -> None:
    model = set_score_model()
    hyps = decode_batch(model, pad([[4, EOS_ID], [5, EOS_ID]]), config, prefix=pad([[7, 3], [6]]))
    assert hyps[0][0].tokens == [7, 3] and hyps[1][0].tokens == [6]  # forced, then EOS, the best token
    assert hyps[0][0].log_probs == pytest.approx([LOG_P[7], LOG_P[3], LOG_P[EOS_ID]])
    assert hyps[1][0].log_probs == pytest.approx([LOG_P[6], LOG_P[EOS_ID]])


@pytest.mark.parametrize("config", STRATEGIES, ids=lambda c: c.strategy)
def test_prefix_matches_the_uncached_forced_pass(config: DecodeConfig) -> None:
    model = random_model(vocab=12, seed=2)
    sources = sources_of_mixed_lengths(count=4)
    prefixes = [[5, 9], [], [7], [4, 4, 6]]
    config = config.replace(max_len_a=0.0, max_len_b=8)
    hyps = decode_batch(model, pad(sources), config, prefix=pad([p or [PAD_ID] for p in prefixes]))
    uncached = decode_batch(
        model, pad(sources), config.replace(use_cache=False), prefix=pad([p or [PAD_ID] for p in prefixes])
    )
    for source, prefix, best, slow in zip(sources, prefixes, hyps, uncached, strict=True):
        generated = with_eos(best[0])
        assert generated[: len(prefix)] == prefix
        assert best[0].tokens == slow[0].tokens
        assert best[0].log_probs == pytest.approx(teacher_forced_log_probs(model, source, generated), abs=1e-5)


def test_a_bad_prefix_is_refused_with_a_clear_error() -> None:
    model, src = set_score_model(), pad([[4, EOS_ID]])
    with pytest.raises(ShapeError, match="BOS or EOS"):
        decode_batch(model, src, DecodeConfig(strategy="greedy"), prefix=pad([[4, EOS_ID]]))
    with pytest.raises(ShapeError, match="prefix of sentence 0 has 3 tokens"):
        decode_batch(model, src, DecodeConfig(strategy="greedy", max_len_a=0.0, max_len_b=3), prefix=pad([[4, 4, 4]]))
    with pytest.raises(ShapeError, match="B = 1 sentences"):
        decode_batch(model, src, DecodeConfig(strategy="greedy"), prefix=pad([[4], [4]]))


@pytest.mark.parametrize("field, value", [("min_len_a", -1.0), ("min_len_b", -1), ("min_len_b", 1.5)])
def test_min_len_fields_are_validated(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=f"DecodeConfig.{field}"):
        DecodeConfig(**{field: value})  # type: ignore[arg-type]
