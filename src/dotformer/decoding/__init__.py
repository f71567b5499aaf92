"""Decoding: turn a source sentence into output tokens with a trained Transformer (paper §6.1).

Read in this order:

1. :mod:`~dotformer.decoding.config`       :class:`DecodeConfig`, the frozen settings (strategy, beam size, α, ...)
2. :mod:`~dotformer.decoding.hypothesis`   :class:`Hypothesis` and the GNMT length penalty that scores it
3. :mod:`~dotformer.decoding.cache`        the key/value cache, its beam reorders, grouped cross-attention queries
4. :mod:`~dotformer.decoding.incremental`  the decoder run one position at a time with the key/value cache
5. :mod:`~dotformer.decoding.rules`        what a step may generate: no PAD/BOS, a minimum length, a forced prefix
6. :mod:`~dotformer.decoding.greedy`       greedy decoding (and the left-to-right loop shared with sampling)
7. :mod:`~dotformer.decoding.beam`         beam search: :class:`~dotformer.decoding.beam.BeamState`, stopping rule
8. :mod:`~dotformer.decoding.sampling`     temperature, top-k and top-p sampling
9. :mod:`~dotformer.decoding.batch`        :func:`decode_batch`, one entry point for the three
10. :mod:`~dotformer.decoding.ensemble`    several checkpoints decoded as one: their distributions averaged
11. :mod:`~dotformer.decoding.alignment`   hard alignments from the cross-attention, <unk> replacement
12. :mod:`~dotformer.decoding.options`     the decoding options of the CLI, the API and the server, defined once
13. :mod:`~dotformer.decoding.inputs`      a user's text as source ids: normalised, tokenised, length checked
14. :mod:`~dotformer.decoding.translate`   text in, text out with a loaded checkpoint and its tokenizers
15. :mod:`~dotformer.decoding.evaluation`  decode a held-out split and compute its metrics
16. :mod:`~dotformer.decoding.quantization` int8 linear layers for faster decoding on a CPU (not in the paper)
"""

from dotformer.decoding.batch import decode_batch
from dotformer.decoding.beam import beam_search
from dotformer.decoding.config import DecodeConfig
from dotformer.decoding.greedy import greedy_decode
from dotformer.decoding.hypothesis import Hypothesis, length_penalty
from dotformer.decoding.sampling import sample
from dotformer.decoding.translate import Translation, translate

__all__ = [
    "DecodeConfig",
    "Hypothesis",
    "Translation",
    "beam_search",
    "decode_batch",
    "greedy_decode",
    "length_penalty",
    "sample",
    "translate",
]
