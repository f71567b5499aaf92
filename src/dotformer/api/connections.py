"""What keeps ``dotformer serve`` answering under load: a deadline on reading each request, and fair turns at the model.

* :class:`DeadlineReader` wraps a connection's input so that reading one request (its line, headers and body) must
  end within a total deadline, whatever the pace: a client that sends one byte every few seconds is dropped when the
  deadline passes, not kept forever by an idle timeout that each byte resets.
* :class:`FairTurns` lets one thread at a time use the model, in the order they asked (first come, first served), so a
  request cut into chunks lets the requests that arrived meanwhile take their turn between its chunks.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO


class DeadlineReader:
    """A connection's buffered input whose reads must end by a deadline, and each wait at most ``idle_s``.

    Only ``read`` and ``readline`` are offered (what :mod:`http.server` uses). Every wait for the network is one
    ``recv`` with the socket's timeout set to what is left, so a slow sender cannot extend it.

    Args:
        stream: the handler's ``rfile`` (a :class:`io.BufferedReader` over the socket).
        connection: the socket under it.
        idle_s: the longest wait for the next bytes.
        total_s: the longest time to read one request, from :meth:`restart`.

    Raises (from reads):
        TimeoutError: the deadline passed or the client sent nothing for ``idle_s``.
    """

    def __init__(self, stream: BinaryIO, connection: socket.socket, idle_s: float, total_s: float) -> None:
        self.stream, self.connection = stream, connection
        self.idle_s, self.total_s = idle_s, total_s
        self.deadline = time.monotonic() + total_s

    def restart(self) -> None:
        """Start the deadline of the next request."""
        self.deadline = time.monotonic() + self.total_s

    def _arm(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"the request was not read within {self.total_s:g} s")
        self.connection.settimeout(min(self.idle_s, left))

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes (fewer at end of input); ``size`` < 0 reads to the end."""
        parts, wanted = [], size
        while wanted != 0:
            self._arm()
            chunk = self.stream.read1(wanted if wanted > 0 else 64 * 1024)  # type: ignore[attr-defined]
            if not chunk:
                break
            parts.append(chunk)
            wanted = wanted - len(chunk) if wanted > 0 else wanted
        return b"".join(parts)

    def readline(self, size: int = -1) -> bytes:
        """One line, its ``\\n`` included, of at most ``size`` bytes (``size`` < 0: no limit)."""
        line = bytearray()
        while size < 0 or len(line) < size:
            self._arm()
            buffered = self.stream.peek(1)  # type: ignore[attr-defined]  # waits for one recv at most
            if not buffered:
                break
            room = len(buffered) if size < 0 else min(len(buffered), size - len(line))
            end = buffered.find(b"\n", 0, room)
            take = end + 1 if end >= 0 else room
            line += self.stream.read(take)  # already buffered: no wait
            if end >= 0:
                break
        return bytes(line)

    def close(self) -> None:
        self.stream.close()


class FairTurns:
    """A lock handed out first come, first served (``threading.Lock`` promises no order).

    ``with turns.take():`` waits for the turns of every thread that asked before, then holds the model alone.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._next_ticket = 0
        self._serving = 0

    @contextmanager
    def take(self) -> Iterator[None]:
        """Wait for this thread's turn; release it on leaving the block."""
        with self._changed:
            ticket = self._next_ticket
            self._next_ticket += 1
            self._changed.wait_for(lambda: self._serving == ticket)
        try:
            yield
        finally:
            with self._changed:
                self._serving += 1
                self._changed.notify_all()

    @property
    def waiting(self) -> int:
        """Turns asked for and not yet finished (the one being served included)."""
        with self._changed:
            return self._next_ticket - self._serving
