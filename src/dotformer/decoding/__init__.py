"""Decoding: turn a source sentence into output tokens with a trained Transformer (paper §6.1).

Read in this order:

1. :mod:`~dotformer.decoding.config`       :class:`DecodeConfig`, the frozen settings (strategy, beam size, α, ...)
2. :mod:`~dotformer.decoding.hypothesis`   :class:`Hypothesis` and the GNMT length penalty that scores it
3. :mod:`~dotformer.decoding.cache`        the key/value cache, its beam reorders, grouped cross-attention queries
4. :mod:`~dotformer.decoding.incremental`  the decoder run one position at a time with the key/value cache
5. :mod:`~dotformer.decoding.rules`        what a step may generate: no PAD/BOS, a minimum length, a forced prefix
6. :mod:`~dotformer.decoding.controls`     the controls as logits processors: repetition penalty, no-repeat n-grams,
                                          suppressed sequences, end tokens
7. :mod:`~dotformer.decoding.greedy`       greedy decoding (and the left-to-right loop shared with sampling)
8. :mod:`~dotformer.decoding.beam`         beam search: :class:`~dotformer.decoding.beam.BeamState`, stopping rule
9. :mod:`~dotformer.decoding.sampling`     temperature, top-k and top-p sampling
10. :mod:`~dotformer.decoding.batch`       :func:`decode_batch`, one entry point for the three
11. :mod:`~dotformer.decoding.ensemble`    several checkpoints decoded as one: their distributions averaged
12. :mod:`~dotformer.decoding.alignment`   hard alignments from the cross-attention, <unk> replacement
13. :mod:`~dotformer.decoding.options`     the decoding options of the CLI, the API and the server, defined once
14. :mod:`~dotformer.decoding.inputs`      a user's text as source ids: normalised, tokenised, length checked
15. :mod:`~dotformer.decoding.translate`   text in, text out with a loaded checkpoint and its tokenizers
16. :mod:`~dotformer.decoding.evaluation`  decode a held-out split and compute its metrics
17. :mod:`~dotformer.decoding.attention_maps` every attention weight of one decoded input (plots and the explorer)
18. :mod:`~dotformer.decoding.quantization` int8 linear layers for faster decoding on a CPU (not in the paper)

The engines' protocols are in :mod:`~dotformer.decoding.engine`; the engines themselves in :mod:`dotformer.engines`.
"""

from typing import Any

# name -> the module that defines it, imported on first use (PEP 562): ``dotformer.decoding.options`` and
# ``dotformer.decoding.config`` (the command line's flags) load without torch
_LAZY = {
    "decode_batch": "dotformer.decoding.batch",
    "beam_search": "dotformer.decoding.beam",
    "DecodeConfig": "dotformer.decoding.config",
    "greedy_decode": "dotformer.decoding.greedy",
    "Hypothesis": "dotformer.decoding.hypothesis",
    "length_penalty": "dotformer.decoding.hypothesis",
    "sample": "dotformer.decoding.sampling",
    "Translation": "dotformer.decoding.results",
}  # translate() is dotformer.decoding.translate.translate: a lazy name may not be its own module's name


def __getattr__(name: str) -> Any:
    """The names of ``__all__``, imported from their modules on first use."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'dotformer.decoding' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "DecodeConfig",
    "Hypothesis",
    "Translation",
    "beam_search",
    "decode_batch",
    "greedy_decode",
    "length_penalty",
    "sample",
]
