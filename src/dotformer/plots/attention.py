"""Attention heatmaps: one panel per (kind, layer, head) of the maps of
:class:`~dotformer.decoding.attention_maps.AttentionMaps`.

The maps come from :func:`dotformer.decoding.attention_maps.attention_weights` (an encoder-decoder: encoder,
decoder and cross-attention) or :func:`~dotformer.decoding.attention_maps.lm_attention_weights` (a language model:
its causal self-attention, drawn with ``kinds=LM_MAP_KINDS``); this module only draws them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from dotformer.decoding.attention_maps import MAP_KINDS, MapKind
from dotformer.errors import ConfigError
from dotformer.plots.common import check_output_path, heatmap, new_figure, save_figure

if TYPE_CHECKING:
    from dotformer.decoding.attention_maps import AttentionMaps

MAP_TITLES = {"encoder": "encoder self-attention", "decoder_self": "decoder self-attention", "cross": "cross-attention"}
# (row axis, column axis) names of each kind: rows are queries, columns are keys.
AXIS_NAMES = {
    "encoder": ("source (query)", "source (key)"),
    "decoder_self": ("target input (query)", "target input (key)"),
    "cross": ("predicted output token (query)", "source (key)"),
}


class AttentionPanel(NamedTuple):
    """One heatmap of a drawn figure: exactly the numbers it shows.

    Attributes:
        kind: "encoder", "decoder_self" or "cross". layer, head: 0-based indices.
        weights: (rows, cols) float32, the drawn matrix. row_labels, col_labels: the tick labels.
    """

    kind: MapKind
    layer: int
    head: int
    weights: np.ndarray
    row_labels: list[str]
    col_labels: list[str]


class AttentionPlot(NamedTuple):
    """Result of :func:`plot_attention`: the written file and its panels (in drawing order, row by row)."""

    path: Path
    panels: list[AttentionPanel]


MAX_PANELS = 24  # more heatmaps than this in one picture are unreadable: without --layer, the last layer alone


def select_indices(value: int | None, count: int, name: str) -> list[int]:
    """[value] (checked against 0..count-1), or every index when value is None.

    Raises:
        ConfigError: value outside the range.
    """
    if value is None:
        return list(range(count))
    if not 0 <= value < count:
        raise ConfigError(f"--{name} {value} is out of range: the model has {count} {name}s (0..{count - 1})")
    return [value]


def plot_attention(
    maps: AttentionMaps,
    path: str | Path,
    layer: int | None = None,
    head: int | None = None,
    kinds: Sequence[MapKind] = MAP_KINDS,
) -> AttentionPlot:
    """Draw attention heatmaps: one row of panels per (kind, layer), one column per head.

    Args:
        maps: from :func:`~dotformer.decoding.attention_maps.attention_weights` or
            :func:`~dotformer.decoding.attention_maps.lm_attention_weights`.
        path: output file, .png or .svg.
        layer, head: draw only this 0-based layer / head (None: all; but when every layer's heads would make
            more than :data:`MAX_PANELS` heatmaps (a 6-layer, 12-head BERT: 72), the last layer's alone).
        kinds: which map kinds to draw.

    Returns:
        :class:`AttentionPlot` with the written path and every drawn matrix.

    Raises:
        ConfigError: a layer/head out of range, an unknown kind, or a bad file extension.
    """
    path = check_output_path(path)
    for kind in kinds:
        maps.kind(kind)  # validates the kind
    layers = select_indices(layer, maps.num_layers, "layer")
    heads = select_indices(head, maps.num_heads, "head")
    if layer is None and len(kinds) * len(layers) * len(heads) > MAX_PANELS:
        layers = layers[-1:]  # the last layer, a readable grid; --layer N draws another
    panels = []
    for kind in kinds:
        rows, cols = maps.labels(kind)
        for li in layers:
            for hi in heads:
                panels.append(AttentionPanel(kind, li, hi, maps.kind(kind)[li, hi], list(rows), list(cols)))

    cell = 0.22  # inches per token
    longest = max(len(maps.src_tokens), len(maps.tgt_tokens))
    panel_in = max(2.2, cell * longest + 1.0)
    grid_rows = len(kinds) * len(layers)
    width, height = panel_in * len(heads) + 0.8, panel_in * grid_rows + 0.8
    shrink = min(1.0, 60.0 / width, 60.0 / height)  # keep square panels within new_figure's 60-inch limit
    fig = new_figure(width * shrink, height * shrink)
    axes = fig.subplots(grid_rows, len(heads), squeeze=False)
    image = None
    for index, panel in enumerate(panels):
        ax = axes[index // len(heads)][index % len(heads)]
        title = f"{MAP_TITLES[panel.kind]} — layer {panel.layer}, head {panel.head}"
        image = heatmap(ax, panel.weights, panel.row_labels, panel.col_labels, title)
        forced_rows = panel.kind == "cross" and maps.forced
        ax.set_ylabel("reference token (query)" if forced_rows else AXIS_NAMES[panel.kind][0], fontsize=7)
        ax.set_xlabel(AXIS_NAMES[panel.kind][1], fontsize=7)
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.6, label="attention weight")
    how = " (forced decoding of the reference)" if maps.forced else ""
    fig.suptitle(f"{maps.source_text!r} → {maps.output_text!r}{how}", fontsize=10)
    return AttentionPlot(save_figure(fig, path), panels)
