"""``dotformer serve``: a local translation endpoint, POST /api/translate, for a checkpoint."""

from __future__ import annotations

import argparse
import os

API_KEY_ENV = "DOTFORMER_API_KEY"  # the API key when --api-key is not given

EPILOG = """\
The server listens on 127.0.0.1 (this machine only) unless --host says otherwise. A request is a JSON object
{"texts": [...], "beam": 4, "n_best": 1, "strategy": "beam"} (only "texts" is required; every decoding option of
dotformer translate is a field: "strategy": "sample", "seed", "min_len_b", "prefix" (one string or null per text),
"alignments", ...; "scores": false skips the exact scoring pass); the reply is {"translations": [{"text", "score",
"finished", "unknown_symbols"}, ...]}. Bad
requests get HTTP 400 (404, 405: no such path or method, 408: body too slow, 413: body or work too large) and one
line {"error": "..."} (HTTP too malformed to read gets a plain-text 400). GET / describes the endpoints, the options
and the engine that decodes (--engine: CTranslate2 when installed, with --threads per batch and --inter-threads
batches at once, else torch), GET /api/health shows the limits, and a language model (train --task lm) answers POST
/api/generate {"prompt": "...", "max_new_tokens": 200, ...} ("stream": true sends the text as server-sent events,
piece by piece as it is produced) and the OpenAI-style POST /v1/completions (prompt, max_tokens, temperature, top_p,
stop, seed, stream), so that the openai client works against http://HOST:PORT/v1 unchanged. POST /api/embed
{"texts": [...], "pooling": "mean", "normalize": false} gives sentence embeddings of any model with an encoder.

limits: every connection is read by an event loop (aiohttp), so slow or idle clients cost no decoding and any
number of them holds back no one; the request line and headers must arrive within 10 s of connecting, or the
connection is closed; the body within 30 s more (408), of at most 262144 bytes (413), JSON nested at most 32 deep;
up to 128 connections wait to be accepted. A request holds at most 64 texts of at most 2000 characters, beam at most
16, and at most 16384 source tokens x beam (beam 1 for greedy) in all.

batching: the texts of every waiting request with the same options are decoded together, in one engine call of at
most --batch-tokens (4096) source tokens x beam, started once the oldest has waited --batch-wait-ms (5), the call
is full, or one in --batch-groups of the requests on their way are there (2 for CTranslate2 on a CPU: two halves of
the clients take turns, the engine decoding one while the other's answers and next requests travel; 1 for torch or
a GPU: all of them); a larger request is split across calls, the requests arriving meanwhile riding beside it, so
it does not hold back the small ones. Each request gets exactly the outputs dotformer translate gives with the same
options (a sampling request is decoded alone, whole, as its seed draws for the whole call).

operations: GET /health answers {"status": "ok"} while the process runs (a liveness probe) and GET /ready once the
model is loaded; GET /metrics gives requests by route and status, latencies, batch sizes, the queue and the tokens
produced in Prometheus' text format; --verbose logs one JSON line per request (route, status, ms, sentences);
--api-key KEY (or $DOTFORMER_API_KEY) makes every other route answer 401 without the header Authorization: Bearer KEY.

Ctrl-C or SIGTERM stops the server once the requests being decoded are answered (exit 0; a second Ctrl-C exits at
once, 130). Serving needs the serve extra: pip install "dotformer[serve]".

examples:
  dotformer serve --checkpoint runs/g2p --port 8080
  curl -s http://127.0.0.1:8080/api/translate -d '{"texts": ["transformer", "attention"], "beam": 4}'
  dotformer serve --checkpoint runs/bible --dtype int8 --port 0      # any free port, printed at start
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Checkpoint, address, device, dtype and CPU threads."""
    from dotformer.api.serve import HOST

    parser.epilog = EPILOG
    parser.add_argument(
        "--checkpoint",
        required=True,
        action="append",
        metavar="DIR",
        help="checkpoint or run directory; repeat it to serve an ensemble (their distributions averaged per step)",
    )
    parser.add_argument("--port", type=int, default=8080, help="TCP port (8080; 0 = any free port, printed)")
    parser.add_argument(
        "--host", default=HOST, help=f"interface to listen on ({HOST}: this machine only; 0.0.0.0 opens it to others)"
    )
    from dotformer.cli.decode_flags import add_engine_flags, add_engine_threads
    from dotformer.cli.threads import device_help

    speed = parser.add_argument_group("device and speed")
    add_engine_flags(speed)
    speed.add_argument("--device", default="cpu", help=device_help("cpu"))
    speed.add_argument(
        "--dtype",
        default="float32",
        choices=("float32", "bfloat16", "float16", "int8"),
        help="weights for decoding (float32)",
    )
    add_engine_threads(speed)
    from dotformer.api.batcher import MAX_BATCH_TOKENS, MAX_WAIT_MS

    speed.add_argument(
        "--batch-tokens",
        type=int,
        default=MAX_BATCH_TOKENS,
        metavar="N",
        help=f"most source tokens x beam of all waiting requests decoded in one engine call ({MAX_BATCH_TOKENS}); "
        "a larger request is split across calls",
    )
    speed.add_argument(
        "--batch-wait-ms",
        type=float,
        default=MAX_WAIT_MS,
        metavar="MS",
        help=f"longest a request waits for others to share its engine call, milliseconds ({MAX_WAIT_MS:g}; 0: none)",
    )
    speed.add_argument(
        "--batch-groups",
        type=int,
        default=None,
        metavar="N",
        help="a call starts once one in N of the requests on their way are there (default: the engine's; 2 for "
        "CTranslate2 on a CPU: two halves of the clients take turns, one's round trip beside the other's call; 1 for "
        "torch or a GPU: a call waits for all)",
    )
    parser.add_argument(
        "--api-key",
        default=None,
        metavar="KEY",
        help=f"require the header Authorization: Bearer KEY on every route but GET /health (default: "
        f"${API_KEY_ENV} when set, else no key)",
    )
    parser.add_argument("--verbose", action="store_true", help="log every request on stderr, one JSON line each")


def run(args: argparse.Namespace) -> int:
    """Load the checkpoint, then serve until Ctrl-C or SIGTERM."""
    from dotformer.api.serve import TranslationServer
    from dotformer.api.web import aiohttp_web
    from dotformer.cli.decode_flags import load_translator
    from dotformer.errors import ConfigError

    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port must be in 0..65535, got {args.port}")
    if args.api_key is not None and (not args.api_key or any(c.isspace() for c in args.api_key)):
        raise ConfigError("--api-key must be a non-empty key without spaces")
    if args.batch_tokens < 1:
        raise ConfigError(f"--batch-tokens must be positive, got {args.batch_tokens}")
    if args.batch_groups is not None and args.batch_groups < 1:
        raise ConfigError(f"--batch-groups must be positive, got {args.batch_groups}")
    if not 0 <= args.batch_wait_ms <= 10_000:
        raise ConfigError(f"--batch-wait-ms must be from 0 to 10000, got {args.batch_wait_ms:g}")
    from dotformer.errors import require_extra

    aiohttp_web()  # a missing extra is said before the model loads
    require_extra("serve", "prometheus_client", "GET /metrics")
    translator = load_translator(args)  # several --checkpoint: an ensemble (dotformer.decoding.ensemble), on torch
    announce = lambda line: print(line, flush=True)  # noqa: E731
    api_key = args.api_key if args.api_key is not None else os.environ.get(API_KEY_ENV) or None
    server = TranslationServer(translator, args.port, args.host, args.verbose, batch_tokens=args.batch_tokens,
                               batch_wait_ms=args.batch_wait_ms, batch_groups=args.batch_groups,
                               api_key=api_key)  # fmt: skip
    server.run(announce)
    return 0
