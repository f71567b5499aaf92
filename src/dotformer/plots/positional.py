"""Pictures of the sinusoidal positional encoding (paper §3.5): the (position × dimension) table, a few of its
dimensions as waves, and the dot product PE(p)·PE(p+k) as a function of the distance k.

For an even d_model, PE(p)·PE(p+k) = Σ_i [sin(p·ω_i)·sin((p+k)·ω_i) + cos(p·ω_i)·cos((p+k)·ω_i)] = Σ_i cos(k·ω_i)
with ω_i = 10000^(-2i/d_model): it depends on the distance k only, not on the position p. The plot draws it for several
p to show that the curves coincide (one solid, the others dashed and marked, so that each stays visible, and a note that
says so with the largest difference between them).

The waves are drawn from the formula at :data:`WAVE_SAMPLES` points per position, so that the fastest dimensions
(period 2π ≈ 6.3 positions) are smooth curves rather than zig-zags between integer positions; dots mark the integer
positions, the values the model adds to its embeddings.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from dotformer.errors import ConfigError
from dotformer.plots.common import check_output_path, heatmap, new_figure, save_figure
from dotformer.positional import sinusoidal_positional_encoding

WAVE_SAMPLES = 16  # points per position on the drawn waves
MAX_LENGTH = 100_000  # most positions drawn (the waves hold WAVE_SAMPLES points per position)
MAX_D_MODEL = 65_536  # widest encoding drawn
MAX_CELLS = 2**24  # most length x d_model entries: the float64 table of 2 x length rows is then at most 256 MiB


class PositionalData(NamedTuple):
    """The numbers behind the positional-encoding figure.

    Attributes:
        encoding: (N, D) float64, ``sinusoidal_positional_encoding(N, D)``: row = position, column = dimension.
        wave_dims: the dimensions drawn as waves (columns of ``encoding``).
        positions: the start positions p of the dot-product curves.
        distances: (N,) int64, k = 0 .. N-1.
        dot_products: (len(positions), N) float64, PE(p)·PE(p+k) for each p (row) and k (column).
        wave_positions: (M,) float64, the (fractional) positions the waves are drawn at, 0 .. N-1.
        waves: (len(wave_dims), M) float64, PE(pos, dim) from the formula at ``wave_positions``
            (sin(pos·ω) for even dims, cos for odd, ω = 10000^(-2⌊dim/2⌋/D)); at integer positions it equals
            ``encoding``.
    """

    encoding: np.ndarray
    wave_dims: tuple[int, ...]
    positions: tuple[int, ...]
    distances: np.ndarray
    dot_products: np.ndarray
    wave_positions: np.ndarray
    waves: np.ndarray

    @property
    def max_curve_difference(self) -> float:
        """The largest |PE(p)·PE(p+k) - PE(p')·PE(p'+k)| over start positions and distances (0 in exact arithmetic)."""
        return float(np.ptp(self.dot_products, axis=0).max()) if len(self.positions) > 1 else 0.0


class PositionalPlot(NamedTuple):
    """Result of :func:`plot_positional`: the written file and the numbers drawn."""

    path: Path
    data: PositionalData


def default_wave_dims(d_model: int) -> tuple[int, ...]:
    """A sine/cosine pair of the fastest frequency, then sines at a quarter, half and the end of the width."""
    dims = {0, min(1, d_model - 1), 2 * (d_model // 8), 2 * (d_model // 4), 2 * ((d_model - 1) // 2)}
    return tuple(sorted(d for d in dims if 0 <= d < d_model))


def positional_data(
    d_model: int, length: int, wave_dims: tuple[int, ...] | None = None, positions: tuple[int, ...] | None = None
) -> PositionalData:
    """Compute the positional encoding of ``length`` positions and its dot products by distance.

    Args:
        d_model: D >= 1. length: N >= 1 positions.
        wave_dims: dimensions to draw as waves (default: :func:`default_wave_dims`).
        positions: start positions p for PE(p)·PE(p+k) (default: 0, N/2 and N).

    Raises:
        ConfigError: non-positive sizes, ``length`` above :data:`MAX_LENGTH`, ``d_model`` above :data:`MAX_D_MODEL`,
            their product above :data:`MAX_CELLS`, or a wave dimension outside 0..D-1.
    """
    if d_model < 1 or length < 1:
        raise ConfigError(f"need --d-model >= 1 and --length >= 1, got d_model={d_model}, length={length}")
    if length > MAX_LENGTH:
        raise ConfigError(f"--length must be at most {MAX_LENGTH:,}, got {length:,}")
    if d_model > MAX_D_MODEL:
        raise ConfigError(f"--d-model must be at most {MAX_D_MODEL:,}, got {d_model:,}")
    if length * d_model > MAX_CELLS:
        raise ConfigError(
            f"--length {length:,} x --d-model {d_model:,} is {length * d_model:,} table entries; "
            f"at most {MAX_CELLS:,} are drawn (shorten --length or narrow --d-model)"
        )
    wave_dims = default_wave_dims(d_model) if wave_dims is None else tuple(wave_dims)
    bad = [d for d in wave_dims if not 0 <= d < d_model]
    if bad:
        raise ConfigError(f"wave dimensions {bad} are outside 0..{d_model - 1}")
    positions = (0, length // 2, length) if positions is None else tuple(positions)
    if any(p < 0 for p in positions):
        raise ConfigError(f"positions must be >= 0, got {positions}")
    table = sinusoidal_positional_encoding(max(positions) + length, d_model, dtype=torch.float64)  # (P+N, D)
    table_np = table.numpy()
    distances = np.arange(length)
    dots = np.stack([table_np[p : p + length] @ table_np[p] for p in positions])  # (len(positions), N)
    fine = np.linspace(0.0, length - 1, (length - 1) * WAVE_SAMPLES + 1)  # (M,)
    waves = np.stack([wave(d_model, dim, fine) for dim in wave_dims]) if wave_dims else np.zeros((0, fine.size))
    return PositionalData(table_np[:length].copy(), wave_dims, positions, distances, dots, fine, waves)


def wave(d_model: int, dim: int, positions: np.ndarray) -> np.ndarray:
    """PE(pos, dim) of the paper's formula at any (fractional) positions: sin(pos·ω) for even dim, cos for odd,
    ω = 10000^(-2⌊dim/2⌋/d_model). Returns float64 of the shape of ``positions``."""
    omega = 10000.0 ** (-(dim - dim % 2) / d_model)
    return np.sin(positions * omega) if dim % 2 == 0 else np.cos(positions * omega)


def plot_positional(
    d_model: int, length: int, path: str | Path, wave_dims: tuple[int, ...] | None = None
) -> PositionalPlot:
    """Draw the encoding table, some dimensions as waves, and PE(p)·PE(p+k) against k.

    Returns:
        :class:`PositionalPlot` with the written path and the drawn numbers.

    Raises:
        ConfigError: bad sizes or a bad file extension.
    """
    path = check_output_path(path)
    data = positional_data(d_model, length, wave_dims)
    fig = new_figure(15, 4.2)
    ax_table, ax_waves, ax_dots = fig.subplots(1, 3)

    image = heatmap(ax_table, data.encoding, vmin=-1.0, vmax=1.0, cmap="RdBu_r")
    ax_table.set_xlabel("dimension")
    ax_table.set_ylabel("position")
    ax_table.set_title(f"PE(pos, dim), d_model = {d_model}", fontsize=9)
    fig.colorbar(image, ax=ax_table, shrink=0.8)

    for dim, values in zip(data.wave_dims, data.waves, strict=True):
        kind = "sin" if dim % 2 == 0 else "cos"
        (line,) = ax_waves.plot(data.wave_positions, values, label=f"dim {dim} ({kind})", linewidth=1)
        ax_waves.plot(np.arange(length), data.encoding[:, dim], ".", color=line.get_color(), markersize=2.5)
    ax_waves.set_xlabel("position (dots: the integer positions the model uses)")
    ax_waves.set_ylabel("PE")
    ax_waves.set_title("low dimensions wiggle fast, high ones slowly", fontsize=9)
    ax_waves.legend(fontsize=7, loc="lower left")

    styles = ("-", "--", ":", "-.")
    markers = (None, "o", "s", "^", "v", "D")
    every = max(1, length // 8)
    for index, (p, row) in enumerate(zip(data.positions, data.dot_products, strict=True)):
        ax_dots.plot(
            data.distances,
            row,
            label=f"p = {p}",
            linestyle=styles[index % len(styles)],
            linewidth=3.0 if index == 0 else 1.4,
            alpha=0.45 if index == 0 else 1.0,
            marker=markers[index % len(markers)],
            markevery=(index * every // max(1, len(data.positions)), every),  # markers offset along k per curve
            markersize=4,
            markerfacecolor="none",
        )
    ax_dots.set_xlabel("distance k")
    ax_dots.set_ylabel("PE(p) · PE(p + k)")
    ax_dots.set_title("the dot product depends on the distance only", fontsize=9)
    if len(data.positions) > 1:
        ax_dots.text(
            0.98,
            0.97,
            f"the {len(data.positions)} curves coincide\n(largest difference {data.max_curve_difference:.0e})",
            transform=ax_dots.transAxes,
            ha="right",
            va="top",
            fontsize=7,
            bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.85, "edgecolor": "#bbb"},
        )
    ax_dots.legend(fontsize=7, loc="lower left")
    return PositionalPlot(save_figure(fig, path), data)
