"""Counting what a layer does: the longest chain of dependent weight applications (a ``TorchDispatchMode``), the
forward FLOPs (``FlopCounterMode``), the bytes autograd saves for backward (``saved_tensors_hooks``) and the time of
forward + backward.

Shapes: x (B, n, D). Units: milliseconds, bytes, FLOPs (multiply and add counted separately).
"""

from __future__ import annotations

import contextlib
import statistics
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

from dotformer.compare.config import CompareConfig
from dotformer.compare.layers import SequenceLayer

# -- counting sequential steps and FLOPs ------------------------------------------------------------------------------


MATMUL_OPS = ("mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "_scaled_dot_product_flash_attention_for_cpu")


def tensors_in(value: Any) -> Iterator[Tensor]:
    """Every tensor inside nested lists, tuples and dicts (an operator's arguments or results)."""
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from tensors_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from tensors_in(item)


class WeightChainCounter(TorchDispatchMode):
    """Measures the longest chain of dependent weight applications of the operators run inside it.

    Every operator result gets depth = max(depth of its tensor inputs) + (1 if the operator is a matrix product
    reading one of ``weights``, else 0). Tensors that are not results of operators run inside have depth 0.

    Args:
        weights: the layer's weight matrices (recognised by their storage, so transposed views count too).
    """

    def __init__(self, weights: Sequence[Tensor]) -> None:
        super().__init__()
        self.weight_ptrs = {w.untyped_storage().data_ptr() for w in weights}
        self.depth: dict[int, int] = {}  # id(result tensor) -> depth
        self.keep: list[Tensor] = []  # keeps results alive so that their id() stays unique
        self.max_depth = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        """Run the operator, then record the depth of its results."""
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = list(tensors_in((args, kwargs)))
        depth = max((self.depth.get(id(a), 0) for a in inputs), default=0)
        reads_weight = any(a.untyped_storage().data_ptr() in self.weight_ptrs for a in inputs)
        if func.overloadpacket.__name__ in MATMUL_OPS and reads_weight:
            depth += 1
        for result in tensors_in(out):
            self.depth[id(result)] = depth
            self.keep.append(result)
        self.max_depth = max(self.max_depth, depth)
        return out


@contextlib.contextmanager
def generic_kernels() -> Iterator[None]:
    """Switch oneDNN (CPU) and cuDNN (CUDA) off, so that an RNN runs PyTorch's generic loop of cell steps, which
    operator counters can see (the fused kernels run the same loop inside one call)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns about TF32 on oneDNN when the flag is toggled
        with torch.backends.mkldnn.flags(enabled=False), torch.backends.cudnn.flags(enabled=False):
            yield


class Counts(NamedTuple):
    """chain: longest chain of dependent weight applications; flops: forward FLOPs of the matrix products."""

    chain: int
    flops: int


def count_operations(layer: SequenceLayer, n: int, d_model: int, device: torch.device) -> Counts:
    """Run one forward pass of a (1, n, D) input under the chain counter and the FLOP counter."""
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.randn(1, n, d_model, device=device)  # (1, n, D)
    weights = [p for name, p in layer.named_parameters() if "bias" not in name]
    with generic_kernels(), torch.no_grad():
        flop_counter = FlopCounterMode(display=False)
        chain = WeightChainCounter(weights)
        with flop_counter, chain:
            y = layer(x)  # (1, n, D)
        depth = chain.depth.get(id(y), chain.max_depth)
    return Counts(depth, int(flop_counter.get_total_flops()))


# -- time and memory --------------------------------------------------------------------------------------------------


def saved_tensor_bytes(fn: Callable[[], Tensor], exclude: Sequence[Tensor]) -> tuple[Tensor, int]:
    """Run ``fn()`` and count the bytes of the distinct storages autograd saves for backward, minus ``exclude``'s."""
    excluded = {t.untyped_storage().data_ptr() for t in exclude}
    storages: dict[int, int] = {}

    def pack(t: Tensor) -> Tensor:
        try:
            storage = t.untyped_storage()
            ptr = storage.data_ptr()
            if ptr not in excluded:
                storages[ptr] = max(storages.get(ptr, 0), storage.nbytes())
        except (RuntimeError, NotImplementedError):  # e.g. tensors without storage (mkldnn opaque)
            storages[id(t)] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, sum(storages.values())


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work (no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Timed(NamedTuple):
    """time_ms: median of the timed calls; min_ms: the fastest; saved_bytes: bytes kept for backward;
    cuda_peak_bytes: None on CPU; slowest_s: the slowest call (seconds), warm-up included."""

    time_ms: float
    min_ms: float
    saved_bytes: int
    cuda_peak_bytes: int | None
    slowest_s: float


def time_and_memory(layer: SequenceLayer, n: int, config: CompareConfig, device: torch.device) -> Timed:
    """Forward + backward at length n: one warm-up call that also counts the saved bytes, then timed calls.

    The timed calls stop after ``config.repeats`` or once they have taken ``config.time_budget_s`` (at least one).
    """
    x = torch.randn(config.batch_size, n, config.d_model, device=device, requires_grad=True)  # (B, n, D)
    params = list(layer.parameters())
    cuda_peak = None
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    start = time.perf_counter()
    out, saved = saved_tensor_bytes(lambda: layer(x), exclude=[x, *params])
    out.sum().backward()
    del out
    synchronize(device)
    slowest = time.perf_counter() - start
    if device.type == "cuda":
        cuda_peak = int(torch.cuda.max_memory_allocated(device) - before)
    samples: list[float] = []
    while len(samples) < config.repeats and sum(samples) < config.time_budget_s and slowest <= config.max_call_seconds:
        x.grad = None
        layer.zero_grad(set_to_none=True)
        start = time.perf_counter()
        layer(x).sum().backward()
        synchronize(device)
        samples.append(time.perf_counter() - start)
        slowest = max(slowest, samples[-1])
    samples = samples or [slowest]
    return Timed(statistics.median(samples) * 1000.0, min(samples) * 1000.0, saved, cuda_peak, slowest)
