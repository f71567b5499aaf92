"""dotformer.api.serve: POST /api/translate gives what dotformer.load(...).translate gives, refuses bad requests with
one JSON error line (and keeps serving), and ``dotformer serve`` runs from the outside on a random free port of
127.0.0.1, every call bounded in time, and stops gracefully on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import CLI_TIMEOUT_S, Cli

from dotformer import ModelConfig, Transformer
from dotformer.checkpoint import save_checkpoint
from dotformer.data.tokenize.tokenizer_files import train_tokenizer
from dotformer.engines.choice import ctranslate2_installed as ct2_installed

TIMEOUT_S = CLI_TIMEOUT_S  # every wait is bounded, by a limit only a hung server reaches


@pytest.fixture(scope="module")
def checkpoint_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random model with symbol tokenizers (its outputs are arbitrary but deterministic)."""
    texts = ["a1 a2 a3", "a4 a5 a6 a7", "a8 a9"]
    src_tok, tgt_tok = train_tokenizer("symbol", texts), train_tokenizer("symbol", texts)
    torch.manual_seed(7)
    config = ModelConfig.preset("tiny", src_vocab_size=src_tok.vocab_size, tgt_vocab_size=tgt_tok.vocab_size)
    path = tmp_path_factory.mktemp("serve") / "ck"
    save_checkpoint(path, Transformer(config).eval(), src_tok, tgt_tok, {"task": "synthetic"})
    return path


@pytest.fixture(scope="module")
def translator(checkpoint_dir: Path) -> Any:
    import dotformer

    return dotformer.load(checkpoint_dir, device="cpu")


@pytest.fixture(scope="module")
def server(translator: Any) -> Iterator[Any]:
    from dotformer.api.serve import TranslationServer

    with TranslationServer(translator, port=0) as server:  # any free port on 127.0.0.1, served from a thread
        yield server


def post(url: str, body: bytes | str | Any, raw: bool = False) -> tuple[int, dict[str, Any]]:
    data = body if raw else json.dumps(body).encode("utf-8")
    if isinstance(data, str):
        data = data.encode("utf-8")
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_listens_on_loopback_only_by_default(server: Any) -> None:
    assert server.server_address[0] == "127.0.0.1"
    assert server.url.startswith("http://127.0.0.1:") and server.url.endswith("/api/translate")


def test_translate_equals_the_python_api(server: Any, translator: Any) -> None:
    texts = ["a1 a2 a3", "a5 a6", "", "a9 a8 a7 a6"]
    status, reply = post(server.url, {"texts": texts, "beam": 3})
    assert status == 200
    expected = translator.translate(texts, beam=3, details=True)
    assert [t["text"] for t in reply["translations"]] == [r.text for r in expected]
    assert [t["score"] for t in reply["translations"]] == pytest.approx([r.score for r in expected], abs=1e-6)
    assert [t["finished"] for t in reply["translations"]] == [r.finished for r in expected]
    assert all("hypotheses" not in t for t in reply["translations"])

    status, greedy = post(server.url, {"texts": texts, "strategy": "greedy"})
    assert status == 200
    assert [t["text"] for t in greedy["translations"]] == translator.translate(texts, strategy="greedy")

    status, nbest = post(server.url, {"texts": texts[:2], "beam": 4, "n_best": 3})
    assert status == 200
    expected_nbest = translator.translate(texts[:2], beam=4, n_best=3)
    assert [[h["text"] for h in t["hypotheses"]] for t in nbest["translations"]] == expected_nbest
    assert [t["text"] for t in nbest["translations"]] == [hyps[0] for hyps in expected_nbest]


def test_unknown_symbols_are_counted_not_dropped(server: Any) -> None:
    status, reply = post(server.url, {"texts": ["a1 zz qq", "a2"]})
    assert status == 200
    assert [t["unknown_symbols"] for t in reply["translations"]] == [2, 0]


@pytest.mark.parametrize(
    "body, fragment",
    [
        ([], "JSON object"),
        ({"text": "a1"}, "unknown field(s) text"),
        ({}, '"texts" must be a non-empty list'),
        ({"texts": []}, '"texts" must be a non-empty list'),
        ({"texts": "a1 a2"}, '"texts" must be a non-empty list'),
        ({"texts": ["a1", 3]}, '"texts"[1] is not a string'),
        ({"texts": ["a1"] * 65}, "at most 64"),
        ({"texts": ["a1 " * 1000]}, "at most 2000"),
        ({"texts": ["a1"], "beam": 0}, '"beam" must be an integer from 1 to 16, got 0'),
        ({"texts": ["a1"], "beam": 17}, "from 1 to 16"),
        ({"texts": ["a1"], "beam": "4"}, '"beam" must be an integer'),
        ({"texts": ["a1"], "beam": True}, '"beam" must be an integer'),
        ({"texts": ["a1"], "beam": 2, "n_best": 3}, '"n_best"=3 cannot exceed "beam"=2'),
        ({"texts": ["a1"], "strategy": "topk"}, '"strategy" must be one of greedy, beam, sample'),
        ({"texts": ["a1"], "strategy": "greedy", "beam": 4}, "greedy"),
        ({"texts": ["a1"], "scores": 1}, '"scores" must be true or false, got 1'),
    ],
)
def test_bad_requests_get_one_json_error(server: Any, body: Any, fragment: str) -> None:
    status, reply = post(server.url, body)
    assert status == 400
    assert set(reply) == {"error"} and fragment in reply["error"] and "\n" not in reply["error"]


def test_bad_bodies_and_routes(server: Any) -> None:
    from dotformer.api.serve import MAX_BODY_BYTES

    status, reply = post(server.url, b"{not json", raw=True)
    assert status == 400 and "not UTF-8 JSON" in reply["error"]
    status, reply = post(server.url, b"\xff\xfe", raw=True)
    assert status == 400 and "not UTF-8 JSON" in reply["error"]
    status, reply = post(server.url, b" " * (MAX_BODY_BYTES + 1), raw=True)
    assert status == 413 and str(MAX_BODY_BYTES) in reply["error"]
    status, reply = post(server.url.replace("/api/translate", "/api/nothing"), {"texts": ["a1"]})
    assert status == 404 and "no such endpoint" in reply["error"]
    status, reply = call_get(server.url)
    assert status == 405 and reply == {"error": "/api/translate takes POST, not GET"}
    with urllib.request.urlopen(server.url.replace("/api/translate", "/api/health"), timeout=TIMEOUT_S) as response:
        health = json.loads(response.read())
    assert health["ok"] is True and health["limits"]["max_texts"] == 64
    # still serving after all of that
    status, reply = post(server.url, {"texts": ["a1 a2"]})
    assert status == 200 and len(reply["translations"]) == 1


def call_get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.parametrize("body", [b"[" * 100_000, b'{"texts": ' + b"[" * 40 + b"]" * 40 + b"}", b"{" * 100_000])
def test_a_deeply_nested_body_is_a_json_error(server: Any, body: bytes) -> None:
    """100,000 nested ``[`` (or ``{``) get one line of JSON (no RecursionError), and so does a valid body nested 41
    deep; the server goes on."""
    status, reply = post(server.url, body, raw=True)
    assert status == 400
    assert reply == {"error": 'the body nests arrays and objects deeper than 32 levels; send {"texts": ["..."]}'}
    assert post(server.url, {"texts": ["a1"], "strategy": "greedy"})[0] == 200


def test_brackets_inside_strings_are_not_nesting(server: Any) -> None:
    status, reply = post(server.url, {"texts": ['\\"' + "[" * 1000 + "{" * 900]})  # a backslash and a quote first
    assert status == 200 and len(reply["translations"]) == 1


def test_too_long_input_for_a_learned_table_is_a_json_error(tmp_path: Path) -> None:
    import dotformer
    from dotformer.api.endpoint import translate_request

    tok = train_tokenizer("symbol", ["a1 a2 a3"])
    torch.manual_seed(0)
    config = ModelConfig.preset(
        "tiny", src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size, positional="learned", max_len=8
    )
    save_checkpoint(tmp_path / "ck", Transformer(config).eval(), tok, tok, {"task": "synthetic"})
    with pytest.raises(dotformer.DotformerError, match="input 1"):
        asyncio.run(translate_request(dotformer.load(tmp_path / "ck", device="cpu"), {"texts": ["a1 " * 20]}))


def test_cli_serve_on_a_free_port(checkpoint_dir: Path, translator: Any, cli: Cli) -> None:
    """``dotformer serve --port 0`` from the outside: it prints its URL, answers, and on SIGTERM stops, says so and
    exits 0."""
    command = cli.command("serve", "--checkpoint", str(checkpoint_dir), "--port", "0")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli.env())
    try:
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.append(process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(TIMEOUT_S)
        assert lines and lines[0].startswith("dotformer serve: POST http://127.0.0.1:"), lines
        url = lines[0].split()[3]
        status, reply = post(url, {"texts": ["a1 a2 a3"], "beam": 2})
        assert status == 200
        assert reply["translations"][0]["text"] == translator.translate("a1 a2 a3", beam=2)
    finally:
        process.terminate()
        out, err = process.communicate(timeout=TIMEOUT_S)
    assert process.returncode == 0, err
    assert out == "dotformer serve: stopped\n" and err == ""


def test_cli_serve_refuses_a_bad_port(checkpoint_dir: Path, cli: Cli) -> None:
    result = cli("serve", "--checkpoint", str(checkpoint_dir), "--port", "70000")
    assert result.returncode == 2
    assert result.stderr.strip() == "dotformer serve: error: --port must be in 0..65535, got 70000"


@pytest.fixture(scope="module")
def kinds(tmp_path_factory: pytest.TempPathFactory, checkpoint_dir: Path) -> dict[str, Path]:
    """A checkpoint of each kind a server may be given: translation (``checkpoint_dir``), language model, classifier."""
    root = tmp_path_factory.mktemp("kinds")
    symbols = train_tokenizer("symbol", ["a1 a2 a3 a4 a5 a6 a7 a8 a9"])
    size = symbols.vocab_size
    torch.manual_seed(3)
    small = dict(d_model=16, num_heads=2, d_ff=32, dropout=0.0, max_len=32)
    lm = ModelConfig(arch="decoder-only", src_vocab_size=size, tgt_vocab_size=size, num_encoder_layers=0,
                     num_decoder_layers=2, **small)  # fmt: skip
    save_checkpoint(root / "lm", Transformer(lm).eval(), symbols, symbols, {"task": "lm"})
    classifier = ModelConfig(arch="encoder-only", src_vocab_size=size, tgt_vocab_size=size, num_encoder_layers=2,
                             num_decoder_layers=0, head="sequence", num_labels=2, **small)  # fmt: skip
    info = {"task": "classify", "labels": ["no", "yes"]}
    save_checkpoint(root / "classifier", Transformer(classifier).eval(), symbols, symbols, info)
    return {"translation": checkpoint_dir, "lm": root / "lm", "classifier": root / "classifier"}


ROUTES = {"translation": "POST /api/translate", "lm": "POST /api/generate", "classifier": "POST /api/classify"}
BODIES = {
    "POST /api/translate": {"texts": ["a1 a2"]},
    "POST /api/generate": {"prompt": "a1", "max_new_tokens": 2},
    "POST /api/classify": {"texts": ["a1 a2"]},
}
ENGINES = ["torch", pytest.param("ctranslate2", marks=pytest.mark.skipif(not ct2_installed(), reason="no ctranslate2"))]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("kind", ["translation", "lm", "classifier"])
def test_a_route_the_model_cannot_serve_is_a_400_naming_the_right_one(
    kinds: dict[str, Path], kind: str, engine: str
) -> None:
    """A language model's /api/translate, a classifier's /api/translate or /api/generate, a translation model's
    /api/classify: 400, one line naming the route that serves the model, on each engine (the converted language
    model on CTranslate2 once answered 500); the model's own route answers 200."""
    import dotformer
    from dotformer.api.serve import TranslationServer

    if engine == "ctranslate2" and kind == "classifier":
        pytest.skip("CTranslate2 runs no classifier (auto serves it on torch)")
    translator = dotformer.load(kinds[kind], device="cpu", engine=engine)
    with TranslationServer(translator, port=0) as server:
        root = server.url.rsplit("/api/", 1)[0]
        for route, body in BODIES.items():
            status, reply = post(root + route.split()[1], body)
            if route == ROUTES[kind]:
                assert status == 200, reply
                continue
            assert status == 400, (route, reply)
            assert reply["error"].endswith(f"send {ROUTES[kind]}"), reply
            assert route.split()[1] in reply["error"] and "\n" not in reply["error"]
            assert "alignment layer" not in reply["error"]


def test_a_failure_logs_its_traceback(translator: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """A bug answers 500 in one line, and the command's log gets the traceback (not only "POST ... failed")."""
    from dotformer.api.serve import TranslationServer
    from dotformer.cli.log import command_logging

    class Failing:
        files, max_input_length = translator.files, translator.max_input_length
        batch_groups = translator.batch_groups
        tgt_tokenizer, path, task = translator.tgt_tokenizer, translator.path, translator.task

        def translate(self, texts: list[str], request: Any) -> Any:
            raise RuntimeError("a bug in the decoder")

    with command_logging("serve"), TranslationServer(Failing(), port=0) as server:  # type: ignore[arg-type]
        status, reply = post(server.url, {"texts": ["a1"]})
    assert status == 500 and "RuntimeError" in reply["error"] and "\n" not in reply["error"]
    err = capsys.readouterr().err
    assert "POST /api/translate failed" in err
    assert "Traceback (most recent call last)" in err and "RuntimeError: a bug in the decoder" in err


def get(url: str, key: str | None = None) -> tuple[int, dict[str, Any], dict[str, str]]:
    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return response.status, json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), dict(error.headers)


def test_health_and_ready(server: Any, translator: Any) -> None:
    root = server.url.rsplit("/api/", 1)[0]
    assert get(root + "/health")[:2] == (200, {"status": "ok"})
    status, reply, _ = get(root + "/ready")
    assert status == 200 and reply == {"ready": True, "model": str(translator.path), "engine": translator.engine}


def test_the_index_shows_each_routes_own_defaults(server: Any) -> None:
    """GET / listed translate's options only, so generate's beam search read translate's length penalty (0.6)."""
    from dotformer.api.endpoint import GENERATE_FIELDS
    from dotformer.api.generation import generation_settings

    status, reply, _ = get(server.url.rsplit("/api/", 1)[0] + "/")
    assert status == 200
    translate = {option["name"]: option["default"] for option in reply["translate_options"]}
    generate = {option["name"]: option for option in reply["generate_options"]}
    assert list(generate) == list(GENERATE_FIELDS) and translate["length_penalty"] == 0.6
    assert generate["length_penalty"]["default"] == 0 and generate["length_penalty"]["only_with_strategy"] == "beam"
    assert (generate["max_new_tokens"]["default"], generate["strategy"]["default"]) == (200, "sample")
    for name, option in generate.items():  # each default, given, changes nothing in what the route decodes
        if name in ("prompt", "n", "stream", "strategy", "max_new_tokens"):
            continue
        strategy = option.get("only_with_strategy", "sample")
        given = generation_settings(strategy=strategy, **{name: option["default"]})
        assert given == generation_settings(strategy=strategy), name


def test_an_api_key_guards_every_route_but_health(translator: Any) -> None:
    from dotformer.api.serve import TranslationServer

    with TranslationServer(translator, port=0, api_key="s3cret") as server:
        root = server.url.rsplit("/api/", 1)[0]
        assert get(root + "/health")[0] == 200
        for path in ("/ready", "/api/health", "/"):
            status, reply, headers = get(root + path)
            assert status == 401 and reply["error"].startswith("no API key given"), path
            assert headers["WWW-Authenticate"] == "Bearer"
            assert get(root + path, key="wrong")[0] == 401
            assert get(root + path, key="s3cret")[0] == 200
        assert post(server.url, {"texts": ["a1"]})[0] == 401
        request = urllib.request.Request(
            server.url, data=b'{"texts": ["a1"]}', headers={"Authorization": "Bearer s3cret"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            assert response.status == 200 and len(json.loads(response.read())["translations"]) == 1


def test_cli_serve_reads_the_api_key_from_the_environment(checkpoint_dir: Path, cli: Cli) -> None:
    """``DOTFORMER_API_KEY`` stands for --api-key: the served routes then answer 401 without it."""
    process = subprocess.Popen(
        cli.command("serve", "--checkpoint", str(checkpoint_dir), "--port", "0", "--engine", "torch"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli.env(DOTFORMER_API_KEY="k3y"),
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        url = line.split("POST ", 1)[1].split()[0]
        assert post(url, {"texts": ["a1"]})[0] == 401
        root = url.rsplit("/api/", 1)[0]
        assert get(root + "/ready", key="k3y")[0] == 200
    finally:
        process.terminate()
        process.wait(TIMEOUT_S)


def scrape(root: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """GET /metrics, parsed with prometheus-client's own parser: {(sample name, sorted labels): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(root + "/metrics", timeout=TIMEOUT_S) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=")
        text = response.read().decode("utf-8")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_count_requests_batches_and_tokens_per_server(translator: Any) -> None:
    """/metrics counts what this server answered: requests by route and status, their latencies, the engine calls'
    sizes, the output tokens (those of the hypotheses translate returns); a second server in the same process
    counts nothing of the first's."""
    from dotformer.api.serve import TranslationServer

    texts = ["a1 a2 a3", "a5 a6", "a9"]
    route = (("route", "POST /api/translate"),)
    with TranslationServer(translator, port=0) as first, TranslationServer(translator, port=0) as second:
        root = first.url.rsplit("/api/", 1)[0]
        assert post(first.url, {"texts": texts, "beam": 2, "n_best": 2})[0] == 200
        assert post(first.url, {"texts": ["a1"], "beam": 0})[0] == 400
        assert post(root + "/api/nowhere", {})[0] == 404
        metrics = scrape(root)
        others = scrape(second.url.rsplit("/api/", 1)[0])
    expected = translator.translate(texts, beam=2, n_best=2, details=True)
    tokens = sum(len(h.tokens) for result in expected for h in result.hypotheses)
    assert metrics["dotformer_requests_total", (*route, ("status", "200"))] == 1
    assert metrics["dotformer_requests_total", (*route, ("status", "400"))] == 1
    assert metrics["dotformer_requests_total", (("route", "other"), ("status", "404"))] == 1
    assert metrics["dotformer_request_seconds_count", route] == 2
    assert metrics["dotformer_batch_sentences_count", ()] == 1 and metrics["dotformer_batch_sentences_sum", ()] == 3
    assert metrics["dotformer_batch_requests_sum", ()] == 1
    assert metrics["dotformer_generated_tokens_total", route] == tokens > 0
    assert metrics["dotformer_queue_sentences", ()] == 0
    assert ("dotformer_requests_total", (*route, ("status", "200"))) not in others
    assert others["dotformer_batch_sentences_count", ()] == 0


def test_access_log_is_one_json_line_per_request(translator: Any, caplog: pytest.LogCaptureFixture) -> None:
    from dotformer.api.serve import TranslationServer

    with (
        caplog.at_level("INFO", logger="dotformer.serve.access"),
        TranslationServer(translator, port=0, verbose=True) as server,
    ):
        post(server.url, {"texts": ["a1", "a2 a3"]})
        post(server.url, {"texts": []})
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "dotformer.serve.access"]
    assert [(line["route"], line["status"], line["sentences"]) for line in lines] == [
        ("POST /api/translate", 200, 2),
        ("POST /api/translate", 400, 0),
    ]
    assert all(set(line) == {"route", "status", "ms", "sentences"} and line["ms"] > 0 for line in lines)


@pytest.mark.numerical
def test_embed_gives_the_python_apis_vectors_under_concurrency(server: Any, translator: Any) -> None:
    """POST /api/embed from several clients at once (their texts batched together): each gets
    ``Translator.embed``'s vectors for its texts, up to the reordering of sums a different batch brings."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    from tolerance import reordering_bound

    root = server.url.rsplit("/api/", 1)[0]
    requests = [["a1 a2 a3", "a5"], ["a9 a8 a7 a6"], ["", "a2 a2"], ["a4 a5 a6 a7 a8"]]
    bodies = [
        {"texts": texts, "pooling": pooling, "normalize": True} for texts in requests for pooling in ("mean", "cls")
    ]
    with ThreadPoolExecutor(len(bodies)) as pool:
        replies = list(pool.map(lambda body: post(root + "/api/embed", body), bodies))
    config = translator.config
    bound = reordering_bound([config.d_model + config.d_ff + config.max_len] * config.num_encoder_layers, scale=1.0)
    for body, (status, reply) in zip(bodies, replies, strict=True):
        assert status == 200, reply
        expected = translator.embed(body["texts"], pooling=body["pooling"], normalize=True)
        assert reply["dimensions"] == config.d_model == expected.shape[1]
        np.testing.assert_allclose(np.array(reply["embeddings"]), expected, rtol=0, atol=bound)
    status, reply = post(root + "/api/embed", {"texts": ["a1"], "pooling": "max"})
    assert status == 400 and reply["error"] == '"pooling" must be "mean" or "cls", got "max"'


def test_embed_refuses_a_language_model(kinds: dict[str, Path]) -> None:
    import dotformer
    from dotformer.api.serve import TranslationServer

    with TranslationServer(dotformer.load(kinds["lm"], device="cpu", engine="torch"), port=0) as server:
        status, reply = post(server.url.rsplit("/api/", 1)[0] + "/api/embed", {"texts": ["a1"]})
    assert status == 400 and "is a language model: /api/embed serves a model with an encoder" in reply["error"]
    assert reply["error"].endswith("send POST /api/generate")
