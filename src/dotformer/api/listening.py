"""A local HTTP server opened and run, as ``dotformer serve`` and ``dotformer explore`` do it: an address that cannot
be bound is said in one line, and the server answers until Ctrl-C, then closes its socket.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import HTTPServer
from typing import Any

from dotformer.errors import ConfigError


@contextmanager
def bound_or_refused(host: str, port: int) -> Iterator[None]:
    """Around a server's binding to ``host:port``: an OSError (the port in use, not allowed, no such interface)
    becomes one line.

    Raises:
        ConfigError: ``cannot listen on HOST:PORT: why``.
    """
    try:
        yield
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def serve_until_interrupted(server: HTTPServer, command: str, listening: str, announce: Callable[[str], Any]) -> None:
    """Announce ``dotformer COMMAND: LISTENING (Ctrl-C stops)``, serve until Ctrl-C, announce that it stopped, and
    close the server's socket (also when serving fails)."""
    announce(f"dotformer {command}: {listening} (Ctrl-C stops)")
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        announce(f"dotformer {command}: stopped")
    finally:
        server.server_close()
