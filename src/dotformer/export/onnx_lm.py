"""Export a decoder-only language model as one ONNX graph: a cached step of the decoder alone.

``lm_step.onnx``
    inputs:  ``tokens`` (B, T) int64, the new tokens (the whole prompt on the first call, then one token a step);
    ``offset`` () int64, the position of the first of them (the number of cached positions; 0 at first);
    ``past_key_{i}``, ``past_value_{i}`` (B, H, P, Dh) for every layer (P = ``offset``; P = 0 at first).
    outputs: ``logits`` (B, V) float32 of the token after the last new one; ``present_key_{i}``,
    ``present_value_{i}`` (B, H, P + T, Dh), the past of the next call.

The step is :func:`dotformer.decoding.generate.run_decoder` with a cache, spelled out as a pure function, traced from
the model's own modules as the translation step of :mod:`dotformer.export.onnx`; positions come from a table of
``max_len`` rows stored in the graph. B, T and P are dynamic axes; the tests check the graph against dotformer's
logits with ``onnxruntime``.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch
from torch import Tensor, nn

from dotformer.data.tokenizers import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from dotformer.decoding.cache import DecoderCache, KVCache, LayerCache
from dotformer.export.onnx import ONNX_CONFIG_FILE, OPSET, _names, _position_table
from dotformer.model import Transformer

LM_STEP_FILE = "lm_step.onnx"


class LMStepGraph(nn.Module):
    """(tokens, offset, past keys/values) -> (logits of the next token, present keys/values)."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model
        self.register_buffer("positions", _position_table(model), persistent=False)  # (max_len, D)

    def forward(self, tokens: Tensor, offset: Tensor, *past: Tensor) -> tuple[Tensor, ...]:
        model = self.model
        assert model.decoder is not None and model.tgt_embed is not None
        n = len(model.decoder.layers)
        cache = DecoderCache(layers=[LayerCache(self_attn=KVCache(past[2 * i], past[2 * i + 1])) for i in range(n)])
        T = tokens.size(1)
        x = model.tgt_embed.token(tokens)  # (B, T, D), already ·√D
        where = offset.reshape(1) + torch.arange(T, device=tokens.device)  # (T,) the positions of the new tokens
        x = x + self.positions.index_select(0, where).to(x.dtype)  # (B, T, D)
        if model.tgt_embed.norm is not None:
            x = model.tgt_embed.norm(x)
        hidden = model.decoder(x, None, cache=cache).hidden  # (B, T, D)
        logits = model.generator(hidden[:, -1])  # (B, V)
        presents = []
        for layer_cache in cache.layers:
            presents += [layer_cache.self_attn.key, layer_cache.self_attn.value]  # (B, H, P + T, Dh)
        return (logits, *presents)


def write_lm_onnx(model: Transformer, output_dir: Path, opset: int = OPSET) -> None:
    """``lm_step.onnx`` and ``onnx_config.json`` in ``output_dir`` (which exists; :func:`export_onnx` checks the
    model and the directory and calls this for a decoder-only model)."""
    c = model.config
    was_training = model.training
    model.eval()
    n, H, Dh = c.num_decoder_layers, c.num_heads, c.head_dim
    B, T, P = 2, 3, 4  # example sizes for tracing; every one is a dynamic axis
    inputs = (
        torch.full((B, T), 4 % c.tgt_vocab_size, dtype=torch.int64),
        torch.tensor(P, dtype=torch.int64),
        *[torch.zeros(B, H, P, Dh) for _ in range(2 * n)],
    )
    input_names = ["tokens", "offset", *_names("past", n)]
    output_names = ["logits", *_names("present", n)]
    dynamic_axes: dict[str, dict[int, str]] = {"tokens": {0: "batch", 1: "new"}, "logits": {0: "batch"}}
    dynamic_axes.update({name: {0: "batch", 2: "past"} for name in _names("past", n)})
    dynamic_axes.update({name: {0: "batch", 2: "past_plus_new"} for name in _names("present", n)})
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # tracer warnings about Python checks, which hold for every input
            torch.onnx.export(
                LMStepGraph(model), inputs, str(output_dir / LM_STEP_FILE), input_names=input_names,
                output_names=output_names, dynamic_axes=dynamic_axes, opset_version=opset, dynamo=False,
            )  # fmt: skip
    finally:
        model.train(was_training)
    description = {
        "format": "dotformer-onnx",
        "version": 1,
        "model": c.to_dict(),
        "max_positions": c.max_len,
        "ids": {"pad": PAD_ID, "bos": BOS_ID, "eos": EOS_ID, "unk": UNK_ID},
        "lm_step": {"file": LM_STEP_FILE, "inputs": input_names, "outputs": output_names},
    }
    (output_dir / ONNX_CONFIG_FILE).write_text(json.dumps(description, indent=2) + "\n", encoding="utf-8")
