"""dotformer import --from gguf: a GGUF file written here with the gguf package's GGUFWriter from a tiny Llama built
by transformers (F32 tables and norms, Q8_0 attention and gates quantized by gguf.quants.quantize, a Q4_K
down-projection), W_q and W_k permuted as llama.cpp's converter does, imports to exactly the dequantized weights, and
gives the logits of transformers' model holding those weights; a file without a tokenizer.json beside it and an
architecture not read are refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tolerance import logits_tolerance

gguf = pytest.importorskip("gguf")
pytest.importorskip("transformers")

from test_import_hf import PROMPTS, save_family  # noqa: E402

Q8_0, Q4_K = gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_K
LAYER = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def llama_cpp_permute(weight: np.ndarray, heads: int) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute of a (heads·Dh, D) W_q or W_k."""
    return (
        weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)
    )


def random_q4_k(rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """(rows, cols / 256 · 144) uint8: Q4_K blocks (d, dmin as float16, 12 bytes of scales, 128 of 4-bit values)."""
    blocks = rng.integers(0, 256, size=(rows, cols // 256, 144), dtype=np.uint8)
    blocks[..., 0:2] = np.frombuffer(np.float16(0.004).tobytes(), dtype=np.uint8)
    blocks[..., 2:4] = np.frombuffer(np.float16(0.002).tobytes(), dtype=np.uint8)
    return blocks.reshape(rows, -1)


def write_gguf(hf_model: Any, path: Path, tokenizer_tokens: list[str]) -> dict[str, torch.Tensor]:
    """Write ``hf_model`` (a Llama) as GGUF; return HF name -> the weight the file holds, dequantized and unpermuted."""
    from gguf.quants import dequantize, quantize

    c = hf_model.config
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_uint32("llama.block_count", c.num_hidden_layers)
    writer.add_uint32("llama.context_length", c.max_position_embeddings)
    writer.add_uint32("llama.embedding_length", c.hidden_size)
    writer.add_uint32("llama.feed_forward_length", c.intermediate_size)
    writer.add_uint32("llama.attention.head_count", c.num_attention_heads)
    writer.add_uint32("llama.attention.head_count_kv", c.num_key_value_heads)
    writer.add_float32("llama.attention.layer_norm_rms_epsilon", c.rms_norm_eps)
    writer.add_float32("llama.rope.freq_base", c.rope_parameters["rope_theta"])
    writer.add_uint32("tokenizer.ggml.bos_token_id", c.bos_token_id)
    writer.add_uint32("tokenizer.ggml.eos_token_id", c.eos_token_id)
    writer.add_bool("tokenizer.ggml.add_bos_token", True)
    writer.add_array("tokenizer.ggml.tokens", tokenizer_tokens)
    rng = np.random.default_rng(0)
    held: dict[str, torch.Tensor] = {}
    for name, parameter in hf_model.state_dict().items():
        weight = parameter.numpy().astype(np.float32)
        if name == "model.embed_tokens.weight":
            gguf_name = "token_embd.weight"
        elif name == "model.norm.weight":
            gguf_name = "output_norm.weight"
        elif name == "lm_head.weight":
            gguf_name = "output.weight"
        else:
            _, _, i, *rest = name.split(".")
            gguf_name = f"blk.{i}.{LAYER['.'.join(rest[:-1])]}.weight"
        heads = {"attn_q": c.num_attention_heads, "attn_k": c.num_key_value_heads}.get(gguf_name.split(".")[-2], 0)
        stored = llama_cpp_permute(weight, heads) if heads else weight
        if weight.ndim == 1 or gguf_name.startswith(("token_embd", "output")):
            writer.add_tensor(gguf_name, stored)
            values = stored
        elif gguf_name.endswith("ffn_down.weight"):
            data = random_q4_k(*stored.shape, rng)
            writer.add_tensor(gguf_name, data, raw_dtype=Q4_K)
            values = dequantize(data, Q4_K)
        else:
            data = quantize(stored, Q8_0)
            writer.add_tensor(gguf_name, data, raw_dtype=Q8_0)
            values = dequantize(data, Q8_0)
        values = llama_cpp_unpermuted(values, heads) if heads else values
        held[name] = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return held


def llama_cpp_unpermuted(weight: np.ndarray, heads: int) -> np.ndarray:
    """The inverse of :func:`llama_cpp_permute`, found by permuting the row numbers."""
    order = llama_cpp_permute(np.arange(weight.shape[0])[:, None], heads)[:, 0]
    out = np.empty_like(weight)
    out[order] = weight
    return out


@pytest.mark.numerical
def test_gguf_imports_to_the_dequantized_weights_and_transformers_logits(tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    from dotformer.checkpoint import load_checkpoint
    from dotformer.decoding.inputs import encode_prompt, text_rules
    from dotformer.decoding.translate import pad_batch
    from dotformer.imports.gguf import import_gguf

    hf_model = save_family("llama", tmp_path, intermediate_size=256)
    tokenizer = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    tokens = [tokenizer.id_to_token(i) for i in range(tokenizer.get_vocab_size())]
    held = write_gguf(hf_model, tmp_path / "model.gguf", tokens)
    import_gguf(tmp_path / "model.gguf", tmp_path / "ckpt")
    loaded = load_checkpoint(tmp_path / "ckpt")
    model = loaded.model.eval()

    layer = model.decoder.layers[1]
    exact = {
        "model.layers.1.self_attn.q_proj.weight": layer.self_attn.W_q.weight,  # Q8_0, permuted in the file
        "model.layers.1.self_attn.k_proj.weight": layer.self_attn.W_k.weight,
        "model.layers.1.mlp.gate_proj.weight": layer.feed_forward.W_gate.weight,
        "model.layers.1.mlp.down_proj.weight": layer.feed_forward.W_2.weight,  # Q4_K
        "model.layers.1.input_layernorm.weight": layer.res_self.norm.weight,  # F32
        "lm_head.weight": model.generator.weight[4:],
        "model.embed_tokens.weight": model.tgt_embed.token.lookup.weight[4:],
    }
    for name, ours in exact.items():
        assert torch.equal(ours, held[name]), name

    hf_model.load_state_dict(held)  # transformers' model with the weights the file holds
    rows = [encode_prompt(loaded.tgt_tokenizer, text, text_rules(loaded.info)) for text in PROMPTS]
    with torch.no_grad():
        ours = model(tgt=pad_batch(rows)).float()
        for b, row in enumerate(rows):
            theirs = [hf_model.config.bos_token_id if i == 1 else i - 4 for i in row]  # BOS: dotformer's 1
            reference = hf_model(torch.tensor([theirs])).logits[0]  # (T, V)
            tolerance = logits_tolerance(model.config, reference[None])
            assert (ours[b, : len(row), 4:] - reference).abs().max() <= tolerance


def test_unpermute_inverts_llama_cpp_permutation() -> None:
    from dotformer.imports.gguf import unpermute

    weight = torch.randn(4 * 8, 6)
    stored = torch.from_numpy(llama_cpp_permute(weight.numpy(), 4))
    assert not torch.equal(stored, weight)
    assert torch.equal(unpermute(stored, 4), weight)


def test_gguf_without_tokenizer_json_or_of_another_architecture_is_refused(tmp_path: Path) -> None:
    from dotformer.errors import CheckpointError, ConfigError
    from dotformer.imports.gguf import import_gguf

    for arch, error, message in (("llama", CheckpointError, "no tokenizer.json beside it"), ("bert", ConfigError,
                                 "general.architecture 'bert' is not supported in GGUF")):  # fmt: skip
        path = tmp_path / f"{arch}.gguf"
        writer = gguf.GGUFWriter(str(path), arch)
        for key, value in (("block_count", 1), ("embedding_length", 32), ("feed_forward_length", 64)):
            writer.add_uint32(f"{arch}.{key}", value)
        writer.add_uint32(f"{arch}.attention.head_count", 2)
        writer.add_uint32("tokenizer.ggml.eos_token_id", 0)
        writer.add_tensor("token_embd.weight", np.zeros((8, 32), dtype=np.float32))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        with pytest.raises(error, match=message):
            import_gguf(path, tmp_path / f"out-{arch}")
