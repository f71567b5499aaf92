"""The 2017 block's outputs are pinned: every modern switch defaults off, and with them off the models give the outputs
recorded in tests/data/pinned_2017.safetensors (fixed seeds, fixed inputs) exactly.

Three tiny models cover the 2017 block's switches: an encoder-decoder (post-LN, ReLU, sinusoids, biases, tied output),
a decoder-only model (pre-LN, GELU, learned positions, no biases, untied output) and an encoder-only classifier
(SiLU, N(0, 0.02²) init, an embedding LayerNorm). Each runs padded, with the attention weights (the reference
attention), packed and (with a decoder) step by step with the KV cache. float32 outputs must be bit-identical where
the recording's CPU kernels run (the same ATen CPU capability); float64 outputs must agree within float64's
reordering bound on any CPU, which no change to a formula survives.

``python tests/test_pinned_2017.py`` writes the file again (only for a deliberate change of the 2017 block).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from tolerance import reordering_bound
from torch import Tensor

from dotformer import ModelConfig, Transformer
from dotformer.decoding.cache import DecoderCache

DATA = Path(__file__).parent / "data" / "pinned_2017.safetensors"
VOCAB = 13
CONFIGS = {
    "encdec": dict(arch="encoder-decoder"),
    "lm": dict(
        arch="decoder-only",
        norm_first=True,
        activation="gelu",
        positional="learned",
        max_len=16,
        bias=False,
        tie_output=False,
        src_vocab_size=0,
        num_encoder_layers=0,
    ),
    "cls": dict(
        arch="encoder-only",
        activation="silu",
        init_std=0.02,
        embedding_norm=True,
        scale_embeddings=False,
        head="sequence",
        num_labels=3,
        num_decoder_layers=0,
    ),
}


def build(name: str, recorded: dict[str, Tensor] | None = None) -> Transformer:
    """The pinned model ``name`` in eval mode (float32): with ``recorded`` (the recording's tensors) its weights as
    recorded beside its outputs, without them as drawn from seed 0. The recording keeps them because torch's
    ``normal_`` rounds its float32 draws by the CPU's vector unit (its AVX2 kernel against the baseline's), so seed 0
    gives other weights on another CPU."""
    torch.manual_seed(0)
    base = dict(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, d_model=16, num_heads=4, d_ff=32, dropout=0.0)
    base.update(num_encoder_layers=2, num_decoder_layers=2)
    model = Transformer(ModelConfig(**{**base, **CONFIGS[name]})).eval()
    if recorded is not None:
        prefix = f"weights.{name}."
        model.load_state_dict({k[len(prefix) :]: v for k, v in recorded.items() if k.startswith(prefix)}, strict=True)
    return model


def inputs() -> tuple[Tensor, Tensor]:
    """(src, tgt): two right-padded rows each (PAD = 0, BOS = 1)."""
    src = torch.tensor([[5, 6, 7, 8, 2], [9, 4, 2, 0, 0]])
    tgt = torch.tensor([[1, 5, 6, 7, 8, 2], [1, 9, 10, 2, 0, 0]])
    return src, tgt


def stepwise(model: Transformer, tgt: Tensor, memory: Tensor | None, src_mask: Tensor | None) -> Tensor:
    """The generator's logits of ``tgt``, one position at a time through the KV cache: (B, T, V)."""
    cache = DecoderCache()
    steps = []
    for t in range(tgt.size(1)):
        hidden = model.decode(tgt[:, t : t + 1], memory, src_mask=src_mask, cache=cache).hidden  # (B, 1, D)
        steps.append(model.generator(hidden))
    return torch.cat(steps, dim=1)  # (B, T, V)


def outputs(name: str, model: Transformer) -> dict[str, Tensor]:
    """Every pinned output of one model, keyed ``name.what``."""
    src, tgt = inputs()
    out: dict[str, Tensor] = {}
    with torch.no_grad():
        if name == "cls":
            out["scores"] = model(src=src)
            out["packed"] = model(src=src, packed=True)
            encoded = model.encode(src, need_weights=True)
            out["memory"], out["weights"] = encoded.memory, torch.stack(encoded.self_weights)
        else:
            memory, src_mask = None, None
            if name == "encdec":
                src_mask = model.source_mask(src)
                encoded = model.encode(src, need_weights=True)
                memory = encoded.memory
                out["memory"], out["enc_weights"] = memory, torch.stack(encoded.self_weights)
                out["logits"] = model(src=src, tgt=tgt)
                out["packed"] = model(src=src, tgt=tgt, packed=True)
            else:
                out["logits"] = model(tgt=tgt)
                out["packed"] = model(tgt=tgt, packed=True)
            decoded = model.decode(tgt, memory, src_mask=src_mask, need_weights=True)
            out["hidden"], out["self_weights"] = decoded.hidden, torch.stack(decoded.self_weights)
            out["stepwise"] = stepwise(model, tgt, memory, src_mask)
    return {f"{name}.{key}": value.contiguous() for key, value in out.items()}


def all_outputs(dtype: torch.dtype, recorded: dict[str, Tensor] | None = None) -> dict[str, Tensor]:
    """The pinned outputs of the three models in ``dtype`` (float64: the float32 weights, converted), from the
    weights in ``recorded`` or, without it, from those seed 0 draws on this CPU (:func:`build`)."""
    result: dict[str, Tensor] = {}
    for name in CONFIGS:
        result.update(outputs(name, build(name, recorded).to(dtype)))
    return result


def test_the_2017_block_is_bit_identical_on_the_recording_cpu() -> None:
    recorded = load_file(DATA)
    capability = torch.backends.cpu.get_cpu_capability()
    with safe_open(str(DATA), "pt") as handle:
        recorded_on = (handle.metadata() or {}).get("cpu_capability")
    if capability != recorded_on:
        pytest.skip(f"recorded on ATen CPU capability {recorded_on}, this run uses {capability} (float64 test runs)")
    now = all_outputs(torch.float32, recorded)
    for key, value in now.items():
        assert torch.equal(value, recorded[f"float32.{key}"]), key


@pytest.mark.numerical
def test_the_2017_block_agrees_in_float64_on_every_cpu() -> None:
    recorded = load_file(DATA)
    now = all_outputs(torch.float64, recorded)
    assert {f"float64.{key}" for key in now} == {key for key in recorded if key.startswith("float64.")}
    for key, value in now.items():
        expected = recorded[f"float64.{key}"]
        # Σn well under 2000 terms for these models (D=16, F=32, 2 + 2 layers, 6 positions)
        bound = reordering_bound([2000], float(expected.abs().max()), torch.float64)
        assert (value - expected).abs().max() <= bound, key
        assert not torch.equal(expected, torch.zeros_like(expected)), key


if __name__ == "__main__":
    tensors = {f"float32.{k}": v for k, v in all_outputs(torch.float32).items()}
    tensors.update({f"float64.{k}": v for k, v in all_outputs(torch.float64).items()})
    for model_name in CONFIGS:
        weights = build(model_name).state_dict()
        tensors.update({f"weights.{model_name}.{k}": v.clone() for k, v in weights.items()})  # tied: apart
    save_file(tensors, str(DATA), metadata={"cpu_capability": torch.backends.cpu.get_cpu_capability()})
    print(f"wrote {len(tensors)} tensors to {DATA}")
