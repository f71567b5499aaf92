"""Padding and causal masks, with one convention: boolean, ``True`` = may attend, broadcastable to (B, H, T, S).

The lesson writes the causal mask additively (0 where allowed, -inf where not) and applies padding masks with
``masked_fill(mask == 0, -inf)``; a boolean "allowed" mask carries the same information, is what
``torch.nn.functional.scaled_dot_product_attention`` takes, and cannot be added twice by mistake.
"""

from __future__ import annotations

import torch
from torch import Tensor

from dotformer.errors import ShapeError


def padding_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """Mask out the PAD keys of a batch (paper §3.2.3: attention must not look at padding).

    Args:
        tokens: (B, S) integer token ids.
        pad_id: the PAD token id.

    Returns:
        (B, 1, 1, S) bool: True where the key is a real token. Broadcasts over heads and queries.

    Raises:
        ShapeError: ``tokens`` is not 2-D.
    """
    if tokens.dim() != 2:
        raise ShapeError(f"padding_mask expects token ids of shape (B, S), got {tuple(tokens.shape)}")
    return (tokens != pad_id)[:, None, None, :]  # (B, 1, 1, S)


def causal_mask(
    query_len: int,
    key_len: int | None = None,
    device: torch.device | str | None = None,
    sliding_window: int | None = None,
) -> Tensor:
    """The decoder's "no peeking at the future" mask (paper §3.2.3), optionally within a sliding window.

    Query i may attend to key j iff j <= i + (key_len - query_len): with a cache holding ``key_len - query_len``
    earlier positions the queries are the last ``query_len`` positions (bottom-right alignment). With a window W
    (sliding-window attention: Child et al. 2019, Beltagy et al. 2020; Mistral, Gemma's local layers) it also needs
    i' - W < j, i' = i + key_len - query_len the query's position: each query sees its last W positions, itself
    included (HF's convention).

    Args:
        query_len: T, number of queries.
        key_len: S, number of keys (default T).
        device: where to build the mask.
        sliding_window: W >= 1, or None for no window.

    Returns:
        (T, S) bool, True = may attend; broadcasts to (B, H, T, S).

    Raises:
        ShapeError: negative lengths, key_len < query_len, or a window below 1.
    """
    key_len = query_len if key_len is None else key_len
    if query_len < 0 or key_len < query_len:
        raise ShapeError(f"causal_mask needs 0 <= query_len <= key_len, got query_len={query_len}, key_len={key_len}")
    mask = torch.ones(query_len, key_len, dtype=torch.bool, device=device).tril(diagonal=key_len - query_len)
    if sliding_window is None:
        return mask  # (T, S)
    if sliding_window < 1:
        raise ShapeError(f"causal_mask needs sliding_window >= 1, got {sliding_window}")
    return mask.triu(diagonal=key_len - query_len - sliding_window + 1)  # (T, S) and j > i' - W


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """AND of the given masks (None means "allow everything"); the result broadcasts to every input's shape.

    Raises:
        ShapeError: the masks' shapes do not broadcast together (the message names them).
    """
    result: Tensor | None = None
    for mask in masks:
        if mask is not None:
            if result is not None:
                try:
                    torch.broadcast_shapes(result.shape, mask.shape)
                except RuntimeError:
                    raise ShapeError(
                        f"masks of shapes {tuple(result.shape)} and {tuple(mask.shape)} do not broadcast together"
                    ) from None
            result = mask if result is None else result & mask
    return result


def check_right_padded(tokens: Tensor, pad_id: int, name: str = "tokens") -> None:
    """Raise :class:`ShapeError` unless every row of ``tokens`` has its PADs after its real tokens (right padding).

    Positions count from the first column, so a left-padded row would give its real tokens the wrong positions
    (``[PAD, PAD, 5, 6]`` would place 5 at position 2, not 0) and change the outputs: dotformer refuses it.
    One reduction and a host sync: call it once per batch, at the API edge. Inside a ``torch.compile`` graph it is an
    asynchronous assert instead (a RuntimeError with the same first words, and no graph break).

    Args:
        tokens: (B, L) integer ids. pad_id: the PAD id. name: what to call ``tokens`` in the message.

    Raises:
        ShapeError: ``tokens`` is not 2-D, or a row has a PAD before a real token (the message names the row).
        RuntimeError: the latter, inside a compiled graph.
    """
    if tokens.dim() != 2:
        raise ShapeError(f"{name} must be (B, L) token ids, got {tuple(tokens.shape)}")
    keep = tokens != pad_id  # (B, L)
    gaps = (keep[:, 1:] & ~keep[:, :-1]).any(dim=1)  # (B,) a real token right after a PAD
    if torch.compiler.is_compiling():  # inside a torch.compile graph: the same check, without a host sync
        torch._assert_async(~gaps.any(), f"{name} must be right-padded (PAD id {pad_id} only after the real tokens)")
        return
    if bool(gaps.any()):
        row = int(gaps.nonzero()[0, 0])
        raise ShapeError(
            f"{name} must be right-padded (PAD id {pad_id} only after the real tokens), but row {row} has PAD "
            f"before a real token: {tokens[row].tolist()}; left padding would shift every position"
        )
