"""Beam search: against greedy, against exhaustive search, against running without early stopping, and its helpers."""

from __future__ import annotations

import itertools
import math
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
    teacher_forced_log_probs,
    with_eos,
)
from scripted_model import copy_model

from dotformer.data.tokenize.tokenizers import BOS_ID, EOS_ID, PAD_ID
from dotformer.decoding import DecodeConfig, beam_search, greedy_decode, length_penalty
from dotformer.decoding import beam as beam_module
from dotformer.decoding.beam import best_possible_score, flatten_beam_dim, gather_beams, unflatten_beam_dim

pytestmark = pytest.mark.numerical  # run again under another vector unit by scripts/test.sh


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    with single_thread():
        yield


@pytest.mark.parametrize("which", ["random", "copy"])
def test_beam_size_1_without_length_penalty_is_greedy(which: str) -> None:
    model = random_model(vocab=8) if which == "random" else copy_model()
    src = pad(sources_of_mixed_lengths(count=8))
    config = DecodeConfig(beam_size=1, length_penalty=0.0, max_len_b=6)
    beams = beam_search(model, src, config)
    greedy = greedy_decode(model, src, config.replace(strategy="greedy"))
    for (b,), (g,) in zip(beams, greedy, strict=True):
        assert b.tokens == g.tokens
        assert b.score == pytest.approx(g.score, abs=1e-5)
        assert b.log_probs == pytest.approx(g.log_probs, abs=1e-5)


@pytest.mark.parametrize("which", ["random", "copy"])
def test_best_hypothesis_does_not_depend_on_n_best(which: str) -> None:
    model = random_model(vocab=8) if which == "random" else copy_model()
    src = pad(sources_of_mixed_lengths(count=6))
    runs = [beam_search(model, src, DecodeConfig(beam_size=5, n_best=n, max_len_b=6)) for n in (1, 2, 5)]
    for per_sentence in zip(*runs, strict=True):
        lists = [[h.tokens for h in hyps] for hyps in per_sentence]
        assert [len(x) for x in lists] == [1, 2, 5]
        assert lists[0] == lists[1][:1] == lists[2][:1]
        assert lists[1] == lists[2][:2]


@pytest.mark.parametrize("alpha", [0.0, 0.6])
@pytest.mark.parametrize("which", ["random", "copy"])
def test_every_hypothesis_ends_with_exactly_one_eos_and_is_scored_by_its_log_probs(alpha: float, which: str) -> None:
    # the random model's hypotheses are mostly cut at the limit; the copy model's all finish, at different steps
    model = random_model(vocab=7) if which == "random" else copy_model()
    sources = sources_of_mixed_lengths(count=6)
    out = beam_search(model, pad(sources), DecodeConfig(beam_size=4, n_best=4, length_penalty=alpha, max_len_b=5))
    finished = 0
    for source, hyps in zip(sources, out, strict=True):
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True)
        for h in hyps:
            assert not {EOS_ID, PAD_ID, BOS_ID} & set(h.tokens)
            finished += h.finished
            full = with_eos(h)
            assert full.count(EOS_ID) == (1 if h.finished else 0)
            assert len(h.log_probs) == len(full)
            # the cache followed the right beam: the recorded log-probs are the model's given that very prefix
            assert h.log_probs == pytest.approx(teacher_forced_log_probs(model, source, full), abs=1e-5)
            assert h.score == pytest.approx(sum(h.log_probs) / ((5 + len(full)) / 6) ** alpha, abs=1e-5)
    if which == "copy":
        assert finished == 6 * 4


def test_copy_model_beam_search_copies() -> None:
    model = copy_model()
    g = torch.Generator().manual_seed(12)
    sources = random_sources(40, g, max_len=COPY_MAX_LEN)
    out = beam_search(model, pad([s + [EOS_ID] for s in sources]), DecodeConfig(beam_size=4, n_best=4))
    assert all(h.finished for hyps in out for h in hyps)
    assert [hyps[0].tokens for hyps in out] == sources  # the copy is the best output of every source
    assert all(len({tuple(h.tokens) for h in hyps}) == 4 for hyps in out)  # n-best outputs are distinct


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.5])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_early_stopping_finds_what_running_to_the_limit_finds(
    monkeypatch: pytest.MonkeyPatch, alpha: float, seed: int
) -> None:
    model = random_model(vocab=9, seed=seed)
    src = pad(sources_of_mixed_lengths(seed=seed, count=6))
    config = DecodeConfig(beam_size=3, n_best=3, length_penalty=alpha, max_len_b=8, beam_stop="exact")
    early = beam_search(model, src, config)
    monkeypatch.setattr(beam_module, "is_done", lambda state, at_limit, alpha, stop: at_limit)
    full = beam_search(model, src, config)
    for a, b in zip(early, full, strict=True):
        assert [h.tokens for h in a] == [h.tokens for h in b]


def test_dividing_by_the_current_length_penalty_would_stop_too_early(monkeypatch: pytest.MonkeyPatch) -> None:
    """With α > 0 a longer continuation is divided by a larger penalty: the bound must use lp(L_max), not lp(t)."""
    model = random_model(vocab=9, seed=3)  # a case found by search where the naive rule loses the best output
    src = pad(sources_of_mixed_lengths(seed=3, count=6)[:1])
    config = DecodeConfig(beam_size=3, n_best=1, length_penalty=1.5, max_len_b=8, beam_stop="exact")
    ((right,),) = beam_search(model, src, config)

    def naive_is_done(state: beam_module.BeamState, at_limit: torch.Tensor, alpha: float, stop: str) -> torch.Tensor:
        bound = state.alive_scores.max(dim=1).values / length_penalty(state.steps, alpha)
        worst = state.finished_scores[:, -1]
        return at_limit | ((bound <= worst) & torch.isfinite(worst))

    monkeypatch.setattr(beam_module, "is_done", naive_is_done)
    ((naive,),) = beam_search(model, src, config)
    assert right.score > naive.score + 0.1


def exhaustive_best(model: torch.nn.Module, source: list[int], max_len: int, alpha: float) -> list[tuple[float, list]]:
    """Every output of at most ``max_len`` steps (EOS-terminated, or cut at max_len), scored, best first."""
    vocab = model.config.tgt_vocab_size
    symbols = [t for t in range(vocab) if t not in (PAD_ID, BOS_ID, EOS_ID)]
    outputs = [[*body, EOS_ID] for n in range(max_len) for body in itertools.product(symbols, repeat=n)]
    outputs += [list(body) for body in itertools.product(symbols, repeat=max_len)]
    scored = []
    for out in outputs:
        total = sum(teacher_forced_log_probs(model, source, out))
        scored.append((total / ((5 + len(out)) / 6) ** alpha, out))
    return sorted(scored, key=lambda x: -x[0])


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_a_beam_as_wide_as_the_search_space_finds_the_exhaustive_best(alpha: float) -> None:
    model = random_model(vocab=6, seed=4)  # 3 non-EOS symbols (UNK, 4, 5): 121 outputs of at most 4 steps
    source = [4, 5, EOS_ID]
    config = DecodeConfig(beam_size=108, n_best=10, length_penalty=alpha, max_len_a=0.0, max_len_b=4)
    (hyps,) = beam_search(model, pad([source]), config)
    expected = exhaustive_best(model, source, 4, alpha)[:10]
    assert [with_eos(h) for h in hyps] == [out for _, out in expected]
    assert [h.score for h in hyps] == pytest.approx([s for s, _ in expected], abs=1e-5)


def test_best_possible_score_divides_by_the_penalty_at_the_length_limit() -> None:
    alive = torch.tensor([[-2.0, -1.0], [float("-inf"), -3.0]])
    max_len = torch.tensor([7, 1])
    bound = best_possible_score(alive, max_len, alpha=0.6)
    assert bound.tolist() == pytest.approx([-1.0 / 2**0.6, -3.0])  # lp(7) = 2^0.6, lp(1) = 1
    assert best_possible_score(alive, max_len, alpha=0.0).tolist() == [-1.0, -3.0]


def test_beam_helpers_move_whole_beams() -> None:
    x = torch.arange(2 * 3 * 2).reshape(2, 3, 2)  # (B'=2, K=3, t=2)
    assert flatten_beam_dim(x).shape == (6, 2)
    assert torch.equal(unflatten_beam_dim(flatten_beam_dim(x), 3), x)
    picked = gather_beams(x, torch.tensor([[2, 2], [0, 1]]))  # (2, 2, 2)
    assert picked.tolist() == [[[4, 5], [4, 5]], [[6, 7], [8, 9]]]


def hand_made_step(probs: dict[int, float], beams: int, vocab: int = 6) -> torch.Tensor:
    """(1, K, V) log-probabilities: every beam gives the tokens of ``probs`` their probability, the others none."""
    row = torch.full((vocab,), float("-inf"))
    for token, p in probs.items():
        row[token] = math.log(p)
    return row.expand(1, beams, vocab).clone()


def test_the_finished_rule_stops_once_k_hypotheses_have_finished() -> None:
    """K = 2, tokens a = 4 and b = 5. Step 1 from the one live beam: EOS 0.5, a 0.3, b 0.2: the best two candidates
    are EOS (finished, 1 of 2) and a; the beams are a and b. Step 2 from both: EOS 0.6, a 0.3, b 0.1: the best two
    candidates, a EOS (-1.71) and b EOS (-2.12), both finish: 3 have finished, the best 2 are kept, and the search
    stops by the finished rule; the exact rule goes on, as a a (-2.41) over lp(50) could still beat them (α = 1)."""
    a, b, alpha = 4, 5, 1.0
    state = beam_module.initial_state(torch.tensor([50]), beam_size=2)
    state, _ = beam_module.advance(state, hand_made_step({EOS_ID: 0.5, a: 0.3, b: 0.2}, 2), alpha)
    state, at_limit = beam_module.finalise_at_max_len(state, alpha)
    assert state.finished_count.tolist() == [1]
    assert state.alive_tokens[0].tolist() == [[a], [b]]
    assert not beam_module.is_done(state, at_limit, alpha, "finished").item()
    state, _ = beam_module.advance(state, hand_made_step({EOS_ID: 0.6, a: 0.3, b: 0.1}, 2), alpha)
    state, at_limit = beam_module.finalise_at_max_len(state, alpha)
    assert state.finished_count.tolist() == [3]
    lp1, lp2 = ((5 + 1) / 6) ** alpha, ((5 + 2) / 6) ** alpha
    expected = sorted([math.log(0.5) / lp1, (math.log(0.3) + math.log(0.6)) / lp2], reverse=True)
    assert state.finished_scores[0].tolist() == pytest.approx(expected)  # the best 2 of the 3 finished
    assert state.alive_scores[0].tolist() == pytest.approx([2 * math.log(0.3), math.log(0.2) + math.log(0.3)])
    assert beam_module.is_done(state, at_limit, alpha, "finished").item()
    assert not beam_module.is_done(state, at_limit, alpha, "exact").item()  # -2.41 / lp(50) > the 2nd's -1.47


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_finished_rule_stops_no_later_than_the_exact_rule(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """Both rules search the same beams step by step; the finished one stops at the first step where K hypotheses
    have finished (or at L_max), which the exact one never stops before (it needs K finished too)."""
    model = random_model(vocab=9, seed=seed)
    src = pad(sources_of_mixed_lengths(seed=seed, count=6))
    steps: dict[str, int] = {}
    real = beam_module.is_done

    def counting(state: beam_module.BeamState, at_limit: torch.Tensor, alpha: float, stop: str) -> torch.Tensor:
        done = real(state, at_limit, alpha, stop)
        if stop == "finished":
            first_k = (state.finished_count >= state.finished_scores.size(1)) | at_limit  # (B',)
            assert done.tolist() == first_k.tolist()
        steps[stop] = max(steps.get(stop, 0), state.steps)
        return done

    monkeypatch.setattr(beam_module, "is_done", counting)
    for stop in ("finished", "exact"):
        beam_search(model, src, DecodeConfig(beam_size=3, n_best=3, length_penalty=0.6, max_len_b=8, beam_stop=stop))
    assert steps["finished"] <= steps["exact"]
