"""The explorer's local web server: the page, and a small JSON endpoint that runs the model.

    GET  /                 the page (serve mode), with optional precomputed examples
    POST /api/attention    {"text": "...", "target": "..." (optional: force-decode this reference; not for a
                           language model, which reads the text itself)}
                           -> the example JSON of :func:`dotformer.explore.data.maps_to_json`
    GET  /api/health       {"ok": true}

It listens on 127.0.0.1 only, handles one request at a time (the model is not shared between threads), refuses
bodies over 16 KiB and inputs over :data:`dotformer.explore.data.MAX_TEXT_CHARS` characters, and stops on Ctrl-C.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from dotformer.api.listening import bound_or_refused, serve_until_interrupted
from dotformer.errors import ConfigError, DotformerError
from dotformer.explore.data import (
    MAX_TEXT_CHARS,
    build_page,
    example_json,
    examples_json,
    is_language_model,
    model_title,
)

HOST = "127.0.0.1"  # the explorer never listens on other interfaces
MAX_BODY_BYTES = 16 * 1024  # largest request body accepted


class ExplorerServer(HTTPServer):
    """An :class:`http.server.HTTPServer` holding the loaded checkpoint and the page it serves.

    Args:
        loaded: a LoadedCheckpoint (``model``, ``src_tokenizer``, ``tgt_tokenizer``).
        port: TCP port on 127.0.0.1 (0: any free port; read ``server_port``).
        examples: example texts decoded once at start and embedded in the page.
        targets: None, or one reference per example to force-decode (None or "": decode that one).
        verbose: log each request on standard error.

    Raises:
        ConfigError: the port cannot be bound (in use, or not allowed).
    """

    def __init__(
        self,
        loaded: Any,
        port: int = 8000,
        examples: Sequence[str] = (),
        verbose: bool = False,
        targets: Sequence[str | None] | None = None,
    ) -> None:
        self.loaded = loaded
        self.verbose = verbose
        embedded = examples_json(loaded, examples, targets)
        self.page = build_page(embedded, "serve", model_title(loaded), is_language_model(loaded)).encode("utf-8")
        with bound_or_refused(HOST, port):
            super().__init__((HOST, port), ExplorerHandler)

    @property
    def url(self) -> str:
        """The page's address, e.g. http://127.0.0.1:8000/."""
        return f"http://{HOST}:{self.server_port}/"

    def answer(self, text: Any, target: Any = None) -> dict[str, Any]:
        """The example JSON for one input text, decoded greedily or with ``target`` force-decoded.

        Raises:
            DotformerError: the text is not a non-empty string of at most MAX_TEXT_CHARS characters, or has no tokens;
                the target is neither None nor such a string (an empty one means: decode).
        """
        if not isinstance(text, str) or not text.strip():
            raise ConfigError('send {"text": "..."} with a non-empty text')
        if len(text) > MAX_TEXT_CHARS:
            raise ConfigError(f"the input has {len(text)} characters; the explorer accepts at most {MAX_TEXT_CHARS}")
        if target is not None and not isinstance(target, str):
            raise ConfigError('"target" must be a string (the reference to force-decode)')
        if target is not None and len(target) > MAX_TEXT_CHARS:
            raise ConfigError(
                f"the reference has {len(target)} characters; the explorer accepts at most {MAX_TEXT_CHARS}"
            )
        return example_json(self.loaded, text.strip(), (target or "").strip() or None)


class ExplorerHandler(BaseHTTPRequestHandler):
    """Routes the three endpoints of :class:`ExplorerServer`."""

    server: ExplorerServer
    server_version = "dotformer-explore"

    def send_body(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
        """Send a complete response."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def send_json(self, status: HTTPStatus, payload: dict[str, Any]) -> None:
        """Send ``payload`` as JSON."""
        self.send_body(status, json.dumps(payload, ensure_ascii=False).encode("utf-8"), "application/json")

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        """The page, or the health check."""
        route = self.path.split("?", 1)[0]
        if route in ("/", "/index.html"):
            self.send_body(HTTPStatus.OK, self.server.page, "text/html; charset=utf-8")
        elif route == "/api/health":
            self.send_json(HTTPStatus.OK, {"ok": True})
        else:
            self.send_json(HTTPStatus.NOT_FOUND, {"error": f"no such page: {route}"})

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        """Run the model on {"text": ..., "target": ...}."""
        if self.path.split("?", 1)[0] != "/api/attention":
            self.send_json(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint: {self.path}"})
            return
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if not 0 < length <= MAX_BODY_BYTES:
            self.send_json(HTTPStatus.BAD_REQUEST, {"error": f"send a JSON body of 1 to {MAX_BODY_BYTES} bytes"})
            return
        try:
            request = json.loads(self.rfile.read(length).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            self.send_json(HTTPStatus.BAD_REQUEST, {"error": 'the body must be JSON: {"text": "..."}'})
            return
        try:
            if not isinstance(request, dict):
                raise ConfigError('the body must be a JSON object: {"text": "..."}')
            reply = self.server.answer(request.get("text"), request.get("target"))
        except DotformerError as exc:
            self.send_json(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
            return
        self.send_json(HTTPStatus.OK, reply)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's signature)
        """Log requests on standard error only when the server is verbose."""
        if self.server.verbose:
            sys.stderr.write(f"{self.address_string()} - {format % args}\n")


def serve(
    loaded: Any,
    port: int = 8000,
    examples: Sequence[str] = (),
    verbose: bool = False,
    announce: Any = print,
    targets: Sequence[str | None] | None = None,
) -> None:
    """Serve the explorer on 127.0.0.1:``port`` until Ctrl-C (then close the socket and return).

    Raises:
        ConfigError: the port cannot be bound, or targets are not one per example.
    """
    server = ExplorerServer(loaded, port, examples, verbose, targets)
    serve_until_interrupted(server, "explore", f"serving {server.url}", announce)
