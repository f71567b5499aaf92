"""``dotformer serve`` under load, against a real server on 127.0.0.1: many clients at once get every answer (no
reset), clients that trickle their requests are dropped at the limits without holding the others, a bad request gets
one line of JSON, a request above the work limit is refused, large requests take turns with small ones, and stopping
answers the request being decoded before the server returns.

Every loop here is bounded in count, and every wait in time (sockets have timeouts; threads are joined with one); no
assertion depends on the machine's speed: a limit that only a hung server reaches.
"""

from __future__ import annotations

import asyncio
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
from dotformer.data.tokenize.tokenizer_files import train_tokenizer
from dotformer.data.tokenize.tokenizers import EOS_ID

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
    """A server that drops a connection whose headers are not in within 1 s, and answers 408 to a body not in within
    1 s of its headers."""
    from dotformer.api.serve import TranslationServer

    with TranslationServer(translator, port=0, header_timeout=1.0, body_timeout=1.0, max_work=400) as server:
        yield server


def post(url: str, payload: Any) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def raw_exchange(server: Any, data: bytes) -> tuple[str, dict[str, str], bytes]:
    """Send ``data`` as it is, read the whole answer: (status line, headers, body)."""
    with socket.create_connection(server.server_address, timeout=TIMEOUT_S) as sock:
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


HEAD = b"POST /api/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 200\r\n\r\n"
SLOW_REQUEST = HEAD + b'{"texts": ["a1"]}' + b" " * 183
IN_HEADERS = HEAD.index(b"\r\nContent-Length")  # the request cut inside its Host header, which more digits extend
IN_BODY = len(HEAD) + 5  # the request cut inside its body, which more spaces extend


def read_answer(sock: socket.socket) -> bytes:
    """What the server sends until it closes the connection."""
    answer = b""
    while chunk := sock.recv(65536):
        answer += chunk
    return answer


def test_a_trickling_client_is_dropped_at_the_header_deadline(server: Any) -> None:
    """A client that sends one byte every 0.2 s is dropped when its headers are not in 1 s after it connected,
    long before its 60 bytes (12 s) are sent: each byte does not restart the clock."""
    with socket.create_connection(server.server_address, timeout=TIMEOUT_S) as slow:
        sent, dropped = trickle(slow, SLOW_REQUEST[:60])
    assert dropped and sent < 60
    assert post(server.url, {"texts": ["a1"], "strategy": "greedy"})[0] == 200


def test_fifty_trickling_clients_hold_no_one(translator: Any) -> None:
    """While 50 clients trickle their requests (half still in their headers, half in their bodies, each within a
    server's generous limits), a normal request is answered, and all 50 are still connected when it is."""
    from dotformer.api.serve import TranslationServer

    with TranslationServer(translator, port=0, header_timeout=600.0, body_timeout=600.0) as server:
        slow = [socket.create_connection(server.server_address, timeout=TIMEOUT_S) for _ in range(50)]
        try:
            for i, sock in enumerate(slow):  # half stop inside the headers, half inside the body
                sock.sendall(SLOW_REQUEST[: IN_HEADERS if i % 2 else IN_BODY])
            for _ in range(1000):  # until the server holds all 50 (bounded wait)
                if server.connections >= 50:
                    break
                time.sleep(0.01)
            answered: list[int] = []
            other = threading.Thread(target=lambda: answered.append(post(server.url, {"texts": ["a1 a2"]})[0]))
            other.start()
            for _ in range(int(TIMEOUT_S / 0.2)):  # one more byte from each slow client every 0.2 s
                if not other.is_alive():
                    break
                for i, sock in enumerate(slow):
                    sock.sendall(b"1" if i % 2 else b" ")
                time.sleep(0.2)
            other.join(TIMEOUT_S)
            assert answered == [200]
            for sock in slow:  # none was dropped or answered: the server still waits for each
                sock.settimeout(0.0)
                with pytest.raises(BlockingIOError):
                    sock.recv(1)
        finally:
            for sock in slow:
                sock.close()


def test_a_slow_body_gets_a_json_timeout(server: Any) -> None:
    """A body that does not arrive in time gets a 408 with one JSON line, and the server goes on."""
    with socket.create_connection(server.server_address, timeout=TIMEOUT_S) as sock:
        sock.sendall(b"POST /api/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 50\r\n\r\n{")
        answer = read_answer(sock)  # the server answers 1 s after the headers, and closes
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408")
    error = json.loads(body)["error"]
    assert "not received in time" in error and "\n" not in error
    assert post(server.url, {"texts": ["a1"], "strategy": "greedy"})[0] == 200


@pytest.mark.parametrize(
    "data, status, error",
    [
        (b"PUT /api/translate HTTP/1.1\r\nHost: h\r\n\r\n", 405, "/api/translate takes POST, not PUT"),
        (b"GET /api/generate HTTP/1.1\r\nHost: h\r\n\r\n", 405, "/api/generate takes POST, not GET"),
        (b"GET /nothing HTTP/1.1\r\nHost: h\r\n\r\n", 404, "no such endpoint: /nothing"),
        (b"POST /api/translate HTTP/1.1\r\nHost: h\r\nContent-Length: 999999\r\n\r\n{", 413, None),
        (b"GET /api/health HTTP/1.0\r\n\r\n", 200, None),
    ],
)
def test_requests_get_one_json_line(server: Any, data: bytes, status: int, error: str | None) -> None:
    status_line, headers, body = raw_exchange(server, data)
    assert status_line.split()[1] == str(status), status_line
    assert headers["Content-Type"] == "application/json; charset=utf-8"
    assert body.count(b"\n") == 0
    reply = json.loads(body)
    if error is not None:
        assert reply == {"error": error}


@pytest.mark.parametrize(
    "data",
    [b"GARBAGE\r\n\r\n", b"GET / HTTP/1.1 extra\r\n\r\n", b"GET /api/health HTTP/9.9\r\n\r\n"],
)
def test_malformed_http_is_refused_and_the_server_goes_on(server: Any, data: bytes) -> None:
    """A request too malformed to read as HTTP gets aiohttp's own 400 (plain text, not JSON: the stack answers it
    before any handler of ours runs), then the server answers the next client."""
    status_line, _, _ = raw_exchange(server, data)
    assert status_line.split()[1] == "400", status_line
    assert post(server.url, {"texts": ["a1"], "strategy": "greedy"})[0] == 200


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


def test_turns_are_first_come_first_served() -> None:
    """Calls queued while the model's thread is busy run in the order they were made, one at a time."""
    from dotformer.api.turns import ModelTurns

    order: list[int] = []
    release = threading.Event()

    async def main() -> None:
        turns = ModelTurns()
        try:
            first = asyncio.ensure_future(turns.run(release.wait, TIMEOUT_S))  # holds the thread until released
            others = [asyncio.ensure_future(turns.run(order.append, i)) for i in range(6)]
            for _ in range(1000):  # every call queued (bounded wait)
                if turns.waiting == 7:
                    break
                await asyncio.sleep(0.005)
            assert turns.waiting == 7 and order == []
            release.set()
            await asyncio.wait_for(asyncio.gather(first, *others), TIMEOUT_S)
            assert turns.waiting == 0
        finally:
            turns.close()

    asyncio.run(main())
    assert order == [0, 1, 2, 3, 4, 5]


def test_a_large_request_lets_a_small_one_through(translator: Any) -> None:
    """A request above the batch budget is split across engine calls: a small request that asks meanwhile rides in
    the large one's next call, not after its last (a translator that records its calls, and holds the first until
    told)."""
    from dotformer.api.batcher import Batcher
    from dotformer.api.endpoint import translate_request
    from dotformer.api.turns import ModelTurns

    calls: list[list[str]] = []
    first_running, release = threading.Event(), threading.Event()

    class Recording:
        files, max_input_length = translator.files, translator.max_input_length
        batch_groups = translator.batch_groups
        tgt_tokenizer = translator.tgt_tokenizer

        def translate(self, texts: list[str], request: Any) -> Any:
            calls.append(list(texts))
            if len(calls) == 1:
                first_running.set()
                release.wait(TIMEOUT_S)
            return translator.translate(texts, request)

    async def main() -> None:
        turns = ModelTurns()
        batcher = Batcher(turns, max_tokens=8, max_wait_s=0.0)  # two texts of 4 tokens per call
        try:
            large = asyncio.ensure_future(
                translate_request(Recording(), {"texts": ["a1 a2 a3"] * 6, "strategy": "greedy"}, batcher)
            )
            assert await asyncio.to_thread(first_running.wait, TIMEOUT_S)
            small_request = {"texts": ["a1"], "strategy": "greedy"}
            small = asyncio.ensure_future(translate_request(Recording(), small_request, batcher))
            for _ in range(1000):  # the small request's text is queued (bounded wait)
                if batcher.waiting == 5:
                    break
                await asyncio.sleep(0.005)
            release.set()
            replies = await asyncio.wait_for(asyncio.gather(large, small), TIMEOUT_S)
            assert [len(reply["translations"]) for reply in replies] == [6, 1]
        finally:
            batcher.close()
            turns.close()

    asyncio.run(main())
    assert [len(texts) for texts in calls] == [2, 2, 2, 1]
    assert "a1" in calls[1]  # the small request's text, in the call after the one it arrived during


def test_the_help_states_the_limits() -> None:
    from dotformer.api import batcher, endpoint, web
    from dotformer.api.serve import MAX_BODY_BYTES
    from dotformer.cli.serve import EPILOG

    numbers = (endpoint.MAX_TEXTS, endpoint.MAX_TEXT_CHARS, endpoint.MAX_BEAM, endpoint.MAX_REQUEST_WORK)
    for value in (*numbers, batcher.MAX_BATCH_TOKENS, MAX_BODY_BYTES, web.MAX_JSON_DEPTH):
        assert re.search(rf"\b{value}\b", EPILOG), value
    assert f"within {web.HEADER_TIMEOUT_S:g} s of connecting" in EPILOG
    assert f"the body within {web.BODY_TIMEOUT_S:g} s more (408)" in EPILOG
    assert f"up to {web.LISTEN_BACKLOG} connections" in EPILOG
    assert f"--batch-wait-ms ({batcher.MAX_WAIT_MS:g})" in EPILOG


def test_the_load_benchmark_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """benchmarks/serve_load.py --quick: a table row per number of clients, then the same clients beside trickling
    connections; every request answered, none reset (the latency ratio is a figure, not asserted: no timed test)."""
    import importlib

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    serve_load = importlib.import_module("serve_load")
    out = str(tmp_path / "serve_load.json")
    payload = serve_load.main(["--mode", "trickle", "--quick", "--threads", "1", "--out", out])
    assert json.loads((tmp_path / "serve_load.json").read_text()) == json.loads(json.dumps(payload))
    assert [(row["clients"], row["trickling"]) for row in payload["rows"]] == [(1, 0), (4, 0), (4, 20)]
    for row in payload["rows"]:
        assert row["ok"] == row["requests"] == row["clients"] * 3 and row["resets"] == row["other_errors"] == 0
        assert 0 < row["p50_ms"] <= row["p95_ms"] <= row["max_ms"]
    assert payload["rows"][-1]["trickling_opened"] >= 20
    assert payload["trickling"]["p95_ratio"] == payload["rows"][2]["p95_ms"] / payload["rows"][1]["p95_ms"]


def test_the_sentence_load_benchmark_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """benchmarks/serve_load.py --mode sentences --quick: a row per number of clients sending single sentences, every
    answer equal to the offline translation of its sentence, the offline run on the server's threads, the batch sizes
    read from /metrics (figures, not asserted beyond their range: no timed test)."""
    import importlib

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    serve_load = importlib.import_module("serve_load")
    out = str(tmp_path / "sentences.json")
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # the offline run must decode on the server's --threads, not on this process's
    try:
        payload = serve_load.main(["--quick", "--engine", "torch", "--threads", "1", "--out", out])
    finally:
        torch.set_num_threads(threads)
    assert payload["machine"]["torch_threads"] == 1
    assert payload["mode"] == "sentences" and payload["engine"] == "torch"
    assert [row["clients"] for row in payload["rows"]] == [1, 4]
    for row in payload["rows"]:
        assert row["ok"] == row["requests"] == row["clients"] * 3 and row["errors"] == 0 and row["equal_outputs"]
        assert 0 < row["p50_ms"] <= row["p95_ms"] <= row["p99_ms"] and 1 <= row["mean_batch"] <= row["clients"]
        assert row["bound_ms"] == pytest.approx(1000 * row["clients"] / row["offline_per_s"])  # Little's law
        assert row["p95_vs_bound"] == pytest.approx(row["p95_ms"] / row["bound_ms"])
    single = payload["rows"][0]
    assert payload["p95_target_needs_per_s"] == pytest.approx(16 / (3 * single["p50_ms"] / 1000))


def test_the_engine_call_benchmark_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """benchmarks/serve_load.py --mode calls: one row for the single call of every sentence, then one per call size
    with and without the scoring pass, each a share of the single call's rate (figures, not asserted beyond their
    sign: no timed test)."""
    import importlib

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    serve_load = importlib.import_module("serve_load")
    checkpoint = serve_load.random_checkpoint(tmp_path, "tiny")
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("\n".join(" ".join(serve_load.SYMBOLS[i : i + 3]) for i in range(12)) + "\n")
    out = str(tmp_path / "calls.json")
    argv = ["--mode", "calls", "--checkpoint", str(checkpoint), "--sentences", str(sentences), "--engine", "torch"]
    payload = serve_load.main([*argv, "--clients", "2,4", "--repeats", "1", "--out", out])
    assert payload["mode"] == "calls" and payload["engine"] == "torch" and payload["sentences"] == 12
    rows = [(row["sentences_a_call"], row["reply"]) for row in payload["rows"]]
    assert rows == [("all", "text"), (2, "scores"), (2, "no scores"), (4, "scores"), (4, "no scores")]
    assert payload["rows"][0]["vs_one_call"] == 1.0
    assert all(row["sentences_per_cpu_s"] > 0 for row in payload["rows"])


def test_stopping_answers_the_request_being_decoded_and_drops_the_slow_ones(translator: Any) -> None:
    """Stopping while a request is decoded and two clients still send theirs (one in its headers, one in its body):
    the request being decoded is answered, the body still arriving gets a 503 line, the one in its headers is closed,
    the socket stops listening at once, and stop() returns once all of that is done (not after the clients' 600 s)."""
    from dotformer.api.serve import TranslationServer

    decoding, release = threading.Event(), threading.Event()

    class Held:
        files, max_input_length = translator.files, translator.max_input_length
        batch_groups = translator.batch_groups
        tgt_tokenizer, path, task = translator.tgt_tokenizer, translator.path, translator.task

        def translate(self, texts: list[str], request: Any) -> Any:
            decoding.set()
            release.wait(TIMEOUT_S)
            return translator.translate(texts, request)

    server = TranslationServer(Held(), port=0, header_timeout=600.0, body_timeout=600.0).start()  # type: ignore[arg-type]
    address = server.server_address
    answers: list[tuple[int, dict[str, Any]]] = []
    in_flight = threading.Thread(target=lambda: answers.append(post(server.url, {"texts": ["a1 a2"]})))
    in_flight.start()
    assert decoding.wait(TIMEOUT_S)
    with (
        socket.create_connection(address, timeout=TIMEOUT_S) as in_headers,
        socket.create_connection(address, timeout=TIMEOUT_S) as in_body,
    ):
        in_headers.sendall(SLOW_REQUEST[:IN_HEADERS])
        in_body.sendall(SLOW_REQUEST[:IN_BODY])
        for _ in range(1000):  # until the server holds all three (bounded wait)
            if server.connections == 3:
                break
            time.sleep(0.01)
        stopping = threading.Thread(target=server.stop)
        stopping.start()
        assert read_answer(in_headers) == b""  # closed at once, unanswered
        answer = read_answer(in_body)
        assert answer.startswith(b"HTTP/1.1 503") and answer.endswith(b'\r\n\r\n{"error": "the server is stopping"}')
        for _ in range(1000):  # no longer listening (bounded wait)
            try:
                socket.create_connection(address, timeout=TIMEOUT_S).close()
            except ConnectionRefusedError:
                break
            time.sleep(0.01)
        else:
            raise AssertionError("the server still accepts connections while stopping")
        assert stopping.is_alive()  # still waiting for the request being decoded
        release.set()
        stopping.join(TIMEOUT_S)
        in_flight.join(TIMEOUT_S)
    assert not stopping.is_alive()
    assert answers and answers[0][0] == 200 and len(answers[0][1]["translations"]) == 1


def test_serve_refuses_no_threads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dotformer.cli import main

    assert main(["serve", "--checkpoint", str(tmp_path / "none"), "--threads", "0"]) == 2
    assert capsys.readouterr().err == "dotformer serve: error: --threads must be positive, got 0\n"


def test_the_request_that_held_the_server_is_refused_at_once(translator: Any) -> None:
    """64 texts of 1,000 characters at beam 16 (inside the text limits) held a server for 91.6 s: its work, 64 x
    335 source tokens (334 symbols and EOS) x 16 = 343,040, is over the default limit, refused before any decoding."""
    from dotformer.api.endpoint import MAX_REQUEST_WORK, RequestError, translate_request

    class NoDecoding:
        files, max_input_length = translator.files, translator.max_input_length
        batch_groups = translator.batch_groups
        tgt_tokenizer = translator.tgt_tokenizer

        def translate(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("a refused request must not be decoded")

    text = ("a1 " * 334)[:1000]
    assert len(text) == 1000
    with pytest.raises(RequestError) as refused:
        asyncio.run(translate_request(NoDecoding(), {"texts": [text] * 64, "beam": 16}))
    assert refused.value.status == 413
    assert str(refused.value).startswith(
        f"the request asks for 343040 source tokens x beam; one request takes at most {MAX_REQUEST_WORK}"
    )
