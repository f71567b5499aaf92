"""Teacher-forced scoring of a model on batches: loss, NLL and perplexity per real target token.

Shared by training (the validation pass of :mod:`dotformer.training.loop`) and decoding
(:meth:`dotformer.engines.torch.TorchEngine.reference_nll`), so neither reaches into the other. It needs only the
objective (:mod:`dotformer.training.objective`: the label-smoothed loss of teacher forcing, paper §5.4, or an
encoder's masked tokens and labels) and the cross-rank sum (:mod:`dotformer.training.distributed`); nothing of the
training loop, checkpoints or tokenizers.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from dotformer.errors import ConfigError, DataError
from dotformer.training.distributed import DistContext, all_reduce_sum
from dotformer.training.objective import NEXT_TOKEN

if TYPE_CHECKING:
    from dotformer.data.batch.batching import Batch
    from dotformer.data.batch.blocks import TokenStream
    from dotformer.data.tokenize.tokenizers import Tokenizer
    from dotformer.decoding.inputs import TextRules
    from dotformer.metrics.language import LanguageModelScore
    from dotformer.model import Transformer
    from dotformer.training.objective import Objective


@dataclass(frozen=True)
class EvalResult:
    """Validation numbers, per real target token.

    Attributes:
        loss: label-smoothed loss per token (nats). nll: negative log-likelihood per token (nats).
        perplexity: exp(nll). num_tokens: real target tokens evaluated.
    """

    loss: float
    nll: float
    perplexity: float
    num_tokens: int


def evaluate_loss(
    model: nn.Module,
    batches: Iterable[Batch],
    label_smoothing: float = 0.1,
    pad_id: int = 0,
    context: DistContext | None = None,
    amp_dtype: torch.dtype | None = None,
    packed: bool = True,
    objective: Objective = NEXT_TOKEN,
) -> EvalResult:
    """Loss, NLL and perplexity per scored position over ``batches`` (this rank's shard; summed over ranks).

    Runs in eval mode (no dropout) without gradients and restores the model's previous mode.

    Args:
        model: the Transformer (not the DDP wrapper). batches: validation batches.
        label_smoothing: ε_ls of the reported loss. pad_id: the target PAD id.
        context: the distributed context. amp_dtype: autocast dtype (None: float32).
        packed: skip the padding (:mod:`dotformer.packing`); the same figures, faster.
        objective: what is scored (:mod:`dotformer.training.objective`; teacher forcing by default).

    Returns:
        :class:`EvalResult`; loss, nll and perplexity are nan when there are no target tokens.
    """
    context = context or DistContext()
    device = next(iter(model.parameters())).device
    was_training = model.training
    model.eval()
    totals = torch.zeros(3, dtype=torch.float64, device=device)  # loss, nll, tokens
    with torch.no_grad():
        for batch in batches:
            batch = batch.to(device)
            with torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
                prediction = objective.predict(model, batch, packed, pad_id)  # logits, gold
            sums = objective.loss(prediction, label_smoothing, pad_id)
            totals += torch.stack([sums.loss.double(), sums.nll.double(), sums.num_tokens.double()])
    model.train(was_training)
    loss_sum, nll_sum, tokens = all_reduce_sum(totals, context).tolist()
    if tokens == 0:
        return EvalResult(math.nan, math.nan, math.nan, 0)
    nll = nll_sum / tokens
    return EvalResult(loss_sum / tokens, nll, math.exp(min(nll, 700.0)), int(tokens))


def score_text(
    model: Transformer,
    lines: Sequence[str],
    tokenizer: Tokenizer,
    block_size: int,
    max_tokens: int = 4096,
    rules: TextRules | None = None,
    stride: int | None = None,
) -> LanguageModelScore:
    """Score ``lines`` (read as one stream, each line ending in EOS) with a decoder-only model, block by block or in
    a sliding window; an imported model's ``rules`` read them as its own tokenizer does, BOS first when its family
    adds one (:func:`~dotformer.decoding.inputs.encode_document`).

    Without ``stride``, the stream is cut into blocks of ``block_size`` tokens from its start (and a shorter last
    one), as evaluation batches it (:class:`~dotformer.data.batch.blocks.BlockSampler`): every token after the first
    is scored once, with the tokens since the start of its block as context. With S = ``stride``, a window of T
    tokens moves S tokens at a time and scores its last S (the first window all of its own;
    :func:`sliding_windows`): every token after the first is scored once, with at least
    T - S tokens of context, as HF transformers' "Perplexity of fixed-length models" does; S = T gives the blocks.

    Args:
        model: a decoder-only :class:`Transformer`. lines: the text. tokenizer: the model's.
        block_size: T, the context (at most what the model was trained on). max_tokens: tokens per batch.
        rules: the checkpoint's :class:`~dotformer.decoding.inputs.TextRules` (None: dotformer's line stream).
        stride: S in [1, T], the tokens the window moves; None: blocks of T.

    Returns:
        :class:`LanguageModelScore` over the N - 1 scored tokens and the characters they spell.

    Raises:
        ConfigError: the model is not decoder-only, a bad block size or stride. DataError: fewer than 2 tokens.
    """
    from dotformer.data.batch.blocks import BlockSampler, encode_text
    from dotformer.metrics.language import LanguageModelScore, scored_characters

    if model.config.arch != "decoder-only":
        raise ConfigError(f"bits per character score a decoder-only language model, this one is {model.config.arch}")
    if rules is None or rules.lines:
        stream = encode_text(lines, tokenizer, block_size)
    else:
        from dotformer.decoding.inputs import encode_document

        stream = encode_document(tokenizer, lines, rules, block_size)
    pad_id = model.config.pad_id
    batches: Iterable[Batch]
    if stride is None:
        batches = BlockSampler(stream, max_tokens, shuffle=False).batches(0)
    else:
        batches = sliding_windows(stream, stride, max_tokens, pad_id)
    result = evaluate_loss(model, batches, label_smoothing=0.0, pad_id=pad_id, packed=False)
    return LanguageModelScore(result.nll * result.num_tokens, result.num_tokens, scored_characters(stream, tokenizer))


def sliding_windows(stream: TokenStream, stride: int, max_tokens: int, pad_id: int) -> Iterator[Batch]:
    """Evaluation batches of windows of T tokens moved S = ``stride`` tokens at a time, each scoring only its last S
    labels (the first window all of its T), as HF's "Perplexity of fixed-length models" scores a text:

        window k   tgt_in = x[kS : kS + T], tgt_out = x[kS + 1 : kS + T + 1]  (the last one cut at the stream's end)
        scored     the labels after the first T - S of the window (k ≥ 1), every label (k = 0)

    so every token after the first is scored once, with at least T - S tokens of context (fewer in the first window
    only). Labels a window does not score are ``pad_id``, which the loss skips. S = T gives the evaluation blocks of
    :class:`~dotformer.data.batch.blocks.BlockSampler`. Batches of max(1, ``max_tokens`` // T) full windows, in
    order, each made when it is read (the windows hold T / S copies of the stream); a shorter last window is a batch
    of its own.

    Raises:
        ConfigError: ``stride`` not an integer or outside [1, T], ``max_tokens`` below 1. DataError: fewer than 2
            tokens.
    """
    T, N = stream.block_size, len(stream)
    if not isinstance(stride, int) or isinstance(stride, bool):
        raise ConfigError(f"the stride must be an integer number of tokens, got {stride!r}")
    if max_tokens < 1:
        raise ConfigError(f"max_tokens must be positive, got {max_tokens}")
    if not 1 <= stride <= T:
        raise ConfigError(f"the stride must be between 1 and the block size {T} tokens, got {stride}")
    if N < 2:
        raise DataError(f"the text has {N} token(s): nothing to predict")
    count = 1 + max(0, -(-(N - 1 - T) // stride))  # the first window reads labels 1..T, each next one S more
    full = count if (count - 1) * stride + T <= N - 1 else count - 1  # windows of T labels
    per_batch = max(1, max_tokens // T)
    groups = [range(k, min(k + per_batch, full)) for k in range(0, full, per_batch)]
    groups += [range(full, count)] if full < count else []
    return (_windows(stream, group, stride, pad_id) for group in groups)


def _windows(stream: TokenStream, windows: range, stride: int, pad_id: int) -> Batch:
    """The batch of ``windows`` k of :func:`sliding_windows`, the labels before each one's last S set to PAD."""
    from dotformer.data.batch.blocks import collate_blocks

    T, first = stream.block_size, windows[0]
    length = min(T, len(stream) - 1 - first * stride)  # T, or the last window's labels
    batch = collate_blocks(stream.ids, [k * stride for k in windows], length, windows)
    skipped = torch.tensor([0 if k == 0 else T - stride for k in windows])[:, None]  # (B, 1)
    labels = batch.tgt_out.masked_fill(torch.arange(length) < skipped, pad_id)  # (B, length): unscored: PAD
    return dataclasses.replace(batch, tgt_out=labels, num_tgt_tokens=int((labels != pad_id).sum()))
