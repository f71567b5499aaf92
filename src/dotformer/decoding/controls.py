"""The user's controls over a search, as logits processors: what each step's logits become before the softmax.

    repetition penalty R    a token already in the output: logit / R if positive, logit · R if not
                            (the CTRL paper's rule, Keskar et al. 2019, as CTranslate2 and transformers apply it)
    no-repeat n-gram size   a token that would complete an n-gram already in the output gets -inf
    suppressed sequences    a listed token is never produced; a listed sequence of several tokens is never completed
    end tokens              a hypothesis also ends at any of them (:func:`is_end`), as at EOS

Every search (greedy, sampling, beam; translation and generation) turns its decoder's (N, V) logits into the scores
it chooses from at one place, :meth:`Controls.scores`: the processors above run on the logits in this order, then the
softmax, as CTranslate2's ``repetition_penalty``, ``no_repeat_ngram_size`` and ``suppress_sequences`` do, so the two
engines choose the same tokens. The search chooses and ranks by those scores; a hypothesis keeps the model's own
log-probabilities (:meth:`Controls.scores` returns both), which is what CTranslate2's engine reports after its scoring
pass. With no control set the scores are the model's log-probabilities, untouched.

The output a control reads (``history``) is what the search generated so far, a forced prefix included: a
language model's prompt is not part of it, as CTranslate2's ``generate_batch`` reads it (``include_prompt_in_result``
False). Shapes: N rows, t tokens generated so far, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from dotformer.data.tokenize.tokenizers import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from dotformer.decoding.control_tokens import control_token_ids

NEG_INF = float("-inf")


def penalize_repetition(logits: Tensor, history: Tensor, penalty: float) -> Tensor:
    """The CTRL repetition penalty: for every token already in a row's ``history``, its logit divided by ``penalty``
    where positive, multiplied by it where not (a token counts once, however often it occurred).

    Shape:
        logits (N, V) float, history (N, t) int64 -> (N, V), a new tensor. ``penalty`` 1 or t = 0: unchanged.
    """
    if penalty == 1.0 or history.size(1) == 0:
        return logits
    seen = logits.gather(1, history)  # (N, t) the logits of the tokens already produced
    penalised = torch.where(seen > 0, seen / penalty, seen * penalty)  # (N, t)
    return logits.scatter(1, history, penalised)  # (N, V) a repeated id writes the same value each time


def block_repeated_ngrams(logits: Tensor, history: Tensor, size: int) -> Tensor:
    """-inf for every token that would complete an n-gram (n = ``size``) already in the row's ``history``: where the
    last n - 1 tokens occurred before, the token that followed them then is forbidden now.

    Shape:
        logits (N, V) float, history (N, t) int64 -> (N, V), a new tensor; unchanged for ``size`` 0 or t < n.
    """
    if size <= 0 or history.size(1) < size:
        return logits
    blocked = logits.clone()
    rows = history.tolist()
    for n, row in enumerate(rows):
        tail = row[len(row) - size + 1 :]  # the n - 1 newest tokens (empty for n = 1: every token seen is blocked)
        finals = {row[i + size - 1] for i in range(len(row) - size + 1) if row[i : i + size - 1] == tail}
        if finals:
            blocked[n, list(finals)] = NEG_INF
    return blocked


def suppress_sequences(logits: Tensor, history: Tensor, sequences: Sequence[Sequence[int]]) -> Tensor:
    """-inf for the last token of every sequence in ``sequences`` whose other tokens the row's ``history`` ends with:
    a one-token sequence is never produced, a longer one never completed.

    Shape:
        logits (N, V) float, history (N, t) int64 -> (N, V), a new tensor.
    """
    if not sequences:
        return logits
    blocked = logits.clone()
    singles = [seq[0] for seq in sequences if len(seq) == 1]
    if singles:
        blocked[:, singles] = NEG_INF
    longer = [list(seq) for seq in sequences if len(seq) > 1]
    if longer:
        rows = history.tolist()
        for n, row in enumerate(rows):
            for seq in longer:
                head = seq[:-1]
                if len(row) >= len(head) and row[len(row) - len(head) :] == head:
                    blocked[n, seq[-1]] = NEG_INF
    return blocked


@dataclass(frozen=True)
class Controls:
    """A search's controls, as token ids (:func:`controls_of` reads them from a
    :class:`~dotformer.decoding.DecodeConfig` and the target vocabulary).

    Attributes:
        repetition_penalty: R > 0 (1: off). no_repeat_ngram_size: n (0: off).
        suppress: the sequences never produced (one id: a token; several: a sequence never completed).
        end_ids: the tokens that end a hypothesis besides EOS.
    """

    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    suppress: tuple[tuple[int, ...], ...] = ()
    end_ids: tuple[int, ...] = ()

    @property
    def changes_logits(self) -> bool:
        """Whether any processor changes the logits (end tokens do not)."""
        return self.repetition_penalty != 1.0 or self.no_repeat_ngram_size > 0 or bool(self.suppress)

    def process(self, logits: Tensor, history: Tensor) -> Tensor:
        """The processors in order: repetition penalty, no-repeat n-grams, suppressed sequences.

        Shape:
            logits (N, V) float, history (N, t) int64 -> (N, V).
        """
        logits = penalize_repetition(logits, history, self.repetition_penalty)
        logits = block_repeated_ngrams(logits, history, self.no_repeat_ngram_size)
        return suppress_sequences(logits, history, self.suppress)

    def scores(self, logits: Tensor, history: Tensor | None, normalised: bool = False) -> tuple[Tensor, Tensor]:
        """The search's scores and the model's log-probabilities of one step: the one place every search turns its
        decoder's output into what it chooses from (then :mod:`dotformer.decoding.rules` forbid what they forbid).

        Args:
            logits: (N, V) float the decoder's logits (``normalised``: log-probabilities already, an ensemble's).
            history: (N, t) int64 the tokens generated so far by each row; None: none yet.

        Returns:
            ``(scores, log_probs)``, both (N, V) float32: ``log_softmax(process(logits))``, PAD and BOS at -inf
            before the softmax (as CTranslate2's search suppresses them, so both engines rank beams alike), and
            ``log_softmax(logits)``; one tensor twice when no processor is set.
        """
        log_probs = logits.float() if normalised else logits.float().log_softmax(dim=-1)  # (N, V)
        if not self.changes_logits:
            return log_probs, log_probs
        if history is None:
            history = torch.zeros(logits.size(0), 0, dtype=torch.int64, device=logits.device)  # (N, 0)
        processed = self.process(logits.float(), history)  # (N, V) a new tensor
        processed[:, [PAD_ID, BOS_ID]] = NEG_INF  # never generated: out of the softmax, as CTranslate2 suppresses them
        scores = processed.log_softmax(dim=-1)  # (N, V); NaN in a row with every token forbidden
        return scores.masked_fill(scores.isnan(), NEG_INF), log_probs  # that row: all -inf, as without the softmax

    def ends(self, device: torch.device | str) -> Tensor:
        """(E,) int64: EOS and the end tokens."""
        return torch.tensor([EOS_ID, *self.end_ids], dtype=torch.int64, device=device)


NO_CONTROLS = Controls()


def is_end(tokens: Tensor, ends: Tensor) -> Tensor:
    """(...) bool: which ``tokens`` end a hypothesis (EOS or an end token; ``ends`` from :meth:`Controls.ends`)."""
    return torch.isin(tokens, ends)


def controls_of(config: object, tokenizer: Tokenizer | None) -> Controls:
    """The :class:`Controls` of a :class:`~dotformer.decoding.DecodeConfig`, its token strings read with the target
    ``tokenizer`` (None: the config may hold no token).

    Raises:
        ConfigError: an end token or a suppressed token not in the vocabulary (named).
    """
    ends, blocked = control_token_ids(config, tokenizer)
    return Controls(
        repetition_penalty=float(getattr(config, "repetition_penalty", 1.0)),
        no_repeat_ngram_size=int(getattr(config, "no_repeat_ngram_size", 0)),
        suppress=blocked,
        end_ids=ends,
    )
