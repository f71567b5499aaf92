"""A local translation endpoint: ``POST /api/translate`` runs a checkpoint on a batch of texts.

    POST /api/translate   {"texts": ["...", ...], "beam": 4, "n_best": 1, "strategy": "beam"}
                          -> {"translations": [{"text": "...", "score": -1.23, "finished": true,
                                                "unknown_symbols": 0, "hypotheses": [...]}, ...]}
    GET  /api/health      {"ok": true, "model": "...", "limits": {...}}

Only ``texts`` is required; ``beam`` (1..:data:`MAX_BEAM`, default 4), ``n_best`` (1..beam, default 1) and
``strategy`` (``"beam"`` or ``"greedy"``) are optional. ``hypotheses`` is there when ``n_best`` > 1 (best first,
each ``{"text", "score", "finished"}``). Decoding is :meth:`dotformer.api.Translator.translate`, the path of
``dotformer translate``, so both give the same outputs for the same settings.

Bad input gets HTTP 400 (413 for a body over :data:`MAX_BODY_BYTES`) and ``{"error": "one line"}``; the server keeps
serving. It listens on 127.0.0.1 unless told otherwise, answers one request at a time (the model is not shared
between threads), bounds what one request may ask (:data:`MAX_TEXTS` texts of at most :data:`MAX_TEXT_CHARS`
characters, beam at most :data:`MAX_BEAM`), drops a client that stalls for :data:`REQUEST_TIMEOUT_S` seconds, and
stops on Ctrl-C.
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import TYPE_CHECKING, Any

from dotformer.errors import ConfigError, DotformerError

if TYPE_CHECKING:
    from dotformer.api.translator import Translator

logger = logging.getLogger("dotformer.serve")  # the documented name, kept from before the module moved into api/

HOST = "127.0.0.1"  # the default interface: this machine only
MAX_BODY_BYTES = 256 * 1024  # largest request body accepted
MAX_TEXTS = 64  # most texts per request
MAX_TEXT_CHARS = 2000  # most characters per text
MAX_BEAM = 16  # widest beam (and most n_best) a request may ask for
DISCARD_LIMIT_BYTES = 16 * MAX_BODY_BYTES  # a refused body up to this size is read and dropped before answering
REQUEST_TIMEOUT_S = 10.0  # a client that sends nothing for this long is dropped
STRATEGIES = ("beam", "greedy")
FIELDS = ("texts", "beam", "n_best", "strategy")


class RequestError(DotformerError, ValueError):
    """A request the endpoint refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST) -> None:
        super().__init__(message)
        self.status = status


def _positive_int(request: dict[str, Any], name: str, default: int, largest: int) -> int:
    value = request.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= largest:
        raise RequestError(f'"{name}" must be an integer from 1 to {largest}, got {json.dumps(value)}')
    return value


def parse_request(request: Any) -> tuple[list[str], dict[str, Any]]:
    """Check a decoded JSON request; return its texts and the keyword arguments of ``Translator.translate``.

    Raises:
        RequestError: not an object, unknown fields, ``texts`` missing, empty, too many or too long, not strings,
            or a bad ``beam`` / ``n_best`` / ``strategy`` (the message names the field and the limit).
    """
    if not isinstance(request, dict):
        raise RequestError('the body must be a JSON object: {"texts": ["..."]}')
    unknown = sorted(set(request) - set(FIELDS))
    if unknown:
        raise RequestError(f"unknown field(s) {', '.join(unknown)}; the fields are {', '.join(FIELDS)}")
    texts = request.get("texts")
    if not isinstance(texts, list) or not texts:
        raise RequestError('"texts" must be a non-empty list of strings')
    if len(texts) > MAX_TEXTS:
        raise RequestError(f'"texts" holds {len(texts)} texts; one request takes at most {MAX_TEXTS}')
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise RequestError(f'"texts"[{i}] is not a string')
        if len(text) > MAX_TEXT_CHARS:
            raise RequestError(f'"texts"[{i}] has {len(text)} characters; the endpoint takes at most {MAX_TEXT_CHARS}')
    strategy = request.get("strategy", "beam")
    if strategy not in STRATEGIES:
        raise RequestError(f'"strategy" must be one of {", ".join(STRATEGIES)}, got {json.dumps(strategy)}')
    beam = _positive_int(request, "beam", 4, MAX_BEAM)
    n_best = _positive_int(request, "n_best", 1, MAX_BEAM)
    if strategy == "greedy" and ("beam" in request or n_best != 1):
        raise RequestError('"strategy": "greedy" finds one output: leave out "beam" and "n_best"')
    if n_best > beam:
        raise RequestError(f'"n_best"={n_best} cannot exceed "beam"={beam}')
    return texts, {"strategy": strategy, "beam": beam, "n_best": n_best}


def translate_request(translator: Translator, request: Any) -> dict[str, Any]:
    """The JSON reply to one request (see the module docstring).

    Raises:
        RequestError: a bad request (see :func:`parse_request`).
        DotformerError: the model cannot decode an input (e.g. longer than it reads).
    """
    texts, options = parse_request(request)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unknown symbols are reported per text in the reply
        results = translator.translate(texts, details=True, **options)
    translations = []
    for result in results:
        best = result.hypotheses[0]
        item: dict[str, Any] = {
            "text": best.text,
            "score": best.score,
            "finished": best.finished,
            "unknown_symbols": result.unknown_symbols,
        }
        if options["n_best"] > 1:
            item["hypotheses"] = [{"text": h.text, "score": h.score, "finished": h.finished} for h in result.hypotheses]
        translations.append(item)
    return {"translations": translations}


class TranslationServer(HTTPServer):
    """An :class:`http.server.HTTPServer` that holds one loaded :class:`~dotformer.api.Translator`.

    Args:
        translator: from :func:`dotformer.load`.
        port: TCP port (0: any free port; read :attr:`server_port`).
        host: the interface to listen on (default 127.0.0.1, this machine only).
        verbose: log each request (``logging``, logger ``dotformer.serve``).

    Raises:
        ConfigError: the address cannot be bound (in use, or not allowed).
    """

    def __init__(self, translator: Translator, port: int = 8080, host: str = HOST, verbose: bool = False) -> None:
        self.translator = translator
        self.verbose = verbose
        try:
            super().__init__((host, port), TranslationHandler)
        except OSError as exc:
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None

    @property
    def url(self) -> str:
        """The endpoint's address, e.g. http://127.0.0.1:8080/api/translate."""
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/api/translate"

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
            },
        }


class TranslationHandler(BaseHTTPRequestHandler):
    """Routes ``POST /api/translate`` and ``GET /api/health``; everything else is a JSON 404."""

    server: TranslationServer
    server_version = "dotformer-serve"
    timeout = REQUEST_TIMEOUT_S  # socket timeout: a stalled client cannot hold the (single-threaded) server

    def send_json(self, status: HTTPStatus, payload: dict[str, Any]) -> None:
        """Send ``payload`` as a complete JSON response."""
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        route = self.path.split("?", 1)[0]
        if route == "/api/health":
            self.send_json(HTTPStatus.OK, self.server.health())
        elif route == "/api/translate":
            self.send_json(HTTPStatus.METHOD_NOT_ALLOWED, {"error": 'POST a JSON body {"texts": ["..."]}'})
        else:
            self.send_json(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint: {route}"})

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        route = self.path.split("?", 1)[0]
        if route != "/api/translate":
            self.send_json(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint: {route}"})
            return
        try:
            request = self.read_json()
            reply = translate_request(self.server.translator, request)
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
            RequestError: no or a bad Content-Length, a body over MAX_BODY_BYTES (413), not UTF-8 JSON.
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
            return json.loads(self.rfile.read(length).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise RequestError(f'the body is not UTF-8 JSON ({exc}); send {{"texts": ["..."]}}') from None

    def discard_body(self, length: int) -> None:
        """Read and drop a refused body (so the client can read the answer), or close the connection if it is huge."""
        self.close_connection = True  # never read what follows as the next request
        if length > DISCARD_LIMIT_BYTES:
            return
        while length > 0:
            chunk = self.rfile.read(min(length, 64 * 1024))
            if not chunk:
                return
            length -= len(chunk)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's signature)
        if self.server.verbose:
            logger.info("%s - %s", self.address_string(), format % args)


def serve(
    translator: Translator,
    port: int = 8080,
    host: str = HOST,
    verbose: bool = False,
    announce: Callable[[str], Any] = print,
) -> None:
    """Serve ``POST /api/translate`` on ``host:port`` until Ctrl-C (then close the socket and return).

    Raises:
        ConfigError: the address cannot be bound.
    """
    server = TranslationServer(translator, port, host, verbose)
    announce(f"dotformer serve: POST {server.url} (Ctrl-C stops)")
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        announce("dotformer serve: stopped")
    finally:
        server.server_close()
