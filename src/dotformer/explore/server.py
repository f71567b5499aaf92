"""The explorer's local web server: the page, and a small JSON endpoint that runs the model.

    GET  /                 the page (serve mode), with optional precomputed examples (also /index.html)
    POST /api/attention    {"text": "...", "target": "..." (optional: force-decode this reference; not for a
                           language model, which reads the text itself)}
                           -> the example JSON of :func:`dotformer.explore.data.maps_to_json`
    GET  /api/health       {"ok": true}

It listens on 127.0.0.1 only, runs the model on one thread, one request at a time, refuses bodies over 16 KiB and
inputs over :data:`dotformer.explore.data.MAX_TEXT_CHARS` characters, answers bad requests with one line of JSON, and
stops on Ctrl-C. The HTTP side (limits, shutdown) is :mod:`dotformer.api.web`, as for ``dotformer serve``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dotformer.api.turns import ModelTurns
from dotformer.api.web import LocalServer, RequestError
from dotformer.explore.data import (
    MAX_TEXT_CHARS,
    build_page,
    example_json,
    examples_json,
    is_encoder,
    is_language_model,
    model_title,
)

HOST = "127.0.0.1"  # the explorer never listens on other interfaces
MAX_BODY_BYTES = 16 * 1024  # largest request body accepted


class ExplorerServer(LocalServer):
    """The explorer's endpoints for one loaded checkpoint (``start()``/``stop()`` or ``run()``, as
    :class:`~dotformer.api.web.LocalServer`).

    Args:
        loaded: a LoadedCheckpoint (``model``, ``src_tokenizer``, ``tgt_tokenizer``).
        port: TCP port on 127.0.0.1 (0: any free port; read :attr:`server_address` once started).
        examples: example texts decoded once at start and embedded in the page.
        verbose: log each request (logger ``dotformer.explore``).
        targets: None, or one reference per example to force-decode (None or "": decode that one).

    Raises:
        ConfigError: targets are not one per example.
    """

    def __init__(
        self,
        loaded: Any,
        port: int = 8000,
        examples: Sequence[str] = (),
        verbose: bool = False,
        targets: Sequence[str | None] | None = None,
    ) -> None:
        routes = {"GET /": self._page, "GET /index.html": self._page, "GET /api/health": self._health}
        routes["POST /api/attention"] = self._attention
        super().__init__(routes, HOST, port, "explore", '{"text": "..."}', MAX_BODY_BYTES, verbose=verbose)
        self.loaded = loaded
        embedded = examples_json(loaded, examples, targets)
        page = build_page(embedded, "serve", model_title(loaded), is_language_model(loaded), is_encoder(loaded))
        self.page = page.encode("utf-8")
        self.turns = ModelTurns()

    async def _page(self, _: None) -> bytes:
        return self.page

    async def _health(self, _: None) -> dict[str, Any]:
        return {"ok": True}

    async def _attention(self, request: Any) -> dict[str, Any]:
        if not isinstance(request, dict):
            raise RequestError('the body must be a JSON object: {"text": "..."}')
        text, target = self.checked(request.get("text"), request.get("target"))
        return await self.turns.run(example_json, self.loaded, text, target)

    @staticmethod
    def checked(text: Any, target: Any = None) -> tuple[str, str | None]:
        """The input text and the reference to force-decode (None: decode), stripped.

        Raises:
            RequestError: the text is not a non-empty string of at most MAX_TEXT_CHARS characters; the target is
                neither None nor such a string (an empty one means: decode).
        """
        if not isinstance(text, str) or not text.strip():
            raise RequestError('send {"text": "..."} with a non-empty text')
        if len(text) > MAX_TEXT_CHARS:
            raise RequestError(f"the input has {len(text)} characters; the explorer accepts at most {MAX_TEXT_CHARS}")
        if target is not None and not isinstance(target, str):
            raise RequestError('"target" must be a string (the reference to force-decode)')
        if target is not None and len(target) > MAX_TEXT_CHARS:
            raise RequestError(
                f"the reference has {len(target)} characters; the explorer accepts at most {MAX_TEXT_CHARS}"
            )
        return text.strip(), (target or "").strip() or None

    def closed(self) -> None:
        """Stop the model's thread once every request is answered."""
        self.turns.close()
