"""What a run trains of its model, and how it keeps the memory down: LoRA adapters on the frozen weights
(:mod:`dotformer.lora`, ``TrainConfig.lora_rank``), a CTC head on the encoder (:mod:`dotformer.training.ctc`,
``TrainConfig.ctc_weight``) and activation checkpointing of the stacks' layers
(``TrainConfig.activation_checkpointing``, the seam :func:`dotformer.stacks.run_layer`).

:func:`adapt_model` runs once, before the optimizer is built (it takes only the parameters that train), and before
the weights of ``--init-from`` or of a resumed checkpoint are copied in (:mod:`~dotformer.training.resume` copies
the base's weights into the frozen tensors and a checkpoint's adapters into theirs).
"""

from __future__ import annotations

import logging

from torch import nn

from dotformer.errors import ConfigError
from dotformer.lora import add_adapters
from dotformer.stacks import Decoder, Encoder
from dotformer.training.config import TrainConfig
from dotformer.training.ctc import attach_ctc_head

logger = logging.getLogger(__name__)  # "dotformer.training.adapting": the adapters' line before training


def adapt_model(model: nn.Module, config: TrainConfig, has_base: bool, announce: bool = False) -> list[str]:
    """Put LoRA adapters on ``model`` (in place; every other weight frozen, a classifier head aside) when
    ``config.lora_rank`` asks for them, a CTC head when ``config.ctc_weight`` does, and turn on activation
    checkpointing when asked.

    Args:
        model: a :class:`~dotformer.model.Transformer`. config: the recipe.
        has_base: the run starts from a checkpoint's weights (``--init-from``, or a resumed run).
        announce: log one line naming the adapters and the parameters that train (rank 0 of a run).

    Returns:
        The qualified names of the adapted layers (empty without adapters).

    Raises:
        ConfigError: adapters without a base checkpoint (they would adapt random weights), or targets the model does
            not have (:func:`dotformer.lora.add_adapters`); a CTC head on a model without an encoder and a decoder,
            or with adapters (:func:`~dotformer.training.ctc.attach_ctc_head`).
    """
    attach_ctc_head(model, config)
    for module in model.modules():
        if isinstance(module, (Encoder, Decoder)):
            module.checkpointing = config.activation_checkpointing
    spec = config.lora
    if spec is None:
        return []
    if not has_base:
        raise ConfigError(
            "--lora-rank trains adapters on a checkpoint's frozen weights: give --init-from CKPT (a trained, "
            "imported or adapted checkpoint)"
        )
    try:
        names = add_adapters(model, spec)
    except ConfigError as exc:
        raise ConfigError(f"--lora-targets: {exc}") from None
    if announce:
        trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
        total = sum(p.numel() for p in model.parameters())
        logger.info(
            f"lora: rank {spec.rank} adapters (alpha {spec.alpha:g}) on {len(names)} layers "
            f"({', '.join(spec.targets)}); {trained:,} of {total:,} parameters train"
        )
    return names
