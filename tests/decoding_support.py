"""Helpers of the decoding tests: a tiny random Transformer, copy-task sources, padding, teacher-forced log-probs.

The copy model, whose outputs the tests know exactly, has weights set by hand: :mod:`scripted_model`.
Not a test module: ``tests/test_decoding*.py``, ``tests/test_api.py`` and ``tests/test_cli_decode.py`` import it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import torch
from scripted_model import VOCAB as COPY_VOCAB
from torch import Tensor

from dotformer import ModelConfig, Transformer
from dotformer.data.tokenize.tokenizers import BOS_ID, EOS_ID, PAD_ID
from dotformer.decoding import Hypothesis

COPY_SYMBOLS = range(4, 12)  # token ids of the copy task's symbols (after PAD, BOS, EOS, UNK)
COPY_MAX_LEN = 6  # longest copy-task sequence (symbols, EOS not counted)


def tiny_config(vocab: int = 16, **overrides: object) -> ModelConfig:
    """A 2+2-layer, 32-wide model without dropout; ``vocab`` target tokens, and at least the copy task's sources."""
    base = dict(d_model=32, num_heads=4, d_ff=64, num_encoder_layers=2, num_decoder_layers=2, dropout=0.0)
    sizes = dict(src_vocab_size=max(vocab, COPY_VOCAB), tgt_vocab_size=vocab)
    return ModelConfig(**{**sizes, **base, **overrides})  # type: ignore[arg-type]


def random_model(vocab: int = 16, seed: int = 0, **overrides: object) -> Transformer:
    """A tiny randomly initialised model (eval mode); its outputs are long and arbitrary, which tests length limits."""
    torch.manual_seed(seed)
    return Transformer(tiny_config(vocab, **overrides)).eval()


def pad(rows: list[list[int]]) -> Tensor:
    """Right-pad id lists with PAD into a (B, S) int64 tensor."""
    width = max(len(r) for r in rows)
    return torch.tensor([r + [PAD_ID] * (width - len(r)) for r in rows], dtype=torch.int64)


def random_sources(count: int, generator: torch.Generator, min_len: int = 1, max_len: int = 7) -> list[list[int]]:
    """``count`` random copy-task sources (symbol ids, no EOS)."""
    lengths = torch.randint(min_len, max_len + 1, (count,), generator=generator).tolist()
    low, high = COPY_SYMBOLS.start, COPY_SYMBOLS.stop
    return [torch.randint(low, high, (n,), generator=generator).tolist() for n in lengths]


@contextlib.contextmanager
def single_thread() -> Iterator[None]:
    """Run tiny models on one CPU thread (as fast as two for them, and far faster on a busy machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def teacher_forced_log_probs(model: Transformer, source: list[int], generated: list[int]) -> list[float]:
    """The model's log-probability of each generated token (EOS included if present) given the true prefix."""
    with torch.no_grad():
        logits = model(torch.tensor([source]), torch.tensor([[BOS_ID, *generated[:-1]]]))[0]  # (T, V)
    lp = logits.log_softmax(-1)
    return lp.gather(1, torch.tensor(generated)[:, None]).squeeze(1).tolist()


def with_eos(h: Hypothesis) -> list[int]:
    """The generated sequence of a hypothesis: its tokens, then EOS if it finished."""
    return h.tokens + ([EOS_ID] if h.finished else [])


def sources_of_mixed_lengths(seed: int = 3, count: int = 5) -> list[list[int]]:
    """``count`` copy-task sources of 1 to COPY_MAX_LEN symbols, each ending with EOS."""
    g = torch.Generator().manual_seed(seed)
    return [s + [EOS_ID] for s in random_sources(count, g, min_len=1, max_len=COPY_MAX_LEN)]


def set_logits_checkpoint(path: Path, scores: list[float], symbols: str) -> Path:
    """A checkpoint whose every decoding step has the logits ``scores``: the generator ignores the decoder (zero
    weights) and its bias is ``scores``; the vocabulary is the four specials and ``symbols`` (space-separated), so
    ``len(scores)`` must be 4 + their count. Written to ``path``; returns it."""
    from dotformer.checkpoint import save_checkpoint
    from dotformer.data.tokenize.tokenizer_files import train_tokenizer

    model = random_model(vocab=len(scores), tie_output=False, generator_bias=True)
    with torch.no_grad():
        model.generator.weight.zero_()
        model.generator.bias.copy_(torch.tensor(scores))
    vocabulary = train_tokenizer("symbol", [symbols])
    save_checkpoint(path, model, vocabulary, vocabulary, {"task": "synthetic"})
    return path
