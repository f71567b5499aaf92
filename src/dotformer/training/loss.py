"""Label-smoothed cross-entropy (paper §5.4, "Label Smoothing ... ε_ls = 0.1"), ignoring padding.

For one target position with gold token y and predicted log-probabilities log p over the V tokens:

    loss = (1 - ε) · (-log p_y)  +  ε · mean_{v ≠ PAD} (-log p_v)

This is the cross-entropy against the smoothed target distribution q that puts 1 - ε on y and spreads ε evenly over
the V - 1 tokens other than PAD (y included): q_y = 1 - ε + ε/(V-1), q_v = ε/(V-1) for every other v ≠ PAD, and
q_PAD = 0. PAD gets no mass because the model should never learn to emit it (the Annotated Transformer also zeroes
the PAD column; fairseq spreads ε over all V tokens). Positions whose gold token is PAD contribute nothing, to the
loss or to the token count.

The functions return SUMS over tokens and the token count, so that the caller normalises once by the number of real
target tokens in the whole (possibly accumulated, possibly distributed) batch.

Two implementations, tested equal (values and gradients):

* :func:`label_smoothed_cross_entropy_reference` writes the formula out with autograd doing the rest. Its backward
  allocates several (N, V) tensors (the gather's and the PAD column's zero-filled gradients, their sum, the
  log-softmax gradient); at V = 8000 each one costs milliseconds on a CPU, mostly in page faults.
* :func:`label_smoothed_cross_entropy`, used for training, computes the gradient in closed form,
  ∂loss/∂logit_v = p_v - q_v, in the buffer that held the log-probabilities: one (N, V) float32 tensor in all (plus
  the float32 copy of, and the gradient in, low-precision logits).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from dotformer.errors import ConfigError, ShapeError


class LossSums(NamedTuple):
    """Sums over the non-PAD target positions of a batch.

    Attributes:
        loss: () float32 tensor, Σ label-smoothed loss (differentiable); divide by ``num_tokens`` for the mean.
        nll: () float32 tensor, Σ -log p(gold) (detached); exp(nll / num_tokens) is the perplexity.
        num_tokens: () int64 tensor, the number of non-PAD target positions.
    """

    loss: Tensor
    nll: Tensor
    num_tokens: Tensor


def label_smoothed_cross_entropy_reference(
    logits: Tensor, target: Tensor, epsilon: float = 0.1, pad_id: int = 0
) -> LossSums:
    """Summed label-smoothed cross-entropy and NLL over the non-PAD positions (paper §5.4), written out.

    Args:
        logits: (B, T, V) (or (N, V)) unnormalised scores, any float dtype; computed in float32 (float64 logits in
            float64: :func:`loss_dtype`).
        target: (B, T) (or (N,)) int64 gold token ids; positions equal to ``pad_id`` are ignored.
        epsilon: ε_ls in [0, 1); 0 gives the plain cross-entropy.
        pad_id: the PAD id: ignored as a target and given no smoothing mass.

    Returns:
        :class:`LossSums` (loss, nll, num_tokens), sums over the non-PAD positions.

    Raises:
        ShapeError: ``logits`` and ``target`` do not agree, V < 2, or a target id is outside [0, V).
        ConfigError: ``epsilon`` outside [0, 1) or ``pad_id`` outside [0, V).
    """
    V = check_loss_inputs(logits, target, epsilon, pad_id)
    keep = target != pad_id  # (B, T) bool: real target tokens
    # PAD rows count for nothing; zero their logits first, so an inf or NaN there reaches neither the value nor the
    # gradient (masking after the log-softmax would leave 0 · NaN in its backward).
    logits = logits.to(loss_dtype(logits)).masked_fill(~keep.unsqueeze(-1), 0.0)  # (B, T, V) float32 (or float64)
    log_probs = F.log_softmax(logits, dim=-1)  # (B, T, V) float32 (or float64)
    gold = log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (B, T) log p(y)
    nll = -gold.masked_fill(~keep, 0.0).sum()
    if epsilon > 0:
        # mean over the V-1 non-PAD tokens of -log p_v
        smooth = -(log_probs.sum(dim=-1) - log_probs[..., pad_id]) / (V - 1)  # (B, T)
        loss = (1.0 - epsilon) * nll + epsilon * smooth.masked_fill(~keep, 0.0).sum()
    else:
        loss = nll
    return LossSums(loss=loss, nll=nll.detach(), num_tokens=keep.sum())


def loss_dtype(logits: Tensor) -> torch.dtype:
    """The dtype the loss is computed in: float32 for float32 and lower-precision logits (bfloat16, float16), float64
    for float64 logits (a float64 model, as the tests' comparisons with other implementations use, keeps its
    precision)."""
    return torch.promote_types(logits.dtype, torch.float32)


def check_loss_inputs(logits: Tensor, target: Tensor, epsilon: float, pad_id: int) -> int:
    """Return V, or raise unless logits are target's shape plus a vocabulary dim of >= 2, every target id and
    ``pad_id`` lie in [0, V), and 0 <= ``epsilon`` < 1.

    Raises:
        ShapeError: the shapes, V or a target id. ConfigError: ``epsilon`` or ``pad_id``.
    """
    if logits.shape[:-1] != target.shape:
        raise ShapeError(f"logits {tuple(logits.shape)} must be target {tuple(target.shape)} plus a vocabulary dim")
    V = logits.size(-1)
    if V < 2:
        raise ShapeError(f"label smoothing needs a vocabulary of at least 2 tokens, got V={V}")
    if not 0.0 <= epsilon < 1.0:
        raise ConfigError(f"label smoothing epsilon must be in [0, 1), got {epsilon}")
    if not 0 <= pad_id < V:
        raise ConfigError(f"pad_id {pad_id} is not a token of the V={V} vocabulary")
    if target.numel() and (int(target.min()) < 0 or int(target.max()) >= V):
        raise ShapeError(f"target ids must lie in [0, {V}); got min {int(target.min())}, max {int(target.max())}")
    return V


class _LabelSmoothedCrossEntropy(torch.autograd.Function):
    """The loss sum with a closed-form backward: ∂loss_i/∂logit_iv = p_iv - q_iv for real positions i, else 0."""

    @staticmethod
    def forward(ctx: Any, logits: Tensor, target: Tensor, epsilon: float, pad_id: int) -> tuple[Tensor, Tensor]:
        # logits: (N, V) any float dtype; target: (N,) int64
        V = logits.size(-1)
        log_probs = F.log_softmax(logits.to(loss_dtype(logits)), dim=-1)  # (N, V) float32: the one (N, V) buffer
        keep = target != pad_id  # (N,)
        gold = log_probs.gather(1, target[:, None]).squeeze(1)  # (N,) log p(y)
        nll = -gold.masked_fill(~keep, 0.0).sum()  # masked_fill, not * keep: PAD rows may hold inf or NaN
        loss = nll.clone()  # a tensor of its own: nll is returned as non-differentiable
        if epsilon > 0:
            smooth = -(log_probs.sum(dim=-1) - log_probs[:, pad_id]) / (V - 1)  # (N,) mean_{v != PAD} -log p_v
            loss = (1.0 - epsilon) * nll + epsilon * smooth.masked_fill(~keep, 0.0).sum()
        ctx.save_for_backward(log_probs, target, keep)
        ctx.epsilon, ctx.pad_id, ctx.logits_dtype, ctx.used = epsilon, pad_id, logits.dtype, False
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_loss: Tensor, _grad_nll: Tensor) -> tuple[Tensor | None, None, None, None]:
        if ctx.used:
            raise RuntimeError("label_smoothed_cross_entropy's backward reuses its buffer and runs once per forward")
        ctx.used = True
        log_probs, target, keep = ctx.saved_tensors
        V, eps = log_probs.size(-1), ctx.epsilon
        grad = log_probs.exp_()  # (N, V) p, in place: the log-probabilities are not needed any more
        off = eps / (V - 1)  # q_v for v != y, v != PAD
        grad.sub_(off)
        grad[:, ctx.pad_id] += off  # q_PAD = 0
        grad.scatter_add_(1, target[:, None], torch.full_like(target[:, None], -(1.0 - eps), dtype=grad.dtype))
        grad.mul_(grad_loss).masked_fill_(~keep[:, None], 0.0)  # PAD positions get no gradient
        return grad.to(ctx.logits_dtype), None, None, None


def label_smoothed_cross_entropy(logits: Tensor, target: Tensor, epsilon: float = 0.1, pad_id: int = 0) -> LossSums:
    """Summed label-smoothed cross-entropy and NLL over the non-PAD positions (paper §5.4), with a fused backward.

    Equal to :func:`label_smoothed_cross_entropy_reference` in value and gradient (tested); its backward writes the
    gradient p - q into the log-probabilities' buffer instead of letting autograd allocate one (N, V) tensor per
    term, and can therefore run once per forward (``retain_graph`` is not supported: use the reference).

    Args and Raises: as :func:`label_smoothed_cross_entropy_reference` (``logits`` (B, T, V) or (N, V), any float
    dtype; ``target`` (B, T) or (N,) int64).

    Returns:
        :class:`LossSums` (loss, nll, num_tokens), sums over the non-PAD positions; the gradient of ``loss`` with
        respect to ``logits`` has ``logits``' dtype.
    """
    V = check_loss_inputs(logits, target, epsilon, pad_id)
    flat_target = target.reshape(-1)  # (N,)
    loss, nll = _LabelSmoothedCrossEntropy.apply(logits.reshape(-1, V), flat_target, float(epsilon), pad_id)
    return LossSums(loss=loss, nll=nll, num_tokens=(flat_target != pad_id).sum())


def smoothed_target_distribution(target: Tensor, vocab_size: int, epsilon: float, pad_id: int = 0) -> Tensor:
    """The target distribution q that :func:`label_smoothed_cross_entropy` is the cross-entropy against.

    A reference for tests and for the lesson: -Σ_v q_v · log p_v equals the per-position loss above.

    Args:
        target: (B, T) int64 gold ids. vocab_size: V. epsilon: ε_ls. pad_id: the PAD id.

    Returns:
        (B, T, V) float32: q_y = 1 - ε + ε/(V-1), q_v = ε/(V-1) for other v ≠ PAD, q_PAD = 0; all-zero rows where
        the target is PAD.
    """
    q = torch.full((*target.shape, vocab_size), epsilon / (vocab_size - 1), dtype=torch.float32)  # (B, T, V)
    q[..., pad_id] = 0.0
    q.scatter_add_(-1, target.unsqueeze(-1), torch.full((*target.shape, 1), 1.0 - epsilon))
    q[target == pad_id] = 0.0
    return q


def label_cross_entropy(logits: Tensor, labels: Tensor, epsilon: float = 0.0) -> LossSums:
    """Summed cross-entropy of class labels (classification, tagging), every row scored, and its NLL.

    The labels are not tokens: there is no PAD among them, and label smoothing spreads ε over all C labels, the
    gold one included (PyTorch's and HF's ``label_smoothing``): loss = (1 - ε)·(-log p_y) + ε·mean_c(-log p_c).
    Computed by :func:`torch.nn.functional.cross_entropy` in float32.

    Args:
        logits: (N, C) unnormalised scores, any float dtype. labels: (N,) int64 in [0, C).
        epsilon: ε in [0, 1).

    Returns:
        :class:`LossSums`: the summed loss (differentiable), the summed NLL (detached), N.

    Raises:
        ShapeError: ``logits`` is not ``labels``' shape plus a label dim, or a label outside [0, C).
        ConfigError: ``epsilon`` outside [0, 1).
    """
    if logits.dim() != 2 or logits.shape[:1] != labels.shape:
        raise ShapeError(f"logits {tuple(logits.shape)} must be (N, C) for labels {tuple(labels.shape)} (N,)")
    if not 0.0 <= epsilon < 1.0:
        raise ConfigError(f"label smoothing epsilon must be in [0, 1), got {epsilon}")
    C = logits.size(-1)
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= C):
        raise ShapeError(f"labels must lie in [0, {C}); got min {int(labels.min())}, max {int(labels.max())}")
    logits = logits.float()
    loss = F.cross_entropy(logits, labels, label_smoothing=epsilon, reduction="sum")
    nll = F.cross_entropy(logits.detach(), labels, reduction="sum") if epsilon > 0 else loss.detach()
    return LossSums(loss=loss, nll=nll, num_tokens=torch.tensor(labels.numel(), device=labels.device))


def ctc_loss_sum(logits: Tensor, frames: Tensor, labels: Tensor, label_lengths: Tensor, blank: int) -> Tensor:
    """Summed CTC loss (Graves et al. 2006) of a batch: Σ_b -log p(labels_b | frames_b), the probability summed over
    every alignment of the labels to the frames that collapses to them (repeats merged, then blanks removed).

    Computed by :func:`torch.nn.functional.ctc_loss` in float32 (float64 for float64 logits: :func:`loss_dtype`)
    with ``zero_infinity=True``: a pair whose labels
    cannot be aligned to its frames (fewer frames than labels plus a blank between equal neighbours) has
    probability 0, and contributes 0 to the loss and to the gradient instead of an infinity.

    Args:
        logits: (B, F, V) unnormalised scores of each frame, any float dtype; frames past ``frames[b]`` are ignored.
        frames: (B,) int64, the number of real frames of each row.
        labels: (B, L) int64 label ids, right-padded; only the first ``label_lengths[b]`` of row b count.
        label_lengths: (B,) int64, each row's number of labels.
        blank: the id of CTC's blank, never a label.

    Returns:
        () float32 (or float64), the summed loss (differentiable).

    Raises:
        ShapeError: shapes that do not agree, or a label equal to ``blank``.
    """
    B, _, V = logits.shape
    if frames.shape != (B,) or label_lengths.shape != (B,) or labels.dim() != 2 or labels.size(0) != B:
        raise ShapeError(
            f"ctc: logits {tuple(logits.shape)}, frames {tuple(frames.shape)}, labels {tuple(labels.shape)} and "
            f"label_lengths {tuple(label_lengths.shape)} must agree on B"
        )
    counted = torch.arange(labels.size(1), device=labels.device) < label_lengths[:, None]  # (B, L) bool
    if bool((counted & (labels == blank)).any()):
        raise ShapeError(f"ctc: a label equals the blank id {blank}")
    log_probs = F.log_softmax(logits.to(loss_dtype(logits)), dim=-1).transpose(0, 1)  # (F, B, V): frames first
    return F.ctc_loss(log_probs, labels, frames, label_lengths, blank=blank, reduction="sum", zero_infinity=True)
