"""Multi-head attention (paper §3.2.2): MultiHead(Q, K, V) = Concat(head_1, ..., head_h) · W_o,
where head_i = Attention(Q·W_q_i, K·W_k_i, V·W_v_i).

All heads' projections are done by one (D × D) matrix each, then the result is split into H heads of width Dh.
Shapes follow the legend in :mod:`dotformer.attention`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor, nn

from dotformer.attention import fused_attention, scaled_dot_product_attention
from dotformer.errors import ConfigError, ShapeError
from dotformer.masks import causal_mask, combine_masks
from dotformer.packing import Packing, pack, unpack


@dataclass
class KVCache:
    """Keys and values already projected, kept between decoding steps (one per attention module and sentence batch).

    Self-attention appends the new step's keys/values; cross-attention computes the memory's once and reuses them.

    Attributes:
        key: (B, H, S_cached, Dh) or None before the first step.
        value: (B, H, S_cached, Dh) or None before the first step.
        pending: LongTensor (B',) or None: a deferred :meth:`reorder` (row i will be row ``pending[i]`` of ``key``
            and ``value``), carried out by the next :meth:`append` in the same copy that adds the new positions.
    """

    key: Tensor | None = None
    value: Tensor | None = None
    pending: Tensor | None = None

    @property
    def length(self) -> int:
        """S_cached, the number of positions held."""
        return 0 if self.key is None else self.key.size(-2)

    @property
    def batch_size(self) -> int:
        """B, the rows held (after a pending reorder); 0 before the first step."""
        if self.pending is not None:
            return self.pending.numel()
        return 0 if self.key is None else self.key.size(0)

    def append(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Add (B, H, T_new, Dh) keys/values after the cached ones; return the full (B, H, S_cached + T_new, Dh).

        A pending reorder is applied in the same pass: each cached row is copied once, straight to its new place.

        Raises:
            ShapeError: the new keys do not match the cached ones in batch size, heads or head size.
        """
        held = None if self.key is None else (self.batch_size, *self.key.shape[1:])  # (B, H, S, Dh)
        if held is not None and (key.shape[:-2] != held[:-2] or key.size(-1) != held[-1]):
            raise ShapeError(
                f"the cache holds keys of shape {held} (B, H, S, Dh); new keys {tuple(key.shape)} "
                f"do not fit (a different batch size? use cache.reorder(index) to follow beams)"
            )
        if self.key is None or self.value is None:
            self.key, self.value = key, value
            return self.key, self.value
        rows = self.pending
        self.key = self._extend(self.key, key, rows)  # (B, H, S_cached + T_new, Dh)
        self.value = self._extend(self.value, value, rows)  # (B, H, S_cached + T_new, Dh)
        self.pending = None
        return self.key, self.value

    @staticmethod
    def _extend(cached: Tensor, new: Tensor, rows: Tensor | None) -> Tensor:
        """cat([cached[rows], new], dim=-2) written into one new tensor, without the intermediate copy."""
        if rows is None:
            return torch.cat([cached, new], dim=-2)
        if torch.is_grad_enabled() and (cached.requires_grad or new.requires_grad):  # out= has no autograd
            return torch.cat([cached.index_select(0, rows), new], dim=-2)
        S = cached.size(-2)
        out = cached.new_empty(new.size(0), cached.size(1), S + new.size(-2), cached.size(-1))
        torch.index_select(cached, 0, rows, out=out[:, :, :S])
        out[:, :, S:] = new
        return out

    def reorder(self, index: Tensor, defer: bool = False) -> None:
        """Keep rows ``index`` (LongTensor (B',)) of the batch: beam search uses it to follow surviving beams.

        With ``defer``, the copy waits for the next :meth:`append` (self-attention during beam search, which appends
        at every step), which then copies each row once instead of twice; :attr:`key`/:attr:`value` keep the old
        order until then. Without it (or for a cache that is never appended to again) the rows move now.
        """
        if self.key is None or self.value is None:
            return
        self.pending = index if self.pending is None else self.pending.index_select(0, index)  # rows of key/value
        if not defer:
            self.settle()

    def settle(self) -> None:
        """Carry out a pending (deferred) reorder now."""
        if self.pending is not None and self.key is not None and self.value is not None:
            self.key = self.key.index_select(0, self.pending)
            self.value = self.value.index_select(0, self.pending)
        self.pending = None


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
        packing: Packing | None = None,
        kv_packing: Packing | None = None,
    ) -> MultiHeadOutput:
        """Attend from ``query`` to ``key_value`` (itself for self-attention).

        Args:
            query: (B, T, D) the queries' token vectors, or (N_T, D) packed with ``packing``.
            key_value: (B, S, D) the vectors keys and values are projected from (the encoder memory for
                cross-attention), or (N_S, D) packed with ``kv_packing``; None for self-attention (key_value = query).
                Cross-attention also takes queries of N = B·G rows: rows g·G … g·G + G - 1 all attend to row g
                (beam search's G beams of one sentence share its memory), computed as G·T queries of row g.
            mask: optional bool, broadcastable to (B, H, T, S), True = may attend (with grouped queries:
                broadcastable to (B, H, G·T, S), i.e. per key/value row, such as the source padding mask).
            is_causal: add the causal mask (for self-attention in a decoder); with a cache the queries are
                aligned to the last T keys.
            need_weights: return the (B, H, T, S) weights (uses the reference attention instead of the fused kernel).
            cache: keys/values of earlier decoding steps, updated in place.
            static_kv: with a cache, the keys/values do not change between steps (cross-attention): project
                ``key_value`` on the first call only and reuse it afterwards.
            packing: the queries are packed (:mod:`dotformer.packing`): the projections run on the N_T real tokens,
                attention on the (B, T) layout, and the output is packed again. Training only (no cache).
            kv_packing: the packing of ``key_value`` (default: ``packing``, for self-attention). The masks must hide
                the padding keys (the padding mask and the causal mask over right-padded targets do).

        Returns:
            :class:`MultiHeadOutput` with ``output`` (B, T, D) (or (N_T, D) when packed) and optionally ``weights``
            (B, H, T, S); with grouped cross-attention queries, (N, T, D) and (N, H, T, S), one row per query row.

        Raises:
            ShapeError: inputs are not (B, L, D) (or packed (N, D)) with this module's D, or batch sizes differ
                (other than grouped cross-attention queries), or grouped queries with ``is_causal`` or with a mask
                of one row per query row.
            ConfigError: packed inputs with a cache.
        """
        source = query if key_value is None else key_value
        kv_packing = packing if key_value is None else kv_packing
        groups = self.check_inputs(query, source, packing, kv_packing, cache, static_kv)
        if groups > 1 and is_causal:
            raise ShapeError(f"causal attention needs one key/value row per query row, got {groups} query rows each")
        if groups > 1 and mask is not None and mask.dim() == 4 and mask.size(0) not in (1, query.size(0) // groups):
            raise ShapeError(
                f"with {groups} query rows per key/value row the mask must have one row per key/value row "
                f"(B={query.size(0) // groups}) or 1, got mask {tuple(mask.shape)} for query {tuple(query.shape)}"
            )
        if groups > 1:
            # G consecutive query rows share one key/value row (the K beams of a sentence): attend with them as the
            # G·T queries of that row, so its keys/values are projected and read once instead of G times.
            N, T = query.size(0), query.size(1)
            query = query.reshape(N // groups, groups * T, self.d_model)  # (B, G·T, D)
            out = self(query, key_value, mask, need_weights=need_weights, cache=cache, static_kv=static_kv)
            weights = out.weights
            if weights is not None:  # (B, H, G·T, S) -> (B·G, H, T, S)
                weights = weights.unflatten(2, (groups, T)).transpose(1, 2).flatten(0, 1)
            return MultiHeadOutput(out.output.reshape(N, T, self.d_model), weights)  # (N, T, D)

        q = self.split_heads(unpack(self.W_q(query), packing))  # (B, H, T, Dh)
        if cache is not None and static_kv and cache.key is not None and cache.value is not None:
            cache.settle()
            k, v = cache.key, cache.value  # (B, H, S, Dh), computed on the first step
            if k.size(0) != q.size(0):
                raise ShapeError(f"the cache holds keys for batch size {k.size(0)}, the query has {q.size(0)}")
        else:
            k = self.split_heads(unpack(self.W_k(source), kv_packing))  # (B, H, S, Dh)
            v = self.split_heads(unpack(self.W_v(source), kv_packing))  # (B, H, S, Dh)
            if cache is not None:
                if static_kv:  # read at every step: a contiguous copy reads faster than the transposed view
                    k, v = k.contiguous(), v.contiguous()
                k, v = cache.append(k, v)  # (B, H, S_cached + S, Dh)

        T, S = q.size(-2), k.size(-2)
        if is_causal and T == 1:
            is_causal = False  # one query, aligned to the last key, may see every key: nothing to mask
        if is_causal and (need_weights or mask is not None or T != S):
            # The fused kernel's is_causal flag is top-left aligned; spell the mask out when it is not enough.
            mask = combine_masks(mask, causal_mask(T, S, device=q.device))  # (.., T, S)
            is_causal = False
        dropout_p = self.dropout if self.training else 0.0

        if need_weights:
            attended, weights = scaled_dot_product_attention(q, k, v, mask=mask, dropout_p=dropout_p)
        else:
            attended = fused_attention(q, k, v, mask=mask, is_causal=is_causal, dropout_p=dropout_p)
            weights = None
        return MultiHeadOutput(self.W_o(pack(self.merge_heads(attended), packing)), weights)  # (B, T, D) or (N_T, D)

    def check_inputs(
        self,
        query: Tensor,
        source: Tensor,
        packing: Packing | None,
        kv_packing: Packing | None,
        cache: KVCache | None,
        static_kv: bool = False,
    ) -> int:
        """Raise :class:`ShapeError` unless query and key/value vectors are (B, L, D), or (N, D) when packed.

        Returns:
            G, the number of consecutive query rows per key/value row: 1, or N / B for cross-attention from
            (N = B·G, T, D) queries to (B, S, D) keys/values (or to a static cache of B rows).
        """
        if (packing is not None or kv_packing is not None) and cache is not None:
            raise ConfigError("packed inputs are for training: decode with a cache on the (B, T, D) layout")
        q_shape = "(B, T, D)" if packing is None else f"packed (N={packing.num_tokens}, D)"
        if query.dim() != (3 if packing is None else 2) or query.size(-1) != self.d_model:
            raise ShapeError(f"query must be {q_shape} with D={self.d_model}, got {tuple(query.shape)}")
        if packing is not None and query.size(0) != packing.num_tokens:
            raise ShapeError(f"query must be {q_shape}, got {tuple(query.shape)}")
        batch = query.size(0) if packing is None else packing.batch_size
        if kv_packing is None:
            kv_batch = source.size(0)
            if cache is not None and static_kv and cache.key is not None:
                kv_batch = cache.batch_size
            cross = source is not query and packing is None
            if cross and 0 < kv_batch < batch and batch % kv_batch == 0:
                if source.dim() != 3 or source.size(-1) != self.d_model:
                    raise ShapeError(f"key_value must be (B, S, D={self.d_model}), got {tuple(source.shape)}")
                return batch // kv_batch
            if source.dim() != 3 or source.size(-1) != self.d_model or source.size(0) != batch:
                raise ShapeError(
                    f"key_value must be (B={batch}, S, D={self.d_model}) (or, for cross-attention, B rows that "
                    f"each serve {batch} / B consecutive query rows), got {tuple(source.shape)}"
                )
        elif source.shape != (kv_packing.num_tokens, self.d_model) or kv_packing.batch_size != batch:
            raise ShapeError(
                f"key_value must be packed (N={kv_packing.num_tokens}, D={self.d_model}) of B={batch} sentences, "
                f"got {tuple(source.shape)} of B={kv_packing.batch_size}"
            )
        return 1
