"""Pictures of what the model computes, each returning the numbers it drew (so tests can check them):

* :mod:`dotformer.plots.attention`  attention maps of a checkpoint on one input (encoder, decoder, cross), as
  :mod:`dotformer.decoding.attention_maps` extracts them
* :mod:`dotformer.plots.positional` the sinusoidal positional encoding (paper §3.5)
* :mod:`dotformer.plots.masks`      padding and causal masks of an example batch (§3.2.3)
* :mod:`dotformer.plots.curves`     the learning-rate schedule (§5.3) and a run's loss curves
* :mod:`dotformer.plots.compare`    recurrence against self-attention, measured (Table 1; ``dotformer compare``)

Plots only draw: what they draw is computed below them (attention maps in :mod:`dotformer.decoding`, schedules in
:mod:`dotformer.training`). Figures are drawn on matplotlib's Agg canvas inside the functions and written as PNG or
SVG by extension.
"""

from dotformer.plots.attention import AttentionPanel, AttentionPlot, plot_attention
from dotformer.plots.curves import (
    LossCurves,
    ScheduleCurve,
    config_curve,
    noam_curve,
    plot_loss_curves,
    plot_schedule,
    read_loss_curves,
)
from dotformer.plots.masks import MaskData, mask_data, plot_masks
from dotformer.plots.positional import PositionalData, plot_positional, positional_data

__all__ = [
    "AttentionPanel",
    "AttentionPlot",
    "LossCurves",
    "MaskData",
    "PositionalData",
    "ScheduleCurve",
    "config_curve",
    "mask_data",
    "noam_curve",
    "plot_attention",
    "plot_loss_curves",
    "plot_masks",
    "plot_positional",
    "plot_schedule",
    "positional_data",
    "read_loss_curves",
]
