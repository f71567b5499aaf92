"""The hand-set copy model (tests/scripted_model.py) does what its construction says, so the decoding tests that use
it may assert exact outputs: at every step the source token at that position has the largest logit by a margin, and
beyond the source's EOS the model says EOS, in float32, bfloat16 and int8."""

from __future__ import annotations

import pytest
import torch
from decoding_support import pad, random_sources
from scripted_model import ANSWER_LOGIT, NOISE, POSITIONS, build_copy_model, copy_model, scripted_config

from dotformer.data.tokenize.tokenizers import BOS_ID, EOS_ID
from dotformer.decoding.quantization import quantize_int8

pytestmark = pytest.mark.numerical  # run again under another vector unit by scripts/test.sh


def teacher_forced_logits(model: torch.nn.Module, sources: list[list[int]], targets: list[list[int]]) -> torch.Tensor:
    """(B, T, V) float32 logits of ``targets`` (BOS prepended) given ``sources`` (EOS appended)."""
    with torch.no_grad():
        src = pad([s + [EOS_ID] for s in sources])
        tgt = pad([[BOS_ID, *t] for t in targets])
        return model(src, tgt).float()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8"])
def test_each_step_names_the_source_token_at_its_position_by_a_margin(dtype: str) -> None:
    model = build_copy_model().eval()
    model = model.bfloat16() if dtype == "bfloat16" else quantize_int8(model) if dtype == "int8" else model
    g = torch.Generator().manual_seed(0)
    sources = random_sources(64, g, max_len=12)
    longest = max(map(len, sources))
    # any previous tokens (random ones): the answer depends on the position only; at least 4 steps beyond the EOS
    targets = random_sources(64, g, min_len=longest + 4, max_len=longest + 4)
    logits = teacher_forced_logits(model, sources, targets)
    for source, row in zip(sources, logits, strict=True):
        expected = torch.tensor([*source, *[EOS_ID] * (longest + 5 - len(source))])  # then EOS, at every step
        top2 = row.topk(2, dim=-1)
        assert torch.equal(top2.indices[:, 0], expected)
        margin = top2.values[:, 0] - top2.values[:, 1]
        assert margin.min() >= ANSWER_LOGIT - 2 * NOISE - 0.2  # 4, less rounding (bfloat16, int8)


def test_the_log_probabilities_depend_on_the_previous_token() -> None:
    """So the copy model also checks that a cache follows its beam: a different prefix gives other scores."""
    logits = teacher_forced_logits(copy_model(), [[4, 5, 6], [4, 5, 6]], [[4, 5, 6], [4, 7, 6]])
    log_probs = logits.log_softmax(-1)
    assert log_probs[0, 2, 6] != log_probs[1, 2, 6]  # the same answer, after a5 or after a7
    assert (log_probs[:, 2].argmax(-1) == 6).all()


def test_the_model_is_a_checkpointable_transformer_with_a_learned_table(tmp_path) -> None:
    from dotformer.checkpoint import load_checkpoint, save_checkpoint
    from dotformer.data.tokenize.tokenizer_files import train_tokenizer

    tokenizer = train_tokenizer("symbol", ["a0 a1 a2 a3 a4 a5 a6 a7"])
    save_checkpoint(tmp_path / "copy", copy_model(), tokenizer, tokenizer, {"task": "synthetic"})
    loaded = load_checkpoint(tmp_path / "copy")
    assert loaded.config == scripted_config() and loaded.config.max_len == POSITIONS
    for name, tensor in copy_model().state_dict().items():
        assert torch.equal(loaded.model.state_dict()[name], tensor), name
