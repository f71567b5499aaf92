"""Synthetic tasks: copy or reverse a random sequence of symbols.

The classic first test of a sequence-to-sequence model: a Transformer learns "copy" in a few hundred steps, and
"reverse" shows whether attention learns to look at the mirrored position. Sequences are space-separated symbols
``a0 ... a9 b0 ... b9 ...`` (``CorpusOptions.vocab`` of them), with lengths drawn uniformly from
``[min_len, max_len]``; the same ``seed`` gives the same corpus on every machine and Python version.
"""

from __future__ import annotations

import random
import string
from typing import Literal

from dotformer.data.read.types import Corpus, CorpusOptions, Pair, make_report


def symbol(index: int) -> str:
    """The name of symbol ``index``: ``0 -> "a0"``, ``9 -> "a9"``, ``10 -> "b0"``, up to ``259 -> "z9"``."""
    return f"{string.ascii_lowercase[index // 10]}{index % 10}"


def load_synthetic(kind: Literal["copy", "reverse"], options: CorpusOptions) -> Corpus:
    """``options.num_examples`` random sequences and their copy or reversal.

    Args:
        kind: ``"copy"`` (target = source) or ``"reverse"`` (target = source reversed).
        options: ``num_examples``, ``vocab``, ``min_len``, ``max_len``, ``seed``.

    Returns:
        A :class:`Corpus` named ``kind``, task ``"synthetic"``, no groups, e.g. ``Pair("a3 b7 a0", "a0 b7 a3")``
        for "reverse".
    """
    rng = random.Random(options.seed)
    symbols = [symbol(index) for index in range(options.vocab)]
    pairs = []
    for _ in range(options.num_examples):
        length = rng.randint(options.min_len, options.max_len)
        sequence = [rng.choice(symbols) for _ in range(length)]
        target = sequence if kind == "copy" else sequence[::-1]
        pairs.append(Pair(" ".join(sequence), " ".join(target)))
    report = make_report(
        len(pairs),
        len(pairs),
        {},
        kind=kind,
        vocab=options.vocab,
        min_len=options.min_len,
        max_len=options.max_len,
        seed=options.seed,
    )
    return Corpus(name=kind, task="synthetic", pairs=pairs, report=report)
