"""One request of ``POST /api/translate``: its checks, its limits, and its decoding in fair turns at the model.

:func:`parse_request` checks a decoded JSON body against the limits (:data:`MAX_TEXTS` texts of at most
:data:`MAX_TEXT_CHARS` characters, beam at most :data:`MAX_BEAM`); :func:`translate_request` also bounds its work
(source tokens x beam, at most :data:`MAX_REQUEST_WORK`) and decodes it in chunks of at most :data:`CHUNK_WORK`, each
chunk one turn at the model (:class:`~dotformer.api.connections.FairTurns`), so that requests arriving meanwhile are
served between the chunks of a large one. The HTTP side is :mod:`dotformer.api.serve`.
"""

from __future__ import annotations

import json
import warnings
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from dotformer.api.connections import FairTurns
from dotformer.errors import DotformerError

if TYPE_CHECKING:
    from dotformer.api.translator import Translator

MAX_TEXTS = 64  # most texts per request
MAX_TEXT_CHARS = 2000  # most characters per text
MAX_BEAM = 16  # widest beam (and most n_best) a request may ask for
MAX_REQUEST_WORK = 16384  # most source tokens (EOS included) x beam one request may ask for
CHUNK_WORK = 1024  # most source tokens x beam decoded in one turn at the model
STRATEGIES = ("beam", "greedy")
FIELDS = ("texts", "beam", "n_best", "strategy")


class RequestError(DotformerError, ValueError):
    """A request the endpoint refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST) -> None:
        super().__init__(message)
        self.status = status


def _positive_int(request: dict[str, Any], name: str, default: int, largest: int) -> int:
    value = request.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= largest:
        raise RequestError(f'"{name}" must be an integer from 1 to {largest}, got {json.dumps(value)}')
    return value


def parse_request(request: Any) -> tuple[list[str], dict[str, Any]]:
    """Check a decoded JSON request; return its texts and the keyword arguments of ``Translator.translate``.

    Raises:
        RequestError: not an object, unknown fields, ``texts`` missing, empty, too many or too long, not strings,
            or a bad ``beam`` / ``n_best`` / ``strategy`` (the message names the field and the limit).
    """
    if not isinstance(request, dict):
        raise RequestError('the body must be a JSON object: {"texts": ["..."]}')
    unknown = sorted(set(request) - set(FIELDS))
    if unknown:
        raise RequestError(f"unknown field(s) {', '.join(unknown)}; the fields are {', '.join(FIELDS)}")
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
    strategy = request.get("strategy", "beam")
    if strategy not in STRATEGIES:
        raise RequestError(f'"strategy" must be one of {", ".join(STRATEGIES)}, got {json.dumps(strategy)}')
    beam = _positive_int(request, "beam", 4, MAX_BEAM)
    n_best = _positive_int(request, "n_best", 1, MAX_BEAM)
    if strategy == "greedy" and ("beam" in request or n_best != 1):
        raise RequestError('"strategy": "greedy" finds one output: leave out "beam" and "n_best"')
    if n_best > beam:
        raise RequestError(f'"n_best"={n_best} cannot exceed "beam"={beam}')
    if strategy == "greedy":
        return texts, {"strategy": strategy, "n_best": 1}
    return texts, {"strategy": strategy, "beam": beam, "n_best": n_best}


def chunk_by_work(work: list[int], chunk_work: int) -> list[range]:
    """Cut consecutive texts into chunks of at most ``chunk_work`` in all (a text above it is a chunk alone).

    Args:
        work: per text, its source tokens x beam.
        chunk_work: the most work per chunk.

    Returns:
        The index ranges of the chunks, in order, covering every text once.
    """
    chunks, start, total = [], 0, 0
    for i, amount in enumerate(work):
        if i > start and total + amount > chunk_work:
            chunks.append(range(start, i))
            start, total = i, 0
        total += amount
    if start < len(work):
        chunks.append(range(start, len(work)))
    return chunks


def translate_request(
    translator: Translator,
    request: Any,
    turns: FairTurns | None = None,
    max_work: int = MAX_REQUEST_WORK,
    chunk_work: int = CHUNK_WORK,
) -> dict[str, Any]:
    """The JSON reply to one request (see the module docstring).

    Args:
        translator: the loaded model.
        request: the decoded JSON body.
        turns: the model's turns, shared by the threads that serve requests (None: a private one).
        max_work: the most source tokens (EOS included) x beam (1 for greedy) the request may ask for.
        chunk_work: the most of that decoded in one turn.

    Raises:
        RequestError: a bad request (see :func:`parse_request`), or one that asks for more than ``max_work`` (413).
        DotformerError: the model cannot decode an input (e.g. longer than it reads).
    """
    from dotformer.decoding.inputs import encode_sources

    texts, options = parse_request(request)
    encoded = encode_sources(translator.checkpoint, texts, translator.max_input_length)
    work = [len(ids) * options.get("beam", 1) for ids in encoded.ids]
    if sum(work) > max_work:
        raise RequestError(
            f"the request asks for {sum(work)} source tokens x beam; one request takes at most {max_work}: "
            f"send fewer or shorter texts, or a narrower beam",
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
        )
    turns = turns if turns is not None else FairTurns()
    results = []
    for chunk in chunk_by_work(work, chunk_work):
        with turns.take(), warnings.catch_warnings():  # one thread at a time touches the model and the warnings
            warnings.simplefilter("ignore")  # unknown symbols are reported per text in the reply
            results += translator.translate([texts[i] for i in chunk], details=True, **options)
    translations = []
    for result in results:
        best = result.hypotheses[0]
        item: dict[str, Any] = {
            "text": best.text,
            "score": best.score,
            "finished": best.finished,
            "unknown_symbols": result.unknown_symbols,
        }
        if options["n_best"] > 1:
            item["hypotheses"] = [{"text": h.text, "score": h.score, "finished": h.finished} for h in result.hypotheses]
        translations.append(item)
    return {"translations": translations}
