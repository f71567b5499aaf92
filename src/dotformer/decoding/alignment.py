"""Hard alignments: for each output token, the source token its decoding step attended to most.

The cross-attention of decoder layer l (paper §3.2.3, "encoder-decoder attention") gives, at the step that generated
output token j, a distribution over the source positions for each head. Averaged over the H heads, its argmax is the
source token aligned to j (fairseq's ``--print-alignment``, OpenNMT's ``-report_align``). The default layer is the
last one (-1): it is the one closest to the output. The source's EOS is never an alignment target unless the source
holds nothing else, and the output's EOS is not aligned.

The weights come from one teacher-forced pass over the finished output, which equals what the cached search computed
step by step (the decoder is causal). For G2P these are the letter-to-phone correspondences; for translation, word
alignments as the model sees them. Shapes: R outputs (rows), S source length, T output length + 1 (BOS first).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dotformer.data.tokenize.tokenizers import BOS_ID, PAD_ID, UNK_ID
from dotformer.errors import ConfigError

if TYPE_CHECKING:
    import torch

    from dotformer.model import Transformer

Alignment = list[tuple[int, int]]  # (source index, output index) pairs, 0-based, one per output token


def check_alignment_layer(model: Transformer | Any, layer: int) -> int:
    """The 0-based index of decoder layer ``layer`` of ``model`` (or of anything with its ``config``, a checkpoint's
    files); negative counts from the end: -1 is the last.

    Raises:
        ConfigError: no such layer (the message gives the model's number of decoder layers).
    """
    count = model.config.num_decoder_layers
    if not -count <= layer < count:
        raise ConfigError(
            f"alignment layer {layer} does not exist: this model has {count} decoder layers (0 to {count - 1}, "
            f"or -1 for the last)"
        )
    return layer % count


def hard_alignments(
    model: Transformer, sources: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]], layer: int = -1
) -> list[Alignment]:
    """Align each output token to a source token (see the module docstring).

    Args:
        model: an encoder-decoder :class:`Transformer` (an ensemble: its first model).
        sources: per row, the source ids ending with EOS.
        outputs: per row, the output ids (no BOS, no EOS).
        layer: the decoder layer whose cross-attention is read (-1: the last).

    Returns:
        Per row, ``[(source index, output index), ...]`` for output indices 0 .. len(output) - 1.

    Raises:
        ConfigError: ``layer`` is not a decoder layer of the model.
    """
    import torch

    from dotformer.decoding.ensemble import Ensemble
    from dotformer.decoding.incremental import inference

    if isinstance(model, Ensemble):  # an ensemble aligns with its first model
        model = model.models[0]
    index = check_alignment_layer(model, layer)
    if not sources:
        return []
    device = next(model.parameters()).device
    src = right_padded(sources, device)  # (R, S)
    tgt = right_padded([[BOS_ID, *out] for out in outputs], device)  # (R, T)
    with inference(model):
        src_mask = model.source_mask(src)  # (R, 1, 1, S)
        memory = model.encode(src, src_mask).memory  # (R, S, D)
        weights = model.decode(tgt, memory, src_mask, need_weights=True).cross_weights  # per layer (R, H, T, S)
        mean = weights[index].float().mean(dim=1)  # (R, T, S) averaged over the heads
        lengths = torch.tensor([len(s) for s in sources], device=device)  # (R,) source length, EOS included
        positions = torch.arange(src.size(1), device=device)  # (S,)
        eos = (positions[None, :] == (lengths - 1)[:, None]) & (lengths[:, None] > 1)  # (R, S) the EOS, if not alone
        best = mean.masked_fill(eos[:, None, :], float("-inf")).argmax(dim=-1).tolist()  # (R, T)
    return [[(best[r][j], j) for j in range(len(out))] for r, out in enumerate(outputs)]


def right_padded(rows: Sequence[Sequence[int]], device: torch.device) -> torch.Tensor:
    """Id lists as a (R, L) int64 tensor right-padded with PAD, L = the longest list."""
    import torch

    width = max(len(row) for row in rows)
    return torch.tensor([[*row, *[PAD_ID] * (width - len(row))] for row in rows], dtype=torch.int64, device=device)


def format_alignment(alignment: Alignment) -> str:
    """fairseq's ``A-`` line body: ``"S-T S-T ..."`` (source index - output index, 0-based)."""
    return " ".join(f"{s}-{t}" for s, t in alignment)


def check_replace_unk(loaded: Any) -> None:
    """Raise unless both tokenizers of ``loaded`` (anything with ``src_tokenizer`` and ``tgt_tokenizer``) split text
    into pieces that can be copied (char or symbol vocabularies).

    Raises:
        ConfigError: a byte-level BPE tokenizer (it has no <unk> to replace).
    """
    from dotformer.data.tokenize.tokenizers import VocabularyTokenizer

    for side, tokenizer in (("source", loaded.src_tokenizer), ("target", loaded.tgt_tokenizer)):
        if not isinstance(tokenizer, VocabularyTokenizer):
            raise ConfigError(
                f"replace_unk needs char or symbol tokenizers; the {side} tokenizer is {tokenizer.kind}, which has "
                f"no <unk> to replace"
            )


def unknowns_replaced(loaded: Any, source: str, tokens: Sequence[int], alignment: Alignment) -> str:
    """The text of output ``tokens`` with each <unk> replaced by the piece of ``source`` it aligns to.

    Args:
        loaded: anything with ``src_tokenizer`` and ``tgt_tokenizer`` (char or symbol vocabularies: see
            :func:`check_replace_unk`).
        source: the source text as it was tokenised.
        tokens: the output's ids (no BOS, no EOS).
        alignment: the output's alignment (:func:`hard_alignments`, or the CTranslate2 engine's).
    """
    target, source_pieces = loaded.tgt_tokenizer, loaded.src_tokenizer.split(source)  # the source without EOS
    pieces = [target.id_to_token(t) for t in tokens]
    for s, t in alignment:
        if tokens[t] == UNK_ID and s < len(source_pieces):
            pieces[t] = source_pieces[s]
    return str(target.join(pieces))
