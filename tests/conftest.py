"""Shared fixtures: a fixed random seed for every test, one torch thread for a module that asks for it, a factory of
tiny models, and the command line run in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from dotformer import ModelConfig, Transformer

TINY_VOCAB = 13  # PAD=0, BOS=1, EOS=2, UNK=3 and 9 ordinary tokens


@pytest.fixture(autouse=True, scope="session")
def _cache_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    """CTranslate2 copies of a read-only checkpoint go to a temporary directory, not the user's ~/.cache."""
    os.environ.setdefault("DOTFORMER_CACHE_DIR", str(tmp_path_factory.mktemp("dotformer-cache")))


@pytest.fixture(autouse=True)
def _seed() -> None:
    """Every test starts from the same torch random state."""
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _data_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test prepares data into a cache of its own ($DOTFORMER_CACHE), never the user's ~/.cache/dotformer; a
    command the test runs inherits it."""
    cache = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("DOTFORMER_CACHE", str(cache))
    return cache


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """One intra-op torch thread for a module's tests (``pytestmark = pytest.mark.usefixtures("one_thread")``): tiny
    models gain nothing from more, and the test workers share the cores; the count is restored after the module."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def make_model() -> Callable[..., Transformer]:
    """``make_model(**overrides)``: a "tiny" Transformer (V=13, D=64, H=4, 2+2 layers) in eval mode, float32."""

    def build(**overrides: Any) -> Transformer:
        config = ModelConfig.preset("tiny", src_vocab_size=TINY_VOCAB, tgt_vocab_size=TINY_VOCAB, **overrides)
        return Transformer(config).eval()

    return build


# A limit that only a hung command reaches: the CLI tests' commands take seconds, and a busy machine (other jobs on
# every core) makes them slower, never this slow.
CLI_TIMEOUT_S = 1800


class Cli:
    """``dotformer ARGS`` run from the outside: ``python -m dotformer`` in a subprocess, as a user runs it.

    The child gets one torch thread (tiny models gain nothing from more, and tests run side by side) and a buffered
    standard output (``PYTHONUNBUFFERED=0``), as in a user's shell, so a command that must answer line by line has to
    flush for itself. :meth:`command` and :meth:`env` serve tests that start the process themselves (``Popen``).
    """

    timeout_s = CLI_TIMEOUT_S

    def command(self, *argv: str) -> list[str]:
        """The argument list that runs ``dotformer *argv`` with this interpreter."""
        return [sys.executable, "-m", "dotformer", *argv]

    def env(self, **extra: str) -> dict[str, str]:
        """The child's environment: this one, one torch thread, buffered output, plus ``extra``."""
        return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "0", **extra}

    def __call__(
        self, *argv: str, stdin: str | None = None, cwd: Path | None = None, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``dotformer *argv`` to its end; stdout and stderr captured as text, the exit status not checked."""
        return subprocess.run(
            self.command(*argv),
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env(**(env or {})),
            cwd=cwd,
            timeout=self.timeout_s,
            check=False,
        )


@pytest.fixture(scope="session")
def cli() -> Cli:
    """``cli("train", ...)`` runs ``dotformer train ...`` in a subprocess (:class:`Cli`)."""
    return Cli()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the main jobs' end-to-end tests first: with ``-n 2`` the longest tests then overlap all the others."""
    first = ("test_copy_task_reaches_exact_match", "test_g2p_main_job_quick", "test_bible_main_job_quick")
    items.sort(key=lambda item: first.index(item.name) if item.name in first else len(first))
