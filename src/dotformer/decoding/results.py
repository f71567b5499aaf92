"""What decoding one input gives back, whatever engine decoded it: :class:`Translation`, one per output.

Both engines (the lesson's decoder, :mod:`dotformer.decoding.translate`, and CTranslate2,
:mod:`dotformer.engines.ct2_translate`) return their outputs as this type, so the CLI, the API and the server read
them the same way. Nothing here needs torch.
"""

from __future__ import annotations

from typing import NamedTuple


class Translation(NamedTuple):
    """One output of :func:`~dotformer.decoding.translate.translate`: a :class:`~dotformer.decoding.Hypothesis` with
    its detokenised text.

    Attributes:
        text: the detokenised output.
        tokens: output token ids (no BOS, no EOS).
        score: log P(Y | X) / lp(|Y|), natural log (see :class:`~dotformer.decoding.Hypothesis`).
        log_probs: per-step log-probabilities (EOS included when the output finished); empty where an engine was
            told not to compute them (the CTranslate2 engine with ``scores=False``, whose ``score`` is then its
            search's, see :mod:`dotformer.engines.ct2_translate`).
        finished: True when the model ended the output with EOS; False when it was cut at the maximum length.
        alignment: with ``DecodeConfig.alignments`` (or ``replace_unk``), one ``(source index, output index)`` pair
            per output token (:mod:`dotformer.decoding.alignment`); else None.
    """

    text: str
    tokens: list[int]
    score: float
    log_probs: list[float]
    finished: bool
    alignment: list[tuple[int, int]] | None = None


def empty_translation() -> Translation:
    """The output of an empty source: no tokens, score 0, finished (its one log-probability stands for the EOS)."""
    return Translation("", [], 0.0, [0.0], True)
