"""A language model's text as it is produced: the pieces of one continuation, handed from the model's thread to the
event loop one step at a time, and cut at a stop sequence.

:func:`stream_continuation` runs :meth:`dotformer.api.Translator.generate_texts` through the server's batcher (in
its turn on the model's thread) with a callback that passes each new piece of text to the event loop as soon as the
engine has chosen its token (CTranslate2's ``generate_tokens``, the torch decoder's steps: see
:func:`dotformer.api.generation.generate_text`), so the first piece reaches the client after one step, not after
the whole answer. Closing the iterator (the client gone, a stop sequence found) stops the decoding at its next step.

:class:`StopText` finds the first stop sequence in the pieces, holding back the end of the text that could still be
the start of one, so that no piece of a stop sequence is ever sent.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any

from dotformer.api.batcher import Batcher

if TYPE_CHECKING:
    from dotformer.api.translator import Translator
    from dotformer.decoding.config import DecodeConfig


class _StreamClosedError(Exception):
    """Raised in the model's thread by the text callback once nobody reads the stream: it ends the decoding."""


async def stream_continuation(
    translator: Translator,
    prompt: str,
    config: DecodeConfig,
    batcher: Batcher | None = None,
    on_end: Callable[[], None] | None = None,
) -> AsyncIterator[str]:
    """The new text of one greedy or sampled continuation of ``prompt``, piece by piece as the engine produces it
    (the pieces joined are ``translator.generate_texts(prompt, config)[0]``).

    Args:
        translator: a language model. prompt: the text to continue. config: one greedy or sampled row
            (``n_best`` 1), from :func:`dotformer.api.generation.generation_settings`.
        batcher: the server's batcher, which gives the decoding its turn on the model's thread (None: a thread here).
        on_end: called (on the model's thread, before the stream ends) when the continuation ended before
            the token limit, at an end token or a model's EOS.

    Raises:
        Whatever ``generate_texts`` raises (after the pieces produced before the error).
    """
    loop = asyncio.get_running_loop()
    pieces: asyncio.Queue[str | None] = asyncio.Queue()
    closed = threading.Event()

    def on_text(piece: str) -> None:  # on the model's thread
        if closed.is_set():
            raise _StreamClosedError
        loop.call_soon_threadsafe(pieces.put_nowait, piece)

    def run(prompts: list[str]) -> list[Any]:
        try:
            return [translator.generate_texts(prompts[0], config, on_text, on_end)]
        except _StreamClosedError:
            return [None]

    if batcher is None:
        decoding = asyncio.ensure_future(asyncio.to_thread(run, [prompt]))
    else:
        decoding = asyncio.ensure_future(batcher.submit(object(), [prompt], [len(prompt) + 1], run, whole=True))
    decoding.add_done_callback(lambda _: pieces.put_nowait(None))  # the end: queued after every piece
    try:
        while (piece := await pieces.get()) is not None:
            yield piece
        decoding.result()  # an error of the decoding, after its pieces
    finally:
        closed.set()  # the decoding stops at its next token
        if not decoding.done():
            decoding.cancel()  # still queued: it leaves the queue (a running call stops through ``closed``)


class StopText:
    """Cuts a stream of text at the first of ``stops`` (OpenAI's ``stop``): :meth:`feed` returns the text safe to
    send now; :attr:`stopped` turns True once a stop sequence is found (the text before it has been returned, the
    sequence itself never is); :meth:`flush` returns what was held back once the stream ends without one.

        stop = StopText(["\\n\\n"])
        stop.feed("Hello\\n") -> "Hello"    (the "\\n" could start "\\n\\n": held back)
        stop.feed("\\nWorld") -> ""         (stopped)
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self.held = ""  # text not yet returned: it could be the start of a stop sequence
        self.stopped = False

    def feed(self, piece: str) -> str:
        """The part of ``held + piece`` that can be sent now ("" once stopped)."""
        if self.stopped:
            return ""
        text = self.held + piece
        found = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        if found:
            self.stopped, self.held = True, ""
            return text[: min(found)]
        keep = max((k for s in self.stops for k in range(1, min(len(s), len(text) + 1)) if text.endswith(s[:k])),
                   default=0)  # fmt: skip
        self.held = text[len(text) - keep :]
        return text[: len(text) - keep]

    def flush(self) -> str:
        """What was held back, once the text has ended without a stop sequence."""
        held, self.held = self.held, ""
        return "" if self.stopped else held
