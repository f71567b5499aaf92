"""A language model exported to CTranslate2's decoder-only spec: ``ctranslate2.Generator`` gives dotformer's logits
and its greedy continuation, across line ends; a run exports through ``dotformer export --to ct2``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from tolerance import logits_tolerance

from dotformer import ModelConfig, Transformer
from dotformer.data.tokenize.tokenizers import BOS_ID, EOS_ID, PAD_ID
from dotformer.decoding.config import generation_config
from dotformer.decoding.generate import generate
from dotformer.errors import ConfigError

pytestmark = pytest.mark.numerical  # run again under another vector unit by scripts/test.sh

ctranslate2 = pytest.importorskip("ctranslate2")

V = 17
STREAM = [5, 6, 7, EOS_ID, 8, 9, 10, 11, 12, EOS_ID, 13, 14, 15, 16, EOS_ID]  # three "lines", repeated
VARIANTS = [
    {},  # the paper's: post-LN, ReLU, sinusoidal positions, tied generator
    {"norm_first": True, "positional": "learned", "activation": "gelu", "tie_output": False},
    {"norm_first": True, "activation": "silu", "generator_bias": True, "tie_output": False},
]


def fitted_model(**overrides) -> Transformer:
    """A tiny decoder-only model fitted briefly to a repeating stream of three lines (greedy output varies)."""
    torch.manual_seed(0)
    config = ModelConfig.preset("tiny", src_vocab_size=V, tgt_vocab_size=V, arch="decoder-only", max_len=48)
    model = Transformer(config.replace(dropout=0.0, **overrides))
    stream = torch.tensor(STREAM * 3)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(40):
        start = step % len(STREAM)
        window = stream[start : start + 25][None]  # (1, 25)
        logits = model.generator(model.decode(window[:, :-1]).hidden)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), window[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    if model.generator.bias is not None:
        with torch.no_grad():
            model.generator.bias.normal_(0, 0.1)
    return model.eval()


def exported(model: Transformer, directory: Path):
    from dotformer.export.ct2 import id_vocabulary
    from dotformer.export.ct2_lm import export_language_model

    export_language_model(model, directory)
    return ctranslate2.Generator(str(directory), device="cpu"), id_vocabulary(V)


@pytest.mark.parametrize("overrides", VARIANTS)
def test_the_generator_gives_dotformers_logits_and_greedy_text(tmp_path: Path, overrides: dict) -> None:
    from dotformer.export.ct2 import ids_to_tokens, tokens_to_ids

    model = fitted_model(**overrides)
    generator, vocabulary = exported(model, tmp_path / "ct2")
    prompts = [[EOS_ID, 5, 6], [EOS_ID, 13, 14, 15, 16, EOS_ID, 5]]
    for prompt in prompts:
        logits = np.array(generator.forward_batch([ids_to_tokens(prompt, vocabulary)]))  # (1, T, V)
        with torch.no_grad():
            expected = model.generator(model.decode(torch.tensor([prompt])).hidden)  # (1, T, V)
        real = [i for i in range(V) if i not in (PAD_ID, BOS_ID)]  # PAD and BOS may be suppressed by the export
        tolerance = logits_tolerance(model.config, expected)  # CTranslate2's order of the decoder's sums
        np.testing.assert_allclose(logits[..., real], expected.numpy()[..., real], atol=tolerance, rtol=0)
        results = generator.generate_batch(
            [ids_to_tokens(prompt, vocabulary)],
            max_length=20,
            include_prompt_in_result=False,
            end_token=[],  # run on across line ends, as dotformer's greedy decoding does
            suppress_sequences=[["<pad>"], ["<s>"]],  # tokens dotformer never generates
        )
        theirs = tokens_to_ids(results[0].sequences[0], vocabulary)
        (ours,) = generate(model, prompt, generation_config(20, "greedy"), window=48)
        assert theirs == ours.tokens
        assert EOS_ID in ours.tokens and len(set(ours.tokens)) > 3  # the test can tell: line ends, varied tokens


def test_a_language_model_run_exports_through_the_cli(tmp_path: Path) -> None:
    from dotformer.cli import main
    from dotformer.export.ct2 import ids_to_tokens, tokens_to_ids

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"and {word} was good\n" for word in ["light", "water", "earth"] * 100))
    run = tmp_path / "run"
    flags = ["--preset", "tiny", "--block-size", "16", "--max-tokens", "64", "--no-progress", "--max-steps", "2"]
    assert main(["train", "--task", "lm", "--data", str(corpus), "--out", str(run), *flags]) == 0
    out = tmp_path / "ct2"
    assert main(["export", "--to", "ct2", str(run), str(out)]) == 0
    vocabulary = json.loads((out / "vocabulary.json").read_text())
    from dotformer.checkpoint import load_checkpoint

    loaded = load_checkpoint(run, device="cpu")
    tokenizer = loaded.tgt_tokenizer
    assert vocabulary[4:] == [tokenizer.id_to_token(i) for i in range(4, len(vocabulary))]  # the pieces
    generator = ctranslate2.Generator(str(out), device="cpu")
    prompt = [EOS_ID, *tokenizer.encode("and")]
    (result,) = generator.generate_batch(
        [ids_to_tokens(prompt, vocabulary)], max_length=8, include_prompt_in_result=False, end_token=[],
        suppress_sequences=[["<pad>"], ["<s>"]],
    )  # fmt: skip
    (ours,) = generate(loaded.model, prompt, generation_config(8, "greedy"), window=16)
    assert tokens_to_ids(result.sequences[0], vocabulary) == ours.tokens


def test_what_the_spec_cannot_hold_is_refused(tmp_path: Path) -> None:
    from dotformer.export.ct2_lm import language_model_spec

    model = fitted_model()
    with pytest.raises(ConfigError, match="has 3 tokens"):
        language_model_spec(model, ["<pad>", "<s>", "</s>"])
    with pytest.raises(ConfigError, match="embedding LayerNorms"):
        language_model_spec(Transformer(model.config.replace(embedding_norm=True)))
    translation = Transformer(ModelConfig.preset("tiny", src_vocab_size=V, tgt_vocab_size=V))
    with pytest.raises(ConfigError, match="decoder-only"):
        language_model_spec(translation)
