"""What a training step learns: the objective, the one seam between a batch and its loss.

Every family of the lesson trains through the same step (:func:`dotformer.training.step.train_step`) and the same
validation pass (:func:`dotformer.training.scoring.evaluate_loss`); what differs is which outputs of the model are
scored against which answers, and over which set of answers the cross-entropy runs:

===============  ==================  =================================================  ================================
objective        family              scored outputs (the model's call)                  loss
===============  ==================  =================================================  ================================
next-token       encoder-decoder,    every target position, teacher-forced              label-smoothed CE over the V
                 decoder-only        (``model(src, tgt_in)``: the generator)            tokens (§5.4)
masked-token     encoder-only (MLM)  the masked positions of the input                  label-smoothed CE over the V
                                     (``model(src, select=masked)``: the generator)     tokens
sequence-label   encoder-only        one label per text (``model(src)``: the pooled     CE over the C labels
                                     classifier)
token-label      encoder-only        the labelled positions, e.g. each word's first     CE over the C labels
                                     token (``model(src, select=labelled)``)
===============  ==================  =================================================  ================================

Joint CTC/attention training (:class:`JointCTC`, ``TrainConfig.ctc_weight`` = λ > 0, encoder-decoder pairs) is the
next-token objective with a second loss on the encoder (:mod:`dotformer.training.ctc`): (1 - λ)·CE + λ·CTC.

An objective has two parts: :meth:`~Objective.predict` runs the model (under the step's autocast) and returns the
scores and the gold answers of the scored positions (a :class:`Prediction`); :meth:`~Objective.loss` turns them into
sums (:class:`~dotformer.training.loss.LossSums`) that the step normalises once by the scored positions of the whole
step. The batches say how many positions they score before the model runs (``num_tgt_tokens``), so the step can
scale the loss of accumulated micro-batches and of several ranks into one mean. The next-token objective is the
paper's (§5.4); a run's task says which objective it trains (:class:`dotformer.training.state.TrainData`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from torch import Tensor, nn

from dotformer.errors import ConfigError
from dotformer.training.ctc import ctc_head_of, encoder_memory
from dotformer.training.loss import LossSums, ctc_loss_sum, label_cross_entropy, label_smoothed_cross_entropy

if TYPE_CHECKING:
    from dotformer.data.batch.batching import Batch


class Prediction(NamedTuple):
    """The model's scores of the scored positions of a batch, and their gold answers.

    Attributes:
        scores: (B, T, V), (N, V) or (N, C) float logits.
        gold: the matching (B, T) or (N,) int64 answers (token ids, or label ids).
    """

    scores: Tensor
    gold: Tensor


class Objective(Protocol):
    """What a step learns from a batch (module docstring)."""

    name: str  # "next-token", "masked-token", "sequence-label" or "token-label"
    scored: str  # what its scored positions are, plural, for speeds: "target tokens", "masked tokens", "texts", "words"
    unit: str  # the same, short, for the progress line: "tok", "masked tok", "texts", "words"
    perplexity: bool  # whether exp(NLL) means something: a perplexity over tokens (not over labels)

    def predict(self, model: nn.Module, batch: Any, packed: bool, pad_id: int) -> Prediction:
        """Run ``model`` (the Transformer or its DDP/compiled wrapper: always through its ``forward``) on ``batch``."""
        ...

    def loss(self, prediction: Prediction, label_smoothing: float, pad_id: int) -> LossSums:
        """Summed loss and NLL over the scored positions, and their number."""
        ...


def gold_tokens(batch: Batch, packed: bool, pad_id: int) -> Tensor:
    """The labels matching ``model(src, tgt_in, packed=packed)``: (B, T) ``tgt_out``, or (N_T,) its entries at
    the non-PAD positions of ``tgt_in`` (the same positions as ``tgt_out``'s, one shift apart)."""
    return batch.tgt_out[batch.tgt_in != pad_id] if packed else batch.tgt_out


class NextToken:
    """Teacher forcing (§3, §5.4): the logits of every target position against the next token, ``tgt_out``."""

    name = "next-token"
    scored, unit, perplexity = "target tokens", "tok", True

    def predict(self, model: nn.Module, batch: Batch, packed: bool, pad_id: int) -> Prediction:
        logits = model(batch.src, batch.tgt_in, packed=packed)  # (B, T, V) or (N_T, V)
        return Prediction(logits, gold_tokens(batch, packed, pad_id))  # gold: (B, T) or (N_T,)

    def loss(self, prediction: Prediction, label_smoothing: float, pad_id: int) -> LossSums:
        return label_smoothed_cross_entropy(prediction.scores, prediction.gold, label_smoothing, pad_id)


class MaskedTokens:
    """BERT's masked language model: the generator's logits at the masked positions against the tokens that stood
    there (a :class:`~dotformer.data.batch.labelled.LabelledBatch` whose ``labels`` hold them)."""

    name = "masked-token"
    scored, unit, perplexity = "masked tokens", "masked tok", True

    def predict(self, model: nn.Module, batch: Any, packed: bool, pad_id: int) -> Prediction:
        scored = batch.scored  # (B, S) bool: the masked positions
        return Prediction(model(batch.src, packed=packed, select=scored), batch.labels[scored])  # (N, V), (N,)

    def loss(self, prediction: Prediction, label_smoothing: float, pad_id: int) -> LossSums:
        return label_smoothed_cross_entropy(prediction.scores, prediction.gold, label_smoothing, pad_id)


class SequenceLabels:
    """Classification: the pooled classifier's logits (B, C) against each text's label (B,)."""

    name = "sequence-label"
    scored, unit, perplexity = "texts", "texts", False

    def predict(self, model: nn.Module, batch: Any, packed: bool, pad_id: int) -> Prediction:
        scored = batch.scored  # (B,) bool: every text, unless the batch stands in for a rank with nothing to score
        return Prediction(model(batch.src, packed=packed)[scored], batch.labels[scored])  # (B, C), (B,)

    def loss(self, prediction: Prediction, label_smoothing: float, pad_id: int) -> LossSums:
        return label_cross_entropy(prediction.scores, prediction.gold, label_smoothing)


class TokenLabels:
    """Tagging: the per-token classifier's logits at the labelled positions (N, C) against their labels (N,)."""

    name = "token-label"
    scored, unit, perplexity = "words", "words", False

    def predict(self, model: nn.Module, batch: Any, packed: bool, pad_id: int) -> Prediction:
        scored = batch.scored  # (B, S) bool: the labelled positions
        return Prediction(model(batch.src, packed=packed, select=scored), batch.labels[scored])  # (N, C), (N,)

    def loss(self, prediction: Prediction, label_smoothing: float, pad_id: int) -> LossSums:
        return label_cross_entropy(prediction.scores, prediction.gold, label_smoothing)


class CTCPrediction(NamedTuple):
    """The decoder's logits and gold tokens, as :class:`Prediction`, and the CTC head's frames and labels.

    Attributes:
        scores: (B, T, V) or (N_T, V) the decoder's logits. gold: the matching (B, T) or (N_T,) next tokens.
        ctc_scores: (B, k·S, V) the CTC head's logits of the frames.
        frames: (B,) int64, k·(source tokens + EOS): each row's real frames.
        labels: (B, T) int64 ``tgt_out``: a row's first ``label_lengths[b]`` ids are its labels (EOS and PAD after).
        label_lengths: (B,) int64, the target tokens of each row, EOS not counted.
    """

    scores: Tensor
    gold: Tensor
    ctc_scores: Tensor
    frames: Tensor
    labels: Tensor
    label_lengths: Tensor


@dataclass(frozen=True)
class JointCTC:
    """Teacher forcing (§5.4) and CTC on the encoder (Kim, Hori, Watanabe 2017): (1 - λ)·CE + λ·CTC.

    The model must carry a CTC head (:func:`dotformer.training.ctc.attach_ctc_head`). Both terms are sums: CE over
    the target tokens, CTC over the pairs (-log p(target | source), :func:`~dotformer.training.loss.ctc_loss_sum`,
    PAD as the blank); the step divides their weighted sum by the target tokens, as it does the CE alone. The NLL
    reported is the decoder's alone, so perplexities compare with runs without CTC.

    Args:
        weight: λ in [0, 1). blank: CTC's blank, the target PAD id (never a label).
    """

    weight: float
    blank: int = 0
    name = "next-token"  # what the batches score for the decoder (the data line's wording)
    scored, unit, perplexity = NextToken.scored, NextToken.unit, NextToken.perplexity  # the decoder's tokens

    def predict(self, model: nn.Module, batch: Batch, packed: bool, pad_id: int) -> CTCPrediction:
        from dotformer.checkpoint import unwrap_model  # not at the top: scoring (and decoding) import this module

        core = unwrap_model(model)
        head = ctc_head_of(core)
        if head is None:
            raise ConfigError("joint CTC training needs the model's CTC head (dotformer.training.ctc.attach_ctc_head)")
        with encoder_memory(core) as seen:
            logits = model(batch.src, batch.tgt_in, packed=packed)  # (B, T, V) or (N_T, V)
        memory = seen[-1]  # (B, S, D), or (N_S, D): the real source tokens in row-major order
        real = batch.src != pad_id  # (B, S) bool
        if packed:
            B, S = batch.src.shape
            memory = memory.new_zeros(B, S, memory.size(-1)).masked_scatter(real[..., None], memory)  # (B, S, D)
        label_lengths = (batch.tgt_out != pad_id).sum(dim=1) - 1  # (B,): the target tokens before EOS
        frames = real.sum(dim=1) * head.upsample  # (B,)
        return CTCPrediction(
            logits, gold_tokens(batch, packed, pad_id), head(memory), frames, batch.tgt_out, label_lengths
        )

    def loss(self, prediction: CTCPrediction, label_smoothing: float, pad_id: int) -> LossSums:
        p = prediction
        attention = label_smoothed_cross_entropy(p.scores, p.gold, label_smoothing, pad_id)
        if not self.weight:
            return attention
        ctc = ctc_loss_sum(p.ctc_scores, p.frames, p.labels, p.label_lengths, self.blank)
        loss = (1.0 - self.weight) * attention.loss + self.weight * ctc
        return LossSums(loss=loss, nll=attention.nll, num_tokens=attention.num_tokens)


NEXT_TOKEN = NextToken()
OBJECTIVES: dict[str, Objective] = {
    objective.name: objective for objective in (NEXT_TOKEN, MaskedTokens(), SequenceLabels(), TokenLabels())
}


__all__ = [
    "NEXT_TOKEN",
    "OBJECTIVES",
    "CTCPrediction",
    "JointCTC",
    "MaskedTokens",
    "NextToken",
    "Objective",
    "Prediction",
    "SequenceLabels",
    "TokenLabels",
    "gold_tokens",
]
