"""The key/value cache of incremental decoding (paper §3.2.3), and beam search's grouped cross-attention queries.

Decoding step by step, the decoder's attention would project the keys and values of every earlier position again at
every step. A :class:`KVCache` keeps them: self-attention appends the newest position's keys/values, cross-attention
projects the encoder memory once, on the first step. :class:`MultiHeadAttention` hands a call with a cache to
:meth:`KVCache.attend`, which runs the same formula (the module's own projections and
:meth:`~dotformer.multihead.MultiHeadAttention.attend`) on the cached keys/values; the lesson's forward never sees the
cache.

Beam search decodes N = B·G rows, G beams per sentence, that read B memory rows: cross-attention then takes the G rows
of a sentence as G·T queries of its memory row (:func:`grouped_cross_attention`), so each sentence's keys/values are
projected and read once instead of G times. :meth:`DecoderCache.reorder` follows the surviving beams, moving each
sentence's cross-attention row with its beams. Shapes follow the legend in :mod:`dotformer.attention`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from dotformer.attention import hide_masked_keys
from dotformer.errors import ShapeError
from dotformer.multihead import MultiHeadOutput

if TYPE_CHECKING:
    from dotformer.multihead import MultiHeadAttention


@dataclass
class KVCache:
    """Keys and values already projected, kept between decoding steps (one per attention module and sentence batch).

    Self-attention appends the new step's keys/values; cross-attention (``static_kv``) computes the memory's once and
    reuses them.

    Attributes:
        key: (B, H, S_cached, Dh) or None before the first step.
        value: (B, H, S_cached, Dh) or None before the first step.
        pending: LongTensor (B',) or None: a deferred :meth:`reorder` (row i will be row ``pending[i]`` of ``key``
            and ``value``), carried out by the next :meth:`append` in the same copy that adds the new positions.
        keys_hidden: a static cache's keys/values were zeroed where its first step's key padding mask hid them
            (:func:`~dotformer.attention.hide_masked_keys`, once instead of at every step); later steps must pass
            the same padding mask, as decoding does.
    """

    key: Tensor | None = None
    value: Tensor | None = None
    pending: Tensor | None = None
    keys_hidden: bool = False

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

    def attend(
        self,
        attention: MultiHeadAttention,
        query: Tensor,
        source: Tensor,
        mask: Tensor | None,
        is_causal: bool,
        need_weights: bool,
        static_kv: bool,
    ) -> MultiHeadOutput:
        """``attention``'s forward with this cache: project the new positions only (MultiHeadAttention calls this).

        Args:
            attention: the module whose projections and attention are used.
            query: (N, T, D) the new positions' vectors; N = B, or N = B·G for grouped cross-attention queries.
            source: (B, S, D) the vectors to project keys/values from (self-attention: ``query``; cross-attention:
                the memory, projected on the first call only when ``static_kv``).
            mask: bool broadcastable to (B, H, T, S_total), True = may attend (grouped: one row per memory row).
            is_causal: the causal mask, aligned to the last T keys (a single query may see every key: no mask).
            need_weights: also return the (N, H, T, S_total) weights (reference attention).
            static_kv: the keys/values do not change between steps (cross-attention).

        Returns:
            :class:`~dotformer.multihead.MultiHeadOutput`: (N, T, D) output and optionally the weights.

        Raises:
            ShapeError: the inputs do not fit the cache or the module (the message names the shapes).
        """
        cached = static_kv and self.key is not None and self.value is not None  # the memory's keys/values held
        kv_rows = self.batch_size if cached else source.size(0)
        if static_kv and 0 < kv_rows < query.size(0):  # G query rows per memory row: beam search
            return grouped_cross_attention(attention, query, source, mask, self, need_weights)
        attention.check_inputs(query, source)
        if cached and self.batch_size != query.size(0):
            raise ShapeError(f"the cache holds keys for batch size {self.batch_size}, the query has {query.size(0)}")
        q = attention.split_heads(attention.W_q(query))  # (B, H, T, Dh)
        if cached:
            k, v = self.settled()  # (B, H, S, Dh), projected on the first step
        else:
            k = attention.split_heads(attention.W_k(source))  # (B, H, S_new, Dh)
            v = attention.split_heads(attention.W_v(source))  # (B, H, S_new, Dh)
            if static_kv:  # read at every step: hide the padding once; a contiguous copy reads faster
                self.keys_hidden = mask is not None and mask.dim() >= 2 and mask.size(-2) == 1  # a key padding mask
                if self.keys_hidden:
                    k, v = hide_masked_keys(k, v, mask)  # (B, H, S, Dh)
                k, v = k.contiguous(), v.contiguous()
            k, v = self.append(k, v)  # (B, H, S_cached + S_new, Dh)
        if is_causal and q.size(-2) == 1:
            is_causal = False  # one query, aligned to the last key, may see every key: nothing to mask
        hidden = static_kv and self.keys_hidden
        heads, weights = attention.attend(q, k, v, mask, is_causal, need_weights, keys_hidden=hidden)  # (B, H, T, Dh)
        return MultiHeadOutput(attention.W_o(attention.merge_heads(heads)), weights)  # (B, T, D)

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

    def settled(self) -> tuple[Tensor, Tensor]:
        """The held (B, H, S, Dh) keys and values, after carrying out a pending reorder.

        Raises:
            ShapeError: the cache is empty.
        """
        self.settle()
        if self.key is None or self.value is None:
            raise ShapeError("the cache holds no keys/values yet")
        return self.key, self.value

    def settle(self) -> None:
        """Carry out a pending (deferred) reorder now."""
        if self.pending is not None and self.key is not None and self.value is not None:
            self.key = self.key.index_select(0, self.pending)
            self.value = self.value.index_select(0, self.pending)
        self.pending = None


def grouped_cross_attention(
    attention: MultiHeadAttention,
    query: Tensor,
    memory: Tensor,
    mask: Tensor | None = None,
    cache: KVCache | None = None,
    need_weights: bool = False,
) -> MultiHeadOutput:
    """Cross-attention from N = B·G query rows to B memory rows: rows g·G … g·G + G - 1 all read memory row g.

    Beam search's G beams of a sentence share its memory: attending with them as the G·T queries of that row
    projects and reads its keys/values once instead of G times. Equal to ``attention(query, memory expanded to N
    rows)`` (tested).

    Args:
        attention: the cross-attention module.
        query: (N, T, D), N = B·G.
        memory: (B, S, D) (ignored once ``cache`` holds the memory's keys/values: a static cache of B rows).
        mask: bool broadcastable to (B, H, G·T, S), one row per memory row (the source padding mask (B, 1, 1, S)).
        cache: optional static cache of the memory's keys/values (filled on the first call).
        need_weights: also return the (N, H, T, S) weights.

    Returns:
        :class:`~dotformer.multihead.MultiHeadOutput`: (N, T, D) output, optionally (N, H, T, S) weights.

    Raises:
        ShapeError: N is not a multiple of the memory's B rows, or the mask has one row per query row.
    """
    B = cache.batch_size if cache is not None and cache.key is not None else memory.size(0)
    N, T = query.size(0), query.size(1)
    if B <= 0 or N % B or memory.dim() != 3:
        raise ShapeError(
            f"grouped queries need N = B·G query rows for B memory rows, got query {tuple(query.shape)} "
            f"and memory {tuple(memory.shape)}"
        )
    G = N // B
    if mask is not None and mask.dim() == 4 and mask.size(0) not in (1, B):
        raise ShapeError(
            f"with {G} query rows per key/value row the mask must have one row per key/value row "
            f"(B={B}) or 1, got mask {tuple(mask.shape)} for query {tuple(query.shape)}"
        )
    rows = query.reshape(B, G * T, query.size(-1))  # (B, G·T, D): a sentence's G rows as G·T queries
    out = attention(rows, memory, mask, need_weights=need_weights, cache=cache, static_kv=True)
    weights = out.weights
    if weights is not None:  # (B, H, G·T, S) -> (B·G, H, T, S)
        weights = weights.unflatten(2, (G, T)).transpose(1, 2).flatten(0, 1)
    return MultiHeadOutput(out.output.reshape(N, T, query.size(-1)), weights)  # (N, T, D)


@dataclass
class LayerCache:
    """Cached keys/values of one decoder layer: its self-attention (growing) and cross-attention (fixed)."""

    self_attn: KVCache = field(default_factory=KVCache)
    cross_attn: KVCache = field(default_factory=KVCache)


@dataclass
class DecoderCache:
    """The decoder's key/value cache for incremental decoding: one :class:`LayerCache` per layer.

    Attributes:
        layers: per-layer caches (self-attention keys/values grow each step; cross-attention ones are fixed).
        length: number of target positions already decoded (the positional offset of the next token).
    """

    layers: list[LayerCache] = field(default_factory=list)
    length: int = 0

    def for_layers(self, num_layers: int) -> list[LayerCache]:
        """The per-layer caches of a decoder of ``num_layers`` layers (created, empty, on the first step)."""
        if len(self.layers) != num_layers:
            self.layers = [LayerCache() for _ in range(num_layers)]
        return self.layers

    def reorder(self, index: Tensor) -> None:
        """Row i continues row ``index[i]`` (LongTensor (N',)) in every layer: beam search follows surviving beams
        with it, and drops finished sentences.

        A grouped cache (N decoded rows reading B = N / G memory rows: beam search's G beams per sentence, see
        :meth:`~dotformer.model.Transformer.decode`) moves its cross-attention rows along: every G consecutive
        entries of ``index`` must be rows of one sentence (g·G … g·G + G - 1, in any order), and that sentence's
        memory row follows them.

        Raises:
            ShapeError: an entry of ``index`` is not a row of the cache, or (grouped) ``index`` does not keep whole
                groups of rows of one sentence (the rows would read another sentence's memory).
        """
        if not self.layers or self.layers[0].self_attn.batch_size == 0:
            return  # nothing cached yet
        rows, sources = self.layers[0].self_attn.batch_size, self.layers[0].cross_attn.batch_size  # N, B (or 0)
        check_rows(index, rows)
        groups = rows // sources if 0 < sources < rows else 1  # G decoded rows per memory row
        cross_index = index if groups == 1 else group_sources(index, groups)
        for layer in self.layers:
            layer.self_attn.reorder(index)
            layer.cross_attn.reorder(cross_index)


def check_rows(index: Tensor, rows: int) -> None:
    """Raise :class:`ShapeError` unless ``index`` is a 1-D tensor of row numbers in [0, ``rows``) (a host sync)."""
    if index.dim() != 1 or index.dtype not in (torch.int64, torch.int32):
        raise ShapeError(f"a row index must be a 1-D int64 tensor, got {tuple(index.shape)} {index.dtype}")
    if index.numel() and (int(index.min()) < 0 or int(index.max()) >= rows):
        raise ShapeError(f"row index {index.tolist()} has entries outside the cache's {rows} rows [0, {rows})")


def group_sources(index: Tensor, groups: int) -> Tensor:
    """The memory row of each group of ``groups`` consecutive entries of ``index`` (rows of a grouped batch).

    Args:
        index: (N',) int64 rows of N = B·G rows, row r reading memory row r // G. groups: G.

    Returns:
        (N' / G,) int64: ``index[::G] // G``.

    Raises:
        ShapeError: N' is not a multiple of G, or a group mixes rows of different memory rows.
    """
    sources = index[::groups] // groups  # (N' / G,)
    if index.numel() % groups or bool((index.view(-1, groups) // groups != sources[:, None]).any()):
        raise ShapeError(
            f"with {groups} rows per sentence, each {groups} consecutive entries must be rows of one sentence "
            f"(g·{groups} … g·{groups} + {groups - 1}), got {index.tolist()}"
        )
    return sources
