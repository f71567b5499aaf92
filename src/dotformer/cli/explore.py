"""``dotformer explore``: look inside a checkpoint in the browser (serve on 127.0.0.1, or write a static page)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from dotformer.cli.threads import device_help

EPILOG = """\
Serve mode (default) runs the model for every input typed in the page, greedily or force-decoding a reference typed
beside it; it listens on 127.0.0.1 only, stops on Ctrl-C and needs pip install "dotformer[serve]". Write mode
(--write FILE.html) saves one self-contained page (no network access) with the --text examples precomputed (default:
the first 5 sources of the run's test split); live input and forced decoding then need serve mode.

The page shows each output token's probability and its top-5 alternatives, and four views of the attention
weights: Overview (every layer x head of the chosen kind, and the mean over heads), Map (one head, hover to highlight
a row and a column, download as PNG or SVG), Head view (lines from queries to keys, one colour per head) and Compare
(two inputs side by side). Add #overview, #map, #heads or #compare to the address to open one.

A language model (a checkpoint of `dotformer train --task lm`) shows its causal self-attention over the text typed
(each token reads itself and the tokens before it: zeros above the diagonal, the lesson's mask) and each position's
likeliest next token; the default examples are the first lines of its test text that fit in its window.
An encoder (a checkpoint of `--task mlm`, `classify` or `tag`) shows its self-attention over the text typed (each
token reads the tokens before and after it) and what its head reads: a masked language model fills the mask tokens
of the text, a classifier gives the text's label, a tagger each token's.

examples:
  dotformer explore --checkpoint runs/g2p                      # then open http://127.0.0.1:8000/
  dotformer explore --checkpoint runs/g2p --port 8765 --text transformer --text attention
  dotformer explore --checkpoint runs/g2p --write explorer.html --text transformer --text attention
  dotformer explore --checkpoint runs/g2p --write r.html --text read --target "R IY1 D" --text read --target "R EH1 D"
  dotformer explore --checkpoint runs/lm-bible --text "In the beginning God created"
  chromium --headless --screenshot=overview.png --window-size=1200,1000 "file://$PWD/explorer.html#overview"
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Checkpoint, serve or write, examples."""
    parser.epilog = EPILOG
    parser.add_argument("--checkpoint", required=True, metavar="DIR", help="checkpoint or run directory")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--port", type=int, default=8000, help="serve on 127.0.0.1:PORT (8000)")
    mode.add_argument("--write", metavar="FILE.html", help="write a static page instead of serving")
    parser.add_argument("--text", action="append", default=[], metavar="TEXT", help="an example input (repeatable)")
    parser.add_argument(
        "--target",
        action="append",
        default=None,
        metavar="REF",
        help="force-decode REF for the --text at the same place (one per --text; '' decodes that one)",
    )
    parser.add_argument("--device", default="cpu", help=device_help("cpu"))
    parser.add_argument("--verbose", action="store_true", help="log every request (serve mode)")


def default_examples(checkpoint: str, count: int = 5, loaded: Any = None) -> list[str]:
    """The first ``count`` sources of the run's saved test split, or [] when the run has none; for a language model
    (``loaded`` decoder-only) the first ``count`` test lines that fit in its window."""
    from dotformer.checkpoint import run_data_dir
    from dotformer.data.prepared.splits import load_split
    from dotformer.errors import DotformerError

    try:
        if loaded is not None and loaded.model.config.arch == "decoder-only":
            return lm_examples(loaded, run_data_dir(checkpoint), count)
        pairs = load_split(run_data_dir(checkpoint), "test")
    except (DotformerError, OSError):
        return []
    return [pair.source for pair in pairs[:count]]


def lm_examples(loaded: Any, data_dir: Path, count: int) -> list[str]:
    """The first ``count`` non-empty lines of a language model's saved test text that fit in its window (a line
    end first, as the explorer reads a text)."""
    from dotformer.runs.text import load_text_split

    window = loaded.context_window
    fitting = (line for line in load_text_split(data_dir, "test") if line.strip())
    fitting = (line for line in fitting if len(loaded.tgt_tokenizer.encode(line)) + 1 <= window)
    return [line for line, _ in zip(fitting, range(count), strict=False)]


def run(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C, or write the page."""
    from dotformer.api import resolve_device
    from dotformer.checkpoint import load_checkpoint
    from dotformer.cli.outputs import check_output_file
    from dotformer.errors import ConfigError
    from dotformer.explore import ExplorerServer, write_page
    from dotformer.training.progress import count

    if args.write:
        check_output_file(args.write, "--write")
    else:
        from dotformer.api.web import aiohttp_web

        aiohttp_web()  # serve mode needs the serve extra: said before the model loads
    loaded = load_checkpoint(args.checkpoint, device=resolve_device(args.device))
    if args.target is not None and len(args.target) != len(args.text):
        raise ConfigError(
            f"give one --target per --text ({len(args.text)} --text, {len(args.target)} --target); '' decodes that one"
        )
    texts = args.text or default_examples(args.checkpoint, loaded=loaded)
    if args.write:
        if not texts:
            raise ConfigError("--write needs example inputs: give --text (the run has no saved test split)")
        path = write_page(loaded, texts, args.write, args.target)
        print(f"wrote {path} ({count(len(texts), 'example')}; live input needs serve mode)")
        return 0
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port must be in 0..65535, got {args.port}")
    announce = lambda line: print(line, flush=True)  # noqa: E731
    ExplorerServer(loaded, args.port, texts, args.verbose, args.target).run(announce)
    return 0
