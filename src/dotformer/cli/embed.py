"""``dotformer embed``: one sentence embedding per input line, written as a ``.npy`` matrix or as JSON lines.

The pooling and batching are :mod:`dotformer.api.embedding`, the path of ``dotformer.load(path).embed(texts)``; this
module reads the lines, checks the flags and writes the vectors.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from dotformer.api.embedding import POOLINGS
from dotformer.cli.decode_flags import add_device_flags, load_for_decoding
from dotformer.cli.inputs import check_input_file, check_input_flags, read_texts

if TYPE_CHECKING:
    import numpy as np

OUTPUT_FORMATS = ("npy", "jsonl")
SIDECAR_SUFFIX = ".json"  # vectors.npy -> vectors.npy.json names the pooling of a .npy file

EPILOG = """\
input:  the TEXT arguments, or else --input FILE, or else standard input: one text per line (an empty line is an
        empty text, read as the model's special tokens alone). UTF-8; lines end at "\\n" or "\\r\\n". No input at
        all is an error.
output: standard output or --output FILE; --output-format (default: jsonl for a FILE ending in .jsonl, else npy):
          npy    one float32 matrix (N, D), row i for input i (numpy.load reads it). With --output FILE, FILE.json
                 beside it (vectors.npy -> vectors.npy.json) names how the rows were made: {"pooling",
                 "normalized", "count", "dim", "dtype", "checkpoint"}. Binary .npy is not written to a terminal.
          jsonl  one JSON object per input: {"id", "text", "pooling", "normalized", "embedding": [D floats]}
        ID is the input's 0-based index.
pooling: mean (the encoder's memory averaged over the real tokens, padding excluded) or cls (the first token: BERT's
        [CLS]); --normalize divides each vector by its L2 norm (dot products are then cosine similarities).
        An imported sentence-transformers model pools and normalises as its own modules say (1_Pooling, Normalize),
        as sentence-transformers does; --pooling and --no-normalize override them. Other models: mean, unnormalised.
        A text longer than --max-seq-length tokens is cut there, as sentence-transformers cuts it (one warning).
        An imported BERT (encoder-only) reads "[CLS] text [SEP]"; an encoder-decoder model's encoder reads its
        source as in translate ("text </s>"). A decoder-only model has no encoder and is refused.

examples:
  dotformer import --from bert ~/models/my-bert runs/bert
  dotformer embed --checkpoint runs/bert --normalize < sentences.txt > vectors.npy
  dotformer embed --checkpoint runs/bert --pooling cls --input sentences.txt --output vectors.jsonl
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``dotformer embed``."""
    parser.epilog = EPILOG
    parser.add_argument("--checkpoint", required=True, metavar="DIR", help="checkpoint or run directory (run: best/)")
    speed = parser.add_argument_group("device and speed")
    add_device_flags(speed, "precision of the weights (vectors are pooled and written in float32)")
    parser.add_argument(
        "--pooling",
        default=None,
        metavar="{" + ",".join(POOLINGS) + "}",
        help="mean over the real tokens or the first token (default: the model's own pooling, else mean)",
    )
    parser.add_argument(
        "--normalize",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="L2-normalise each vector (default: if the model has a Normalize module; --no-normalize opts out)",
    )
    speed.add_argument("--batch-size", type=int, default=64, metavar="B", help="texts encoded together (64)")
    speed.add_argument("--max-tokens", type=int, default=None, metavar="N", help="most padded tokens per batch (8192)")
    speed.add_argument(
        "--max-seq-length",
        type=int,
        default=None,
        metavar="N",
        help="most tokens (special tokens included) an input keeps: a longer one is cut there, as sentence-"
        "transformers cuts it (default: an imported model's max_seq_length, else the model's max_len)",
    )
    parser.add_argument("--input", default=None, metavar="FILE", help="read the inputs from FILE (default: stdin)")
    parser.add_argument("--output", default=None, metavar="FILE", help="write the vectors to FILE (default: stdout)")
    parser.add_argument(
        "--output-format",
        default=None,
        metavar="{npy,jsonl}",
        help="npy (a float32 matrix) or jsonl (one object per input); default: from --output's suffix, else npy",
    )
    parser.add_argument("texts", nargs="*", metavar="TEXT", help="texts to embed (default: lines of stdin)")


def check_arguments(args: argparse.Namespace) -> str:
    """Validate the flags before loading anything; returns the output format.

    Raises:
        ConfigError: an unknown pooling or format, a bad number, TEXT arguments with --input, a bad --output.
        MissingDataError: --input names no file.
    """
    from dotformer.cli.outputs import check_output_file
    from dotformer.errors import ConfigError

    if args.pooling is not None and args.pooling not in POOLINGS:  # the flag's choices, named as a flag
        raise ConfigError(f"--pooling {args.pooling!r} is not one of {', '.join(POOLINGS)}")
    check_input_flags(
        args,
        ("--batch-size", args.batch_size),
        ("--max-tokens", args.max_tokens),
        ("--max-seq-length", args.max_seq_length),
    )
    to_file = args.output not in (None, "-")
    output_format = args.output_format
    if output_format is None:
        output_format = "jsonl" if to_file and str(args.output).endswith(".jsonl") else "npy"
    if output_format not in OUTPUT_FORMATS:
        raise ConfigError(f"--output-format {output_format!r} is not one of {', '.join(OUTPUT_FORMATS)}")
    check_input_file(args.input)
    if to_file:
        check_output_file(args.output, "--output", (("--input", args.input),))
        if output_format == "npy":
            sidecar = str(args.output) + SIDECAR_SUFFIX
            check_output_file(sidecar, "--output (its pooling file)", (("--input", args.input),))
    elif output_format == "npy" and _is_terminal(sys.stdout):
        raise ConfigError("a .npy matrix is binary: redirect standard output, give --output FILE or use jsonl")
    return output_format


def run(args: argparse.Namespace) -> int:
    """Read the inputs, embed them, write the vectors. Returns 0."""
    from dotformer.api import Translator
    from dotformer.api.embedding import embedding_settings
    from dotformer.errors import ConfigError

    output_format = check_arguments(args)
    texts = read_texts(args, "embed")
    translator = Translator(load_for_decoding(args), args.dtype)
    pooling, normalize = embedding_settings(translator.checkpoint, args.pooling, args.normalize)
    if args.max_seq_length is not None:  # against the model's positions, named as the flag
        from dotformer.decoding.inputs import check_max_input_length

        check_max_input_length(translator.checkpoint.model.config, args.max_seq_length, "--max-seq-length")
    vectors = translator.embed(
        texts,
        pooling=pooling,
        normalize=normalize,
        batch_size=args.batch_size,
        max_tokens=args.max_tokens,
        max_seq_length=args.max_seq_length,
    )
    payload = npy_bytes(vectors) if output_format == "npy" else jsonl_text(texts, vectors, pooling, normalize)
    if args.output in (None, "-"):
        out: Any = getattr(sys.stdout, "buffer", None)
        if out is None:  # a text stream without bytes underneath: JSON lines go as text, a .npy cannot
            if output_format == "npy":
                raise ConfigError("standard output here takes text only: give --output FILE or use jsonl")
            sys.stdout.write(payload.decode("utf-8"))
        else:
            out.write(payload)
        sys.stdout.flush()
        return 0
    path = Path(args.output)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(payload)
    if output_format == "npy":
        sidecar = Path(str(path) + SIDECAR_SUFFIX)
        sidecar.write_text(sidecar_text(vectors, pooling, normalize, translator), encoding="utf-8")
    shown = f"{path} (pooling in {path}{SIDECAR_SUFFIX})" if output_format == "npy" else str(path)
    print(f"wrote {shown}: {vectors.shape[0]} x {vectors.shape[1]} float32, {pooling} pooling"
          f"{', L2-normalised' if normalize else ''}")  # fmt: skip
    return 0


def npy_bytes(vectors: np.ndarray) -> bytes:
    """The (N, D) float32 matrix in numpy's .npy format."""
    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, vectors.astype(np.float32, copy=False), allow_pickle=False)
    return buffer.getvalue()


def jsonl_text(texts: list[str], vectors: np.ndarray, pooling: str, normalize: bool) -> bytes:
    """One JSON object per input, UTF-8: ``{"id", "text", "pooling", "normalized", "embedding"}``.

    Each float32 is written as the shortest decimal that reads back to the same float32.
    """
    from dotformer.cli.lines import json_line

    lines = (
        json_line({"id": i, "text": text, "pooling": pooling, "normalized": normalize, "embedding": _floats(vector)})
        + "\n"
        for i, (text, vector) in enumerate(zip(texts, vectors, strict=True))
    )
    return "".join(lines).encode("utf-8")


def _floats(vector: np.ndarray) -> list[float]:
    """(D,) float32 -> D Python floats, each the shortest decimal of its float32 (``0.1``, not ``0.10000000149``)."""
    return [float(str(value)) for value in vector]


def sidecar_text(vectors: np.ndarray, pooling: str, normalize: bool, translator: Any) -> str:
    """The JSON beside a .npy file that names how its rows were made."""
    import json

    fields = {
        "pooling": pooling,
        "normalized": normalize,
        "count": int(vectors.shape[0]),
        "dim": int(vectors.shape[1]),
        "dtype": "float32",
        "checkpoint": str(translator.path),
    }
    return json.dumps(fields, indent=2) + "\n"


def _is_terminal(stream: IO[Any] | None) -> bool:
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError):
        return False
