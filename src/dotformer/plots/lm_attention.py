"""Attention maps of a language model: the causal self-attention of the decoder alone over a text.

A decoder-only model has one kind of map, ``decoder_self``: each token of the text (the query row) attends to itself
and the tokens before it (the key columns), so every map is zero above the diagonal, the lesson's causal mask made
visible. The text is read as ``dotformer generate`` reads a prompt (a line end first: the start of a line), and the
row labels predicted are the model's most likely next tokens. The result is an
:class:`~dotformer.plots.attention.AttentionMaps` whose ``encoder`` and ``cross`` maps are empty, so
:func:`~dotformer.plots.attention.plot_attention` draws it with ``kinds=("decoder_self",)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from dotformer.errors import ConfigError
from dotformer.plots.attention import AttentionMaps, token_label

LM_MAP_KINDS = ("decoder_self",)


def lm_attention_weights(loaded: Any, text: str) -> AttentionMaps:
    """Every causal self-attention map of a decoder-only model over ``text`` (teacher-forced, one pass).

    Args:
        loaded: a :class:`dotformer.checkpoint.LoadedCheckpoint` of a language model.
        text: the text to read (its line breaks are line ends).

    Returns:
        :class:`AttentionMaps`: ``decoder_self`` (L, H, T, T) float32 equal to
        ``model.decode(ids, need_weights=True).self_weights`` (row 0, stacked over layers); ``encoder`` (L, H, 0, 0)
        and ``cross`` (L, H, T, 0) empty; ``out_tokens`` the argmax next token at each position.

    Raises:
        ConfigError: the model is not decoder-only, or the text is longer than its window.
    """
    from dotformer.api.generation import encode_prompt, generated_text

    model = loaded.model
    if model.config.arch != "decoder-only":
        raise ConfigError(f"language-model attention maps need a decoder-only model, this one is {model.config.arch}")
    tokenizer = loaded.tgt_tokenizer
    ids = encode_prompt(tokenizer, text)
    window = loaded.context_window
    if len(ids) > window:
        raise ConfigError(f"the text has {len(ids)} tokens (a line end first); this model reads at most {window}")
    device = next(model.parameters()).device
    tgt = torch.tensor([ids], dtype=torch.int64, device=device)  # (1, T)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            decoded = model.decode(tgt, need_weights=True)
            logits = model.generator(decoded.hidden)[0].float()  # (T, V)
    finally:
        model.train(was_training)
    maps = torch.stack([w[0] for w in decoded.self_weights]).float().cpu().numpy()  # (L, H, T, T)
    L, H, T, _ = maps.shape
    predicted = logits.argmax(dim=-1).tolist()
    labels = [token_label(tokenizer, i) for i in ids]
    return AttentionMaps(
        source_text=text,
        output_text=text + generated_text(tokenizer, predicted[-1:]),  # the text and its likeliest next token
        src_tokens=[],
        tgt_tokens=labels,
        out_tokens=[token_label(tokenizer, i) for i in predicted],
        encoder=np.zeros((L, H, 0, 0), dtype=np.float32),
        decoder_self=maps,
        cross=np.zeros((L, H, T, 0), dtype=np.float32),
        logits=logits.cpu().numpy(),
        next_ids=tuple(predicted),
    )
