"""What every plot shares: a matplotlib figure on the Agg canvas (no global backend switch, no display needed),
saving to PNG, SVG or PDF by the file's extension, and a labelled heatmap panel.

matplotlib is imported inside the functions, so ``import dotformer.plots`` stays cheap and changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dotformer.errors import ConfigError, require_extra

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

FORMATS = (".png", ".svg", ".pdf")  # the file types every plot can be written as (chosen by the output's extension)


def check_output_path(path: str | Path) -> Path:
    """Return ``path`` as a Path after checking that its extension is .png, .svg or .pdf.

    Raises:
        ConfigError: another extension (the message names it and the allowed ones).
    """
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise ConfigError(
            f"{path}: plots are written as .png, .svg or .pdf (chosen by the extension), got {path.suffix!r}"
        )
    return path


def new_figure(width_in: float, height_in: float) -> Figure:
    """A matplotlib Figure drawn by the Agg canvas (the raster backend; SVG output uses matplotlib's SVG writer).

    The figure is not registered with ``matplotlib.pyplot``: nothing global changes and nothing needs closing.
    Sizes are in inches (at most 60 each, so a huge grid of panels cannot ask for gigabytes of pixels).

    Raises:
        MissingExtraError: matplotlib is not installed (``pip install "dotformer[plots]"``).
    """

    require_extra("plots", "matplotlib", "drawing plots")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(min(width_in, 60.0), min(height_in, 60.0)), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, path: str | Path, dpi: int = 120) -> Path:
    """Write ``fig`` to ``path`` (.png, .svg or .pdf, parent directories created) and return the path.

    Raises:
        ConfigError: the extension is not .png, .svg or .pdf.
    """
    path = check_output_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, format=path.suffix.lower().lstrip("."))
    return path


def heatmap(
    ax: Axes,
    values: np.ndarray,
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
    title: str = "",
    vmin: float | None = 0.0,
    vmax: float | None = 1.0,
    cmap: str = "viridis",
    max_labels: int = 60,
) -> Any:
    """Draw a (R, C) matrix as a heatmap on ``ax``: cell (r, c) at row r from the top, column c from the left.

    Tick labels are drawn when there are at most ``max_labels`` of them on an axis (else every n-th index).
    Returns matplotlib's AxesImage (for a colour bar).
    """
    image = ax.imshow(values, vmin=vmin, vmax=vmax, cmap=cmap, aspect="auto", interpolation="nearest")
    rows, cols = values.shape
    for labels, count, set_ticks, set_labels, rotation in (
        (row_labels, rows, ax.set_yticks, ax.set_yticklabels, 0),
        (col_labels, cols, ax.set_xticks, ax.set_xticklabels, 90),
    ):
        if labels is not None and count <= max_labels:
            set_ticks(range(count))
            set_labels(list(labels), rotation=rotation, fontsize=7)
    if title:
        ax.set_title(title, fontsize=8)
    return image
