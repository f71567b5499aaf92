"""Multi-head attention against torch.nn.MultiheadAttention, its KV cache and layouts, dropout, and its errors."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dotformer.decoding.cache import GroupedRows, KVCache
from dotformer.errors import ShapeError
from dotformer.export.torch_nn import from_torch_multihead, to_torch_multihead
from dotformer.masks import causal_mask
from dotformer.multihead import MultiHeadAttention
from dotformer.packing import Packing

pytestmark = pytest.mark.numerical  # run again under another vector unit by scripts/test.sh


def _randomise_biases(mha: MultiHeadAttention) -> MultiHeadAttention:
    """Non-zero biases so that a bias copied to the wrong place would show."""
    with torch.no_grad():
        for linear in (mha.W_q, mha.W_k, mha.W_v, mha.W_o):
            if linear.bias is not None:
                linear.bias.normal_()
    return mha


def _lengths_mask(lengths: list[int], S: int) -> torch.Tensor:
    """(B, S) bool, True for the first ``lengths[b]`` keys of sentence b."""
    return torch.arange(S)[None, :] < torch.tensor(lengths)[:, None]


@settings(max_examples=20, deadline=None)
@given(
    heads=st.sampled_from([1, 2, 4]),
    head_dim=st.integers(1, 6),
    B=st.integers(1, 3),
    T=st.integers(1, 6),
    S=st.integers(1, 6),
    bias=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_equals_torch_multihead_attention_cross_with_padding(heads, head_dim, B, T, S, bias, seed):
    torch.manual_seed(seed)
    D = heads * head_dim
    ours = _randomise_biases(MultiHeadAttention(D, heads, bias=bias).double().eval())
    theirs = to_torch_multihead(ours)
    query, memory = torch.randn(B, T, D, dtype=torch.float64), torch.randn(B, S, D, dtype=torch.float64)
    keep = _lengths_mask(torch.randint(1, S + 1, (B,)).tolist(), S)  # (B, S), at least one key per sentence

    out = ours(query, memory, mask=keep[:, None, None, :], need_weights=True)
    expected, expected_weights = theirs(
        query, memory, memory, key_padding_mask=~keep, need_weights=True, average_attn_weights=False
    )
    torch.testing.assert_close(out.output, expected)
    torch.testing.assert_close(out.weights, expected_weights)
    # The fused path (no weights) gives the same output.
    torch.testing.assert_close(ours(query, memory, mask=keep[:, None, None, :]).output, expected)


@pytest.mark.parametrize("need_weights", [False, True])
def test_equals_torch_multihead_attention_causal_self_attention(need_weights):
    ours = _randomise_biases(MultiHeadAttention(12, 3).eval())
    theirs = to_torch_multihead(ours)
    x = torch.randn(2, 5, 12)
    out = ours(x, is_causal=True, need_weights=need_weights)
    expected, expected_weights = theirs(x, x, x, attn_mask=~causal_mask(5), average_attn_weights=False)
    torch.testing.assert_close(out.output, expected)
    if need_weights:
        torch.testing.assert_close(out.weights, expected_weights)
        assert bool((out.weights.triu(1) == 0).all())


def test_from_torch_multihead_equals_the_torch_module():
    theirs = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
    with torch.no_grad():
        theirs.in_proj_bias.normal_()
        theirs.out_proj.bias.normal_()
    ours = from_torch_multihead(theirs)
    x, memory = torch.randn(3, 4, 16), torch.randn(3, 7, 16)
    torch.testing.assert_close(ours(x, memory).output, theirs(x, memory, memory)[0])


def test_each_head_sees_its_own_slice():
    """Head h's weights are softmax(q_h·k_hᵀ/√Dh) of the h-th Dh-wide slices of the projections."""
    mha = _randomise_biases(MultiHeadAttention(8, 2).eval())
    x = torch.randn(1, 3, 8)
    weights = mha(x, need_weights=True).weights  # (1, 2, 3, 3)
    q, k = mha.W_q(x), mha.W_k(x)  # (1, 3, 8)
    for h in range(2):
        qh, kh = q[..., 4 * h : 4 * h + 4], k[..., 4 * h : 4 * h + 4]
        torch.testing.assert_close(weights[:, h], torch.softmax(qh @ kh.transpose(-2, -1) / 2.0, dim=-1))


# -- KV cache --------------------------------------------------------------------------------------------------------


def test_self_attention_cache_one_step_at_a_time_equals_full():
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 6, 16)
    full = mha(x, is_causal=True).output
    cache = KVCache()
    steps = [mha(x[:, t : t + 1], is_causal=True, cache=cache).output for t in range(6)]
    assert cache.length == 6
    torch.testing.assert_close(torch.cat(steps, dim=1), full)


def test_self_attention_cache_in_chunks_with_weights_equals_full():
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 7, 16)
    full = mha(x, is_causal=True, need_weights=True)
    cache = KVCache()
    first = mha(x[:, :3], is_causal=True, cache=cache, need_weights=True)
    second = mha(x[:, 3:], is_causal=True, cache=cache, need_weights=True)
    torch.testing.assert_close(torch.cat([first.output, second.output], dim=1), full.output)
    torch.testing.assert_close(second.weights, full.weights[:, :, 3:])  # (B, H, 4, 7), bottom-right causal


def test_static_cache_computes_cross_keys_once():
    mha = MultiHeadAttention(8, 2).eval()
    memory = torch.randn(2, 5, 8)
    cache = KVCache(static=True)
    mha(torch.randn(2, 1, 8), memory, cache=cache)
    key = cache.key
    x = torch.randn(2, 1, 8)
    # A different key_value on later steps is ignored: the cached projections are reused.
    out = mha(x, torch.zeros(2, 5, 8), cache=cache).output
    assert cache.key is key and cache.length == 5
    torch.testing.assert_close(out, mha(x, memory).output)


def test_cache_reorder_follows_batch_rows():
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(3, 4, 8)
    cache = KVCache()
    mha(x[:, :3], is_causal=True, cache=cache)
    index = torch.tensor([2, 2, 0])
    cache.reorder(index)
    out = mha(x[index, 3:], is_causal=True, cache=cache).output
    torch.testing.assert_close(out, mha(x[index], is_causal=True).output[:, 3:])


@pytest.mark.parametrize("defer", [False, True])
def test_deferred_reorders_compose_and_land_with_the_next_append(defer: bool):
    """Two reorders in a row, then a step: with ``defer`` the rows move in the append's copy, to the same result."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(3, 4, 8)
    cache = KVCache()
    mha(x[:, :3], is_causal=True, cache=cache)
    first, second = torch.tensor([2, 2, 0]), torch.tensor([1, 0, 0])
    cache.reorder(first, defer=defer)
    cache.reorder(second, defer=defer)
    assert cache.batch_size == 3 and (cache.pending is not None) == defer
    rows = first[second]  # row i of the result is row first[second[i]] of the original
    with torch.inference_mode():  # as in decoding (with autograd on, the append takes the two-copy path)
        out = mha(x[rows, 3:], is_causal=True, cache=cache).output
        torch.testing.assert_close(out, mha(x[rows], is_causal=True).output[:, 3:])
    assert cache.pending is None and cache.key is not None and cache.key.shape == (3, 2, 4, 4)
    cache.reorder(torch.tensor([0]), defer=True)
    cache.settle()
    assert cache.pending is None and cache.key.shape == (1, 2, 4, 4)


def test_cache_with_a_different_batch_size_is_a_shape_error():
    mha = MultiHeadAttention(8, 2)
    cache = KVCache()
    mha(torch.randn(3, 1, 8), is_causal=True, cache=cache)
    with pytest.raises(ShapeError, match=r"\(3, 2, 1, 4\).*\(1, 2, 1, 4\)"):
        mha(torch.randn(1, 1, 8), is_causal=True, cache=cache)
    static = KVCache(static=True)
    mha(torch.randn(3, 1, 8), torch.randn(3, 5, 8), cache=static)
    with pytest.raises(ShapeError, match="batch size 3"):
        mha(torch.randn(1, 1, 8), torch.randn(1, 5, 8), cache=static)


def test_grouped_queries_equal_the_expanded_memory():
    """N = B·G query rows reading B memory rows (beam search) == each query row reading its own copy of the memory."""
    torch.manual_seed(0)
    mha = _randomise_biases(MultiHeadAttention(8, 2)).eval()
    B, G, S = 2, 3, 5
    memory = torch.randn(B, S, 8)
    mask = _lengths_mask([5, 3], S)[:, None, None, :]  # (B, 1, 1, S)
    expanded_memory, expanded_mask = memory.repeat_interleave(G, 0), mask.repeat_interleave(G, 0)
    query = torch.randn(B * G, 4, 8)
    grouped = mha(query, memory, mask, need_weights=True, packing=GroupedRows(B, G))
    expected = mha(query, expanded_memory, mask=expanded_mask, need_weights=True)
    torch.testing.assert_close(grouped.output, expected.output)
    torch.testing.assert_close(grouped.weights, expected.weights)  # (B·G, H, T, S)
    assert float(grouped.weights.detach()[3:6, :, :, 3:].abs().max()) == 0.0  # rows of sentence 1 never see its padding
    # With a static cache of B rows, step after step (the keys/values are projected on the first step only).
    cache, expanded_cache = KVCache(static=True), KVCache(static=True)
    for step in range(2):
        x = query[:, step : step + 1]  # (B·G, 1, D)
        out = mha(x, memory, mask=mask, cache=cache).output
        ref = mha(x, expanded_memory, mask=expanded_mask, cache=expanded_cache).output
        torch.testing.assert_close(out, ref)
        assert cache.key is not None and cache.key.size(0) == B


def test_grouped_queries_need_a_layout_and_a_whole_number_of_rows():
    mha = MultiHeadAttention(8, 2)
    with pytest.raises(ShapeError, match=r"key_value must be \(B=4, S, D=8\), got \(2, 3, 8\)"):
        mha(torch.randn(4, 1, 8), torch.randn(2, 3, 8))  # without a layout: one key/value row per query row
    with pytest.raises(ShapeError, match=r"N = B·G query rows for B key/value rows, got query \(5, 1, 8\)"):
        mha(torch.randn(5, 1, 8), torch.randn(2, 3, 8), cache=KVCache(static=True))  # 5 rows among 2 sentences
    per_query_row = torch.ones(4, 1, 1, 3, dtype=torch.bool)
    for B in (1, 2):  # a mask of one row per query row, instead of per key/value row
        with pytest.raises(ShapeError, match=r"mask \(4, 1, 1, 3\)"):
            mha(torch.randn(4, 1, 8), torch.randn(B, 3, 8), per_query_row, cache=KVCache(static=True))


# -- dropout, lengths 0 and 1, errors -------------------------------------------------------------------------------


def test_dropout_only_in_training():
    mha = MultiHeadAttention(16, 4, dropout=0.5)
    x = torch.randn(2, 6, 16)
    mha.eval()
    torch.testing.assert_close(mha(x).output, mha(x).output)
    torch.testing.assert_close(mha(x).output, mha(x, need_weights=True).output)
    mha.train()
    assert not torch.allclose(mha(x, need_weights=True).output, mha(x, need_weights=True).output)
    assert not torch.allclose(mha(x).output, mha(x).output)


@pytest.mark.parametrize("T, S", [(0, 4), (4, 0), (0, 0), (1, 1)])
def test_empty_and_single_lengths(T, S):
    mha = MultiHeadAttention(8, 2).eval()
    out = mha(torch.randn(2, T, 8), torch.randn(2, S, 8), need_weights=True)
    assert out.output.shape == (2, T, 8) and out.weights.shape == (2, 2, T, S)
    assert mha(torch.randn(2, T, 8), torch.randn(2, S, 8)).output.shape == (2, T, 8)
    assert mha(torch.randn(2, T, 8), is_causal=True).output.shape == (2, T, 8)


def test_heads_must_divide_d_model():
    with pytest.raises(ShapeError, match="d_model=10.*num_heads=4"):
        MultiHeadAttention(10, 4)


@pytest.mark.parametrize(
    "query_shape, kv_shape, words",
    [
        ((2, 3, 7), None, ["(2, 3, 7)", "D=8"]),
        ((3, 8), None, ["(3, 8)"]),
        ((2, 3, 8), (2, 5, 6), ["(2, 5, 6)", "D=8"]),
        ((2, 3, 8), (3, 5, 8), ["(3, 5, 8)", "B=2"]),
    ],
)
def test_wrong_input_shapes_are_named(query_shape, kv_shape, words):
    mha = MultiHeadAttention(8, 2)
    kv = None if kv_shape is None else torch.randn(kv_shape)
    with pytest.raises(ShapeError) as info:
        mha(torch.randn(query_shape), kv)
    for word in words:
        assert word in str(info.value)


def test_wrong_mask_shape_is_named():
    mha = MultiHeadAttention(8, 2)
    with pytest.raises(ShapeError, match=r"\(2, 1, 1, 4\)"):
        mha(torch.randn(2, 3, 8), torch.randn(2, 5, 8), mask=torch.ones(2, 1, 1, 4, dtype=torch.bool))


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_what_masked_memory_positions_hold_never_reaches_an_output_on_any_path(bad: float) -> None:
    """NaN/inf in the padded memory rows: every path (fused, reference, cached, grouped, packed) gives the clean
    outputs at every query."""
    torch.manual_seed(2)
    mha = _randomise_biases(MultiHeadAttention(8, 2)).eval()
    B, S = 2, 4
    keep = _lengths_mask([4, 2], S)  # (B, S)
    mask = keep[:, None, None, :]  # (B, 1, 1, S)
    memory = torch.randn(B, S, 8)
    dirty = memory.masked_fill(~keep[..., None], bad)
    x = torch.randn(B, 3, 8)
    expected = mha(x, memory, mask=mask).output
    torch.testing.assert_close(mha(x, dirty, mask=mask).output, expected)  # fused
    torch.testing.assert_close(mha(x, dirty, mask=mask, need_weights=True).output, expected)  # reference
    cache = KVCache(static=True)
    steps = [mha(x[:, t : t + 1], dirty, mask=mask, cache=cache).output for t in range(3)]
    torch.testing.assert_close(torch.cat(steps, dim=1), expected)  # cached
    grouped = mha(x.repeat_interleave(2, 0), dirty, mask, packing=GroupedRows(B, 2)).output  # 2 rows per memory row
    torch.testing.assert_close(grouped, expected.repeat_interleave(2, 0))
    packing = Packing.from_mask(torch.ones(B, 3, dtype=torch.bool))
    kv_packing = Packing.from_mask(keep)
    packed, _ = mha(packing.pack(x), kv_packing.pack(dirty), mask, packing=packing, kv_packing=kv_packing)
    torch.testing.assert_close(packed, packing.pack(expected))


def test_a_per_sentence_mask_without_a_head_dim_is_a_shape_error():
    """One head: a (B, T, S) mask used to end in an unclear RuntimeError from the kernel."""
    mha = MultiHeadAttention(8, 1)
    mask = torch.ones(2, 3, 5, dtype=torch.bool)
    for need_weights in (False, True):
        with pytest.raises(ShapeError, match=r"mask \(2, 3, 5\) .*\(B, 1, T, S\)"):
            mha(torch.randn(2, 3, 8), torch.randn(2, 5, 8), mask, need_weights=need_weights)
