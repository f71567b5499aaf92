"""Shared fixtures: a fixed random seed for every test, and a factory of tiny models."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from dotformer import ModelConfig, Transformer

TINY_VOCAB = 13  # PAD=0, BOS=1, EOS=2, UNK=3 and 9 ordinary tokens


@pytest.fixture(autouse=True)
def _seed() -> None:
    """Every test starts from the same torch random state."""
    torch.manual_seed(0)


@pytest.fixture
def make_model() -> Callable[..., Transformer]:
    """``make_model(**overrides)``: a "tiny" Transformer (V=13, D=64, H=4, 2+2 layers) in eval mode, float32."""

    def build(**overrides: Any) -> Transformer:
        config = ModelConfig.preset("tiny", src_vocab_size=TINY_VOCAB, tgt_vocab_size=TINY_VOCAB, **overrides)
        return Transformer(config).eval()

    return build


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the main job's end-to-end tests first: with ``-n 2`` the longest test then overlaps all the others."""
    first = ("test_copy_task_reaches_exact_match", "test_g2p_main_job_quick", "test_bible_main_job_quick")
    items.sort(key=lambda item: first.index(item.name) if item.name in first else len(first))
