"""The modern block's seams (RMSNorm, gated FFN, RoPE, grouped-query attention, QK-norm, sliding windows, soft caps,
sandwich norms), each against HF transformers' own implementation and against its formula; cached equals full,
packed equals padded, reference equals fused; and whole tiny HF Llama, Qwen2, Qwen3, Mistral and Gemma 3 models
(random weights, built from a config) give the same logits as dotformer models holding their weights."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from tolerance import logits_tolerance, reordering_bound

from dotformer import ModelConfig, Transformer
from dotformer.attention import scaled_dot_product_attention
from dotformer.decoding.cache import DecoderCache
from dotformer.errors import ConfigError
from dotformer.layers import FeedForward, RMSNorm
from dotformer.masks import causal_mask
from dotformer.model import expected_num_parameters
from dotformer.multihead import MultiHeadAttention
from dotformer.positional import Rotary, RotarySettings, rotary_table

transformers = pytest.importorskip("transformers")

VOCAB = 50

# -- the seams against HF's modules and the formulas ---------------------------------------------------------------


@pytest.mark.numerical
def test_rmsnorm_equals_llama_and_gemma3_rmsnorm_and_the_formula() -> None:
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    x = torch.randn(3, 5, 16) * 3 + 1
    ours, theirs = RMSNorm(16, eps=1e-6), LlamaRMSNorm(16, eps=1e-6)
    gemma, gemma_theirs = RMSNorm(16, eps=1e-6, unit_offset=True), Gemma3RMSNorm(16, eps=1e-6)
    assert torch.equal(gemma.weight, torch.zeros(16)) and torch.equal(ours.weight, torch.ones(16))
    with torch.no_grad():
        for module in (ours, theirs, gemma, gemma_theirs):
            module.weight.copy_(torch.linspace(-0.5, 1.5, 16))
    bound = reordering_bound([16], float(x.abs().max()) * 4)
    torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=bound)
    torch.testing.assert_close(gemma(x), gemma_theirs(x), rtol=0, atol=bound)
    half = x.to(torch.bfloat16)  # float32 inside, cast back: the same ops as HF's, in the same order
    assert torch.equal(ours(half), theirs(half)) and torch.equal(gemma(half), gemma_theirs(half))
    assert gemma(half).dtype == torch.bfloat16
    x64 = x.double()
    w = torch.linspace(-0.5, 1.5, 16, dtype=torch.float64)
    expected = x64 / torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(ours(x).double(), expected * w, rtol=0, atol=bound)
    torch.testing.assert_close(gemma(x).double(), expected * (1 + w), rtol=0, atol=bound)


@pytest.mark.numerical
def test_gelu_tanh_and_the_gated_ffn_equal_hf_llama_and_gemma_mlps() -> None:
    from transformers.activations import ACT2FN
    from transformers.models.llama.modeling_llama import LlamaMLP

    x = torch.randn(2, 4, 16)
    z = torch.linspace(-5, 5, 101, dtype=torch.float64)
    tanh_form = 0.5 * z * (1 + torch.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z**3)))
    torch.testing.assert_close(F.gelu(z, approximate="tanh"), tanh_form, rtol=0, atol=1e-12)
    ffn = FeedForward(16, 24, "gelu_tanh", bias=False).double()
    x64 = x.double()
    h = x64 @ ffn.W_1.weight.T
    expected = (0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))) @ ffn.W_2.weight.T
    torch.testing.assert_close(ffn(x64), expected, rtol=0, atol=1e-12)
    for activation, hf_name in (("silu", "silu"), ("gelu_tanh", "gelu_pytorch_tanh")):
        ours = FeedForward(16, 24, activation, bias=False, gated=True)
        config = transformers.LlamaConfig(
            hidden_size=16, intermediate_size=24, hidden_act=hf_name, num_attention_heads=2
        )
        theirs = LlamaMLP(config)
        with torch.no_grad():
            theirs.gate_proj.weight.copy_(ours.W_gate.weight)
            theirs.up_proj.weight.copy_(ours.W_1.weight)
            theirs.down_proj.weight.copy_(ours.W_2.weight)
        assert isinstance(theirs.act_fn, type(ACT2FN[hf_name]))
        with torch.no_grad():
            bound = reordering_bound([16, 24], float(theirs(x).abs().max()) + 1)
        torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=bound)
    plain = FeedForward(16, 24, "relu")
    assert plain.W_gate is None and set(dict(plain.named_parameters())) == {
        "W_1.weight",
        "W_1.bias",
        "W_2.weight",
        "W_2.bias",
    }


def hf_rope(rope: dict[str, Any], head_dim: int, length: int, fraction: float = 1.0) -> tuple[torch.Tensor, ...]:
    """HF Llama's (cos, sin) of positions 0 .. length - 1: each (length, R)."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = transformers.LlamaConfig(
        hidden_size=head_dim * 2,
        num_attention_heads=2,
        head_dim=head_dim,
        max_position_embeddings=4 * length,
        rope_parameters=rope,
        partial_rotary_factor=fraction,
    )
    embedding = LlamaRotaryEmbedding(config)
    x = torch.zeros(1, length, head_dim)
    cos, sin = embedding(x, torch.arange(length)[None])
    return cos[0], sin[0]


ROPES = {
    "none": ({"rope_type": "default", "rope_theta": 10000.0}, {}),
    "linear": ({"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}, dict(factor=4.0)),
    "llama3": (
        {
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
        dict(theta=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_len=64),
    ),
    "yarn": (
        {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 64},
        dict(factor=4.0, original_max_len=64),
    ),
}


@pytest.mark.numerical
@pytest.mark.parametrize("scaling", list(ROPES))
def test_rotary_table_and_rotation_equal_hf_llama_rotary_embedding(scaling: str) -> None:
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    hf_params, ours_params = ROPES[scaling]
    L, Dh = 200, 32
    settings = RotarySettings(dims=Dh, scaling=scaling, max_len=L, **ours_params)
    cos, sin = hf_rope(hf_params, Dh, L)
    table_cos, table_sin = rotary_table(settings, L)
    # HF turns in float32: angle pos·ω rounded at pos·u; ours in float64 (u_64). cos and sin move by at most that.
    bound = reordering_bound([L], 1.0) + 4 * 2.0**-24
    torch.testing.assert_close(table_cos, cos, rtol=0, atol=bound)
    torch.testing.assert_close(table_sin, sin, rtol=0, atol=bound)
    q, k = torch.randn(2, 4, L, Dh), torch.randn(2, 2, L, Dh)
    q_hf, k_hf = apply_rotary_pos_emb(q, k, cos[None], sin[None])
    rotary = Rotary(settings)
    scale = float(q.abs().max()) * 2
    torch.testing.assert_close(rotary(q), q_hf, rtol=0, atol=bound * scale * Dh)
    torch.testing.assert_close(rotary(k), k_hf, rtol=0, atol=bound * scale * Dh)


@pytest.mark.numerical
def test_rotary_turns_pairs_partially_by_relative_position_beyond_its_table() -> None:
    settings = RotarySettings(dims=6, max_len=4)  # rotates the first 6 of 10 dims; table of 4 positions
    rotary = Rotary(settings)
    q, k = torch.randn(1, 1, 1, 10, dtype=torch.float64), torch.randn(1, 1, 1, 10, dtype=torch.float64)
    rotary = rotary.double()

    def score(m: int, n: int) -> float:  # q at position m against k at position n
        return float((rotary(q, m) * rotary(k, n)).sum())

    assert score(7, 3) == pytest.approx(score(4, 0), abs=1e-6) and score(9, 9) == pytest.approx(score(0, 0), abs=1e-6)
    assert abs(score(5, 0) - score(0, 0)) > 1e-3  # the position matters
    turned = rotary(q, 5)
    assert torch.equal(turned[..., 6:], q[..., 6:])  # the rest passes through
    torch.testing.assert_close(turned[..., :6].norm(), q[..., :6].norm())  # a rotation
    x1, x2 = q[..., :3], q[..., 3:6]  # pair (x1_i, x2_i) turns by 5·θ^(-2i/6)
    angle = 5 * 10000.0 ** (-torch.arange(0, 6, 2, dtype=torch.float64) / 6)
    expected = torch.cat((x1 * angle.cos() - x2 * angle.sin(), x2 * angle.cos() + x1 * angle.sin()), dim=-1)
    torch.testing.assert_close(turned[..., :6], expected, rtol=0, atol=1e-6)
    before = rotary.cos.clone()
    rotary(q, 100)  # beyond the table: computed, not stored
    assert torch.equal(rotary.cos, before)
    rotary.extend(200)
    assert rotary.cos.size(0) == 200 and "cos" not in rotary.state_dict()


@pytest.mark.numerical
@pytest.mark.parametrize("kv_heads", [1, 2])
def test_grouped_query_attention_equals_hf_eager_attention_with_repeat_kv(kv_heads: int) -> None:
    from transformers.models.llama.modeling_llama import eager_attention_forward

    mha = MultiHeadAttention(16, 4, bias=False, num_kv_heads=kv_heads, head_size=6).eval()
    assert mha.W_k.weight.shape == (kv_heads * 6, 16) and mha.W_o.weight.shape == (16, 24)
    x = torch.randn(2, 5, 16)
    q = mha.split_heads(mha.W_q(x))  # (B, H, T, Dh)
    k, v = mha.keys_values(x)  # (B, H_kv, T, Dh)
    assert k.shape == (2, kv_heads, 5, 6)
    module = torch.nn.Module()
    module.num_key_value_groups, module.training = 4 // kv_heads, False
    additive = torch.zeros(5, 5).masked_fill(~causal_mask(5), float("-inf"))[None, None]
    theirs, weights = eager_attention_forward(module, q, k, v, additive, scaling=6**-0.5)
    expected = mha.W_o(theirs.reshape(2, 5, 24))
    out, ours_w = mha(x, is_causal=True, need_weights=True)
    fused, _ = mha(x, is_causal=True)
    bound = reordering_bound([16, 6, 5, 24], float(expected.detach().abs().max()) * 4)
    torch.testing.assert_close(out, expected, rtol=0, atol=bound)
    torch.testing.assert_close(fused, expected, rtol=0, atol=bound)
    torch.testing.assert_close(ours_w, weights, rtol=0, atol=bound)


@pytest.mark.numerical
def test_scale_softcap_and_sliding_window_follow_their_formulas() -> None:
    q, k, v = torch.randn(1, 2, 6, 4), torch.randn(1, 2, 6, 4), torch.randn(1, 2, 6, 4)
    mask = causal_mask(6, sliding_window=3)
    i, j = torch.arange(6)[:, None], torch.arange(6)[None]
    assert torch.equal(mask, (j <= i) & (i - j < 3))
    assert torch.equal(causal_mask(2, 6, sliding_window=3), causal_mask(6, sliding_window=3)[4:])  # bottom-right
    out, weights = scaled_dot_product_attention(q, k, v, mask, scale=0.3, softcap=2.0)
    scores = 2.0 * torch.tanh(q @ k.transpose(-1, -2) * 0.3 / 2.0)
    expected = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)
    bound = reordering_bound([4, 6], 4.0)
    torch.testing.assert_close(weights, expected, rtol=0, atol=bound)
    torch.testing.assert_close(out, expected @ v, rtol=0, atol=bound * float(v.abs().max()))


def test_hf_sliding_window_mask_agrees() -> None:
    from transformers.masking_utils import and_masks, causal_mask_function, sliding_window_overlay

    allowed = and_masks(causal_mask_function, sliding_window_overlay(3))
    index = torch.arange(7)
    theirs = allowed(torch.tensor(0), torch.tensor(0), index[:, None], index[None])
    assert torch.equal(causal_mask(7, sliding_window=3), theirs)


def decoder_config(**overrides: Any) -> ModelConfig:
    """A tiny decoder-only config with every modern switch on (rotary, GQA, QK-norm, sliding layers, ...)."""
    base: dict[str, Any] = dict(
        src_vocab_size=0,
        tgt_vocab_size=VOCAB,
        d_model=32,
        num_heads=4,
        d_ff=48,
        num_encoder_layers=0,
        num_decoder_layers=3,
        dropout=0.0,
        arch="decoder-only",
        norm_first=True,
        norm="rmsnorm",
        norm_unit_offset=True,
        activation="gelu_tanh",
        ffn_gated=True,
        positional="rotary",
        rope_theta=1000.0,
        rope_local_theta=50.0,
        rope_scaling="linear",
        rope_factor=2.0,
        rope_fraction=0.75,
        num_kv_heads=2,
        head_size=16,
        qk_norm=True,
        sliding_window=3,
        layer_types=("sliding", "full", "sliding"),
        sandwich_norm=True,
        bias=False,
        attention_scale=0.2,
        logit_softcap=5.0,
        init_std=0.2,
        max_len=8,
    )
    return ModelConfig(**{**base, **overrides})


def perturbed(model: Transformer) -> Transformer:
    """The model with every norm weight moved off its initial value, so that a norm read wrongly shows."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.add_(torch.randn_like(parameter) * 0.3)
    return model.eval()


@pytest.mark.numerical
@pytest.mark.parametrize("softcap", [None, 3.0])
def test_cached_decoding_packed_and_fused_equal_the_full_reference_pass(softcap: float | None) -> None:
    config = decoder_config(attention_softcap=softcap)
    model = perturbed(Transformer(config))
    assert model.decoder.layers[0].self_attn.rotary is model.decoder.layers[2].self_attn.rotary
    assert model.decoder.layers[0].self_attn.rotary.settings.theta == 50.0
    assert model.decoder.layers[1].self_attn.rotary.settings.theta == 1000.0
    assert model.decoder.layers[1].self_attn.sliding_window is None
    tgt = torch.tensor([[1, 5, 6, 7, 8, 9, 10, 11, 12, 13], [1, 9, 10, 11, 2, 0, 0, 0, 0, 0]])  # beyond max_len
    keep = tgt != 0
    with torch.no_grad():
        logits = model(tgt=tgt)  # (B, T, V)
        reference = model.generator(model.decode(tgt, need_weights=True).hidden)
        packed = model(tgt=tgt, packed=True)
        cache, steps = DecoderCache(), []
        for t in range(tgt.size(1)):
            steps.append(model.generator(model.decode(tgt[:, t : t + 1], cache=cache).hidden))
        chunked_cache = DecoderCache()
        chunks = [model.generator(model.decode(tgt[:, a:b], cache=chunked_cache).hidden) for a, b in ((0, 4), (4, 10))]
    bound = logits_tolerance(config, logits)
    torch.testing.assert_close(reference, logits, rtol=0, atol=bound)
    torch.testing.assert_close(packed, logits[keep], rtol=0, atol=bound)
    torch.testing.assert_close(torch.cat(steps, 1)[keep], logits[keep], rtol=0, atol=bound)
    torch.testing.assert_close(torch.cat(chunks, 1)[keep], logits[keep], rtol=0, atol=bound)
    assert cache.layers[0].self_attn.key.shape == (2, 2, 10, 16)  # the cache holds H_kv heads
    assert logits.abs().max() < 5.0  # the logit soft cap


@pytest.mark.numerical
def test_beam_reordering_keeps_rotary_positions() -> None:
    model = perturbed(Transformer(decoder_config()))
    tgt = torch.tensor([[1, 5, 6, 7, 8], [1, 9, 10, 11, 12]])
    with torch.no_grad():
        full = model(tgt=tgt)
        cache = DecoderCache()
        model.decode(tgt[:, :3], cache=cache)
        cache.reorder(torch.tensor([1, 0]))  # beams swap rows, not positions
        rest = model.generator(model.decode(tgt.flip(0)[:, 3:], cache=cache).hidden)
    torch.testing.assert_close(rest, full.flip(0)[:, 3:], rtol=0, atol=logits_tolerance(model.config, full))


def test_the_modern_shapes_are_counted_and_named() -> None:
    for overrides in (
        {},
        dict(qkv_bias=True, bias=True, tie_output=False, norm_unit_offset=False, sandwich_norm=False),
    ):
        model = Transformer(decoder_config(**overrides))
        assert model.num_parameters() == expected_num_parameters(model.config)
    names = dict(Transformer(decoder_config()).named_parameters())
    expected = {
        "decoder.layers.0.res_self.norm.weight": (32,),
        "decoder.layers.0.res_self.post_norm.weight": (32,),
        "decoder.layers.0.self_attn.W_q.weight": (64, 32),
        "decoder.layers.0.self_attn.W_k.weight": (32, 32),
        "decoder.layers.0.self_attn.W_o.weight": (32, 64),
        "decoder.layers.0.self_attn.q_norm.weight": (16,),
        "decoder.layers.0.self_attn.k_norm.weight": (16,),
        "decoder.layers.0.res_ff.post_norm.weight": (32,),
        "decoder.layers.0.feed_forward.W_gate.weight": (48, 32),
        "decoder.final_norm.weight": (32,),
    }
    for name, shape in expected.items():
        assert tuple(names[name].shape) == shape, name
    assert not any("position" in name or "bias" in name or "rotary" in name for name in names)


@pytest.mark.parametrize(
    "overrides, words",
    [
        (dict(num_kv_heads=3), ["num_heads=4", "num_kv_heads=3"]),
        (dict(rope_fraction=0.7), ["rope_fraction", "even"]),
        (dict(layer_types=("full", "sliding")), ["layer_types", "num_decoder_layers=3"]),
        (dict(layer_types=("full", "local", "full")), ["layer_types", "'local'"]),
        (dict(sliding_window=None), ["layer_types", "sliding_window"]),
        (dict(sandwich_norm=True, norm_first=False), ["sandwich_norm", "norm_first"]),
        (dict(norm="batchnorm"), ["norm", "'batchnorm'"]),
        (dict(norm="layernorm"), ["norm_unit_offset", "rmsnorm"]),
        (dict(rope_scaling="ntk"), ["rope_scaling", "'ntk'"]),
        (dict(attention_softcap=0.0), ["attention_softcap"]),
        (dict(head_size=0), ["head_size"]),
    ],
)
def test_bad_modern_fields_are_refused_by_name(overrides: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        decoder_config(**overrides)
    for word in words:
        assert word in str(info.value)


def test_config_round_trips_and_lists_its_modern_switches() -> None:
    config = decoder_config()
    assert ModelConfig.from_dict(config.to_dict()) == config
    assert ModelConfig.from_dict({**config.to_dict(), "layer_types": ["sliding", "full", "sliding"]}) == config
    assert "num_kv_heads=2" in config.modern_switches() and "positional='rotary'" in config.modern_switches()
    assert ModelConfig(13, 13).modern_switches() == []


# -- whole HF models: the same logits ------------------------------------------------------------------------------


def hf_rope_settings(hf: Any, layer_type: str | None = None) -> dict[str, Any]:
    """ModelConfig's rope_* fields from an HF config's rope_parameters."""
    rope = hf.rope_parameters if layer_type is None else hf.rope_parameters[layer_type]
    fields: dict[str, Any] = {"rope_theta": float(rope["rope_theta"])}
    kind = rope.get("rope_type", "default")
    if kind != "default":
        fields.update(rope_scaling=kind, rope_factor=float(rope["factor"]))
    if kind == "llama3":
        fields.update(
            rope_low_freq_factor=rope["low_freq_factor"],
            rope_high_freq_factor=rope["high_freq_factor"],
            rope_original_max_len=rope["original_max_position_embeddings"],
        )
    return fields


def config_from_hf(hf: Any) -> ModelConfig:
    """The dotformer config of a tiny HF Llama-family or Gemma 3 causal LM (a test-local reading of its config)."""
    gemma = hf.model_type in ("gemma2", "gemma3_text")
    fields: dict[str, Any] = dict(
        src_vocab_size=0,
        tgt_vocab_size=hf.vocab_size,
        d_model=hf.hidden_size,
        num_heads=hf.num_attention_heads,
        num_kv_heads=hf.num_key_value_heads,
        head_size=getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads,
        d_ff=hf.intermediate_size,
        num_encoder_layers=0,
        num_decoder_layers=hf.num_hidden_layers,
        dropout=0.0,
        arch="decoder-only",
        norm_first=True,
        norm="rmsnorm",
        layer_norm_eps=hf.rms_norm_eps,
        ffn_gated=True,
        activation="gelu_tanh" if gemma else "silu",
        positional="rotary",
        bias=False,
        qkv_bias=bool(getattr(hf, "attention_bias", False)) or hf.model_type == "qwen2",
        tie_output=hf.tie_word_embeddings,
        scale_embeddings=gemma,
        max_len=hf.max_position_embeddings,
        pad_id=0,
        qk_norm=hf.model_type in ("qwen3", "gemma3_text"),
    )
    if gemma:
        types = tuple("sliding" if kind == "sliding_attention" else "full" for kind in hf.layer_types)
        if hf.model_type == "gemma2":
            fields.update(hf_rope_settings(hf))
            fields.update(attention_softcap=hf.attn_logit_softcapping, logit_softcap=hf.final_logit_softcapping)
        else:
            fields.update(hf_rope_settings(hf, "full_attention"))
            fields.update(rope_local_theta=float(hf.rope_parameters["sliding_attention"]["rope_theta"]))
        fields.update(
            norm_unit_offset=True,
            sandwich_norm=True,
            attention_scale=hf.query_pre_attn_scalar**-0.5,
            sliding_window=hf.sliding_window,
            layer_types=types,
        )
    else:
        fields.update(hf_rope_settings(hf))
        window = getattr(hf, "sliding_window", None)
        if window is not None and getattr(hf, "use_sliding_window", True):
            fields.update(sliding_window=window)
    return ModelConfig(**fields)


def load_from_hf(hf: Any) -> Transformer:
    """A dotformer model holding a tiny HF causal LM's weights, copied by the names of the agreed interface."""
    gemma = hf.config.model_type in ("gemma2", "gemma3_text")
    norms = (
        {
            "input_layernorm": "res_self.norm",
            "post_attention_layernorm": "res_self.post_norm",
            "pre_feedforward_layernorm": "res_ff.norm",
            "post_feedforward_layernorm": "res_ff.post_norm",
        }
        if gemma
        else {"input_layernorm": "res_self.norm", "post_attention_layernorm": "res_ff.norm"}
    )
    parts = {
        "self_attn.q_proj": "self_attn.W_q",
        "self_attn.k_proj": "self_attn.W_k",
        "self_attn.v_proj": "self_attn.W_v",
        "self_attn.o_proj": "self_attn.W_o",
        "self_attn.q_norm": "self_attn.q_norm",
        "self_attn.k_norm": "self_attn.k_norm",
        "mlp.gate_proj": "feed_forward.W_gate",
        "mlp.up_proj": "feed_forward.W_1",
        "mlp.down_proj": "feed_forward.W_2",
        **norms,
    }
    model = Transformer(config_from_hf(hf.config)).eval()
    ours = dict(model.named_parameters(remove_duplicate=False))
    copied = set()
    for name, tensor in hf.state_dict().items():
        if name == "model.embed_tokens.weight":
            target = "tgt_embed.token.lookup.weight"
        elif name == "model.norm.weight":
            target = "decoder.final_norm.weight"
        elif name == "lm_head.weight":
            target = "generator.weight"
        else:
            _, _, index, rest = name.split(".", 3)
            module, leaf = rest.rsplit(".", 1)
            target = f"decoder.layers.{index}.{parts[module]}.{leaf}"
        with torch.no_grad():
            ours[target].copy_(tensor)
        copied.add(target)
    assert copied >= set(dict(model.named_parameters())), "every parameter comes from the HF model"
    return model


def hf_model(family: str) -> Any:
    """A tiny HF causal LM of ``family`` with random weights (norms moved off 1 or 0 too), eager attention."""
    torch.manual_seed(0)
    common: dict[str, Any] = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        initializer_range=0.2,
        pad_token_id=0,
        attn_implementation="eager",
    )
    if family == "llama":
        config = transformers.LlamaConfig(
            **common, tie_word_embeddings=False, rms_norm_eps=1e-5, rope_parameters=ROPES["llama3"][0]
        )
        model = transformers.LlamaForCausalLM(config)
    elif family == "mistral":
        config = transformers.MistralConfig(**common, sliding_window=4, head_dim=8, tie_word_embeddings=False)
        model = transformers.MistralForCausalLM(config)
    elif family == "qwen2":
        config = transformers.Qwen2Config(**common, tie_word_embeddings=True)
        model = transformers.Qwen2ForCausalLM(config)
    elif family == "qwen3":
        config = transformers.Qwen3Config(**common, head_dim=16, tie_word_embeddings=True)
        model = transformers.Qwen3ForCausalLM(config)
    elif family == "gemma2":
        config = transformers.Gemma2Config(
            **common,
            head_dim=16,
            query_pre_attn_scalar=12,
            sliding_window=3,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            attn_logit_softcapping=2.0,
            final_logit_softcapping=4.0,
        )
        model = transformers.Gemma2ForCausalLM(config)
    else:
        rope = {
            "full_attention": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
        }
        config = transformers.Gemma3TextConfig(
            **common,
            head_dim=16,
            query_pre_attn_scalar=12,
            sliding_window=3,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            rope_parameters=rope,
        )
        model = transformers.Gemma3ForCausalLM(config)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.add_(torch.randn_like(parameter) * 0.3)
            if "bias" in name:
                parameter.normal_(0, 0.2)
    return model.eval()


@pytest.mark.numerical
@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3"])
def test_a_tiny_hf_model_and_dotformer_give_the_same_logits(family: str) -> None:
    hf = hf_model(family)
    model = load_from_hf(hf)
    tokens = torch.tensor([[1, 5, 6, 7, 8, 9, 10, 11, 12], [1, 9, 10, 11, 2, 0, 0, 0, 0]])  # right-padded
    keep = tokens != 0
    with torch.no_grad():
        theirs = hf(input_ids=tokens, attention_mask=keep.long()).logits
        ours = model(tgt=tokens)
        cache, steps = DecoderCache(), []
        for t in range(tokens.size(1)):
            steps.append(model.generator(model.decode(tokens[:, t : t + 1], cache=cache).hidden))
    bound = logits_tolerance(model.config, theirs)
    assert float(theirs.abs().max()) > 0.5  # logits that carry the weights, not a flat near-zero output
    torch.testing.assert_close(ours[keep], theirs[keep], rtol=0, atol=bound)
    torch.testing.assert_close(torch.cat(steps, 1)[keep], theirs[keep], rtol=0, atol=bound)


def test_the_2017_exporters_refuse_a_modern_switch_by_name(tmp_path: Any) -> None:
    from dotformer.export.ct2_rules import model_problem
    from dotformer.export.onnx_lm import export_lm_onnx

    model = Transformer(decoder_config(positional="learned", norm="layernorm", norm_unit_offset=False))
    with pytest.raises(ConfigError, match=r"ModelConfig\.activation='gelu_tanh'.*2017 block"):
        export_lm_onnx(model, tmp_path / "onnx")
    assert model_problem(ModelConfig(13, 13, positional="rotary", norm="rmsnorm")) is None  # a Translator carries them
    problem = model_problem(ModelConfig(13, 13, qk_norm=True))  # a Translator: what its encoder-decoder lacks
    assert problem is not None and problem.startswith("ModelConfig.qk_norm=True")
    problem = model_problem(decoder_config(attention_softcap=5.0))  # a Generator: what CTranslate2 lacks
    assert problem is not None and problem.startswith("ModelConfig.attention_softcap=5.0")
    assert model_problem(ModelConfig(13, 13)) is None
