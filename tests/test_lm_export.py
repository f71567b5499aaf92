"""A language model exported to ONNX: the cached step (prompt in one call, then one token a step) gives dotformer's
logits under onnxruntime."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from dotformer import ModelConfig, Transformer
from dotformer.decoding.cache import DecoderCache
from dotformer.decoding.generate import run_decoder

pytestmark = pytest.mark.numerical  # run again under another vector unit by scripts/test.sh

V = 17


@pytest.mark.parametrize(
    ("overrides", "prompt_length"),
    [
        ({}, 4),
        ({"norm_first": True, "positional": "learned", "activation": "gelu"}, 4),
        ({"max_len": 4, "positional": "learned"}, 1),  # a block size of 4: 4 positions in all
        ({"max_len": 4}, 1),
    ],
)
def test_the_onnx_step_gives_dotformers_logits(tmp_path, overrides, prompt_length) -> None:
    pytest.importorskip("onnx")
    onnxruntime = pytest.importorskip("onnxruntime")
    from dotformer.export.onnx_lm import LM_STEP_FILE, export_lm_onnx

    config = ModelConfig.preset("tiny", src_vocab_size=V, tgt_vocab_size=V, arch="decoder-only", max_len=32)
    model = Transformer(config.replace(**overrides)).eval()
    export_lm_onnx(model, tmp_path / "lm")
    description = json.loads((tmp_path / "lm" / "onnx_config.json").read_text())
    assert description["lm_step"]["file"] == LM_STEP_FILE
    session = onnxruntime.InferenceSession(str(tmp_path / "lm" / LM_STEP_FILE), providers=["CPUExecutionProvider"])
    names = description["lm_step"]["outputs"]
    prompt = torch.tensor([[2, 5, 6, 7], [2, 9, 4, 4]])[:, :prompt_length]  # (B, T): the prompt in one call
    feeds = {
        f"past_{kind}_{i}": np.zeros((2, 4, 0, 16), dtype=np.float32) for i in range(2) for kind in ("key", "value")
    }
    cache = DecoderCache()
    new, offset = prompt, 0
    with torch.inference_mode():
        for _ in range(4):  # a prompt of 1 and 3 steps fill every position of a 4-position model
            expected = run_decoder(model, new, cache).exp()  # (B, V) probabilities, dotformer cached
            step = session.run(names, {**feeds, "tokens": new.numpy(), "offset": np.array(offset)})
            out = dict(zip(names, step, strict=True))
            got = torch.from_numpy(out["logits"]).float().softmax(-1)
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
            offset += new.size(1)
            feeds = {name.replace("present", "past"): value for name, value in out.items() if name != "logits"}
            new = expected.argmax(-1, keepdim=True)  # (B, 1) the next token
    assert out["present_key_0"].shape == (2, 4, offset, 16)


def test_export_lm_onnx_refuses_a_translation_model(tmp_path) -> None:
    pytest.importorskip("onnx")
    from dotformer.errors import ConfigError
    from dotformer.export.onnx_lm import export_lm_onnx

    model = Transformer(ModelConfig.preset("tiny", src_vocab_size=V, tgt_vocab_size=V))
    with pytest.raises(ConfigError, match="decoder-only"):
        export_lm_onnx(model, tmp_path / "x")


def test_export_lm_onnx_refuses_fewer_than_3_positions(tmp_path) -> None:
    pytest.importorskip("onnx")
    from dotformer.errors import ConfigError
    from dotformer.export.onnx_lm import export_lm_onnx

    config = ModelConfig.preset("tiny", src_vocab_size=V, tgt_vocab_size=V, arch="decoder-only", max_len=2)
    with pytest.raises(ConfigError) as caught:
        export_lm_onnx(Transformer(config), tmp_path / "x")
    assert str(caught.value) == (
        "export to ONNX needs a language model of at least 3 positions (its block size); this one has 2"
    )
    assert not (tmp_path / "x").exists()
