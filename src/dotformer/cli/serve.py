"""``dotformer serve``: a local translation endpoint, POST /api/translate, for a checkpoint."""

from __future__ import annotations

import argparse

EPILOG = """\
The server listens on 127.0.0.1 (this machine only) unless --host says otherwise, answers one request at a time,
and stops on Ctrl-C. A request is a JSON object {"texts": [...], "beam": 4, "n_best": 1, "strategy": "beam"} (only
"texts" is required); the reply is {"translations": [{"text", "score", "finished", "unknown_symbols"}, ...]}.
Bad requests get HTTP 400 (413: body too large) and {"error": "..."}. GET /api/health shows the limits.

examples:
  dotformer serve --checkpoint runs/g2p --port 8080
  curl -s http://127.0.0.1:8080/api/translate -d '{"texts": ["transformer", "attention"], "beam": 4}'
  dotformer serve --checkpoint runs/bible --dtype int8 --port 0      # any free port, printed at start
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Checkpoint, address, device and dtype."""
    from dotformer.api.serve import HOST

    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--checkpoint", required=True, metavar="DIR", help="checkpoint or run directory")
    parser.add_argument("--port", type=int, default=8080, help="TCP port (8080; 0 = any free port, printed)")
    parser.add_argument(
        "--host", default=HOST, help=f"interface to listen on ({HOST}: this machine only; 0.0.0.0 opens it to others)"
    )
    parser.add_argument("--device", default="cpu", help="where to run the model: cpu, cuda, cuda:N, auto (cpu)")
    parser.add_argument(
        "--dtype",
        default="float32",
        choices=("float32", "bfloat16", "float16", "int8"),
        help="weights for decoding (float32)",
    )
    parser.add_argument("--verbose", action="store_true", help="log every request on stderr")


def run(args: argparse.Namespace) -> int:
    """Load the checkpoint, then serve until Ctrl-C."""
    from dotformer.api import load
    from dotformer.api.serve import serve
    from dotformer.errors import ConfigError

    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port must be in 0..65535, got {args.port}")
    translator = load(args.checkpoint, device=args.device, dtype=args.dtype)
    serve(translator, args.port, args.host, verbose=args.verbose, announce=lambda line: print(line, flush=True))
    return 0
