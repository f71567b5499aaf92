"""Label-smoothed cross-entropy against a hand computation and an explicit target distribution."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from dotformer.errors import ConfigError, ShapeError
from dotformer.training.loss import (
    label_smoothed_cross_entropy,
    label_smoothed_cross_entropy_reference,
    smoothed_target_distribution,
)

pytestmark = pytest.mark.numerical  # run again under another vector unit by scripts/test.sh


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
    q = torch.full((3, 6, 11), eps / 10, dtype=torch.float64)  # the same distribution in float64: ε/(V-1) off gold
    q[..., 0] = 0.0
    q.scatter_add_(-1, target.unsqueeze(-1), torch.full((3, 6, 1), 1.0 - eps, dtype=torch.float64))
    q[target == 0] = 0.0
    # the library's float32 gold entry ε/(V-1) + (1-ε) is rounded twice (2u = 2^-23 relative), ours once
    torch.testing.assert_close(smoothed_target_distribution(target, 11, eps), q.float(), rtol=2.0**-23, atol=0)
    expected = -(q * F.log_softmax(logits, -1)).sum()
    loss = label_smoothed_cross_entropy(logits, target, eps).loss
    # float64 logits are computed in float64: the two sums of the 18 · 11 terms differ by at most 2 · 198 · 2^-53
    # relative (4.4e-14); float32 would be 1e-7 off
    assert loss.dtype == torch.float64 and loss.item() == pytest.approx(expected.item(), rel=1e-13)


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


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("pad_id", [0, 2])
def test_fused_backward_equals_the_written_out_reference(epsilon, dtype, pad_id) -> None:
    torch.manual_seed(3)
    logits = (torch.randn(3, 6, 17) * 3).to(dtype).requires_grad_()
    target = torch.randint(0, 17, (3, 6))
    target[0, 4:] = pad_id
    target[1, 2] = pad_id
    fused = label_smoothed_cross_entropy(logits, target, epsilon, pad_id)
    (grad_fused,) = torch.autograd.grad(fused.loss * 0.7, logits)
    reference = label_smoothed_cross_entropy_reference(logits, target, epsilon, pad_id)
    (grad_reference,) = torch.autograd.grad(reference.loss * 0.7, logits)
    torch.testing.assert_close(fused.loss, reference.loss)
    torch.testing.assert_close(fused.nll, reference.nll)
    assert fused.num_tokens.item() == reference.num_tokens.item() == int((target != pad_id).sum())
    assert grad_fused.dtype == dtype
    # Both gradients are p - q in float32 (exp of the log-softmax, or autograd's softmax backward: a few roundings
    # apart, u = 2^-24 each; rtol 1e-5 is 160 u), then cast to the logits' dtype: in bfloat16 two float32 values a
    # few u apart round to neighbours at most, one bfloat16 step apart (2^-7 relative at worst: rtol 1e-2); atol
    # covers entries near 0, where p ≈ q and the difference is the float32 roundings of p (≤ 1 · u ≈ 6e-8).
    tolerance = {"rtol": 1e-2, "atol": 1e-3} if dtype == torch.bfloat16 else {"rtol": 1e-5, "atol": 1e-6}
    torch.testing.assert_close(grad_fused.float(), grad_reference.float(), **tolerance)
    assert float(grad_fused[target == pad_id].abs().sum()) == 0.0  # PAD targets get no gradient


def test_fused_backward_runs_once() -> None:
    logits = torch.randn(4, 5, requires_grad=True)
    loss = label_smoothed_cross_entropy(logits, torch.tensor([1, 2, 3, 4])).loss
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="runs once"):
        loss.backward()


def test_non_finite_logits_at_pad_positions_count_for_nothing() -> None:
    torch.manual_seed(4)
    logits = torch.randn(2, 4, 9)
    target = torch.tensor([[3, 4, 0, 0], [5, 0, 0, 0]])
    logits[target == 0] = float("nan")  # whatever sits at PAD positions
    logits[1, 1, 0] = float("inf")
    logits.requires_grad_()
    fused = label_smoothed_cross_entropy(logits, target, 0.1)
    reference = label_smoothed_cross_entropy_reference(logits, target, 0.1)
    assert bool(fused.loss.isfinite()) and bool(fused.nll.isfinite())
    torch.testing.assert_close(fused.loss, reference.loss)
    (grad,) = torch.autograd.grad(fused.loss, logits)
    assert bool(grad.isfinite().all()) and float(grad[target == 0].abs().sum()) == 0.0


@pytest.mark.parametrize("loss_fn", [label_smoothed_cross_entropy, label_smoothed_cross_entropy_reference])
def test_bad_arguments_are_named(loss_fn) -> None:
    logits, target = torch.randn(2, 3, 5), torch.tensor([[1, 2, 0], [4, 0, 0]])
    with pytest.raises(ConfigError, match=r"epsilon must be in \[0, 1\)"):
        loss_fn(logits, target, -0.1)
    with pytest.raises(ConfigError, match="pad_id 5 is not a token of the V=5 vocabulary"):
        loss_fn(logits, target, 0.1, pad_id=5)
    with pytest.raises(ShapeError, match=r"target ids must lie in \[0, 5\); got min 0, max 7"):
        loss_fn(logits, target.masked_fill(target == 4, 7), 0.1)


def test_reference_gradient_is_zero_not_nan_on_pad_rows_with_non_finite_logits() -> None:
    """The written-out reference must not let 0 · NaN through its backward: it equals the fused gradient."""
    torch.manual_seed(5)
    target = torch.tensor([[3, 4, 0, 0], [5, 0, 0, 0]])
    logits = torch.randn(2, 4, 9)
    logits[0, 2] = float("nan")
    logits[1, 1, 0], logits[1, 2, 4], logits[1, 3, 1] = float("inf"), float("-inf"), float("nan")
    grads = []
    for loss_fn in (label_smoothed_cross_entropy_reference, label_smoothed_cross_entropy):
        x = logits.clone().requires_grad_()
        (grad,) = torch.autograd.grad(loss_fn(x, target, 0.1).loss, x)
        assert bool(grad.isfinite().all()) and float(grad[target == 0].abs().sum()) == 0.0
        grads.append(grad)
    torch.testing.assert_close(grads[0], grads[1])
    # ... and the real rows' gradient is the closed form p - q.
    keep = target != 0
    expected = logits.softmax(-1) - smoothed_target_distribution(target, 9, 0.1)
    torch.testing.assert_close(grads[0][keep], expected[keep])
