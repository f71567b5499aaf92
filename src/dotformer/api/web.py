"""The HTTP side of ``dotformer serve`` and ``dotformer explore``: a JSON endpoint on aiohttp (asyncio).

Every connection is read by the event loop, so reading a request costs no thread: any number of slow or idle
clients hold nothing but their sockets, and the model's thread (:class:`~dotformer.api.turns.ModelTurns`) only ever
sees complete requests. The limits, each answered with one line of JSON ``{"error": "..."}``:

* the request line and headers must arrive within ``header_timeout`` seconds of the connection (or of the previous
  answer on a kept-alive one), or the connection is closed (aiohttp's keep-alive timer: each byte does not restart it);
* the body must arrive within ``body_timeout`` seconds of the headers (408), be at most ``max_body_bytes`` (413), be
  UTF-8 JSON (400) nested at most :data:`MAX_JSON_DEPTH` deep (400, checked before parsing);
* a path that is not served gets 404, a method the path does not take 405, and a request the handler refuses the
  status of its :class:`RequestError`. A request too malformed to parse as HTTP gets aiohttp's own plain-text 400.

A server starts listening in :meth:`LocalServer.run` (the command line: until Ctrl-C or SIGTERM) or
:meth:`LocalServer.start` (a background thread, for tests and notebooks; :meth:`~LocalServer.stop` ends it). Stopping
is graceful: the socket stops listening, idle connections close, a body still arriving is refused with 503, and the
requests being decoded finish (up to :data:`SHUTDOWN_TIMEOUT_S`) before the server returns.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from types import ModuleType
from typing import Any

from dotformer.errors import ConfigError, DotformerError, require_extra

HEADER_TIMEOUT_S = 10.0  # the request line and headers must arrive within this, or the connection is closed
BODY_TIMEOUT_S = 30.0  # the body must arrive within this after the headers, or 408
SHUTDOWN_TIMEOUT_S = 60.0  # on stopping, requests being answered get this long to finish
LISTEN_BACKLOG = 128  # connections the system queues before they are accepted
LINGER_S = 2.0  # after refusing a body (408, 413), what the client still sends is read and dropped this long
MAX_JSON_DEPTH = 32  # the deepest nesting of arrays and objects a body may have


class RequestError(DotformerError, ValueError):
    """A request the endpoint refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Reply:
    """A complete response: its status, body and media type."""

    body: bytes
    content_type: str = "application/json"
    status: int = HTTPStatus.OK


def json_reply(payload: dict[str, Any], status: int = HTTPStatus.OK) -> Reply:
    """``payload`` as a JSON reply (UTF-8, characters as they are)."""
    return Reply(json.dumps(payload, ensure_ascii=False).encode("utf-8"), status=status)


_CLOSING = (HTTPStatus.REQUEST_TIMEOUT, HTTPStatus.REQUEST_ENTITY_TOO_LARGE, HTTPStatus.SERVICE_UNAVAILABLE)
Handler = Callable[[Any], Awaitable[Reply]]  # called with the decoded JSON body (None for GET)

_STRUCTURE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')  # a string (skipped whole) or a bracket


def parse_json(body: bytes, example: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """A request body decoded as JSON, its nesting checked first (so no depth reaches Python's recursion limit).

    Raises:
        RequestError: an empty body, not UTF-8, arrays and objects nested deeper than ``max_depth``, or not JSON.
    """
    if not body.strip():
        raise RequestError(f"send a JSON body: {example}")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestError(f"the body is not UTF-8 JSON ({exc}); send {example}") from None
    depth = 0
    for match in _STRUCTURE.finditer(text):
        depth += {"[": 1, "{": 1, "]": -1, "}": -1}.get(match.group(), 0)
        if depth > max_depth:
            raise RequestError(f"the body nests arrays and objects deeper than {max_depth} levels; send {example}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
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
        error = kwargs.pop("exc_info", None)
        if isinstance(error, BaseException):
            msg = f"{msg}: {type(error).__name__}: {' '.join(str(error).split())}"
        self.logger.debug(msg, *args, **{k: v for k, v in kwargs.items() if k in ("extra", "stacklevel")})


class LocalServer:
    """A JSON endpoint on ``host:port``: ``routes`` maps ``"METHOD /path"`` to an async handler.

    Args:
        routes: e.g. ``{"GET /api/health": health, "POST /api/translate": translate}``; a POST handler gets the
            decoded JSON body, a GET handler None.
        host, port: where to listen (port 0: any free port; read :attr:`server_address` once started).
        name: the command's name in announcements and logs (``serve``, ``explore``).
        body_example: the smallest good body, quoted in errors (``{"texts": ["..."]}``).
        max_body_bytes, header_timeout, body_timeout: the limits of the module docstring.
        verbose: log each request (logger ``dotformer.NAME``).
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
    ) -> None:
        for field, value in {"header_timeout": header_timeout, "body_timeout": body_timeout}.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ConfigError(f"{type(self).__name__} {field} must be a positive number of seconds, got {value!r}")
        self.routes, self.host, self.name, self.body_example = routes, host, name, body_example
        self.server_address: tuple[str, int] = (host, port)  # the port is the bound one once started
        self.max_body_bytes, self.header_timeout, self.body_timeout = max_body_bytes, header_timeout, body_timeout
        self.verbose = verbose
        self.logger = logging.getLogger(f"dotformer.{name}")
        self._web: Any = None  # aiohttp.web, imported when the server starts
        self._runner: Any = None  # its aiohttp.web.AppRunner while it serves
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_asked: asyncio.Event | None = None  # set by stop() or a signal
        self._stopping: asyncio.Event | None = None  # set once stopping: bodies still arriving are refused
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The server's address, e.g. http://127.0.0.1:8080/."""
        return f"http://{self.server_address[0]}:{self.server_address[1]}/"

    @property
    def connections(self) -> int:
        """The connections open now (0 before the server starts and after it stops)."""
        server = self._runner.server if self._runner is not None else None
        return len(server.connections) if server is not None else 0

    @property
    def port(self) -> int:
        """The port listened on (the bound one once started)."""
        return self.server_address[1]

    async def _dispatch(self, request: Any) -> Any:
        """aiohttp's handler for every path: route, read the body, call the handler, answer in one JSON line."""
        handler = self.routes.get(f"{request.method} {request.path}")
        try:
            if handler is None:
                allowed = sorted(key.split()[0] for key in self.routes if key.split()[1] == request.path)
                if not allowed:
                    raise RequestError(f"no such endpoint: {request.path}", HTTPStatus.NOT_FOUND)
                raise RequestError(
                    f"{request.path} takes {' or '.join(allowed)}, not {request.method}", HTTPStatus.METHOD_NOT_ALLOWED
                )
            reply = await handler(await self._read_json(request) if request.method == "POST" else None)
        except RequestError as exc:
            reply = json_reply({"error": str(exc)}, exc.status)
        except DotformerError as exc:
            reply = json_reply({"error": str(exc)}, HTTPStatus.BAD_REQUEST)
        except Exception as exc:  # noqa: BLE001 (a bug answers 500 in one line and is logged; the server goes on)
            self.logger.exception("%s %s failed", request.method, request.path)
            message = f"the server failed on this request ({type(exc).__name__}); its log has the details"
            reply = json_reply({"error": message}, HTTPStatus.INTERNAL_SERVER_ERROR)
        response = self._web.Response(
            body=reply.body, status=reply.status, content_type=reply.content_type, charset="utf-8"
        )
        response.headers["Cache-Control"] = "no-store"
        if reply.status in _CLOSING:
            response.force_close()  # what follows on this connection cannot be read as the next request
        return response

    async def _read_json(self, request: Any) -> Any:
        """The body of a POST, decoded (:func:`parse_json`), within the size and time limits.

        Raises:
            RequestError: 413 (too large), 408 (too slow), 503 (the server is stopping), 400 (see parse_json).
        """
        too_large = RequestError(
            f"the body has more than {self.max_body_bytes} bytes; the endpoint takes at most {self.max_body_bytes}",
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
        )
        if request.content_length is not None and request.content_length > self.max_body_bytes:
            raise too_large
        assert self._stopping is not None
        reading = asyncio.ensure_future(request.read())  # raises HTTPRequestEntityTooLarge past client_max_size
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({reading, stopping}, timeout=self.body_timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            if not reading.done():
                reading.cancel()
        if not reading.done() or reading.cancelled():
            if self._stopping.is_set():
                raise RequestError("the server is stopping", HTTPStatus.SERVICE_UNAVAILABLE)
            raise RequestError(
                f"the body was not received in time (it must arrive within {self.body_timeout:g} s of the headers)",
                HTTPStatus.REQUEST_TIMEOUT,
            )
        if isinstance(reading.exception(), self._web.HTTPRequestEntityTooLarge):
            raise too_large
        if reading.exception() is not None:  # the client went away, or broke the chunked encoding
            raise RequestError(f"the body could not be read: {reading.exception()}")
        return parse_json(reading.result(), self.body_example)

    async def _serve(self, listening: Callable[[], None]) -> None:
        """Listen, call ``listening()``, serve until :meth:`stop` (or a signal), then stop gracefully."""
        self._web = web = aiohttp_web()
        self._loop = asyncio.get_running_loop()
        self._stop_asked, self._stopping = asyncio.Event(), asyncio.Event()
        app = web.Application(client_max_size=self.max_body_bytes)
        app.router.add_route("*", "/{path:.*}", self._dispatch)
        runner = web.AppRunner(
            app,
            keepalive_timeout=self.header_timeout,  # armed at the connection's start, and after each answer
            shutdown_timeout=SHUTDOWN_TIMEOUT_S,
            lingering_time=LINGER_S,  # so that the client reads the answer, not a reset
            access_log=self.logger if self.verbose else None,
            logger=_OneLineLog(self.logger, {}),
        )
        await runner.setup()
        self._runner = runner
        try:
            site = web.TCPSite(runner, self.host, self.port, backlog=LISTEN_BACKLOG)
            try:
                await site.start()
            except OSError as exc:
                raise ConfigError(f"cannot listen on {self.host}:{self.port}: {exc.strerror or exc}") from None
            self.server_address = runner.addresses[0][:2]
            listening()
            await self._stop_asked.wait()
            self._stopping.set()
        finally:
            await runner.cleanup()
            self._runner = None
            self.closed()

    def closed(self) -> None:
        """Called once the server has stopped and every request is answered (subclasses free what they hold)."""

    def announcement(self) -> str:
        """What :meth:`run` says once listening, after ``dotformer NAME:`` (subclasses name their endpoint)."""
        return f"serving {self.url}"

    def run(self, announce: Callable[[str], Any] = print) -> None:
        """Serve in this thread until Ctrl-C or SIGTERM: announce ``dotformer NAME: ANNOUNCEMENT (Ctrl-C stops)`` once
        listening, stop gracefully on the signal, and announce ``dotformer NAME: stopped``. A second Ctrl-C while the
        server stops raises KeyboardInterrupt at once.

        Raises:
            ConfigError: the address cannot be bound.
            MissingExtraError: aiohttp is not installed.
        """
        import signal

        def listening() -> None:
            assert self._loop is not None
            for number in (signal.SIGINT, signal.SIGTERM):
                self._loop.add_signal_handler(number, self._stop_on_signal)
            announce(f"dotformer {self.name}: {self.announcement()} (Ctrl-C stops)")

        asyncio.run(self._serve(listening))
        announce(f"dotformer {self.name}: stopped")

    def _stop_on_signal(self) -> None:
        import signal

        assert self._loop is not None and self._stop_asked is not None
        for number in (signal.SIGINT, signal.SIGTERM):  # a second signal gets the default: interrupt at once
            self._loop.remove_signal_handler(number)
        self._stop_asked.set()

    def start(self) -> LocalServer:
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
            self._thread.join()
            raise failure[0]
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop a server started with :meth:`start` (gracefully, see the module docstring) and wait for it."""
        if self._thread is None or not self._thread.is_alive() or self._loop is None or self._stop_asked is None:
            return
        self._loop.call_soon_threadsafe(self._stop_asked.set)
        self._thread.join(timeout)

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
