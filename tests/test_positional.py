"""Positional encodings and token embeddings: the paper's formula by hand, any length, learned tables, errors."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dotformer.errors import ConfigError, ShapeError
from dotformer.positional import InputEmbedding, PositionalEncoding, TokenEmbedding, sinusoidal_positional_encoding

pytestmark = pytest.mark.numerical  # run again under another vector unit by scripts/test.sh


def test_d_model_4_by_hand():
    pe = sinusoidal_positional_encoding(3, 4)
    assert pe.shape == (3, 4) and pe.dtype == torch.float32
    assert pe[0].tolist() == [0.0, 1.0, 0.0, 1.0]
    # position 1: sin(1), cos(1), sin(1/100), cos(1/100)  (10000^(2/4) = 100)
    assert pe[1].tolist() == pytest.approx([0.8415, 0.5403, 0.0100, 0.99995], abs=1e-4)
    assert pe[1].tolist() == pytest.approx([math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)], abs=1e-7)
    assert pe[2].tolist() == pytest.approx([math.sin(2), math.cos(2), math.sin(0.02), math.cos(0.02)], abs=1e-7)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 33), st.integers(0, 5000), st.data())
def test_every_entry_follows_the_formula(d_model, pos, data):
    dim = data.draw(st.integers(0, d_model - 1))
    pe = sinusoidal_positional_encoding(1, d_model, offset=pos, dtype=torch.float64)
    two_i = dim - dim % 2
    angle = pos / 10000 ** (two_i / d_model)
    expected = math.sin(angle) if dim % 2 == 0 else math.cos(angle)
    assert pe[0, dim].item() == pytest.approx(expected, abs=1e-9)


def test_odd_d_model_ends_on_a_sine():
    pe = sinusoidal_positional_encoding(4, 5, dtype=torch.float64)
    assert pe.shape == (4, 5)
    pos = 3
    expected = [math.sin(pos), math.cos(pos), math.sin(pos / 10000 ** (2 / 5)), math.cos(pos / 10000 ** (2 / 5))]
    expected.append(math.sin(pos / 10000 ** (4 / 5)))
    assert pe[pos].tolist() == pytest.approx(expected, abs=1e-12)
    assert sinusoidal_positional_encoding(2, 1)[:, 0].tolist() == pytest.approx([0.0, math.sin(1)])


def test_relative_positions_are_a_rotation():
    """PE(pos + k) is a fixed linear map (a rotation per sin/cos pair) of PE(pos): the paper's §3.5 motivation."""
    d_model, k = 8, 7
    pe = sinusoidal_positional_encoding(50, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        w = k / 10000 ** (2 * i / d_model)
        rotation = torch.tensor([[math.cos(w), -math.sin(w)], [math.sin(w), math.cos(w)]], dtype=torch.float64)
        pairs = pe[:, 2 * i : 2 * i + 2]  # (L, 2) = [sin, cos]
        torch.testing.assert_close(pairs[k:], pairs[:-k] @ rotation)


def test_offset_gives_later_rows_and_length_zero_works():
    full = sinusoidal_positional_encoding(20, 6)
    torch.testing.assert_close(sinusoidal_positional_encoding(5, 6, offset=12), full[12:17])
    assert sinusoidal_positional_encoding(0, 6).shape == (0, 6)


@pytest.mark.parametrize("args", [(-1, 4), (3, 0), (3, 4, -2)])
def test_bad_arguments(args):
    with pytest.raises(ShapeError):
        sinusoidal_positional_encoding(*args)


def test_sinusoidal_module_handles_inputs_longer_than_its_table():
    module = PositionalEncoding(6, "sinusoidal", max_len=8)
    x = torch.zeros(2, 30, 6)
    out = module(x)
    torch.testing.assert_close(out[0], sinusoidal_positional_encoding(30, 6))
    torch.testing.assert_close(module(torch.zeros(1, 3, 6), offset=40)[0], sinusoidal_positional_encoding(43, 6)[40:])
    # Nothing of the grown table lands in a state dict (it is not a parameter or a persistent buffer).
    assert module.state_dict() == {}


def test_sinusoidal_module_keeps_input_dtype():
    module = PositionalEncoding(4)
    out = module(torch.zeros(1, 3, 4, dtype=torch.bfloat16))
    assert out.dtype == torch.bfloat16


def test_learned_table_adds_its_rows_and_refuses_longer_inputs():
    module = PositionalEncoding(4, "learned", max_len=5)
    x = torch.randn(2, 5, 4)
    torch.testing.assert_close(module(x), x + module.table.weight[None])
    torch.testing.assert_close(module(x[:, :2], offset=3), x[:, :2] + module.table.weight[3:5])
    with pytest.raises(ShapeError, match="max_len=5"):
        module(torch.zeros(1, 6, 4))
    with pytest.raises(ShapeError, match="positions up to 5"):
        module(torch.zeros(1, 2, 4), offset=4)


def test_token_embedding_is_scaled_by_sqrt_d_model():
    embed = TokenEmbedding(10, 16, pad_id=0)
    tokens = torch.tensor([[3, 0, 9]])
    out = embed(tokens)
    torch.testing.assert_close(out, embed.weight[tokens] * 4.0)
    assert bool((out[0, 1] == 0).all()), "the PAD row starts at zero"
    out.sum().backward()
    assert bool((embed.weight.grad[0] == 0).all()), "the PAD row gets no gradient"


@pytest.mark.parametrize("tokens", [torch.tensor([[1, 10]]), torch.tensor([[-1, 2]])])
def test_token_ids_out_of_range(tokens):
    with pytest.raises(ShapeError, match=r"\[0, 10\)"):
        TokenEmbedding(10, 4)(tokens)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bool, torch.int8, torch.int16, torch.uint8])
def test_token_ids_must_be_int64_or_int32(dtype):
    with pytest.raises(ShapeError, match=str(dtype)):
        TokenEmbedding(10, 4)(torch.ones(1, 3, dtype=dtype))


def test_input_embedding_is_scaled_embedding_plus_position():
    module = InputEmbedding(10, 8, dropout=0.0).eval()
    tokens = torch.tensor([[4, 5, 6]])
    expected = module.token.weight[tokens] * math.sqrt(8) + sinusoidal_positional_encoding(3, 8)
    torch.testing.assert_close(module(tokens), expected)
    torch.testing.assert_close(module(tokens[:, 2:], offset=2), expected[:, 2:])
    assert module(torch.zeros(2, 0, dtype=torch.long)).shape == (2, 0, 8)


def test_int32_ids_give_the_int64_lookup():
    embed = TokenEmbedding(10, 4)
    tokens = torch.tensor([[3, 0, 9]])
    torch.testing.assert_close(embed(tokens.int()), embed(tokens))


def test_forward_never_replaces_the_table_and_extend_grows_it_outside():
    module = PositionalEncoding(6, "sinusoidal", max_len=8)
    table = module.sinusoids
    out = module(torch.zeros(1, 3, 6), offset=20)  # beyond the table: computed, not stored
    torch.testing.assert_close(out[0], sinusoidal_positional_encoding(3, 6, offset=20))
    assert module.sinusoids is table and module.sinusoids.size(0) == 8
    module.extend(32)
    assert module.sinusoids.size(0) == 32
    torch.testing.assert_close(module.sinusoids, sinusoidal_positional_encoding(32, 6))
    torch.testing.assert_close(module(torch.zeros(1, 3, 6), offset=20), out)
    module.extend(4)  # never shrinks
    assert module.sinusoids.size(0) == 32
    with pytest.raises(ConfigError, match="max_len=5"):
        PositionalEncoding(4, "learned", max_len=5).extend(10)
