"""Beam search with the GNMT length penalty (paper §6.1: beam size 4, α = 0.6, max length = input length + 50).

Each sentence keeps K unfinished ("alive") hypotheses and up to K finished ones. One step:

1. Every alive hypothesis proposes every next token: K·V candidates scored by summed log-probability.
2. The best 2K candidates are taken. Those among the best K that end with EOS become finished, scored by
   log P(Y | X) / lp(|Y|); the best K candidates that do not end with EOS are the new alive beams (2K candidates
   always hold at least K of them, since each alive beam has one EOS candidate).
3. The finished hypotheses, old and new, are ranked by score and the best K are kept.

The cache follows the alive beams with :meth:`IncrementalDecoder.reorder`. A finished hypothesis ends with exactly
one EOS (EOS candidates never stay alive). With K = 1 and α = 0 this is greedy decoding.

When to stop (per sentence). ``DecodeConfig.beam_stop`` picks the rule; both stop at L_max steps, where the alive
hypotheses are finalised as they are (no EOS), scored with lp(L_max), and compete with the finished ones. Neither
rule depends on ``n_best``, so neither does the best hypothesis.

``"finished"`` (the default): the search stops once K hypotheses have finished (counting every EOS among the best
K candidates of every step, also those that did not stay among the kept K). This is fairseq's rule and
CTranslate2's with ``patience`` 1 (its ``BeamSearch`` stops once ``round(K · patience)`` hypotheses have finished).
The step that brings the count to K may finish several, so up to 2K - 1 have finished; the best K by score are
kept (CTranslate2 ranks all of them; fairseq keeps the first K, the best of the last step). A hypothesis that would
finish later with a better score is not waited for: with α > 0 a longer one is divided by a larger penalty and can
overtake, so this rule may return a worse best output than the exact one (on the trained G2P model's test
split, beam 4: WER 28.89 against the exact rule's 28.84, docs/benchmarks.md).

``"exact"``: the search runs until no alive hypothesis can still enter the K best finished ones. Alive hypothesis h
has summed log-probability s ≤ 0 after t steps. Any output that grows from it has summed log-probability s' ≤ s
(log-probabilities are ≤ 0) and a final length L' ≤ L_max (the sentence's ``max_output_length``). For α ≥ 0 the
penalty lp(L) = ((5 + L) / 6)^α grows with L, so

    s' / lp(L') ≤ s / lp(L') ≤ s / lp(L_max)        (s ≤ 0, and 0 < lp(L') ≤ lp(L_max))

The bound is reached when the model puts probability 1 on every further token up to L_max, so no smaller bound
holds in general. Comparing s / lp(t) instead (the current length) would stop too early when α > 0: a longer
continuation is divided by a larger penalty and can overtake. The search of a sentence therefore stops when it holds K
finished hypotheses and max_h s_h / lp(L_max) ≤ the K-th finished score: no alive hypothesis can still enter the
kept finished set; its K best are then the K best outputs of the beam's search. Because the bound divides by
lp(L_max), a search waits longer for a larger L_max (its steps after the K-th finished hypothesis grow about as
L_max^α); L_max is capped at the model's positions (:func:`~dotformer.decoding.incremental.output_positions`), so a
limit beyond them costs nothing more.

A finished sentence leaves the batch (its rows are dropped from the cache), so a batch costs what its longest search
costs, not B times that. Shapes: B' sentences still searching, K beams, t steps so far, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from dotformer.data.tokenize.tokenizers import BOS_ID, EOS_ID, PAD_ID
from dotformer.decoding.config import DecodeConfig
from dotformer.decoding.controls import NO_CONTROLS, Controls
from dotformer.decoding.hypothesis import Hypothesis, length_penalty, make_hypothesis
from dotformer.decoding.incremental import IncrementalDecoder, encode_source, inference
from dotformer.decoding.rules import step_rules
from dotformer.model import Transformer

NEG_INF = float("-inf")


@dataclass
class BeamState:
    """Everything beam search knows about the sentences it is still searching, after t steps."""

    sentence: Tensor  # (B',) int64: index in the input batch of each sentence still searching
    max_len: Tensor  # (B',) int64: L_max, decoding steps allowed for each sentence (EOS included)
    alive_tokens: Tensor  # (B', K, t) int64: tokens of the unfinished hypotheses (no BOS, no EOS)
    alive_log_probs: Tensor  # (B', K, t) float32: the model's log-probability of each of those tokens
    alive_scores: Tensor  # (B', K) float32: summed log-probability of each unfinished hypothesis; -inf = empty beam
    finished_tokens: Tensor  # (B', K, t) int64: finished hypotheses (EOS last, unless cut at L_max), PAD after
    finished_log_probs: Tensor  # (B', K, t) float32: per-token log-probabilities, 0 after the end
    finished_lengths: Tensor  # (B', K) int64: |Y|, steps in each finished hypothesis (EOS included)
    finished_scores: Tensor  # (B', K) float32: log P / lp(|Y|), sorted best first; -inf = empty slot
    finished_count: Tensor  # (B',) int64: hypotheses finished so far, those no longer among the kept K included

    @property
    def steps(self) -> int:
        """t, the number of tokens generated so far by every alive hypothesis."""
        return self.alive_tokens.size(-1)

    def select(self, keep: Tensor) -> BeamState:
        """The state of the sentences ``keep`` ((B'',) int64 indices into B') only."""
        return BeamState(*(getattr(self, f).index_select(0, keep) for f in self.__dataclass_fields__))


def initial_state(max_len: Tensor, beam_size: int) -> BeamState:
    """The state before the first step: one empty alive hypothesis per sentence (score 0), the other K-1 beams empty
    (-inf, so the first step does not propose K copies of the same token), no finished hypotheses.

    Args:
        max_len: (B,) int64 L_max per sentence.
        beam_size: K.
    """
    B, K, device = max_len.size(0), beam_size, max_len.device
    alive_scores = torch.full((B, K), NEG_INF, device=device)  # (B, K)
    alive_scores[:, 0] = 0.0
    return BeamState(
        sentence=torch.arange(B, device=device),
        max_len=max_len,
        alive_tokens=torch.zeros(B, K, 0, dtype=torch.int64, device=device),
        alive_log_probs=torch.zeros(B, K, 0, device=device),
        alive_scores=alive_scores,
        finished_tokens=torch.zeros(B, K, 0, dtype=torch.int64, device=device),
        finished_log_probs=torch.zeros(B, K, 0, device=device),
        finished_lengths=torch.zeros(B, K, dtype=torch.int64, device=device),
        finished_scores=torch.full((B, K), NEG_INF, device=device),
        finished_count=torch.zeros(B, dtype=torch.int64, device=device),
    )


def flatten_beam_dim(x: Tensor) -> Tensor:
    """(B', K, ...) -> (B'·K, ...): the layout of the decoder's rows (sentence b owns rows b·K .. b·K + K - 1)."""
    return x.reshape(x.size(0) * x.size(1), *x.shape[2:])  # (B'·K, ...)


def unflatten_beam_dim(x: Tensor, beam_size: int) -> Tensor:
    """(B'·K, ...) -> (B', K, ...), the inverse of :func:`flatten_beam_dim`."""
    return x.reshape(x.size(0) // beam_size, beam_size, *x.shape[1:])  # (B', K, ...)


def gather_beams(x: Tensor, index: Tensor) -> Tensor:
    """Pick beams per sentence: out[b, j] = x[b, index[b, j]].

    Args:
        x: (B', K_in, ...) any per-beam tensor.
        index: (B', K_out) int64 beam indices in [0, K_in).

    Returns:
        (B', K_out, ...).
    """
    B, K_in = x.size(0), x.size(1)
    rows = torch.arange(B, device=x.device)[:, None] * K_in + index  # (B', K_out) rows of the flattened x
    return flatten_beam_dim(x)[rows]  # (B', K_out, ...)


def pad_steps(x: Tensor, steps: int, value: float) -> Tensor:
    """(B', K, t) -> (B', K, steps) by appending ``value`` along the last (time) dimension."""
    return F.pad(x, (0, steps - x.size(-1)), value=value)  # (B', K, steps)


def best_possible_score(alive_scores: Tensor, max_len: Tensor, alpha: float) -> Tensor:
    """The highest length-penalised score any continuation of the alive hypotheses can reach (see module docstring).

    Args:
        alive_scores: (B', K) float32 summed log-probabilities (≤ 0; -inf for empty beams).
        max_len: (B',) int64 L_max per sentence.
        alpha: α ≥ 0.

    Returns:
        (B',) float32: max_k alive_scores[b, k] / lp(L_max[b]).
    """
    return alive_scores.max(dim=1).values / length_penalty(max_len, alpha)  # (B',)


def merge_finished(state: BeamState, tokens: Tensor, log_probs: Tensor, lengths: Tensor, scores: Tensor) -> BeamState:
    """Add candidate finished hypotheses and keep the best K per sentence (best first).

    Args:
        state: the current state; its finished tensors have at most ``tokens.size(-1)`` steps.
        tokens: (B', C, t') int64 candidate tokens; log_probs: (B', C, t') float32; lengths: (B', C) int64 |Y|;
        scores: (B', C) float32 length-penalised scores, -inf for "not a candidate".

    Returns:
        The state with its finished fields replaced (every time dimension t').
    """
    steps, K = tokens.size(-1), state.finished_scores.size(1)
    all_tokens = torch.cat([pad_steps(state.finished_tokens, steps, PAD_ID), tokens], dim=1)  # (B', K + C, t')
    all_log_probs = torch.cat([pad_steps(state.finished_log_probs, steps, 0.0), log_probs], dim=1)  # (B', K + C, t')
    all_lengths = torch.cat([state.finished_lengths, lengths], dim=1)  # (B', K + C)
    all_scores = torch.cat([state.finished_scores, scores], dim=1)  # (B', K + C)
    best_scores, best = all_scores.topk(K, dim=1)  # (B', K), sorted best first
    state.finished_tokens = gather_beams(all_tokens, best)  # (B', K, t')
    state.finished_log_probs = gather_beams(all_log_probs, best)  # (B', K, t')
    state.finished_lengths = all_lengths.gather(1, best)  # (B', K)
    state.finished_scores = best_scores
    return state


def advance(
    state: BeamState,
    log_probs: Tensor,
    alpha: float,
    model_log_probs: Tensor | None = None,
    ends: Tensor | None = None,
) -> tuple[BeamState, Tensor]:
    """One step of beam search (steps 1-3 of the module docstring).

    Args:
        state: the state after t steps.
        log_probs: (B', K, V) float32 next-token scores of every alive beam (PAD and BOS at -inf): the model's
            log-probabilities, or with controls set the search's (:meth:`~dotformer.decoding.controls.Controls.scores`).
        alpha: the length penalty's α.
        model_log_probs: (B', K, V) the model's log-probabilities, which the hypotheses keep; None: ``log_probs``.
        ends: (E,) int64 the tokens that finish a hypothesis (EOS and the end tokens); None: EOS.

    Returns:
        The state after t + 1 steps, and ``origin`` (B', K) int64: the beam (in [0, K)) each new alive beam grew from,
        for reordering the cache.
    """
    B, K, V = log_probs.shape
    t1 = state.steps + 1
    candidates = (state.alive_scores[:, :, None] + log_probs).reshape(B, K * V)  # (B', K·V)
    top_scores, top_index = candidates.topk(2 * K, dim=1)  # (B', 2K)
    top_beam, top_token = top_index // V, top_index % V  # (B', 2K) each
    top_tokens = torch.cat([gather_beams(state.alive_tokens, top_beam), top_token[:, :, None]], dim=2)  # (B', 2K, t1)
    kept = log_probs if model_log_probs is None else model_log_probs
    token_log_prob = kept.reshape(B, K * V).gather(1, top_index)  # (B', 2K)
    top_log_probs = torch.cat([gather_beams(state.alive_log_probs, top_beam), token_log_prob[:, :, None]], dim=2)

    is_eos = top_token == EOS_ID if ends is None else torch.isin(top_token, ends)  # (B', 2K)
    in_beam = torch.arange(2 * K, device=log_probs.device) < K  # (2K,) the best K candidates form the next beam
    ends = is_eos & in_beam & torch.isfinite(top_scores)  # (B', 2K)
    penalised = top_scores / length_penalty(t1, alpha)  # (B', 2K)
    lengths = torch.full_like(top_index, t1)  # (B', 2K)
    state = merge_finished(
        state, top_tokens, top_log_probs, lengths, torch.where(ends, penalised, torch.full_like(penalised, NEG_INF))
    )
    state.finished_count = state.finished_count + ends.sum(dim=1)  # (B',)

    alive_scores, pick = torch.where(is_eos, torch.full_like(top_scores, NEG_INF), top_scores).topk(K, dim=1)  # (B', K)
    state.alive_tokens = gather_beams(top_tokens, pick)  # (B', K, t1)
    state.alive_log_probs = gather_beams(top_log_probs, pick)  # (B', K, t1)
    state.alive_scores = alive_scores
    return state, top_beam.gather(1, pick)  # (B', K)


def finalise_at_max_len(state: BeamState, alpha: float) -> tuple[BeamState, Tensor]:
    """Sentences that have used all their L_max steps: their alive hypotheses join the finished ones as they are.

    Returns:
        The state, and ``at_limit`` (B',) bool: which sentences reached L_max (their search is over).
    """
    t = state.steps
    at_limit = state.max_len <= t  # (B',)
    if bool(at_limit.any()):
        scores = state.alive_scores / length_penalty(t, alpha)  # (B', K)
        scores = torch.where(at_limit[:, None], scores, torch.full_like(scores, NEG_INF))
        lengths = torch.full_like(state.finished_lengths, t)  # (B', K)
        state = merge_finished(state, state.alive_tokens, state.alive_log_probs, lengths, scores)
    return state, at_limit


def is_done(state: BeamState, at_limit: Tensor, alpha: float, stop: str) -> Tensor:
    """(B',) bool: the sentences whose search is over (see the module docstring, "When to stop").

    Args:
        state: the state after a step. at_limit: (B',) bool, the sentences at L_max. alpha: the length penalty's α.
        stop: ``DecodeConfig.beam_stop``: "finished" (K hypotheses have finished) or "exact" (no alive beam can
            still enter the K best finished ones).
    """
    K = state.finished_scores.size(1)
    if stop == "finished":
        return at_limit | (state.finished_count >= K)
    worst_kept = state.finished_scores[:, -1]  # (B',) the K-th best finished score (-inf while fewer than K)
    bound = best_possible_score(state.alive_scores, state.max_len, alpha)  # (B',)
    hopeless = (bound <= worst_kept) & (torch.isfinite(worst_kept) | torch.isneginf(bound))  # (B',)
    return at_limit | hopeless


def hypotheses(state: BeamState, row: int, n_best: int, alpha: float, end_ids: Sequence[int] = ()) -> list[Hypothesis]:
    """The ``n_best`` best finished hypotheses of sentence row ``row`` of the state, best first (ranked by the
    search's scores; each scored with the log-probabilities it keeps). ``end_ids``: end tokens besides EOS."""
    scores = state.finished_scores[row].tolist()
    lengths = state.finished_lengths[row].tolist()
    tokens = state.finished_tokens[row].tolist()
    log_probs = state.finished_log_probs[row].tolist()
    out = []
    for k in range(len(scores)):
        if len(out) == n_best or scores[k] == NEG_INF:
            break
        n = lengths[k]
        out.append(make_hypothesis(tokens[k][:n], log_probs[k][:n], alpha, end_ids))
    return out


def beam_search(
    model: Transformer,
    src: Tensor,
    config: DecodeConfig | None = None,
    prefix: Tensor | None = None,
    controls: Controls = NO_CONTROLS,
) -> list[list[Hypothesis]]:
    """Beam search over a batch of sentences (B·K decoder rows), with the cache and the GNMT length penalty.

    Args:
        model: an encoder-decoder :class:`Transformer` (its training flag is restored afterwards).
        src: (B, S) int64 source ids (each ending with EOS), right-padded with PAD.
        config: ``beam_size`` K, ``n_best`` (≤ K), ``length_penalty`` α, ``beam_stop`` (when to stop), the length
            limits, ``use_cache``.
        prefix: None, or (B, P) int64 forced first tokens per sentence, right-padded with PAD (every hypothesis starts
            with them; the beam widens after them).
        controls: repetition penalty, no-repeat n-grams, suppressed sequences, end tokens
            (:mod:`dotformer.decoding.controls`).

    Returns:
        For each sentence, its ``n_best`` best hypotheses, best first (fewer only if the vocabulary is too small to
        fill the beam).

    Raises:
        ConfigError, ShapeError: the model cannot decode, or ``src`` is malformed or too long for the model.
    """
    config = config or DecodeConfig()
    K, alpha = config.beam_size, config.length_penalty
    results: list[list[Hypothesis]] = [[] for _ in range(src.size(0))]
    with inference(model):
        source = encode_source(model, src, config)
        rules = step_rules(source.min_len, source.max_len, prefix, controls.end_ids)
        decoder = IncrementalDecoder(model, source.memory, source.src_mask, config.use_cache, rows_per_source=K)
        state = initial_state(source.max_len, K)
        last = torch.full((src.size(0) * K,), BOS_ID, dtype=torch.int64, device=src.device)  # (B'·K,)
        ends = controls.ends(src.device)  # (E,)
        while True:
            history = flatten_beam_dim(state.alive_tokens)  # (B'·K, t)
            scores, log_probs = controls.scores(decoder.step_logits(last), history, normalised=bool(decoder.members))
            scores = rules.apply(scores, state.steps, state.sentence.repeat_interleave(K))  # (B'·K, V)
            state, origin = advance(
                state, unflatten_beam_dim(scores, K), alpha, unflatten_beam_dim(log_probs, K), ends
            )  # (B', K, V) in
            state, at_limit = finalise_at_max_len(state, alpha)
            done = is_done(state, at_limit, alpha, config.beam_stop)  # (B',)
            for row in done.nonzero().squeeze(1).tolist():
                results[int(state.sentence[row])] = hypotheses(state, row, config.n_best, alpha, controls.end_ids)
            if bool(done.all()):
                break
            rows = flatten_beam_dim(torch.arange(origin.size(0), device=src.device)[:, None] * K + origin)  # (B'·K,)
            if bool(done.any()):
                keep = (~done).nonzero().squeeze(1)  # (B'',)
                state = state.select(keep)
                decoder.select(unflatten_beam_dim(rows, K)[keep].flatten())
            else:
                decoder.reorder(rows)
            last = flatten_beam_dim(state.alive_tokens[:, :, -1])  # (B'·K,)
    return results
