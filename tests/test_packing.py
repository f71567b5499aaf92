"""Packed batches (dotformer.packing): the real positions' logits and every gradient equal the padded computation."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tolerance import logits_tolerance

from dotformer import ModelConfig, Transformer
from dotformer.decoding.cache import DecoderCache
from dotformer.errors import ConfigError, ShapeError
from dotformer.multihead import MultiHeadAttention, pack, unpack
from dotformer.packing import Packing
from dotformer.training.loss import label_smoothed_cross_entropy

V = 13  # conftest.make_model's vocabulary


def _right_padded(lengths: list[int], length: int, generator: torch.Generator) -> torch.Tensor:
    """(B, L) ids in [4, V) with PAD (0) after each row's length."""
    ids = torch.randint(4, V, (len(lengths), length), generator=generator)
    for b, n in enumerate(lengths):
        ids[b, n:] = 0
    return ids


@pytest.mark.numerical
def test_pack_and_unpack_move_the_real_rows() -> None:
    keep = torch.tensor([[True, True, False], [True, False, False]])
    packing = Packing.from_mask(keep)
    x = torch.arange(6.0).view(2, 3, 1)  # (B, L, 1)
    packed = packing.pack(x)
    assert packed.flatten().tolist() == [0.0, 1.0, 3.0]  # row-major, equal to x[keep]
    assert torch.equal(packed, x[keep])
    assert packing.unpack(packed).flatten().tolist() == [0.0, 1.0, 0.0, 3.0, 0.0, 0.0]  # zeros at the padding
    assert packing.num_tokens == 3 and (packing.batch_size, packing.length) == (2, 3)
    assert pack(x, None) is x and unpack(x, None) is x


def test_packing_errors_name_the_shapes() -> None:
    with pytest.raises(ShapeError, match="bool mask"):
        Packing.from_mask(torch.ones(2, 3))
    packing = Packing.of_tokens(torch.tensor([[5, 6, 0]]), pad_id=0)
    with pytest.raises(ShapeError, match=r"expected \(B=1, L=3"):
        packing.pack(torch.zeros(2, 3, 4))
    with pytest.raises(ShapeError, match=r"expected \(N=2"):
        packing.unpack(torch.zeros(3, 4))


@pytest.mark.numerical
@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"norm_first": True},
        {"positional": "learned", "max_len": 16},
        {"arch": "decoder-only"},
        {"arch": "encoder-only"},
    ],
)
def test_packed_logits_equal_the_padded_ones_at_real_positions(make_model, overrides) -> None:
    model = make_model(**overrides)
    g = torch.Generator().manual_seed(0)
    src = _right_padded([7, 3, 1, 5], 7, g)
    tgt = _right_padded([6, 6, 2, 4], 6, g)
    padded = model(src, tgt)  # (B, T, V) or (B, S, V)
    packed = model(src, tgt, packed=True)  # (N, V)
    keep = (src if overrides.get("arch") == "encoder-only" else tgt) != 0
    assert packed.shape == (int(keep.sum()), V)
    # the same sums, the padded ones over more (masked) keys and in other blockings: the reordering bound
    torch.testing.assert_close(packed, padded[keep], atol=logits_tolerance(model.config, padded, src.size(1)), rtol=0)


@pytest.mark.numerical
@pytest.mark.parametrize("norm_first", [False, True])
def test_packed_gradients_equal_the_padded_ones(make_model, norm_first) -> None:
    model = make_model(norm_first=norm_first)  # eval mode: no dropout, so both runs compute the same function
    g = torch.Generator().manual_seed(1)
    src = _right_padded([7, 2, 5], 7, g)
    tgt_in = _right_padded([5, 3, 1], 5, g)
    tgt_out = torch.randint(4, V, tgt_in.shape, generator=g).masked_fill(tgt_in == 0, 0)

    def grads(packed: bool) -> dict[str, torch.Tensor]:
        model.zero_grad(set_to_none=True)
        logits = model(src, tgt_in, packed=packed)
        gold = tgt_out[tgt_in != 0] if packed else tgt_out
        label_smoothed_cross_entropy(logits, gold, 0.1).loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    padded, packed = grads(False), grads(True)
    assert padded.keys() == packed.keys()
    for name in padded:
        torch.testing.assert_close(packed[name], padded[name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.numerical
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    src_lengths=st.lists(st.integers(0, 6), min_size=1, max_size=4),
    tgt_len=st.integers(1, 5),
    data=st.data(),
)
def test_packing_is_invisible_for_any_lengths(make_model, src_lengths, tgt_len, data) -> None:
    """Any right-padded lengths, including empty sources and a batch whose rows are all padding past one token."""
    model = make_model()
    tgt_lengths = data.draw(st.lists(st.integers(1, tgt_len), min_size=len(src_lengths), max_size=len(src_lengths)))
    g = torch.Generator().manual_seed(len(src_lengths) * 7 + tgt_len)
    src = _right_padded(src_lengths, max(max(src_lengths), 1), g)
    tgt = _right_padded(tgt_lengths, tgt_len, g)
    packed = model(src, tgt, packed=True)
    assert bool(packed.isfinite().all())
    padded = model(src, tgt)
    tolerance = logits_tolerance(model.config, padded, src.size(1))  # the same sums in other orders
    torch.testing.assert_close(packed, padded[tgt != 0], atol=tolerance, rtol=0)


@pytest.mark.numerical
def test_multihead_attention_packed_equals_padded() -> None:
    torch.manual_seed(0)
    attention = MultiHeadAttention(16, 4).eval()
    keep = torch.tensor([[True, True, True, False], [True, False, False, False]])
    packing = Packing.from_mask(keep)
    x = torch.randn(2, 4, 16)
    mask = keep[:, None, None, :]  # (B, 1, 1, S)
    padded = attention(x, mask=mask).output  # (B, T, D)
    packed, _ = attention(packing.pack(x), mask=mask, packing=packing, kv_packing=packing)  # (N, D)
    torch.testing.assert_close(packed, padded[keep])
    # cross-attention: packed queries over packed keys/values of another length
    memory = torch.randn(2, 3, 16)
    memory_keep = torch.tensor([[True, True, False], [True, True, True]])
    memory_packing = Packing.from_mask(memory_keep)
    cross = attention(x, memory, mask=memory_keep[:, None, None, :]).output
    memory_mask = memory_keep[:, None, None, :]  # (B, 1, 1, S)
    cross_packed, _ = attention(
        packing.pack(x), memory_packing.pack(memory), memory_mask, False, False, None, packing, memory_packing
    )
    torch.testing.assert_close(cross_packed, cross[keep])


def test_multihead_attention_rejects_bad_packed_inputs() -> None:
    attention = MultiHeadAttention(16, 4)
    packing = Packing.from_mask(torch.tensor([[True, False]]))
    ok = torch.randn(1, 16)
    with pytest.raises(ShapeError, match=r"query must be packed \(N_T, D\) with D=16, got \(1, 2, 16\)"):
        attention(torch.randn(1, 2, 16), ok, packing=packing, kv_packing=packing)  # padded vectors as packed
    with pytest.raises(ShapeError, match=r"cannot unpack \(2, 16\): expected \(N=1"):
        attention(ok, torch.randn(2, 16), packing=packing, kv_packing=packing)  # 2 rows for 1 real token
    with pytest.raises(ShapeError, match=r"key_value must be packed \(N_S, D=16\), got \(1, 16\) from B=2"):
        attention(ok, ok, packing=packing, kv_packing=Packing.from_mask(torch.ones(2, 1, dtype=torch.bool)))
    model = Transformer(ModelConfig.preset("tiny", src_vocab_size=V, tgt_vocab_size=V))
    src = torch.tensor([[5, 6]])
    with pytest.raises(ConfigError, match="cache"):
        model.decode(src, model.encode(src).memory, packing=model.packing_of(src), cache=DecoderCache())


def test_packed_targets_must_be_right_padded(make_model) -> None:
    model = make_model()
    src = torch.tensor([[5, 6, 7], [5, 6, 0]])
    tgt = torch.tensor([[4, 5, 6], [4, 0, 6]])  # row 1: a PAD, then a real token the causal decoder would see past
    for packed in (True, False):  # the padded computation refuses it too: it would shift the positions
        with pytest.raises(ShapeError, match=r"right-padded \(PAD id 0 only after .* row 1 has PAD before a real"):
            model(src, tgt, packed=packed)
    src_gap = torch.tensor([[5, 0, 7], [5, 6, 0]])  # a PAD inside a source, likewise
    with pytest.raises(ShapeError, match=r"src must be right-padded .* row 0 .* \[5, 0, 7\]"):
        model(src_gap, tgt[:1].expand(2, 3), packed=True)


def test_packed_calls_refuse_masks_and_memories_that_do_not_fit(make_model) -> None:
    model = make_model()
    src, tgt = torch.tensor([[5, 6, 0], [5, 6, 7]]), torch.tensor([[4, 5], [4, 6]])
    lets_pad_in = torch.ones(2, 1, 1, 3, dtype=torch.bool)  # a custom mask that does not hide the PAD key
    with pytest.raises(ShapeError, match="src_mask lets queries attend to PAD keys"):
        model(src, tgt, src_mask=lets_pad_in, packed=True)
    torch.testing.assert_close(
        model(src, tgt, src_mask=model.source_mask(src), packed=True), model(src, tgt).flatten(0, 1)
    )
    with pytest.raises(ShapeError, match="hold different batch sizes"):
        model(src[:1], tgt, packed=True)
    one, one_packing = model.encode(src[:1], packing=model.packing_of(src[:1])).memory, model.packing_of(src[:1])
    packing = model.packing_of(tgt, right_padded=True)
    with pytest.raises(ShapeError, match=r"memory holds B=1 sentences .* different batch sizes$"):  # no grouping hint
        model.decode(tgt, one, model.source_mask(src[:1]), packing=packing, memory_packing=one_packing)
    memory = model.encode(src, packing=model.packing_of(src)).memory  # packed (N_S, D)
    with pytest.raises(ShapeError, match="packed: pass memory_packing"):
        model.decode(tgt, memory, model.source_mask(src))


@pytest.mark.numerical
def test_packed_weights_equal_the_padded_ones(make_model) -> None:
    model = make_model()
    src, tgt = torch.tensor([[5, 6, 7], [5, 6, 0]]), torch.tensor([[4, 5, 6], [4, 7, 0]])
    src_packing, tgt_packing = model.packing_of(src), model.packing_of(tgt)
    mask = model.source_mask(src)
    enc, enc_packed = model.encode(src, need_weights=True), model.encode(src, need_weights=True, packing=src_packing)
    keep = src != 0
    torch.testing.assert_close(enc_packed.memory, enc.memory[keep])
    for w, wp in zip(enc.self_weights, enc_packed.self_weights, strict=True):
        torch.testing.assert_close(wp.transpose(1, 2)[keep], w.transpose(1, 2)[keep])  # real queries' (H, S) rows
    dec = model.decode(tgt, enc.memory, mask, need_weights=True)
    dec_packed = model.decode(
        tgt, enc_packed.memory, mask, need_weights=True, packing=tgt_packing, memory_packing=src_packing
    )
    real = tgt != 0
    torch.testing.assert_close(dec_packed.hidden, dec.hidden[real])
    for w, wp in zip(
        dec.cross_weights + dec.self_weights, dec_packed.cross_weights + dec_packed.self_weights, strict=True
    ):
        torch.testing.assert_close(wp.transpose(1, 2)[real], w.transpose(1, 2)[real])  # (N, H, S) rows of real queries


def test_compiled_packed_forward_breaks_only_at_the_packings_and_recompiles_boundedly(make_model) -> None:
    """torch.compile of forward(packed=True): one graph break per compile (the nonzero of the packings, kept out of
    the graph on purpose), at most 3 graphs for 6 batch shapes (dynamic shapes after the first), equal to eager."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    model = make_model()
    torch._dynamo.reset()
    counters.clear()
    model.keep_packings_eager()  # what train --compile does
    compiled = torch.compile(model, backend="eager")  # Dynamo only: graph breaks and recompiles are its doing
    generator = torch.Generator().manual_seed(0)
    for i in range(6):
        B, S, T = 2 + i % 3, 4 + (i * 3) % 7, 3 + (i * 5) % 6
        src = _right_padded([max(1, S - b) for b in range(B)], S, generator)
        tgt = _right_padded([max(1, T - 2 * b) for b in range(B)], T, generator)
        torch.testing.assert_close(compiled(src, tgt, packed=True), model(src, tgt, packed=True))
    breaks = counters["graph_break"]
    assert all("packings" in reason for reason in breaks), list(breaks)
    assert sum(breaks.values()) <= 2 and counters["stats"]["unique_graphs"] <= 3, (dict(breaks), counters["stats"])
    with pytest.raises(RuntimeError, match="tgt must be right-padded"):  # the check stays, as an async assert
        compiled(src, torch.tensor([[4, 0, 5]]).expand(src.size(0), 3), packed=True)
    torch._dynamo.reset()
