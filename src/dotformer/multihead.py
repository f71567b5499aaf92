"""Multi-head attention (paper §3.2.2): MultiHead(Q, K, V) = Concat(head_1, ..., head_h) · W_o,
where head_i = Attention(Q·W_q_i, K·W_k_i, V·W_v_i).

All heads' projections are done by one (D × D) matrix each, then the result is split into H heads of width Dh.
Shapes follow the legend in :mod:`dotformer.attention`.

Every mode runs through the one :meth:`MultiHeadAttention.forward`; speed enters through two small seams:

* a :class:`KeyValueCache` (decoding step by step, paper §3.2.3): ``cache.update(k, v)`` returns the keys/values of
  every step so far, so each step projects only its new positions (:class:`dotformer.decoding.cache.KVCache`);
* a :class:`Layout` (packed training, beam search's grouped queries): ``unpack`` moves the caller's vectors into the
  (B, L, D) rows attention reads, ``pack`` moves the result back (:class:`dotformer.packing.Packing`).

The modern block's changes enter through seams of the same forward, each off by default:

* rotary positions (RoPE, :class:`dotformer.positional.Rotary`) turn each head's q and k by their positions, in the
  (B, H, L, Dh) rows (after ``unpack``: positions 0 .. L - 1 of every row, packed or not), after the positions a
  cache already holds;
* grouped-query attention (Ainslie et al. 2023): W_k and W_v project H_kv < H heads, each read by H / H_kv query
  heads; the cache holds the H_kv heads;
* QK-norm (an RMSNorm over Dh of each head's q and k, before RoPE), a score scale other than 1/√Dh, a soft cap of the
  scores, and a sliding window on the causal mask.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from torch import Tensor, nn

from dotformer.attention import AttentionOutput, fused_attention, repeat_heads, scaled_dot_product_attention
from dotformer.errors import ShapeError
from dotformer.masks import causal_mask, combine_masks
from dotformer.positional import Rotary


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

    @property
    def length(self) -> int:
        """The positions it holds: the position of the next step's first key (rotary positions start there)."""
        ...

    def update(self, key: Tensor | None, value: Tensor | None, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """Add the new (B, H_kv, T_new, Dh) keys/values (None when ``fixed``); return all (B, H_kv, S, Dh) held."""
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
        num_heads: H; without ``head_size``, D must be divisible by H and each head has Dh = D / H.
        dropout: dropout on the attention weights during training.
        bias: whether the projections have biases (W_o's; W_q's, W_k's, W_v's too unless ``qkv_bias`` says).
        num_kv_heads: H_kv, the key/value heads (grouped-query attention; 1: multi-query); None: H. H_kv divides H.
        head_size: Dh when it is not D / H: W_q (H·Dh, D), W_k and W_v (H_kv·Dh, D), W_o (D, H·Dh).
        qkv_bias: biases on W_q, W_k, W_v; None: as ``bias``.
        q_norm, k_norm: a norm over Dh applied to each head's q and k (QK-norm, e.g. an RMSNorm), or None.
        rotary: turn q and k by their positions (RoPE, self-attention only), or None.
        scale: scores = q·kᵀ · scale; None: 1/√Dh.
        softcap: c: scores = c · tanh(scores / c) (the reference computation: the fused kernel has no soft cap).
        sliding_window: W: with ``is_causal``, query i sees only keys i - W < j <= i.

    Raises:
        ShapeError: the sizes do not fit (D not divisible by H without ``head_size``, H not divisible by H_kv).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        *,
        num_kv_heads: int | None = None,
        head_size: int | None = None,
        qkv_bias: bool | None = None,
        q_norm: nn.Module | None = None,
        k_norm: nn.Module | None = None,
        rotary: Rotary | None = None,
        scale: float | None = None,
        softcap: float | None = None,
        sliding_window: int | None = None,
    ) -> None:
        super().__init__()
        if d_model <= 0 or num_heads <= 0 or (head_size is None and d_model % num_heads != 0):
            raise ShapeError(f"d_model={d_model} must be a positive multiple of num_heads={num_heads}")
        kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if kv_heads <= 0 or num_heads % kv_heads or (head_size is not None and head_size <= 0):
            raise ShapeError(f"num_heads={num_heads} must be a multiple of num_kv_heads={kv_heads}; head_size > 0")
        self.d_model = d_model
        self.num_heads = num_heads
        self.num_kv_heads = kv_heads
        self.head_dim = d_model // num_heads if head_size is None else head_size
        self.dropout = dropout
        self.scale = scale
        self.softcap = softcap
        self.sliding_window = sliding_window
        qkv_bias = bias if qkv_bias is None else qkv_bias
        self.W_q = nn.Linear(d_model, num_heads * self.head_dim, bias=qkv_bias)
        self.W_k = nn.Linear(d_model, kv_heads * self.head_dim, bias=qkv_bias)
        self.W_v = nn.Linear(d_model, kv_heads * self.head_dim, bias=qkv_bias)
        self.W_o = nn.Linear(num_heads * self.head_dim, d_model, bias=bias)
        self.q_norm = q_norm
        self.k_norm = k_norm
        self.rotary = rotary

    def split_heads(self, x: Tensor) -> Tensor:
        """(B, L, H·Dh) -> (B, H, L, Dh): each head sees its own Dh-wide slice of the projection (H_kv heads for
        keys and values)."""
        B, L, width = x.shape
        return x.view(B, L, width // self.head_dim, self.head_dim).transpose(1, 2)  # (B, H, L, Dh)

    def merge_heads(self, x: Tensor) -> Tensor:
        """(B, H, L, Dh) -> (B, L, H·Dh): concatenate the heads side by side."""
        B, _, L, _ = x.shape
        return x.transpose(1, 2).reshape(B, L, self.num_heads * self.head_dim)  # (B, L, H·Dh)

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
        q = q if self.q_norm is None else self.q_norm(q)  # QK-norm: each head's query normalised over Dh
        k, v = (None, None) if cache is not None and cache.fixed else self.keys_values(source, kv_packing)
        q, k = self.rotate(q, k, 0 if cache is None else cache.length)  # RoPE: positions after the cached ones
        if cache is not None:  # decoding: the keys/values of every step so far (paper §3.2.3)
            k, v = cache.update(k, v, mask)  # (B, H_kv, S, Dh)
        hidden = kv_packing is not None if cache is None else cache.keys_hidden  # padding keys already zero
        heads, weights = self.attend(q, k, v, mask, is_causal, need_weights, hidden)  # (B, H, T, Dh) head_i
        out = self.W_o(pack(self.merge_heads(heads), packing))  # (B, T, D)  Concat(heads) · W_o
        return MultiHeadOutput(out, weights if packing is None or weights is None else packing.pack_weights(weights))

    def keys_values(self, source: Tensor, packing: Layout | None = None) -> tuple[Tensor, Tensor]:
        """K·W_k and V·W_v for every key/value head (keys normalised with QK-norm): (B, S, D) (or (N_S, D) with
        ``packing``) -> two (B, H_kv, S, Dh)."""
        k = self.split_heads(unpack(self.W_k(source), packing))  # (B, H_kv, S, Dh)  K·W_k
        v = self.split_heads(unpack(self.W_v(source), packing))  # (B, H_kv, S, Dh)  V·W_v
        return (k if self.k_norm is None else self.k_norm(k)), v

    def rotate(self, q: Tensor, k: Tensor | None, offset: int) -> tuple[Tensor, Tensor | None]:
        """RoPE (:class:`~dotformer.positional.Rotary`) of the queries (B, H, T, Dh) and the new keys
        (B, H_kv, T, Dh), at positions ``offset .. offset + T - 1``; both unchanged without ``rotary``."""
        if self.rotary is None or k is None:
            return q, k
        return self.rotary(q, offset), self.rotary(k, offset)

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
        """Attention(Q, K, V) in every head at once: the reference with weights (or a soft cap), else the fused kernel
        (tested equal).

        Args:
            q: (B, H, T, Dh). k, v: (B, H_kv, S, Dh), each key/value head read by H / H_kv query heads.
            mask: bool broadcastable to (B, H, T, S), True = may attend.
            is_causal: add the causal mask, aligned to the last T keys (a cache holds S - T earlier positions),
                within the module's sliding window.
            need_weights: return the (B, H, T, S) weights.
            keys_hidden: the fused kernel may skip zeroing the masked keys/values (see
                :func:`~dotformer.attention.fused_attention`); the reference always does it.

        Returns:
            :class:`~dotformer.attention.AttentionOutput`: (B, H, T, Dh) output, weights or None.
        """
        T, S = q.size(-2), k.size(-2)
        window = self.sliding_window if self.sliding_window is not None and self.sliding_window < S else None
        if is_causal and T == 1 and window is None:
            is_causal = False  # one query, aligned to the last key, may see every key: nothing to mask
        reference = need_weights or self.softcap is not None  # the fused kernel has no soft cap
        if is_causal and (reference or mask is not None or T != S or window is not None):
            # The fused kernel's is_causal flag is top-left aligned; spell the mask out when it is not enough.
            mask = combine_masks(mask, causal_mask(T, S, device=q.device, sliding_window=window))  # (.., T, S)
            is_causal = False
        dropout_p = self.dropout if self.training else 0.0
        if reference:
            groups = self.num_heads // self.num_kv_heads
            k, v = repeat_heads(k, groups), repeat_heads(v, groups)  # (B, H, S, Dh)
            out, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p, self.scale, self.softcap)
            return AttentionOutput(out, weights if need_weights else None)
        out = fused_attention(
            q, k, v, mask=mask, is_causal=is_causal, dropout_p=dropout_p, keys_hidden=keys_hidden, scale=self.scale
        )
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
