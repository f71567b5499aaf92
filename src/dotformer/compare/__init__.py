"""Recurrence against self-attention, measured (the paper's Table 1, §4 "Why Self-Attention").

For a recurrent layer (``torch.nn.LSTM``, ``torch.nn.GRU``) and a self-attention layer
(:class:`dotformer.MultiHeadAttention`) of the same width D, over sequence lengths n:

* **time** of one forward + backward pass (median of a few calls, wall clock);
* **memory**: the bytes autograd keeps for the backward pass, counted exactly by a ``saved_tensors_hooks`` pair
  (parameters and the input excluded; on CUDA also the allocator's peak), next to an analytic count;
* **FLOPs** of the forward pass, counted by ``torch.utils.flop_counter.FlopCounterMode``, next to the formula
  (attention: 8·n·D² + 4·n²·D; LSTM: 16·n·D²; GRU: 12·n·D²);
* **sequential operations**: the longest chain of dependent weight applications, counted by intercepting every
  operator call (a ``TorchDispatchMode``) and giving each result the depth of its deepest input, plus one when the
  operator is a matrix product with one of the layer's weights. A recurrent layer multiplies by W_hh once per position,
  each time with the previous position's output, so its chain grows by n; attention multiplies all positions at once,
  so its chain does not grow. We report chain(n) - chain(1) + 1: n for the RNN, 1 for attention. (The LSTM is counted
  on PyTorch's generic implementation, with oneDNN switched off: the fused oneDNN kernel runs the same loop inside
  one call, where the counter cannot see it.)
* **maximum path length**, empirically: the gradient norm ‖∂y_n / ∂x_j‖ of the output at the last position with
  respect to the input at every position j, as a function of the distance n - j, for a randomly initialised layer
  and for one trained briefly on a task that needs the first token at the last position (recall the first token).

Shapes: x (B, n, D) in, (B, n, D) out. Units: milliseconds, bytes, FLOPs (multiply and add counted separately).

The modules, in reading order: :mod:`~dotformer.compare.config` (what to measure), :mod:`~dotformer.compare.layers`
(the layers and the formulas), :mod:`~dotformer.compare.instrumentation` (counting chains, FLOPs, saved bytes, time),
:mod:`~dotformer.compare.gradients` (gradient against distance), :mod:`~dotformer.compare.report` (:func:`compare`),
:mod:`~dotformer.compare.table` (Table 1 and the text report). The figures are drawn by :mod:`dotformer.plots.compare`
(import them from there: this package measures, plots draw).
"""

from __future__ import annotations

from typing import Any

# module -> the public names it defines, imported on first use (PEP 562): the command line's --help reads
# dotformer.compare.config without loading torch
_MODULES = {
    "dotformer.compare.config": ("FLOAT_BYTES", "LAYER_KINDS", "LAYER_NAMES", "CompareConfig", "LayerKind"),
    "dotformer.compare.gradients": (
        "GradientProfile",
        "RecallModel",
        "TrainingResult",
        "gradient_by_distance",
        "measure_gradients",
        "measure_gradients_here",
        "torch_threads",
        "train_recall",
    ),
    "dotformer.compare.instrumentation": (
        "MATMUL_OPS",
        "Counts",
        "Timed",
        "WeightChainCounter",
        "count_operations",
        "generic_kernels",
        "saved_tensor_bytes",
        "synchronize",
        "tensors_in",
        "time_and_memory",
    ),
    "dotformer.compare.layers": ("SequenceLayer", "analytic_flops", "analytic_saved_bytes"),
    "dotformer.compare.report": (
        "PAPER_TABLE1",
        "CompareReport",
        "LayerReport",
        "LengthPoint",
        "compare",
        "table1_rows",
    ),
    "dotformer.compare.table": ("NOISY_REPEATS", "format_bytes", "format_report", "markdown_table", "timing_note"),
}
_LAZY = {name: module for module, names in _MODULES.items() for name in names}


def __getattr__(name: str) -> Any:
    """The names of ``__all__``, imported from their modules on first use."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'dotformer.compare' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = sorted(_LAZY)
