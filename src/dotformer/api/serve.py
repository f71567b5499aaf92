"""A local translation endpoint: ``POST /api/translate`` runs a checkpoint on a batch of texts.

    POST /api/translate   {"texts": ["...", ...], "beam": 4, "n_best": 1, "strategy": "beam"}
                          -> {"translations": [{"text": "...", "score": -1.23, "finished": true,
                                                "unknown_symbols": 0, "hypotheses": [...]}, ...]}
    POST /api/generate    {"prompt": "...", "max_new_tokens": 200, "n": 1, ...} -> {"texts": ["...", ...]}
    POST /api/classify    {"texts": ["...", ...]} -> {"results": [{"label": "...", "probability": 0.9,
                                                       "probabilities": {...}}, ...]} (a tagger: words, labels)
    GET  /api/health      {"ok": true, "model": "...", "limits": {...}}
    GET  /                the endpoints and every decoding option (name, type, default, help)

Only ``texts`` is required; ``beam`` (1..:data:`MAX_BEAM`, default 4), ``n_best`` (1..beam, default 1),
``strategy`` (``"beam"``, ``"greedy"`` or ``"sample"``) and every other option of
:data:`dotformer.decoding.options.DECODE_OPTIONS` are optional (``prefix``: one string or null per text).
``unknown_symbols`` counts the symbols of the text and of its prefix read as <unk>.
``/api/generate`` is for language-model checkpoints (:meth:`dotformer.api.Translator.generate`), ``/api/classify``
for classifiers and taggers (:func:`dotformer.api.classifier.classify_request`).
``hypotheses`` is there when ``n_best`` > 1 (best first,
each ``{"text", "score", "finished"}``). Decoding is :meth:`dotformer.api.Translator.translate`, the path of
``dotformer translate``, so both give the same outputs for the same settings.

Bad input gets HTTP 400 (413 for a body over :data:`MAX_BODY_BYTES` or a request over :data:`MAX_REQUEST_WORK`,
408 for a body not received in time, 501 for a method other than GET and POST) and ``{"error": "one line"}``, a
malformed HTTP request too; the server keeps serving. It listens on 127.0.0.1 unless told otherwise.

Under load: each connection is read by one of a bounded pool of worker threads (:data:`DEFAULT_WORKERS`), so a slow
client holds one worker, never the others; reading one request must end within :data:`REQUEST_DEADLINE_S` seconds
(and no wait for the client may last :data:`REQUEST_TIMEOUT_S`), or the client is dropped; up to
:data:`LISTEN_BACKLOG` connections wait to be accepted. One request may ask for at most :data:`MAX_TEXTS` texts of at
most :data:`MAX_TEXT_CHARS` characters, a beam of at most :data:`MAX_BEAM`, and at most :data:`MAX_REQUEST_WORK`
source tokens x beam (1 for greedy) in all. The model decodes one chunk of at most :data:`CHUNK_WORK` source
tokens x beam at a time, the chunks of all requests taking turns first come, first served
(:class:`~dotformer.api.connections.FairTurns`), so a large request does not hold back the small ones that arrive
while it runs. Ctrl-C stops the server.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import TYPE_CHECKING, Any

from dotformer.api.classifier import classify_request
from dotformer.api.connections import DeadlineReader, FairTurns
from dotformer.api.endpoint import (
    CHUNK_WORK,
    FIELDS,
    MAX_BEAM,
    MAX_REQUEST_WORK,
    MAX_TEXT_CHARS,
    MAX_TEXTS,
    STRATEGIES,
    RequestError,
    describe_api,
    generate_request,
    parse_request,
    translate_request,
)
from dotformer.api.listening import bound_or_refused, serve_until_interrupted
from dotformer.errors import ConfigError, DotformerError

if TYPE_CHECKING:
    from dotformer.api.translator import Translator

__all__ = [  # the request's side (dotformer.api.endpoint) is part of this module's interface
    "CHUNK_WORK",
    "DEFAULT_WORKERS",
    "FIELDS",
    "HOST",
    "LISTEN_BACKLOG",
    "MAX_BEAM",
    "MAX_BODY_BYTES",
    "MAX_REQUEST_WORK",
    "MAX_TEXTS",
    "MAX_TEXT_CHARS",
    "REQUEST_DEADLINE_S",
    "REQUEST_TIMEOUT_S",
    "STRATEGIES",
    "RequestError",
    "TranslationHandler",
    "TranslationServer",
    "parse_request",
    "serve",
    "translate_request",
]

logger = logging.getLogger("dotformer.serve")  # the documented name, kept from before the module moved into api/

HOST = "127.0.0.1"  # the default interface: this machine only
MAX_BODY_BYTES = 256 * 1024  # largest request body accepted
DISCARD_LIMIT_BYTES = 16 * MAX_BODY_BYTES  # a refused body up to this size is read and dropped before answering
REQUEST_TIMEOUT_S = 10.0  # a client that sends nothing for this long is dropped
REQUEST_DEADLINE_S = 30.0  # a request (line, headers, body) not read within this time is dropped, however it trickles
DEFAULT_WORKERS = 16  # connections handled at once (each by one thread); more wait for a free worker
LISTEN_BACKLOG = 128  # connections the system queues before they are accepted (http.server's default is 5)


class TranslationServer(HTTPServer):
    """An :class:`http.server.HTTPServer` that holds one loaded :class:`~dotformer.api.Translator` and serves its
    connections on a bounded pool of threads, taking turns at the model (see the module docstring).

    Args:
        translator: from :func:`dotformer.load`.
        port: TCP port (0: any free port; read :attr:`server_port`).
        host: the interface to listen on (default 127.0.0.1, this machine only).
        verbose: log each request (``logging``, logger ``dotformer.serve``).
        workers: connections handled at once (:data:`DEFAULT_WORKERS`).
        request_timeout: the longest wait for a client's next bytes, seconds (:data:`REQUEST_TIMEOUT_S`).
        request_deadline: the longest time to read one request, seconds (:data:`REQUEST_DEADLINE_S`).
        max_work: the most source tokens x beam per request (:data:`MAX_REQUEST_WORK`).

    Raises:
        ConfigError: a limit that is not positive, or the address cannot be bound (in use, or not allowed).
    """

    request_queue_size = LISTEN_BACKLOG

    def __init__(
        self,
        translator: Translator,
        port: int = 8080,
        host: str = HOST,
        verbose: bool = False,
        workers: int = DEFAULT_WORKERS,
        request_timeout: float = REQUEST_TIMEOUT_S,
        request_deadline: float = REQUEST_DEADLINE_S,
        max_work: int = MAX_REQUEST_WORK,
    ) -> None:
        limits = {"workers": workers, "request_timeout": request_timeout, "request_deadline": request_deadline}
        for name, value in {**limits, "max_work": max_work}.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ConfigError(f"TranslationServer {name} must be positive, got {value!r}")
        if not isinstance(workers, int) or not isinstance(max_work, int):
            raise ConfigError(f"TranslationServer workers and max_work must be integers, got {workers!r}, {max_work!r}")
        self.translator = translator
        self.verbose = verbose
        self.workers, self.max_work = workers, max_work
        self.request_timeout, self.request_deadline = float(request_timeout), float(request_deadline)
        self.turns = FairTurns()
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dotformer-serve")
        self.open_connections: set[Any] = set()  # the sockets being served, closed at once when the server stops
        self.connections_lock = threading.Lock()
        with bound_or_refused(host, port):
            super().__init__((host, port), TranslationHandler)

    @property
    def url(self) -> str:
        """The endpoint's address, e.g. http://127.0.0.1:8080/api/translate (/api/generate for a language model)."""
        host, port = self.server_address[:2]
        route = {"lm": "/api/generate", "classify": "/api/classify", "tag": "/api/classify"}.get(
            self.translator.task, "/api/translate"
        )
        return f"http://{host}:{port}{route}"

    def health(self) -> dict[str, Any]:
        """What GET /api/health answers."""
        return {
            "ok": True,
            "model": str(self.translator.path),
            "task": self.translator.task,
            "limits": {
                "max_body_bytes": MAX_BODY_BYTES,
                "max_texts": MAX_TEXTS,
                "max_text_chars": MAX_TEXT_CHARS,
                "max_beam": MAX_BEAM,
                "max_work": self.max_work,
                "workers": self.workers,
                "request_timeout_s": self.request_timeout,
                "request_deadline_s": self.request_deadline,
            },
        }

    def process_request(self, request: Any, client_address: Any) -> None:
        """Hand the accepted connection to a worker thread (it waits for a free one when all are busy)."""
        self.pool.submit(self._serve_connection, request, client_address)

    def _serve_connection(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.open_connections.add(request)
        try:
            self.finish_request(request, client_address)
        except Exception:  # noqa: BLE001 (one connection's failure must not end its worker)
            self.handle_error(request, client_address)
        finally:
            with self.connections_lock:
                self.open_connections.discard(request)
            self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One log line (logger ``dotformer.serve``) instead of http.server's traceback on stderr."""
        import sys

        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError | TimeoutError):  # the client went away or stalled: nothing to report
            logger.debug("connection from %s dropped: %s", client_address, error)
        else:
            logger.error("request from %s failed: %s: %s", client_address, type(error).__name__, error)

    def server_close(self) -> None:
        """Close the socket and stop the workers: connections waiting for a worker are dropped, and so are the ones
        being read (a slow client does not hold the process); a chunk being decoded finishes first."""
        super().server_close()
        self.pool.shutdown(wait=False, cancel_futures=True)
        with self.connections_lock:
            for connection in self.open_connections:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)


class TranslationHandler(BaseHTTPRequestHandler):
    """Routes ``POST /api/translate`` and ``GET /api/health``; everything else, a malformed request included, is one
    line of JSON."""

    server: TranslationServer
    server_version = "dotformer-serve"
    rfile: DeadlineReader  # type: ignore[assignment]

    def setup(self) -> None:
        self.timeout = self.server.request_timeout  # the socket's timeout for each wait, reads and writes alike
        super().setup()
        self.rfile = DeadlineReader(
            self.rfile, self.connection, self.server.request_timeout, self.server.request_deadline
        )  # type: ignore[arg-type]

    def handle_one_request(self) -> None:
        self.rfile.restart()  # each request has its own deadline
        super().handle_one_request()

    def send_json(self, status: HTTPStatus, payload: dict[str, Any]) -> None:
        """Send ``payload`` as a complete JSON response."""
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        self.connection.settimeout(self.server.request_timeout)  # a reader's deadline may have shortened it
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's errors (a malformed request line or header, an unsupported method, ...) as one JSON line."""
        status = HTTPStatus(code)
        self.close_connection = True
        if self.request_version == "HTTP/0.9":  # a request line too broken to name a version: answer in HTTP/1.0
            self.request_version = "HTTP/1.0"
        line = " ".join((message or status.phrase).split())
        self.send_json(status, {"error": f"{line} (HTTP {code}); send POST /api/translate with a JSON body"})

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        route = self.path.split("?", 1)[0]
        if route == "/":
            self.send_json(HTTPStatus.OK, describe_api(self.server.translator))
        elif route == "/api/health":
            self.send_json(HTTPStatus.OK, self.server.health())
        elif route == "/api/translate":
            self.send_json(HTTPStatus.METHOD_NOT_ALLOWED, {"error": 'POST a JSON body {"texts": ["..."]}'})
        else:
            self.send_json(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint: {route}"})

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        route = self.path.split("?", 1)[0]
        if route not in ("/api/translate", "/api/generate", "/api/classify"):
            self.send_json(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint: {route}"})
            return
        try:
            request = self.read_json()
            if route == "/api/classify":
                reply = classify_request(self.server.translator, request, self.server.turns)
            elif route == "/api/generate":
                reply = generate_request(self.server.translator, request, self.server.turns)
            else:
                reply = translate_request(self.server.translator, request, self.server.turns, self.server.max_work)
        except RequestError as exc:
            self.send_json(exc.status, {"error": str(exc)})
            return
        except DotformerError as exc:
            self.send_json(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
            return
        self.send_json(HTTPStatus.OK, reply)

    def read_json(self) -> Any:
        """The request body parsed as JSON.

        Raises:
            RequestError: no or a bad Content-Length, a body over MAX_BODY_BYTES (413), not UTF-8 JSON, a body not
                received within the request's deadline (408).
        """
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            raise RequestError("send a JSON body with a Content-Length header") from None
        if length > MAX_BODY_BYTES:
            self.discard_body(length)
            raise RequestError(
                f"the body has {length} bytes; the endpoint takes at most {MAX_BODY_BYTES}",
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
            )
        if length <= 0:
            raise RequestError('send a JSON body: {"texts": ["..."]}')
        try:
            body = self.rfile.read(length)
        except TimeoutError:
            self.close_connection = True
            raise RequestError(
                f"the body was not received in time (a request must arrive within {self.server.request_deadline:g} s"
                f", with no pause over {self.server.request_timeout:g} s)",
                HTTPStatus.REQUEST_TIMEOUT,
            ) from None
        try:
            return json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise RequestError(f'the body is not UTF-8 JSON ({exc}); send {{"texts": ["..."]}}') from None

    def discard_body(self, length: int) -> None:
        """Read and drop a refused body (so the client can read the answer), or close the connection if it is huge."""
        self.close_connection = True  # never read what follows as the next request
        if length > DISCARD_LIMIT_BYTES:
            return
        try:
            while length > 0:
                chunk = self.rfile.read(min(length, 64 * 1024))
                if not chunk:
                    return
                length -= len(chunk)
        except TimeoutError:
            return

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's signature)
        if self.server.verbose:
            logger.info("%s - %s", self.address_string(), format % args)


def serve(
    translator: Translator,
    port: int = 8080,
    host: str = HOST,
    verbose: bool = False,
    announce: Callable[[str], Any] = print,
    workers: int = DEFAULT_WORKERS,
) -> None:
    """Serve ``POST /api/translate`` (``POST /api/generate`` for a language model) on ``host:port`` with ``workers``
    connections at once, until Ctrl-C (then close the socket and return).

    Raises:
        ConfigError: the address cannot be bound, or ``workers`` is not positive.
    """
    server = TranslationServer(translator, port, host, verbose, workers=workers)
    serve_until_interrupted(server, "serve", f"POST {server.url}", announce)
