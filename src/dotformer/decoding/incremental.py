"""Incremental decoding: the decoder run one target position at a time, with the key/value cache (paper §3.2.3).

At step t the decoder needs the self-attention keys/values of positions 0..t and the cross-attention keys/values of
the source. With a :class:`~dotformer.decoding.cache.DecoderCache`, the model keeps both: each step projects only the
newest token and appends its keys/values, and the source's keys/values are projected once, on the first step. Without a
cache (``use_cache=False``) every step runs the decoder over the whole prefix again: the same numbers, slower.

Beam search and batched sampling decode N = B·K rows (K rows per sentence). Beam search keeps the memory at B rows:
cross-attention reads sentence b's keys/values once for its K consecutive rows (``rows_per_source``); sampling,
whose rows finish one by one, expands the memory to N rows once. Afterwards :meth:`IncrementalDecoder.reorder`
follows the surviving beams and :meth:`IncrementalDecoder.select` drops the rows of finished sentences. Shapes follow
the legend in :mod:`dotformer.attention`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, NamedTuple

import torch
from torch import Tensor

from dotformer.config import ModelConfig
from dotformer.data.tokenize.tokenizers import EOS_ID
from dotformer.decoding.cache import DecoderCache, check_rows, group_sources
from dotformer.decoding.config import DecodeConfig
from dotformer.decoding.ensemble import Ensemble, average_log_probs
from dotformer.errors import ConfigError, ShapeError
from dotformer.masks import check_right_padded
from dotformer.model import Transformer


class EncodedSource(NamedTuple):
    """The encoder's view of a batch of source sentences, ready for decoding.

    Attributes:
        memory: (B, S, D) the encoder output; for an :class:`~dotformer.decoding.ensemble.Ensemble`, a tuple of one
            (B, S, D_m) memory per model.
        src_mask: (B, 1, 1, S) bool, True at real (non-PAD) source tokens.
        max_len: (B,) int64, the most decoding steps for each sentence (EOS included), from
            :meth:`DecodeConfig.max_output_length` of its unpadded length, capped by a learned positional table.
        min_len: (B,) int64, the fewest tokens before EOS for each sentence (:meth:`DecodeConfig.min_output_length`).
    """

    memory: Tensor | tuple[Tensor, ...]
    src_mask: Tensor
    max_len: Tensor
    min_len: Tensor


@contextlib.contextmanager
def inference(model: Transformer) -> Iterator[None]:
    """Run ``model`` in eval mode (dropout off) without autograd, then restore its training flag.

    A model already in eval mode everywhere (a loaded checkpoint) is left alone: setting the flag on every module
    twice per batch costs more than a small model's decoding step.
    """
    if not any(module.training for module in model.modules()):
        with torch.inference_mode():
            yield
        return
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        model.train(was_training)


def check_source(model: Transformer, src: Tensor) -> None:
    """Raise a clear error unless ``src`` is a (B, S) int64 batch an encoder-decoder ``model`` can read.

    Raises:
        ConfigError: the model is not an encoder-decoder, or its target vocabulary lacks PAD/BOS/EOS.
        ShapeError: ``src`` is not (B, S) integer ids, is empty, is not right-padded (left padding would shift the
            positions: it is refused, not supported), or is longer than a learned positional table allows.
    """
    if model.config.arch != "encoder-decoder":
        raise ConfigError(f"decoding needs an encoder-decoder model, this one is {model.config.arch}")
    if model.config.tgt_vocab_size <= EOS_ID:
        raise ConfigError(
            f"decoding needs the special tokens PAD, BOS, EOS in the target vocabulary; tgt_vocab_size is "
            f"{model.config.tgt_vocab_size}"
        )
    if src.dim() != 2 or src.dtype not in (torch.int64, torch.int32):
        raise ShapeError(f"src must be (B, S) integer token ids, got {tuple(src.shape)} {src.dtype}")
    if src.size(0) == 0 or src.size(1) == 0:
        raise ShapeError(f"src must hold at least one sentence of at least one token, got {tuple(src.shape)}")
    check_right_padded(src, model.config.pad_id, "src")
    limit = model.config.max_len
    if model.config.positional == "learned" and src.size(1) > limit:
        raise ShapeError(
            f"the input has {src.size(1)} tokens but this model reads at most {limit} "
            f"(learned positional encoding with max_len={limit}); shorten the input"
        )


def output_positions(config: ModelConfig) -> int:
    """The most tokens an output can have: the model's ``max_len`` positions (the rows of a learned positional
    table; the positions a sinusoidal model was built for and reads by default). Every search caps its length limit
    ``max_len_a · S + max_len_b`` there (:func:`encode_source`), so a huge ``max_len_b`` costs nothing more (as
    fairseq caps it at the model's positions)."""
    return int(config.max_len)


def encode_source(model: Transformer, src: Tensor, config: DecodeConfig) -> EncodedSource:
    """Encode a (B, S) int64 right-padded batch once and work out each sentence's output length limit.

    Raises:
        ConfigError, ShapeError: see :func:`check_source`.
    """
    check_source(model, src)
    src = src.long()
    src_mask = model.source_mask(src)  # (B, 1, 1, S)
    if isinstance(model, Ensemble):  # one memory per model, (B, S, D_m) each
        memory: Tensor | tuple[Tensor, ...] = tuple(m.encode(src, src_mask).memory for m in model.models)
    else:
        memory = model.encode(src, src_mask).memory  # (B, S, D)
    lengths = (src != model.config.pad_id).sum(dim=1).tolist()  # B ints
    positions = output_positions(model.config)  # step t reads position t
    limits = [min(config.max_output_length(n), positions) for n in lengths]
    minimums = [config.min_output_length(n) for n in lengths]
    return EncodedSource(
        memory,
        src_mask,
        torch.tensor(limits, dtype=torch.int64, device=src.device),
        torch.tensor(minimums, dtype=torch.int64, device=src.device),
    )


def expand_rows(x: Any, copies: int) -> Any:
    """(B, ...) -> (B·K, ...) with K = ``copies``: sentence b owns the consecutive rows b·K .. b·K + K - 1 (each
    tensor of a tuple, for an ensemble's memories)."""
    if isinstance(x, tuple):
        return tuple(expand_rows(part, copies) for part in x)
    return x.repeat_interleave(copies, dim=0)  # (B·K, ...)


class IncrementalDecoder:
    """The decoder over N rows, one new token per row and step.

    Args:
        model: an encoder-decoder :class:`Transformer` (in eval mode).
        memory: (N / G, S, D) encoder output, one row per G consecutive decoded rows.
        src_mask: (N / G, 1, 1, S) bool source padding mask.
        use_cache: keep keys/values between steps (True) or recompute the whole prefix each step (False).
        rows_per_source: G, the decoded rows per memory row (1: one each). With G > 1 rows are dropped only in
            whole groups (:meth:`select`), as beam search drops whole sentences.

    Raises:
        ConfigError: ``rows_per_source`` < 1.
    """

    def __init__(
        self,
        model: Transformer | Ensemble,
        memory: Tensor | tuple[Tensor, ...],
        src_mask: Tensor,
        use_cache: bool = True,
        rows_per_source: int = 1,
    ) -> None:
        if rows_per_source < 1:
            raise ConfigError(f"rows_per_source must be at least 1, got {rows_per_source}")
        self.members = (  # an ensemble: one decoder per model, each with its own memory and cache
            [
                IncrementalDecoder(m, mem, src_mask, use_cache, rows_per_source)
                for m, mem in zip(model.models, memory, strict=True)
            ]
            if isinstance(model, Ensemble)
            else []
        )
        self.model = model
        self.memory = memory  # (N / G, S, D)
        self.src_mask = src_mask  # (N / G, 1, 1, S)
        self.attend_mask = attention_mask(src_mask)  # the mask cross-attention reads: None when it hides nothing
        self.rows_per_source = rows_per_source
        self.cache = DecoderCache() if use_cache else None
        self.prefix: Tensor | None = None  # (N, t) the tokens fed so far, kept only without a cache

    def step(self, tokens: Tensor) -> Tensor:
        """Feed one token per row (the BOS on the first step) and return the next token's distribution.

        Args:
            tokens: (N,) int64, the token at position t of every row.

        Returns:
            (N, V) float32 natural-log probabilities of the token at position t + 1.

        Raises:
            ShapeError: ``tokens`` is not (N,) with N = G × the memory's rows.
        """
        logits = self.step_logits(tokens)  # (N, V)
        return logits if self.members else logits.log_softmax(dim=-1)  # an ensemble's are log-probabilities already

    def step_logits(self, tokens: Tensor) -> Tensor:
        """:meth:`step` before the softmax: (N, V) float32 logits of the token at position t + 1 (an ensemble's: the
        average of its models' log-probabilities), for the searches' controls (:mod:`dotformer.decoding.controls`).

        Raises:
            ShapeError: ``tokens`` is not (N,) with N = G × the memory's rows.
        """
        if self.members:  # an ensemble: the average of the models' distributions
            return average_log_probs([member.step(tokens) for member in self.members])  # (N, V)
        if tokens.dim() != 1 or tokens.size(0) != self.memory.size(0) * self.rows_per_source:
            raise ShapeError(
                f"tokens must be (N,) with N = {self.rows_per_source} rows per memory row × {self.memory.size(0)} "
                f"memory rows, got {tuple(tokens.shape)}"
            )
        new = tokens[:, None]  # (N, 1)
        if self.cache is not None:
            hidden = self.model.decode(new, self.memory, self.attend_mask, cache=self.cache).hidden  # (N, 1, D)
        else:
            self.prefix = new if self.prefix is None else torch.cat([self.prefix, new], dim=1)  # (N, t + 1)
            hidden = self.model.decode(self.prefix, self.memory, self.attend_mask).hidden  # (N, t + 1, D)
        return self.model.generator(hidden[:, -1]).float()  # (N, V)

    def reorder(self, index: Tensor) -> None:
        """Row i continues row ``index[i]`` (LongTensor (N,)), where both rows read the same source sentence.

        Beam search calls this every step to follow the surviving beams of each sentence. Only the self-attention
        keys/values move: the memory, its mask and its cross-attention keys/values are the same for every beam of a
        sentence, so row i already holds the right ones.
        """
        for member in self.members:
            member.reorder(index)
        if self.cache is not None:
            for layer in self.cache.layers:
                layer.self_attn.reorder(index, defer=True)  # carried out by the next step's append, in one copy
        if self.prefix is not None:
            self.prefix = self.prefix.index_select(0, index)  # (N, t)

    def select(self, index: Tensor) -> None:
        """Keep rows ``index`` (LongTensor (N',)) in this order, with their memory: drops the finished sentences.

        With G = ``rows_per_source`` > 1, ``index`` keeps whole groups: its G entries g·G … g·G + G - 1 are rows of
        one memory row (in any order among themselves).

        Raises:
            ShapeError: ``index`` names a row that does not exist, or (G > 1) does not keep whole groups.
        """
        if self.members:
            for member in self.members:
                member.select(index)
            return
        G = self.rows_per_source
        check_rows(index, self.memory.size(0) * G)
        sources = index if G == 1 else group_sources(index, G)  # (N' / G,) the memory row of each kept group
        if self.cache is not None:
            for layer in self.cache.layers:
                layer.self_attn.reorder(index)
                layer.cross_attn.reorder(sources)
        if self.prefix is not None:
            self.prefix = self.prefix.index_select(0, index)  # (N', t)
        self.memory = self.memory.index_select(0, sources)  # (N' / G, S, D)
        self.src_mask = self.src_mask.index_select(0, sources)  # (N' / G, 1, 1, S)
        if self.attend_mask is not None:
            self.attend_mask = attention_mask(self.src_mask)


def attention_mask(src_mask: Tensor) -> Tensor | None:
    """The (B, 1, 1, S) bool source padding mask, or None when it hides no key (a batch of equally long sources, as
    length-sorted batches mostly are): attention then skips applying it, with the same result (a host sync)."""
    return None if bool(src_mask.all()) else src_mask
