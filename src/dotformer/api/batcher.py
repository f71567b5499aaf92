"""The batcher between a server's requests and the engine: the sentences of every waiting request, gathered into one
engine call.

A request hands the batcher its sentences, each with its size (source tokens x beam), under a key: requests whose
keys are equal decode alike (the same options, the same kind of call) and may share a call; others never do. One
coroutine, the batcher's own, forms the calls. A call starts once the oldest waiting sentence has waited
``max_wait_s`` since it arrived and since the last call ended, or its key's waiting sentences fill ``max_tokens``,
or one in ``groups`` of the requests known to be on their way is there (those waiting when the last call ended and
those it answered).
It takes sentences of that key up to ``max_tokens``, one request at a time in turn (round robin, oldest request
first), so that a large request's sentences are split across calls and the small requests that arrive meanwhile
ride in the next call beside them instead of waiting for the large one to end.
The sentences of a call are sorted by size (the engines sort them again for their own batches), decoded in one call
on the model's thread (:class:`~dotformer.api.turns.ModelTurns`), and each result goes back to its request, in the
request's order. A request cancelled while it waits (its client gone) takes its sentences out of the queue.

**Groups.** Clients that send again as soon as they are answered come back together after each call, a round trip
later (the answers written, the next requests read and parsed). With ``groups`` = 1 a call waits for all of them,
and the engine idles through every round trip. With ``groups`` = 2 a call starts once half of them are back, so a
steady crowd settles into two halves whose calls alternate: while the engine decodes one half, the other half's
round trip runs on the event loop's thread beside it. That pays where a call's time grows about in proportion to
its sentences (CTranslate2 on a CPU: a G2P call of 8 words decodes at 0.93x the rate of one of 200, one of 16 at
0.97x) and loses where it grows slowly (the torch engine, whose steps cost about the same for 8 rows as for 16; a
GPU), where ``groups`` = 1 is the choice. Each engine says which (its ``batch_groups``), and a server takes it.

The wait counts from the last call's end too because the clients that call just answered send their next request a
moment later: without it, the requests that queued during the call would start the next one alone at once. And the
wait ends as soon as enough of the clients expected are back: one client alone never waits.

Each request gets exactly what it would get decoded alone: a key is only shared by calls whose outputs do not depend
on what else is in the batch (greedy and beam search; sampling draws from one generator per call, so a sampling
request is a key of its own and is decoded whole in one call, as ``dotformer translate`` decodes it). The same holds
for generate requests: greedy ones share calls (each prompt's continuation reads nothing of the other rows);
sampling ones do not, since both engines draw every row of a call from one generator seeded once per call.

    batcher = Batcher(turns, max_tokens=4096, max_wait_s=0.005, groups=2)
    results = await batcher.submit(key, sentences, sizes, run)   # run(sentences of one call) -> their results
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dotformer.api.turns import ModelTurns
from dotformer.errors import ConfigError

MAX_BATCH_TOKENS = 4096  # default: most source tokens x beam in one engine call
MAX_WAIT_MS = 5.0  # default: longest wait for more requests before a call starts

Run = Callable[[list[Any]], list[Any]]  # the sentences of one call -> one result per sentence, in order


@dataclass(eq=False)
class _Job:
    """One request's sentences in the queue."""

    key: Hashable
    items: Sequence[Any]
    sizes: Sequence[int]
    run: Run
    whole: bool  # decoded in one call, never split (sampling)
    future: asyncio.Future[list[Any]]
    arrived: float = field(default_factory=time.monotonic)
    taken: int = 0  # sentences handed to calls so far
    done: int = 0  # sentences whose results came back
    results: list[Any] = field(default_factory=list)

    @property
    def left(self) -> int:
        return len(self.items) - self.taken


@dataclass(frozen=True)
class BatchStats:
    """What one engine call held: its sentences, their size (source tokens x beam), the requests they came from, and
    the seconds the engine spent on it (on the model's thread, the wait for its turn not counted)."""

    sentences: int
    tokens: int
    requests: int
    seconds: float = 0.0


class Batcher:
    """Gathers the sentences of waiting requests into engine calls (see the module docstring).

    Args:
        turns: the model's thread, where every call runs.
        max_tokens: most source tokens x beam in one call (a sentence above it is a call alone).
        max_wait_s: longest wait of the oldest sentence for more before a call starts.
        groups: a call starts once one in ``groups`` of the requests on their way are there (see "Groups"): 1 (the
            default) waits for all of them, 2 lets the calls of two halves alternate.
        on_batch: called (on the event loop) with each call's :class:`BatchStats` (metrics).

    Raises:
        ConfigError: a budget or a number of groups below 1, or a negative wait.
    """

    def __init__(
        self,
        turns: ModelTurns,
        max_tokens: int = MAX_BATCH_TOKENS,
        max_wait_s: float = MAX_WAIT_MS / 1000,
        groups: int = 1,
        on_batch: Callable[[BatchStats], None] | None = None,
    ) -> None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ConfigError(f"the batch token budget must be a positive integer, got {max_tokens!r}")
        if not max_wait_s >= 0:
            raise ConfigError(f"the batch wait must be >= 0 ms, got {max_wait_s * 1000!r}")
        if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
            raise ConfigError(f"the batch groups must be a positive integer, got {groups!r}")
        self.groups = groups
        self.turns, self.max_tokens, self.max_wait_s, self.on_batch = turns, max_tokens, max_wait_s, on_batch
        self._jobs: list[_Job] = []
        self._changed: asyncio.Event | None = None
        self._worker: asyncio.Task[None] | None = None
        self._freed = 0.0  # when the last call ended (time.monotonic)
        self._expected = 1  # requests known to be on their way: waiting, or answered by the last call (and back soon)

    @property
    def waiting(self) -> int:
        """Sentences queued and not yet in a call."""
        return sum(job.left for job in self._jobs)

    async def submit(
        self, key: Hashable, items: Sequence[Any], sizes: Sequence[int], run: Run, whole: bool = False
    ) -> list[Any]:
        """Queue one request's sentences and wait for their results, in order.

        Args:
            key: requests of equal keys may share a call (the same options); ``run`` of the first one queued runs it.
            items: the request's sentences (what ``run`` takes). sizes: each one's source tokens x beam.
            run: decodes the sentences of one call, on the model's thread; returns one result per sentence.
            whole: never split the request (its sentences go in one call, alone when its key is its own).

        Raises:
            Whatever ``run`` raises for a call holding one of the sentences.
        """
        if not items:
            return []
        loop = asyncio.get_running_loop()
        if self._worker is None or self._worker.done():
            self._changed = asyncio.Event()
            self._worker = loop.create_task(self._work())
        job = _Job(key, items, sizes, run, whole, loop.create_future())
        job.results = [None] * len(items)
        self._jobs.append(job)
        assert self._changed is not None
        self._changed.set()
        try:
            return await job.future
        finally:
            if job in self._jobs:  # cancelled while waiting: its sentences leave the queue
                self._jobs.remove(job)

    def close(self) -> None:
        """Stop forming calls (the server is closing; every request has been answered)."""
        if self._worker is not None:
            self._worker.cancel()

    async def _work(self) -> None:
        """Form and run calls for as long as the server runs."""
        assert self._changed is not None
        while True:
            while not any(job.left for job in self._jobs):
                self._changed.clear()
                await self._changed.wait()
            first = next(job for job in self._jobs if job.left)
            since = max(first.arrived, self._freed)  # the clients of the last call get the wait to send again
            enough = -(-self._expected // self.groups)  # one in `groups` of the requests on their way, rounded up
            while not self._full(first.key) and self._requests() < enough:
                remaining = since + self.max_wait_s - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.clear()
                try:
                    await asyncio.wait_for(self._changed.wait(), remaining)
                except TimeoutError:
                    break
            answered = await self._call(first)
            self._freed, self._expected = time.monotonic(), self._requests() + answered

    def _requests(self) -> int:
        """Requests with sentences waiting for a call."""
        return sum(1 for job in self._jobs if job.left)

    def _full(self, key: Hashable) -> bool:
        """Whether the waiting sentences of ``key`` fill a call."""
        total = 0
        for job in self._jobs:
            if job.key == key:
                if job.whole:
                    return True
                total += sum(job.sizes[job.taken :])
                if total >= self.max_tokens:
                    return True
        return False

    def _take(self, first: _Job) -> list[tuple[_Job, int]]:
        """The sentences of the next call: ``first``'s key, one sentence per request in turn, up to the budget."""
        if first.whole:
            taken = [(first, i) for i in range(first.taken, len(first.items))]
            first.taken = len(first.items)
            return taken
        jobs = [job for job in self._jobs if job.key == first.key and job.left and not job.whole]
        taken: list[tuple[_Job, int]] = []
        total = 0
        while jobs:
            for job in list(jobs):
                size = job.sizes[job.taken]
                if taken and total + size > self.max_tokens:
                    return taken
                taken.append((job, job.taken))
                job.taken += 1
                total += size
                if not job.left:
                    jobs.remove(job)
        return taken

    async def _call(self, first: _Job) -> int:
        """Run one call and hand each result back to its request; the number of requests it answered whole."""
        taken = sorted(self._take(first), key=lambda pair: pair[0].sizes[pair[1]])
        requests = list(dict.fromkeys(job for job, _ in taken))
        try:
            results, seconds = await self.turns.run(_timed, first.run, [job.items[i] for job, i in taken])
        except Exception as exc:  # noqa: BLE001 (each request of the call answers with the error)
            for job in requests:
                if job in self._jobs:
                    self._jobs.remove(job)
                if not job.future.done():
                    job.future.set_exception(exc)
            return len(requests)
        if self.on_batch is not None:
            tokens = sum(job.sizes[i] for job, i in taken)
            self.on_batch(BatchStats(len(taken), tokens, len(requests), seconds))
        for (job, i), result in zip(taken, results, strict=True):
            job.results[i] = result
            job.done += 1
        answered = 0
        for job in requests:
            if job.done == len(job.items):
                answered += 1
                if job in self._jobs:
                    self._jobs.remove(job)
                if not job.future.done():
                    job.future.set_result(job.results)
        return answered


def _timed(run: Run, items: list[Any]) -> tuple[list[Any], float]:
    """``run(items)`` and the seconds it took."""
    start = time.perf_counter()
    results = run(items)
    return results, time.perf_counter() - start
