"""The Python API: ``dotformer.load(path).translate(texts)``, on checkpoints written by the tests.

Checked against the library it wraps (:func:`dotformer.decoding.translate`,
:func:`dotformer.decoding.attention_maps.attention_weights`) and against the ``dotformer translate`` command on the same
checkpoint.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import CLI_TIMEOUT_S
from decoding_support import random_model, single_thread, tiny_config
from scripted_model import copy_model

import dotformer
from dotformer import Transformer
from dotformer.api import TranslationResult, Translator
from dotformer.checkpoint import load_checkpoint, save_checkpoint
from dotformer.cli import main
from dotformer.data.tokenize.tokenizer_files import train_tokenizer
from dotformer.data.tokenize.tokenizers import EOS_ID
from dotformer.decoding import DecodeConfig
from dotformer.decoding.inputs import InputTooLongError, UnknownTokenWarning
from dotformer.decoding.translate import translate
from dotformer.errors import ConfigError, ShapeError

SYMBOLS = "a0 a1 a2 a3 a4 a5 a6 a7"
COPY_TEXTS = ["a1 a2", "a5 a6 a7", "a3 a3 a0 a4", "a7 a6 a5 a4 a3", "a2 a0 a1 a1", "a4 a7 a2 a5 a6 a1"]
LETTERS = "transformer attention"


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    with single_thread():
        yield


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The hand-set copy model (symbol tokenizer) and an untrained CMUdict-like model (lower-case letters)."""
    root = tmp_path_factory.mktemp("api")
    symbols = train_tokenizer("symbol", [SYMBOLS])
    save_checkpoint(root / "copy", copy_model(), symbols, symbols, {"task": "synthetic", "dataset": "copy"})
    letters, phones = train_tokenizer("char", [LETTERS]), train_tokenizer("symbol", ["T R AE1 N S F AO1 M ER0"])
    torch.manual_seed(0)
    g2p = Transformer(tiny_config(phones.vocab_size, src_vocab_size=letters.vocab_size)).eval()
    save_checkpoint(root / "g2p", g2p, letters, phones, {"task": "g2p", "dataset": "cmudict"})
    return {"copy": root / "copy", "g2p": root / "g2p"}


def test_five_lines(checkpoints: dict[str, Path]) -> None:
    model = dotformer.load(checkpoints["copy"], device="cpu")
    assert model.translate("a1 a2") == "a1 a2"
    assert model.translate(COPY_TEXTS) == COPY_TEXTS
    best_two = model.translate(["a3 a1"], beam=4, n_best=2)
    assert len(best_two) == 1 and len(best_two[0]) == 2 and best_two[0][0] == "a3 a1"
    assert isinstance(model, Translator) and model.task == "synthetic" and model.device == "cpu"
    assert model.src_tokenizer.vocab_size == model.model.config.src_vocab_size and model.dtype == "float32"


def test_the_api_gives_what_the_cli_prints(checkpoints: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    model = dotformer.load(checkpoints["copy"], device="cpu")
    texts = [*COPY_TEXTS, "a7 a7 a1 a0 a2 a3", ""]
    for argv, kwargs in [([], {}), (["--beam", "2"], {"beam": 2}), (["--strategy", "greedy"], {"strategy": "greedy"})]:
        assert main(["translate", "--checkpoint", str(checkpoints["copy"]), *argv, *texts]) == 0
        printed = capsys.readouterr().out.split("\n")
        assert printed == [*model.translate(texts, **kwargs), ""]
    assert main(["translate", "--checkpoint", str(checkpoints["copy"]), "--n-best", "3", *texts[:3]]) == 0
    rows = [line.split(" ||| ") for line in capsys.readouterr().out.splitlines()]
    results = model.translate(texts[:3], n_best=3, details=True)
    expected = [(str(r.id), h.text, f"{h.score:.4f}") for r in results for h in r.hypotheses]
    assert [tuple(row) for row in rows] == expected


@pytest.mark.numerical
def test_details_are_the_library_results(checkpoints: dict[str, Path]) -> None:
    model = dotformer.load(checkpoints["copy"], device="cpu", engine="torch")  # the library's own search
    results = model.translate(COPY_TEXTS[:3], n_best=2, details=True)
    library = translate(load_checkpoint(checkpoints["copy"]), COPY_TEXTS[:3], DecodeConfig(n_best=2))
    assert all(isinstance(r, TranslationResult) for r in results)
    assert [r.id for r in results] == [0, 1, 2] and [r.source for r in results] == COPY_TEXTS[:3]
    assert [r.hypotheses for r in results] == library  # texts, token ids, scores and log-probabilities
    assert [r.text for r in results] == COPY_TEXTS[:3] and all(r.finished for r in results)
    assert all(r.attention is None and r.unknown_symbols == 0 for r in results)
    for r in results:  # each score is the length-penalised sum of its log-probabilities
        h = r.hypotheses[0]
        assert h.score == pytest.approx(sum(h.log_probs) / ((5 + len(h.log_probs)) / 6) ** 0.6, rel=1e-6)
    single = model.translate("a1 a2", details=True)
    assert isinstance(single, TranslationResult) and single.text == "a1 a2"
    assert single.score == pytest.approx(results[0].score, rel=1e-5)  # alone, not padded in a batch of 3: rounding


@pytest.mark.numerical
def test_attention_on_request_is_that_of_the_best_output(checkpoints: dict[str, Path]) -> None:
    from dotformer.decoding.attention_maps import attention_weights

    model = dotformer.load(checkpoints["copy"], device="cpu")
    result = model.translate("a1 a2 a3", attention=True)
    assert isinstance(result, TranslationResult) and result.attention is not None
    expected = attention_weights(load_checkpoint(checkpoints["copy"]), "a1 a2 a3", target=result.text)
    assert result.attention.src_tokens == ["a1", "a2", "a3", "</s>"]
    for kind in ("encoder", "decoder_self", "cross"):
        np.testing.assert_allclose(result.attention.kind(kind), expected.kind(kind), atol=1e-6)
    np.testing.assert_allclose(result.attention.cross.sum(-1), 1.0, atol=1e-5)  # each query's weights sum to 1


def test_attention_tokens_are_the_beam_output(tmp_path: Path) -> None:
    symbols = train_tokenizer("symbol", ["a0 a1 a2 a3 a4 a5 a6 a7"])
    save_checkpoint(tmp_path / "random", random_model(vocab=12, seed=1), symbols, symbols, {"task": "synthetic"})
    model = dotformer.load(tmp_path / "random", device="cpu")
    result = model.translate("a1 a2", beam=4, max_len_b=6, details=True, attention=True)
    assert result.text != model.translate("a1 a2", strategy="greedy", max_len_b=6)  # the beam found another output
    assert result.attention.out_tokens == [*result.text.split(), "</s>"]
    assert result.attention.out_tokens[:-1] == [symbols.decode([i]) for i in result.hypotheses[0].tokens]


def test_inputs_are_normalised_and_unknown_symbols_warn(checkpoints: dict[str, Path]) -> None:
    model = dotformer.load(checkpoints["g2p"], device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownTokenWarning)
        assert model.translate(["Transformer", "ATTENTION"]) == model.translate(["transformer", "attention"])
    with pytest.warns(UnknownTokenWarning, match=r"3 input symbol\(s\) in 1 of 2 input\(s\).*'x\?z'"):
        results = model.translate(["Tone", "x?z"], strategy="greedy", details=True)
    assert [r.unknown_symbols for r in results] == [0, 3]
    assert not any(r.finished for r in results)  # an untrained model runs to the maximum length: cut, and says so
    assert all(len(r.hypotheses[0].tokens) == len(r.source) + 1 + 50 for r in results)  # a·(|x| + EOS) + b


def test_dtypes_and_devices(checkpoints: dict[str, Path]) -> None:
    for dtype in ("bfloat16", "int8"):
        model = dotformer.load(checkpoints["copy"], device="cpu", dtype=dtype)
        assert model.translate(COPY_TEXTS) == COPY_TEXTS  # its margin (a logit 4 ahead) outlasts the rounding
        assert model.dtype == dtype
    assert next(dotformer.load(checkpoints["copy"], "cpu", "bfloat16").model.parameters()).dtype == torch.bfloat16
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="dtype float16 needs a CUDA device"):
            dotformer.load(checkpoints["copy"], dtype="float16")
        with pytest.raises(ConfigError, match="CUDA is not available"):
            dotformer.load(checkpoints["copy"], device="cuda")
    with pytest.raises(ConfigError, match="dtype 'float64' is not one of"):
        dotformer.load(checkpoints["copy"], dtype="float64")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="'tpu:x' is not a device"):
        dotformer.load(checkpoints["copy"], device="tpu:x")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_decoding_gives_the_cpu_outputs(checkpoints: dict[str, Path]) -> None:
    cpu = dotformer.load(checkpoints["copy"], device="cpu").translate(COPY_TEXTS, details=True)
    for dtype in ("float32", "bfloat16", "float16"):
        gpu = dotformer.load(checkpoints["copy"], device="cuda", dtype=dtype)
        assert gpu.device.type == "cuda"
        results = gpu.translate(COPY_TEXTS, details=True)
        assert [r.text for r in results] == [r.text for r in cpu]
        tolerance = 1e-4 if dtype == "float32" else 5e-2
        assert [r.score for r in results] == pytest.approx([r.score for r in cpu], abs=tolerance)


def test_bad_requests_are_named(checkpoints: dict[str, Path]) -> None:
    model = dotformer.load(checkpoints["copy"], device="cpu")
    with pytest.raises(InputTooLongError, match="input 2 has 6 tokens") as caught:
        model.translate(["a1", "a1 a2 a3 a4 a5"], max_input_length=5)
    assert caught.value.index == 1 and isinstance(caught.value, ShapeError)
    with pytest.raises(ConfigError, match="n_best=5 cannot exceed beam_size=4"):
        model.translate("a1", n_best=5)
    with pytest.raises(ConfigError, match="a string or a sequence of strings"):
        model.translate([1, 2])  # type: ignore[list-item]
    assert model.translate([]) == []


def test_importing_dotformer_loads_no_checkpoint_machinery() -> None:
    code = (
        "import sys, dotformer\n"
        "assert 'dotformer.api' not in sys.modules and 'dotformer.checkpoint' not in sys.modules\n"
        "from dotformer import load, Translator\n"
        "assert load.__module__ == 'dotformer.api.translator' and 'load' in dotformer.__all__\n"
        "print('ok')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=CLI_TIMEOUT_S, check=False
    )
    assert result.returncode == 0 and result.stdout == "ok\n", result.stderr


def test_empty_and_blank_inputs_give_empty_outputs_in_the_api_and_serve(checkpoints: dict[str, Path]) -> None:
    from dotformer.api.endpoint import translate_request
    from dotformer.decoding.batch import decode_batch
    from dotformer.decoding.translate import pad_batch

    model = dotformer.load(checkpoints["g2p"], device="cpu")  # untrained: a decoded bare EOS is a made-up output
    (made_up,) = decode_batch(model.model, pad_batch([[EOS_ID]]), DecodeConfig(max_len_b=4))
    assert made_up[0].tokens  # so the empty outputs below cannot come from the model
    assert model.translate(["", "   ", " \t "], max_len_b=4) == ["", "", ""]
    assert model.translate("", n_best=2, max_len_b=4) == [""]
    for result in model.translate(["", "  "], details=True, max_len_b=4, attention=True):
        assert result.text == "" and result.finished and result.unknown_symbols == 0 and result.attention is None
        assert [(h.tokens, h.score) for h in result.hypotheses] == [([], 0.0)]
    reply = asyncio.run(translate_request(model, {"texts": ["", " "]}))
    assert reply == {
        "translations": [{"text": "", "score": 0.0, "finished": True, "unknown_symbols": 0}] * 2,
    }
