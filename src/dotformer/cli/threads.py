"""``--threads N``, the CPU threads of torch's kernels, for the commands that compute (train, translate, serve, ...)."""

from __future__ import annotations

import argparse


def add_threads_argument(parser: argparse._ActionsContainer) -> None:
    """``--threads N``: the CPU threads of torch's kernels (``train``, ``translate``, ``evaluate``, ``serve``)."""
    parser.add_argument(
        "--threads", type=int, metavar="N", help="CPU threads of torch's kernels (default: torch's choice, all cores)"
    )


def apply_threads(threads: int | None) -> None:
    """``torch.set_num_threads(threads)`` unless ``None``.

    Raises:
        ConfigError: ``threads`` is not positive.
    """
    if threads is None:
        return
    from dotformer.errors import ConfigError

    if threads <= 0:
        raise ConfigError(f"--threads must be positive, got {threads}")
    import torch

    torch.set_num_threads(threads)
