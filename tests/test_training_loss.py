"""Label-smoothed cross-entropy against a hand computation and an explicit target distribution."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from dotformer.errors import ShapeError
from dotformer.training.loss import label_smoothed_cross_entropy, smoothed_target_distribution


def test_hand_computation_one_position() -> None:
    # V = 4 with PAD = 0; logits chosen so that p = softmax(logits) is easy to write down
    logits = torch.tensor([[[0.0, math.log(2.0), math.log(3.0), math.log(4.0)]]])  # p = [1, 2, 3, 4] / 10
    target = torch.tensor([[2]])
    eps = 0.1
    out = label_smoothed_cross_entropy(logits, target, eps, pad_id=0)
    log_p = [math.log(x / 10) for x in (1, 2, 3, 4)]
    nll = -log_p[2]
    smooth = -(log_p[1] + log_p[2] + log_p[3]) / 3  # mean over the V-1 = 3 non-PAD tokens
    assert out.nll.item() == pytest.approx(nll, abs=1e-6)
    assert out.loss.item() == pytest.approx((1 - eps) * nll + eps * smooth, abs=1e-6)
    assert out.num_tokens.item() == 1


def test_pad_positions_count_for_nothing() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 7)
    target = torch.tensor([[4, 5, 2, 0, 0], [3, 2, 0, 0, 0]])
    full = label_smoothed_cross_entropy(logits, target, 0.1)
    # the same sum from the unpadded positions only
    keep = target != 0
    alone = label_smoothed_cross_entropy(logits[keep][None], target[keep][None], 0.1)
    assert full.num_tokens.item() == 5
    assert torch.allclose(full.loss, alone.loss) and torch.allclose(full.nll, alone.nll)
    # changing the logits at PAD positions changes nothing, not even the gradient elsewhere
    logits2 = logits.clone()
    logits2[~keep] = 1e4
    assert torch.allclose(label_smoothed_cross_entropy(logits2, target, 0.1).loss, full.loss)


def test_equals_cross_entropy_against_the_smoothed_distribution() -> None:
    torch.manual_seed(1)
    logits = torch.randn(3, 6, 11, dtype=torch.float64)
    target = torch.randint(1, 11, (3, 6))
    target[0, 4:] = 0
    target[2, 1:] = 0
    eps = 0.1
    q = smoothed_target_distribution(target, 11, eps).double()  # (B, T, V)
    assert torch.allclose(q.sum(-1)[target != 0], torch.ones(()).double())
    assert (q[..., 0] == 0).all()
    expected = -(q * F.log_softmax(logits, -1)).sum()
    assert label_smoothed_cross_entropy(logits, target, eps).loss.item() == pytest.approx(expected.item(), rel=1e-6)


def test_epsilon_zero_is_cross_entropy_ignoring_pad() -> None:
    torch.manual_seed(2)
    logits = torch.randn(4, 3, 9)
    target = torch.randint(0, 9, (4, 3))
    out = label_smoothed_cross_entropy(logits, target, 0.0)
    ref = F.cross_entropy(logits.reshape(-1, 9), target.reshape(-1), ignore_index=0, reduction="sum")
    assert out.loss.item() == pytest.approx(ref.item(), rel=1e-6)
    assert out.nll.item() == pytest.approx(ref.item(), rel=1e-6)


def test_bf16_logits_are_computed_in_float32() -> None:
    logits = torch.randn(2, 3, 5).bfloat16()
    out = label_smoothed_cross_entropy(logits, torch.ones(2, 3, dtype=torch.long))
    assert out.loss.dtype == torch.float32


def test_shape_mismatch_raises() -> None:
    with pytest.raises(ShapeError):
        label_smoothed_cross_entropy(torch.randn(2, 3, 5), torch.ones(2, 4, dtype=torch.long))
