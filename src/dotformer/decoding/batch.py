"""One entry point for every search: :func:`decode_batch` dispatches on ``DecodeConfig.strategy``."""

from __future__ import annotations

from torch import Tensor

from dotformer.decoding.beam import beam_search
from dotformer.decoding.config import DecodeConfig
from dotformer.decoding.controls import Controls, controls_of
from dotformer.decoding.greedy import greedy_decode
from dotformer.decoding.hypothesis import Hypothesis
from dotformer.decoding.sampling import sample
from dotformer.model import Transformer


def decode_batch(
    model: Transformer,
    src: Tensor,
    config: DecodeConfig | None = None,
    prefix: Tensor | None = None,
    controls: Controls | None = None,
) -> list[list[Hypothesis]]:
    """Decode a batch of source sentences with the strategy of ``config`` (default: beam search, K=4, α=0.6).

    Args:
        model: an encoder-decoder :class:`Transformer` (its training flag is restored afterwards).
        src: (B, S) int64 source ids (each ending with EOS), right-padded with PAD, on the model's device.
        config: a :class:`DecodeConfig`.
        prefix: None, or (B, P) int64 forced first tokens per sentence, right-padded with PAD: every output starts
            with them, scored like generated tokens (see :mod:`dotformer.decoding.rules`).
        controls: the config's repetition penalty, no-repeat n-gram size, end tokens and suppressed sequences as
            ids (:func:`~dotformer.decoding.controls.controls_of`); None: those of ``config``, which then may name
            no token.

    Returns:
        For each of the B sentences, its hypotheses best first: 1 for greedy, ``n_best`` for beam and sampling.

    Raises:
        ConfigError: the model is not an encoder-decoder. ShapeError: ``src`` is not (B, S) ids or is longer than
        the model allows, or ``prefix`` is malformed or too long.
    """
    config = config or DecodeConfig()
    controls = controls or controls_of(config, None)
    if config.strategy == "greedy":
        return greedy_decode(model, src, config, prefix, controls)
    if config.strategy == "sample":
        return sample(model, src, config, prefix, controls)
    return beam_search(model, src, config, prefix, controls)
