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
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, NamedTuple

import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode

from dotformer.errors import ConfigError
from dotformer.multihead import MultiHeadAttention
from dotformer.positional import sinusoidal_positional_encoding

LayerKind = Literal["lstm", "gru", "attention", "attention-fused"]
LAYER_KINDS: tuple[str, ...] = ("lstm", "gru", "attention", "attention-fused")
LAYER_NAMES = {
    "lstm": "Recurrent (LSTM)",
    "gru": "Recurrent (GRU)",
    "attention": "Self-attention",
    "attention-fused": "Self-attention (fused SDPA)",
}
FLOAT_BYTES = 4  # float32


@dataclass(frozen=True)
class CompareConfig:
    """What :func:`compare` measures; frozen, validated.

    Raises:
        ConfigError: a field is out of range.
    """

    d_model: int = 64  # D: the width of every layer (RNN input and hidden size, attention d_model)
    num_heads: int = 4  # H: heads of the attention layer (Dh = D / H)
    layers: tuple[str, ...] = LAYER_KINDS  # which layers to measure (see LAYER_NAMES)
    lengths: tuple[int, ...] = (16, 64, 256, 1024, 2048, 4096)  # sequence lengths n for time, memory and counts
    batch_size: int = 1  # B for time and memory
    repeats: int = 3  # timed forward + backward calls per (layer, n), after one warm-up call; the median is reported
    time_budget_s: float = 1.5  # ... but no more timed calls once they have taken this many seconds (at least one)
    max_call_seconds: float = 6.0  # a layer skips the longer lengths once one call took longer than this
    count_max_length: int = 1024  # count sequential steps and FLOPs up to this n (the counter runs Python per op)
    gradient_length: int = 64  # n of the gradient-vs-distance measurement (and of the training task)
    gradient_batch: int = 4  # sequences averaged in the gradient measurement
    gradient_probes: int = 8  # random projections estimating each Jacobian norm (0: exact, one pass per component)
    train_steps: int = 100  # Adam steps of the brief training (0: report the random initialisation only)
    train_batch: int = 32  # sequences per training step
    train_lr: float = 3e-3  # Adam learning rate of the brief training
    vocab_size: int = 16  # tokens of the recall-the-first-token task
    seed: int = 0  # seeds the layers, the inputs and the training
    device: str = "cpu"  # where to run ("cpu", "cuda")

    def __post_init__(self) -> None:
        if not isinstance(self.gradient_probes, int) or self.gradient_probes < 0:
            raise ConfigError(f"CompareConfig.gradient_probes must be >= 0, got {self.gradient_probes!r}")
        for name in ("d_model", "num_heads", "batch_size", "repeats", "count_max_length", "gradient_batch"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"CompareConfig.{name} must be a positive integer, got {value!r}")
        if self.d_model % self.num_heads:
            raise ConfigError(f"CompareConfig.d_model={self.d_model} must be divisible by num_heads={self.num_heads}")
        if not self.lengths or any(not isinstance(n, int) or n < 1 for n in self.lengths):
            raise ConfigError(f"CompareConfig.lengths must be positive integers, got {self.lengths!r}")
        unknown = [k for k in self.layers if k not in LAYER_KINDS]
        if unknown or not self.layers:
            raise ConfigError(f"unknown layer(s) {unknown or '(none given)'}; choose from {', '.join(LAYER_KINDS)}")
        if self.gradient_length < 2:
            raise ConfigError(f"CompareConfig.gradient_length must be >= 2, got {self.gradient_length}")
        if self.train_steps < 0 or self.train_batch < 1 or self.vocab_size < 2:
            raise ConfigError("CompareConfig needs train_steps >= 0, train_batch >= 1 and vocab_size >= 2")
        if not (self.max_call_seconds > 0 and self.time_budget_s > 0 and self.train_lr > 0):
            raise ConfigError("CompareConfig.max_call_seconds, time_budget_s and train_lr must be positive")


# -- the layers -------------------------------------------------------------------------------------------------------


class SequenceLayer(nn.Module):
    """One layer mapping (B, n, D) to (B, n, D): an LSTM, a GRU, or multi-head self-attention.

    ``attention`` uses the reference attention (the (B, H, n, n) weights are materialised, as in the formula);
    ``attention-fused`` uses PyTorch's fused kernel (on CPU a flash-attention kernel that never stores the weights).
    """

    def __init__(self, kind: str, d_model: int, num_heads: int) -> None:
        super().__init__()
        self.kind = kind
        self.rnn: nn.Module | None = None
        self.attention: MultiHeadAttention | None = None
        if kind == "lstm":
            self.rnn = nn.LSTM(d_model, d_model, batch_first=True)
        elif kind == "gru":
            self.rnn = nn.GRU(d_model, d_model, batch_first=True)
        elif kind in ("attention", "attention-fused"):
            self.attention = MultiHeadAttention(d_model, num_heads)
        else:
            raise ConfigError(f"unknown layer {kind!r}; choose from {', '.join(LAYER_KINDS)}")

    @property
    def is_recurrent(self) -> bool:
        """True for the LSTM and GRU."""
        return self.rnn is not None

    def forward(self, x: Tensor) -> Tensor:
        """(B, n, D) -> (B, n, D)."""
        if self.rnn is not None:
            return self.rnn(x)[0]  # (B, n, D)
        assert self.attention is not None
        return self.attention(x, need_weights=self.kind == "attention").output  # (B, n, D)


def analytic_flops(kind: str, n: int, d_model: int, batch_size: int = 1) -> int:
    """Forward FLOPs of the layer's matrix products (2 per multiply-add), the paper's "complexity per layer".

    attention: Q, K, V, W_o projections 4·(2·n·D²) + Q·Kᵀ 2·n²·D + weights·V 2·n²·D  -> O(n²·D + n·D²);
    LSTM: 4 gates × (input and hidden product) × 2·n·D² = 16·n·D²;  GRU: 3 gates -> 12·n·D²  -> O(n·D²).
    """
    D = d_model
    if kind in ("attention", "attention-fused"):
        per = 8 * n * D * D + 4 * n * n * D
    elif kind == "lstm":
        per = 16 * n * D * D
    else:
        per = 12 * n * D * D
    return batch_size * per


def analytic_saved_bytes(kind: str, n: int, d_model: int, num_heads: int, batch_size: int = 1) -> int:
    """Approximate float32 bytes autograd keeps for the backward pass (parameters and the input excluded).

    attention (reference): the (H, n, n) softmax weights, plus Q, K, V and the merged heads (4·n·D) -> O(H·n²);
    attention (fused): Q, K, V, the attention output (4·n·D) and one log-sum-exp per row and head (H·n) -> O(n);
    LSTM: per position the gate activations and the states of the step, 7·D, as PyTorch's generic kernel keeps them
    (the default oneDNN kernel keeps a larger workspace: the measured column shows it) -> O(n·D);
    GRU: per position the 3 input-side and 3 hidden-side gate products and the previous hidden state, 7·D -> O(n·D).
    """
    D, H = d_model, num_heads
    floats = {
        "attention": H * n * n + 4 * n * D,
        "attention-fused": 4 * n * D + H * n,
        "lstm": 7 * n * D,
        "gru": 7 * n * D,
    }[kind]
    return FLOAT_BYTES * batch_size * floats


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


class LengthPoint(NamedTuple):
    """Measurements of one layer at one sequence length.

    Attributes:
        n: sequence length.
        time_ms: median wall-clock milliseconds of forward + backward (None when skipped).
        min_ms: the fastest of the timed calls (less disturbed by other processes; None when skipped).
        saved_bytes: bytes autograd kept for backward (measured), None when skipped.
        cuda_peak_bytes: CUDA allocator peak above the start (None on CPU).
        analytic_saved_bytes: :func:`analytic_saved_bytes`.
        flops: counted forward FLOPs (None when not counted). analytic_flops: :func:`analytic_flops`.
        chain: longest chain of dependent weight applications (None when not counted).
        sequential_steps: chain(n) - chain(1) + 1 (None when not counted).
        skipped: why this length was not timed ("" when it was).
    """

    n: int
    time_ms: float | None
    min_ms: float | None
    saved_bytes: int | None
    cuda_peak_bytes: int | None
    analytic_saved_bytes: int
    flops: int | None
    analytic_flops: int
    chain: int | None
    sequential_steps: int | None
    skipped: str


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


# -- gradient against distance ----------------------------------------------------------------------------------------


class RecallModel(nn.Module):
    """Embedding -> (positional encoding for attention) -> one :class:`SequenceLayer` -> a linear readout.

    The task: predict the FIRST token of the sequence from the layer's output at the LAST position, so the signal
    has to travel the whole length. Attention gets sinusoidal positional encodings (it has no notion of order
    otherwise); the RNNs get none (their order is built in).
    """

    def __init__(self, kind: str, config: CompareConfig) -> None:
        super().__init__()
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.layer = SequenceLayer(kind, config.d_model, config.num_heads)
        self.readout = nn.Linear(config.d_model, config.vocab_size)

    def embed_tokens(self, tokens: Tensor) -> Tensor:
        """(B, n) int64 -> (B, n, D) the embedded tokens x (the inputs the gradients are taken with respect to)."""
        return self.embed(tokens)

    def last_output(self, x: Tensor) -> Tensor:
        """(B, n, D) embedded tokens -> (B, D) the layer's output at the last position."""
        if not self.layer.is_recurrent:
            x = x + sinusoidal_positional_encoding(x.size(1), x.size(2), device=x.device)  # (B, n, D)
        return self.layer(x)[:, -1]  # (B, D)

    def forward(self, tokens: Tensor) -> Tensor:
        """(B, n) int64 -> (B, V) logits of the first token."""
        return self.readout(self.last_output(self.embed_tokens(tokens)))


class TrainingResult(NamedTuple):
    """steps: Adam steps taken; final_loss: cross-entropy (nats) of the last step; accuracy: on a fresh batch."""

    steps: int
    final_loss: float
    accuracy: float


def train_recall(model: RecallModel, config: CompareConfig, generator: torch.Generator) -> TrainingResult:
    """Train ``model`` briefly on recall-the-first-token at length ``config.gradient_length``."""
    device = next(model.parameters()).device
    n, V = config.gradient_length, config.vocab_size
    optimizer = torch.optim.Adam(model.parameters(), lr=config.train_lr)
    loss_value = math.nan
    model.train()
    for _ in range(config.train_steps):
        tokens = torch.randint(0, V, (config.train_batch, n), generator=generator).to(device)  # (B, n)
        loss = nn.functional.cross_entropy(model(tokens), tokens[:, 0])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss_value = loss.detach().item()
    model.eval()
    with torch.no_grad():
        tokens = torch.randint(0, V, (256, n), generator=generator).to(device)  # (256, n)
        accuracy = float((model(tokens).argmax(-1) == tokens[:, 0]).float().mean())
    return TrainingResult(config.train_steps, loss_value, accuracy)


def gradient_by_distance(model: RecallModel, tokens: Tensor, probes: int = 0, seed: int = 0) -> Tensor:
    """‖∂y_n / ∂x_j‖_F for every position j, averaged over the batch, indexed by distance n - j (0 = the last token).

    y_n is the layer's (D,) output at the last position, x_j the (D,) embedded token at position j. With
    ``probes = 0`` the Frobenius norm of each (D × D) Jacobian block is exact (one backward pass per component of
    y_n); with ``probes = k`` it is estimated from k random Gaussian projections u, as ‖J‖_F² = E‖Jᵀu‖² (k backward
    passes, the same u for every position, so the curve's shape is exact up to one common random factor per probe).

    Shape: tokens (B, n) int64 -> (n,) float64, element k = mean over the batch of ‖∂y_n/∂x_{n-1-k}‖ (0-based j).
    """
    x = model.embed_tokens(tokens).detach().requires_grad_(True)  # (B, n, D)
    y = model.last_output(x)  # (B, D)
    D = y.size(1)
    if probes:
        generator = torch.Generator().manual_seed(seed)
        directions = torch.randn(probes, D, generator=generator).to(y)  # (k, D)
    else:
        directions = torch.eye(D, dtype=y.dtype, device=y.device)  # (D, D)
    squares = torch.zeros(x.shape[:2], dtype=torch.float64, device=x.device)  # (B, n)
    for i, u in enumerate(directions):
        # Batch rows are independent, so the gradient of the batch sum gives every row's own gradient.
        (grad,) = torch.autograd.grad((y * u).sum(), x, retain_graph=i + 1 < len(directions))  # (B, n, D)
        squares += grad.double().pow(2).sum(dim=-1)
    if probes:
        squares /= probes
    norms = squares.sqrt().mean(dim=0)  # (n,) by position
    return norms.flip(0).cpu()  # (n,) by distance


class GradientProfile(NamedTuple):
    """Gradient norm against distance for one layer.

    Attributes:
        distances: n values 0 .. n-1 (distance from the last position).
        random_init: ‖∂y_n/∂x_{n-k}‖ at initialisation, one value per distance k.
        trained: the same after :func:`train_recall` (None when train_steps = 0).
        training: the training's loss and accuracy (None when train_steps = 0).
    """

    distances: list[int]
    random_init: list[float]
    trained: list[float] | None
    training: TrainingResult | None

    @staticmethod
    def ratio(values: Sequence[float]) -> float:
        """‖∂y_n/∂x_1‖ / ‖∂y_n/∂x_n‖: the gradient across the whole length relative to distance 0."""
        return values[-1] / values[0] if values[0] > 0 else math.nan


@contextlib.contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """Run with ``count`` intra-op threads, then restore the previous number."""
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def measure_gradients(kind: str, config: CompareConfig, device: torch.device) -> GradientProfile:
    """Gradient-vs-distance before and after brief training (fresh layer, seeded).

    Runs on one CPU thread: the operators of a batch of 32 short sequences are too small to gain from more, and
    on a busy machine extra threads mostly wait for each other.
    """
    with torch_threads(1):
        return measure_gradients_here(kind, config, device)


def measure_gradients_here(kind: str, config: CompareConfig, device: torch.device) -> GradientProfile:
    """:func:`measure_gradients` with the current thread settings."""
    generator = torch.Generator().manual_seed(config.seed + 1)
    torch.manual_seed(config.seed)
    model = RecallModel(kind, config).to(device).eval()
    n = config.gradient_length
    probe = torch.randint(0, config.vocab_size, (config.gradient_batch, n), generator=generator).to(device)  # (B, n)
    random_init = gradient_by_distance(model, probe, config.gradient_probes, config.seed).tolist()
    trained, training = None, None
    if config.train_steps > 0:
        training = train_recall(model, config, generator)
        trained = gradient_by_distance(model, probe, config.gradient_probes, config.seed).tolist()
    return GradientProfile(list(range(n)), random_init, trained, training)


# -- the whole comparison ---------------------------------------------------------------------------------------------


@dataclass
class LayerReport:
    """Everything measured for one layer kind."""

    kind: str  # "lstm", "gru", "attention", "attention-fused"
    name: str  # the row name, e.g. "Recurrent (LSTM)"
    points: list[LengthPoint] = field(default_factory=list)  # one per sequence length
    gradients: GradientProfile | None = None  # None for attention-fused (the same function as "attention")

    def time_exponent(self) -> float | None:
        """k in time ∝ n^k, fitted (least squares in log-log) to the fastest calls at the three longest lengths."""
        timed = [(p.n, p.min_ms) for p in self.points if p.min_ms]
        timed = timed[-3:]
        if len(timed) < 2:
            return None
        xs = [math.log(n) for n, _ in timed]
        ys = [math.log(t) for _, t in timed]
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        denom = sum((x - mx) ** 2 for x in xs)
        return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / denom if denom else None


@dataclass
class CompareReport:
    """Result of :func:`compare`: the config, the per-layer measurements and the seconds it took."""

    config: CompareConfig
    layers: list[LayerReport]
    seconds: float
    memory_method: str
    threads: int  # torch intra-op threads used for the timings

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (the benchmark's JSON file)."""
        layers = []
        for layer in self.layers:
            gradients = None
            if layer.gradients is not None:
                g = layer.gradients
                gradients = {
                    "distances": g.distances,
                    "random_init": g.random_init,
                    "trained": g.trained,
                    "training": g.training._asdict() if g.training else None,
                }
            layers.append(
                {
                    "kind": layer.kind,
                    "name": layer.name,
                    "time_exponent": layer.time_exponent(),
                    "points": [p._asdict() for p in layer.points],
                    "gradients": gradients,
                }
            )
        return {
            "config": asdict(self.config),
            "memory_method": self.memory_method,
            "threads": self.threads,
            "seconds": self.seconds,
            "layers": layers,
            "table1": table1_rows(self),
        }


def compare(config: CompareConfig, progress: Callable[[str], None] | None = None) -> CompareReport:
    """Measure every layer of ``config.layers`` at every length (see the module docstring).

    Args:
        config: what to measure.
        progress: called with a short line after each measurement (e.g. ``print``), or None.

    Raises:
        ConfigError: an unusable device.
    """
    try:
        device = torch.device(config.device)
    except RuntimeError as exc:
        raise ConfigError(f"--device {config.device!r}: {exc}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is available")
    say = progress or (lambda line: None)
    started = time.perf_counter()
    reports = []
    for kind in config.layers:
        torch.manual_seed(config.seed)
        layer = SequenceLayer(kind, config.d_model, config.num_heads).to(device)
        report = LayerReport(kind, LAYER_NAMES[kind])
        base_chain = count_operations(layer, 1, config.d_model, device).chain
        too_slow = ""
        for n in config.lengths:
            counts = count_operations(layer, n, config.d_model, device) if n <= config.count_max_length else None
            timed: Timed | None = None
            if not too_slow:
                timed = time_and_memory(layer, n, config, device)
                if timed.slowest_s > config.max_call_seconds:
                    too_slow = f"skipped: a call at n={n} took {timed.slowest_s:.1f} s > {config.max_call_seconds} s"
            point = LengthPoint(
                n=n,
                time_ms=timed.time_ms if timed else None,
                min_ms=timed.min_ms if timed else None,
                saved_bytes=timed.saved_bytes if timed else None,
                cuda_peak_bytes=timed.cuda_peak_bytes if timed else None,
                analytic_saved_bytes=analytic_saved_bytes(kind, n, config.d_model, config.num_heads, config.batch_size),
                flops=counts.flops * config.batch_size if counts and kind != "attention-fused" else None,
                analytic_flops=analytic_flops(kind, n, config.d_model, config.batch_size),
                chain=counts.chain if counts else None,
                sequential_steps=counts.chain - base_chain + 1 if counts else None,
                skipped="" if timed else too_slow,
            )
            report.points.append(point)
            say(f"{kind:>15} n={n:>5}: " + (f"{point.min_ms:9.2f} ms" if point.min_ms else point.skipped))
        if kind != "attention-fused":
            report.gradients = measure_gradients(kind, config, device)
            say(f"{kind:>15} gradient vs distance measured")
        reports.append(report)
    method = "saved-tensor bytes (saved_tensors_hooks)" + (
        " + cuda.max_memory_allocated" if device.type == "cuda" else ""
    )
    return CompareReport(config, reports, time.perf_counter() - started, method, torch.get_num_threads())


# -- the paper's Table 1 with measurements ----------------------------------------------------------------------------

PAPER_TABLE1 = {  # Vaswani et al. 2017, Table 1 (n: sequence length, d: representation dimension)
    "recurrent": ("O(n·d²)", "O(n)", "O(n)"),
    "attention": ("O(n²·d)", "O(1)", "O(1)"),
}


def table1_rows(report: CompareReport) -> list[dict[str, str]]:
    """One row per layer: the paper's O(·) entries with the measured figures beside them."""
    rows = []
    for layer in report.layers:
        family = "attention" if layer.kind.startswith("attention") else "recurrent"
        complexity, sequential, path = PAPER_TABLE1[family]
        counted = [p for p in layer.points if p.flops is not None]
        timed = [p for p in layer.points if p.min_ms is not None]
        measured_complexity = []
        if counted:
            p = counted[-1]
            measured_complexity.append(f"{p.flops:.2e} FLOPs at n={p.n} (formula {p.analytic_flops:.2e})")
        exponent = layer.time_exponent()
        if exponent is not None and timed:
            measured_complexity.append(f"time ∝ n^{exponent:.2f} up to n={timed[-1].n}")
        steps = [p for p in layer.points if p.sequential_steps is not None]
        measured_steps = ", ".join(f"n={p.n}: {p.sequential_steps}" for p in (steps[0], steps[-1])) if steps else "-"
        measured_path = "-"
        if layer.gradients is not None:
            g = layer.gradients
            n = len(g.distances)
            measured_path = f"‖∂y_n/∂x_1‖/‖∂y_n/∂x_n‖ at n={n}: {GradientProfile.ratio(g.random_init):.1e} (random)"
            if g.trained is not None:
                measured_path += f", {GradientProfile.ratio(g.trained):.1e} (trained)"
        rows.append(
            {
                "Layer type": layer.name,
                "Complexity per layer": f"{complexity}: " + ("; ".join(measured_complexity) or "-"),
                "Sequential operations": f"{sequential}: {measured_steps}",
                "Maximum path length": f"{path}: {measured_path}",
            }
        )
    return rows


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """A GitHub Markdown table of ``rows``."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(str(row.get(c, "-")) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def format_bytes(n: float | None) -> str:
    """Bytes as a short string (KiB / MiB / GiB), "-" for None."""
    if n is None:
        return "-"
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n / 1024:.1f} KiB"


def format_report(report: CompareReport) -> str:
    """The Table 1 with measurements, then one table of per-length measurements."""
    c = report.config
    lines = [
        f"Recurrence vs self-attention, width D = {c.d_model}, H = {c.num_heads}, batch {c.batch_size}, "
        f"device {c.device}, {report.seconds:.0f} s",
        "",
        "Table 1 of the paper with measured figures (n: sequence length, d: width)",
        markdown_table(
            table1_rows(report),
            ["Layer type", "Complexity per layer", "Sequential operations", "Maximum path length"],
        ),
        "",
        f"Per length (time: forward + backward, best and median of up to {c.repeats} calls after a warm-up, "
        f"{report.threads} torch thread(s); memory kept for backward: {report.memory_method})",
    ]
    rows = []
    for layer in report.layers:
        for p in layer.points:
            rows.append(
                {
                    "layer": layer.name,
                    "n": p.n,
                    "time (ms, best)": f"{p.min_ms:.2f}" if p.min_ms is not None else p.skipped or "-",
                    "time (ms, median)": f"{p.time_ms:.2f}" if p.time_ms is not None else "-",
                    "saved (measured)": format_bytes(p.saved_bytes),
                    "saved (analytic)": format_bytes(p.analytic_saved_bytes),
                    "FLOPs (counted)": f"{p.flops:.2e}" if p.flops is not None else "-",
                    "FLOPs (formula)": f"{p.analytic_flops:.2e}",
                    "sequential steps": p.sequential_steps if p.sequential_steps is not None else "-",
                }
            )
    columns = list(rows[0]) if rows else []
    lines.append(markdown_table(rows, columns))
    trained = [layer for layer in report.layers if layer.gradients and layer.gradients.training]
    if trained:
        lines += [
            "",
            f"Brief training on recall-the-first-token (n = {c.gradient_length}, {c.train_steps} Adam steps):",
        ]
        for layer in trained:
            t = layer.gradients.training  # type: ignore[union-attr]
            lines.append(f"    {layer.name}: final loss {t.final_loss:.3f} nats, accuracy {t.accuracy:.1%}")
    note = timing_note(report)
    if note:
        lines += ["", note]
    return "\n".join(lines)


# -- figures ----------------------------------------------------------------------------------------------------------

NOISY_REPEATS = 3  # below this many timed calls per point, time exponents are noise on a busy machine


def timing_note(report: CompareReport) -> str:
    """A warning when the timings rest on too few calls to read a trend from (empty otherwise)."""
    repeats = report.config.repeats
    if repeats >= NOISY_REPEATS:
        return ""
    return (
        f"Note: --repeats {repeats} times each point {'once' if repeats == 1 else f'{repeats} times'}: on a busy "
        f"machine the 'time ∝ n^k' exponents are noise, not a trend; use --repeats {NOISY_REPEATS} or more "
        "(the default) to read one"
    )


def tidy_log_axis(ax: Any, which: str) -> None:
    """Log-axis ticks that never overlap: minor ticks unlabelled; when the axis spans under ~1.5 decades (so that
    matplotlib would label the minor ticks "2×10¹3×10¹..."), major ticks at 1, 2 and 5 × 10^k in plain numbers."""
    from matplotlib.ticker import FuncFormatter, LogFormatterSciNotation, LogLocator, NullFormatter

    axis = ax.yaxis if which == "y" else ax.xaxis
    low, high = ax.get_ylim() if which == "y" else ax.get_xlim()
    if low <= 0 or high <= 0:
        return
    if math.log10(high / low) < 1.5:
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    else:
        axis.set_major_locator(LogLocator(base=10, numticks=8))
        axis.set_major_formatter(LogFormatterSciNotation())
    axis.set_minor_formatter(NullFormatter())


class Series(NamedTuple):
    """One line of a panel: legend label, x and y values."""

    label: str
    xs: list[float]
    ys: list[float]


def draw_series(ax: Any, series: Sequence[Series], colours: dict[str, str]) -> list[str]:
    """Draw each series; a series equal to one drawn before it is dashed, with a larger hollow marker around the
    earlier one's, so that both stay visible. Returns notes such as "GRU = LSTM" (empty when none coincide)."""
    drawn: list[Series] = []
    notes = []
    for line in series:
        same = [
            other
            for other in drawn
            if other.xs == line.xs
            and len(line.ys) == len(other.ys)
            and all(math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0) for a, b in zip(line.ys, other.ys, strict=True))
        ]
        colour = colours.get(line.label)
        if same and line.xs:
            ax.plot(
                line.xs,
                line.ys,
                linestyle=(0, (4, 3)),
                marker="o",
                markersize=6 + 4 * len(same),
                markerfacecolor="none",
                markeredgewidth=1.4,
                color=colour,
                label=line.label,
                zorder=3,
            )
            notes.append(f"{short_name(line.label)} = {short_name(same[0].label)}")
        else:
            ax.plot(line.xs, line.ys, "o-", color=colour, label=line.label, zorder=2)
        drawn.append(line)
    return notes


def short_name(name: str) -> str:
    """ "Recurrent (LSTM)" -> "LSTM", "Self-attention (fused SDPA)" -> "fused", "Self-attention" -> "attention"."""
    if name.startswith("Recurrent ("):
        return name[len("Recurrent (") : -1]
    return "fused" if "fused" in name else "attention" if name.startswith("Self-attention") else name


def coinciding_note(notes: Sequence[str]) -> str:
    """A second title line naming the lines that lie on top of each other ("" when none do)."""
    return "\nequal (dashed, ringed): " + ", ".join(notes) if notes else ""


def plot_report(report: CompareReport, path: Any) -> Any:
    """Draw time, memory, sequential steps and gradient-vs-distance (random and trained) in one figure.

    Lines with equal values are drawn dashed with hollow markers and named in a note; the memory panel draws the
    analytic counts as dotted lines with square markers above the measured ones; log axes label no minor ticks.

    Returns the written path. Raises ConfigError for an extension other than .png / .svg / .pdf.
    """
    from matplotlib.lines import Line2D

    from dotformer.plots.common import check_output_path, new_figure, save_figure

    path = check_output_path(path)
    fig = new_figure(13, 9)
    (ax_time, ax_mem, ax_steps), (ax_rand, ax_train, ax_flops) = fig.subplots(2, 3)
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]
    colours = {layer.name: palette[i % len(palette)] for i, layer in enumerate(report.layers)}
    panels: dict[str, list[Series]] = {"time": [], "memory": [], "steps": [], "flops": []}
    for layer in report.layers:
        timed = [p for p in layer.points if p.min_ms is not None]
        panels["time"].append(Series(layer.name, [p.n for p in timed], [p.min_ms for p in timed]))
        saved = [p for p in layer.points if p.saved_bytes is not None]
        panels["memory"].append(Series(layer.name, [p.n for p in saved], [p.saved_bytes / 2**20 for p in saved]))
        counted = [p for p in layer.points if p.sequential_steps is not None]
        panels["steps"].append(Series(layer.name, [p.n for p in counted], [p.sequential_steps for p in counted]))
        flops = [p for p in layer.points if p.flops is not None]
        if flops:
            panels["flops"].append(Series(layer.name, [p.n for p in flops], [p.flops for p in flops]))
        if layer.gradients is not None:
            g = layer.gradients
            ax_rand.plot(
                g.distances, [max(v, 1e-30) for v in g.random_init], label=layer.name, color=colours[layer.name]
            )
            if g.trained is not None:
                ax_train.plot(
                    g.distances, [max(v, 1e-30) for v in g.trained], label=layer.name, color=colours[layer.name]
                )
    notes = {
        key: coinciding_note(draw_series(ax, panels[key], colours))
        for ax, key in ((ax_time, "time"), (ax_mem, "memory"), (ax_steps, "steps"), (ax_flops, "flops"))
    }
    for layer in report.layers:  # analytic memory above the measured lines, so that it can be seen
        ns = [p.n for p in layer.points]
        ax_mem.plot(
            ns,
            [p.analytic_saved_bytes / 2**20 for p in layer.points],
            linestyle=":",
            linewidth=2.2,
            marker="s",
            markersize=8,
            markerfacecolor="none",
            color=colours[layer.name],
            alpha=0.9,
            zorder=4,
        )
    repeats = report.config.repeats
    time_title = "time of forward + backward (best call)" + (
        f"\n{repeats} call(s) per point: noisy, read no trend" if repeats < NOISY_REPEATS else ""
    )
    for ax, title, ylabel in (
        (ax_time, time_title + notes["time"], "milliseconds"),
        (ax_mem, "memory kept for backward (dotted, squares: analytic)" + notes["memory"], "MiB"),
        (ax_steps, "sequential steps (dependent weight applications)" + notes["steps"], "steps"),
        (ax_flops, "forward FLOPs (counted)" + notes["flops"], "FLOPs"),
    ):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.margins(y=0.08)  # a line at the lowest value (attention's 1 step) stays off the frame
        ax.set_xlabel("sequence length n")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=9)
        handles, labels = ax.get_legend_handles_labels()
        if ax is ax_mem:
            handles.append(Line2D([], [], linestyle=":", marker="s", markerfacecolor="none", color="#555"))
            labels.append("analytic count")
        ax.legend(handles, labels, fontsize=7, loc="upper left")
        tidy_log_axis(ax, "x")
        tidy_log_axis(ax, "y")
    n = report.config.gradient_length
    for ax, title in ((ax_rand, "random initialisation"), (ax_train, "after brief training (recall first token)")):
        ax.set_yscale("log")
        ax.set_xlabel(f"distance n - j (n = {n})")
        ax.set_ylabel("‖∂y_n / ∂x_j‖")
        ax.set_title(f"gradient vs distance, {title}", fontsize=9)
        ax.legend(fontsize=7)
        tidy_log_axis(ax, "y")
    return save_figure(fig, path)


def plot_gradients(report: CompareReport, path: Any) -> Any:
    """A two-panel figure of gradient norm against distance (random and trained), for the README."""
    from dotformer.plots.common import check_output_path, new_figure, save_figure

    path = check_output_path(path)
    fig = new_figure(10, 3.8)
    axes = fig.subplots(1, 2, sharey=True)
    for layer in report.layers:
        if layer.gradients is None:
            continue
        g = layer.gradients
        axes[0].plot(g.distances, [max(v, 1e-30) for v in g.random_init], label=layer.name)
        if g.trained is not None:
            axes[1].plot(g.distances, [max(v, 1e-30) for v in g.trained], label=layer.name)
    n = report.config.gradient_length
    for ax, title in zip(axes, ("random initialisation", "after brief training"), strict=True):
        ax.set_yscale("log")
        ax.set_xlabel(f"distance from the last position (n = {n})")
        ax.set_title(f"‖∂y_n / ∂x_j‖, {title}", fontsize=9)
        ax.legend(fontsize=7)
        tidy_log_axis(ax, "y")
    axes[0].set_ylabel("gradient norm")
    fig.suptitle("Maximum path length: the RNN's gradient decays with distance, attention's does not", fontsize=10)
    return save_figure(fig, path)
