"""Joint CTC/attention training (Kim, Hori, Watanabe 2017, "Joint CTC-attention based end-to-end speech recognition
using multi-task learning"; Watanabe et al. 2017, "Hybrid CTC/Attention Architecture for End-to-End Speech
Recognition"): beside the decoder's cross-entropy, a CTC loss (Graves et al. 2006) on the encoder's output
teaches the encoder a monotonic alignment of source to target, which suits grapheme-to-phoneme conversion:

    loss = (1 - λ) · attention cross-entropy  +  λ · CTC(encoder)           (λ = ``TrainConfig.ctc_weight``)

The CTC head (:class:`CTCHead`) reads the encoder's memory: it splits each source position into k frames (k =
``TrainConfig.ctc_upsample``), since CTC needs at least as many frames as labels (plus a blank between equal
neighbours) and a word may have more phones than letters ("x" -> K S), and scores each frame over the target
vocabulary. The target's PAD id is CTC's blank: PAD is never a label (the labels are a target's ids before its
EOS, and the tokenizers give no text the PAD id), and the head is a layer of its own, so the PAD row of its
output is free.

The head is a submodule of the model (``model.ctc_head``), put there before the optimizer is built
(:func:`dotformer.training.adapting.adapt_model`): it trains, is clipped and saved with the rest, and a resumed
run continues it. Decoding never calls it, and a model loaded for decoding or export has none: its tensors are
left out (:data:`dotformer.checkpoint.TRAINING_ONLY`). The objective is
:class:`~dotformer.training.objective.JointCTC`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from torch import Tensor, nn

from dotformer.errors import ConfigError

if TYPE_CHECKING:
    from dotformer.training.config import TrainConfig

CTC_HEAD = "ctc_head"  # the head's attribute on the model, and its tensors' prefix (dotformer.checkpoint.TRAINING_ONLY)


class CTCHead(nn.Module):
    """k frames per source position, each scored over the target vocabulary (CTC's blank is one of its ids).

    The k frames of a position come from one linear layer D -> k·D, split into k vectors ("state splitting",
    Libovický and Helcl 2018, "End-to-End Non-Autoregressive Neural Machine Translation with Connectionist Temporal
    Classification"), not from k copies of the position: copies would give the k frames one distribution, so that a
    letter could not prefer one phone on its first frame and another on its second ("x" -> K S).

    Args:
        d_model: D. vocab_size: V, the target vocabulary (the blank included). upsample: k >= 1 (1: no split).

    Shape: memory (B, S, D) -> logits (B, k·S, V); frame k·s + j is the j-th frame of source position s.
    """

    def __init__(self, d_model: int, vocab_size: int, upsample: int = 2) -> None:
        super().__init__()
        self.upsample = upsample
        self.split: nn.Linear | None = nn.Linear(d_model, upsample * d_model) if upsample > 1 else None
        self.proj = nn.Linear(d_model, vocab_size)
        for linear in (self.split, self.proj):  # as the model's own linears (dotformer.model.Transformer)
            if linear is not None:
                nn.init.xavier_uniform_(linear.weight)
                nn.init.zeros_(linear.bias)

    def forward(self, memory: Tensor) -> Tensor:
        """(B, S, D) encoder memory -> (B, k·S, V) logits of the frames."""
        B, S, D = memory.shape
        if self.split is not None:
            memory = self.split(memory).reshape(B, S * self.upsample, D)  # (B, S, k·D) -> (B, k·S, D)
        return self.proj(memory)  # (B, k·S, V)

    def extra_repr(self) -> str:
        return f"upsample={self.upsample}"


def ctc_head_of(model: nn.Module) -> CTCHead | None:
    """The model's CTC head, or None."""
    head = getattr(model, CTC_HEAD, None)
    return head if isinstance(head, CTCHead) else None


def attach_ctc_head(model: nn.Module, config: TrainConfig) -> CTCHead | None:
    """Put a :class:`CTCHead` on an encoder-decoder ``model`` (``model.ctc_head``) when ``config.ctc_weight`` > 0.

    Returns:
        The head (None when ``ctc_weight`` is 0: the model is left as it is).

    Raises:
        ConfigError: the model is not an encoder-decoder, or the run also asks for LoRA adapters or torch.compile.
    """
    if not config.ctc_weight:
        return None
    arch = model.config.arch
    if arch != "encoder-decoder":
        raise ConfigError(f"--ctc-weight trains an encoder-decoder's encoder with CTC; this model is {arch}")
    if config.lora_rank:
        raise ConfigError("--ctc-weight trains a CTC head beside every weight: it cannot be combined with --lora-rank")
    if config.compile:
        raise ConfigError("--ctc-weight reads the encoder's output through a hook: train it without --compile")
    head = ctc_head_of(model)
    if head is None:
        head = CTCHead(model.config.d_model, model.config.tgt_vocab_size, config.ctc_upsample)
        model.add_module(CTC_HEAD, head)
    elif head.upsample != config.ctc_upsample:
        raise ConfigError(
            f"the model's CTC head has ctc_upsample {head.upsample}, the recipe asks {config.ctc_upsample}"
        )
    return head


@contextlib.contextmanager
def encoder_memory(model: nn.Module) -> Iterator[list[Tensor]]:
    """Within the block, every call of ``model.encoder`` appends its memory ((B, S, D), or (N_S, D) packed) to the
    list yielded: the model runs through its own ``forward`` (and its DDP wrapper's), and the CTC head reads what
    the encoder gave the decoder."""
    seen: list[Tensor] = []

    def keep(module: nn.Module, inputs: Any, output: Any) -> None:
        seen.append(output.memory)

    handle = model.encoder.register_forward_hook(keep)
    try:
        yield seen
    finally:
        handle.remove()


def infeasible_pairs(examples: Sequence[Any], upsample: int) -> int:
    """How many of ``examples`` CTC cannot align: fewer frames, k·(source + EOS), than their target's labels plus a
    blank between each pair of equal neighbours. Their CTC term is 0 (``zero_infinity``); the cross-entropy still
    trains on them.

    Args:
        examples: :class:`~dotformer.data.prepared.arrays.PairArrays`, or rows with ``src`` and ``tgt`` ids
            (without EOS).
        upsample: k.
    """
    from dotformer.data.prepared.arrays import (  # here: the objective (and scoring) import this module
        PairArrays,
        RaggedArray,
    )

    if not isinstance(getattr(examples, "tgt", None), RaggedArray):  # rows in a list: as arrays
        examples = PairArrays.from_rows([row.src for row in examples], [row.tgt for row in examples])
    ids, offsets = np.asarray(examples.tgt.ids), examples.tgt.offsets  # (N_ids,), (N + 1,)
    same = ids[1:] == ids[:-1]  # (N_ids - 1,): id i + 1 equals id i
    starts = offsets[1:-1]
    same[starts[(starts > 0) & (starts < len(ids))] - 1] = False  # a row's first id has no neighbour before it
    seen = np.concatenate([[0], np.cumsum(same)])  # (N_ids,): equal neighbours before each id
    repeats = seen[np.maximum(offsets[1:] - 1, offsets[:-1])] - seen[offsets[:-1]]  # (N,) within each row
    needed = np.diff(offsets) + repeats  # (N,)
    return int((upsample * (examples.src.lengths + 1) < needed).sum())


def feasibility_line(examples: Sequence[Any], upsample: int) -> str:
    """The line logged before a joint CTC run: the training pairs CTC cannot align at ``upsample`` frames per
    source token."""
    bad, total = infeasible_pairs(examples, upsample), len(examples)
    share, frames = bad / total if total else 0.0, "frame" if upsample == 1 else "frames"
    return (
        f"ctc: training pairs that need more than {upsample} {frames} per source token: {bad:,} of {total:,} "
        f"({share:.2%}); their CTC term is 0 (the cross-entropy still trains on them)"
    )


__all__ = [
    "CTC_HEAD",
    "CTCHead",
    "attach_ctc_head",
    "ctc_head_of",
    "encoder_memory",
    "feasibility_line",
    "infeasible_pairs",
]
