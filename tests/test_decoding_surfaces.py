"""One decoding surface: the CLI, the Python API and the server accept the same options, from one definition."""

from __future__ import annotations

import argparse
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from decoding_support import random_model, single_thread

import dotformer
from dotformer import ModelConfig, Transformer
from dotformer.api.endpoint import FIELDS
from dotformer.checkpoint import save_checkpoint
from dotformer.cli.translate import add_arguments
from dotformer.data.tokenize.tokenizer_files import train_tokenizer
from dotformer.decoding.options import OPTION_NAMES, REQUEST_NAMES

SYMBOLS = "a0 a1 a2 a3 a4 a5 a6 a7"
TIMEOUT_S = 30
NOT_DECODING = {
    "config", "batch_size", "max_tokens", "max_input_length", "progress", "details", "scores",
}  # fmt: skip


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    with single_thread():
        yield


def test_the_three_surfaces_accept_the_same_options() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    cli = {action.dest for action in parser._actions} & set(OPTION_NAMES)
    api = set(REQUEST_NAMES) - NOT_DECODING - {"attention"}
    assert cli == set(OPTION_NAMES)
    assert api == set(OPTION_NAMES)
    assert set(FIELDS) - {"texts", "scores"} == set(OPTION_NAMES)  # scores: what comes back, as the API's keyword


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("surfaces")
    symbols = train_tokenizer("symbol", [SYMBOLS])
    model = random_model(vocab=12, seed=5, generator_bias=True)
    with torch.no_grad():
        model.generator.bias[3] = -100.0  # no <unk> in the outputs
    save_checkpoint(root / "mt", model, symbols, symbols, {"task": "synthetic"})
    torch.manual_seed(0)
    config = ModelConfig(
        arch="decoder-only", src_vocab_size=12, tgt_vocab_size=12, d_model=32, num_heads=4, d_ff=64,
        num_encoder_layers=0, num_decoder_layers=2, dropout=0.0, max_len=64,
    )  # fmt: skip
    save_checkpoint(root / "lm", Transformer(config).eval(), symbols, symbols, {"task": "lm"})
    return {"mt": root / "mt", "lm": root / "lm"}


@pytest.fixture(scope="module")
def servers(checkpoints: dict[str, Path]) -> Iterator[dict[str, Any]]:
    from dotformer.api.serve import TranslationServer

    running = {
        name: TranslationServer(dotformer.load(path, device="cpu"), port=0) for name, path in checkpoints.items()
    }
    for server in running.values():
        server.start()  # served from a thread
    yield running
    for server in running.values():
        server.stop()


def call(url: str, body: Any = None) -> tuple[int, dict[str, Any]]:
    data = None if body is None else json.dumps(body).encode("utf-8")
    request = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_the_server_decodes_as_the_api_with_every_option(servers: dict[str, Any], checkpoints: dict[str, Path]) -> None:
    translator = dotformer.load(checkpoints["mt"], device="cpu")
    texts = ["a1 a2", "a3 a4 a5"]
    options: dict[str, Any] = dict(strategy="sample", n_best=2, seed=3, top_k=4, temperature=0.8, max_len_b=5)
    options.update(min_len_b=2, alignments=True, prefix=["a6", None])
    status, reply = call(servers["mt"].url, {"texts": texts, **options})
    expected = translator.translate(texts, **options)
    assert status == 200
    for item, result in zip(reply["translations"], expected, strict=True):
        assert [h["text"] for h in item["hypotheses"]] == [h.text for h in result.hypotheses]
        assert item["hypotheses"][0]["alignment"] == [list(p) for p in result.hypotheses[0].alignment]
        assert item["hypotheses"][0]["score"] == pytest.approx(result.hypotheses[0].score)
    assert reply["translations"][0]["text"].startswith("a6")


@pytest.mark.parametrize(
    "body, fragment",
    [
        ({"texts": ["a1"], "seed": 1}, '"seed" only applies to "strategy": "sample", not "beam"'),
        ({"texts": ["a1"], "min_len_b": -1}, "min_len_b must be a non-negative integer"),
        ({"texts": ["a1"], "alignments": 1}, '"alignments" must be true or false'),
        ({"texts": ["a1"], "prefix": "a1"}, '"prefix" must be a list of 1 strings or nulls'),
        ({"texts": ["a1"], "max_len_b": 5000}, '"max_len_b" must be at most 1024'),
        (
            {"texts": ["a1"], "strategy": "sample", "seed": 2**70},
            "seed must be an integer in [0, 2**63 - 1], got 1180591620717411303424",
        ),
    ],
)
def test_bad_options_are_one_line_errors(servers: dict[str, Any], body: Any, fragment: str) -> None:
    status, reply = call(servers["mt"].url, body)
    assert status == 400 and fragment in reply["error"] and "\n" not in reply["error"]


def test_get_root_describes_the_api(servers: dict[str, Any]) -> None:
    status, reply = call(servers["mt"].url.replace("/api/translate", "/"))
    assert status == 200
    assert [o["name"] for o in reply["translate_options"]] == list(OPTION_NAMES)
    endpoints = {"POST /api/translate", "POST /api/generate", "POST /api/classify", "GET /api/health", "GET /"}
    endpoints |= {"GET /health", "GET /ready", "GET /metrics", "POST /api/embed"}
    endpoints |= {"POST /v1/completions", "POST /v1/chat/completions", "GET /v1/models"}
    assert endpoints == set(reply["endpoints"])


def test_generate_endpoint_serves_language_models(servers: dict[str, Any], checkpoints: dict[str, Path]) -> None:
    lm = dotformer.load(checkpoints["lm"], device="cpu")
    url = servers["lm"].url  # what serve announces: a language model's endpoint
    assert url == f"http://{servers['lm'].server_address[0]}:{servers['lm'].server_address[1]}/api/generate"
    body = {"prompt": "a1 a2", "max_new_tokens": 6, "n": 2, "seed": 4, "top_k": 5}
    status, reply = call(url, body)
    assert status == 200 and reply == {"texts": lm.generate("a1 a2", max_new_tokens=6, n=2, seed=4, top_k=5)}
    status, reply = call(url, {"prompt": "a1", "n": 0})
    assert status == 400 and '"n" must be an integer from 1 to 16' in reply["error"]
    status, reply = call(url, {"prompt": "a1", "seed": 2**70})
    assert status == 400 and reply["error"] == "seed must be an integer in [0, 2**63 - 1], got 1180591620717411303424"
    status, reply = call(url, {"prompt": "a1", "strategy": "beam", "n": 4, "beam_size": 2})
    assert (
        status == 400 and reply["error"] == "n=4 cannot exceed beam_size=2: beam search keeps only beam_size hypotheses"
    )
    status, reply = call(servers["mt"].url.replace("/api/translate", "/api/generate"), {"prompt": "a1"})
    assert status == 400 and "language model" in reply["error"]


def test_generate_takes_beam_searchs_ranking_and_stopping_rule(
    servers: dict[str, Any], checkpoints: dict[str, Path]
) -> None:
    """``length_penalty`` and ``beam_stop`` of POST /api/generate: listed at GET /, decoded as the Python API decodes
    them, a bad value a 400 with one line naming the field."""
    status, reply = call(servers["lm"].url.replace("/api/generate", "/"))
    assert {"length_penalty", "beam_stop"} <= set(reply["endpoints"]["POST /api/generate"]["fields"])
    settings = dict(max_new_tokens=6, strategy="beam", n=2, beam_size=3, length_penalty=1.5, beam_stop="exact")
    status, reply = call(servers["lm"].url, {"prompt": "a1 a2", **settings})
    lm = dotformer.load(checkpoints["lm"], device="cpu")
    assert status == 200 and reply == {"texts": lm.generate("a1 a2", **settings)}
    for body, error in [
        ({"strategy": "beam", "beam_stop": "best"}, "beam_stop must be one of finished, exact, got 'best'"),
        ({"strategy": "beam", "beam_stop": 1}, '"beam_stop" must be a string, got 1'),
        ({"strategy": "beam", "length_penalty": "1"}, '"length_penalty" must be a number, got "1"'),
        ({"strategy": "beam", "length_penalty": -0.5}, "length_penalty must be a finite number >= 0, got -0.5"),
        ({"length_penalty": 1}, '"length_penalty" only applies to "strategy": "beam", not "sample"'),
        (
            {"strategy": "greedy", "beam_size": 2, "beam_stop": "exact"},
            '"beam_size", "beam_stop" only apply to "strategy": "beam", not "greedy"',
        ),
    ]:
        status, reply = call(servers["lm"].url, {"prompt": "a1", **body})
        assert status == 400 and reply == {"error": error}


def test_every_surface_takes_the_controls(servers: dict[str, Any], checkpoints: dict[str, Path]) -> None:
    """The controls of the options table through /api/translate (a string or a list), /api/generate and
    /v1/completions decode as the Python API does; a bad value or an unknown token is a 400 naming it."""
    translator = dotformer.load(checkpoints["mt"], device="cpu")
    controls: dict[str, Any] = dict(repetition_penalty=1.7, no_repeat_ngram_size=2, suppress=["a1", "a2 a3"])
    for end_token in ("a4,a5", ["a4", "a5"]):
        options = dict(strategy="greedy", min_len_b=3, end_token=end_token, **controls)
        status, reply = call(servers["mt"].url, {"texts": ["a1 a2", "a3 a4 a5"], **options})
        assert status == 200
        expected = translator.translate(["a1 a2", "a3 a4 a5"], **options)
        assert [item["text"] for item in reply["translations"]] == expected
    for body, fragment in [
        ({"texts": ["a1"], "repetition_penalty": -1}, "repetition_penalty must be a number from 1e-06 to 1e+06"),
        ({"texts": ["a1"], "repetition_penalty": 1e-40}, "repetition_penalty must be a number from 1e-06 to 1e+06"),
        ({"texts": ["a1"], "no_repeat_ngram_size": 10**22}, "no_repeat_ngram_size must be at most 2**63 - 1"),
        ({"texts": ["a1"], "end_token": ""}, "end_token: an empty token in ''"),
        ({"texts": ["a1"], "suppress": "a1,"}, "suppress: an empty token in 'a1,'"),
        ({"texts": ["a1"], "suppress": 3}, '"suppress" must be a string or a list of strings, got 3'),
        ({"texts": ["a1"], "end_token": "zz"}, "end_token: 'zz' is not a token of the model's target vocabulary"),
    ]:
        status, reply = call(servers["mt"].url, body)
        assert status == 400 and fragment in reply["error"] and "\n" not in reply["error"], reply
    lm = dotformer.load(checkpoints["lm"], device="cpu")
    settings = dict(max_new_tokens=8, strategy="greedy", repetition_penalty=1.5, suppress="a2", end_token=["a6"])
    status, reply = call(servers["lm"].url, {"prompt": "a1 a2", **settings})
    assert status == 200 and reply == {"texts": [lm.generate("a1 a2", **settings)]}
    status, reply = call(servers["lm"].url, {"prompt": "a1", "no_repeat_ngram_size": -1})
    assert status == 400 and "no_repeat_ngram_size must be a non-negative integer" in reply["error"]
    completions = servers["lm"].url.replace("/api/generate", "/v1/completions")
    body = {"prompt": "a1 a2", "max_tokens": 8, "temperature": 0, "repetition_penalty": 1.5, "suppress": ["a2"]}
    status, reply = call(completions, body)
    expected = lm.generate("a1 a2", max_new_tokens=8, strategy="greedy", repetition_penalty=1.5, suppress=["a2"])
    assert status == 200 and reply["choices"][0]["text"] == expected
    for field, value, message in [
        ("repetition_penalty", 1e9, "repetition_penalty must be a number from 1e-06 to 1e+06 (1 = off), got 1e9"),
        ("no_repeat_ngram_size", -1, "no_repeat_ngram_size must be a non-negative integer (0 = off), got -1"),
        ("end_token", "a1,,a2", "end_token: an empty token in 'a1,,a2'"),
    ]:  # named as the request names them, as /api/generate names them
        status, reply = call(completions, {"prompt": "a1", field: value})
        assert status == 400 and reply["error"]["message"].startswith(message.split(", got")[0]), reply
        assert "DecodeConfig" not in reply["error"]["message"]
