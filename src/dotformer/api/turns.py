"""The model's turns: one thread runs every call on the model, first come, first served.

A server's coroutines ``await turns.run(fn, ...)``; the calls queue in the order they are made and run one at a time
on the model's own thread, so the event loop never waits for the model and the model never runs on two threads. A
request decoded in chunks (one call each) queues its next chunk only when the previous one is done, so the chunks of
requests that arrived meanwhile run between its own: a large request does not hold back the small ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class ModelTurns:
    """A queue of calls on the model, run in order on one thread (see the module docstring).

    A call whose caller is cancelled before its turn is dropped; one already running finishes.
    """

    def __init__(self) -> None:
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dotformer-model")
        self._waiting = 0

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the model's thread, after every call queued before it; its result (or error)."""
        self._waiting += 1  # only the event loop's thread counts
        try:
            return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)
        finally:
            self._waiting -= 1

    @property
    def waiting(self) -> int:
        """Calls queued and not yet finished (the one running included)."""
        return self._waiting

    def close(self) -> None:
        """Wait for the call running, drop none queued (there are none once the server has answered every request)."""
        self._thread.shutdown(wait=True)
