"""Export a decoder-only language model as one ONNX graph: a cached step of the decoder alone.

``lm_step.onnx``
    inputs:  ``tokens`` (B, T) int64, the new tokens (the whole prompt on the first call, then one token a step);
    ``offset`` () int64, the position of the first of them (the number of cached positions; 0 at first);
    ``past_key_{i}``, ``past_value_{i}`` (B, H, P, Dh) for every layer (P = ``offset``; P = 0 at first).
    outputs: ``logits`` (B, V) float32 of the token after the last new one; ``present_key_{i}``,
    ``present_value_{i}`` (B, H, P + T, Dh), the past of the next call.

The step is :func:`dotformer.decoding.generate.run_decoder` with a cache, spelled out as a pure function, traced from
the model's own modules as the translation step of :mod:`dotformer.export.onnx`; positions are rows of the
model's positional table (at most ``max_len``). B, T and P are dynamic axes; the tests check the graph against
dotformer's logits with ``onnxruntime``.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn

from dotformer.decoding.cache import DecoderCache, KVCache, LayerCache
from dotformer.decoding.quantization import require_float_weights
from dotformer.errors import ConfigError
from dotformer.export.onnx import OPSET, _names, write_description, write_graphs
from dotformer.model import Transformer

LM_STEP_FILE = "lm_step.onnx"


class LMStepGraph(nn.Module):
    """(tokens, offset, past keys/values) -> (logits of the next token, present keys/values).

    ``Transformer.decode`` itself, with a :class:`~dotformer.decoding.cache.DecoderCache` filled from the inputs and
    the position ``offset`` as a tensor, as the translation step graph of :mod:`dotformer.export.onnx`.
    """

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(self, tokens: Tensor, offset: Tensor, *past: Tensor) -> tuple[Tensor, ...]:
        model = self.model
        assert model.decoder is not None
        n = len(model.decoder.layers)
        layers = [LayerCache(self_attn=KVCache(past[2 * i], past[2 * i + 1])) for i in range(n)]  # (B, H, P, Dh)
        cache = DecoderCache(layers, length=offset)
        hidden = model.decode(tokens, cache=cache).hidden  # (B, T, D)
        logits = model.generator(hidden[:, -1])  # (B, V)
        presents = []
        for layer_cache in cache.layers:
            presents += [layer_cache.self_attn.key, layer_cache.self_attn.value]  # (B, H, P + T, Dh)
        return (logits, *presents)


def export_lm_onnx(model: Transformer, output_dir: str | Path, opset: int = OPSET) -> Path:
    """Write ``lm_step.onnx`` and ``onnx_config.json`` (sizes, ids, input/output names) for a language model.

    Args:
        model: a decoder-only :class:`Transformer` with float weights.
        output_dir: a new directory, or an empty one (a non-empty one is refused: nothing is overwritten).
        opset: the ONNX opset to target.

    Returns:
        ``output_dir``; see the module docstring for the graph's inputs and outputs.

    Raises:
        ConfigError: not decoder-only, fewer than 3 positions (``max_len``), int8 linear layers, or a non-empty
            ``output_dir``.
        MissingDataError: the ``onnx`` package (needed by ``torch.onnx``) is not installed.
    """

    require_float_weights(model, "export to ONNX")
    if model.config.arch != "decoder-only":
        raise ConfigError(f"export_lm_onnx writes a decoder-only model, got arch={model.config.arch!r} (export_onnx)")
    if model.config.max_len < 3:  # the trace needs 2 new tokens after at least 1 past one (_trace_sizes)
        raise ConfigError(
            f"export to ONNX needs a language model of at least 3 positions (its block size); this one has "
            f"{model.config.max_len}"
        )
    return write_graphs(model, output_dir, opset, _write_lm_onnx)


def _trace_sizes(max_len: int) -> tuple[int, int, int]:
    """The example (batch, new tokens, past tokens) sizes the graph is traced with; every one is a dynamic axis.

    New and past together fit the model's ``max_len`` positions (a block size of 4 has positions 0..3), and at
    least 2 new tokens after at least 1 past one are traced: with 1 new or 0 past tokens the tracer would keep that
    size as a constant (``max_len`` >= 3, checked by :func:`export_lm_onnx`).
    """
    new = 3 if max_len >= 4 else 2
    return 2, new, min(4, max_len - new)


def _write_lm_onnx(model: Transformer, output_dir: Path, opset: int) -> None:
    """The two files of :func:`export_lm_onnx` in ``output_dir`` (which exists; :func:`write_graphs` traces)."""
    c = model.config
    n, H, Dh = c.num_decoder_layers, c.num_heads, c.head_dim
    B, T, P = _trace_sizes(c.max_len)
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
    torch.onnx.export(
        LMStepGraph(model), inputs, str(output_dir / LM_STEP_FILE), input_names=input_names,
        output_names=output_names, dynamic_axes=dynamic_axes, opset_version=opset, dynamo=False,
    )  # fmt: skip
    write_description(output_dir, c, lm_step={"file": LM_STEP_FILE, "inputs": input_names, "outputs": output_names})
