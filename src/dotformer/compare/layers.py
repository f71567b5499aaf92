"""The layers compared, (B, n, D) -> (B, n, D): an LSTM, a GRU or multi-head self-attention, and the paper's
formulas for their FLOPs and for the bytes autograd keeps for backward (the analytic columns)."""

from __future__ import annotations

from torch import Tensor, nn

from dotformer.compare.config import FLOAT_BYTES, LAYER_KINDS
from dotformer.errors import ConfigError
from dotformer.multihead import MultiHeadAttention


class SequenceLayer(nn.Module):
    """One layer mapping (B, n, D) to (B, n, D): an LSTM, a GRU, or multi-head self-attention.

    ``attention`` uses the reference attention (the (B, H, n, n) weights are materialised, as in the formula);
    ``attention-fused`` uses PyTorch's fused kernel (on CPU a flash-attention kernel that never stores the weights).
    """

    def __init__(self, kind: str, d_model: int, num_heads: int) -> None:
        super().__init__()
        self.kind = kind
        self.rnn: nn.Module | None = None
        self.attention: MultiHeadAttention | None = None
        if kind == "lstm":
            self.rnn = nn.LSTM(d_model, d_model, batch_first=True)
        elif kind == "gru":
            self.rnn = nn.GRU(d_model, d_model, batch_first=True)
        elif kind in ("attention", "attention-fused"):
            self.attention = MultiHeadAttention(d_model, num_heads)
        else:
            raise ConfigError(f"unknown layer {kind!r}; choose from {', '.join(LAYER_KINDS)}")

    @property
    def is_recurrent(self) -> bool:
        """True for the LSTM and GRU."""
        return self.rnn is not None

    def forward(self, x: Tensor) -> Tensor:
        """(B, n, D) -> (B, n, D)."""
        if self.rnn is not None:
            return self.rnn(x)[0]  # (B, n, D)
        assert self.attention is not None
        return self.attention(x, need_weights=self.kind == "attention").output  # (B, n, D)


def analytic_flops(kind: str, n: int, d_model: int, batch_size: int = 1) -> int:
    """Forward FLOPs of the layer's matrix products (2 per multiply-add), the paper's "complexity per layer".

    attention: Q, K, V, W_o projections 4·(2·n·D²) + Q·Kᵀ 2·n²·D + weights·V 2·n²·D  -> O(n²·D + n·D²);
    LSTM: 4 gates × (input and hidden product) × 2·n·D² = 16·n·D²;  GRU: 3 gates -> 12·n·D²  -> O(n·D²).
    """
    D = d_model
    if kind in ("attention", "attention-fused"):
        per = 8 * n * D * D + 4 * n * n * D
    elif kind == "lstm":
        per = 16 * n * D * D
    else:
        per = 12 * n * D * D
    return batch_size * per


def analytic_saved_bytes(kind: str, n: int, d_model: int, num_heads: int, batch_size: int = 1) -> int:
    """Approximate float32 bytes autograd keeps for the backward pass (parameters and the input excluded).

    attention (reference): the (H, n, n) softmax weights, plus Q, K, V and the merged heads (4·n·D) -> O(H·n²);
    attention (fused): Q, K, V, the attention output (4·n·D) and one log-sum-exp per row and head (H·n) -> O(n);
    LSTM: per position the gate activations and the states of the step, 7·D, as PyTorch's generic kernel keeps them
    (the default oneDNN kernel keeps a larger workspace: the measured column shows it) -> O(n·D);
    GRU: per position the 3 input-side and 3 hidden-side gate products and the previous hidden state, 7·D -> O(n·D).
    """
    D, H = d_model, num_heads
    floats = {
        "attention": H * n * n + 4 * n * D,
        "attention-fused": 4 * n * D + H * n,
        "lstm": 7 * n * D,
        "gru": 7 * n * D,
    }[kind]
    return FLOAT_BYTES * batch_size * floats
