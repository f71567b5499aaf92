"""The heads: what the stack's last vectors become, one head per family of the lesson's models.

The stacks end with one D-wide vector per position: the decoder's hidden states, or the encoder's memory. A head turns
them into the scores its family is trained on (``ModelConfig.head``):

=========  ==============================  ============================================  =================
head       trained for                     scores                                        shape
=========  ==============================  ============================================  =================
generator  translation, language models,   ``logits = h · W_genᵀ`` over the V tokens     (B, T, V)
           masked language models          (§3.4; W_gen is the embedding's, tied)
sequence   classification: one label per   ``logits = W_c · dropout(pool(h)) + b_c``     (B, C)
           text
token      tagging: a label per token      ``logits = W_c · dropout(h_s) + b_c``         (B, S, C)
=========  ==============================  ============================================  =================

The generator is the paper's linear layer (:attr:`dotformer.model.Transformer.generator`); the two classifiers are
here. ``pool`` reads one vector per text from the encoder's memory: the first position's (``"cls"``: BERT's
``[CLS]``, which dotformer's encoder reads as BOS), or the mean over the text's real positions (``"mean"``: padding
excluded, as sentence-transformers pools). A classifier is a fresh linear layer of C = ``ModelConfig.num_labels``
outputs on an encoder that may come pretrained (a masked language model's, or an imported BERT's). Shapes follow the
legend in :mod:`dotformer.attention`; C is the number of labels.
"""

from __future__ import annotations

from torch import Tensor, nn

from dotformer.errors import ConfigError

HEADS = ("generator", "sequence", "token")
POOLINGS = ("cls", "mean")


def pool(memory: Tensor, keep: Tensor, pooling: str) -> Tensor:
    """One vector per text from the encoder's memory.

    Args:
        memory: (B, S, D) float encoder output.
        keep: (B, S) bool, True at the real tokens (right-padded: each row's first token is real).
        pooling: ``"cls"``: the first position's vector, ``e = m_0``; ``"mean"``: the average over the real tokens,
            ``e = Σ_s m_s · keep_s / Σ_s keep_s`` (the special tokens the model reads count as real tokens).

    Returns:
        (B, D) in ``memory``'s dtype.

    Raises:
        ConfigError: an unknown pooling.
    """
    if pooling not in POOLINGS:
        raise ConfigError(f"pooling {pooling!r} is not one of {', '.join(POOLINGS)}")
    if pooling == "cls":
        return memory[:, 0]  # (B, D)
    summed = memory.masked_fill(~keep.unsqueeze(-1), 0.0).sum(dim=1)  # (B, D) over the real tokens only
    return summed / keep.sum(dim=1, keepdim=True).clamp(min=1).to(memory.dtype)  # (B, D)


class SequenceClassifier(nn.Module):
    """One label per text: ``logits = W_c · dropout(pool(memory)) + b_c``.

    Args:
        d_model: D. num_labels: C. pooling: ``"cls"`` or ``"mean"`` (:func:`pool`). dropout: on the pooled vector.

    Shape:
        memory (B, S, D), keep (B, S) bool -> logits (B, C).
    """

    def __init__(self, d_model: int, num_labels: int, pooling: str, dropout: float) -> None:
        super().__init__()
        self.pooling = pooling
        self.dropout = nn.Dropout(dropout)
        self.proj = nn.Linear(d_model, num_labels)  # W_c (C, D), b_c (C,)

    def forward(self, memory: Tensor, keep: Tensor) -> Tensor:
        return self.proj(self.dropout(pool(memory, keep, self.pooling)))  # (B, C)


class TokenClassifier(nn.Module):
    """A label per token: ``logits_s = W_c · dropout(memory_s) + b_c`` at every position s it is given.

    Args:
        d_model: D. num_labels: C. dropout: on the memory.

    Shape:
        memory (B, S, D), or (N, D) of selected or packed positions -> logits (B, S, C), or (N, C).
    """

    def __init__(self, d_model: int, num_labels: int, dropout: float) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.proj = nn.Linear(d_model, num_labels)  # W_c (C, D), b_c (C,)

    def forward(self, memory: Tensor) -> Tensor:
        return self.proj(self.dropout(memory))  # (..., C)


__all__ = ["HEADS", "POOLINGS", "SequenceClassifier", "TokenClassifier", "pool"]
