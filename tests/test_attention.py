"""Scaled dot-product attention: the lesson's worked example by hand, PyTorch's SDPA, and the fused path."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from dotformer.attention import broadcast_shape, fused_attention, scaled_dot_product_attention
from dotformer.errors import ShapeError
from dotformer.masks import causal_mask

pytestmark = pytest.mark.numerical  # run again under another vector unit by scripts/test.sh

FAST = settings(max_examples=30, deadline=None)

# -- the lesson's worked example ------------------------------------------------------------------------------------

Q = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
K = Q.clone()
V = torch.tensor([[10.0, 0.0], [0.0, 10.0], [5.0, 5.0]])


def test_lesson_example_row_1_matches_the_lesson_and_is_scaled():
    out, weights = scaled_dot_product_attention(Q, K, V)
    # scores q1·k = [1, 0, 1]; scaled by 1/sqrt(2): a = 0.7071. softmax = [e^a, 1, e^a] / (2 e^a + 1).
    a = 1 / math.sqrt(2)
    z = 2 * math.exp(a) + 1
    hand = [math.exp(a) / z, 1 / z, math.exp(a) / z]
    assert weights[0].tolist() == pytest.approx(hand, abs=1e-6)
    # The lesson's printed numbers are these scaled weights ...
    assert weights[0].tolist() == pytest.approx([0.401, 0.198, 0.401], abs=1e-3)
    # ... not softmax([1, 0, 1]) without the 1/sqrt(d_k), which would be [0.422, 0.155, 0.422].
    unscaled = torch.softmax(torch.tensor([1.0, 0.0, 1.0]), dim=0)
    assert unscaled.tolist() == pytest.approx([0.4223, 0.1554, 0.4223], abs=1e-4)
    assert not torch.allclose(weights[0], unscaled, atol=1e-2)
    # out1 = 0.401·[10,0] + 0.198·[0,10] + 0.401·[5,5] ≈ [6.02, 3.98]
    assert out[0].tolist() == pytest.approx([10 * hand[0] + 5 * hand[2], 10 * hand[1] + 5 * hand[2]], abs=1e-5)
    assert out[0].tolist() == pytest.approx([6.02, 3.98], abs=5e-3)


def test_lesson_example_rows_2_and_3_by_hand():
    out, weights = scaled_dot_product_attention(Q, K, V)
    a = 1 / math.sqrt(2)
    # Row 2: q2 = [0, 1], scores [0, 1, 1] -> mirror image of row 1.
    z = 2 * math.exp(a) + 1
    assert weights[1].tolist() == pytest.approx([1 / z, math.exp(a) / z, math.exp(a) / z], abs=1e-6)
    assert out[1].tolist() == pytest.approx([3.98, 6.02], abs=5e-3)
    # Row 3: q3 = [1, 1], scores [1, 1, 2] / sqrt(2) -> [e^a, e^a, e^2a] / (2 e^a + e^2a) ≈ [0.248, 0.248, 0.503]
    z3 = 2 * math.exp(a) + math.exp(2 * a)
    hand = [math.exp(a) / z3, math.exp(a) / z3, math.exp(2 * a) / z3]
    assert weights[2].tolist() == pytest.approx(hand, abs=1e-6)
    assert weights[2].tolist() == pytest.approx([0.2483, 0.2483, 0.5035], abs=1e-4)
    # 10·w1 + 5·w3 with w1 = w2 and w3 = 1 - 2·w1 is exactly 5 in both coordinates.
    assert out[2].tolist() == pytest.approx([5.0, 5.0], abs=1e-5)
    assert weights.sum(-1).tolist() == pytest.approx([1.0, 1.0, 1.0], abs=1e-6)


def test_lesson_code_gives_the_same_as_ours():
    """The lesson's own function (scores / d_k**0.5, masked_fill(mask == 0, -inf)) on a causal mask."""
    q, k, v = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 4)
    mask = causal_mask(5)
    scores = torch.matmul(q, k.transpose(-2, -1)) / 4**0.5
    scores = scores.masked_fill(mask == 0, float("-inf"))
    lesson_weights = F.softmax(scores, dim=-1)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(weights, lesson_weights)
    torch.testing.assert_close(out, lesson_weights @ v)


# -- against torch.nn.functional.scaled_dot_product_attention --------------------------------------------------------


@st.composite
def attention_inputs(draw, mask_kind=None):
    """Random (B, H, T, Dk) / (B, H, S, Dk) / (B, H, S, Dv) float64 tensors and an optional bool mask."""
    B, H = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    T, S = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    Dk, Dv = draw(st.integers(1, 8)), draw(st.integers(1, 8))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, Dk, generator=g, dtype=torch.float64)
    k = torch.randn(B, H, S, Dk, generator=g, dtype=torch.float64)
    v = torch.randn(B, H, S, Dv, generator=g, dtype=torch.float64)
    kind = mask_kind or draw(st.sampled_from(["none", "padding", "full", "causal"]))
    mask = None
    if kind == "padding":  # (B, 1, 1, S), at least one real key per sentence
        lengths = torch.randint(1, S + 1, (B,), generator=g)
        mask = (torch.arange(S)[None, :] < lengths[:, None])[:, None, None, :]
    elif kind == "full":  # (B, H, T, S) random, rows may be fully masked
        mask = torch.rand(B, H, T, S, generator=g) < 0.6
    elif kind == "causal" and T <= S:
        mask = causal_mask(T, S)
    return q, k, v, mask


@FAST
@given(attention_inputs())
def test_reference_equals_torch_sdpa(inputs):
    q, k, v, mask = inputs
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    if mask is not None:
        # PyTorch's math path gives zeros on rows with nothing to attend to, as we do.
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    else:
        expected = F.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, expected)
    assert weights.shape == (*q.shape[:-1], k.size(-2))


@FAST
@given(attention_inputs())
def test_fused_equals_reference(inputs):
    q, k, v, mask = inputs
    torch.testing.assert_close(fused_attention(q, k, v, mask), scaled_dot_product_attention(q, k, v, mask).output)


@FAST
@given(st.integers(1, 3), st.integers(1, 9), st.integers(1, 8))
def test_fused_is_causal_equals_reference_with_causal_mask(B, T, Dh):
    q, k, v = (torch.randn(B, 2, T, Dh, dtype=torch.float64) for _ in range(3))
    expected = scaled_dot_product_attention(q, k, v, causal_mask(T)).output
    torch.testing.assert_close(fused_attention(q, k, v, is_causal=True), expected)
    torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v, is_causal=True), expected)


@FAST
@given(attention_inputs(mask_kind="full"))
def test_weight_rows_sum_to_one_over_allowed_keys(inputs):
    q, k, v, mask = inputs
    _, weights = scaled_dot_product_attention(q, k, v, mask)
    assert weights.shape == mask.shape
    assert bool((weights[~mask] == 0).all()), "disallowed keys get exactly zero weight"
    assert bool((weights >= 0).all())
    has_key = mask.any(-1)
    sums = weights.sum(-1)
    torch.testing.assert_close(sums[has_key], torch.ones_like(sums[has_key]))
    assert bool((sums[~has_key] == 0).all()), "rows with no allowed key are all zero"


# -- fully masked rows, gradients, mixed precision ---------------------------------------------------------------------


def _fully_masked_inputs(dtype=torch.float32):
    q = torch.randn(2, 2, 4, 8, dtype=dtype, requires_grad=True)
    k = torch.randn(2, 2, 5, 8, dtype=dtype, requires_grad=True)
    v = torch.randn(2, 2, 5, 8, dtype=dtype, requires_grad=True)
    mask = torch.ones(2, 1, 4, 5, dtype=torch.bool)
    mask[0, 0, 1] = False  # query 1 of sentence 0 may attend to nothing
    mask[1] = False  # sentence 1 is all padding
    return q, k, v, mask


def _attend(path: str, q, k, v, mask):
    """The output of the reference or the fused attention."""
    return scaled_dot_product_attention(q, k, v, mask).output if path == "reference" else fused_attention(q, k, v, mask)


@pytest.mark.parametrize("path", ["reference", "fused"])
def test_fully_masked_rows_give_zeros_and_finite_gradients(path):
    q, k, v, mask = _fully_masked_inputs()
    out = _attend(path, q, k, v, mask)
    assert bool(out.isfinite().all())
    assert bool((out[0, :, 1] == 0).all()) and bool((out[1] == 0).all())
    (out.square().sum()).backward()
    for t in (q, k, v):
        assert t.grad is not None and bool(t.grad.isfinite().all())
    # Nothing flows back into the fully masked query or the keys nobody may see.
    assert bool((q.grad[0, :, 1] == 0).all()) and bool((q.grad[1] == 0).all())
    assert bool((k.grad[1] == 0).all()) and bool((v.grad[1] == 0).all())


def test_reference_and_fused_gradients_agree():
    q, k, v, mask = _fully_masked_inputs(torch.float64)
    scaled_dot_product_attention(q, k, v, mask).output.sin().sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    fused_attention(q, k, v, mask).sin().sum().backward()
    for t, expected in zip((q, k, v), grads, strict=True):
        torch.testing.assert_close(t.grad, expected)


@pytest.mark.parametrize("path", ["reference", "fused"])
@pytest.mark.parametrize("scale", [1.0, 1000.0])
def test_bf16_autocast_masking_stays_finite(path, scale):
    """Under bf16 autocast masked scores must not overflow to -inf/NaN, even when real scores are huge."""
    q, k, v, mask = _fully_masked_inputs()
    q32, k32, v32 = (t.detach() * scale for t in (q, k, v))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = _attend(path, q32.bfloat16(), k32.bfloat16(), v32.bfloat16(), mask)
    assert out.dtype == torch.bfloat16
    assert bool(out.isfinite().all())
    assert bool((out[1] == 0).all()) and bool((out[0, :, 1] == 0).all())
    if scale == 1.0:  # bf16 keeps about 3 significant digits
        expected = scaled_dot_product_attention(q32, k32, v32, mask).output
        torch.testing.assert_close(out.float(), expected, atol=0.05, rtol=0.05)


def test_reference_keeps_half_precision_dtype_and_uses_its_finite_minimum():
    q, k, v, mask = (t.detach().half() if t.is_floating_point() else t for t in _fully_masked_inputs())
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert out.dtype == weights.dtype == torch.float16
    assert bool(out.isfinite().all()) and bool(weights.isfinite().all())


def test_dropout_on_weights_scales_kept_weights():
    q, k, v = torch.randn(1, 1, 64, 4), torch.randn(1, 1, 64, 4), torch.randn(1, 1, 64, 4)
    _, plain = scaled_dot_product_attention(q, k, v)
    _, dropped = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    kept = dropped != 0
    assert 0.3 < kept.float().mean() < 0.7
    torch.testing.assert_close(dropped[kept], plain[kept] * 2)


# -- lengths 0 and 1, errors ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("T, S", [(0, 3), (3, 0), (0, 0), (1, 1)])
def test_empty_and_single_lengths(T, S):
    q, k, v = torch.randn(2, 2, T, 4), torch.randn(2, 2, S, 4), torch.randn(2, 2, S, 3)
    out, weights = scaled_dot_product_attention(q, k, v)
    assert out.shape == (2, 2, T, 3) and weights.shape == (2, 2, T, S)
    assert fused_attention(q, k, v).shape == (2, 2, T, 3)
    if S == 0:
        assert bool((out == 0).all())


@pytest.mark.parametrize(
    "shapes, mask, words",
    [
        (((2, 3, 4), (2, 5, 3), (2, 5, 4)), None, ["d_k", "(2, 3, 4)", "(2, 5, 3)"]),
        (((2, 3, 4), (2, 5, 4), (2, 6, 4)), None, ["length S", "(2, 5, 4)", "(2, 6, 4)"]),
        (((4,), (5, 4), (5, 4)), None, ["at least 2 dims", "(4,)"]),
        (((2, 3, 4), (2, 5, 4), (2, 5, 4)), torch.ones(2, 3, 5), ["boolean", "float32"]),
        (((2, 3, 4), (2, 5, 4), (2, 5, 4)), torch.ones(2, 4, 5, dtype=torch.bool), ["(2, 4, 5)", "(2, 3, 5)"]),
    ],
)
def test_wrong_shapes_raise_shape_error_naming_them(shapes, mask, words):
    q, k, v = (torch.randn(*s) for s in shapes)
    for call in (scaled_dot_product_attention, fused_attention):
        with pytest.raises(ShapeError) as info:
            call(q, k, v, mask)
        for word in words:
            assert word in str(info.value)


def test_fused_refuses_mask_and_is_causal_together():
    q = torch.randn(1, 1, 3, 4)
    with pytest.raises(ShapeError, match="not both"):
        fused_attention(q, q, q, causal_mask(3), is_causal=True)


def test_shape_error_is_a_value_error():
    with pytest.raises(ValueError):
        scaled_dot_product_attention(torch.randn(3, 4), torch.randn(3, 5), torch.randn(3, 5))


@settings(max_examples=200, deadline=None)
@given(
    a=st.lists(st.sampled_from([1, 2, 3]), max_size=4).map(tuple),
    b=st.lists(st.sampled_from([1, 2, 3]), max_size=4).map(tuple),
)
def test_broadcast_shape_follows_torch(a: tuple[int, ...], b: tuple[int, ...]) -> None:
    try:
        expected: tuple[int, ...] | None = tuple(torch.broadcast_shapes(a, b))
    except RuntimeError:
        expected = None
    assert broadcast_shape(a, b) == expected


# -- float16 range, and whatever the masked positions hold (the public bug cases) -----------------------------------


def _overflow_case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """q = 40·1, k = [-40·1; 0], v = [1; 100] (D = 64): Q·Kᵀ = -102400 overflows float16 before the 1/8 scale."""
    q = 40 * torch.ones(1, 1, 64)
    k = -40 * torch.ones(1, 2, 64)
    k[0, 1] = 0
    v = torch.stack([torch.ones(64), 100 * torch.ones(64)])[None]  # (1, 2, 64)
    return q, k, v, torch.tensor([[True, False]])


@pytest.mark.parametrize("masked", [True, False])
def test_float16_reference_scales_before_it_overflows(masked: bool) -> None:
    q, k, v, mask = _overflow_case()
    mask = mask if masked else None
    expected = scaled_dot_product_attention(q, k, v, mask).output  # float32: 1 masked (key 0 only), 100 unmasked
    assert expected[0, 0, 0].item() == pytest.approx(1.0 if masked else 100.0)
    for out in (
        scaled_dot_product_attention(q.half(), k.half(), v.half(), mask).output,
        fused_attention(q.half()[None], k.half()[None], v.half()[None], mask).squeeze(0),
    ):
        assert out.dtype == torch.float16
        torch.testing.assert_close(out.float(), expected)


@pytest.mark.parametrize("path", ["reference", "fused"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("where", ["key", "value", "both"])
def test_what_masked_keys_and_values_hold_never_reaches_an_output(path: str, bad: float, where: str) -> None:
    """A masked key holding garbage: q, k, v random (1,1,2,4), (1,1,3,4), (1,1,3,4), mask [T, T, F], NaN/inf in the
    masked key and value: the outputs equal those of clean inputs, and equal the attention over the two real keys."""
    torch.manual_seed(3)
    q, k, v = torch.randn(1, 1, 2, 4), torch.randn(1, 1, 3, 4), torch.randn(1, 1, 3, 4)
    mask = torch.tensor([True, True, False])[None, None, None, :]  # (1, 1, 1, S)
    clean = _attend(path, q, k, v, mask)
    k_bad, v_bad = k.clone(), v.clone()
    if where in ("key", "both"):
        k_bad[..., 2, :] = bad
    if where in ("value", "both"):
        v_bad[..., 2, :] = bad
    out = _attend(path, q, k_bad, v_bad, mask)
    assert bool(out.isfinite().all())
    torch.testing.assert_close(out, clean)
    torch.testing.assert_close(out, torch.softmax(q @ k[..., :2, :].mT / 2.0, dim=-1) @ v[..., :2, :])


# -- masks are read as (B, H, T, S), never widened or shifted onto the heads ----------------------------------------


def test_a_per_sentence_mask_without_a_head_dim_is_refused() -> None:
    """A (B, T, S) mask with one head broadcast together with (B, 1, T, S) scores to a (B, B, T, S) result."""
    B, T, S = 3, 2, 4
    q, k, v = torch.randn(B, 1, T, 8), torch.randn(B, 1, S, 8), torch.randn(B, 1, S, 8)
    mask = torch.ones(B, T, S, dtype=torch.bool)
    for call in (scaled_dot_product_attention, fused_attention):
        with pytest.raises(ShapeError, match=r"mask \(3, 2, 4\) .* scores \(3, 1, 2, 4\).*\(B, 1, T, S\)"):
            call(q, k, v, mask)
    # The same mask with its head dim is read per sentence.
    out = scaled_dot_product_attention(q, k, v, mask[:, None]).output
    assert out.shape == (B, 1, T, 8)


def test_a_mask_with_the_batch_size_in_the_head_dim_is_refused_not_read_per_head() -> None:
    """B == H: a per-sentence (B, 1, S) mask would broadcast as (1, B, 1, S), one mask per head, silently."""
    B = H = 2
    q, k, v = torch.randn(B, H, 3, 4), torch.randn(B, H, 5, 4), torch.randn(B, H, 5, 4)
    per_sentence = torch.tensor([[True] * 5, [True, True, False, False, False]])[:, None, :]  # (B, 1, S)
    for call in (scaled_dot_product_attention, fused_attention):
        with pytest.raises(ShapeError, match=r"mask \(2, 1, 5\) .*head dim.*\(B, 1, 1, S\)"):
            call(q, k, v, per_sentence)
    # Masks that broadcast to every (B, H) unambiguously stay accepted: (S,), (T, S), (1, T, S), (B, 1, 1, S).
    for mask in (per_sentence[0, 0], per_sentence[0].expand(3, 5), per_sentence[:1], per_sentence[:, None]):
        fused_attention(q, k, v, mask)


def test_a_mask_may_not_widen_the_scores() -> None:
    q, k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    mask = torch.ones(4, 1, 1, 5, dtype=torch.bool)  # 4 sentences' masks for 1 sentence's scores
    for call in (scaled_dot_product_attention, fused_attention):
        with pytest.raises(
            ShapeError, match=r"mask \(4, 1, 1, 5\) does not broadcast to the scores' shape \(1, 2, 3, 5\)"
        ):
            call(q, k, v, mask)


@pytest.mark.parametrize("dtype, bound", [(torch.bfloat16, 0.25), (torch.float16, 0.03)])
def test_the_reference_computes_in_float32_for_half_precision_inputs(dtype: torch.dtype, bound: float) -> None:
    """Scores and softmax in bfloat16/float16 were ~40x (bf16) / ~75x (fp16) further from float64 than the kernel."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 4, 64, 32).mul(10).to(dtype) for _ in range(3))
    exact = scaled_dot_product_attention(q.double(), k.double(), v.double())
    out, weights = scaled_dot_product_attention(q, k, v)
    assert out.dtype == dtype and weights is not None and weights.dtype == dtype
    error = float((out.double() - exact.output).abs().max())
    fused_error = float((fused_attention(q, k, v).double() - exact.output).abs().max())
    assert error <= bound and error <= 2 * fused_error + 1e-3, (error, fused_error)
