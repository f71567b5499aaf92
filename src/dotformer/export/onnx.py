"""Export a dotformer encoder-decoder as two ONNX graphs: the encoder, and one incremental decoder step.

The decoder step is the cached decoding of :mod:`dotformer.decoding.incremental` spelled out as a pure function, so an
ONNX runtime (``onnxruntime``, TensorRT, a browser) can run greedy or beam search with a key/value cache:

``encoder.onnx``
    inputs:  ``src`` (B, S) int64, right-padded with PAD (EOS ends each row, as dotformer's sources)
    outputs: ``memory`` (B, S, D) float32; ``cross_key_{i}``, ``cross_value_{i}`` (B, H, S, Dh) for every decoder
    layer i: the cross-attention keys/values of the memory, computed once per sentence.

``decoder_step.onnx``
    inputs:  ``tokens`` (B, 1) int64, the newest target token (BOS on the first step);
    ``src_keep`` (B, S) bool, True at real source tokens (``src != PAD``);
    ``offset`` () int64, the position of ``tokens`` (0 on the first step: the number of cached positions);
    ``past_key_{i}``, ``past_value_{i}`` (B, H, P, Dh) for every decoder layer (P = ``offset``; P = 0 at first);
    ``cross_key_{i}``, ``cross_value_{i}`` (B, H, S, Dh) from the encoder graph.
    outputs: ``logits`` (B, V) float32 of the next token; ``present_key_{i}``, ``present_value_{i}``
    (B, H, P + 1, Dh), the past of the next step.

Positions are read from a table of ``max_len`` rows stored in the graph (the learned table, or the sinusoids up to
``max_len``), so the graphs handle sources and outputs of at most ``ModelConfig.max_len`` tokens. B, S and P are
dynamic axes. The graphs are traced from the model's own modules (``torch.onnx.export``, the TorchScript exporter),
and the tests check them against dotformer's logits with ``onnxruntime``: the encoder graph is
``Transformer.encode`` and each cross-attention's :meth:`~dotformer.multihead.MultiHeadAttention.keys_values`, the
step graph is ``Transformer.decode`` with a :class:`~dotformer.decoding.cache.DecoderCache` filled from the inputs
and the offset as a tensor.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from dotformer.data.tokenize.tokenizers import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from dotformer.decoding.cache import DecoderCache, KVCache, LayerCache
from dotformer.decoding.quantization import require_float_weights
from dotformer.errors import ConfigError, MissingDataError
from dotformer.export.outdir import check_output_dir, fresh_output_dir
from dotformer.model import Transformer

ENCODER_FILE = "encoder.onnx"
DECODER_STEP_FILE = "decoder_step.onnx"
ONNX_CONFIG_FILE = "onnx_config.json"
OPSET = 17


class EncoderGraph(nn.Module):
    """src (B, S) -> memory (B, S, D) and every decoder layer's cross-attention keys and values (B, H, S, Dh)."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(self, src: Tensor) -> tuple[Tensor, ...]:
        model = self.model
        assert model.decoder is not None
        memory = model.encode(src).memory  # (B, S, D)
        outputs = [memory]
        for layer in model.decoder.layers:
            attention = layer.cross_attn
            assert attention is not None  # encoder-decoder layers
            outputs.extend(attention.keys_values(memory))  # K·W_k, V·W_v: (B, H, S, Dh) each
        return tuple(outputs)


class DecoderStepGraph(nn.Module):
    """One cached decoder step: (tokens, src_keep, offset, past and cross keys/values) -> logits, present keys/values.

    ``Transformer.decode`` itself, with a :class:`~dotformer.decoding.cache.DecoderCache` filled from the inputs and
    the position ``offset`` as a tensor (the embedding reads that row of its positional table), so one graph serves
    every step.
    """

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(self, tokens: Tensor, src_keep: Tensor, offset: Tensor, *caches: Tensor) -> tuple[Tensor, ...]:
        model = self.model
        assert model.decoder is not None
        n = len(model.decoder.layers)
        past, cross = caches[: 2 * n], caches[2 * n :]
        layers = [
            LayerCache(
                self_attn=KVCache(past[2 * i], past[2 * i + 1]),  # (B, H, P, Dh)
                cross_attn=KVCache(cross[2 * i], cross[2 * i + 1], static=True),  # (B, H, S, Dh)
            )
            for i in range(n)
        ]
        cache = DecoderCache(layers, length=offset)
        B, S = src_keep.shape
        # Cross-attention reads the cached keys/values; the memory argument is only shape-checked.
        memory_shape = torch.zeros(B, S, model.config.d_model)  # (B, S, D), unused by the graph
        hidden = model.decode(tokens, memory_shape, src_keep[:, None, None, :], cache=cache).hidden  # (B, 1, D)
        logits = model.generator(hidden[:, -1])  # (B, V)
        presents = []
        for layer_cache in cache.layers:
            presents += [layer_cache.self_attn.key, layer_cache.self_attn.value]  # (B, H, P + 1, Dh)
        return (logits, *presents)


def _names(prefix: str, count: int) -> list[str]:
    """["{prefix}_key_0", "{prefix}_value_0", "{prefix}_key_1", ...]."""
    return [f"{prefix}_{kind}_{i}" for i in range(count) for kind in ("key", "value")]


def export_onnx(model: Transformer, output_dir: str | Path, opset: int = OPSET) -> Path:
    """Write ``encoder.onnx``, ``decoder_step.onnx`` and ``onnx_config.json`` (sizes, ids, input/output names).

    Args:
        model: an encoder-decoder :class:`Transformer` with float weights (post-LN or pre-LN, any activation).
        output_dir: a new directory, or an empty one (a non-empty one is refused: nothing is overwritten).
        opset: the ONNX opset to target.

    Returns:
        ``output_dir``. See the module docstring for the graphs' inputs and outputs; :class:`OnnxTranslator` runs them.

    Raises:
        ConfigError: not an encoder-decoder, int8 linear layers, or a non-empty ``output_dir``.
        MissingDataError: the ``onnx`` package (needed by ``torch.onnx``) is not installed.
    """
    require_float_weights(model, "export to ONNX")
    c = model.config
    if c.arch != "encoder-decoder" or model.decoder is None:
        raise ConfigError(f"only encoder-decoder models can be exported to ONNX, got arch={c.arch!r}")
    return write_graphs(model, output_dir, opset, _write_onnx)


def write_graphs(
    model: Transformer, output_dir: str | Path, opset: int, write: Callable[[Transformer, Path, int], None]
) -> Path:
    """Run ``write(model, directory, opset)`` into a fresh directory that becomes ``output_dir`` when it succeeds.

    Raises:
        ConfigError: ``output_dir`` exists and is not empty, or the model has a modern switch on (the graphs hold the
            2017 block). MissingDataError: the ``onnx`` package is missing.
    """
    model.config.check_2017_block("the ONNX export")
    try:
        import onnx  # noqa: F401 (torch.onnx needs it)
    except ImportError:
        raise MissingDataError('exporting to ONNX needs the onnx package: pip install "dotformer[onnx]"') from None

    output_dir = check_output_dir(output_dir)
    was_training = model.training
    model.eval()
    try:
        with fresh_output_dir(output_dir) as tmp, warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # tracer warnings about Python checks, which hold for every input
            write(model, tmp, opset)
    finally:
        model.train(was_training)
    return output_dir


def write_description(directory: Path, config: Any, **graphs: Any) -> None:
    """``onnx_config.json`` in ``directory``: the format, the model config, its positions and special ids, then
    ``graphs`` (each graph's file and input/output names, and what else a reader needs)."""
    description = {
        "format": "dotformer-onnx",
        "version": 1,
        "model": config.to_dict(),
        "max_positions": config.max_len,
        "ids": {"pad": PAD_ID, "bos": BOS_ID, "eos": EOS_ID, "unk": UNK_ID},
        **graphs,
    }
    (directory / ONNX_CONFIG_FILE).write_text(json.dumps(description, indent=2) + "\n", encoding="utf-8")


def _write_onnx(model: Transformer, output_dir: Path, opset: int) -> None:
    """The three files of :func:`export_onnx` in ``output_dir`` (which exists; :func:`write_graphs` traces)."""
    encoder_outputs = _export_encoder(model, output_dir / ENCODER_FILE, opset)
    step_inputs, step_outputs = _export_decoder_step(model, output_dir / DECODER_STEP_FILE, opset)
    write_description(
        output_dir,
        model.config,
        encoder={"file": ENCODER_FILE, "inputs": ["src"], "outputs": encoder_outputs},
        decoder_step={"file": DECODER_STEP_FILE, "inputs": step_inputs, "outputs": step_outputs},
    )


TRACE_B, TRACE_S, TRACE_P = 2, 5, 3  # example batch, source and past lengths for tracing; each is a dynamic axis
HEADS_AXES = {0: "batch", 2: "source"}  # the cross-attention keys/values (B, H, S, Dh)


def _export_encoder(model: Transformer, path: Path, opset: int) -> list[str]:
    """Trace :class:`EncoderGraph` into ``path``; return its output names (the memory, then the cross keys/values)."""
    c = model.config
    src = torch.full((TRACE_B, TRACE_S), 4 % c.src_vocab_size, dtype=torch.int64)  # (B, S)
    src[:, -1] = EOS_ID
    outputs = ["memory", *_names("cross", c.num_decoder_layers)]
    axes = {"src": {0: "batch", 1: "source"}, "memory": {0: "batch", 1: "source"}}
    axes.update({name: HEADS_AXES for name in outputs[1:]})
    torch.onnx.export(
        EncoderGraph(model), (src,), str(path), input_names=["src"], output_names=outputs, dynamic_axes=axes,
        opset_version=opset, dynamo=False,
    )  # fmt: skip
    return outputs


def _export_decoder_step(model: Transformer, path: Path, opset: int) -> tuple[list[str], list[str]]:
    """Trace :class:`DecoderStepGraph` into ``path``; return its input and output names."""
    c = model.config
    n, B, S, P = c.num_decoder_layers, TRACE_B, TRACE_S, TRACE_P
    past = [torch.zeros(B, c.num_heads, P, c.head_dim) for _ in range(2 * n)]  # (B, H, P, Dh) each
    cross = [torch.zeros(B, c.num_heads, S, c.head_dim) for _ in range(2 * n)]  # (B, H, S, Dh) each
    tokens = torch.full((B, 1), BOS_ID, dtype=torch.int64)  # (B, 1)
    inputs = (tokens, torch.ones(B, S, dtype=torch.bool), torch.tensor(P, dtype=torch.int64), *past, *cross)
    input_names = ["tokens", "src_keep", "offset", *_names("past", n), *_names("cross", n)]
    output_names = ["logits", *_names("present", n)]
    axes: dict[str, dict[int, str]] = {"tokens": {0: "batch"}, "src_keep": {0: "batch", 1: "source"}}
    axes.update({name: {0: "batch", 2: "past"} for name in _names("past", n)})
    axes.update({name: HEADS_AXES for name in _names("cross", n)})
    axes.update({"logits": {0: "batch"}})
    axes.update({name: {0: "batch", 2: "past_plus_one"} for name in _names("present", n)})
    torch.onnx.export(
        DecoderStepGraph(model), inputs, str(path), input_names=input_names, output_names=output_names,
        dynamic_axes=axes, opset_version=opset, dynamo=False,
    )  # fmt: skip
    return input_names, output_names


class OnnxTranslator:
    """Runs an exported encoder and decoder step with ``onnxruntime`` (CPU).

    Args:
        directory: written by :func:`export_onnx`.

    Raises:
        MissingDataError: ``onnxruntime`` is not installed, or a file is missing.
    """

    def __init__(self, directory: str | Path) -> None:
        try:
            import onnxruntime
        except ImportError:
            raise MissingDataError('running ONNX models needs onnxruntime: pip install "dotformer[onnx]"') from None
        directory = Path(directory)
        for name in (ENCODER_FILE, DECODER_STEP_FILE, ONNX_CONFIG_FILE):
            if not (directory / name).is_file():
                raise MissingDataError(f"{directory / name} is missing: not a dotformer ONNX export")
        self.description: dict[str, Any] = json.loads((directory / ONNX_CONFIG_FILE).read_text(encoding="utf-8"))
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        providers = ["CPUExecutionProvider"]
        self.encoder = onnxruntime.InferenceSession(str(directory / ENCODER_FILE), options, providers=providers)
        self.step = onnxruntime.InferenceSession(str(directory / DECODER_STEP_FILE), options, providers=providers)
        model = self.description["model"]
        self.num_layers = int(model["num_decoder_layers"])
        self.num_heads = int(model["num_heads"])
        self.head_dim = int(model["d_model"]) // self.num_heads

    def encode(self, src: Any) -> dict[str, Any]:
        """src: (B, S) int64 numpy array -> {"memory": (B, S, D), "cross_key_0": (B, H, S, Dh), ...} (numpy)."""
        names = self.description["encoder"]["outputs"]
        return dict(zip(names, self.encoder.run(names, {"src": src}), strict=True))

    def greedy(self, src: Any, max_steps: int) -> tuple[list[list[int]], list[Any]]:
        """Greedy decoding of a (B, S) int64 numpy batch: PAD and BOS never chosen, rows stop at EOS.

        Returns:
            (outputs, step_logits): per row its ids up to and including the first EOS; and the (B, V) logits of
            every step (rows that finished keep being fed EOS).
        """
        import numpy as np

        B = src.shape[0]
        encoded = self.encode(src)
        feeds: dict[str, Any] = {"src_keep": src != PAD_ID}
        feeds.update({name: value for name, value in encoded.items() if name.startswith("cross_")})
        for name in _names("past", self.num_layers):
            feeds[name] = np.zeros((B, self.num_heads, 0, self.head_dim), dtype=np.float32)
        tokens = np.full((B, 1), BOS_ID, dtype=np.int64)
        outputs: list[list[int]] = [[] for _ in range(B)]
        done = [False] * B
        all_logits = []
        output_names = self.description["decoder_step"]["outputs"]
        for step in range(max_steps):
            feeds["tokens"] = tokens
            feeds["offset"] = np.array(step, dtype=np.int64)
            results = dict(zip(output_names, self.step.run(output_names, feeds), strict=True))
            logits = results["logits"]  # (B, V)
            all_logits.append(logits)
            masked = logits.copy()
            masked[:, [PAD_ID, BOS_ID]] = -np.inf
            chosen = masked.argmax(-1)  # (B,)
            for row in range(B):
                if not done[row]:
                    outputs[row].append(int(chosen[row]))
                    done[row] = int(chosen[row]) == EOS_ID
            tokens = np.where(np.array(done), EOS_ID, chosen)[:, None].astype(np.int64)
            for past, present in zip(_names("past", self.num_layers), _names("present", self.num_layers), strict=True):
                feeds[past] = results[present]
            if all(done):
                break
        return outputs, all_logits
