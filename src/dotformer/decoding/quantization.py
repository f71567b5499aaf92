"""Int8 weights for fast decoding on a CPU (dynamic quantization; not in the paper).

A decoding step multiplies a few rows (B or B·K) by every weight matrix, so on a CPU its time is the time of
streaming the weights through the cores (``benchmarks/decoding_floor.py``). Storing each ``nn.Linear``'s weight
in int8 and multiplying in integers cuts that work about 4x; the model's function changes only by rounding:

    W ≈ s_w ⊙ W_q   with W_q = round(W / s_w) ∈ [-128, 127], one scale s_w per output feature (row of W);
    x ≈ s_x · (x_q - z)   with x_q = round(x / s_x) + z, one scale s_x and zero point z per call, chosen from the
                          min/max of the call's whole (N, D_in) input ("dynamic": nothing to calibrate); 7 bits on
                          x86 (x_q ∈ [0, 127], FBGEMM's "reduced range", which keeps its int16 sums from overflowing);
    y = x·Wᵀ + b ≈ s_x · s_w ⊙ ((x_q - z) · W_qᵀ) + b   with the products summed exactly in integers.

Because s_x is chosen per call from the whole input, a row's output depends slightly on the other rows decoded
with it (the batch, ``--batch-size``): an int8 translation can differ from the same sentence decoded alone, where
float32 gives the same output. Embeddings, LayerNorm, softmax and the attention products stay float32. The kernels
are PyTorch's own (``torch.ao.quantization.quantize_dynamic``: FBGEMM / oneDNN with AVX-512 VNNI where the CPU has
it, QNNPACK on ARM); this module only chooses what to quantize and checks that the result can run.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from dotformer.errors import ConfigError


def quantize_int8(model: nn.Module) -> nn.Module:
    """Return a copy of ``model`` whose ``nn.Linear`` layers hold int8 weights, for CPU inference.

    Every ``nn.Linear`` (the attention projections W_q, W_k, W_v, W_o, the feed-forward layers and the generator)
    is replaced by PyTorch's dynamically quantized linear layer: int8 weights with one float32 scale per output
    feature; each call quantizes its (N, D_in) float32 input from the range of the whole input (7 bits on x86),
    multiplies in integers and returns float32 (N, D_out), the bias added in float32 (see the module docstring).
    Shapes and dtypes seen by the rest of the model do not change. A tied generator gets its own int8 copy; the
    embedding it shares stays float32; a soft-capped generator (:class:`dotformer.model.Generator`, Gemma 2's) stays
    float32 too (the quantized layer has no soft cap). The copy cannot be trained, saved as a checkpoint or exported
    (:func:`require_float_weights`): quantize after loading, as ``--dtype int8`` does.

    Args:
        model: a float32 model on the CPU (a :class:`dotformer.Transformer` or any module), left unchanged.

    Returns:
        The quantized copy, in eval mode. It is for inference only (int8 weights have no gradients).

    Raises:
        ConfigError: the model is not float32 on the CPU, or this PyTorch build has no int8 CPU kernels.
    """
    tensors = [*model.parameters(), *model.buffers()]
    if any(t.device.type != "cpu" for t in tensors):
        raise ConfigError("int8 weights are for CPU decoding: load the model with --device cpu")
    if any(t.is_floating_point() and t.dtype != torch.float32 for t in tensors):
        raise ConfigError("int8 quantization starts from float32 weights; the model holds another float dtype")
    ao_quantization = getattr(getattr(torch, "ao", None), "quantization", None)
    quantize_dynamic = getattr(ao_quantization, "quantize_dynamic", None)
    per_channel = getattr(ao_quantization, "per_channel_dynamic_qconfig", None)
    engines = torch.backends.quantized.supported_engines
    if quantize_dynamic is None or per_channel is None or not set(engines) - {"none"}:
        raise ConfigError(
            f"this PyTorch ({torch.__version__}, quantized engines {engines}) has no int8 CPU kernels for "
            "dynamic quantization; decode with --dtype float32 or bfloat16"
        )
    with warnings.catch_warnings():
        # torch.ao.quantization announces its move to torchao; its CPU kernels are the fastest here (measured in
        # benchmarks/RESULTS.md) and the tests check that they still run with the pinned PyTorch.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        quantized = quantize_dynamic(model, {nn.Linear: per_channel}, inplace=False)
    return quantized.eval()


def count_int8_linears(model: nn.Module) -> int:
    """Number of dynamically quantized int8 linear layers in ``model`` (0 for a float model)."""
    return sum(1 for m in model.modules() if type(m).__module__.startswith("torch.ao.nn.quantized.dynamic"))


def require_float_weights(model: nn.Module, action: str) -> None:
    """Raise :class:`ConfigError` if ``model`` holds int8 linear layers, which ``action`` (e.g. "save a checkpoint")
    cannot use: int8 copies are for decoding only, and the float32 checkpoint stays the source of truth."""
    if count_int8_linears(model):
        raise ConfigError(
            f"cannot {action} from a model with int8 linear layers (quantize_int8 / --dtype int8 is for decoding "
            "only): use the float32 model it was made from"
        )
