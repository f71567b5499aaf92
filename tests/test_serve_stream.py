"""Streaming from ``dotformer serve``: ``POST /api/generate`` with ``"stream": true`` sends the text that the same
request gives whole, piece by piece as server-sent events, on both engines, the first piece before the rest is
decoded; the OpenAI-style ``/v1/completions`` gives ``Translator.generate``'s text to the unchanged ``openai``
client, streamed or not, cut at its stop sequences."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import CLI_TIMEOUT_S
from hypothesis import given
from hypothesis import strategies as st

from dotformer import ModelConfig, Transformer
from dotformer.api.streaming import StopText
from dotformer.checkpoint import save_checkpoint
from dotformer.data.tokenizer_files import train_tokenizer
from dotformer.engines.choice import ctranslate2_installed

TIMEOUT_S = CLI_TIMEOUT_S
ENGINES = ["torch", pytest.param("ctranslate2", marks=pytest.mark.skipif(not ctranslate2_installed(), reason="no ct2"))]
NEW = 12  # new tokens per request: the prompt and these fit CTranslate2's window


@pytest.fixture(scope="module")
def lm_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random language model over the symbols a1..a9 (its continuations are arbitrary but deterministic)."""
    symbols = train_tokenizer("symbol", ["a1 a2 a3 a4 a5 a6 a7 a8 a9"])
    torch.manual_seed(11)
    config = ModelConfig(arch="decoder-only", src_vocab_size=symbols.vocab_size, tgt_vocab_size=symbols.vocab_size,
                         num_encoder_layers=0, num_decoder_layers=2, d_model=16, num_heads=2, d_ff=32, dropout=0.0,
                         max_len=64)  # fmt: skip
    path = tmp_path_factory.mktemp("stream") / "lm"
    save_checkpoint(path, Transformer(config).eval(), symbols, symbols, {"task": "lm"})
    return path


@pytest.fixture(scope="module", params=ENGINES)
def served(request: pytest.FixtureRequest, lm_path: Path) -> Iterator[tuple[Any, Any]]:
    """(translator, server) for the language model on each engine, with an API key."""
    import dotformer
    from dotformer.api.serve import TranslationServer

    translator = dotformer.load(lm_path, device="cpu", engine=request.param)
    assert translator.engine == request.param
    with TranslationServer(translator, port=0, api_key="k3y") as server:
        yield translator, server


def root(server: Any) -> str:
    return server.url.rsplit("/api/", 1)[0]


def events(url: str, body: dict[str, Any], key: str = "k3y") -> Iterator[Any]:
    """The server-sent events of a POST, decoded as they arrive (``[DONE]`` as the string)."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
        assert response.headers["Content-Type"] == "text/event-stream"
        for line in response:
            if line.startswith(b"data: "):
                data = line[len(b"data: ") :].strip()
                yield "[DONE]" if data == b"[DONE]" else json.loads(data)


def post(url: str, body: Any, key: str = "k3y") -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.parametrize(
    "settings", [{"strategy": "greedy"}, {"strategy": "sample", "temperature": 0.8, "top_p": 0.9, "seed": 4}]
)
def test_a_generate_stream_is_the_whole_answer_in_pieces(served: tuple[Any, Any], settings: dict[str, Any]) -> None:
    translator, server = served
    body = {"prompt": "a1 a2", "max_new_tokens": NEW, **settings}
    status, whole = post(root(server) + "/api/generate", body)
    assert status == 200
    received = list(events(root(server) + "/api/generate", {**body, "stream": True}))
    assert received[-1] == "[DONE]" and len(received) > 2  # several pieces, then the end
    assert "".join(event["text"] for event in received[:-1]) == whole["texts"][0]
    assert whole["texts"][0] == translator.generate("a1 a2", max_new_tokens=NEW, **settings)


def test_a_stream_of_beams_or_of_several_samples_is_a_400(served: tuple[Any, Any]) -> None:
    _, server = served
    for extra in ({"n": 2}, {"strategy": "beam"}):
        status, reply = post(root(server) + "/api/generate", {"prompt": "a1", "stream": True, **extra})
        assert status == 400 and '"stream": true sends one greedy or sampled continuation' in reply["error"]
    status, reply = post(root(server) + "/api/generate", {"prompt": "a1", "stream": 1})
    assert status == 400 and reply["error"] == '"stream" must be true or false, got 1'


class Held:
    """A translator whose first piece of text waits for ``release`` once it is sent (the rest is not decoded yet)."""

    def __init__(self, translator: Any) -> None:
        self._translator, self.release, self.ended = translator, threading.Event(), threading.Event()
        self.pieces = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._translator, name)

    def generate_texts(self, prompt: str, config: Any, on_text: Any = None, on_end: Any = None) -> list[str]:
        def held(piece: str) -> None:
            self.pieces += 1
            on_text(piece)
            if self.pieces == 1:
                assert self.release.wait(TIMEOUT_S)

        try:
            return self._translator.generate_texts(prompt, config, held, on_end)
        finally:
            self.ended.set()


@pytest.mark.parametrize("engine", ENGINES)
def test_the_first_piece_arrives_before_the_rest_is_decoded(lm_path: Path, engine: str) -> None:
    """Time to first token is one step: the client reads the first piece while the decoding is held after it."""
    import dotformer
    from dotformer.api.serve import TranslationServer

    held = Held(dotformer.load(lm_path, device="cpu", engine=engine))
    with TranslationServer(held, port=0) as server:  # type: ignore[arg-type]
        stream = events(server.url, {"prompt": "a1", "max_new_tokens": NEW, "strategy": "greedy", "stream": True})
        first = next(stream)  # arrives although the decoding waits for release
        held.release.set()
        rest = list(stream)
    whole = held.generate("a1", max_new_tokens=NEW, strategy="greedy")
    assert first["text"] and first["text"] + "".join(e["text"] for e in rest[:-1]) == whole


def test_a_client_gone_stops_the_decoding(lm_path: Path) -> None:
    """A client that closes the connection after the first piece stops the decoding at its next token; the
    server counts it (status 499) and goes on answering."""
    import http.client

    import dotformer
    from dotformer.api.serve import TranslationServer

    held = Held(dotformer.load(lm_path, device="cpu", engine="torch"))
    with TranslationServer(held, port=0) as server:  # type: ignore[arg-type]
        host, port = server.server_address
        connection = http.client.HTTPConnection(host, port, timeout=TIMEOUT_S)
        body = {"prompt": "a1", "max_new_tokens": 1000, "strategy": "greedy", "stream": True}
        connection.request("POST", "/api/generate", json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.readline().startswith(b"data: {")
        connection.sock.close()  # gone after the first piece
        response.close()
        held.release.set()
        assert held.ended.wait(TIMEOUT_S)
        assert held.pieces < 1000  # stopped before the end: the 1000 tokens asked for were not all decoded
        status, reply = post(server.url, {"prompt": "a1", "max_new_tokens": 2})
        assert status == 200 and len(reply["texts"]) == 1
        metrics = server.metrics.registry.get_sample_value
        assert metrics("dotformer_requests_total", {"route": "POST /api/generate", "status": "499"}) == 1


def openai_client(server: Any, key: str = "k3y") -> Any:
    import openai

    return openai.OpenAI(base_url=root(server) + "/v1", api_key=key, max_retries=0, timeout=TIMEOUT_S)


def test_the_openai_client_completes_streamed_or_not(served: tuple[Any, Any]) -> None:
    translator, server = served
    client = openai_client(server)
    (model,) = [m.id for m in client.models.list()]
    assert model == translator.path.name
    greedy = translator.generate("a1 a2", max_new_tokens=NEW, strategy="greedy")
    reply = client.completions.create(model=model, prompt="a1 a2", max_tokens=NEW, temperature=0)
    assert reply.choices[0].text == greedy and reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == len(greedy.split()) == NEW  # one symbol, one token
    assert reply.usage.prompt_tokens == 3  # the line start (EOS), a1, a2
    chunks = list(client.completions.create(model=model, prompt="a1 a2", max_tokens=NEW, temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == greedy and len(chunks) > 2
    assert [c.choices[0].finish_reason for c in chunks] == [None] * (len(chunks) - 1) + ["length"]
    sampled = translator.generate("a1", max_new_tokens=NEW, temperature=0.7, top_p=0.9, seed=3)
    for stream in (False, True):
        reply = client.completions.create(
            model=model, prompt="a1", max_tokens=NEW, temperature=0.7, top_p=0.9, seed=3, stream=stream
        )
        text = "".join(c.choices[0].text for c in reply) if stream else reply.choices[0].text
        assert text == sampled


def test_the_openai_client_stops_at_a_stop_sequence(served: tuple[Any, Any]) -> None:
    translator, server = served
    client = openai_client(server)
    greedy = translator.generate("a3", max_new_tokens=NEW, strategy="greedy")
    stop = greedy.split()[3]  # a symbol the text holds: it ends before its first occurrence
    expected = greedy[: greedy.index(stop)]
    reply = client.completions.create(model="any", prompt="a3", max_tokens=NEW, temperature=0, stop=[stop, "zz"])
    assert reply.choices[0].text == expected and reply.choices[0].finish_reason == "stop"
    chunks = list(client.completions.create(model="any", prompt="a3", max_tokens=NEW, temperature=0, stop=stop,
                                            stream=True))  # fmt: skip
    assert "".join(c.choices[0].text for c in chunks) == expected and chunks[-1].choices[0].finish_reason == "stop"


def test_an_end_token_ends_a_completion_with_finish_reason_stop(served: tuple[Any, Any]) -> None:
    """A continuation an end token ends before max_tokens "stop"s, as at a stop sequence; one that runs to max_tokens
    stays "length", with or without end tokens (streamed or not)."""
    translator, server = served
    client = openai_client(server)
    greedy = translator.generate("a3", max_new_tokens=NEW, strategy="greedy").split()
    end = greedy[3]  # a symbol the text holds: it ends before its first occurrence
    tokenizer = translator.tgt_tokenizer
    pieces = [tokenizer.id_to_token(i) for i in range(4, tokenizer.vocab_size)]  # after the four special tokens
    unused = next(piece for piece in pieces if piece not in greedy and piece.strip())
    expected = translator.generate("a3", max_new_tokens=NEW, strategy="greedy", end_token=end)
    assert len(expected.split()) < NEW
    for stream in (False, True):
        reply = client.completions.create(
            model="any", prompt="a3", max_tokens=NEW, temperature=0, stream=stream, extra_body={"end_token": end}
        )
        chunks = list(reply) if stream else [reply]
        assert "".join(c.choices[0].text for c in chunks) == expected
        assert chunks[-1].choices[0].finish_reason == "stop", stream
        reply = client.completions.create(
            model="any", prompt="a3", max_tokens=NEW, temperature=0, stream=stream, extra_body={"end_token": unused}
        )
        chunks = list(reply) if stream else [reply]
        assert chunks[-1].choices[0].finish_reason == "length", stream


def test_the_openai_client_gets_the_errors(served: tuple[Any, Any]) -> None:
    import openai

    _, server = served
    with pytest.raises(openai.AuthenticationError):
        openai_client(server, key="wrong").completions.create(model="any", prompt="a1", max_tokens=2)
    client = openai_client(server)
    with pytest.raises(openai.BadRequestError, match="no chat template"):
        client.chat.completions.create(model="any", messages=[{"role": "user", "content": "a1"}])
    with pytest.raises(openai.BadRequestError, match='"max_tokens" must be an integer from 1 to 1024'):
        client.completions.create(model="any", prompt="a1", max_tokens=0)
    with pytest.raises(openai.BadRequestError, match='"n" must be an integer from 1 to 1'):
        client.completions.create(model="any", prompt="a1", n=2)


def test_completions_refuse_a_translation_model(tmp_path: Path) -> None:
    import dotformer
    from dotformer.api.serve import TranslationServer

    tokenizer = train_tokenizer("symbol", ["a1 a2"])
    config = ModelConfig.preset("tiny", src_vocab_size=tokenizer.vocab_size, tgt_vocab_size=tokenizer.vocab_size)
    save_checkpoint(tmp_path / "mt", Transformer(config).eval(), tokenizer, tokenizer, {"task": "synthetic"})
    with TranslationServer(dotformer.load(tmp_path / "mt", device="cpu"), port=0) as server:
        status, reply = post(root(server) + "/v1/completions", {"prompt": "a1"})
    assert status == 400 and reply["error"]["type"] == "invalid_request_error"  # OpenAI's shape on /v1/
    message = reply["error"]["message"]
    assert "is a translation model: /v1/completions serves a language model" in message
    assert message.endswith("send POST /api/translate")


@given(
    text=st.text(alphabet="ab\n", max_size=30),
    cuts=st.lists(st.integers(0, 30), max_size=6),
    stops=st.lists(st.text(alphabet="ab\n", min_size=1, max_size=3), max_size=3),
)
def test_stop_text_cuts_at_the_first_stop_sequence_however_the_text_is_split(
    text: str, cuts: list[int], stops: list[str]
) -> None:
    """Whatever the pieces, what StopText passes on is the text up to the earliest stop sequence (all of it when
    none occurs), and the sequence itself is never passed on."""
    bounds = sorted({0, len(text), *(min(c, len(text)) for c in cuts)})
    stop, sent = StopText(stops), []
    for start, end in zip(bounds, bounds[1:], strict=False):
        sent.append(stop.feed(text[start:end]))
    sent.append(stop.flush())
    found = [i for i in (text.find(s) for s in stops) if i >= 0]
    assert "".join(sent) == (text[: min(found)] if found else text)
    assert stop.stopped == bool(found)
