"""The decoding loop's speed levers give the same numbers as the plain path: the padding mask left out when it hides
nothing, and a model already in eval mode left alone."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from decoding_support import pad, random_model, single_thread, sources_of_mixed_lengths

from dotformer.data.tokenize.tokenizers import BOS_ID
from dotformer.decoding import DecodeConfig, decode_batch
from dotformer.decoding.incremental import IncrementalDecoder, attention_mask, encode_source, inference

pytestmark = pytest.mark.numerical  # run again under another vector unit by scripts/test.sh


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    with single_thread():
        yield


def test_the_padding_mask_is_left_out_only_when_it_hides_nothing() -> None:
    full = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    assert attention_mask(full) is None
    padded = full.clone()
    padded[1, ..., 4] = False
    assert attention_mask(padded) is padded


def decode_steps(model, src: torch.Tensor, mask_left_out: bool, count: int = 20) -> torch.Tensor:
    """``count`` greedy steps' (count, N, V) log-probabilities, with the padding mask left out or not."""
    with inference(model):
        source = encode_source(model, src, DecodeConfig(strategy="greedy"))
        decoder = IncrementalDecoder(model, source.memory, source.src_mask)
        if not mask_left_out:
            decoder.attend_mask = source.src_mask
        tokens, out = torch.full((src.size(0),), BOS_ID), []
        for _ in range(count):
            log_probs = decoder.step(tokens)
            out.append(log_probs)
            tokens = log_probs[:, 3:].argmax(-1) + 3
    return torch.stack(out)


def test_the_levers_give_bitwise_the_same_log_probabilities() -> None:
    model = random_model(vocab=12, seed=2)
    unpadded = pad([[5, 6, 7, 2], [8, 9, 4, 2], [4, 4, 5, 2]])  # the mask hides nothing: it is left out
    mixed = pad(sources_of_mixed_lengths())
    for src in (unpadded, mixed):
        plain = decode_steps(model, src, mask_left_out=False)
        fast = decode_steps(model, src, mask_left_out=True)
        assert torch.equal(plain, fast)


@pytest.mark.parametrize("strategy", ["greedy", "beam", "sample"])
def test_decoding_leaves_an_eval_model_in_eval_mode_and_equal_outputs_either_way(strategy: str) -> None:
    model = random_model(vocab=12, seed=4)
    src = pad(sources_of_mixed_lengths())
    config = DecodeConfig(strategy=strategy, max_len_b=8, seed=0)
    model.eval()
    from_eval = decode_batch(model, src, config)
    assert not any(m.training for m in model.modules())
    model.train()
    from_training = decode_batch(model, src, config)
    assert model.training and all(m.training for m in model.modules())
    assert [[h.tokens for h in hs] for hs in from_eval] == [[h.tokens for h in hs] for hs in from_training]
    assert [[h.log_probs for h in hs] for hs in from_eval] == [[h.log_probs for h in hs] for hs in from_training]
