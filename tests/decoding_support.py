"""Small models for the decoding tests: a tiny random Transformer and a tiny Transformer trained on the copy task.

Not a test module: ``tests/test_decoding*.py`` and ``tests/test_cli_decode.py`` import it.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor

from dotformer import ModelConfig, Transformer
from dotformer.data.tokenizers import BOS_ID, EOS_ID, PAD_ID
from dotformer.decoding import Hypothesis

COPY_SYMBOLS = range(4, 12)  # token ids of the copy task's symbols (after PAD, BOS, EOS, UNK)
COPY_VOCAB = 12
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


EXACT_COPY_STEPS = 1200  # enough for exact_copy_model() to copy every text the decoding tests ask for


@functools.lru_cache(maxsize=2)
def copy_model(steps: int = 300) -> Transformer:
    """A tiny model trained for ``steps`` Adam steps to copy its input (a few seconds on 2 CPU cores); eval mode.

    At 300 steps it copies about 95 % of length 1-6 sequences of 8 symbols exactly (its outputs end with EOS);
    which ones it misses depends on the CPU's float rounding, so tests that need exact copies of given texts use
    :func:`exact_copy_model`.
    """
    with single_thread():
        return train_copy_model(steps)


def exact_copy_model() -> Transformer:
    """The copy model trained for ``EXACT_COPY_STEPS`` steps: 99 % of random length 1-6 sequences copied exactly.

    With 300 steps an AMD EPYC VM got "a4 a7 a2 a6 a6 a1" for "a4 a7 a2 a5 a6 a1" where an Intel Xeon copied it;
    with 800, session 11's EPYC got "a3 a3 a4 a4" for "a3 a3 a0 a4" (6 decoding tests failed), 1,200 copies all:
    tests that assert exact copies of fixed texts need this margin on every CPU.
    """
    return copy_model(EXACT_COPY_STEPS)


def train_copy_model(steps: int) -> Transformer:
    """Train a fresh tiny model on the copy task for ``steps`` steps of 32 sequences."""
    torch.manual_seed(0)
    model = Transformer(tiny_config(COPY_VOCAB))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9)
    generator = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(steps):
        seqs = random_sources(32, generator, max_len=COPY_MAX_LEN)
        src = pad([s + [EOS_ID] for s in seqs])  # (B, S)
        tgt_in = pad([[BOS_ID] + s for s in seqs])  # (B, T)
        tgt_out = pad([s + [EOS_ID] for s in seqs])  # (B, T)
        logits = model(src, tgt_in)  # (B, T, V)
        loss = F.cross_entropy(logits.reshape(-1, COPY_VOCAB), tgt_out.reshape(-1), ignore_index=PAD_ID)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


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
