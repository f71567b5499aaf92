"""A copy model whose weights are set by hand: a real :class:`dotformer.Transformer` that outputs its input.

Not a test module: the decoding, API and CLI tests import it. Nothing here is learned, so what the model outputs is
known by construction on every processor, at float32, bfloat16 and int8.

The residual stream (D = 192) is cut into blocks of dimensions, each holding one thing:

    [0, 64)     the position p: row p + 1 of a 64 × 64 Hadamard matrix (±1 entries, mean 0, rows orthogonal)
    [64, 88)    encoder: the source token v (+8 at 64 + v, -8 at 76 + v); decoder: the answer, the same code
    [88, 112)   decoder: the previous output token, the same code
    [112, 192)  unused (zero)

Every vector has mean 0 and the same norm (√D), so each post-LN LayerNorm leaves it as it is. All sublayers write
nothing (zero output projections) except the first decoder layer's cross-attention, whose first head reads:

    score(t, s) = 40·[s = t] + 20·[source token s is EOS]      (after the 1/√Dh scaling)

so decoder step t attends to source position t (by 20 over any other), and beyond the source's EOS to that EOS. (An
unknown source symbol, UNK, is embedded as EOS: the copy ends there, as a copy task's targets hold no <unk>.) Its
value is the source token's one-hot code, which W_o writes into the answer block. The generator gives the answer
token a logit of 6 and every token a small logit of at most ±1 from the position and the previous output token
(a seeded table): margin ≥ 4, so greedy and beam search copy the source and stop with EOS, alternatives score
distinctly, and the log-probabilities depend on the prefix (which tests that the cache follows its beam).
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from dotformer import ModelConfig, Transformer
from dotformer.data.tokenize.tokenizers import EOS_ID, PAD_ID, UNK_ID

VOCAB = 12  # PAD, BOS, EOS, UNK and 8 symbols; source and target share the ids
POSITIONS = 63  # the Hadamard rows 1..63 (row 0, all ones, has a non-zero mean): max_len of the model
D_MODEL, HEADS = 192, 2  # head 0 needs 65 query/key dimensions: 64 for the position, 1 for "is EOS"
POS, ANSWER, PREVIOUS = slice(0, 64), 64, 64 + 2 * VOCAB  # first dimensions of the three blocks
CODE = 8.0  # a token's code: +8 and -8, so that 64·1² + 2·8² = 192 = D, the norm every LayerNorm keeps
MATCH, EOS_BONUS = 40.0, 20.0  # attention scores (after 1/√Dh) of the position match and of the source EOS
ANSWER_LOGIT, NOISE = 6.0, 1.0  # the answer's logit; the largest logit the position and previous token add


def scripted_config() -> ModelConfig:
    """2+2 post-LN layers, learned positions (the Hadamard rows), an untied generator, no dropout."""
    return ModelConfig(
        src_vocab_size=VOCAB,
        tgt_vocab_size=VOCAB,
        d_model=D_MODEL,
        num_heads=HEADS,
        d_ff=32,
        num_encoder_layers=2,
        num_decoder_layers=2,
        dropout=0.0,
        positional="learned",
        max_len=POSITIONS,
        tie_output=False,
    )


def hadamard(n: int) -> Tensor:
    """Sylvester's n × n Hadamard matrix (n a power of 2): entries ±1, rows orthogonal."""
    h = torch.ones(1, 1)
    while h.size(0) < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def token_codes(first: int) -> Tensor:
    """(V, D) the code of each token in the block starting at dimension ``first``; PAD's row is zero."""
    codes = torch.zeros(VOCAB, D_MODEL)
    ids = torch.arange(VOCAB)
    codes[ids, first + ids] = CODE
    codes[ids, first + VOCAB + ids] = -CODE
    codes[PAD_ID] = 0.0
    return codes


@functools.cache
def copy_model() -> Transformer:
    """The hand-set copy model, eval mode, float32 (one shared instance: tests must not change its weights)."""
    return build_copy_model().eval()


def build_copy_model() -> Transformer:
    """A fresh hand-set copy model (see the module docstring for how each weight is chosen)."""
    torch.manual_seed(0)
    model = Transformer(scripted_config())
    config = model.config
    scale = config.d_model**0.5  # the token embedding is multiplied by √D
    dh = config.d_model // config.num_heads
    positions = hadamard(64)[1 : POSITIONS + 1]  # (63, 64)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for norm in (m for m in model.modules() if isinstance(m, torch.nn.LayerNorm)):
            norm.weight.fill_(1.0)
        for embed in (model.src_embed, model.tgt_embed):
            embed.position.table.weight[:, POS] = positions
        source_codes = token_codes(ANSWER)
        source_codes[UNK_ID] = source_codes[EOS_ID]  # an unknown source symbol ends the copy (no <unk> output)
        model.src_embed.token.lookup.weight.copy_(source_codes / scale)
        model.tgt_embed.token.lookup.weight.copy_(token_codes(PREVIOUS) / scale)

        cross = model.decoder.layers[0].cross_attn
        root = dh**0.5
        c = (MATCH * root / 64) ** 0.5  # q_t·k_s = c²·(row t · row s) = c²·64·[s = t]
        cross.W_q.weight[POS, POS] = c * torch.eye(64)
        cross.W_k.weight[POS, POS] = c * torch.eye(64)
        cross.W_q.bias[64] = root  # a constant 1 (·√Dh) meets "is EOS" in the key
        cross.W_k.weight[64, ANSWER + EOS_ID] = EOS_BONUS / (2 * CODE)
        cross.W_k.weight[64, ANSWER + VOCAB + EOS_ID] = -EOS_BONUS / (2 * CODE)
        ids = torch.arange(VOCAB)
        cross.W_v.weight[ids, ANSWER + ids] = 1 / (2 * CODE)  # head 0's value: the source token, one-hot
        cross.W_v.weight[ids, ANSWER + VOCAB + ids] = -1 / (2 * CODE)
        cross.W_o.weight[ANSWER + ids, ids] = CODE  # written as a token code into the answer block
        cross.W_o.weight[ANSWER + VOCAB + ids, ids] = -CODE

        # After the cross-attention the decoder vector has norm² 192 + 2·8² = 320; its LayerNorm scales it by
        # √(192/320). The generator reads the answer block back at ANSWER_LOGIT, and adds at most ±NOISE from a
        # seeded table over the position and previous-token blocks.
        kept = (D_MODEL / (D_MODEL + 2 * CODE**2)) ** 0.5
        generator = model.generator.weight
        generator[ids, ANSWER + ids] = ANSWER_LOGIT / (2 * CODE * kept)
        generator[ids, ANSWER + VOCAB + ids] = -ANSWER_LOGIT / (2 * CODE * kept)
        table = torch.rand(VOCAB, 64 + 2 * VOCAB, generator=torch.Generator().manual_seed(0)) * 2 - 1
        # |noise| <= Σ_pos |w|·1·kept + (|w_v| + |w_V+v|)·CODE·kept for the one token in the previous block
        bound = (table[:, :64].abs().sum(1) + 2 * CODE * table[:, 64:].abs().amax(1)) * kept
        table = table * (NOISE / bound.max())
        generator[:, POS] = table[:, :64]
        generator[:, PREVIOUS : PREVIOUS + 2 * VOCAB] = table[:, 64:]
    return model
