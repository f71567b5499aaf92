"""Maximum path length, empirically: the gradient norm of the output at the last position with respect to the input
at every position, against their distance, for a randomly initialised layer and for one trained briefly on
recall-the-first-token.

Shapes: tokens (B, n) int64, x (B, n, D), y_n (B, D).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import torch
from torch import Tensor, nn

from dotformer.compare.config import CompareConfig
from dotformer.compare.layers import SequenceLayer
from dotformer.positional import sinusoidal_positional_encoding


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
