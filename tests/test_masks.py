"""Masks: one convention (bool, True = may attend), hand-written values, and errors."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dotformer.errors import ShapeError
from dotformer.masks import causal_mask, combine_masks, padding_mask

pytestmark = pytest.mark.numerical  # run again under another vector unit by scripts/test.sh


def test_padding_mask_values_and_shape():
    tokens = torch.tensor([[5, 6, 7, 0, 0], [8, 0, 0, 0, 0], [4, 4, 4, 4, 4]])
    mask = padding_mask(tokens, pad_id=0)
    assert mask.shape == (3, 1, 1, 5) and mask.dtype == torch.bool
    assert mask[:, 0, 0].tolist() == [
        [True, True, True, False, False],
        [True, False, False, False, False],
        [True, True, True, True, True],
    ]


def test_padding_mask_uses_the_given_pad_id():
    assert padding_mask(torch.tensor([[0, 9, 9]]), pad_id=9)[0, 0, 0].tolist() == [True, False, False]


@pytest.mark.parametrize("shape", [(5,), (2, 3, 4)])
def test_padding_mask_needs_2d_tokens(shape):
    with pytest.raises(ShapeError, match=str(shape).replace("(", r"\(").replace(")", r"\)")):
        padding_mask(torch.zeros(shape, dtype=torch.long), 0)


def test_causal_mask_square_by_hand():
    assert causal_mask(3).tolist() == [
        [True, False, False],
        [True, True, False],
        [True, True, True],
    ]


def test_causal_mask_with_cached_keys_is_bottom_right_aligned():
    # 2 new queries after 2 cached positions: query 0 is position 2, query 1 is position 3.
    assert causal_mask(2, 4).tolist() == [
        [True, True, True, False],
        [True, True, True, True],
    ]
    assert causal_mask(1, 5).tolist() == [[True] * 5]


def test_causal_mask_matches_the_lesson_additive_mask():
    """The lesson adds -inf where j > i; our bool mask is True exactly where that additive mask is 0."""
    T = 6
    additive = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
    assert torch.equal(causal_mask(T), additive == 0)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 12), st.integers(0, 12))
def test_causal_mask_property(T, extra):
    S = T + extra
    mask = causal_mask(T, S)
    assert mask.shape == (T, S) and mask.dtype == torch.bool
    i = torch.arange(T)[:, None]
    j = torch.arange(S)[None, :]
    assert torch.equal(mask, j <= i + (S - T))


@pytest.mark.parametrize("T, S", [(-1, None), (4, 3), (2, 0)])
def test_causal_mask_rejects_impossible_lengths(T, S):
    with pytest.raises(ShapeError, match="query_len"):
        causal_mask(T, S)


def test_combine_masks_is_an_and_with_broadcasting():
    pad = torch.tensor([[True, True, False]])[:, None, None, :]  # (1, 1, 1, 3)
    combined = combine_masks(pad, None, causal_mask(3))
    assert combined.shape == (1, 1, 3, 3)
    assert combined[0, 0].tolist() == [[True, False, False], [True, True, False], [True, True, False]]
    assert combine_masks(None, None) is None
    single = causal_mask(2)
    assert combine_masks(None, single) is single


def test_combine_masks_names_shapes_that_do_not_broadcast():
    with pytest.raises(ShapeError, match=r"\(2, 1, 1, 5\).*\(3, 3\)"):
        combine_masks(torch.ones(2, 1, 1, 5, dtype=torch.bool), causal_mask(3))
