"""``dotformer serve`` under load, against a real server on 127.0.0.1: many clients at once get every answer (no
reset), a client that trickles its request is dropped without holding the others, a malformed request gets one line
of JSON, a request above the work limit is refused, and large requests take turns with small ones.

Every loop here is bounded in count, and every wait in time (sockets have timeouts; threads are joined with one).
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch

from dotformer import ModelConfig, Transformer
from dotformer.checkpoint import save_checkpoint
from dotformer.data.tokenizer_files import train_tokenizer
from dotformer.data.tokenizers import EOS_ID

TIMEOUT_S = 30
CLIENTS, REQUESTS = 16, 25


@pytest.fixture(scope="module")
def translator(tmp_path_factory: pytest.TempPathFactory) -> Any:
    import dotformer

    texts = ["a1 a2 a3", "a4 a5 a6 a7", "a8 a9"]
    src_tok, tgt_tok = train_tokenizer("symbol", texts), train_tokenizer("symbol", texts)
    torch.manual_seed(7)
    config = ModelConfig.preset(
        "tiny", src_vocab_size=src_tok.vocab_size, tgt_vocab_size=tgt_tok.vocab_size, generator_bias=True
    )
    model = Transformer(config).eval()
    with torch.no_grad():  # a random model that ends every output at once: each request is one decoding step
        model.generator.bias[EOS_ID] = 8.0
    path = tmp_path_factory.mktemp("serve_load") / "ck"
    save_checkpoint(path, model, src_tok, tgt_tok, {"task": "synthetic"})
    return dotformer.load(path, device="cpu")


@pytest.fixture(scope="module")
def server(translator: Any) -> Iterator[Any]:
    """A server that drops a request not read within 1.5 s (or after a pause of 1 s), with 8 workers."""
    from dotformer.api.serve import TranslationServer

    server = TranslationServer(translator, port=0, workers=8, request_timeout=1.0, request_deadline=1.5, max_work=400)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(TIMEOUT_S)


def post(url: str, payload: Any) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def raw_exchange(server: Any, data: bytes) -> tuple[str, dict[str, str], bytes]:
    """Send ``data`` as it is, read the whole answer: (status line, headers, body)."""
    with socket.create_connection(server.server_address[:2], timeout=TIMEOUT_S) as sock:
        sock.sendall(data)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines)
    return status, headers, body


def test_many_clients_at_once_get_every_answer(server: Any, translator: Any) -> None:
    """16 clients x 25 requests, all at once: 400 answers, each right, no connection reset."""
    from dotformer.api.serve import LISTEN_BACKLOG

    assert server.request_queue_size == LISTEN_BACKLOG >= 128
    texts = ["a1 a2", "a3", "a4 a5 a6", "a9 a8"]
    expected = {
        text: (r.text, r.score) for text, r in zip(texts, translator.translate(texts, details=True), strict=True)
    }
    assert len({score for _, score in expected.values()}) == len(texts)  # each text has its own answer

    def client(number: int) -> list[bool]:
        answers = []
        for i in range(REQUESTS):
            text = texts[(number + i) % len(texts)]
            status, reply = post(server.url, {"texts": [text]})
            assert status == 200, reply
            answer = reply["translations"][0]
            answers.append(answer["text"] == expected[text][0] and abs(answer["score"] - expected[text][1]) < 1e-5)
        return answers

    with ThreadPoolExecutor(CLIENTS) as clients:
        results = [
            answer for answers in clients.map(client, range(CLIENTS), timeout=TIMEOUT_S * 4) for answer in answers
        ]
    assert len(results) == CLIENTS * REQUESTS and all(results)


def trickle(sock: socket.socket, data: bytes, until: threading.Event | None = None) -> tuple[int, bool]:
    """Send ``data`` one byte every 0.2 s until the server lets go (or ``until`` is set); (bytes sent, dropped)."""
    sent = 0
    for byte in data:
        if until is not None and until.is_set():
            return sent, False
        try:
            sock.sendall(bytes([byte]))
        except (BrokenPipeError, ConnectionResetError):
            return sent, True
        sent += 1
        sock.settimeout(0.2)
        try:
            sock.recv(1024)  # returns only when the server lets go (the end of the connection)
        except TimeoutError:
            continue
        except ConnectionResetError:
            pass
        return sent, True
    return sent, False


SLOW_REQUEST = b'POST /api/translate HTTP/1.1\r\nContent-Length: 200\r\n\r\n{"texts": ["a1"]}' + b" " * 200


def test_a_trickling_client_is_dropped_at_the_deadline(server: Any) -> None:
    """A client that sends one byte every 0.2 s (each pause under the 1 s idle timeout) is dropped at the 1.5 s
    deadline, long before its 60 bytes (12 s) are sent."""
    with socket.create_connection(server.server_address[:2], timeout=TIMEOUT_S) as slow:
        sent, dropped = trickle(slow, SLOW_REQUEST[:60])
    assert dropped and sent < 60
    assert post(server.url, {"texts": ["a1"], "strategy": "greedy"})[0] == 200


def test_a_trickling_client_holds_no_one(translator: Any) -> None:
    """While a client trickles its request (a server whose deadline it stays within), another client is answered:
    the slow one is still connected when the answer comes."""
    from dotformer.api.serve import TranslationServer

    server = TranslationServer(translator, port=0, workers=2, request_timeout=5.0, request_deadline=120.0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    answered, answers = threading.Event(), []

    def other_client() -> None:
        answers.append(post(server.url, {"texts": ["a1 a2"], "strategy": "greedy"})[0])
        answered.set()

    try:
        with socket.create_connection(server.server_address[:2], timeout=TIMEOUT_S) as slow:
            slow.sendall(SLOW_REQUEST[:2])
            other = threading.Thread(target=other_client, daemon=True)
            other.start()
            sent, dropped = trickle(slow, SLOW_REQUEST[2:], until=answered)  # at most 250 bytes x 0.2 s = 50 s
            other.join(TIMEOUT_S)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(TIMEOUT_S)
    assert answers == [200]
    assert not dropped and sent < len(SLOW_REQUEST) - 2  # answered while the slow client was still sending


def test_a_slow_body_gets_a_json_timeout(server: Any) -> None:
    """A body that does not arrive in time gets a 408 with one JSON line, and the server goes on."""
    with socket.create_connection(server.server_address[:2], timeout=TIMEOUT_S) as sock:
        sock.sendall(b"POST /api/translate HTTP/1.1\r\nContent-Length: 50\r\n\r\n{")
        answer = b""
        while chunk := sock.recv(65536):  # the server answers after 1 s of silence and closes
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 408")
    error = json.loads(body)["error"]
    assert "not received in time" in error and "\n" not in error
    assert post(server.url, {"texts": ["a1"], "strategy": "greedy"})[0] == 200


@pytest.mark.parametrize(
    "data, status, fragment",
    [
        (b"GARBAGE\r\n\r\n", 400, "Bad request syntax ('GARBAGE')"),
        (b"GET / HTTP/1.1 extra\r\n\r\n", 400, "Bad request version"),
        (b"GET /api/health HTTP/9.9\r\n\r\n", 505, "Invalid HTTP version"),
        (b"PUT /api/translate HTTP/1.1\r\n\r\n", 501, "Unsupported method ('PUT')"),
        (b"GET /api/health HTTP/1.1\r\nbad header line\r\n\r\n", 200, ""),
    ],
)
def test_malformed_http_gets_one_json_line(server: Any, data: bytes, status: int, fragment: str) -> None:
    status_line, headers, body = raw_exchange(server, data)
    assert status_line.split()[1] == str(status), status_line
    assert headers["Content-Type"] == "application/json; charset=utf-8"
    assert body.count(b"\n") == 0
    reply = json.loads(body)
    if status != 200:
        assert set(reply) == {"error"} and fragment in reply["error"]


def test_work_above_the_limit_is_refused(server: Any) -> None:
    """The work of one request is its source tokens (EOS included) x beam: 20 texts of 4 tokens x beam 5 = 400 is
    taken, x beam 6 = 480 is over the server's 400."""
    status, reply = post(server.url, {"texts": ["a1 a2 a3"] * 20, "beam": 5})
    assert status == 200 and len(reply["translations"]) == 20
    status, reply = post(server.url, {"texts": ["a1 a2 a3"] * 20, "beam": 6})
    assert status == 413
    assert reply == {
        "error": "the request asks for 480 source tokens x beam; one request takes at most 400: send fewer or "
        "shorter texts, or a narrower beam"
    }
    with urllib.request.urlopen(server.url.replace("translate", "health"), timeout=TIMEOUT_S) as response:
        assert json.loads(response.read())["limits"]["max_work"] == 400


def test_chunks_cover_every_text_once() -> None:
    from dotformer.api.endpoint import chunk_by_work

    assert chunk_by_work([3, 3, 3, 3], 6) == [range(0, 2), range(2, 4)]
    assert chunk_by_work([10, 1, 1], 4) == [range(0, 1), range(1, 3)]  # a text above the chunk is a chunk alone
    assert chunk_by_work([], 4) == []
    work = [5, 1, 7, 2, 2, 9, 3]
    chunks = chunk_by_work(work, 8)
    assert [i for chunk in chunks for i in chunk] == list(range(len(work)))
    assert all(sum(work[i] for i in chunk) <= 8 or len(chunk) == 1 for chunk in chunks)


def test_turns_are_first_come_first_served() -> None:
    """Threads that ask for the model while it is held get it in the order they asked."""
    from dotformer.api.connections import FairTurns

    turns, order, started = FairTurns(), [], []
    with turns.take():
        threads = []
        for i in range(6):

            def ask(i: int = i) -> None:
                with turns.take():
                    order.append(i)

            thread = threading.Thread(target=ask, daemon=True)
            thread.start()
            threads.append(thread)
            for _ in range(1000):  # wait (bounded) until this thread holds its ticket, so the order is known
                if turns.waiting == i + 2:
                    break
                time.sleep(0.005)
            started.append(turns.waiting)
    for thread in threads:
        thread.join(TIMEOUT_S)
    assert started == [2, 3, 4, 5, 6, 7]
    assert order == [0, 1, 2, 3, 4, 5]


def test_a_large_request_lets_a_small_one_through(translator: Any) -> None:
    """A request cut into chunks gives up the model between chunks: a small request that asks meanwhile is served
    before the large one's next chunk (a translator that records its calls, and holds the first until told)."""
    from dotformer.api.connections import FairTurns
    from dotformer.api.serve import translate_request

    calls: list[int] = []
    first_running, release = threading.Event(), threading.Event()

    class Recording:
        files, max_input_length = translator.files, translator.max_input_length
        tgt_tokenizer = translator.tgt_tokenizer

        def translate(self, texts: list[str], **options: Any) -> Any:
            calls.append(len(texts))
            if len(calls) == 1:
                first_running.set()
                release.wait(TIMEOUT_S)
            return translator.translate(texts, **options)

    turns = FairTurns()
    large = threading.Thread(
        target=translate_request,
        args=(Recording(), {"texts": ["a1 a2 a3"] * 6, "strategy": "greedy"}, turns),
        kwargs={"chunk_work": 8},  # two texts of 4 tokens per chunk: three chunks
        daemon=True,
    )
    large.start()
    assert first_running.wait(TIMEOUT_S)
    small = threading.Thread(
        target=translate_request, args=(Recording(), {"texts": ["a1"], "strategy": "greedy"}, turns), daemon=True
    )
    small.start()
    for _ in range(1000):  # the small request holds its ticket (bounded wait)
        if turns.waiting == 2:
            break
        time.sleep(0.005)
    release.set()
    large.join(TIMEOUT_S)
    small.join(TIMEOUT_S)
    assert calls == [2, 1, 2, 2]


def test_the_help_states_the_limits() -> None:
    from dotformer.api import serve
    from dotformer.cli.serve import EPILOG

    for value in (serve.MAX_TEXTS, serve.MAX_TEXT_CHARS, serve.MAX_BEAM, serve.MAX_REQUEST_WORK, serve.CHUNK_WORK):
        assert re.search(rf"\b{value}\b", EPILOG), value
    assert f"within {serve.REQUEST_DEADLINE_S:g} s" in EPILOG and f"over {serve.REQUEST_TIMEOUT_S:g} s" in EPILOG
    assert f"up to {serve.LISTEN_BACKLOG} connections" in EPILOG and f"({serve.DEFAULT_WORKERS})" in EPILOG


def test_the_load_benchmark_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """benchmarks/serve_load.py --quick: a table row per number of clients, every request answered, none reset."""
    import importlib

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    serve_load = importlib.import_module("serve_load")
    payload = serve_load.main(["--quick", "--threads", "1", "--out", str(tmp_path / "serve_load.json")])
    assert json.loads((tmp_path / "serve_load.json").read_text()) == json.loads(json.dumps(payload))
    assert [row["clients"] for row in payload["rows"]] == [1, 4]
    for row in payload["rows"]:
        assert row["ok"] == row["requests"] == row["clients"] * 3 and row["resets"] == 0
        assert 0 < row["p50_ms"] <= row["p95_ms"] <= row["max_ms"]


def test_stopping_drops_a_client_still_sending(translator: Any) -> None:
    """A server stopped while a client trickles its request closes that connection at once (the process does not
    wait out the client's 30 s deadline)."""
    from dotformer.api.serve import TranslationServer

    server = TranslationServer(translator, port=0, request_timeout=30.0, request_deadline=60.0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    with socket.create_connection(server.server_address[:2], timeout=TIMEOUT_S) as slow:
        slow.sendall(b"POST /api/translate HTTP/1.1\r\n")
        for _ in range(1000):  # until a worker holds the connection (bounded)
            if server.open_connections:
                break
            time.sleep(0.005)
        assert len(server.open_connections) == 1
        server.shutdown()
        server.server_close()
        slow.settimeout(10.0)  # far below the 30 s the server would otherwise wait for the next byte
        assert slow.recv(1024) == b""
    thread.join(TIMEOUT_S)


def test_serve_refuses_no_workers_or_threads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dotformer.cli import main

    for flag, message in (
        ("--workers", "--workers must be positive, got 0"),
        ("--threads", "--threads must be positive, got 0"),
    ):
        assert main(["serve", "--checkpoint", str(tmp_path / "none"), flag, "0"]) == 2
        assert capsys.readouterr().err == f"dotformer serve: error: {message}\n"


def test_the_request_that_held_the_server_is_refused_at_once(translator: Any) -> None:
    """64 texts of 1,000 characters at beam 16 (inside the text limits) held a server for 91.6 s: its work, 64 x
    335 source tokens (334 symbols and EOS) x 16 = 343,040, is over the default limit, refused before any decoding."""
    from dotformer.api.serve import MAX_REQUEST_WORK, RequestError, translate_request

    class NoDecoding:
        files, max_input_length = translator.files, translator.max_input_length
        tgt_tokenizer = translator.tgt_tokenizer

        def translate(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("a refused request must not be decoded")

    text = ("a1 " * 334)[:1000]
    assert len(text) == 1000
    with pytest.raises(RequestError) as refused:
        translate_request(NoDecoding(), {"texts": [text] * 64, "beam": 16})
    assert refused.value.status == 413
    assert str(refused.value).startswith(
        f"the request asks for 343040 source tokens x beam; one request takes at most {MAX_REQUEST_WORK}"
    )
