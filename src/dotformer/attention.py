"""Scaled dot-product attention: Attention(Q, K, V) = softmax(Q·Kᵀ / √d_k) · V  (paper §3.2.1, Eq. 1).

Shape legend, used in every docstring and shape comment of dotformer:

    B   batch size (sentences)            H   attention heads (num_heads)
    T   target / query length              S   source / key-value length
    D   d_model, the width of a token      Dh  head size d_k = d_v = D / H
    F   d_ff, the feed-forward inner width  V   vocabulary size
    K   beam size (decoding)

Masks are boolean, ``True`` = "this query may attend to this key", broadcastable to (B, H, T, S): the same meaning as
``torch.nn.functional.scaled_dot_product_attention`` and as the lesson's ``masked_fill(mask == 0, -inf)``.

Two implementations live here:

* :func:`scaled_dot_product_attention` is the reference: the lesson's five steps written out (scores, scale, mask,
  softmax, weighted sum). It returns the attention weights too, which the plots and the tests read.
* :func:`fused_attention` calls PyTorch's fused kernel (flash / memory-efficient / math), which never materialises the
  (T × S) weight matrix on the flash and memory-efficient paths. The model uses it whenever no weights are asked for;
  the tests check that it equals the reference.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from dotformer.errors import ShapeError

SDPA_GROUPS = tuple(int(part) for part in torch.__version__.split(".")[:2]) >= (2, 5)  # enable_gqa: torch 2.5+


class AttentionOutput(NamedTuple):
    """Result of attention.

    Attributes:
        output: (..., T, Dv) the weighted sums of the values, same dtype as ``value``.
        weights: (..., T, S) the softmax weights (rows sum to 1 over allowed keys, all-zero rows where no key is
            allowed), or ``None`` when the fused path computed the output without them.
    """

    output: Tensor
    weights: Tensor | None


def check_attention_shapes(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None) -> None:
    """Raise :class:`ShapeError` unless query (..., T, Dk), key (..., S, Dk), value (..., S, Dv) and mask fit together.

    The mask must be boolean and broadcastable TO the scores' shape (..., T, S), where (...) is the broadcast of
    query's and key's leading (batch, head) dims: it may not widen the scores. A mask with fewer dims than the scores
    but more than (T, S) must have size 1 in its leading dims: a per-sentence (B, T, S) or (B, 1, S) mask would
    otherwise be read as one mask per head (B against H); give it its head dim, (B, 1, T, S) or (B, 1, 1, S).
    With a mask, leading dims that do not broadcast are a ShapeError too (without one, the attention kernel reports
    them).
    """
    if query.dim() < 2 or key.dim() < 2 or value.dim() < 2:
        raise ShapeError(
            f"attention needs query, key, value with at least 2 dims (..., length, features); got "
            f"query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
        )
    if query.shape[-1] != key.shape[-1]:
        raise ShapeError(f"query and key must share d_k (last dim): query {tuple(query.shape)}, key {tuple(key.shape)}")
    if key.shape[-2] != value.shape[-2]:
        raise ShapeError(
            f"key and value must have the same length S (dim -2): key {tuple(key.shape)}, value {tuple(value.shape)}"
        )
    if mask is not None:
        if mask.dtype != torch.bool:
            raise ShapeError(f"mask must be boolean (True = may attend), got dtype {mask.dtype}")
        batch = broadcast_shape(tuple(query.shape[:-2]), tuple(key.shape[:-2]))
        if batch is None:
            raise ShapeError(f"query {tuple(query.shape)} and key {tuple(key.shape)} have batch dims that differ")
        scores_shape = (*batch, query.shape[-2], key.shape[-2])
        if 2 < mask.dim() < len(scores_shape) and any(size != 1 for size in mask.shape[:-2]):
            raise ShapeError(
                f"mask {tuple(mask.shape)} has {mask.dim()} dims for scores {scores_shape} (B, H, T, S): its first "
                f"dim would be read as the heads; give a per-sentence mask its head dim: (B, 1, T, S), or "
                f"(B, 1, 1, S) for padding"
            )
        if broadcast_shape(tuple(mask.shape), scores_shape) != scores_shape:
            raise ShapeError(
                f"mask {tuple(mask.shape)} does not broadcast to the scores' shape {scores_shape} (B, H, T, S): "
                f"expected e.g. (B, 1, T, S) per sentence or (B, 1, 1, S) for padding"
            )


def broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """The shape two shapes broadcast to (NumPy's rules), or None if they do not.

    (Plain Python: ``torch.broadcast_shapes`` costs tens of µs, half a decoding step's attention call.)
    """
    if len(a) < len(b):
        a, b = b, a
    b = (1,) * (len(a) - len(b)) + b
    out = []
    for x, y in zip(a, b, strict=True):
        if x != y and x != 1 and y != 1:
            return None
        out.append(y if x == 1 else x)
    return tuple(out)


def hide_masked_keys(key: Tensor, value: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
    """Zero the keys and values that no query may attend to (the padding), so that what they hold, NaN and inf
    included, cannot reach an output: a masked score is replaced, but 0 · NaN in the weighted sum is still NaN.

    Args:
        key: (..., S, Dk), value: (..., S, Dv). mask: bool broadcastable to (..., T, S), True = may attend, or None.

    Returns:
        key and value, with zeros at the positions whose mask column is False for every query (unchanged without a
        mask). A key masked for some queries only (causal masks) is kept: the queries that may see it need it.
    """
    if mask is None:
        return key, value
    seen = (mask.any(dim=-2) if mask.dim() >= 2 else mask).unsqueeze(-1)  # (..., S, 1) True: some query may see it
    zero = key.new_zeros(())
    return torch.where(seen, key, zero), torch.where(seen, value, zero)  # (..., S, Dk), (..., S, Dv)


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    dropout_p: float = 0.0,
    scale: float | None = None,
    softcap: float | None = None,
) -> AttentionOutput:
    """The reference attention of the lesson, written out step by step (paper §3.2.1, Eq. 1).

    Args:
        query: (..., T, Dk) float tensor Q.
        key: (..., S, Dk) float tensor K.
        value: (..., S, Dv) float tensor V.
        mask: optional bool tensor broadcastable to (..., T, S); True = may attend.
        dropout_p: dropout probability applied to the weights (0 at inference).
        scale: scores = Q·Kᵀ · scale instead of Q·Kᵀ / √d_k (Gemma's query_pre_attn_scalar^-1/2).
        softcap: c: scores = c · tanh(scores / c) before the mask, bounded to (-c, c) (Gemma 2).

    Returns:
        :class:`AttentionOutput` with ``output`` (..., T, Dv) and ``weights`` (..., T, S), in the input dtype. Scores,
        softmax and the weighted sum are computed in float32 at least (bfloat16/float16 inputs are upcast), as the
        fused kernels accumulate. A query row whose mask allows no key gets all-zero weights and a zero output (never
        NaN), with finite gradients.

    Raises:
        ShapeError: the shapes do not fit together (the message names them).

    The lesson fills masked scores with -inf; a row with every key masked would then be softmax(-inf, ..., -inf) = NaN.
    We fill with the dtype's most negative finite number instead, which gives the same weights for every row that
    has an allowed key, and zero the weights of rows that have none. Keys no query may see (padding) are zeroed
    first (:func:`hide_masked_keys`), so that a NaN or inf they hold cannot reach an output through 0 · NaN.
    """
    check_attention_shapes(query, key, value, mask)
    d_k, dtype = query.size(-1), value.dtype
    key, value = hide_masked_keys(key, value, mask)
    wide = torch.promote_types(dtype, torch.float32)  # half precision loses the small weights' digits: use float32
    query, key, value = query.to(wide), key.to(wide), value.to(wide)

    # Steps 1-2: every query against every key, scaled by 1/sqrt(d_k) to keep the variance near 1. Scaling Q before
    # the product gives the same scores and keeps them in range in float16, where Q·Kᵀ alone may overflow.
    if scale is None:
        scores = torch.matmul(query / math.sqrt(d_k), key.transpose(-2, -1))  # (..., T, S)
    else:
        scores = torch.matmul(query, key.transpose(-2, -1)) * scale  # (..., T, S)
    if softcap is not None:  # scores = c · tanh(scores / c): no score grows beyond ±c
        scores = torch.tanh(scores / softcap) * softcap  # (..., T, S)

    # Step 3: masked positions get a score so low that softmax gives them weight 0.
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)  # (..., T, S)

    # Step 4: softmax over the keys turns each row into a probability distribution.
    weights = torch.softmax(scores, dim=-1)  # (..., T, S)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)  # rows with no allowed key -> 0
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)

    # Step 5: each output is the weighted sum of the values.
    output = torch.matmul(weights, value)  # (..., T, Dv)
    return AttentionOutput(output.to(dtype), weights.to(dtype))


def fused_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    keys_hidden: bool = False,
    scale: float | None = None,
) -> Tensor:
    """The same attention through ``torch.nn.functional.scaled_dot_product_attention`` (flash / memory-efficient).

    Args:
        query: (B, H, T, Dh), key: (B, H, S, Dh), value: (B, H, S, Dh); or key, value (B, H_kv, S, Dh) with H_kv
            dividing H: grouped-query attention, query head h reading key/value head h // (H / H_kv).
        mask: optional bool, broadcastable to (B, H, T, S), True = may attend. Leave it ``None`` and set
            ``is_causal`` for a plain causal mask (key j allowed for query i iff j <= i): the flash kernels then run.
        is_causal: apply the causal mask (top-left aligned, as :func:`dotformer.masks.causal_mask` with T == S).
        dropout_p: dropout on the weights (pass 0 at inference).
        keys_hidden: the caller already zeroed the keys/values no query may see (:func:`hide_masked_keys`), e.g. a
            decoding cache that did it once for every step, or packed keys whose padding is zeros: skip it.
        scale: scores = Q·Kᵀ · scale; None: 1/√Dh.

    Returns:
        (B, H, T, Dh) output, equal to :func:`scaled_dot_product_attention`'s (tested), zeros on fully masked rows.

    Raises:
        ShapeError: the shapes do not fit, or both ``mask`` and ``is_causal`` are given.
    """
    groups = key_groups(query, key)
    # grouped heads: check the shapes as if each key/value head were repeated (a shape on the meta device, no data)
    check_attention_shapes(query, key if groups == 1 else key.to("meta").repeat_interleave(groups, -3), value, mask)
    if is_causal and mask is not None:
        raise ShapeError("pass an explicit mask or is_causal=True, not both (combine them with masks.causal_mask)")
    if not keys_hidden:
        key, value = hide_masked_keys(key, value, mask)
    if mask is not None and mask.dim() < 2:
        mask = mask.unsqueeze(0)  # (1, S): the kernel wants a (T, S)-shaped mask
    options = {} if scale is None else {"scale": scale}
    if groups > 1 and SDPA_GROUPS:
        options["enable_gqa"] = True  # the kernel reads each key/value head for its group of query heads
    elif groups > 1:
        key, value = repeat_heads(key, groups), repeat_heads(value, groups)  # (B, H, S, Dh)
    return F.scaled_dot_product_attention(
        query, key, value, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal, **options
    )


def key_groups(query: Tensor, key: Tensor) -> int:
    """G = H / H_kv, the query heads per key/value head of (B, H, T, Dh) queries and (B, H_kv, S, Dh) keys; 1 when
    the heads match (or the tensors have no head dim)."""
    if query.dim() < 3 or key.dim() != query.dim():
        return 1
    heads, kv_heads = query.size(-3), key.size(-3)
    if kv_heads == heads or kv_heads == 0 or heads % kv_heads:
        return 1  # the same heads, or shapes that check_attention_shapes reports
    return heads // kv_heads


def repeat_heads(x: Tensor, groups: int) -> Tensor:
    """(B, H_kv, S, Dh) -> (B, H_kv·G, S, Dh): each key/value head repeated for the G query heads of its group
    (grouped-query attention, Ainslie et al. 2023; HF's ``repeat_kv``)."""
    return x if groups == 1 else x.repeat_interleave(groups, dim=-3)  # (B, H, S, Dh)
