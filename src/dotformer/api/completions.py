"""The OpenAI-style routes of ``dotformer serve`` for a language model, so that existing clients (the ``openai``
Python package, anything speaking its completions API) work against it unchanged.

    POST /v1/completions   {"prompt": "...", "max_tokens": 16, "temperature": 1.0, "top_p": 1.0, "stop": ["\\n"],
                            "stream": false, "seed": 1, "model": "..."}
                           -> {"id": "cmpl-...", "object": "text_completion", "created": 1700000000, "model": "...",
                               "choices": [{"text": "...", "index": 0, "logprobs": null, "finish_reason": "length"}],
                               "usage": {"prompt_tokens": 3, "completion_tokens": 16, "total_tokens": 19}}
    GET  /v1/models        {"object": "list", "data": [{"id": "...", "object": "model", ...}]}

``temperature`` 0 is greedy decoding, anything above samples (``top_p``: nucleus; ``seed``: the draws, when not given 1,
every command's default seed, so the same request gives the same text). ``stop``: up to 4 strings; the text ends before
the first one found (``finish_reason`` "stop", as when an ``end_token`` or an imported model's EOS ends it before
``max_tokens``; else "length": dotformer's language models read a line end as one more token and go on to
``max_tokens``). ``n`` is 1. ``"stream": true`` sends the text as server-sent events, one chunk per
piece as the engine produces it (:func:`dotformer.api.streaming.stream_continuation`), then a chunk with the
``finish_reason``, then ``data: [DONE]``. ``model`` is accepted and answered with the served model's name (the
checkpoint's folder). ``POST /v1/chat/completions`` (``messages``, and the same settings) renders the messages with the
model's chat template (:func:`chat_prompt`: an imported Hugging Face model keeps its ``tokenizer_config.json``'s) and
completes that text, answering in the chat shapes; a model without a template (every model dotformer trains reads plain
text) gets a 400 naming ``/v1/completions``.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from dotformer.api.batcher import Batcher
from dotformer.api.endpoint import (
    MAX_NEW_TOKENS,
    MAX_TEXT_CHARS,
    Counted,
    check_fields,
    require_route,
    text_tokens,
    typed_option,
)
from dotformer.api.streaming import StopText, stream_continuation
from dotformer.api.web import RequestError
from dotformer.config import DEFAULT_SEED
from dotformer.decoding.inputs import text_rules
from dotformer.decoding.options import CONTROL_NAMES, CONTROL_OPTIONS, with_surface_names
from dotformer.errors import ConfigError, require_extra

if TYPE_CHECKING:
    from dotformer.api.translator import Translator

COMPLETION_FIELDS = (
    "model",
    "prompt",
    "max_tokens",
    "temperature",
    "top_p",
    "stop",
    "n",
    "stream",
    "seed",
    "user",
    *CONTROL_NAMES,
)  # fmt: skip  (OpenAI's fields, and the decoding controls of dotformer's options table)
# DecodeConfig field -> the request's field, for error messages (a setting checked by DecodeConfig is named as sent)
COMPLETION_NAMES: dict[str, str] = {
    **{name: name for name in ("temperature", "top_p", "seed", *CONTROL_NAMES)},
    "max_len_b": "max_tokens",
}
DEFAULT_MAX_TOKENS = 16  # OpenAI's default for completions
MAX_STOPS = 4  # most stop sequences (OpenAI's limit)
MAX_CHAT_CHARS = 4 * MAX_TEXT_CHARS  # most characters of a chat's rendered text (its messages and the template's)


def model_name(translator: Translator) -> str:
    """The name the routes answer with: the checkpoint's folder name."""
    return translator.path.name


def models_reply(translator: Translator) -> dict[str, Any]:
    """What ``GET /v1/models`` answers: the one model served."""
    model = {"id": model_name(translator), "object": "model", "created": 0, "owned_by": "dotformer"}
    return {"object": "list", "data": [model]}


CHAT_ROLES = ("system", "user", "assistant", "developer", "tool")


def chat_prompt(translator: Translator, messages: Any) -> str:
    """The text the model continues for ``messages`` (``[{"role": "user", "content": "..."}, ...]``): its chat
    template rendered with ``add_generation_prompt`` as Hugging Face's ``apply_chat_template`` renders it (a
    sandboxed Jinja2 environment, ``trim_blocks`` and ``lstrip_blocks``), the BOS string it writes first left out
    where the model's text rules add BOS to every prompt.

    Raises:
        RequestError: a model without a chat template, ``messages`` not a non-empty list of ``{"role", "content"}``
            objects with string (or text-part) contents, or a template that refuses them (its own message).
    """
    chat = translator.files.info.get("chat")
    if not isinstance(chat, dict) or not isinstance(chat.get("template"), str):  # as every model dotformer trains
        raise RequestError(
            f"{translator.files.path} has no chat template (its tokenizer reads plain text): /v1/chat/completions "
            "needs one; send the text to continue to POST /v1/completions"
        )
    if not isinstance(messages, list) or not messages:
        raise RequestError('"messages" must be a non-empty list of {"role": "...", "content": "..."} objects')
    checked = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in CHAT_ROLES:
            raise RequestError(f'"messages"[{i}] must be an object with "role" one of {", ".join(CHAT_ROLES)}')
        content = message.get("content", "")
        if isinstance(content, list):  # OpenAI's content parts: the text ones, joined
            if not all(isinstance(part, dict) and part.get("type") == "text" for part in content):
                raise RequestError(f'"messages"[{i}]: only text content parts are read')
            content = "".join(str(part.get("text", "")) for part in content)
        if not isinstance(content, str):
            raise RequestError(f'"messages"[{i}]["content"] must be a string')
        checked.append({"role": message["role"], "content": content})
    return render_chat(chat, checked, bool(text_rules(translator.files.info).add_bos))


def render_chat(chat: dict[str, str], messages: list[dict[str, str]], adds_bos: bool) -> str:
    """``chat["template"]`` rendered for ``messages`` with the generation prompt (see :func:`chat_prompt`).

    Raises:
        RequestError: the template raises (``raise_exception``) or fails to render.
        MissingExtraError: Jinja2 is not installed (``pip install "dotformer[serve]"``).
    """
    jinja2 = require_extra("serve", "jinja2", "POST /v1/chat/completions")
    sandbox = require_extra("serve", "jinja2.sandbox", "POST /v1/chat/completions")

    def raise_exception(message: str) -> None:
        raise RequestError(f"the model's chat template refuses the messages: {message}")

    environment = sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    environment.globals["raise_exception"] = raise_exception
    bos = chat.get("bos_token", "")
    try:
        text = environment.from_string(chat["template"]).render(
            messages=messages, add_generation_prompt=True, bos_token=bos, eos_token=chat.get("eos_token", "")
        )
    except jinja2.TemplateError as exc:
        raise RequestError(f"the model's chat template cannot render the messages: {exc}") from None
    return text[len(bos) :] if adds_bos and bos and text.startswith(bos) else text


class Completion:
    """One checked ``POST /v1/completions`` request: its prompt, decoding settings and stop sequences."""

    def __init__(self, request: Any, max_chars: int = MAX_TEXT_CHARS) -> None:
        """Check ``request`` (a decoded JSON body; a prompt of at most ``max_chars`` characters).

        Raises:
            RequestError: not an object, an unknown field, a value of the wrong type or out of range (the message
                names the field).
        """
        from dotformer.api.generation import generation_settings

        check_fields(request, COMPLETION_FIELDS, '{"prompt": "..."}')
        prompt = request.get("prompt", "")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise RequestError('"prompt" must be a string (or a list of one string)')
        if len(prompt) > max_chars:
            raise RequestError(f'"prompt" has more than {max_chars} characters')
        max_tokens = _number(request, "max_tokens", DEFAULT_MAX_TOKENS, 1, MAX_NEW_TOKENS, integer=True)
        temperature = _number(request, "temperature", 1.0, 0.0, 2.0)
        top_p = _number(request, "top_p", 1.0, 0.0, 1.0)
        if "top_p" in request and top_p == 0:
            raise RequestError('"top_p" must be above 0, got 0')
        seed = _number(request, "seed", DEFAULT_SEED, 0, 2**31 - 1, integer=True)
        _number(request, "n", 1, 1, 1, integer=True)  # one choice
        if not isinstance(request.get("stream", False), bool):
            raise RequestError(f'"stream" must be true or false, got {json.dumps(request["stream"])}')
        for name in ("model", "user"):
            if name in request and not isinstance(request[name], str):
                raise RequestError(f'"{name}" must be a string, got {json.dumps(request[name])}')
        stop = request.get("stop")
        stops = [stop] if isinstance(stop, str) else stop if stop is not None else []
        if not isinstance(stops, list) or len(stops) > MAX_STOPS or not all(isinstance(s, str) and s for s in stops):
            raise RequestError(f'"stop" must be a non-empty string or a list of at most {MAX_STOPS} of them')
        controls = {option.name: typed_option(request, option) for option in CONTROL_OPTIONS}
        controls = {name: value for name, value in controls.items() if value is not None}
        try:
            if temperature == 0:
                config = generation_settings(int(max_tokens), "greedy", 1, **controls)
            else:
                config = generation_settings(
                    int(max_tokens), "sample", 1, temperature=float(temperature), top_p=float(top_p), seed=int(seed),
                    **controls,
                )  # fmt: skip
        except ConfigError as exc:
            raise RequestError(with_surface_names(str(exc), COMPLETION_NAMES)) from None
        self.prompt, self.config, self.stops = prompt, config, stops
        self.stream: bool = request.get("stream", False)
        self.id, self.created = f"cmpl-{uuid.uuid4().hex}", int(time.time())


def _number(
    request: dict[str, Any], name: str, default: float, low: float, high: float, integer: bool = False
) -> float:
    """``request[name]`` (``default`` when absent or null), a number (an integer with ``integer``) in [low, high].

    Raises:
        RequestError: another type, or out of range.
    """
    value = request.get(name)
    if value is None:
        return default
    kind_ok = isinstance(value, int) if integer else isinstance(value, int | float)
    if isinstance(value, bool) or not kind_ok or not low <= value <= high:
        what = "an integer" if integer else "a number"
        raise RequestError(f'"{name}" must be {what} from {low:g} to {high:g}, got {json.dumps(value)}')
    return value


async def _pieces(
    translator: Translator, completion: Completion, batcher: Batcher | None
) -> AsyncIterator[tuple[str, bool]]:
    """The completion's text, piece by piece, cut at its first stop sequence: ``(piece, stopped)``; the decoding
    stops once a stop sequence is found. A continuation that ended before ``max_tokens`` (an end token) ends with
    ``("", True)`` too."""
    stop, ended = StopText(completion.stops), threading.Event()
    pieces = stream_continuation(translator, completion.prompt, completion.config, batcher, ended.set)
    try:
        async for piece in pieces:
            text = stop.feed(piece)
            if text:
                yield text, False
            if stop.stopped:
                yield "", True
                return
        if held := stop.flush():
            yield held, False
        if ended.is_set():  # an end token (or the model's EOS) ended it before max_tokens: OpenAI's "stop"
            yield "", True
    finally:
        await pieces.aclose()


def _chunk(completion: Completion, model: str, text: str, finish: str | None) -> dict[str, Any]:
    """One object of the reply (or of the stream): its one choice with ``text`` and ``finish``."""
    choice = {"text": text, "index": 0, "logprobs": None, "finish_reason": finish}
    kind = {"id": completion.id, "object": "text_completion", "created": completion.created, "model": model}
    return {**kind, "choices": [choice]}


async def completion_request(
    translator: Translator,
    request: Any,
    batcher: Batcher | None = None,
    counted: Counted | None = None,
    max_chars: int = MAX_TEXT_CHARS,
) -> dict[str, Any] | AsyncIterator[dict[str, Any]]:
    """The reply to one ``POST /v1/completions`` (see the module docstring): one object, or with ``"stream": true``
    the chunks to send as server-sent events. ``counted`` is told the tokens produced (metrics).

    Raises:
        RequestError: a bad request (see :class:`Completion`), or a model that is not a language model (400).
    """
    from dotformer.decoding.inputs import encode_prompt

    require_route(translator, "POST /v1/completions")
    completion = Completion(request, max_chars)
    model = model_name(translator)
    if completion.stream:
        return _completion_events(translator, completion, model, batcher, counted)
    text, finish = [], "length"
    async for piece, stopped in _pieces(translator, completion, batcher):
        text.append(piece)
        finish = "stop" if stopped else finish
    reply = _chunk(completion, model, "".join(text), finish)
    produced = text_tokens(translator, ["".join(text)])
    if counted is not None:
        counted(produced)
    prompt_tokens = len(encode_prompt(translator.tgt_tokenizer, completion.prompt))
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": produced, "total_tokens": prompt_tokens + produced}
    return {**reply, "usage": usage}


async def _completion_events(
    translator: Translator, completion: Completion, model: str, batcher: Batcher | None, counted: Counted | None
) -> AsyncIterator[dict[str, Any]]:
    """A chunk per piece, then one with the ``finish_reason`` (the tokens counted at the end)."""
    text, finish = [], "length"
    pieces = _pieces(translator, completion, batcher)
    try:
        async for piece, stopped in pieces:
            if stopped:
                finish = "stop"
                break
            text.append(piece)
            yield _chunk(completion, model, piece, None)
        yield _chunk(completion, model, "", finish)
    finally:
        await pieces.aclose()
        if counted is not None:
            counted(text_tokens(translator, ["".join(text)]))


CHAT_FIELDS = tuple(name for name in COMPLETION_FIELDS if name != "prompt") + ("messages", "max_completion_tokens")


async def chat_request(
    translator: Translator, request: Any, batcher: Batcher | None = None, counted: Counted | None = None
) -> dict[str, Any] | AsyncIterator[dict[str, Any]]:
    """The reply to one ``POST /v1/chat/completions``: the completion of :func:`chat_prompt`'s text, in the chat
    shapes (``{"object": "chat.completion", "choices": [{"message": {"role": "assistant", "content": ...}}]}``;
    streamed: ``chat.completion.chunk`` objects whose ``delta`` holds each piece).

    Raises:
        RequestError: a model that is not a language model or has no chat template, or a bad request (400).
    """
    require_route(translator, "POST /v1/chat/completions")
    check_fields(request, CHAT_FIELDS, '{"messages": [{"role": "user", "content": "..."}]}')
    fields = {name: value for name, value in request.items() if name not in ("messages", "max_completion_tokens")}
    if request.get("max_completion_tokens") is not None:
        fields["max_tokens"] = request["max_completion_tokens"]
    prompt = chat_prompt(translator, request.get("messages"))
    reply = await completion_request(translator, {**fields, "prompt": prompt}, batcher, counted, MAX_CHAT_CHARS)
    if isinstance(reply, dict):
        choice = reply["choices"][0]
        message = {"role": "assistant", "content": choice["text"]}
        choices = [{"index": 0, "message": message, "logprobs": None, "finish_reason": choice["finish_reason"]}]
        return {**reply, "id": "chat" + reply["id"], "object": "chat.completion", "choices": choices}
    return _chat_chunks(reply)


async def _chat_chunks(chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    """The completion's chunks as ``chat.completion.chunk`` objects (the first delta names the role)."""
    first = True
    try:
        async for chunk in chunks:
            choice = chunk["choices"][0]
            delta = {"role": "assistant", "content": choice["text"]} if first else {"content": choice["text"]}
            delta = delta if choice["text"] or first else {}
            first = False
            choices = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": choice["finish_reason"]}]
            yield {**chunk, "id": "chat" + chunk["id"], "object": "chat.completion.chunk", "choices": choices}
    finally:
        await chunks.aclose()  # type: ignore[attr-defined]


def describe_completions() -> dict[str, Any]:
    """The routes' entry in ``GET /``."""
    return {
        "POST /v1/completions": {"fields": list(COMPLETION_FIELDS), "for": "language models (OpenAI-style)"},
        "POST /v1/chat/completions": {
            "fields": list(CHAT_FIELDS),
            "for": "language models with a chat template (imported from Hugging Face with one)",
        },
        "GET /v1/models": "the model served (OpenAI-style)",
    }
