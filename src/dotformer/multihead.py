"""Multi-head attention (paper §3.2.2): MultiHead(Q, K, V) = Concat(head_1, ..., head_h) · W_o,
where head_i = Attention(Q·W_q_i, K·W_k_i, V·W_v_i).

All heads' projections are done by one (D × D) matrix each, then the result is split into H heads of width Dh.
Shapes follow the legend in :mod:`dotformer.attention`.

Around this module, not inside it: decoding step by step hands the call to its key/value cache
(:mod:`dotformer.decoding.cache`, which also holds beam search's grouped cross-attention queries), and packed training
runs the same projections and :meth:`MultiHeadAttention.attend` on the real tokens only (:mod:`dotformer.packing`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from torch import Tensor, nn

from dotformer.attention import AttentionOutput, fused_attention, scaled_dot_product_attention
from dotformer.errors import ShapeError
from dotformer.masks import causal_mask, combine_masks

if TYPE_CHECKING:
    from dotformer.decoding.cache import KVCache


def __getattr__(name: str) -> Any:
    """``KVCache`` lives in :mod:`dotformer.decoding.cache` now; ``dotformer.multihead.KVCache`` stays (PEP 562)."""
    if name == "KVCache":
        from dotformer.decoding.cache import KVCache

        return KVCache
    raise AttributeError(f"module 'dotformer.multihead' has no attribute {name!r}")


class MultiHeadOutput(NamedTuple):
    """Result of :class:`MultiHeadAttention`.

    Attributes:
        output: (B, T, D) the projected concatenation of the heads.
        weights: (B, H, T, S) per-head attention weights when asked for (``need_weights=True``), else None.
    """

    output: Tensor
    weights: Tensor | None


class MultiHeadAttention(nn.Module):
    """Multi-head attention with learned projections W_q, W_k, W_v, W_o (paper §3.2.2).

    Args:
        d_model: D, width of the inputs and output.
        num_heads: H; D must be divisible by H, each head has Dh = D / H.
        dropout: dropout on the attention weights during training.
        bias: whether the four projections have biases.

    Raises:
        ShapeError: D is not divisible by H.
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        if d_model <= 0 or num_heads <= 0 or d_model % num_heads != 0:
            raise ShapeError(f"d_model={d_model} must be a positive multiple of num_heads={num_heads}")
        self.d_model = d_model
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.dropout = dropout
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)

    def split_heads(self, x: Tensor) -> Tensor:
        """(B, L, D) -> (B, H, L, Dh): each head sees its own Dh-wide slice of the projection."""
        B, L, _ = x.shape
        return x.view(B, L, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, L, Dh)

    def merge_heads(self, x: Tensor) -> Tensor:
        """(B, H, L, Dh) -> (B, L, D): concatenate the heads side by side."""
        B, _, L, _ = x.shape
        return x.transpose(1, 2).reshape(B, L, self.d_model)  # (B, L, D)

    def forward(
        self,
        query: Tensor,
        key_value: Tensor | None = None,
        mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        cache: KVCache | None = None,
        static_kv: bool = False,
    ) -> MultiHeadOutput:
        """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) · W_o from ``query`` to ``key_value`` (itself for
        self-attention).

        Args:
            query: (B, T, D) the queries' token vectors.
            key_value: (B, S, D) the vectors keys and values are projected from (the encoder memory for
                cross-attention); None for self-attention (key_value = query).
            mask: optional bool, broadcastable to (B, H, T, S), True = may attend.
            is_causal: add the causal mask (self-attention in a decoder); with a cache the queries are aligned to the
                last T keys.
            need_weights: return the (B, H, T, S) weights (uses the reference attention instead of the fused kernel).
            cache: decoding step by step: keys/values of earlier steps, updated in place
                (:class:`dotformer.decoding.cache.KVCache`, which runs this formula on them; with ``static_kv`` and
                N = B·G query rows over B memory rows it takes beam search's grouped queries).
            static_kv: with a cache, the keys/values do not change between steps (cross-attention): project
                ``key_value`` on the first call only and reuse it afterwards.

        Returns:
            :class:`MultiHeadOutput` with ``output`` (B, T, D) and optionally ``weights`` (B, H, T, S).

        Raises:
            ShapeError: inputs are not (B, L, D) with this module's D, or their batch sizes differ.
        """
        source = query if key_value is None else key_value
        if cache is not None:  # decoding: the cache projects only the new positions (dotformer.decoding.cache)
            return cache.attend(self, query, source, mask, is_causal, need_weights, static_kv)
        self.check_inputs(query, source)
        q = self.split_heads(self.W_q(query))  # (B, H, T, Dh)   Q·W_q for every head at once
        k = self.split_heads(self.W_k(source))  # (B, H, S, Dh)  K·W_k
        v = self.split_heads(self.W_v(source))  # (B, H, S, Dh)  V·W_v
        heads, weights = self.attend(q, k, v, mask, is_causal, need_weights)  # (B, H, T, Dh) head_i = Attention(..)
        return MultiHeadOutput(self.W_o(self.merge_heads(heads)), weights)  # (B, T, D) Concat(heads) · W_o

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        keys_hidden: bool = False,
    ) -> AttentionOutput:
        """Attention(Q, K, V) in every head at once: the reference with weights, else the fused kernel (tested equal).

        Args:
            q: (B, H, T, Dh). k, v: (B, H, S, Dh). mask: bool broadcastable to (B, H, T, S), True = may attend.
            is_causal: add the causal mask, aligned to the last T keys (a cache holds S - T earlier positions).
            need_weights: return the (B, H, T, S) weights.
            keys_hidden: the fused kernel may skip zeroing the masked keys/values (see
                :func:`~dotformer.attention.fused_attention`); the reference always does it.

        Returns:
            :class:`~dotformer.attention.AttentionOutput`: (B, H, T, Dh) output, weights or None.
        """
        T, S = q.size(-2), k.size(-2)
        if is_causal and (need_weights or mask is not None or T != S):
            # The fused kernel's is_causal flag is top-left aligned; spell the mask out when it is not enough.
            mask = combine_masks(mask, causal_mask(T, S, device=q.device))  # (.., T, S)
            is_causal = False
        dropout_p = self.dropout if self.training else 0.0
        if need_weights:
            return scaled_dot_product_attention(q, k, v, mask=mask, dropout_p=dropout_p)
        out = fused_attention(q, k, v, mask=mask, is_causal=is_causal, dropout_p=dropout_p, keys_hidden=keys_hidden)
        return AttentionOutput(out, None)  # (B, H, T, Dh)

    def check_inputs(self, query: Tensor, source: Tensor) -> None:
        """Raise :class:`ShapeError` unless query (B, T, D) and key/value vectors (B, S, D) fit this module.

        Plain Python on the shapes: no host sync.
        """
        if query.dim() != 3 or query.size(-1) != self.d_model:
            raise ShapeError(f"query must be (B, T, D) with D={self.d_model}, got {tuple(query.shape)}")
        if source.dim() != 3 or source.size(-1) != self.d_model or source.size(0) != query.size(0):
            raise ShapeError(
                f"key_value must be (B={query.size(0)}, S, D={self.d_model}), got {tuple(source.shape)} (for "
                f"G query rows per key/value row, beam search's layout, see "
                f"dotformer.decoding.cache.grouped_cross_attention)"
            )
