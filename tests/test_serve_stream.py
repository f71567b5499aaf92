"""Streaming from ``dotformer serve``: ``POST /api/generate`` with ``"stream": true`` sends the text that the same
request gives whole, piece by piece as server-sent events, on both engines, the first piece before the rest is
decoded; the OpenAI-style ``/v1/completions`` gives ``Translator.generate``'s text to the unchanged ``openai``
client, streamed or not, cut at its stop sequences."""

from __future__ import annotations

import itertools
import json
import threading
import time
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
from dotformer.data.tokenize.tokenizer_files import train_tokenizer
from dotformer.engines.choice import ctranslate2_installed

TIMEOUT_S = CLI_TIMEOUT_S
ENGINES = ["torch", pytest.param("ctranslate2", marks=pytest.mark.skipif(not ctranslate2_installed(), reason="no ct2"))]
NEW = 12  # new tokens per request: the prompt and these fit CTranslate2's window


def save_lm(path: Path, info: dict[str, Any]) -> Path:
    """A tiny random language model over the symbols a1..a9 (its continuations are arbitrary but deterministic)."""
    symbols = train_tokenizer("symbol", ["a1 a2 a3 a4 a5 a6 a7 a8 a9"])
    torch.manual_seed(11)
    config = ModelConfig(arch="decoder-only", src_vocab_size=symbols.vocab_size, tgt_vocab_size=symbols.vocab_size,
                         num_encoder_layers=0, num_decoder_layers=2, d_model=16, num_heads=2, d_ff=32, dropout=0.0,
                         max_len=64)  # fmt: skip
    save_checkpoint(path, Transformer(config).eval(), symbols, symbols, info)
    return path


@pytest.fixture(scope="module")
def lm_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_lm(tmp_path_factory.mktemp("stream") / "lm", {"task": "lm"})


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
        assert status == 400 and reply["error"] == (  # the fields of /api/generate (it has no "beam")
            '"stream": true sends one greedy or sampled continuation: leave out "n" and "strategy": "beam"'
        )
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


@pytest.mark.parametrize("engine", ENGINES)
def test_greedy_continuations_in_one_call_are_each_prompts_own(lm_path: Path, engine: str) -> None:
    """Prompts of many lengths continued in one call, all and in pairs: each continuation is the one ``generate``
    gives it alone (on CTranslate2 prompts of one length share a ``generate_batch``; a longer prompt's rest
    forwarded step by step beside a shorter one sums otherwise and can turn a near-tie of this random model's
    argmax)."""
    import dotformer
    from dotformer.api.generation import generation_settings

    words = [f"a{i}" for i in range(1, 10)]
    prompts = [" ".join(words[(i * 5 + j) % 9] for j in range(i % 7)) for i in range(24)]
    translator = dotformer.load(lm_path, device="cpu", engine=engine)
    config = generation_settings(max_new_tokens=NEW, strategy="greedy")
    alone = [translator.generate(p, max_new_tokens=NEW, strategy="greedy") for p in prompts]
    assert translator.greedy_continuations(prompts, config) == alone
    for a, b in itertools.combinations(range(len(prompts)), 2):  # every pair of lengths side by side
        assert translator.greedy_continuations([prompts[a], prompts[b]], config) == [alone[a], alone[b]], (a, b)


@pytest.mark.parametrize("engine", ENGINES)
def test_concurrent_greedy_generate_requests_share_calls_and_get_what_one_alone_gets(
    lm_path: Path, engine: str
) -> None:
    """8 clients at once sending greedy /api/generate requests of different prompts: the requests share engine calls
    (a call holds several), and each text equals what ``generate`` gives that prompt alone. Sampling requests
    (the engines draw every row of a call from one generator, seeded once per call) and beam search are decoded
    one request per call, so they too get what they get alone."""
    from concurrent.futures import ThreadPoolExecutor

    import dotformer
    from dotformer.api.serve import TranslationServer

    words = [f"a{i}" for i in range(1, 10)]
    prompts = [" ".join(words[(i * 5 + j) % 9] for j in range(i % 7)) for i in range(24)]  # "" first: a new text
    translator = dotformer.load(lm_path, device="cpu", engine=engine)
    alone = {p: translator.generate(p, max_new_tokens=NEW, strategy="greedy") for p in prompts}
    sampled = translator.generate("a2 a3", max_new_tokens=NEW, temperature=0.8, seed=5)
    batches: list[Any] = []
    continuations, first_call = translator.greedy_continuations, [True]

    def held_first(prompts: list[str], config: Any) -> list[str]:
        # a first call of one prompt waits for other clients' requests to queue (whatever the machine's load): the
        # next call then has several to share (a first call of several shares already, and fewer may be left to come)
        if first_call[0]:
            first_call[0] = False
            deadline = time.monotonic() + TIMEOUT_S
            while len(prompts) < 2 and server.batcher.waiting < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
        return continuations(prompts, config)

    translator.greedy_continuations = held_first  # type: ignore[method-assign]
    with TranslationServer(translator, port=0, api_key="k3y", batch_wait_ms=50.0) as server:
        server.batcher.on_batch = batches.append

        def client(k: int) -> list[tuple[str, str]]:
            got = []
            for prompt in prompts[k::8]:
                status, reply = post(server.url, {"prompt": prompt, "max_new_tokens": NEW, "strategy": "greedy"})
                assert status == 200, reply
                got.append((prompt, reply["texts"][0]))
            status, reply = post(server.url, {"prompt": "a2 a3", "max_new_tokens": NEW, "temperature": 0.8, "seed": 5})
            assert status == 200, reply
            return [*got, ("sampled", reply["texts"][0])]

        with ThreadPoolExecutor(8) as pool:
            replies = [item for got in pool.map(client, range(8), timeout=TIMEOUT_S) for item in got]
    assert len(replies) == len(prompts) + 8
    for prompt, text in replies:
        assert text == (sampled if prompt == "sampled" else alone[prompt]), prompt
    assert max(batch.requests for batch in batches) > 1  # greedy requests did share engine calls


CHATML = (
    "{% for message in messages %}{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('roles are system, user and assistant') }}{% endif %}"
    "{{ bos_token }}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)  # the shape of Qwen's and many others' template (ChatML), with a BOS string and a refusal


def test_a_chat_template_renders_as_transformers_apply_chat_template_renders_it(tmp_path: Path) -> None:
    """The template read from an HF directory's tokenizer_config.json (an AddedToken's BOS too) renders a
    conversation as ``transformers``' ``apply_chat_template(..., add_generation_prompt=True)``, the BOS string left
    out when the model's rules add BOS themselves; a template's ``raise_exception`` is the request's 400."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    from dotformer.api.completions import render_chat
    from dotformer.api.web import RequestError
    from dotformer.imports.hf import chat_template

    bos = {"content": "<s>", "lstrip": False, "normalized": False, "rstrip": False, "single_word": False}
    config = {"chat_template": CHATML, "bos_token": bos, "eos_token": "</s>"}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    chat = chat_template(tmp_path)
    assert chat == {"template": CHATML, "bos_token": "<s>", "eos_token": "</s>"}
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi."},
        {"role": "user", "content": "Name a colour\nplease"},
    ]
    backend = Tokenizer(models.WordLevel({"<unk>": 0, "<s>": 1, "</s>": 2}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    reference = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, chat_template=CHATML, bos_token="<s>", eos_token="</s>"
    )
    expected = reference.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert render_chat(chat, messages, adds_bos=False) == expected
    assert render_chat(chat, messages, adds_bos=True) == expected[len("<s>") :]
    with pytest.raises(RequestError, match="refuses the messages: roles are system, user and assistant"):
        render_chat(chat, [{"role": "tool", "content": "x"}], adds_bos=False)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": [{"name": "default",
                                                    "template": "{{ messages[0]['content'] }}"}]}))  # fmt: skip
    assert chat_template(tmp_path) == {"template": "{{ messages[0]['content'] }}", "bos_token": "", "eos_token": ""}
    (tmp_path / "tokenizer_config.json").write_text("{}")
    assert chat_template(tmp_path) is None


@pytest.mark.parametrize("engine", ENGINES)
def test_the_openai_client_chats_with_a_model_that_has_a_chat_template(tmp_path: Path, engine: str) -> None:
    """A language model whose checkpoint carries a chat template: the openai client's chat.completions (streamed
    or not) answers the greedy continuation of the rendered conversation, in the chat shapes."""
    import dotformer
    from dotformer.api.serve import TranslationServer

    template = "{% for m in messages %}{{ m['content'] }} {% endfor %}{% if add_generation_prompt %}a9{% endif %}"
    path = save_lm(tmp_path / "chat-lm", {"task": "lm", "chat": {"template": template, "bos_token": ""}})
    translator = dotformer.load(path, device="cpu", engine=engine)
    expected = translator.generate("a1 a2 a3 a4 a9", max_new_tokens=NEW, strategy="greedy")
    messages = [
        {"role": "user", "content": "a1 a2"},
        {"role": "assistant", "content": "a3"},
        {"role": "user", "content": [{"type": "text", "text": "a4"}]},
    ]
    with TranslationServer(translator, port=0, api_key="k3y") as server:
        client = openai_client(server)
        reply = client.chat.completions.create(model="any", messages=messages, max_tokens=NEW, temperature=0)
        assert reply.object == "chat.completion" and reply.choices[0].message.role == "assistant"
        assert reply.choices[0].message.content == expected and reply.choices[0].finish_reason == "length"
        assert reply.usage.completion_tokens == NEW
        chunks = list(client.chat.completions.create(model="any", messages=messages, max_completion_tokens=NEW,
                                                     temperature=0, stream=True))  # fmt: skip
        assert chunks[0].choices[0].delta.role == "assistant"
        assert "".join(c.choices[0].delta.content or "" for c in chunks) == expected
        assert chunks[-1].choices[0].finish_reason == "length"
        status, error = post(root(server) + "/v1/chat/completions", {"messages": []})
        assert status == 400 and '"messages" must be a non-empty list' in error["error"]["message"]
