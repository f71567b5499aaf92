"""``--threads N``, the CPU threads of torch's kernels, for the commands that compute (train, translate, serve, ...),
and the one wording of every command's ``--device`` (:func:`device_help`)."""

from __future__ import annotations

import argparse

MAX_THREADS = 1024  # more threads than any CPU has cores; far more crash OpenMP's thread pool


def device_help(default: str) -> str:
    """The help of ``--device`` where its default is ``default`` ("auto" or "cpu"), the same words on every command:
    ``where the model runs: auto (CUDA if available, else the CPU), cpu, cuda or cuda:N (default auto)``."""
    return f"where the model runs: auto (CUDA if available, else the CPU), cpu, cuda or cuda:N (default {default})"


def add_threads_argument(parser: argparse._ActionsContainer) -> None:
    """``--threads N``: the CPU threads of torch's kernels (``train``, ``translate``, ``evaluate``, ``serve``)."""
    parser.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="CPU threads of torch's kernels, 1 to 1024 (default: torch's choice, all cores)",
    )


def apply_threads(threads: int | None) -> None:
    """``torch.set_num_threads(threads)`` unless ``None``.

    Raises:
        ConfigError: ``threads`` is not from 1 to :data:`MAX_THREADS`.
    """
    if threads is None:
        return
    check_threads(threads)
    import torch

    torch.set_num_threads(threads)


def check_threads(threads: int | None) -> None:
    """Raise :class:`~dotformer.errors.ConfigError` unless ``threads`` is None or from 1 to :data:`MAX_THREADS`."""
    from dotformer.errors import ConfigError

    if threads is None:
        return
    if threads <= 0:
        raise ConfigError(f"--threads must be positive, got {threads}")
    if threads > MAX_THREADS:
        raise ConfigError(f"--threads must be at most {MAX_THREADS}, got {threads}")
