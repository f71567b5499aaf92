"""The modern block exported to CTranslate2's decoder-only spec: ``ctranslate2.Generator`` gives dotformer's logits
and greedy tokens for tiny models in the shapes of Llama (GQA, RoPE and its llama3 scaling, RMSNorm, SwiGLU), Qwen2
(biases on q, k, v), Qwen3 (QK-norm), Mistral (a sliding window), Gemma 2 and Gemma 3 (sandwich norms, (1 + w)
RMSNorm, GeGLU, sliding and full layers, a local RoPE base, the logits' soft cap); what CTranslate2 lacks is refused
by name; ``dotformer generate --engine ctranslate2`` continues such a checkpoint as the torch engine does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from decoding_support import single_thread
from tolerance import logits_tolerance

from dotformer import ModelConfig, Transformer
from dotformer.data.tokenize.tokenizers import BOS_ID, EOS_ID, PAD_ID
from dotformer.decoding.config import generation_config
from dotformer.decoding.generate import generate
from dotformer.errors import ConfigError
from dotformer.export.ct2 import id_vocabulary

pytestmark = pytest.mark.numerical  # run again under another vector unit by scripts/test.sh

ctranslate2 = pytest.importorskip("ctranslate2")

V = 17
STREAM = [5, 6, 7, EOS_ID, 8, 9, 10, 11, 12, EOS_ID, 13, 14, 15, 16, EOS_ID]  # three "lines", repeated
PROMPTS = [[EOS_ID], [EOS_ID, 5, 6], [EOS_ID, 13, 14, 15, 16]]  # at most W = 5 tokens (the sliding window)
STEPS = 16
SUPPRESSED = [["<pad>"], ["<s>"]]  # dotformer never generates PAD or BOS
LLAMA = {
    "norm": "rmsnorm",
    "ffn_gated": True,
    "positional": "rotary",
    "activation": "silu",
    "scale_embeddings": False,
    "bias": False,
    "num_kv_heads": 2,
}
GEMMA = {
    **LLAMA,
    "activation": "gelu_tanh",
    "scale_embeddings": True,
    "norm_unit_offset": True,
    "sandwich_norm": True,
    "sliding_window": 5,
    "layer_types": ("sliding", "full"),
}
FAMILIES = {
    "llama": LLAMA,
    "llama3.1": {**LLAMA, "bias": True, "rope_theta": 5e5, "rope_scaling": "llama3", "rope_factor": 8.0,
                 "rope_original_max_len": 16, "tie_output": False},
    "qwen2": {**LLAMA, "qkv_bias": True, "num_kv_heads": 1},
    "qwen3": {**LLAMA, "qk_norm": True, "head_size": 24},
    "mistral": {**LLAMA, "sliding_window": 5},
    "gemma2": {**GEMMA, "logit_softcap": 4.0, "attention_scale": 0.2},
    "gemma3": {**GEMMA, "qk_norm": True, "head_size": 24, "rope_theta": 1e6, "rope_local_theta": 1e4,
               "rope_scaling": "linear", "rope_factor": 2.0},
    "partial rotary, post-LN": {**LLAMA, "rope_fraction": 0.5, "rope_theta": 100.0, "norm_first": False},
}  # fmt: skip


def tiny(**overrides: Any) -> ModelConfig:
    """The tiny preset as a pre-norm decoder-only model without dropout, with ``overrides``."""
    base = {"arch": "decoder-only", "max_len": 48, "dropout": 0.0, "norm_first": True}
    return ModelConfig.preset("tiny", src_vocab_size=V, tgt_vocab_size=V, **{**base, **overrides})


def fitted_model(**overrides: Any) -> Transformer:
    """A tiny decoder-only model fitted briefly to a repeating stream of three lines (its greedy output varies, and
    every weight has moved off its initial value: a norm or gate copied wrong shows)."""
    torch.manual_seed(0)
    model = Transformer(tiny(**overrides))
    stream = torch.tensor(STREAM * 3)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    with single_thread():
        for step in range(40):
            start = step % len(STREAM)
            window = stream[start : start + 25][None]  # (1, 25)
            logits = model.generator(model.decode(window[:, :-1]).hidden)
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), window[:, 1:].flatten())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.eval()


def exported(model: Transformer, directory: Path):
    from dotformer.export.ct2_lm import export_language_model

    export_language_model(model, directory)
    return ctranslate2.Generator(str(directory), device="cpu", intra_threads=1), id_vocabulary(V)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_generator_gives_dotformers_logits_and_greedy_tokens(tmp_path: Path, family: str) -> None:
    from dotformer.export.ct2 import ids_to_tokens, tokens_to_ids

    model = fitted_model(**FAMILIES[family])
    generator, vocabulary = exported(model, tmp_path / "ct2")
    real = [i for i in range(V) if i not in (PAD_ID, BOS_ID)]  # PAD and BOS are suppressed by the export
    produced = set()
    for prompt in PROMPTS:
        tokens = ids_to_tokens(prompt, vocabulary)
        logits = np.array(generator.forward_batch([tokens]))  # (1, T, V)
        with torch.no_grad():
            expected = model.generator(model.decode(torch.tensor([prompt])).hidden)  # (1, T, V)
        tolerance = logits_tolerance(model.config, expected)
        np.testing.assert_allclose(logits[..., real], expected.numpy()[..., real], atol=tolerance, rtol=0)
        (result,) = generator.generate_batch(
            [tokens], max_length=STEPS, include_prompt_in_result=False, end_token=[], suppress_sequences=SUPPRESSED
        )
        (ours,) = generate(model, prompt, generation_config(STEPS, "greedy"), window=48)
        assert tokens_to_ids(result.sequences[0], vocabulary) == ours.tokens
        produced.update(ours.tokens)
    assert EOS_ID in produced and len(produced) > 4  # the test can tell: line ends, varied tokens


def spec_settings(overrides: dict) -> dict[str, Any]:
    """The scalar settings of the spec of a tiny model of ``overrides``, by CTranslate2's names (``decoder/...``)."""
    from dotformer.export.ct2_lm import language_model_spec

    variables = language_model_spec(Transformer(tiny(**overrides))).variables()
    return {name: variable.numpy().item() for name, variable in variables.items() if variable.shape == ()}


def test_the_spec_carries_each_switch() -> None:
    """The switches land where CTranslate2 reads them: a full layer among sliding ones has no window, a sliding
    layer's RoPE base is the local one and unscaled, Gemma's norms are (1 + w), llama3's factor is stored (CTranslate2
    reads 1 without it)."""
    gemma3 = spec_settings(FAMILIES["gemma3"])
    sliding, full = "decoder/layer_0/self_attention/", "decoder/layer_1/self_attention/"
    assert (gemma3[sliding + "sliding_window"], gemma3[full + "sliding_window"]) == (5, 0)
    assert (gemma3[sliding + "rotary_base"], gemma3[full + "rotary_base"]) == (1e4, 1e6)
    assert sliding + "rotary_scaling_type" not in gemma3 and gemma3[full + "rotary_scaling_factor"] == 2.0
    assert gemma3[sliding + "q_norm/layer_norm_use_residual"] == 1
    assert gemma3["decoder/layer_0/post_feedforward_layer_norm/layer_norm_use_residual"] == 1
    llama = spec_settings(FAMILIES["llama3.1"])
    attention = "decoder/layer_0/self_attention/"
    assert llama[attention + "rotary_scaling_factor"] == 8.0 and llama[attention + "original_max_position_embeddings"]
    assert llama[attention + "num_heads_kv"] == 2 and "decoder/position_encodings/encodings" not in llama


def test_the_modern_block_exports_quantized(tmp_path: Path) -> None:
    """``quantization="int8_float32"`` stores the linear weights in int8 (a model.bin under a third of float32's, the
    norms and QK-norms kept) that the Generator loads and runs."""
    from dotformer.export.ct2 import ids_to_tokens
    from dotformer.export.ct2_lm import export_language_model

    model = Transformer(tiny(**FAMILIES["gemma3"])).eval()
    export_language_model(model, tmp_path / "float32")
    export_language_model(model, tmp_path / "int8", quantization="int8_float32")
    sizes = {name: (tmp_path / name / "model.bin").stat().st_size for name in ("float32", "int8")}
    assert sizes["int8"] < sizes["float32"] / 3
    generator = ctranslate2.Generator(str(tmp_path / "int8"), device="cpu", intra_threads=1)
    (result,) = generator.generate_batch([ids_to_tokens(PROMPTS[1], id_vocabulary(V))], max_length=STEPS,
                                         include_prompt_in_result=False, end_token=[])  # fmt: skip
    assert len(result.sequences[0]) == STEPS


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({**FAMILIES["gemma2"], "attention_softcap": 5.0}, "ModelConfig.attention_softcap=5.0: CTranslate2 has no"),
        ({**LLAMA, "rope_scaling": "yarn", "rope_factor": 4.0}, "ModelConfig.rope_scaling='yarn': CTranslate2 scales"),
    ],
)
def test_what_ctranslate2_lacks_is_refused_by_name(tmp_path: Path, overrides: dict, message: str) -> None:
    from dotformer.export.ct2_lm import export_language_model

    with pytest.raises(ConfigError) as caught:
        export_language_model(Transformer(tiny(**overrides)), tmp_path / "ct2")
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)
    assert not (tmp_path / "ct2").exists()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"qk_norm": True}, "ModelConfig.qk_norm=True: CTranslate2's Translator does not give"),
        ({"sandwich_norm": True}, "ModelConfig.sandwich_norm=True: CTranslate2's Translator has no norm after"),
        ({"sliding_window": 4}, "ModelConfig.sliding_window=4: CTranslate2's Translator cannot score a target"),
        ({"attention_softcap": 5.0}, "ModelConfig.attention_softcap=5.0: CTranslate2 has no soft cap"),
    ],
)
def test_a_translation_model_refuses_what_the_translator_lacks_by_name(
    tmp_path: Path, overrides: dict, message: str
) -> None:
    """The Translator carries the modern block (tests/test_export.py, tests/test_engines.py) but for these."""
    from dotformer.engines.choice import ct2_problem
    from dotformer.export.ct2 import export_ctranslate2

    base = {**LLAMA, "norm_first": True, "scale_embeddings": True}
    config = ModelConfig.preset("tiny", src_vocab_size=V, tgt_vocab_size=V, **{**base, **overrides})
    with pytest.raises(ConfigError) as caught:
        export_ctranslate2(Transformer(config), tmp_path / "ct2")
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)
    assert not (tmp_path / "ct2").exists()
    assert str(ct2_problem(config, "float32", "cpu")).startswith(message)  # auto decodes it on torch
    assert ct2_problem(ModelConfig.preset("tiny", src_vocab_size=V, tgt_vocab_size=V, **base), "float32", "cpu") is None


# -- the command line and the engine -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def modern_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Gemma-3-shaped language model (sliding and full layers, W = 5) saved with a symbol tokenizer."""
    from dotformer.checkpoint import save_checkpoint
    from dotformer.data.tokenize.tokenizer_files import train_tokenizer

    symbols = train_tokenizer("symbol", [" ".join(f"a{i}" for i in range(V - 4))])
    assert symbols.vocab_size == V
    model = fitted_model(**FAMILIES["gemma3"])
    root = tmp_path_factory.mktemp("modern")
    return save_checkpoint(root / "lm", model, symbols, symbols, {"task": "lm", "data": {"block_size": 32}})


def test_export_and_generate_on_ctranslate2(modern_checkpoint: Path, tmp_path: Path, capsys) -> None:
    import dotformer
    from dotformer.cli import main
    from dotformer.engines.choice import EngineOptionError

    out = tmp_path / "ct2"
    assert main(["export", "--to", "ct2", str(modern_checkpoint), str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {out} (ct2)\n" and (out / "model.bin").is_file()
    outputs = {}
    for engine in ("torch", "ctranslate2", "auto"):
        argv = ["--checkpoint", str(modern_checkpoint), "--engine", engine, "--greedy", "--max-new-tokens", "16"]
        assert main(["generate", *argv, "--prompt", "a9 a10"]) == 0
        outputs[engine] = capsys.readouterr().out
    assert outputs["torch"] == outputs["ctranslate2"] == outputs["auto"] and outputs["torch"].count("a") > 4
    ct2 = dotformer.load(modern_checkpoint, device="cpu", engine="ctranslate2", intra_threads=1)
    reference = dotformer.load(modern_checkpoint, device="cpu", engine="torch")
    auto = dotformer.load(modern_checkpoint, device="cpu")
    assert ct2.engine == auto.engine == "ctranslate2"
    long_prompt = "a1 a2 a3 a4 a5 a6"  # 7 tokens with the line start: beyond the window of 5
    with pytest.raises(EngineOptionError, match=r"longer than the model's sliding window \(5\)"):
        ct2.generate(long_prompt, max_new_tokens=8, strategy="greedy")
    assert auto.generate(long_prompt, max_new_tokens=8, strategy="greedy") == reference.generate(
        long_prompt, max_new_tokens=8, strategy="greedy"
    )
