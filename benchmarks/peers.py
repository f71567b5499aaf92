"""The peers dotformer is measured against, built at identical sizes, and the batches and FLOP counts they share.

* ``torch.nn.Transformer``: PyTorch's own encoder-decoder stacks, with the pieces it leaves out added the way a user
  of it would add them (:class:`TorchSeq2Seq`: token embeddings ·√D, sinusoidal positions, dropout, a tied generator).
* HF ``MarianMTModel``: built from a ``MarianConfig`` with random weights, or from a dotformer model with
  :func:`dotformer.export.marian.to_marian` (the same function, so outputs can be compared).
* CTranslate2 (decoding only), through :func:`dotformer.export.ct2.export_ctranslate2`.

All training peers take the same :class:`Batch` and return logits from :func:`peer_logits`: (B, T, V) for the peers
and ``dotformer_padded``; (N_T, V) at the real target positions for ``dotformer``, which runs packed
(:mod:`dotformer.packing`), as ``dotformer train`` does; :func:`gold_tokens` gives the matching labels.
Shapes follow the legend in :mod:`dotformer.attention`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from dotformer import ModelConfig, Transformer
from dotformer.data.tokenize.tokenizers import BOS_ID, EOS_ID, NUM_SPECIAL, PAD_ID
from dotformer.positional import sinusoidal_positional_encoding
from dotformer.training.objective import gold_tokens as loop_gold_tokens

PAD, BOS, EOS = PAD_ID, BOS_ID, EOS_ID
FIRST_WORD_ID = NUM_SPECIAL  # ids below are specials


@dataclass(frozen=True)
class Batch:
    """One training batch, identical for every model (same ids, same right padding)."""

    src: Tensor  # (B, S) int64 source ids ending with EOS, right-padded with PAD
    tgt_in: Tensor  # (B, T) int64 BOS + target ids, right-padded
    tgt_out: Tensor  # (B, T) int64 target ids + EOS, right-padded
    num_tgt_tokens: int  # real (non-PAD) positions of tgt_out
    num_src_tokens: int  # real positions of src

    def to(self, device: torch.device | str) -> Batch:
        """The same batch on ``device``."""
        return dataclasses.replace(
            self, src=self.src.to(device), tgt_in=self.tgt_in.to(device), tgt_out=self.tgt_out.to(device)
        )


def make_batch(
    batch_size: int,
    src_len: int,
    tgt_len: int,
    src_vocab: int,
    tgt_vocab: int,
    seed: int = 0,
    min_fraction: float = 0.6,
) -> Batch:
    """A random batch whose sentence lengths are drawn uniformly in [min_fraction·L, L] (so it has padding).

    Args:
        batch_size: B. src_len: S, the longest source (EOS included). tgt_len: T, the longest target (+1 for EOS).
        src_vocab, tgt_vocab: word ids are drawn from [4, V). seed: the generator seed.
        min_fraction: the shortest sentence as a fraction of the longest (1.0: no padding).

    Returns:
        A :class:`Batch`; the first sentence has the full lengths, so the shapes are exactly (B, S) and (B, T).
    """
    g = torch.Generator().manual_seed(seed)

    def lengths(longest: int) -> Tensor:
        low = max(1, int(math.ceil(min_fraction * longest)))
        drawn = torch.randint(low, longest + 1, (batch_size,), generator=g)  # (B,)
        drawn[0] = longest
        return drawn

    src_lengths, tgt_lengths = lengths(src_len), lengths(tgt_len)
    src = torch.randint(FIRST_WORD_ID, src_vocab, (batch_size, src_len), generator=g)  # (B, S)
    words = torch.randint(FIRST_WORD_ID, tgt_vocab, (batch_size, tgt_len), generator=g)  # (B, T)
    positions_s = torch.arange(src_len)[None, :]  # (1, S)
    positions_t = torch.arange(tgt_len)[None, :]  # (1, T)
    src = torch.where(positions_s == src_lengths[:, None] - 1, EOS, src)
    src = src.masked_fill(positions_s >= src_lengths[:, None], PAD)
    tgt_out = torch.where(positions_t == tgt_lengths[:, None] - 1, EOS, words)
    tgt_out = tgt_out.masked_fill(positions_t >= tgt_lengths[:, None], PAD)
    tgt_in = torch.cat([torch.full((batch_size, 1), BOS), words[:, :-1]], dim=1)  # (B, T) BOS + words
    tgt_in = tgt_in.masked_fill(positions_t >= tgt_lengths[:, None], PAD)
    return Batch(src, tgt_in, tgt_out, int(tgt_lengths.sum()), int(src_lengths.sum()))


class TorchSeq2Seq(nn.Module):
    """``torch.nn.Transformer`` completed into a translation model the way its users complete it.

    Token embeddings ·√D + sinusoidal positions + dropout on both sides, ``nn.Transformer`` (post-LN, batch-first,
    no final LayerNorms, like the paper), a generator tied to the target embeddings. Masks: boolean key-padding
    masks for source and target and a boolean causal mask (torch's convention: True = ignore).
    ``nn.Transformer`` has one dropout rate for everything; the attention-weight and FFN-inner dropouts are set to
    ``config.attention_dropout`` and ``config.activation_dropout`` afterwards (0 in dotformer's defaults, as in the
    paper), so that both models compute the same function with the same random draws per step.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        c = config
        self.d_model = c.d_model
        self.pad_id = c.pad_id
        self.src_embed = nn.Embedding(c.src_vocab_size, c.d_model, padding_idx=c.pad_id)
        self.tgt_embed = nn.Embedding(c.tgt_vocab_size, c.d_model, padding_idx=c.pad_id)
        self.register_buffer("pe", sinusoidal_positional_encoding(c.max_len, c.d_model), persistent=False)
        self.dropout = nn.Dropout(c.dropout)
        self.transformer = nn.Transformer(
            d_model=c.d_model,
            nhead=c.num_heads,
            num_encoder_layers=c.num_encoder_layers,
            num_decoder_layers=c.num_decoder_layers,
            dim_feedforward=c.d_ff,
            dropout=c.dropout,
            activation=c.activation,
            batch_first=True,
            norm_first=False,
        )
        self.transformer.encoder.norm = None  # post-LN layers already end with a LayerNorm
        self.transformer.decoder.norm = None
        for module in self.transformer.modules():
            if isinstance(module, nn.MultiheadAttention):
                module.dropout = c.attention_dropout
            if isinstance(module, (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)):
                module.dropout = nn.Dropout(c.activation_dropout)  # the FFN's inner dropout
        self.generator = nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)
        self.generator.weight = self.tgt_embed.weight

    def embed(self, embedding: nn.Embedding, tokens: Tensor) -> Tensor:
        """(B, L) ids -> (B, L, D) embedding ·√D + positions, with dropout."""
        x = embedding(tokens) * math.sqrt(self.d_model) + self.pe[: tokens.size(1)]  # (B, L, D)
        return self.dropout(x)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """(B, S), (B, T) ids -> (B, T, V) logits."""
        T = tgt_in.size(1)
        causal = torch.ones(T, T, dtype=torch.bool, device=src.device).triu(1)  # (T, T) True = may NOT attend
        hidden = self.transformer(
            self.embed(self.src_embed, src),
            self.embed(self.tgt_embed, tgt_in),
            tgt_mask=causal,
            src_key_padding_mask=src == self.pad_id,
            tgt_key_padding_mask=tgt_in == self.pad_id,
            memory_key_padding_mask=src == self.pad_id,
            tgt_is_causal=True,
        )  # (B, T, D)
        return self.generator(hidden)  # (B, T, V)


def build_marian(config: ModelConfig) -> nn.Module:
    """A ``MarianMTModel`` with random weights and the sizes of ``config`` (through dotformer's exporter)."""
    from dotformer.export.marian import to_marian

    torch.manual_seed(0)
    return to_marian(Transformer(config))


def build_model(name: str, config: ModelConfig, seed: int = 0) -> nn.Module:
    """``"dotformer"`` (or ``"dotformer_padded"``), ``"torch"`` or ``"marian"`` at the sizes of ``config``, in training
    mode."""
    torch.manual_seed(seed)
    if name in ("dotformer", "dotformer_padded"):
        model: nn.Module = Transformer(config)
    elif name == "torch":
        model = TorchSeq2Seq(config)
    elif name == "marian":
        model = build_marian(config)
    else:
        raise ValueError(f"unknown model {name!r}")
    return model.train()


def peer_logits(name: str, model: nn.Module, batch: Batch) -> Tensor:
    """Logits of ``model`` on ``batch``, each called the way its own documentation shows: (B, T, V), or (N_T, V) at
    the real target positions for ``"dotformer"`` (packed, what ``dotformer train`` runs)."""
    if name == "marian":
        return model(
            input_ids=batch.src, attention_mask=batch.src != PAD, decoder_input_ids=batch.tgt_in, use_cache=False
        ).logits
    if name == "dotformer":
        return model(batch.src, batch.tgt_in, packed=True)  # (N_T, V)
    return model(batch.src, batch.tgt_in)


def gold_tokens(name: str, batch: Batch) -> Tensor:
    """The labels matching :func:`peer_logits`: (B, T) ``tgt_out``, or (N_T,) its real positions for ``"dotformer"``
    (what ``dotformer train`` uses: :func:`dotformer.training.objective.gold_tokens`)."""
    return loop_gold_tokens(batch, packed=name == "dotformer", pad_id=PAD)  # type: ignore[arg-type]


def forward_flops(config: ModelConfig, batch_size: int, src_len: int, tgt_len: int) -> int:
    """Matrix-multiply FLOPs of one forward pass over padded (B, S) / (B, T) inputs (2 FLOPs per multiply-add).

    Encoder layer: 4 projections 2·4·B·S·D² + scores and weighted sum 2·2·B·S²·D + FFN 2·2·B·S·D·F.
    Decoder layer: self-attention 2·4·B·T·D² + 2·2·B·T²·D (the full square, as the kernels compute it),
    cross-attention Q and W_o 2·2·B·T·D², K and V of the memory 2·2·B·S·D², scores and sum 2·2·B·T·S·D,
    FFN 2·2·B·T·D·F. Generator 2·B·T·D·V. Embeddings, LayerNorm, softmax and the loss are not counted.
    """
    c, B, S, T = config, batch_size, src_len, tgt_len
    D, F, V = c.d_model, c.d_ff, c.tgt_vocab_size
    encoder_layer = 8 * B * S * D * D + 4 * B * S * S * D + 4 * B * S * D * F
    self_attention = 8 * B * T * D * D + 4 * B * T * T * D
    cross_attention = 4 * B * T * D * D + 4 * B * S * D * D + 4 * B * T * S * D
    decoder_layer = self_attention + cross_attention + 4 * B * T * D * F
    generator = 2 * B * T * D * V
    return c.num_encoder_layers * encoder_layer + c.num_decoder_layers * decoder_layer + generator


def attention_flops(config: ModelConfig, batch_size: int, src_len: int, tgt_len: int) -> int:
    """The part of :func:`forward_flops` spent in Q·Kᵀ and weights·V (the rest is projections, FFN, generator)."""
    c, B, S, T, D = config, batch_size, src_len, tgt_len, config.d_model
    return c.num_encoder_layers * 4 * B * S * S * D + c.num_decoder_layers * (4 * B * T * T * D + 4 * B * T * S * D)


def describe(config: ModelConfig) -> dict[str, Any]:
    """The sizes that matter for speed, for the JSON output."""
    keys = ("d_model", "num_heads", "d_ff", "num_encoder_layers", "num_decoder_layers", "src_vocab_size")
    keys += ("tgt_vocab_size",)
    return {k: getattr(config, k) for k in keys}
