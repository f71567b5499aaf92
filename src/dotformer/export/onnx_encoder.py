"""Export an encoder-only model (a classifier, a tagger, a masked language model) as one ONNX graph.

``model.onnx``
    inputs:  ``src`` (B, S) int64, ``[BOS] ids [EOS]`` right-padded with PAD (BERT's ``[CLS] ... [SEP]``).
    outputs: ``logits``: (B, C) of a sequence head (a label per text), (B, S, C) of a token head (a label per
    position), (B, S, V) of the generator (a masked language model).

``onnx_config.json`` names the head, the ids and, for a classifier or tagger, the labels in the order of the logits
(the checkpoint's ``config.json["labels"]``). The graph is traced from the model's own forward (the TorchScript
exporter, as :mod:`dotformer.export.onnx`), with B and S dynamic axes up to ``max_len`` positions; the tests check
it against the model's logits with ``onnxruntime``.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import torch
from torch import Tensor, nn

from dotformer.data.tokenize.tokenizers import BOS_ID, EOS_ID
from dotformer.decoding.quantization import require_float_weights
from dotformer.errors import ConfigError
from dotformer.export.onnx import OPSET, write_description, write_graphs
from dotformer.model import Transformer

MODEL_FILE = "model.onnx"
TRACE_B, TRACE_S = 2, 5  # the example batch and length the graph is traced with; both are dynamic axes


class EncoderModelGraph(nn.Module):
    """src (B, S) -> the head's logits: ``Transformer.forward`` of an encoder-only model, unpacked."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(self, src: Tensor) -> Tensor:
        return self.model(src)  # (B, C), (B, S, C) or (B, S, V)


def export_encoder_onnx(
    model: Transformer, output_dir: str | Path, labels: list[str] | None = None, opset: int = OPSET
) -> Path:
    """Write ``model.onnx`` and ``onnx_config.json`` for an encoder-only model.

    Args:
        model: an encoder-only :class:`Transformer` with float weights (any head).
        output_dir: a new directory, or an empty one (a non-empty one is refused: nothing is overwritten).
        labels: the names of a classifier's or tagger's outputs (recorded in onnx_config.json).
        opset: the ONNX opset to target.

    Raises:
        ConfigError: not encoder-only, int8 linear layers, labels that do not name the head's outputs, or a
            non-empty ``output_dir``.
        MissingDataError: the ``onnx`` package (needed by ``torch.onnx``) is not installed.
    """

    require_float_weights(model, "export to ONNX")
    c = model.config
    if c.arch != "encoder-only":
        raise ConfigError(f"export_encoder_onnx writes an encoder-only model, got arch={c.arch!r} (export_onnx)")
    if labels is not None and len(labels) != c.num_labels:
        raise ConfigError(f"{len(labels)} label names for a head of {c.num_labels} outputs")
    return write_graphs(model, output_dir, opset, partial(_write_encoder_onnx, labels=labels))


def _write_encoder_onnx(model: Transformer, output_dir: Path, opset: int, labels: list[str] | None) -> None:
    """The two files of :func:`export_encoder_onnx` in ``output_dir`` (which exists; :func:`write_graphs` traces)."""
    c = model.config
    src = torch.full((TRACE_B, TRACE_S), 4 % c.src_vocab_size, dtype=torch.int64)  # (B, S)
    src[:, 0], src[:, -1] = BOS_ID, EOS_ID
    logits_axes = {0: "batch"} if c.head == "sequence" else {0: "batch", 1: "source"}
    axes = {"src": {0: "batch", 1: "source"}, "logits": logits_axes}
    torch.onnx.export(
        EncoderModelGraph(model), (src,), str(output_dir / MODEL_FILE), input_names=["src"],
        output_names=["logits"], dynamic_axes=axes, opset_version=opset, dynamo=False,
    )  # fmt: skip
    encoder_model = {"file": MODEL_FILE, "inputs": ["src"], "outputs": ["logits"]}
    write_description(output_dir, c, head=c.head, labels=labels, encoder_model=encoder_model)
