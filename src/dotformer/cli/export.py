"""``dotformer export``: write a checkpoint's model for another engine (CTranslate2, Hugging Face, ONNX)."""

from __future__ import annotations

import argparse

EPILOG = """\
formats:
  ct2     a CTranslate2 directory (model.bin, vocabularies = the tokenizers' pieces); --quantization int8 stores int8;
          a language model (--task lm) becomes CTranslate2's decoder-only model, run by ctranslate2.Generator
  hf      a Hugging Face model directory with its tokenizer.json: a language model as a causal LM
          (AutoModelForCausalLM: GPT-2's layout for the 2017 block, pre-LN; the Llama family's for the modern
          block), an encoder as BertModel (AutoModel: post-LN, embedding LayerNorm), an encoder-decoder as marian
  marian  a Hugging Face MarianMTModel directory (config.json, model.safetensors) with dotformer's ids
          (PAD 0, BOS 1 = decoder start, EOS 2, UNK 3); needs post-LN, sinusoidal positions, layer_norm_eps 1e-5
  onnx    encoder.onnx + decoder_step.onnx (one cached step) + onnx_config.json, for onnxruntime and friends
          (a language model: lm_step.onnx)

Each output also holds the checkpoint's tokenizer_src.json and tokenizer_tgt.json. OUT must not exist or be empty:
an export never writes over existing files.

examples:
  dotformer export --to ct2 runs/bible exported/bible-ct2 --quantization int8
  dotformer export --to ct2 --checkpoint runs/bible --out exported/bible-ct2
  dotformer export --to marian runs/bible exported/bible-marian
  dotformer export --to hf runs/lm-bible exported/lm-bible-hf
  dotformer export --to onnx runs/g2p exported/g2p-onnx
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Format, checkpoint, output directory."""
    from dotformer.export.checkpoint import FORMATS

    parser.epilog = EPILOG
    parser.add_argument("--to", required=True, choices=FORMATS, help="the target format")
    parser.add_argument(
        "paths", nargs="*", metavar="CHECKPOINT OUT", help="checkpoint or run directory, then the output directory"
    )
    parser.add_argument(
        "--checkpoint", dest="checkpoint_flag", metavar="DIR", help="checkpoint or run directory (as CHECKPOINT)"
    )
    parser.add_argument("--out", dest="out_flag", metavar="DIR", help="output directory, new or empty (as OUT)")
    parser.add_argument(
        "--quantization",
        default=None,
        metavar="TYPE",
        help="ct2 only: store weights as int8, int8_float32, float16, bfloat16, ... (default float32)",
    )


def checkpoint_and_output(args: argparse.Namespace) -> tuple[str, str]:
    """CHECKPOINT and OUT, given as the two positional arguments or as ``--checkpoint`` and ``--out`` (either one
    in place of its positional argument).

    Raises:
        ConfigError: one missing, or given twice.
    """
    from dotformer.errors import ConfigError

    paths = list(args.paths)
    checkpoint = args.checkpoint_flag if args.checkpoint_flag is not None else (paths.pop(0) if paths else None)
    output = args.out_flag if args.out_flag is not None else (paths.pop(0) if paths else None)
    if paths:
        raise ConfigError(f"unexpected argument(s) {' '.join(paths)}: give CHECKPOINT OUT, or --checkpoint and --out")
    if checkpoint is None or output is None:
        raise ConfigError("give the checkpoint and the output directory: CHECKPOINT OUT, or --checkpoint and --out")
    return checkpoint, output


def run(args: argparse.Namespace) -> int:
    """Export, then print where the files are."""
    from dotformer.export.checkpoint import export_checkpoint

    args.checkpoint, args.output = checkpoint_and_output(args)

    if args.to in ("hf", "marian"):
        _quiet_hf_progress_bars()
    try:
        path = export_checkpoint(args.checkpoint, args.output, args.to, args.quantization)
    except _safetensors_error() as exc:  # a failed write (a full disk): safetensors' own exception type
        from dotformer.errors import CheckpointError

        reason = " ".join(str(exc).split())
        raise CheckpointError(
            f"could not write {args.output}/model.safetensors: {reason} (nothing was written)"
        ) from None
    print(f"wrote {path} ({args.to})")
    return 0


def _safetensors_error() -> type[Exception]:
    """``safetensors.SafetensorError``, the type safetensors raises for I/O errors such as ENOSPC (or a type never
    raised when safetensors is not installed)."""
    try:
        from safetensors import SafetensorError
    except ImportError:
        return type("NoSafetensorError", (Exception,), {})
    return SafetensorError


def _quiet_hf_progress_bars() -> None:
    """HF draws a progress bar when it writes weights; the CLI prints one line instead."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        return
    hf_logging.disable_progress_bar()
