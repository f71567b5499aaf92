"""Which inputs are decoded together: length-sorted batches, the default batch limits, and when a bar shows progress.

Inputs are sorted by length and cut into batches of at most ``batch_size`` sentences and ``max_tokens`` padded source
tokens, so each batch holds sentences of about the same length (little padding) and one very long input is decoded
alone instead of padding a whole batch. Shared by every engine and by :mod:`dotformer.api.embedding`; nothing here
needs torch.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from dotformer.errors import ConfigError

PROGRESS_THRESHOLD = 500  # inputs from which decoding shows a progress bar on stderr by default
DEFAULT_MAX_TOKENS = 8192  # padded source tokens per batch (B × S); a longer input than this is decoded alone
DEFAULT_BATCH_SIZE = 256  # sentences per batch: a small model's step is mostly fixed cost, so wide batches pay


def length_sorted_batches(lengths: Sequence[int], batch_size: int, max_tokens: int | None = None) -> list[list[int]]:
    """Indices grouped into batches, longest first (stable), so a batch pads little.

    A batch holds at most ``batch_size`` indices and, when ``max_tokens`` is given, at most ``max_tokens`` padded
    tokens (its size times its longest length); an index longer than ``max_tokens`` is a batch of its own.

    Raises:
        ConfigError: ``batch_size`` or ``max_tokens`` < 1.
    """
    check_batch_limits(batch_size, max_tokens)
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for i in order:
        if batches:
            batch = batches[-1]
            longest = lengths[batch[0]]  # sorted longest first
            fits_tokens = max_tokens is None or (len(batch) + 1) * longest <= max_tokens
            if len(batch) < batch_size and fits_tokens:
                batch.append(i)
                continue
        batches.append([i])
    return batches


def check_batch_limits(batch_size: int, max_tokens: int | None) -> None:
    """Raise :class:`ConfigError` unless ``batch_size`` and ``max_tokens`` (None: no limit) are positive."""
    if batch_size < 1:
        raise ConfigError(f"batch_size must be a positive integer, got {batch_size}")
    if max_tokens is not None and max_tokens < 1:
        raise ConfigError(f"max_tokens must be a positive integer, got {max_tokens}")


def show_progress(progress: bool | None, count: int) -> bool:
    """Whether decoding ``count`` inputs shows a progress bar: ``progress`` when given; by default from
    :data:`PROGRESS_THRESHOLD` inputs on, and only when standard error is a terminal (a bar's redraws are for a
    terminal, not for a log file or a pipe)."""
    if progress is not None:
        return progress
    return count >= PROGRESS_THRESHOLD and _is_terminal(sys.stderr)


def _is_terminal(stream: object) -> bool:
    """Whether ``stream`` (sys.stderr, which may be None or closed) is a terminal."""
    try:
        return bool(stream is not None and stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError):
        return False
