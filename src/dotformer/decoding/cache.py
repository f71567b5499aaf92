"""The key/value cache of incremental decoding (paper §3.2.3), and beam search's grouped cross-attention queries.

Decoding step by step, the decoder's attention would project the keys and values of every earlier position again at
every step. A :class:`KVCache` keeps them: it is the :class:`~dotformer.multihead.KeyValueCache` that
:meth:`MultiHeadAttention.forward <dotformer.multihead.MultiHeadAttention.forward>` hands each step's new keys/values
to (``update``) and gets every step's back from. Self-attention appends the newest positions; cross-attention
(``static``) projects the encoder memory once, on the first step, and is ``fixed`` afterwards.

Beam search decodes N = B·G rows, G beams per sentence, that read B memory rows: a static cache then reads the G rows
of a sentence as G·T queries of its memory row (:class:`GroupedRows`, the :class:`~dotformer.multihead.Layout` its
``layout`` returns), so each sentence's keys/values are projected and read once instead of G times.
:meth:`DecoderCache.reorder` follows the surviving beams, moving each sentence's cross-attention row with its beams.
Shapes follow the legend in :mod:`dotformer.attention`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import Tensor

from dotformer.attention import hide_masked_keys
from dotformer.errors import ShapeError


@dataclass(frozen=True)
class GroupedRows:
    """G query rows per key/value row: rows g·G … g·G + G - 1 of (N, T, ...) read key/value row g, N = B·G.

    As a :class:`~dotformer.multihead.Layout` it views the G rows of a sentence as one row of G·T queries (a reshape,
    no copy): the result equals attending from each row to its own copy of the keys/values (tested).

    Attributes:
        batch_size: B, the key/value rows. groups: G.
    """

    batch_size: int
    groups: int
    dims: ClassVar[int] = 3  # the caller's vectors are (N, T, D)

    def unpack(self, x: Tensor) -> Tensor:
        """(B·G, T, ...) -> (B, G·T, ...)."""
        return x.reshape(self.batch_size, -1, *x.shape[2:])  # (B, G·T, ...)

    def pack(self, x: Tensor) -> Tensor:
        """(B, G·T, ...) -> (B·G, T, ...)."""
        return x.reshape(self.batch_size * self.groups, -1, *x.shape[2:])  # (B·G, T, ...)

    def pack_weights(self, weights: Tensor) -> Tensor:
        """(B, H, G·T, S) -> (B·G, H, T, S): each row's own weights."""
        return weights.unflatten(2, (self.groups, -1)).transpose(1, 2).flatten(0, 1)  # (B·G, H, T, S)


@dataclass
class KVCache:
    """Keys and values already projected, kept between decoding steps (one per attention module and sentence batch).

    Self-attention appends the new step's keys/values; cross-attention (``static``) computes the memory's once and
    reuses them. The :class:`~dotformer.multihead.KeyValueCache` of :class:`~dotformer.multihead.MultiHeadAttention`.

    Attributes:
        key: (B, H, S_cached, Dh) or None before the first step.
        value: (B, H, S_cached, Dh) or None before the first step.
        pending: LongTensor (B',) or None: a deferred :meth:`reorder` (row i will be row ``pending[i]`` of ``key``
            and ``value``), carried out by the next :meth:`append` in the same copy that adds the new positions.
        keys_hidden: a static cache's keys/values were zeroed where its first step's key padding mask hid them
            (:func:`~dotformer.attention.hide_masked_keys`, once instead of at every step); later steps must pass
            the same padding mask, as decoding does.
        static: the keys/values do not change between steps (cross-attention): they are projected on the first step
            only and the cache is :attr:`fixed` afterwards.
    """

    key: Tensor | None = None
    value: Tensor | None = None
    pending: Tensor | None = None
    keys_hidden: bool = False
    static: bool = False

    @property
    def fixed(self) -> bool:
        """A static cache that holds its keys/values: the next step projects none."""
        return self.static and self.key is not None

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

    def layout(self, query: Tensor, key_value: Tensor) -> GroupedRows | None:
        """None when each query row reads its own cached row; :class:`GroupedRows` when a static cache's B rows are
        read by N = B·G query rows (beam search).

        Args:
            query: (N, T, D) the new positions' vectors. key_value: (B, S, D) (self-attention: ``query``).

        Raises:
            ShapeError: the query rows are neither the cached rows nor a multiple of them (the message names both).
        """
        rows, kv_rows = query.size(0), self.batch_size if self.fixed else key_value.size(0)
        if rows == kv_rows or not self.static or query.dim() != 3:
            return None  # one query row per key/value row (MultiHeadAttention checks the shapes)
        if self.fixed and not 0 < kv_rows < rows:
            raise ShapeError(f"the cache holds keys for batch size {kv_rows}, the query has {rows}")
        if kv_rows <= 0 or rows % kv_rows:
            raise ShapeError(
                f"grouped queries need N = B·G query rows for B key/value rows, got query {tuple(query.shape)} "
                f"for {kv_rows} key/value rows"
            )
        return GroupedRows(kv_rows, rows // kv_rows)

    def update(self, key: Tensor | None, value: Tensor | None, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Add the new (B, H, T_new, Dh) keys/values and return all (B, H, S, Dh) held (a fixed cache: its own).

        A static cache's first update zeroes once the keys its key padding mask ``mask`` ((B, 1, 1, S)) hides
        (:attr:`keys_hidden`) and keeps contiguous copies, which every later step reads faster.

        Raises:
            ShapeError: the new keys do not fit the held ones, or a cache that is not fixed got no keys.
        """
        if self.fixed:
            return self.settled()  # (B, H, S, Dh), projected on the first step
        if key is None or value is None:
            raise ShapeError("the cache holds no keys/values yet: pass the new ones")
        if self.static:  # read at every step: hide the padding once; a contiguous copy reads faster
            self.keys_hidden = is_key_padding_mask(mask, key)
            if self.keys_hidden:
                key, value = hide_masked_keys(key, value, mask)  # (B, H, S, Dh)
            key, value = key.contiguous(), value.contiguous()
        return self.append(key, value)  # (B, H, S_cached + T_new, Dh)

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


@dataclass
class LayerCache:
    """Cached keys/values of one decoder layer: its self-attention (growing) and cross-attention (fixed)."""

    self_attn: KVCache = field(default_factory=KVCache)
    cross_attn: KVCache = field(default_factory=lambda: KVCache(static=True))


@dataclass
class DecoderCache:
    """The decoder's key/value cache for incremental decoding: one :class:`LayerCache` per layer.

    ``DecoderCache()`` is an empty one, for :meth:`~dotformer.model.Transformer.decode` to fill.

    Attributes:
        layers: per-layer caches (self-attention keys/values grow each step; cross-attention ones are fixed).
        length: number of target positions already decoded (the positional offset of the next token; a 0-d tensor
            in a traced graph).
    """

    layers: list[LayerCache] = field(default_factory=list)
    length: int | Tensor = 0

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


def is_key_padding_mask(mask: Tensor | None, key: Tensor) -> bool:
    """Whether ``mask`` is a (B, 1, 1, S) (or (1, 1, 1, S)) key padding mask for (B, H, S, Dh) keys, the same for
    every query: a static cache may then zero the keys it hides once, for every step."""
    return (
        mask is not None
        and mask.dim() == key.dim()
        and mask.size(-2) == 1
        and mask.size(-1) == key.size(-2)
        and mask.size(0) in (1, key.size(0))
        and all(size == 1 for size in mask.shape[1:-1])
    )


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
