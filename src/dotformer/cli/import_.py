"""``dotformer import``: turn another library's model directory into a dotformer checkpoint."""

from __future__ import annotations

import argparse

FORMATS = ("hf", "gguf", "marian", "bert")

EPILOG = """\
formats:
  hf      a local Hugging Face directory: config.json, model.safetensors, tokenizer.json (generation_config.json);
          the family from config.json's model_type: gpt2, llama (Llama 2/3, SmolLM), mistral, qwen2 (Qwen2/2.5),
          qwen3, gemma2, gemma3_text -> a language model with its tokenizer and BOS/EOS rules; marian and bert
          directories go to their importers
  gguf    a GGUF file (llama.cpp) of those families, its quantized tensors dequantized; the tokenizer from its
          vocabulary, or a tokenizer.json beside it
  marian  a local Hugging Face Marian directory: config.json, model.safetensors, source.spm, target.spm, vocab.json
          (what MarianMTModel/MarianTokenizer.save_pretrained write) -> an encoder-decoder checkpoint
  bert    a local BERT-family encoder directory: config.json, model.safetensors, tokenizer.json (WordPiece)
          -> an encoder-only checkpoint whose encoder memory is BERT's last hidden state

Weights are read from safetensors only: a directory holding only pytorch_model.bin (a pickle) is refused.
OUT must not exist or be empty. A Marian checkpoint works with translate, evaluate (--dtype int8), explore and
serve; a BERT checkpoint (an encoder alone, nothing to decode) with embed (which pools its encoder's output),
train --init-from (fine-tuning: --task classify, tag or mlm), plot attention and explore.

examples:
  dotformer import --from hf ~/models/SmolLM2-135M runs/smollm
  dotformer generate --checkpoint runs/smollm --prompt "The capital of France is" --greedy --max-new-tokens 20
  dotformer import --from marian ~/models/opus-mt-xx-yy runs/imported-marian
  dotformer translate --checkpoint runs/imported-marian "a sentence to translate"
  dotformer import --from bert ~/models/bert-tiny runs/imported-bert
  dotformer embed --checkpoint runs/imported-bert "a sentence to embed" --output-format jsonl
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Format, source directory, output checkpoint."""
    parser.epilog = EPILOG
    parser.add_argument("--from", dest="source_format", required=True, choices=FORMATS, help="the source format")
    parser.add_argument("source", metavar="DIR", help="the model directory (or GGUF file) to read (local files only)")
    parser.add_argument("output", metavar="OUT", help="the checkpoint directory to write (new, or empty)")


def run(args: argparse.Namespace) -> int:
    """Import, then print where the checkpoint is."""
    from dotformer.export.outdir import check_output_dir

    check_output_dir(args.output)
    if args.source_format == "hf":
        from dotformer.imports.hf import import_hf

        path = import_hf(args.source, args.output)
    elif args.source_format == "gguf":
        from dotformer.imports.gguf import import_gguf

        path = import_gguf(args.source, args.output)
    elif args.source_format == "marian":
        from dotformer.imports.marian import import_marian

        path = import_marian(args.source, args.output)
    else:
        from dotformer.imports.bert import import_bert

        path = import_bert(args.source, args.output)
    print(f"wrote {path} (a dotformer checkpoint imported from {args.source_format})")
    return 0
