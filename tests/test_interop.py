"""dotformer.export.torch_nn: weights to and from torch.nn.MultiheadAttention and torch.nn.Transformer; its errors."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dotformer.errors import ConfigError, ShapeError
from dotformer.export.torch_nn import (
    from_torch_multihead,
    load_from_torch_transformer,
    to_torch_multihead,
    to_torch_transformer,
)
from dotformer.multihead import MultiHeadAttention

V = 13
pytestmark = [pytest.mark.filterwarnings("ignore:enable_nested_tensor is True"), pytest.mark.numerical]


def _torch_like(model, **changes) -> nn.Transformer:
    """A freshly initialised nn.Transformer with the sizes of a tiny dotformer model (final norms per LN kind)."""
    c = model.config
    kwargs = dict(
        d_model=c.d_model,
        nhead=c.num_heads,
        num_encoder_layers=c.num_encoder_layers,
        num_decoder_layers=c.num_decoder_layers,
        dim_feedforward=c.d_ff,
        dropout=0.0,
        activation=c.activation,
        batch_first=True,
        norm_first=c.norm_first,
    )
    kwargs.update(changes)
    theirs = nn.Transformer(**kwargs).eval()
    with torch.no_grad():
        for sub in theirs.modules():
            if isinstance(sub, nn.LayerNorm):
                sub.weight.normal_(1.0, 0.3)
                sub.bias.normal_(0.0, 0.3)
            elif isinstance(sub, nn.Linear):
                sub.bias.normal_(0.0, 0.3)
        for p in theirs.parameters():  # in_proj biases are not in a Linear
            if p.dim() == 1 and bool((p == 0).all()):
                p.normal_(0.0, 0.3)
    if not kwargs["norm_first"]:
        theirs.encoder.norm = None
        theirs.decoder.norm = None
    return theirs


# -- multi-head attention ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bias", [True, False])
def test_multihead_round_trip_keeps_every_weight(bias):
    ours = MultiHeadAttention(12, 3, dropout=0.25, bias=bias)
    theirs = to_torch_multihead(ours)
    assert theirs.batch_first and theirs.dropout == 0.25 and theirs.training
    assert (theirs.in_proj_bias is None) == (not bias)
    back = from_torch_multihead(theirs)
    assert back.dropout == 0.25 and back.num_heads == 3
    for name, tensor in ours.state_dict().items():
        torch.testing.assert_close(back.state_dict()[name], tensor, rtol=0, atol=0)
    assert torch.equal(theirs.in_proj_weight[12:24], ours.W_k.weight)


def test_multihead_keeps_dtype_and_mode():
    ours = MultiHeadAttention(8, 2).double().eval()
    theirs = to_torch_multihead(ours)
    assert theirs.in_proj_weight.dtype == torch.float64 and not theirs.training
    assert from_torch_multihead(theirs).W_q.weight.dtype == torch.float64


def test_from_torch_multihead_refuses_what_dotformer_cannot_express():
    with pytest.raises(ShapeError, match="kdim=6"):
        from_torch_multihead(nn.MultiheadAttention(8, 2, kdim=6, vdim=6))
    with pytest.raises(ConfigError, match="add_bias_kv"):
        from_torch_multihead(nn.MultiheadAttention(8, 2, add_bias_kv=True))
    with pytest.raises(ConfigError, match="add_zero_attn"):
        from_torch_multihead(nn.MultiheadAttention(8, 2, add_zero_attn=True))


# -- whole transformers ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True])
def test_load_from_torch_transformer_computes_the_same(make_model, norm_first):
    model = make_model(norm_first=norm_first)
    theirs = _torch_like(model)
    assert load_from_torch_transformer(model, theirs) is model
    src = torch.randint(4, V, (2, 6))
    src[1, 3:] = 0
    tgt = torch.randint(4, V, (2, 5))
    keep = model.source_mask(src)[:, 0, 0]
    expected = theirs(
        model.src_embed(src),
        model.tgt_embed(tgt),
        tgt_mask=nn.Transformer.generate_square_subsequent_mask(5),
        tgt_is_causal=True,
        src_key_padding_mask=~keep,
        memory_key_padding_mask=~keep,
    )
    hidden = model.decode(tgt, model.encode(src).memory, model.source_mask(src)).hidden
    torch.testing.assert_close(hidden, expected)
    # And back again: the exported model holds the same numbers as the one we loaded from.
    exported = to_torch_transformer(model)
    for name, tensor in theirs.state_dict().items():
        torch.testing.assert_close(exported.state_dict()[name], tensor, rtol=0, atol=0)


def test_to_torch_transformer_structure(make_model):
    post = to_torch_transformer(make_model())
    assert post.encoder.norm is None and post.decoder.norm is None and post.batch_first
    assert len(post.encoder.layers) == 2 and not post.training
    pre = to_torch_transformer(make_model(norm_first=True).train())
    assert isinstance(pre.encoder.norm, nn.LayerNorm) and pre.training


def test_comparisons_would_catch_a_wrong_weight(make_model):
    """A negative control: the equality tests are not comparing a model with itself."""
    model = make_model()
    theirs = to_torch_transformer(model)
    with torch.no_grad():
        theirs.decoder.layers[1].multihead_attn.in_proj_weight[70] += 0.5  # a row of W_k of the last cross-attention
    y, memory = torch.randn(1, 3, 64), torch.randn(1, 4, 64)
    ours = model.decoder(y, memory).hidden
    expected = theirs.decoder(y, memory, tgt_mask=nn.Transformer.generate_square_subsequent_mask(3), tgt_is_causal=True)
    assert not torch.allclose(ours, expected, atol=1e-4)


def test_bias_free_models_round_trip(make_model):
    model = make_model(bias=False)
    theirs = to_torch_transformer(model)
    assert theirs.encoder.layers[0].norm1.bias is None and theirs.encoder.layers[0].linear1.bias is None
    fresh = make_model(bias=False)
    with torch.no_grad():
        fresh.encoder.layers[0].res_attn.norm.bias.fill_(1.0)
    load_from_torch_transformer(fresh, theirs)
    assert bool((fresh.encoder.layers[0].res_attn.norm.bias == 0).all()), "torch has no LayerNorm bias: zeroed"
    x = torch.randn(2, 4, 64)
    torch.testing.assert_close(fresh.encoder(x).memory, model.encoder(x).memory)
    with torch.no_grad():
        model.decoder.layers[0].res_ff.norm.bias.fill_(0.5)
    with pytest.raises(ConfigError, match="decoder.layers.0.norm3.*not zero"):
        to_torch_transformer(model)


def test_size_mismatch_names_the_parameter_and_leaves_the_model_unchanged(make_model):
    model = make_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    theirs = _torch_like(model, dim_feedforward=128)
    with pytest.raises(ShapeError, match=r"encoder.layers.0.linear1.weight.*\(256, 64\).*\(128, 64\)"):
        load_from_torch_transformer(model, theirs)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, before[name]), f"{name} changed although loading failed"
    with pytest.raises(ShapeError, match="D=64, H=4.*embed_dim=64, num_heads=8"):
        load_from_torch_transformer(model, _torch_like(model, nhead=8))
    with pytest.raises(ShapeError, match="D=64.*embed_dim=32"):
        load_from_torch_transformer(model, _torch_like(model, d_model=32))


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"num_encoder_layers": 3}, ["encoder", "3 layers", "2"]),
        ({"num_decoder_layers": 1}, ["decoder", "1 layers"]),
        ({"norm_first": True}, ["norm_first=True"]),
        ({"activation": "gelu"}, ["activation", "'relu'"]),
        ({"layer_norm_eps": 1e-6}, ["layer_norm_eps=1e-06"]),
    ],
)
def test_structure_mismatch_is_a_config_error(make_model, changes, words):
    model = make_model()
    theirs = _torch_like(model, **changes)
    if changes.get("norm_first"):
        theirs.encoder.norm = theirs.decoder.norm = None
    with pytest.raises(ConfigError) as info:
        load_from_torch_transformer(model, theirs)
    for word in words:
        assert word in str(info.value)


def test_post_ln_torch_model_with_final_norms_is_refused(make_model):
    model = make_model()
    theirs = nn.Transformer(64, 4, 2, 2, 256, batch_first=True)  # post-LN, with nn.Transformer's final norms
    with pytest.raises(ConfigError, match="encoder.norm = None"):
        load_from_torch_transformer(model, theirs)
    theirs.encoder.norm = None
    theirs.decoder.norm = None
    load_from_torch_transformer(model, theirs)


def test_pre_ln_needs_final_norms_and_only_encoder_decoders_convert(make_model):
    model = make_model(norm_first=True)
    theirs = _torch_like(model)
    theirs.decoder.norm = None
    with pytest.raises(ConfigError, match="decoder.*final LayerNorm"):
        load_from_torch_transformer(model, theirs)
    with pytest.raises(ConfigError, match="'decoder-only'"):
        to_torch_transformer(make_model(arch="decoder-only"))
    with pytest.raises(ConfigError, match="'encoder-only'"):
        load_from_torch_transformer(make_model(arch="encoder-only"), theirs)
