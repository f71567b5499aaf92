"""Generation from a decoder-only language model: continue a prompt one token at a time (the lesson's decoder alone).

    P(x_t | x_<t) = softmax(generator(Decoder(Embed(x_<t) · √D + PE)))     the same decoder, no encoder memory

The prompt is read in one call (its keys/values fill the cache), then each step feeds the newest token. What picks
the token is the translation decoder's: the argmax (greedy), a draw from the tempered, top-k / top-p filtered
distribution (:func:`dotformer.decoding.sampling.sampling_picker`), or beam search's step
(:mod:`dotformer.decoding.beam`). The text is one stream of lines: EOS stands for a line end, so sampling and greedy
decoding run on across lines for ``max_new_tokens`` tokens, while beam search, whose hypotheses end at EOS, finds the
best completion of the current line. An imported model's text ends at its own EOS ids (``stop_ids``, from the
checkpoint's :class:`~dotformer.decoding.inputs.TextRules`): greedy decoding and sampling stop once every row has
produced one, and beam search reads them as its EOS (:func:`end_of_text`).

A model sees at most ``window`` tokens (the block size it was trained on: its positions beyond that were never
trained). When the text outgrows the window, the window jumps forward to keep the newest ``window // 2`` tokens, and
the cache is refilled from them; without a cache every step recomputes the window. Both see exactly the same
tokens, so cached and uncached generation give the same tokens (tested). The length limit and the search settings
are a :class:`~dotformer.decoding.config.DecodeConfig` (:func:`~dotformer.decoding.config.generation_config`).
Shapes follow the legend in :mod:`dotformer.attention`; N = rows generated together (``n`` samples, or K beams, of
one prompt).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from dotformer.data.tokenize.tokenizers import EOS_ID
from dotformer.decoding.beam import (
    advance,
    finalise_at_max_len,
    flatten_beam_dim,
    hypotheses,
    initial_state,
    is_done,
    unflatten_beam_dim,
)
from dotformer.decoding.cache import DecoderCache
from dotformer.decoding.config import DecodeConfig, generation_config
from dotformer.decoding.controls import NO_CONTROLS, Controls
from dotformer.decoding.greedy import pick_most_likely
from dotformer.decoding.hypothesis import forbid_special_tokens
from dotformer.decoding.incremental import inference
from dotformer.decoding.sampling import sampling_picker
from dotformer.errors import ConfigError, ShapeError
from dotformer.model import Transformer

TokenCallback = Callable[[Tensor], None]  # called with the (N,) int64 tokens of every step, as they are chosen


class Generation(NamedTuple):
    """One continuation of a prompt.

    Attributes:
        tokens: the new token ids (EOS = a line end), without the prompt.
        log_probs: the model's natural-log probability of each (temperature 1, no filter), one per token.
    """

    tokens: list[int]
    log_probs: list[float]

    @property
    def score(self) -> float:
        """The summed log-probability of the new tokens."""
        return float(sum(self.log_probs))


def run_decoder(model: Transformer, tokens: Tensor, cache: DecoderCache | None, logits: bool = False) -> Tensor:
    """The model's one use of the decoder here: (N, T) int64 new tokens -> (N, V) float32 log-probabilities of the
    token after the last one (``logits``: before the softmax); ``cache`` (a :class:`DecoderCache`, empty at first)
    holds the earlier positions and is updated."""
    hidden = model.decode(tokens, cache=cache).hidden[:, -1]  # (N, D)
    out = model.generator(hidden).float()  # (N, V)
    return out if logits else out.log_softmax(dim=-1)


class ContextWindow:
    """The tokens of N rows and the model's view of them: the newest ``window`` tokens at most (see the module
    docstring), with or without the key/value cache.

    Args:
        model: a decoder-only :class:`Transformer` (in eval mode).
        window: W, the most tokens the model reads at once (≥ 2).
        use_cache: keep keys/values between steps, or recompute the window every step.
    """

    def __init__(self, model: Transformer, window: int, use_cache: bool = True) -> None:
        self.model = model
        self.window = window
        self.use_cache = use_cache
        self.tokens: Tensor | None = None  # (N, t) every token so far, prompt included
        self.start = 0  # the first position in view
        self.cache: DecoderCache | None = None
        self.cached_to = 0  # positions start .. cached_to - 1 are in the cache

    def feed(self, new: Tensor, logits: bool = False) -> Tensor:
        """Append (N, T_new) int64 tokens to every row; return the (N, V) float32 log-probabilities of the next one
        (``logits``: its logits).

        Raises:
            ShapeError: ``new`` has a different number of rows than the tokens so far.
        """
        if self.tokens is not None and new.size(0) != self.tokens.size(0):
            raise ShapeError(f"{new.size(0)} rows of new tokens for {self.tokens.size(0)} rows generated so far")
        self.tokens = new if self.tokens is None else torch.cat([self.tokens, new], dim=1)  # (N, t)
        t = self.tokens.size(1)
        if t - self.start > self.window:  # the window jumps: keep the newest W // 2 tokens (of a long prompt: W)
            self.start = t - (self.window if t == new.size(1) else self.window // 2)
            self.cache = None
        if not self.use_cache:
            return run_decoder(self.model, self.tokens[:, self.start :], None, logits)
        if self.cache is None:
            self.cache, self.cached_to = DecoderCache(), self.start
        out = run_decoder(self.model, self.tokens[:, self.cached_to :], self.cache, logits)
        self.cached_to = t
        return out

    def reorder(self, index: Tensor) -> None:
        """Row i continues row ``index[i]`` ((N',) int64): beam search follows its beams with it."""
        if self.tokens is not None:
            self.tokens = self.tokens.index_select(0, index)  # (N', t)
        if self.cache is not None:
            self.cache.reorder(index)


def check_prompt(model: Transformer, prompt: Sequence[int]) -> Tensor:
    """(1, P) int64 prompt ids, checked: ``[EOS]`` for an empty prompt (a line starts).

    Raises:
        ConfigError: the model is not decoder-only. ShapeError: an id outside the vocabulary.
    """
    if model.config.arch != "decoder-only":
        raise ConfigError(f"generate needs a decoder-only language model, this one is {model.config.arch}")
    ids = list(prompt) or [EOS_ID]
    bad = [i for i in ids if not 0 <= i < model.config.tgt_vocab_size]
    if bad:
        raise ShapeError(f"prompt ids {bad[:5]} are outside the vocabulary [0, {model.config.tgt_vocab_size})")
    device = next(iter(model.parameters())).device
    return torch.tensor([ids], dtype=torch.int64, device=device)  # (1, P)


def generate(
    model: Transformer,
    prompt: Sequence[int],
    config: DecodeConfig | None = None,
    window: int | None = None,
    on_token: TokenCallback | None = None,
    stop_ids: Sequence[int] = (),
    controls: Controls = NO_CONTROLS,
) -> list[Generation]:
    """Continue ``prompt`` (token ids; empty: start a new line) with a decoder-only model.

    Args:
        model: a decoder-only :class:`Transformer` (its training flag is restored afterwards).
        prompt: the prompt's ids (:func:`~dotformer.decoding.inputs.encode_prompt`: no BOS for dotformer's own
            models, whose text stream has none; BOS first for an imported model whose family adds one).
        config: from :func:`~dotformer.decoding.config.generation_config`: strategy, ``n_best`` samples (or beams
            returned), the new-token limit ``max_len_b``, temperature / top-k / top-p / seed, ``use_cache``.
        window: the most tokens the model reads at once (default ``model.config.max_len``; give the block size).
        on_token: called with the (N,) tokens of every greedy or sampling step, as they are chosen (streaming), until
            the first row produces an end token (``controls``).
        stop_ids: an imported model's EOS ids (:class:`~dotformer.decoding.inputs.TextRules`): greedy decoding and
            sampling stop once every row has produced one (a row's tokens after its first stop are not part of its
            text), beam search's hypotheses end at them (:func:`end_of_text`); empty: run ``max_len_b`` steps,
            across lines.
        controls: repetition penalty, no-repeat n-grams, suppressed sequences over the new tokens (the prompt is not
            read), and end tokens: a continuation ends before the first of them (:mod:`dotformer.decoding.controls`).

    Returns:
        ``n_best`` generations: for sampling in draw order, for beam search best first (each ends at the line's
        end, or the model's EOS, or at the limit). The same seed, prompt and settings give the same tokens.

    Raises:
        ConfigError: not a decoder-only model, or a window < 2. ShapeError: prompt ids outside the vocabulary.
    """
    config = config or generation_config()
    window = window or model.config.max_len
    if window < 2:
        raise ConfigError(f"the context window must hold at least 2 tokens, got {window}")
    ids = check_prompt(model, prompt)  # (1, P)
    with inference(model):
        context = ContextWindow(model, window, config.use_cache)
        if config.strategy == "beam":
            return beam_generate(context, ids, config, stop_ids, controls)
        return left_to_right(context, ids, config, on_token, stop_ids, controls)


def next_scores(context: ContextWindow, new: Tensor, prompt_length: int, controls: Controls) -> tuple[Tensor, Tensor]:
    """Feed ``new`` ((N, T) int64) and return the next token's ``(scores, log_probs)``, both (N, V): what the search
    chooses from (:meth:`Controls.scores` over the tokens after the prompt, PAD and BOS at -inf) and the model's."""
    logits = context.feed(new, logits=True)  # (N, V)
    history = None if context.tokens is None else context.tokens[:, prompt_length:]  # (N, t) the new tokens so far
    scores, log_probs = controls.scores(logits, history)
    return forbid_special_tokens(scores), log_probs


def left_to_right(
    context: ContextWindow,
    prompt: Tensor,
    config: DecodeConfig,
    on_token: TokenCallback | None,
    stop_ids: Sequence[int] = (),
    controls: Controls = NO_CONTROLS,
) -> list[Generation]:
    """Greedy decoding or sampling of ``config.n_best`` rows for ``config.max_len_b`` new tokens each (fewer when
    every row has produced one of ``stop_ids`` or an end token; a row's tokens stop before its first end token)."""
    N, steps = config.n_best, config.max_len_b
    if config.strategy == "greedy":
        pick = pick_most_likely
    else:
        generator = torch.Generator(device=prompt.device)
        generator.manual_seed(config.seed)
        pick = sampling_picker(config, generator)
    tokens: list[list[int]] = [[] for _ in range(N)]  # grown step by step: memory follows the tokens made
    log_probs: list[list[float]] = [[] for _ in range(N)]
    P = prompt.size(1)
    step_scores, step_log_probs = next_scores(context, prompt.expand(N, -1), P, controls)  # (N, V) each
    stops = torch.tensor([*stop_ids, *controls.end_ids], dtype=torch.int64, device=prompt.device)  # (E,)
    stopped = torch.zeros(N, dtype=torch.bool, device=prompt.device)  # (N,)
    user_ends = torch.tensor(controls.end_ids, dtype=torch.int64, device=prompt.device)  # (E',)
    ended = torch.zeros(N, dtype=torch.bool, device=prompt.device)  # (N,) rows past an end token
    for t in range(steps):
        token = pick(step_scores)  # (N,)
        chosen = step_log_probs.gather(1, token[:, None]).squeeze(1)  # (N,)
        for row, (new, log_prob) in enumerate(zip(token.tolist(), chosen.tolist(), strict=True)):
            tokens[row].append(new)
            log_probs[row].append(log_prob)
        ended |= torch.isin(token, user_ends)  # (N,) an end token is not part of the text: not streamed
        if on_token is not None and not bool(ended[0]):
            on_token(token)
        stopped |= torch.isin(token, stops)
        if bool(stopped.all()):
            break
        if t + 1 < steps:
            step_scores, step_log_probs = next_scores(context, token[:, None], P, controls)  # (N, V) each
    return [before_end(row, lp, controls.end_ids) for row, lp in zip(tokens, log_probs, strict=True)]


def before_end(tokens: list[int], log_probs: list[float], end_ids: Sequence[int]) -> Generation:
    """A row's generation up to its first end token (kept out of the tokens; its log-probability kept, as an EOS's
    is); no end token: the row as it is."""
    for i, token in enumerate(tokens):
        if token in end_ids:
            return Generation(tokens[:i], log_probs[: i + 1])
    return Generation(tokens, log_probs)


def end_of_text(log_probs: Tensor, stop_ids: Sequence[int]) -> Tensor:
    """An imported model's EOS ids ``stop_ids`` as beam search's one EOS: the EOS column takes the log-probability of
    the likeliest of them, and theirs become -inf. A hypothesis then ends where the model would end it with any of
    its EOS ids, scored with the best of them; the other columns keep the model's values. No ``stop_ids``: unchanged.

    Shape:
        (N, V) float -> (N, V), in place and returned.
    """
    if not stop_ids:
        return log_probs
    stops = torch.tensor(list(stop_ids), dtype=torch.int64, device=log_probs.device)  # (E,)
    likeliest = log_probs.index_select(1, stops).max(dim=1).values  # (N,)
    log_probs[:, stops] = float("-inf")
    log_probs[:, EOS_ID] = likeliest
    return log_probs


def beam_generate(
    context: ContextWindow,
    prompt: Tensor,
    config: DecodeConfig,
    stop_ids: Sequence[int] = (),
    controls: Controls = NO_CONTROLS,
) -> list[Generation]:
    """Beam search over the continuations of one prompt: K beams, each ending at EOS (the line end; an imported
    model's EOS ids, :func:`end_of_text`) or at ``config.max_len_b`` tokens, with :mod:`dotformer.decoding.beam`'s
    step, stopping rule and length penalty. A finished generation's tokens stop before its EOS (whichever id it was);
    its log-probabilities end with the EOS's. End tokens (``controls``) end a hypothesis as those EOS ids do."""
    K, alpha, P = config.beam_size, config.length_penalty, prompt.size(1)
    ends = [*(stop_ids or [EOS_ID]), *controls.end_ids] if controls.end_ids else list(stop_ids)

    def next_log_probs(tokens: Tensor) -> tuple[Tensor, Tensor]:
        scores, log_probs = next_scores(context, tokens, P, controls)  # (N, V) each
        if log_probs is not scores:
            log_probs = end_of_text(forbid_special_tokens(log_probs), ends)
        return end_of_text(scores, ends), log_probs

    state = initial_state(torch.tensor([config.max_len_b], device=prompt.device), K)
    step_scores, step_log_probs = (x.expand(K, -1) for x in next_log_probs(prompt))  # (K, V): beams 1.. at -inf
    context.reorder(torch.zeros(K, dtype=torch.int64, device=prompt.device))  # K rows, all holding the prompt
    while True:
        state, origin = advance(state, unflatten_beam_dim(step_scores, K), alpha, unflatten_beam_dim(step_log_probs, K))
        state, at_limit = finalise_at_max_len(state, alpha)
        if bool(is_done(state, at_limit, alpha, config.beam_stop).all()):
            break
        context.reorder(flatten_beam_dim(origin))  # (K,) the beam each new beam grew from
        step_scores, step_log_probs = next_log_probs(state.alive_tokens[0, :, -1:])  # (K, V) each
    return [Generation(h.tokens, h.log_probs) for h in hypotheses(state, 0, config.n_best, alpha)]
