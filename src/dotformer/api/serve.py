"""A local translation endpoint: ``POST /api/translate`` runs a checkpoint on a batch of texts.

    POST /api/translate   {"texts": ["...", ...], "beam": 4, "n_best": 1, "strategy": "beam"}
                          -> {"translations": [{"text": "...", "score": -1.23, "finished": true,
                                                "unknown_symbols": 0, "hypotheses": [...]}, ...]}
    POST /api/generate    {"prompt": "...", "max_new_tokens": 200, "n": 1, ...} -> {"texts": ["...", ...]}
    POST /api/classify    {"texts": ["...", ...]} -> {"results": [{"label": "...", "probability": 0.9,
                                                       "probabilities": {...}}, ...]} (a tagger: words, labels)
    POST /api/embed       {"texts": ["...", ...], "pooling": "mean", "normalize": false}
                          -> {"embeddings": [[...], ...], "dimensions": D} (a model with an encoder)
    GET  /api/health      {"ok": true, "model": "...", "limits": {...}}
    GET  /health          {"status": "ok"}: the process answers (for a container's liveness probe; never needs a key)
    GET  /ready           {"ready": true, "model": "...", "engine": "..."}: the model is loaded and takes requests
    GET  /metrics         the server's figures in Prometheus' text format (:mod:`dotformer.api.metrics`)
    POST /v1/completions  OpenAI-style completions for a language model, streamed or not
                          (:mod:`dotformer.api.completions`); GET /v1/models lists the model
    POST /v1/chat/completions  the same for chat messages, where the model has a chat template
    GET  /                the model, the endpoints and every decoding option (name, type, default, help)

Only ``texts`` is required; every option of :data:`dotformer.decoding.options.DECODE_OPTIONS` is optional
(``prefix``: one string or null per text), and so is ``scores`` (default true; false: each ``score`` is the search's,
without CTranslate2's scoring pass, which costs about a sixth of its decoding time; the texts are the same).
``unknown_symbols`` counts the symbols of the text and of its prefix read as <unk>; ``hypotheses`` is there when
``n_best`` > 1 (best first). ``/api/generate`` with ``"stream": true`` answers with server-sent events,
``data: {"text": "..."}`` per piece of text as the engine produces it, then ``data: [DONE]``. Decoding is
:meth:`dotformer.api.Translator.translate`, the path of ``dotformer translate``, so both give the same outputs for the
same settings.

A request's checks and limits are :mod:`dotformer.api.endpoint`'s; its texts are decoded beside those of the other
requests waiting with the same options (:class:`~dotformer.api.batcher.Batcher`), one engine call at a time on the
model's thread (:class:`~dotformer.api.turns.ModelTurns`); the connection's limits, its one-line errors and the
graceful stop on Ctrl-C or SIGTERM are :mod:`dotformer.api.web`'s. It listens on 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from dotformer.api.batcher import MAX_BATCH_TOKENS, MAX_WAIT_MS, Batcher
from dotformer.api.completions import chat_request, completion_request, describe_completions, models_reply
from dotformer.api.endpoint import (
    MAX_BEAM,
    MAX_REQUEST_WORK,
    MAX_TEXT_CHARS,
    MAX_TEXTS,
    classify_request,
    describe_api,
    embed_request,
    generate_request,
    model_kind,
    translate_request,
)
from dotformer.api.metrics import ServerMetrics
from dotformer.api.turns import ModelTurns
from dotformer.api.web import BODY_TIMEOUT_S, HEADER_TIMEOUT_S, MAX_JSON_DEPTH, LocalServer, Raw
from dotformer.errors import ConfigError

if TYPE_CHECKING:
    from dotformer.api.translator import Translator

HOST = "127.0.0.1"  # the default interface: this machine only
MAX_BODY_BYTES = 256 * 1024  # largest request body accepted


class TranslationServer(LocalServer):
    """The endpoints of the module docstring for one loaded :class:`~dotformer.api.Translator`: ``start()`` serves
    from a background thread until ``stop()`` (or as a context manager), ``run()`` in this one until Ctrl-C or
    SIGTERM (:class:`~dotformer.api.web.LocalServer`).

    Args:
        translator: from :func:`dotformer.load`.
        port: TCP port (0: any free port; :attr:`server_address` holds the bound one once started).
        host: the interface to listen on (default 127.0.0.1, this machine only).
        verbose: log each request, one JSON line (route, status, ms, sentences) on the logger
            ``dotformer.serve.access``.
        header_timeout: the longest wait for a request's line and headers, seconds (:data:`HEADER_TIMEOUT_S`).
        body_timeout: the longest wait for its body after the headers, seconds (:data:`BODY_TIMEOUT_S`).
        max_work: the most source tokens x beam per request (:data:`MAX_REQUEST_WORK`).
        batch_tokens: the most source tokens x beam of all requests decoded in one engine call.
        batch_wait_ms: the longest a request waits for others to share its call, milliseconds.
        batch_groups: a call starts once one in ``batch_groups`` of the requests on their way are there
            (:class:`~dotformer.api.batcher.Batcher`, "Groups"); None: the engine's choice (2 for CTranslate2 on a
            CPU, else 1).
        api_key: when given, every route but ``GET /health`` needs ``Authorization: Bearer API_KEY`` (401 without).

    Raises:
        ConfigError: a limit that is not positive.
    """

    def __init__(
        self,
        translator: Translator,
        port: int = 8080,
        host: str = HOST,
        verbose: bool = False,
        header_timeout: float = HEADER_TIMEOUT_S,
        body_timeout: float = BODY_TIMEOUT_S,
        max_work: int = MAX_REQUEST_WORK,
        batch_tokens: int = MAX_BATCH_TOKENS,
        batch_wait_ms: float = MAX_WAIT_MS,
        batch_groups: int | None = None,
        api_key: str | None = None,
    ) -> None:
        if isinstance(max_work, bool) or not isinstance(max_work, int) or max_work < 1:
            raise ConfigError(f"TranslationServer max_work must be a positive integer, got {max_work!r}")
        routes = {"GET /": self._describe, "GET /api/health": self._health}
        routes |= {"GET /health": self._alive, "GET /ready": self._ready}
        routes |= {"POST /api/translate": self._translate, "POST /api/generate": self._generate}
        routes |= {"POST /api/classify": self._classify, "GET /metrics": self._metrics}
        routes |= {"POST /v1/completions": self._complete, "POST /v1/chat/completions": self._chat}
        routes |= {"GET /v1/models": self._models, "POST /api/embed": self._embed}
        body = '{"texts": ["..."]}'
        super().__init__(
            routes, host, port, "serve", body, MAX_BODY_BYTES, header_timeout, body_timeout, verbose, api_key,
            frozenset({"GET /health"}),
        )  # fmt: skip
        self.translator, self.max_work, self.turns = translator, max_work, ModelTurns()
        self.metrics = ServerMetrics(lambda: self.batcher.waiting)  # a registry of this server's own
        batch_groups = translator.batch_groups if batch_groups is None else batch_groups
        self.batcher = Batcher(
            self.turns, batch_tokens, batch_wait_ms / 1000, groups=batch_groups, on_batch=self.metrics.batch
        )

    @property
    def url(self) -> str:
        """The endpoint's address, e.g. http://127.0.0.1:8080/api/translate (/api/generate for a language model)."""
        _, route = model_kind(self.translator.files.config)
        return super().url + (route or "POST /api/translate").split()[1].lstrip("/")

    def announcement(self) -> str:
        """``POST http://127.0.0.1:8080/api/translate``."""
        return f"POST {self.url}"

    async def _health(self, _: None) -> dict[str, Any]:
        limits = {"max_body_bytes": MAX_BODY_BYTES, "max_json_depth": MAX_JSON_DEPTH, "max_texts": MAX_TEXTS}
        limits |= {"max_text_chars": MAX_TEXT_CHARS, "max_beam": MAX_BEAM, "max_work": self.max_work}
        limits |= {"header_timeout_s": self.header_timeout, "body_timeout_s": self.body_timeout}
        return {"ok": True, "model": str(self.translator.path), "task": self.translator.task, "limits": limits}

    async def _describe(self, _: None) -> dict[str, Any]:
        description = describe_api(self.translator)
        description["endpoints"] |= describe_completions()
        return description

    async def _alive(self, _: None) -> dict[str, Any]:
        return {"status": "ok"}

    async def _ready(self, _: None) -> dict[str, Any]:
        return {"ready": True, "model": str(self.translator.path), "engine": self.translator.engine}

    async def _metrics(self, _: None) -> Raw:
        return Raw(*self.metrics.render())

    def answered(self, route: str, status: int, seconds: float, reply: Any) -> None:
        """Count the request in :attr:`metrics`, and log it (with ``verbose``)."""
        self.metrics.answered(route, status, seconds)
        super().answered(route, status, seconds, reply)

    def error_reply(self, path: str, message: str, status: int) -> dict[str, Any]:
        """``{"error": "..."}``; on the OpenAI-style routes (``/v1/...``) OpenAI's shape, whose ``message`` its
        clients show: ``{"error": {"message", "type", "param", "code"}}``."""
        if not path.startswith("/v1/"):
            return super().error_reply(path, message, status)
        kind = "server_error" if status >= 500 else "invalid_request_error"
        code = "invalid_api_key" if status == 401 else None
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}

    def sentences(self, reply: Any) -> int:
        """The texts a reply answers: translations, classifications, generated texts (a stream: 1)."""
        if not isinstance(reply, dict):
            return 0
        if reply.get("stream"):
            return 1
        names = ("translations", "results", "texts", "choices", "embeddings")
        return next((len(reply[name]) for name in names if name in reply), 0)

    async def _translate(self, request: Any) -> dict[str, Any]:
        counted = functools.partial(self.metrics.tokens, "POST /api/translate")
        return await translate_request(self.translator, request, self.batcher, self.max_work, counted)

    async def _generate(self, request: Any) -> dict[str, Any] | AsyncIterator[dict[str, Any]]:
        counted = functools.partial(self.metrics.tokens, "POST /api/generate")
        return await generate_request(self.translator, request, self.batcher, counted)

    async def _complete(self, request: Any) -> dict[str, Any] | AsyncIterator[dict[str, Any]]:
        counted = functools.partial(self.metrics.tokens, "POST /v1/completions")
        return await completion_request(self.translator, request, self.batcher, counted)

    async def _chat(self, request: Any) -> dict[str, Any] | AsyncIterator[dict[str, Any]]:
        counted = functools.partial(self.metrics.tokens, "POST /v1/chat/completions")
        return await chat_request(self.translator, request, self.batcher, counted)

    async def _models(self, _: None) -> dict[str, Any]:
        return models_reply(self.translator)

    async def _embed(self, request: Any) -> dict[str, Any]:
        return await embed_request(self.translator, request, self.batcher, self.max_work)

    async def _classify(self, request: Any) -> dict[str, Any]:
        return await classify_request(self.translator, request, self.batcher)

    def closed(self) -> None:
        """Stop the batcher and the model's thread once every request is answered."""
        self.batcher.close()
        self.turns.close()
