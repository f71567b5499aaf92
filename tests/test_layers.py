"""Feed-forward, residual + LayerNorm, encoder and decoder layers: formulas, torch.nn equivalence, properties."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from dotformer.errors import ConfigError
from dotformer.export.torch_nn import to_torch_transformer
from dotformer.layers import DecoderLayer, EncoderLayer, FeedForward, LayerSizes, PassMode, Residual
from dotformer.masks import causal_mask

pytestmark = pytest.mark.numerical  # run again under another vector unit by scripts/test.sh

SIZES = LayerSizes(d_model=16, num_heads=4, d_ff=32, dropout=0.0)


def _perturb(module: nn.Module) -> nn.Module:
    """Random LayerNorm weights and biases everywhere, so that a swapped norm would show in a comparison."""
    with torch.no_grad():
        for sub in module.modules():
            if isinstance(sub, nn.LayerNorm):
                sub.weight.normal_(1.0, 0.3)
                sub.bias.normal_(0.0, 0.3)
            elif isinstance(sub, nn.Linear) and sub.bias is not None:
                sub.bias.normal_(0.0, 0.3)
    return module


def _keep(lengths: list[int], S: int) -> torch.Tensor:
    return torch.arange(S)[None, :] < torch.tensor(lengths)[:, None]  # (B, S) True = real token


# -- feed-forward and residual ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "activation, fn", [("relu", F.relu), ("gelu", F.gelu), ("silu", F.silu), ("silu", lambda z: z * torch.sigmoid(z))]
)
def test_feed_forward_formula(activation, fn):
    ffn = _perturb(FeedForward(6, 10, activation)).eval()
    x = torch.randn(2, 3, 6)
    expected = fn(x @ ffn.W_1.weight.T + ffn.W_1.bias) @ ffn.W_2.weight.T + ffn.W_2.bias
    torch.testing.assert_close(ffn(x), expected)
    # Position-wise: each position alone gives the same result.
    torch.testing.assert_close(ffn(x[:, 1:2]), expected[:, 1:2])


def test_feed_forward_rejects_unknown_activation():
    with pytest.raises(ConfigError, match="'tanh'"):
        FeedForward(4, 8, "tanh")  # type: ignore[arg-type]


def test_residual_post_and_pre_layer_norm():
    """post-LN: LayerNorm(x + Sublayer(x)); pre-LN: x + Sublayer(LayerNorm(x)) (dropout 0), against F.layer_norm."""
    x = torch.randn(2, 3, 8)
    w = torch.randn(8, 8)

    def sublayer(h: torch.Tensor) -> torch.Tensor:
        return h @ w

    post = _perturb(Residual(8, dropout=0.0, norm_first=False))
    norm = post.norm
    torch.testing.assert_close(post(x, sublayer), F.layer_norm(x + x @ w, (8,), norm.weight, norm.bias, norm.eps))
    pre = _perturb(Residual(8, dropout=0.0, norm_first=True))
    normed = F.layer_norm(x, (8,), pre.norm.weight, pre.norm.bias, pre.norm.eps)
    torch.testing.assert_close(pre(x, sublayer), x + normed @ w)


# -- against torch.nn.TransformerEncoderLayer / TransformerDecoderLayer ----------------------------------------------


def _model_and_torch(make_model, norm_first: bool, activation: str = "relu"):
    model = _perturb(
        make_model(norm_first=norm_first, activation=activation, num_encoder_layers=1, num_decoder_layers=1)
    )
    return model, to_torch_transformer(model).eval()


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_equals_torch(make_model, norm_first, activation):
    model, theirs = _model_and_torch(make_model, norm_first, activation)
    x = torch.randn(3, 6, 64)
    keep = _keep([6, 4, 1], 6)
    ours = model.encoder.layers[0](x, mask=keep[:, None, None, :]).output
    expected = theirs.encoder.layers[0](x, src_key_padding_mask=~keep)
    torch.testing.assert_close(ours, expected)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_equals_torch(make_model, norm_first):
    model, theirs = _model_and_torch(make_model, norm_first)
    y, memory = torch.randn(3, 5, 64), torch.randn(3, 6, 64)
    keep = _keep([6, 2, 5], 6)
    ours = model.decoder.layers[0](y, memory, memory_mask=keep[:, None, None, :]).output
    expected = theirs.decoder.layers[0](
        y, memory, tgt_mask=~causal_mask(5), tgt_is_causal=True, memory_key_padding_mask=~keep
    )
    torch.testing.assert_close(ours, expected)


# -- properties -----------------------------------------------------------------------------------------------------


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 8), st.booleans(), st.randoms(use_true_random=False))
def test_encoder_layer_is_permutation_equivariant(S, norm_first, rng):
    """Without positional encoding, self-attention cannot tell positions apart: permuting the input (and its
    padding mask) permutes the output the same way."""
    layer = _perturb(EncoderLayer(LayerSizes(16, 4, 32, dropout=0.0, norm_first=norm_first))).eval().double()
    x = torch.randn(2, S, 16, dtype=torch.float64)
    keep = torch.rand(2, S) < 0.7
    keep[:, 0] = True
    perm = list(range(S))
    rng.shuffle(perm)
    perm = torch.tensor(perm)
    out = layer(x, mask=keep[:, None, None, :]).output
    permuted = layer(x[:, perm], mask=keep[:, perm][:, None, None, :]).output
    torch.testing.assert_close(permuted, out[:, perm])


@settings(max_examples=20, deadline=None)
@given(st.integers(2, 8), st.data())
def test_decoder_layer_never_looks_at_the_future(T, data):
    layer = _perturb(DecoderLayer(SIZES)).eval()
    t = data.draw(st.integers(1, T - 1))
    y, memory = torch.randn(2, T, 16), torch.randn(2, 4, 16)
    changed = y.clone()
    changed[:, t:] = torch.randn(2, T - t, 16) * 100
    before = layer(y, memory).output
    after = layer(changed, memory).output
    torch.testing.assert_close(after[:, :t], before[:, :t])
    assert not torch.allclose(after[:, t:], before[:, t:])


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("pad_value", [0.0, 1e10, -1e10])
def test_padding_content_never_reaches_real_positions(norm_first, pad_value):
    sizes = LayerSizes(16, 4, 32, dropout=0.0, norm_first=norm_first)
    encoder, decoder = _perturb(EncoderLayer(sizes)).eval(), _perturb(DecoderLayer(sizes)).eval()
    keep = _keep([5, 3], 5)
    x = torch.randn(2, 5, 16)
    garbage = x.clone()
    garbage[~keep] = pad_value
    mask = keep[:, None, None, :]
    clean_out = encoder(x, mask=mask).output
    garbage_out = encoder(garbage, mask=mask).output
    torch.testing.assert_close(garbage_out[keep], clean_out[keep])
    assert bool(garbage_out[keep].isfinite().all())
    # The decoder's cross-attention does not see padded memory either.
    y = torch.randn(2, 4, 16)
    torch.testing.assert_close(decoder(y, garbage, memory_mask=mask).output, decoder(y, x, memory_mask=mask).output)


def test_dropout_only_in_training():
    sizes = LayerSizes(16, 4, 32, dropout=0.3, attention_dropout=0.3)
    layer = DecoderLayer(sizes)
    y, memory = torch.randn(2, 4, 16), torch.randn(2, 5, 16)
    layer.eval()
    torch.testing.assert_close(layer(y, memory).output, layer(y, memory).output)
    layer.train()
    assert not torch.allclose(layer(y, memory).output, layer(y, memory).output)


def test_decoder_layer_with_cross_attention_needs_memory():
    with pytest.raises(ConfigError, match="memory"):
        DecoderLayer(SIZES)(torch.randn(1, 2, 16))


def test_decoder_only_layer_has_no_cross_attention():
    layer = DecoderLayer(SIZES, cross_attention=False).eval()
    assert layer.cross_attn is None
    out = layer(torch.randn(2, 3, 16), mode=PassMode(need_weights=True))
    assert out.output.shape == (2, 3, 16) and out.cross_weights is None and out.self_weights.shape == (2, 4, 3, 3)


@pytest.mark.parametrize("length", [0, 1])
def test_empty_and_single_lengths(length):
    encoder, decoder = EncoderLayer(SIZES).eval(), DecoderLayer(SIZES).eval()
    x = torch.randn(2, length, 16)
    assert encoder(x).output.shape == (2, length, 16)
    assert decoder(x, torch.randn(2, 3, 16)).output.shape == (2, length, 16)
    assert decoder(torch.randn(2, 3, 16), x).output.shape == (2, 3, 16)
