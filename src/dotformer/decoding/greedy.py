"""Greedy decoding: at every step take the most likely next token, until EOS or the length limit.

The loop here (:func:`decode_left_to_right`) is shared with sampling, which only changes how a token is picked.
It decodes a batch of sentences together, one token per row and step with the key/value cache, and drops a row
from the batch as soon as it has produced EOS or reached its length limit, so long sentences do not make short
ones pay. Shapes follow the legend in :mod:`dotformer.attention`; N = number of rows being decoded.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from dotformer.data.tokenize.tokenizers import BOS_ID
from dotformer.decoding.config import DecodeConfig
from dotformer.decoding.controls import NO_CONTROLS, Controls, is_end
from dotformer.decoding.hypothesis import Hypothesis, make_hypothesis
from dotformer.decoding.incremental import IncrementalDecoder, encode_source, expand_rows, inference
from dotformer.decoding.rules import step_rules
from dotformer.model import Transformer

TokenPicker = Callable[[Tensor], Tensor]  # (N, V) float32 log-probabilities -> (N,) int64 chosen tokens


def pick_most_likely(log_probs: Tensor) -> Tensor:
    """(N, V) log-probabilities -> (N,) int64 argmax (the lowest id on ties)."""
    return log_probs.argmax(dim=-1)  # (N,)


def decode_left_to_right(
    model: Transformer,
    src: Tensor,
    config: DecodeConfig,
    pick: TokenPicker,
    copies: int = 1,
    prefix: Tensor | None = None,
    controls: Controls = NO_CONTROLS,
) -> list[list[Hypothesis]]:
    """Generate ``copies`` outputs per source sentence, one token per step, choosing each token with ``pick``.

    Args:
        model: an encoder-decoder :class:`Transformer`.
        src: (B, S) int64 source ids (each ending with EOS), right-padded with PAD.
        config: the length limit, length penalty (for the scores) and ``use_cache``.
        pick: chooses the next token of every row from its (N, V) log-probabilities (PAD and BOS are -inf).
        copies: outputs per sentence (independent samples; 1 for greedy).
        prefix: None, or (B, P) int64 forced first tokens per sentence, right-padded with PAD (see
            :mod:`dotformer.decoding.rules`); they are generated, scored and kept in the outputs.
        controls: repetition penalty, no-repeat n-grams, suppressed sequences, end tokens
            (:mod:`dotformer.decoding.controls`).

    Returns:
        For each of the B sentences, its ``copies`` hypotheses sorted by score (best first; stable for ties).

    Raises:
        ConfigError, ShapeError: the model cannot decode, or ``src`` is malformed or too long for the model.
    """
    with inference(model):
        source = encode_source(model, src, config)
        rules = step_rules(source.min_len, source.max_len, prefix, controls.end_ids)
        B = src.size(0)
        N = B * copies
        decoder = IncrementalDecoder(
            model, expand_rows(source.memory, copies), expand_rows(source.src_mask, copies), config.use_cache
        )
        max_len = expand_rows(source.max_len, copies)  # (N,)
        # one (N,) column per step taken, so memory and work follow the longest output, never the length limit
        token_columns: list[Tensor] = []
        log_prob_columns: list[Tensor] = []
        out_lengths = torch.zeros(N, dtype=torch.int64, device=src.device)  # (N,) steps taken per row
        active = torch.arange(N, device=src.device)  # (N',) the original row of each row still decoding
        last = torch.full((N,), BOS_ID, dtype=torch.int64, device=src.device)  # (N',)
        ends = controls.ends(src.device)  # (E,) EOS and the end tokens
        for t in range(int(max_len.max())):  # every row ends by its limit; most end at EOS long before
            history = None  # (N', t) the tokens so far, for the controls that read them
            if token_columns and controls.changes_logits:
                history = torch.stack(token_columns, dim=1)[active]
            scores, log_probs = controls.scores(decoder.step_logits(last), history, normalised=bool(decoder.members))
            scores = rules.apply(scores, t, active // copies)  # (N', V)
            token = pick(scores)  # (N',)
            token_columns.append(torch.zeros(N, dtype=torch.int64, device=src.device).index_copy(0, active, token))
            chosen = log_probs.gather(1, token[:, None]).squeeze(1)  # (N',) the model's log-probability
            log_prob_columns.append(torch.zeros(N, device=src.device).index_copy(0, active, chosen.float()))
            out_lengths[active] = t + 1
            done = is_end(token, ends) | (t + 1 >= max_len[active])  # (N',)
            if bool(done.all()):
                break
            if bool(done.any()):
                keep = (~done).nonzero().squeeze(1)  # (N'',)
                decoder.select(keep)
                active, token = active[keep], token[keep]
            last = token
        tokens = torch.stack(token_columns, dim=1).tolist()  # (N, steps taken)
        log_probs_list = torch.stack(log_prob_columns, dim=1).tolist()  # (N, steps taken)
        lengths = out_lengths.tolist()
    results: list[list[Hypothesis]] = []
    for b in range(B):
        rows = range(b * copies, (b + 1) * copies)
        hyps = [
            make_hypothesis(
                tokens[r][: lengths[r]], log_probs_list[r][: lengths[r]], config.length_penalty, controls.end_ids
            )
            for r in rows
        ]
        results.append(sorted(hyps, key=lambda h: -h.score))
    return results


def greedy_decode(
    model: Transformer,
    src: Tensor,
    config: DecodeConfig | None = None,
    prefix: Tensor | None = None,
    controls: Controls = NO_CONTROLS,
) -> list[list[Hypothesis]]:
    """Greedy decoding: the most likely token at each step, stopping at EOS or at the length limit.

    Args:
        model: an encoder-decoder :class:`Transformer` (its training flag is restored afterwards).
        src: (B, S) int64 source ids (each ending with EOS), right-padded with PAD.
        config: a :class:`DecodeConfig`; only the length limits, ``length_penalty`` (scores) and ``use_cache`` matter.
        prefix: None, or (B, P) int64 forced first tokens per sentence, right-padded with PAD.
        controls: see :mod:`dotformer.decoding.controls`.

    Returns:
        For each sentence, a list with one :class:`Hypothesis`.

    Raises:
        ConfigError, ShapeError: the model cannot decode, or ``src`` is malformed or too long for the model.
    """
    config = config or DecodeConfig(strategy="greedy")
    return decode_left_to_right(model, src, config, pick_most_likely, copies=1, prefix=prefix, controls=controls)
