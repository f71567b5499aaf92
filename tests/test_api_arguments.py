"""The Python API refuses, at its edge and in one line, what it used to take silently or fail on from deep inside."""

from __future__ import annotations

import pytest
import torch

import dotformer
from dotformer import ModelConfig, Transformer
from dotformer.api import ArgumentTypeError
from dotformer.checkpoint import save_checkpoint
from dotformer.data.tokenize.tokenizer_files import train_tokenizer
from dotformer.decoding import DecodeConfig
from dotformer.errors import ConfigError


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> dotformer.Translator:
    texts = ["a1 a2 a3", "a4 a5 a6 a7", "a8 a9"]
    src_tok, tgt_tok = train_tokenizer("symbol", texts), train_tokenizer("symbol", texts)
    torch.manual_seed(7)
    config = ModelConfig.preset("tiny", src_vocab_size=src_tok.vocab_size, tgt_vocab_size=tgt_tok.vocab_size)
    path = tmp_path_factory.mktemp("api") / "ck"
    save_checkpoint(path, Transformer(config).eval(), src_tok, tgt_tok, {"task": "synthetic"})
    return dotformer.load(path, device="cpu")


@pytest.mark.parametrize(
    "texts, message",
    [
        (None, "translate() takes a string or a sequence of strings, got NoneType"),
        (123, "translate() takes a string or a sequence of strings, got int"),
        (b"a1", "translate() takes a string or a sequence of strings, got bytes"),
        (["a1", None], "translate() takes a string or a sequence of strings; item 1 is NoneType"),
    ],
)
def test_translate_refuses_what_is_not_text(model: dotformer.Translator, texts: object, message: str) -> None:
    with pytest.raises(TypeError) as caught:
        model.translate(texts)  # type: ignore[arg-type]
    assert str(caught.value) == message and isinstance(caught.value, ConfigError)


@pytest.mark.parametrize(
    "texts, message",
    [
        (None, "embed() takes a string or a sequence of strings, got NoneType"),
        (["a1", 7], "embed() takes a string or a sequence of strings; item 1 is int"),
    ],
)
def test_embed_refuses_what_is_not_text(model: dotformer.Translator, texts: object, message: str) -> None:
    """The same check as translate's, named for embed (None is refused in one line, not a traceback from list())."""
    with pytest.raises(ArgumentTypeError) as caught:
        model.embed(texts)  # type: ignore[arg-type]
    assert str(caught.value) == message


def test_load_refuses_none() -> None:
    with pytest.raises(ArgumentTypeError, match=r"^load\(\) takes the path of a checkpoint .*got NoneType$"):
        dotformer.load(None)  # type: ignore[arg-type]


def test_search_arguments_of_another_strategy_are_refused(model: dotformer.Translator) -> None:
    """As ``--beam`` with ``--strategy greedy`` and ``--temperature`` with beam search are refused by the CLI."""
    with pytest.raises(ConfigError, match=r"beam only applies to strategy='beam', not strategy='greedy'"):
        model.translate("a1", beam=8, strategy="greedy")
    with pytest.raises(ConfigError, match=r"temperature only applies to strategy='sample', not strategy='beam'"):
        model.translate("a1", temperature=0.5)
    with pytest.raises(ConfigError, match=r"top_k, seed only apply to strategy='sample', not strategy='greedy'"):
        model.translate("a1", strategy="greedy", top_k=3, seed=1)
    with pytest.raises(ConfigError, match="config= replaces the search arguments; leave out beam"):
        model.translate("a1", beam=2, config=DecodeConfig())
    # the defaults, and each argument with its own strategy, still work
    assert model.translate("a1 a2", beam=4) == model.translate("a1 a2")
    assert model.translate("a1 a2", strategy="greedy") == model.translate("a1 a2", config=DecodeConfig("greedy"))
    sampled = model.translate("a1 a2", strategy="sample", temperature=0.5, seed=3)
    assert sampled == model.translate("a1 a2", config=DecodeConfig("sample", temperature=0.5, seed=3))
