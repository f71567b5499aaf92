"""One request of ``POST /api/translate`` (or ``/api/generate``, ``/api/classify``): its checks, its limits, and its
decoding beside the other requests waiting.

:func:`parse_request` checks a decoded JSON body against the limits (:data:`MAX_TEXTS` texts of at most
:data:`MAX_TEXT_CHARS` characters, beam at most :data:`MAX_BEAM`); :func:`translate_request` also bounds its work
(source tokens x beam, at most :data:`MAX_REQUEST_WORK`) and hands its texts to the server's batcher
(:class:`~dotformer.api.batcher.Batcher`), which decodes them in engine calls beside the texts of the other requests
with the same options, a large request split across calls so that the small ones arriving meanwhile are not held
back. :func:`require_route` refuses a request the model cannot serve, naming the route that does. Nothing here knows
HTTP, nor how the
:class:`~dotformer.api.Translator` decodes (it calls ``translate``, ``generate`` and ``classify``); the HTTP side is
:mod:`dotformer.api.serve`.
"""

from __future__ import annotations

import functools
import json
import warnings
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from dotformer.api.batcher import Batcher
from dotformer.api.web import RequestError
from dotformer.decoding.config import STRATEGIES
from dotformer.decoding.options import (
    CONTROL_NAMES,
    CONTROL_OPTIONS,
    DECODE_OPTIONS,
    OPTION_NAMES,
    DecodeOption,
    DecodeRequest,
    decode_request,
    has_controls,
    only_apply,
    with_surface_names,
)
from dotformer.errors import ConfigError

if TYPE_CHECKING:
    from dotformer.api.translator import Translator

MAX_TEXTS = 64  # most texts per request
MAX_TEXT_CHARS = 2000  # most characters per text
MAX_BEAM = 16  # widest beam (and most n_best) a request may ask for
MAX_REQUEST_WORK = 16384  # most source tokens (EOS included) x beam one request may ask for
MAX_LEN_B = 1024  # most output tokens beyond max_len_a x input length (and most min_len_b) a request may ask for
FIELDS = ("texts", *OPTION_NAMES, "scores")
JSON_KINDS = {bool: "boolean", int: "integer", float: "number", str: "string"}  # a field's type, as GET / names it


def model_kind(config: Any) -> tuple[str, str | None]:
    """What a model of ``config`` is, in words, and the route of :mod:`dotformer.api.serve` that runs it (None: no
    route does): ``("a language model", "POST /api/generate")``."""
    if config.head == "sequence":
        return "a classifier", "POST /api/classify"
    if config.head == "token":
        return "a tagger", "POST /api/classify"
    if config.arch == "decoder-only":
        return "a language model", "POST /api/generate"
    if config.arch == "encoder-only":
        return "a masked language model", "POST /api/embed"
    return "a translation model", "POST /api/translate"


def require_route(translator: Any, route: str) -> None:
    """Refuse a request to ``route`` (``"POST /api/translate"``) that the loaded model cannot serve, before anything
    is decoded, naming the route that serves it, on every engine.

    Raises:
        RequestError: (400) the model is not one ``route`` runs.
    """
    kind, served = model_kind(translator.files.config)
    if served is not None and ROUTE_MODELS[served] == ROUTE_MODELS[route]:
        return
    path, wanted = route.split()[1], ROUTE_MODELS[route]
    where = f"send {served}" if served is not None else "no route of dotformer serve runs it"
    raise RequestError(f"{translator.files.path} is {kind}: {path} serves {wanted}; {where}")


ROUTE_MODELS = {
    "POST /api/translate": "a translation model",
    "POST /api/generate": "a language model",
    "POST /api/classify": "a classifier or a tagger",
    "POST /api/embed": "a model with an encoder",
    "POST /v1/completions": "a language model",
    "POST /v1/chat/completions": "a language model",
}  # what each route runs


def _positive_int(request: dict[str, Any], name: str, default: int, largest: int) -> int:
    value = request.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= largest:
        raise RequestError(f'"{name}" must be an integer from 1 to {largest}, got {json.dumps(value)}')
    return value


def parse_request(request: Any) -> tuple[list[str], DecodeRequest]:
    """Check a decoded JSON request; return its texts and its :class:`~dotformer.decoding.options.DecodeRequest`
    (details wanted, no progress bar). ``"scores": false`` (default true) lets the engine skip the pass that makes each
    score dotformer's exact one: the reply's ``score`` is then the search's (on CTranslate2, where PAD and BOS are
    suppressed before its softmax, it differs from the exact score by their probability mass; the torch engine's is
    exact either way), and the texts are the same.

    Raises:
        RequestError: not an object, unknown fields, ``texts`` missing, empty, too many or too long, not strings,
            or a bad ``beam`` / ``n_best`` / ``strategy`` (the message names the field and the limit).
    """
    check_fields(request, FIELDS)
    texts = _texts(request)
    strategy = request.get("strategy", "beam")
    if strategy not in STRATEGIES:
        raise RequestError(f'"strategy" must be one of {", ".join(STRATEGIES)}, got {json.dumps(strategy)}')
    beam = _positive_int(request, "beam", 4, MAX_BEAM)
    n_best = _positive_int(request, "n_best", 1, MAX_BEAM)
    if strategy == "greedy" and ("beam" in request or n_best != 1):
        raise RequestError('"strategy": "greedy" finds one output: leave out "beam" and "n_best"')
    if strategy == "beam" and n_best > beam:
        raise RequestError(f'"n_best"={n_best} cannot exceed "beam"={beam}')
    options: dict[str, Any] = {option.name: typed_option(request, option) for option in DECODE_OPTIONS}
    options.update(strategy=strategy, n_best=n_best, beam=beam if strategy == "beam" else None)
    for name in ("max_len_b", "min_len_b"):
        if options[name] is not None and options[name] > MAX_LEN_B:
            raise RequestError(f'"{name}" must be at most {MAX_LEN_B}, got {options[name]}')
    options["prefix"] = _prefixes(request, len(texts))
    scores = request.get("scores", True)
    if not isinstance(scores, bool):
        raise RequestError(f'"scores" must be true or false, got {json.dumps(scores)}')
    try:
        decoding = decode_request(options, _json_misplaced)
    except ConfigError as exc:
        raise RequestError(str(exc).replace("DecodeConfig.", "")) from None
    return texts, replace(decoding, details=True, progress=False, scores=scores)


def typed_option(request: dict[str, Any], option: DecodeOption) -> Any:
    """The value of ``option`` in the request (None when absent), checked against its type.

    Raises:
        RequestError: a value of the wrong JSON type (a float field takes integers too; never a boolean for a number).
    """
    if option.name not in request or option.name == "prefix":
        return None
    value = request[option.name]
    if option.many:  # a string (comma-separated) or a list of strings (suppress: also lists of strings)
        ok = isinstance(value, str) or (
            isinstance(value, list)
            and all(isinstance(v, str) or (isinstance(v, list) and all(isinstance(t, str) for t in v)) for v in value)
        )
        if not ok:
            raise RequestError(f'"{option.name}" must be a string or a list of strings, got {json.dumps(value)}')
        return value
    if option.kind is bool:
        ok = isinstance(value, bool)
    elif option.kind is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    else:
        ok = isinstance(value, option.kind) and not isinstance(value, bool)
    if not ok:
        kinds = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
        raise RequestError(f'"{option.name}" must be {kinds[option.kind]}, got {json.dumps(value)}')
    return float(value) if option.kind is float else value


def _prefixes(request: dict[str, Any], count: int) -> list[str | None] | None:
    """``"prefix"``: a list with one string or null per text (None when absent).

    Raises:
        RequestError: not such a list.
    """
    if "prefix" not in request:
        return None
    prefix = request["prefix"]
    if not isinstance(prefix, list) or len(prefix) != count or not all(p is None or isinstance(p, str) for p in prefix):
        raise RequestError(f'"prefix" must be a list of {count} strings or nulls, one per text')
    if any(p is not None and len(p) > MAX_TEXT_CHARS for p in prefix):
        raise RequestError(f'a "prefix" has more than {MAX_TEXT_CHARS} characters')
    return prefix


def _json_misplaced(options: list[DecodeOption], wanted: str, strategy: str) -> str:
    """``"temperature", "seed" only apply to "strategy": "sample"`` (one field: ``"seed" only applies ...``)."""
    return _fields_misplaced([o.name for o in options], wanted, strategy)


def _fields_misplaced(names: Sequence[str], wanted: str, strategy: str) -> str:
    """``"beam_stop" only applies to "strategy": "beam", not "sample"``: the fields ``names`` of another strategy."""
    return only_apply([f'"{name}"' for name in names], f'"strategy": "{wanted}"') + f', not "{strategy}"'


def hypothesis_json(hypothesis: Any) -> dict[str, Any]:
    """One hypothesis of a reply: ``{"text", "score", "finished"}``, and ``"alignment"`` when asked for."""
    item = {"text": hypothesis.text, "score": hypothesis.score, "finished": hypothesis.finished}
    if hypothesis.alignment is not None:
        item["alignment"] = [list(pair) for pair in hypothesis.alignment]
    return item


Counted = Callable[[int], None]  # told the number of output tokens an engine call produced (metrics)


def _translate_items(
    translator: Translator, request: DecodeRequest, counted: Counted | None, items: list[tuple[str, str | None]]
) -> list[Any]:
    """``Translator.translate`` on one engine call's ``(text, prefix)`` pairs (``request``: their options, without
    prefixes), its warnings silenced: unknown symbols are reported per text in the reply. ``counted`` is told the
    output tokens of every hypothesis."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prefixes = tuple(prefix for _, prefix in items)
        with_prefix = replace(request, prefix=prefixes if any(p is not None for p in prefixes) else None)
        results = translator.translate([text for text, _ in items], with_prefix)
    if counted is not None:
        counted(sum(len(h.tokens) for result in results for h in result.hypotheses))
    return results


async def _batched(
    batcher: Batcher | None, key: Any, items: list[Any], sizes: list[int], run: Any, whole: bool = False
) -> list[Any]:
    """``run(items)`` through the server's batcher (beside other requests of the same ``key``), or here without one."""
    if batcher is None:
        return list(run(items))
    return await batcher.submit(key, items, sizes, run, whole)


async def translate_request(
    translator: Translator,
    request: Any,
    batcher: Batcher | None = None,
    max_work: int = MAX_REQUEST_WORK,
    counted: Counted | None = None,
) -> dict[str, Any]:
    """The JSON reply to one request (see the module docstring).

    Args:
        translator: the loaded model.
        request: the decoded JSON body.
        batcher: the server's :class:`~dotformer.api.batcher.Batcher`, which decodes the request's texts beside
            those of other requests with the same options (None: decode here, in the calling thread).
        max_work: the most source tokens (EOS included) x beam (1 for greedy) the request may ask for.
        counted: told the output tokens of each engine call (metrics; from the model's thread).

    Raises:
        RequestError: a bad request (see :func:`parse_request`), a model this route does not serve, or one that asks
            for more than ``max_work`` (413).
        DotformerError: the model cannot decode an input (e.g. longer than it reads).
    """
    from dotformer.decoding.inputs import encode_prefix, encode_sources

    require_route(translator, "POST /api/translate")
    texts, decoding = parse_request(request)
    encoded = encode_sources(translator.files, texts, translator.max_input_length)  # cheap: not a turn
    config = decoding.config
    width = config.beam_size if config.strategy == "beam" else config.n_best
    work = [len(ids) * width for ids in encoded.ids]
    if sum(work) > max_work:
        raise RequestError(
            f"the request asks for {sum(work)} source tokens x beam; one request takes at most {max_work}: "
            f"send fewer or shorter texts, or a narrower beam",
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
        )
    prefixes = decoding.prefix or (None,) * len(texts)
    options = replace(decoding, prefix=None)
    sampling = config.strategy == "sample"  # one random generator per call: decoded whole and alone
    key = object() if sampling else ("translate", options, decoding.prefix is not None)
    items = list(zip(texts, prefixes, strict=True))
    run = functools.partial(_translate_items, translator, options, counted)
    results = await _batched(batcher, key, items, work, run, whole=sampling)
    translations = []
    for result, prefix in zip(results, prefixes, strict=True):
        best = result.hypotheses[0]
        item: dict[str, Any] = {
            "text": best.text,
            "score": best.score,
            "finished": best.finished,
            "unknown_symbols": result.unknown_symbols
            + (len(encode_prefix(translator.tgt_tokenizer, prefix).unknown) if prefix else 0),
        }
        if best.alignment is not None:
            item["alignment"] = [list(pair) for pair in best.alignment]
        if config.n_best > 1:
            item["hypotheses"] = [hypothesis_json(h) for h in result.hypotheses]
        translations.append(item)
    return {"translations": translations}


MAX_NEW_TOKENS = 1024  # most tokens one POST /api/generate may ask for
BEAM_RANKING: tuple[DecodeOption, ...] = tuple(
    option for option in DECODE_OPTIONS if option.name in ("length_penalty", "beam_stop")
)  # beam search's ranking and stopping rule: translate's options, for strategy "beam"
GENERATE_FIELDS = (
    "prompt", "max_new_tokens", "strategy", "n", "temperature", "top_k", "top_p", "seed", "beam_size",
    *(option.name for option in BEAM_RANKING), "stream", *CONTROL_NAMES,
)  # fmt: skip
GENERATE_KINDS: dict[str, type] = {
    "prompt": str, "max_new_tokens": int, "strategy": str, "n": int, "temperature": float, "top_k": int,
    "top_p": float, "seed": int, "beam_size": int, "stream": bool,
    **{option.name: option.kind for option in (*BEAM_RANKING, *CONTROL_OPTIONS)},
}  # fmt: skip
GENERATE_NAMES: dict[str, str] = {**{name: name for name in GENERATE_FIELDS}, "n_best": "n"}  # DecodeConfig -> JSON


def text_tokens(translator: Translator, texts: list[str]) -> int:
    """The tokens of generated ``texts`` as the model's tokenizer reads them (each line end one EOS)."""
    from dotformer.decoding.inputs import encode_prompt

    return sum(len(encode_prompt(translator.tgt_tokenizer, text)) - 1 for text in texts)


async def generate_request(
    translator: Translator, request: Any, batcher: Batcher | None = None, counted: Counted | None = None
) -> dict[str, Any] | AsyncIterator[dict[str, Any]]:
    """The JSON reply ``{"texts": [...]}`` to one ``POST /api/generate`` request, for a language model; with
    ``"stream": true``, the events ``{"text": "..."}`` of the new text's pieces as they are produced (one greedy or
    sampled continuation: :func:`dotformer.api.streaming.stream_continuation`; their text joined is the ``texts[0]``
    the same request gives without ``stream``).

    The fields are the keywords of :meth:`dotformer.api.Translator.generate`: ``prompt`` ("" by default),
    ``max_new_tokens`` (1..:data:`MAX_NEW_TOKENS`, 200), ``strategy``, ``n`` (1..:data:`MAX_BEAM`), ``temperature``,
    ``top_k``, ``top_p``, ``seed``, ``beam_size``, ``length_penalty`` (0), ``beam_stop`` ("finished" or "exact"), the
    controls; and ``stream``. ``counted`` is told the tokens generated (metrics).

    Raises:
        RequestError: not an object, an unknown field, a value of the wrong type or out of range, a stream of
            several continuations or of beam search, or a checkpoint that is not a language model.
    """
    from dotformer.api.generation import generation_settings
    from dotformer.decoding.controls import controls_of
    from dotformer.decoding.inputs import encode_prompt, text_rules

    require_route(translator, "POST /api/generate")
    check_fields(request, GENERATE_FIELDS, '{"prompt": "..."}')
    for option in CONTROL_OPTIONS:  # the controls: checked as /api/translate checks them
        typed_option(request, option)
    for name, value in request.items():
        if name in CONTROL_NAMES:
            continue
        kind = GENERATE_KINDS[name]
        ok = isinstance(value, int | float) if kind is float else isinstance(value, kind)
        if (isinstance(value, bool) and kind is not bool) or not ok:
            kinds = {str: "a string", bool: "true or false"}
            raise RequestError(f'"{name}" must be {kinds.get(kind, "a number")}, got {json.dumps(value)}')
    if len(request.get("prompt", "")) > MAX_TEXT_CHARS:
        raise RequestError(f'"prompt" has more than {MAX_TEXT_CHARS} characters')
    _positive_int(request, "max_new_tokens", 200, MAX_NEW_TOKENS)
    n = _positive_int(request, "n", 1, MAX_BEAM)
    _positive_int(request, "beam_size", 1, MAX_BEAM)
    settings = {name: value for name, value in request.items() if name not in ("prompt", "n", "stream")}
    prompt = request.get("prompt", "")
    if request.get("stream", False):
        if n != 1 or request.get("strategy", "sample") == "beam":
            raise RequestError(
                '"stream": true sends one greedy or sampled continuation: leave out "n" and "strategy": "beam"'
            )
        try:
            config = generation_settings(n=1, **settings, misplaced=_fields_misplaced)
            controls_of(config, translator.tgt_tokenizer)  # an unknown end or suppressed token, before the stream
        except ConfigError as exc:
            raise RequestError(with_surface_names(str(exc), GENERATE_NAMES)) from None
        return _generate_events(translator, prompt, config, batcher, counted)

    try:
        config = generation_settings(n=n, **settings, misplaced=_fields_misplaced)
    except ConfigError as exc:
        raise RequestError(with_surface_names(str(exc), GENERATE_NAMES)) from None
    tokens = len(encode_prompt(translator.tgt_tokenizer, prompt, text_rules(translator.files.info)))
    if mergeable(translator, config, tokens):  # one greedy continuation: beside the other clients' in one call
        key = ("generate", config)
        run: Callable[[list[str]], list[Any]] = functools.partial(translator.greedy_continuations, config=config)
        merged = run
    else:  # sampling draws from one generator per call; beam search: one prompt per call

        def run(prompts: list[str]) -> list[Any]:
            return [translator.generate(prompts[0], n=n, **settings)]

        key, merged = object(), None
    try:
        (texts,) = await _batched(batcher, key, [prompt], [tokens + config.max_len_b], run, whole=run is not merged)
    except ConfigError as exc:
        raise RequestError(with_surface_names(str(exc), GENERATE_NAMES)) from None
    texts = texts if isinstance(texts, list) else [texts]
    if counted is not None:
        counted(text_tokens(translator, texts))
    return {"texts": texts}


def mergeable(translator: Translator, config: Any, prompt_tokens: int) -> bool:
    """Whether a generate request may share an engine call with other clients' (one greedy continuation without
    controls, whose prompt every engine continues as it is: within the context window, and within the layers'
    sliding window; a longer one may go to the torch engine alone, and must not take the others with it; the
    controls read the output so far, in which CTranslate2's batch would count the rest of a longer prompt)."""
    model = translator.files.config
    fits = prompt_tokens + config.max_len_b <= translator.files.context_window
    fits = fits and (model.sliding_window is None or prompt_tokens <= model.sliding_window)
    return config.strategy == "greedy" and config.n_best == 1 and config.use_cache and fits and not has_controls(config)


async def _generate_events(
    translator: Translator, prompt: str, config: Any, batcher: Batcher | None, counted: Counted | None
) -> AsyncIterator[dict[str, Any]]:
    """``{"text": piece}`` per piece of the continuation as it comes (the tokens counted at the end)."""
    from dotformer.api.streaming import stream_continuation

    produced: list[str] = []
    pieces = stream_continuation(translator, prompt, config, batcher)
    try:
        async for piece in pieces:
            produced.append(piece)
            yield {"text": piece}
    finally:
        await pieces.aclose()
        if counted is not None:
            counted(text_tokens(translator, ["".join(produced)]))


CLASSIFY_FIELDS = ("texts",)


async def classify_request(translator: Translator, request: Any, batcher: Batcher | None = None) -> dict[str, Any]:
    """The JSON reply to one ``POST /api/classify``: ``{"texts": [...]}`` -> ``{"results": [...]}``, one object per
    text: ``{"label", "probability", "probabilities"}`` for a classifier, ``{"words", "labels", "probabilities"}``
    for a tagger (:func:`dotformer.api.classifier.classify_texts`). At most :data:`MAX_TEXTS` texts of
    :data:`MAX_TEXT_CHARS` characters; classified through ``batcher`` beside other requests (None: here).

    Raises:
        RequestError: not an object, an unknown field, ``texts`` missing, empty, too many or too long, or not
            strings; a checkpoint that is not a classifier or tagger (400).
        DotformerError: the model cannot read an input (e.g. a text to tag longer than it reads).
    """
    from dotformer.api.classifier import classify_texts

    require_route(translator, "POST /api/classify")
    check_fields(request, CLASSIFY_FIELDS)
    texts = _texts(request)

    def quietly(batch: list[str]) -> list[Any]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a reply has no warnings channel; the figures say what the model read
            return classify_texts(translator.checkpoint, batch)

    sizes = [len(ids) for ids in translator.src_tokenizer.encode_batch(texts)]
    results = await _batched(batcher, ("classify",), texts, sizes, quietly)
    if translator.model.config.head == "sequence":
        return {"results": [{"label": r.label, "probability": r.probability, "probabilities": r.probabilities}
                            for r in results]}  # fmt: skip
    return {"results": [{"words": r.words, "labels": r.labels, "probabilities": r.probabilities} for r in results]}


EMBED_FIELDS = ("texts", "pooling", "normalize")


async def embed_request(
    translator: Translator, request: Any, batcher: Batcher | None = None, max_work: int = MAX_REQUEST_WORK
) -> dict[str, Any]:
    """The JSON reply to one ``POST /api/embed``: ``{"texts": [...], "pooling": "mean", "normalize": false}`` ->
    ``{"embeddings": [[...], ...], "dimensions": D}``, one vector per text, :meth:`dotformer.api.Translator.embed`'s
    (the encoder's memory pooled: "mean" over the real tokens or "cls", the first; ``normalize``: unit length; either
    left out: the model's own, as an imported sentence-transformers model records them, else mean and false). Any
    model with an encoder (translation models, masked language models, classifiers) serves it; the texts are
    embedded through ``batcher`` beside those of other requests with the same pooling (None: here).

    Raises:
        RequestError: not an object, an unknown field, ``texts`` missing, empty, too many or too long, a bad
            ``pooling`` or ``normalize``, more than ``max_work`` tokens (413), or a language model (no encoder).
    """
    import numpy as np

    if translator.files.config.arch == "decoder-only":
        raise RequestError(f"{translator.files.path} is a language model: /api/embed serves a model with an encoder; "
                           "send POST /api/generate")  # fmt: skip
    check_fields(request, EMBED_FIELDS)
    texts = _texts(request)
    pooling, normalize = request.get("pooling"), request.get("normalize")  # None: the model's own (or mean, false)
    if pooling is not None and pooling not in ("mean", "cls"):
        raise RequestError(f'"pooling" must be "mean" or "cls", got {json.dumps(pooling)}')
    if normalize is not None and not isinstance(normalize, bool):
        raise RequestError(f'"normalize" must be true or false, got {json.dumps(normalize)}')
    sizes = [len(ids) for ids in translator.src_tokenizer.encode_batch(texts)]
    if sum(sizes) > max_work:
        raise RequestError(f"the request holds {sum(sizes)} tokens; one request takes at most {max_work}",
                           HTTPStatus.REQUEST_ENTITY_TOO_LARGE)  # fmt: skip

    def run(batch: list[str]) -> list[Any]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a reply has no warnings channel
            return list(np.asarray(translator.embed(batch, pooling=pooling, normalize=normalize)))

    vectors = await _batched(batcher, ("embed", pooling, normalize), texts, sizes, run)
    return {"embeddings": [vector.tolist() for vector in vectors], "dimensions": int(len(vectors[0]))}


def check_fields(request: Any, fields: Sequence[str], example: str = '{"texts": ["..."]}') -> None:
    """Raises RequestError: ``request`` is not a JSON object, or holds a field not in ``fields``."""
    if not isinstance(request, dict):
        raise RequestError(f"the body must be a JSON object: {example}")
    unknown = sorted(set(request) - set(fields))
    if unknown:
        raise RequestError(f"unknown field(s) {', '.join(unknown)}; the fields are {', '.join(fields)}")


def _texts(request: dict[str, Any]) -> list[str]:
    """``"texts"``: a non-empty list of at most :data:`MAX_TEXTS` strings of at most :data:`MAX_TEXT_CHARS`.

    Raises:
        RequestError: anything else (the message names the text).
    """
    texts = request.get("texts")
    if not isinstance(texts, list) or not texts:
        raise RequestError('"texts" must be a non-empty list of strings')
    if len(texts) > MAX_TEXTS:
        raise RequestError(f'"texts" holds {len(texts)} texts; one request takes at most {MAX_TEXTS}')
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise RequestError(f'"texts"[{i}] is not a string')
        if len(text) > MAX_TEXT_CHARS:
            raise RequestError(f'"texts"[{i}] has {len(text)} characters; the endpoint takes at most {MAX_TEXT_CHARS}')
    return texts


def describe_api(translator: Translator) -> dict[str, Any]:
    """What ``GET /`` answers: the model, the engine that decodes, the endpoints, and the options of translate and of
    generate, each with its type and the default of its own route."""
    options = [
        {
            "name": option.name,
            "type": "list of strings or nulls, one per text"
            if option.name == "prefix"
            else "string or list of strings"
            if option.many
            else JSON_KINDS[option.kind],
            "default": {"beam": 4, "n_best": 1}.get(option.name, option.default),
            "help": option.help,
            **({"choices": list(option.choices)} if option.choices else {}),
            **({"only_with_strategy": option.strategy} if option.strategy else {}),
        }
        for option in DECODE_OPTIONS
    ]
    return {
        "model": str(translator.path),
        "task": translator.task,
        "engine": translator.engine,  # what decodes: "ctranslate2" or "torch" (dotformer.engines)
        "endpoints": {
            "POST /api/translate": {"fields": ["texts (required: a list of strings)", *OPTION_NAMES, "scores"]},
            "POST /api/generate": {"fields": list(GENERATE_FIELDS), "for": 'language models (task "lm")'},
            "POST /api/classify": {
                "fields": ["texts (required: a list of strings)"],
                "for": 'classifiers and taggers (task "classify", "tag")',
            },
            "POST /api/embed": {
                "fields": ["texts (required: a list of strings)", "pooling", "normalize"],
                "for": "models with an encoder",
            },
            "GET /api/health": "the model and the limits",
            "GET /health": "the process answers (liveness; never needs the API key)",
            "GET /ready": "the model is loaded and takes requests (readiness)",
            "GET /metrics": "requests, latencies, batch sizes, queue and tokens in Prometheus' text format",
            "GET /": "this description",
        },
        "translate_options": options,
        "generate_options": describe_generate_options(),
    }


def describe_generate_options() -> list[dict[str, Any]]:
    """The fields of ``POST /api/generate`` with their type and the default that route applies
    (generation's own, read from the config it builds: beam search's length penalty is 0 there, 0.6 in translate)."""
    from dotformer.decoding.config import generation_config

    sampled, beamed = generation_config(), generation_config(strategy="beam")  # every default, of each strategy
    defaults: dict[str, Any] = {"prompt": "", "max_new_tokens": sampled.max_len_b, "strategy": sampled.strategy}
    defaults["n"] = sampled.n_best
    strategy_of = {name: "sample" for name in ("temperature", "top_k", "top_p", "seed")}
    strategy_of |= {name: "beam" for name in ("beam_size", *(option.name for option in BEAM_RANKING))}
    described = []
    for name in GENERATE_FIELDS:
        option = next((option for option in DECODE_OPTIONS if option.name == name), None)
        if name == "stream":
            default: Any = False
        elif name in defaults:
            default = defaults[name]
        elif option is not None and option.field is not None and name in CONTROL_NAMES:
            default = getattr(sampled, option.field)
        else:  # a setting of one strategy, as its config has it
            default = getattr(beamed if strategy_of[name] == "beam" else sampled, name)
        many = option is not None and option.many
        entry = {"name": name, "type": "string or list of strings" if many else JSON_KINDS[GENERATE_KINDS[name]]}
        entry["default"] = list(default) if isinstance(default, tuple) else default
        if name in strategy_of:
            entry["only_with_strategy"] = strategy_of[name]
        described.append(entry)
    return described
