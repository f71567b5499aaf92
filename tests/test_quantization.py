"""Int8 dynamic quantization for CPU decoding: what is replaced, how far it moves the outputs, and the errors."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dotformer import ConfigError, ModelConfig, Transformer
from dotformer.decoding import DecodeConfig, decode_batch
from dotformer.decoding.quantization import count_int8_linears, quantize_int8

pytestmark = pytest.mark.numerical  # run again under another vector unit by scripts/test.sh


def tiny_model(seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    config = ModelConfig.preset("tiny", src_vocab_size=40, tgt_vocab_size=40)
    return Transformer(config).eval()


def test_every_linear_layer_is_replaced_and_the_original_is_left_alone() -> None:
    model = tiny_model()
    linears = sum(isinstance(m, nn.Linear) for m in model.modules())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    quantized = quantize_int8(model)
    # W_q, W_k, W_v, W_o per attention module, two FFN layers per layer, and the generator
    c = model.config
    assert linears == c.num_encoder_layers * (4 + 2) + c.num_decoder_layers * (8 + 2) + 1
    assert count_int8_linears(quantized) == linears
    assert count_int8_linears(model) == 0 and not quantized.training
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_one_layer_is_within_the_rounding_bound_of_the_float_layer() -> None:
    """|y_int8 - y| <= Σ_j (|x_j|·s_w/2 + |W_ij|·s_x/2 + s_x·s_w/4) per output: rounding each factor by half a step."""
    torch.manual_seed(0)
    layer = nn.Linear(64, 48)
    with torch.no_grad():  # rows of very different sizes: one scale for the whole matrix would break the bound
        layer.weight.mul_(torch.logspace(-2, 1, 48)[:, None])
    x = torch.randn(10, 64) * 3
    quantized = quantize_int8(nn.Sequential(layer))[0]
    with torch.no_grad():
        y, y_int8 = layer(x), quantized(x)
    s_w = layer.weight.abs().amax(dim=1) / 127  # (48,) per output feature (symmetric int8)
    s_x = (x.max().clamp_min(0) - x.min().clamp_max(0)) / 127  # per call, 7 bits (FBGEMM's reduced range)
    bound = x.abs().sum(1, keepdim=True) * s_w / 2 + layer.weight.abs().sum(1) * s_x / 2 + 64 * s_x * s_w / 4
    error = (y_int8 - y).abs()
    assert (error <= bound * 1.01 + 1e-5).all()
    assert 0 < error.max() < 0.1 * y.abs().max()  # really quantized, and close
    assert quantized.weight().q_per_channel_scales().shape == (48,)


def test_logits_stay_close_and_greedy_decoding_runs() -> None:
    model = tiny_model()
    quantized = quantize_int8(model)
    src = torch.randint(4, 40, (3, 7))
    tgt = torch.randint(4, 40, (3, 5))
    with torch.no_grad():
        p = model(src, tgt).log_softmax(-1).exp()
        p_int8 = quantized(src, tgt).log_softmax(-1).exp()
    assert (p - p_int8).abs().max() < 0.05  # (B, T, V) probabilities move by rounding only
    hyps = decode_batch(quantized, src, DecodeConfig(strategy="beam", beam_size=3, max_len_b=6, max_len_a=0.0))
    assert len(hyps) == 3 and all(len(h[0].tokens) <= 6 for h in hyps)


def test_non_float32_or_non_cpu_models_are_refused() -> None:
    with pytest.raises(ConfigError, match="float32"):
        quantize_int8(tiny_model().bfloat16())
    with pytest.raises(ConfigError, match="CPU"):
        quantize_int8(tiny_model().to("meta"))


def test_int8_models_cannot_be_saved_or_exported(tmp_path) -> None:
    from dotformer.checkpoint import save_checkpoint
    from dotformer.data.tokenize.tokenizer_files import train_tokenizer
    from dotformer.export.ct2 import export_ctranslate2
    from dotformer.export.torch_nn import to_torch_transformer

    quantized = quantize_int8(tiny_model())
    tokenizer = train_tokenizer("char", ["abc"])
    with pytest.raises(ConfigError, match="cannot save a checkpoint from a model with int8 linear layers"):
        save_checkpoint(tmp_path / "ckpt", quantized, tokenizer, tokenizer, {})
    with pytest.raises(ConfigError, match="int8"):
        to_torch_transformer(quantized)
    with pytest.raises(ConfigError, match="int8"):
        export_ctranslate2(quantized, tmp_path / "ct2")
    assert not (tmp_path / "ckpt").exists()
