"""The HTTP side of ``dotformer serve`` and ``dotformer explore``: JSON endpoints on aiohttp (asyncio).

An event loop reads every connection, so reading a request costs no thread: slow or idle clients hold nothing but
their sockets, and the model's thread (:class:`~dotformer.api.turns.ModelTurns`) only sees complete requests. Limits:
the request line and headers must arrive within ``header_timeout`` seconds of the connection (or of the previous
answer on a kept-alive one; each byte does not restart the clock), or the connection is closed; the body within
``body_timeout`` more (408), at most ``max_body_bytes`` (413), UTF-8 JSON nested at most :data:`MAX_JSON_DEPTH` deep
(400). Every refusal, 404 and 405 included, is one line ``{"error": "..."}``; only a request too malformed to read as
HTTP gets aiohttp's own plain-text 400 (answered before any handler runs).

:meth:`LocalServer.run` serves until Ctrl-C or SIGTERM (the command line), :meth:`LocalServer.start` from a
background thread until :meth:`~LocalServer.stop` (tests, notebooks). Stopping is graceful: the socket stops
listening, idle connections close, a body still arriving gets 503, and the requests being decoded are answered (for
up to :data:`SHUTDOWN_TIMEOUT_S`) before the server returns.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import signal
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from http import HTTPStatus
from types import ModuleType
from typing import Any, NamedTuple, TypeVar

from dotformer.errors import ConfigError, DotformerError, require_extra

HEADER_TIMEOUT_S = 10.0  # the request line and headers must arrive within this, or the connection is closed
BODY_TIMEOUT_S = 30.0  # the body must arrive within this after the headers, or 408
SHUTDOWN_TIMEOUT_S = 60.0  # on stopping, requests being answered get this long to finish
LISTEN_BACKLOG = 128  # connections the system queues before they are accepted
LINGER_S = 2.0  # after refusing a body (408, 413), what the client still sends is read and dropped this long
MAX_JSON_DEPTH = 32  # the deepest nesting of arrays and objects a body may have
_CLOSING = (HTTPStatus.REQUEST_TIMEOUT, HTTPStatus.REQUEST_ENTITY_TOO_LARGE, HTTPStatus.SERVICE_UNAVAILABLE)
_STRUCTURE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')  # a JSON string (skipped whole) or a bracket


class Raw(NamedTuple):
    """A reply that is not JSON: its bytes and their content type (``GET /metrics``'s text)."""

    body: bytes
    content_type: str


Reply = dict[str, Any] | bytes | Raw | AsyncIterator[dict[str, Any]]  # JSON, an HTML page, other bytes, or events
Handler = Callable[[Any], Awaitable[Reply]]  # JSON body (None for GET) -> the reply
Server = TypeVar("Server", bound="LocalServer")


class RequestError(DotformerError, ValueError):
    """A request the endpoint refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST) -> None:
        super().__init__(message)
        self.status = status


def parse_json(body: bytes, example: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """A request body decoded as JSON, its nesting checked first (so no depth reaches Python's recursion limit).

    Raises:
        RequestError: an empty body, not UTF-8, arrays and objects nested deeper than ``max_depth``, or not JSON;
            the message quotes ``example``, a good body.
    """
    if not body.strip():
        raise RequestError(f"send a JSON body: {example}")
    try:
        text = body.decode("utf-8")
        depth = 0
        for match in _STRUCTURE.finditer(text):
            depth += {"[": 1, "{": 1, "]": -1, "}": -1}.get(match.group(), 0)
            if depth > max_depth:
                raise RequestError(f"the body nests arrays and objects deeper than {max_depth} levels; send {example}")
        return json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RequestError(f"the body is not UTF-8 JSON ({exc}); send {example}") from None


def aiohttp_web() -> ModuleType:
    """``aiohttp.web``, or the one-line error that names the extra to install.

    Raises:
        MissingExtraError: aiohttp is not installed (``pip install "dotformer[serve]"``).
    """
    return require_extra("serve", "aiohttp.web", "serving over HTTP")


class _OneLineLog(logging.LoggerAdapter):
    """aiohttp's connection log (a malformed request, a client gone) as one debug line, never a traceback."""

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        error = kwargs.get("exc_info")
        if isinstance(error, BaseException):
            msg = f"{msg}: {type(error).__name__}: {' '.join(str(error).split())}"
        self.logger.debug(msg, *args)


class LocalServer:
    """JSON endpoints on ``host:port``: ``routes`` maps ``"METHOD /path"`` to an async handler, which gets the decoded
    JSON body of a POST (None for a GET) and returns the reply: a dict (JSON) or bytes (an HTML page).

    Args:
        routes: e.g. ``{"GET /api/health": health, "POST /api/translate": translate}``.
        host, port: where to listen (port 0: any free port; :attr:`server_address` holds the bound one once started).
        name: the command's name in announcements and logs (``serve``: logger ``dotformer.serve``).
        body_example: the smallest good body, quoted in errors (``{"texts": ["..."]}``).
        max_body_bytes, header_timeout, body_timeout: the limits of the module docstring.
        verbose: log each request, one JSON line on the logger ``dotformer.NAME.access``.
        api_key: when given, every route but those in ``open_routes`` needs the header ``Authorization: Bearer
            API_KEY`` (else 401, one line).
        open_routes: the routes served without the key (a health check).

    Raises:
        ConfigError: a timeout that is not a positive number.
    """

    def __init__(
        self,
        routes: dict[str, Handler],
        host: str,
        port: int,
        name: str,
        body_example: str,
        max_body_bytes: int,
        header_timeout: float = HEADER_TIMEOUT_S,
        body_timeout: float = BODY_TIMEOUT_S,
        verbose: bool = False,
        api_key: str | None = None,
        open_routes: frozenset[str] = frozenset(),
    ) -> None:
        if api_key is not None and (not api_key or any(c.isspace() for c in api_key)):
            raise ConfigError("the API key must be a non-empty string without spaces")
        self.api_key, self.open_routes = api_key, open_routes
        for field, value in {"header_timeout": header_timeout, "body_timeout": body_timeout}.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ConfigError(f"{type(self).__name__} {field} must be a positive number of seconds, got {value!r}")
        self.routes, self.host, self.name, self.body_example = routes, host, name, body_example
        self.server_address: tuple[str, int] = (host, port)
        self.max_body_bytes, self.header_timeout, self.body_timeout = max_body_bytes, header_timeout, body_timeout
        self.verbose, self.logger = verbose, logging.getLogger(f"dotformer.{name}")
        self.access_logger = logging.getLogger(f"dotformer.{name}.access")
        self._web: Any = None  # aiohttp.web, imported when the server starts
        self._runner: Any = None  # the aiohttp.web.AppRunner while serving
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_asked, self._stopping = asyncio.Event(), asyncio.Event()  # made anew in the server's loop
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The server's address, e.g. http://127.0.0.1:8080/."""
        return f"http://{self.server_address[0]}:{self.server_address[1]}/"

    @property
    def connections(self) -> int:
        """The connections open now (0 when not serving)."""
        return len(self._runner.server.connections) if self._runner is not None and self._runner.server else 0

    def announcement(self) -> str:
        """What :meth:`run` says once listening, after ``dotformer NAME:``."""
        return f"serving {self.url}"

    def closed(self) -> None:
        """Called once the server has stopped and answered every request (a subclass frees what it holds)."""

    def answered(self, route: str, status: int, seconds: float, reply: Any) -> None:
        """Called once per request answered (``route``: ``"POST /api/translate"``, ``"other"`` for a path that is
        none; ``seconds`` from its headers read to its answer; ``reply``: what the handler returned, None after an
        error): with ``verbose``, one JSON line on the logger ``dotformer.NAME.access``
        (:func:`~dotformer.api.metrics.access_line`). A subclass counts it too."""
        if self.verbose:
            from dotformer.api.metrics import access_line

            access_line(self.access_logger, route, status, seconds, self.sentences(reply))

    def sentences(self, reply: Any) -> int:
        """How many texts ``reply`` answers (for the access log; 0 here, a subclass knows its replies)."""
        return 0

    def error_reply(self, path: str, message: str, status: int) -> dict[str, Any]:
        """The body of a refusal at ``path``: ``{"error": message}`` (a subclass may speak another API's shape)."""
        return {"error": message}

    async def _dispatch(self, request: Any) -> Any:
        """aiohttp's handler for every path: route, read the body, call the handler, answer."""
        started = time.perf_counter()
        key = f"{request.method} {request.path}"
        route = key if key in self.routes else "other"
        try:
            response = await self._answer(request, started, route)
        except BaseException:  # the client went away (the task cancelled): counted as status 499, nginx's convention
            self.answered(route, 499, time.perf_counter() - started, None)
            raise
        return response

    async def _answer(self, request: Any, started: float, route: str) -> Any:
        """Route, read the body, call the handler, answer (a stream of events is written as it comes)."""
        handler = self.routes.get(f"{request.method} {request.path}")
        status, content_type, reply = HTTPStatus.OK, "application/json; charset=utf-8", None
        try:
            if handler is None:
                allowed = sorted(key.split()[0] for key in self.routes if key.split()[1] == request.path)
                if not allowed:
                    raise RequestError(f"no such endpoint: {request.path}", HTTPStatus.NOT_FOUND)
                message = f"{request.path} takes {' or '.join(allowed)}, not {request.method}"
                raise RequestError(message, HTTPStatus.METHOD_NOT_ALLOWED)
            self._check_key(request)
            reply = await handler(await self._read_json(request) if request.method == "POST" else None)
        except DotformerError as exc:  # a RequestError says its status; any other user error is a 400
            status = getattr(exc, "status", HTTPStatus.BAD_REQUEST)
            reply = self.error_reply(request.path, str(exc), status)
        except Exception as exc:  # noqa: BLE001 (a bug: one line to the client, the traceback to the log)
            self.logger.exception("%s %s failed", request.method, request.path)
            status = HTTPStatus.INTERNAL_SERVER_ERROR
            message = f"the server failed on this request ({type(exc).__name__}); its log has the details"
            reply = self.error_reply(request.path, message, status)
        if hasattr(reply, "__aiter__"):
            return await self._stream(request, reply, started, route)
        headers = {"Cache-Control": "no-store"}
        if isinstance(reply, Raw):
            body, headers["Content-Type"] = reply.body, reply.content_type
        elif isinstance(reply, bytes):
            body, headers["Content-Type"] = reply, "text/html; charset=utf-8"
        else:
            body, headers["Content-Type"] = json.dumps(reply, ensure_ascii=False).encode("utf-8"), content_type
        response = self._web.Response(body=body, status=status, headers=headers)
        if status == HTTPStatus.UNAUTHORIZED:
            response.headers["WWW-Authenticate"] = "Bearer"
        if status in _CLOSING:
            response.force_close()  # what follows on this connection cannot be read as the next request
        self.answered(route, status, time.perf_counter() - started, None if status != HTTPStatus.OK else reply)
        return response

    async def _stream(self, request: Any, events: AsyncIterator[dict[str, Any]], started: float, route: str) -> Any:
        """Send ``events`` as server-sent events as they come: ``data: {JSON}`` each, then ``data: [DONE]``. A
        failure once the stream has begun is one last event ``data: {"error": "..."}``; a client gone stops the
        events (the iterator is closed, so the decoding it drives stops)."""
        response = self._web.StreamResponse(
            status=HTTPStatus.OK, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
        )
        await response.prepare(request)
        try:
            try:
                async for event in events:
                    await response.write(b"data: " + json.dumps(event, ensure_ascii=False).encode("utf-8") + b"\n\n")
                last: dict[str, Any] | None = None
            except DotformerError as exc:
                last = self.error_reply(request.path, str(exc), getattr(exc, "status", HTTPStatus.BAD_REQUEST))
            except ConnectionError:  # the client went away between two events
                self.answered(route, 499, time.perf_counter() - started, None)
                return response
            except Exception as exc:  # noqa: BLE001 (a bug: one event to the client, the traceback to the log)
                self.logger.exception("%s %s failed while streaming", request.method, request.path)
                message = f"the server failed on this request ({type(exc).__name__}); its log has the details"
                last = self.error_reply(request.path, message, HTTPStatus.INTERNAL_SERVER_ERROR)
            tail = b"data: [DONE]\n\n" if last is None else b"data: " + json.dumps(last).encode("utf-8") + b"\n\n"
            await response.write(tail)
            await response.write_eof()
        finally:
            await events.aclose()  # type: ignore[attr-defined]
        self.answered(route, HTTPStatus.OK, time.perf_counter() - started, {"stream": True})
        return response

    def _check_key(self, request: Any) -> None:
        """Refuse a request without the API key, on every route but the open ones.

        Raises:
            RequestError: (401) no ``Authorization: Bearer KEY`` header, or another key.
        """
        if self.api_key is None or f"{request.method} {request.path}" in self.open_routes:
            return
        import hmac

        given = request.headers.get("Authorization", "")
        scheme, _, key = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(key.strip().encode(), self.api_key.encode()):
            why = "no API key given" if not given else "the API key is not this server's"
            raise RequestError(f"{why}: send the header Authorization: Bearer KEY", HTTPStatus.UNAUTHORIZED)

    async def _read_json(self, request: Any) -> Any:
        """The body of a POST, decoded (:func:`parse_json`), within the size and time limits.

        Raises:
            RequestError: 413 (too large), 408 (too slow), 503 (the server is stopping), 400 (see parse_json).
        """
        too_large = RequestError(f"the body has more than {self.max_body_bytes} bytes; the endpoint takes at most "
                                 f"{self.max_body_bytes}", HTTPStatus.REQUEST_ENTITY_TOO_LARGE)  # fmt: skip
        if request.content_length is not None and request.content_length > self.max_body_bytes:
            raise too_large
        reading = asyncio.ensure_future(request.read())  # raises HTTPRequestEntityTooLarge past client_max_size
        stopping = asyncio.ensure_future(self._stopping.wait())
        first = asyncio.FIRST_COMPLETED
        done, _ = await asyncio.wait({reading, stopping}, timeout=self.body_timeout, return_when=first)
        for task in (reading, stopping):
            task.cancel()
        if reading not in done and self._stopping.is_set():
            raise RequestError("the server is stopping", HTTPStatus.SERVICE_UNAVAILABLE)
        if reading not in done:
            raise RequestError(f"the body was not received in time (it must arrive within {self.body_timeout:g} s of "
                               "the headers)", HTTPStatus.REQUEST_TIMEOUT)  # fmt: skip
        if isinstance(reading.exception(), self._web.HTTPRequestEntityTooLarge):
            raise too_large
        if reading.exception() is not None:  # the client went away, or broke the chunked encoding
            raise RequestError(f"the body could not be read: {reading.exception()}")
        return parse_json(reading.result(), self.body_example)

    async def _serve(self, listening: Callable[[], None]) -> None:
        """Listen, call ``listening()``, serve until asked to stop (:meth:`stop`, a signal), then stop gracefully."""
        self._web = web = aiohttp_web()
        self._loop = asyncio.get_running_loop()
        self._stop_asked, self._stopping = asyncio.Event(), asyncio.Event()
        app = web.Application(client_max_size=self.max_body_bytes)
        app.router.add_route("*", "/{path:.*}", self._dispatch)
        self._runner = runner = web.AppRunner(
            app,
            keepalive_timeout=self.header_timeout,  # armed when a connection opens, and after each answer
            shutdown_timeout=SHUTDOWN_TIMEOUT_S,
            lingering_time=LINGER_S,  # so that a refused client reads the answer, not a reset
            access_log=None,  # one JSON line per request instead: answered()
            logger=_OneLineLog(self.logger, {}),
        )
        await runner.setup()
        host, port = self.server_address
        try:
            try:
                await web.TCPSite(runner, host, port, backlog=LISTEN_BACKLOG).start()
            except OSError as exc:
                raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
            self.server_address = runner.addresses[0][:2]
            listening()
            await self._stop_asked.wait()
            self._stopping.set()
        finally:
            await runner.cleanup()
            self._runner = None
            self.closed()

    def run(self, announce: Callable[[str], Any] = print) -> None:
        """Serve in this thread: announce ``dotformer NAME: ANNOUNCEMENT (Ctrl-C stops)`` once listening, stop
        gracefully on Ctrl-C or SIGTERM and announce ``dotformer NAME: stopped``. A second Ctrl-C interrupts at once.

        Raises:
            ConfigError: the address cannot be bound.
            MissingExtraError: aiohttp is not installed.
        """

        def stop_on_signal() -> None:
            for number in (signal.SIGINT, signal.SIGTERM):  # a second signal gets the default: interrupt at once
                self._loop.remove_signal_handler(number)  # type: ignore[union-attr]
            self._stop_asked.set()

        def listening() -> None:
            for number in (signal.SIGINT, signal.SIGTERM):
                self._loop.add_signal_handler(number, stop_on_signal)  # type: ignore[union-attr]
            announce(f"dotformer {self.name}: {self.announcement()} (Ctrl-C stops)")

        asyncio.run(self._serve(listening))
        announce(f"dotformer {self.name}: stopped")

    def start(self: Server) -> Server:
        """Serve from a background thread; return once listening.

        Raises:
            ConfigError: the address cannot be bound.
            MissingExtraError: aiohttp is not installed.
        """
        ready, failure = threading.Event(), []

        def serve() -> None:
            try:
                asyncio.run(self._serve(ready.set))
            except BaseException as exc:  # noqa: BLE001 (handed to the thread that called start)
                failure.append(exc)
                ready.set()

        self._thread = threading.Thread(target=serve, name=f"dotformer-{self.name}", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            raise failure[0]
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop a server started with :meth:`start` (gracefully, see the module docstring) and wait for it."""
        if self._thread is not None and self._thread.is_alive() and self._loop is not None:
            self._loop.call_soon_threadsafe(self._stop_asked.set)
            self._thread.join(timeout)

    def __enter__(self: Server) -> Server:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
