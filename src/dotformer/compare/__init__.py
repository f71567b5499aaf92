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
:mod:`~dotformer.compare.table` (Table 1 and the text report); the figures are in :mod:`dotformer.plots.compare`.
"""

from __future__ import annotations

from dotformer.compare.config import (
    FLOAT_BYTES,
    LAYER_KINDS,
    LAYER_NAMES,
    CompareConfig,
    LayerKind,
)
from dotformer.compare.gradients import (
    GradientProfile,
    RecallModel,
    TrainingResult,
    gradient_by_distance,
    measure_gradients,
    measure_gradients_here,
    torch_threads,
    train_recall,
)
from dotformer.compare.instrumentation import (
    MATMUL_OPS,
    Counts,
    Timed,
    WeightChainCounter,
    count_operations,
    generic_kernels,
    saved_tensor_bytes,
    synchronize,
    tensors_in,
    time_and_memory,
)
from dotformer.compare.layers import (
    SequenceLayer,
    analytic_flops,
    analytic_saved_bytes,
)
from dotformer.compare.report import (
    PAPER_TABLE1,
    CompareReport,
    LayerReport,
    LengthPoint,
    compare,
    table1_rows,
)
from dotformer.compare.table import (
    NOISY_REPEATS,
    format_bytes,
    format_report,
    markdown_table,
    timing_note,
)
from dotformer.plots.compare import (
    Series,
    coinciding_note,
    draw_series,
    plot_gradients,
    plot_report,
    short_name,
    tidy_log_axis,
)

__all__ = [
    "CompareConfig",
    "CompareReport",
    "Counts",
    "FLOAT_BYTES",
    "GradientProfile",
    "LAYER_KINDS",
    "LAYER_NAMES",
    "LayerKind",
    "LayerReport",
    "LengthPoint",
    "MATMUL_OPS",
    "NOISY_REPEATS",
    "PAPER_TABLE1",
    "RecallModel",
    "SequenceLayer",
    "Series",
    "Timed",
    "TrainingResult",
    "WeightChainCounter",
    "analytic_flops",
    "analytic_saved_bytes",
    "coinciding_note",
    "compare",
    "count_operations",
    "draw_series",
    "format_bytes",
    "format_report",
    "generic_kernels",
    "gradient_by_distance",
    "markdown_table",
    "measure_gradients",
    "measure_gradients_here",
    "plot_gradients",
    "plot_report",
    "saved_tensor_bytes",
    "short_name",
    "synchronize",
    "table1_rows",
    "tensors_in",
    "tidy_log_axis",
    "time_and_memory",
    "timing_note",
    "torch_threads",
    "train_recall",
]
