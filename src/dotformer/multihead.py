"""Multi-head attention (paper §3.2.2): MultiHead(Q, K, V) = Concat(head_1, ..., head_h) · W_o,
where head_i = Attention(Q·W_q_i, K·W_k_i, V·W_v_i).

All heads' projections are done by one (D × D) matrix each, then the result is split into H heads of width Dh.
Shapes follow the legend in :mod:`dotformer.attention`.

Every mode runs through the one :meth:`MultiHeadAttention.forward`; speed enters through two small seams:

* a :class:`KeyValueCache` (decoding step by step, paper §3.2.3): ``cache.update(k, v)`` returns the keys/values of
  every step so far, so each step projects only its new positions (:class:`dotformer.decoding.cache.KVCache`);
* a :class:`Layout` (packed training, beam search's grouped queries): ``unpack`` moves the caller's vectors into the
  (B, L, D) rows attention reads, ``pack`` moves the result back (:class:`dotformer.packing.Packing`).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from torch import Tensor, nn

from dotformer.attention import AttentionOutput, fused_attention, scaled_dot_product_attention
from dotformer.errors import ShapeError
from dotformer.masks import causal_mask, combine_masks


class Layout(Protocol):
    """Where the caller's vectors sit in attention's (B, L, D) rows: packed (N, D) tokens, or G beams per sentence."""

    @property
    def batch_size(self) -> int:
        """B, the rows attention reads."""
        ...

    @property
    def dims(self) -> int:
        """The dimensions of the caller's vectors: 2 for packed (N, D), 3 for (N, T, D)."""
        ...

    def unpack(self, x: Tensor) -> Tensor:
        """The caller's vectors -> (B, L, ...), the rows attention reads (zeros where no vector sits)."""
        ...

    def pack(self, x: Tensor) -> Tensor:
        """(B, L, ...) -> the caller's layout."""
        ...

    def pack_weights(self, weights: Tensor) -> Tensor:
        """(B, H, L, S) attention weights -> the weights to return to the caller."""
        ...


class KeyValueCache(Protocol):
    """The keys and values of earlier decoding steps (paper §3.2.3), e.g. :class:`dotformer.decoding.cache.KVCache`."""

    @property
    def fixed(self) -> bool:
        """It holds keys/values that no longer change (cross-attention after its first step): project none."""
        ...

    @property
    def keys_hidden(self) -> bool:
        """Its keys/values are zero where the padding mask hides them: attention may skip zeroing them."""
        ...

    def update(self, key: Tensor | None, value: Tensor | None, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """Add the new (B, H, T_new, Dh) keys/values (None when ``fixed``); return all (B, H, S, Dh) held so far."""
        ...

    def layout(self, query: Tensor, key_value: Tensor) -> Layout | None:
        """How the query rows read the cached rows: None for one to one, else G query rows per key/value row."""
        ...


def unpack(x: Tensor, layout: Layout | None) -> Tensor:
    """The caller's vectors -> attention's (B, L, ...) rows; ``x`` itself without a layout."""
    return x if layout is None else layout.unpack(x)


def pack(x: Tensor, layout: Layout | None) -> Tensor:
    """Attention's (B, L, ...) rows -> the caller's layout; ``x`` itself without a layout."""
    return x if layout is None else layout.pack(x)


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
        cache: KeyValueCache | None = None,
        packing: Layout | None = None,
        kv_packing: Layout | None = None,
    ) -> MultiHeadOutput:
        """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) · W_o from ``query`` to ``key_value`` (itself for
        self-attention).

        Args:
            query: (B, T, D) the queries' token vectors ((N_T, D) packed with ``packing``).
            key_value: (B, S, D) the vectors keys and values are projected from (the encoder memory for
                cross-attention; (N_S, D) packed with ``kv_packing``); None for self-attention (key_value = query).
            mask: optional bool, broadcastable to (B, H, T, S), True = may attend.
            is_causal: add the causal mask (self-attention in a decoder); with a cache the queries are aligned to the
                last T keys.
            need_weights: return the (B, H, T, S) weights (uses the reference attention instead of the fused kernel).
            cache: decoding step by step: the keys/values of earlier steps, updated in place; a cache may also read
                G query rows against one key/value row (beam search's beams of one sentence).
            packing: the :class:`Layout` of ``query`` (a :class:`dotformer.packing.Packing`: (N_T, D) real tokens);
                with a cache, the cache's :meth:`KeyValueCache.layout` is used instead (decoding is not packed).
            kv_packing: the :class:`Layout` of ``key_value`` (self-attention: pass ``packing`` again).

        Returns:
            :class:`MultiHeadOutput` with ``output`` shaped as ``query`` and optionally ``weights`` (B, H, T, S).

        Raises:
            ShapeError: inputs are not (B, L, D) (or packed (N, D)) with this module's D, or their batch sizes differ.
        """
        source = query if key_value is None else key_value
        packing = packing if cache is None else cache.layout(query, source)  # G beams' queries per memory row
        self.check_inputs(query, source, packing, kv_packing)
        q = self.split_heads(unpack(self.W_q(query), packing))  # (B, H, T, Dh)   Q·W_q for every head at once
        k, v = (None, None) if cache is not None and cache.fixed else self.keys_values(source, kv_packing)
        if cache is not None:  # decoding: the keys/values of every step so far (paper §3.2.3)
            k, v = cache.update(k, v, mask)  # (B, H, S, Dh)
        hidden = kv_packing is not None if cache is None else cache.keys_hidden  # padding keys already zero
        heads, weights = self.attend(q, k, v, mask, is_causal, need_weights, hidden)  # (B, H, T, Dh) head_i
        out = self.W_o(pack(self.merge_heads(heads), packing))  # (B, T, D)  Concat(heads) · W_o
        return MultiHeadOutput(out, weights if packing is None or weights is None else packing.pack_weights(weights))

    def keys_values(self, source: Tensor, packing: Layout | None = None) -> tuple[Tensor, Tensor]:
        """K·W_k and V·W_v for every head: (B, S, D) (or (N_S, D) with ``packing``) -> two (B, H, S, Dh)."""
        k = self.split_heads(unpack(self.W_k(source), packing))  # (B, H, S, Dh)  K·W_k
        v = self.split_heads(unpack(self.W_v(source), packing))  # (B, H, S, Dh)  V·W_v
        return k, v

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
        if is_causal and T == 1:
            is_causal = False  # one query, aligned to the last key, may see every key: nothing to mask
        if is_causal and (need_weights or mask is not None or T != S):
            # The fused kernel's is_causal flag is top-left aligned; spell the mask out when it is not enough.
            mask = combine_masks(mask, causal_mask(T, S, device=q.device))  # (.., T, S)
            is_causal = False
        dropout_p = self.dropout if self.training else 0.0
        if need_weights:
            return scaled_dot_product_attention(q, k, v, mask=mask, dropout_p=dropout_p)
        out = fused_attention(q, k, v, mask=mask, is_causal=is_causal, dropout_p=dropout_p, keys_hidden=keys_hidden)
        return AttentionOutput(out, None)  # (B, H, T, Dh)

    def check_inputs(
        self, query: Tensor, source: Tensor, packing: Layout | None = None, kv_packing: Layout | None = None
    ) -> None:
        """Raise :class:`ShapeError` unless query (B, T, D) and key/value vectors (B, S, D) fit this module: (N, D)
        when packed, and the same B rows once in attention's layout.

        Plain Python on the shapes: no host sync.
        """
        dims = 3 if packing is None else packing.dims
        if query.dim() != dims or query.size(-1) != self.d_model:
            layout = "(B, T, D)" if dims == 3 else "packed (N_T, D)"
            raise ShapeError(f"query must be {layout} with D={self.d_model}, got {tuple(query.shape)}")
        rows = query.size(0) if packing is None else packing.batch_size
        kv_rows = source.size(0) if kv_packing is None else kv_packing.batch_size
        kv_dims = 3 if kv_packing is None else kv_packing.dims
        if source.dim() != kv_dims or source.size(-1) != self.d_model or kv_rows != rows:
            layout = f"(B={rows}, S, D={self.d_model})" if kv_dims == 3 else f"packed (N_S, D={self.d_model})"
            raise ShapeError(f"key_value must be {layout}, got {tuple(source.shape)} from B={kv_rows} sentences")
