"""Generation from a decoder-only model: cached == uncached (also across window jumps), seeds, top-k / top-p on a
hand-made distribution, greedy and beam, the prompt and text conventions, bad input."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from dotformer.data.tokenize.tokenizer_files import train_tokenizer
from dotformer.data.tokenize.tokenizers import EOS_ID
from dotformer.decoding.config import generation_config
from dotformer.decoding.generate import ContextWindow, generate
from dotformer.decoding.inputs import encode_prompt, generated_text
from dotformer.errors import ConfigError, ShapeError

pytestmark = pytest.mark.numerical  # run again under another vector unit by scripts/test.sh

PROMPT = [2, 5, 6, 7]


@pytest.fixture
def lm(make_model):
    return make_model(arch="decoder-only", dropout=0.0, max_len=64)


def fixed_distribution_model(make_model, logits: list[float]):
    """A decoder-only model whose next-token logits are ``logits`` whatever the context (zero generator weights,
    the logits as the generator's bias)."""
    model = make_model(arch="decoder-only", tie_output=False, generator_bias=True)
    with torch.no_grad():
        model.generator.weight.zero_()
        model.generator.bias.copy_(torch.tensor(logits))
    return model


@pytest.mark.parametrize(
    ("strategy", "settings"),
    [("greedy", {}), ("sample", dict(n=3, top_k=5, seed=3)), ("sample", dict(top_p=0.8, temperature=0.7, seed=1)),
     ("beam", dict(n=2, beam_size=3))],
)  # fmt: skip
def test_cached_equals_uncached_across_window_jumps(lm, strategy: str, settings: dict) -> None:
    cached = generate(lm, PROMPT, generation_config(40, strategy, **settings), window=8)
    uncached = generate(lm, PROMPT, generation_config(40, strategy, use_cache=False, **settings), window=8)
    assert [g.tokens for g in cached] == [g.tokens for g in uncached]
    for a, b in zip(cached, uncached, strict=True):
        assert a.log_probs == pytest.approx(b.log_probs, abs=1e-5)


def test_the_window_is_what_the_model_reads(lm) -> None:
    """After the jump at W + 1 tokens the model reads the newest W // 2 tokens: its log-probabilities are those of
    a plain forward pass over exactly them."""
    window = ContextWindow(lm, window=6, use_cache=True)
    tokens = torch.tensor([[4, 5, 6, 7, 8, 9]])
    with torch.inference_mode():
        window.feed(tokens)
        out = window.feed(torch.tensor([[10]]))  # 7 tokens > W = 6: keep the newest 3
        expected = lm(tgt=torch.tensor([[8, 9, 10]]))[:, -1].log_softmax(-1)
    assert window.start == 4
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_a_long_prompt_keeps_its_newest_window(lm) -> None:
    window = ContextWindow(lm, window=4, use_cache=False)
    with torch.inference_mode():
        out = window.feed(torch.tensor([[4, 5, 6, 7, 8, 9]]))
        expected = lm(tgt=torch.tensor([[6, 7, 8, 9]]))[:, -1].log_softmax(-1)
    torch.testing.assert_close(out, expected)


def test_seeds_reproduce_and_differ(lm) -> None:
    def draw(seed: int) -> list[list[int]]:
        return [g.tokens for g in generate(lm, PROMPT, generation_config(30, "sample", n=2, seed=seed))]

    assert draw(7) == draw(7)
    assert draw(7) != draw(8)


def test_greedy_takes_the_argmax_and_scores_are_the_models(make_model) -> None:
    logits = [0.0, 0.0, 0.5, 0.2, 3.0, 1.0, 0.1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    model = fixed_distribution_model(make_model, logits)
    (g,) = generate(model, PROMPT, generation_config(5, "greedy"))
    assert g.tokens == [4] * 5
    expected = torch.tensor(logits).log_softmax(-1)[4].item()
    assert g.log_probs == pytest.approx([expected] * 5, abs=1e-6)


def test_top_k_and_top_p_on_a_hand_made_distribution(make_model) -> None:
    """p ∝ exp(logits) over tokens 4..8 is (0.4, 0.3, 0.15, 0.1, 0.05) (others ~0): top-k 2 draws only 4 and 5 in
    the ratio 4 : 3; top-p 0.8 keeps 4, 5, 6 (0.4 + 0.3 < 0.8 ≤ 0.85), in the ratio 0.4 : 0.3 : 0.15."""
    probs = {4: 0.4, 5: 0.3, 6: 0.15, 7: 0.1, 8: 0.05}
    logits = [math.log(probs[i]) if i in probs else -30.0 for i in range(13)]
    model = fixed_distribution_model(make_model, logits)

    def counts(**settings) -> Counter[int]:
        out = generate(model, [EOS_ID], generation_config(50, "sample", n=40, seed=0, **settings))
        return Counter(token for g in out for token in g.tokens)

    top_k = counts(top_k=2)
    assert set(top_k) == {4, 5} and top_k[4] / sum(top_k.values()) == pytest.approx(4 / 7, abs=0.03)
    top_p = counts(top_p=0.8)
    assert set(top_p) == {4, 5, 6}
    assert top_p[6] / sum(top_p.values()) == pytest.approx(0.15 / 0.85, abs=0.03)
    everything = counts()
    assert set(everything) == {4, 5, 6, 7, 8}
    cold = counts(temperature=0.25)  # p^4: token 4 takes 0.4^4 / Σ p^4 ≈ 0.73 of the draws
    assert cold[4] / sum(cold.values()) == pytest.approx(0.4**4 / sum(p**4 for p in probs.values()), abs=0.03)


def test_beam_search_finds_the_best_line_end(make_model) -> None:
    """With EOS the most likely token, every beam ends at once: the best hypothesis is the empty line."""
    logits = [0.0, 0.0, 2.0, 0.0, 1.0] + [0.0] * 8
    model = fixed_distribution_model(make_model, logits)
    best, second = generate(model, PROMPT, generation_config(10, "beam", n=2, beam_size=2))
    lp = torch.tensor(logits).log_softmax(-1)
    assert best.tokens == [] and best.score == pytest.approx(lp[EOS_ID].item(), abs=1e-5)
    assert second.tokens == [4] and second.score == pytest.approx((lp[4] + lp[EOS_ID]).item(), abs=1e-5)


def test_prompt_and_text_conventions() -> None:
    tokenizer = train_tokenizer("char", ["ab"])
    a, b = tokenizer.encode("a")[0], tokenizer.encode("b")[0]
    assert encode_prompt(tokenizer, "ab\nb") == [EOS_ID, a, b, EOS_ID, b]
    assert encode_prompt(tokenizer, "") == [EOS_ID]
    assert generated_text(tokenizer, [a, EOS_ID, b, b, EOS_ID]) == "a\nbb\n"


def test_bad_input_is_refused(lm, make_model) -> None:
    with pytest.raises(ConfigError, match="decoder-only"):
        generate(make_model(), PROMPT)
    with pytest.raises(ShapeError, match="outside the vocabulary"):
        generate(lm, [5, 99])
    with pytest.raises(ConfigError, match="max_new_tokens"):
        generation_config(0)
    with pytest.raises(ConfigError, match="top_p"):
        generation_config(5, top_p=0.0)
    with pytest.raises(ConfigError, match="window"):
        generate(lm, PROMPT, window=1)


def test_length_penalty_and_stop_rule_rank_generations_as_the_formula_says(make_model) -> None:
    """On a fixed distribution (token 4: about 0.9, EOS: 0.05, every other token 0.005), K = 2, 6 new tokens at
    most. The rule "finished" stops after step 2 with the two EOS candidates [] and [4]: α = 0 ranks them by summed
    log-probability ([] first), α = 1 divides by lp(|Y|) = (5 + |Y|) / 6 and puts [4] first. The rule "exact" waits
    until no alive beam can enter the two best: [4] x 6, cut at the limit, is the best under either α, a better
    score than the rule "finished" finds. Every list is ranked by score / lp(|Y|)^α, best first."""
    from dotformer.api.generation import generation_settings
    from dotformer.decoding.hypothesis import length_penalty

    probs = [1e-13, 1e-13, 0.05, 0.05 / 10, 0.9] + [0.05 / 10] * 8
    logits = [math.log(p) for p in probs]
    model = fixed_distribution_model(make_model, logits)
    lp = torch.tensor(logits).log_softmax(-1)
    eos, four = lp[EOS_ID].item(), lp[4].item()

    def searched(alpha: float, stop: str) -> list[tuple[list[int], float]]:
        config = generation_settings(6, "beam", 2, beam_size=2, length_penalty=alpha, beam_stop=stop)
        found = generate(model, PROMPT, config)
        ranked = [g.score / length_penalty(len(g.log_probs), alpha).item() for g in found]
        assert ranked == sorted(ranked, reverse=True)  # best first, by the length-penalised score
        return [(g.tokens, score) for g, score in zip(found, ranked, strict=True)]

    assert searched(0.0, "finished") == [([], pytest.approx(eos, abs=1e-5)), ([4], pytest.approx(four + eos, abs=1e-5))]
    assert searched(1.0, "finished") == [
        ([4], pytest.approx((four + eos) / (7 / 6), abs=1e-5)),
        ([], pytest.approx(eos, abs=1e-5)),
    ]
    for alpha, finished_best in [(0.0, eos), (1.0, (four + eos) / (7 / 6))]:
        best, _ = searched(alpha, "exact")
        assert best == ([4] * 6, pytest.approx(6 * four / (11 / 6) ** alpha, abs=1e-5))
        assert best[1] > finished_best  # the exact rule's best is never worse: here it is better
