"""Export a saved checkpoint to another engine's format: what ``dotformer export`` runs.

Every format gets the checkpoint's two tokenizer files (``tokenizer_src.json``, ``tokenizer_tgt.json``) next to the
model, so that its users can turn text into the ids the model reads and back.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from dotformer.checkpoint import SRC_TOKENIZER_FILE, TGT_TOKENIZER_FILE
from dotformer.errors import ConfigError, MissingDataError
from dotformer.export.outdir import check_output_dir, fresh_output_dir

if TYPE_CHECKING:
    from dotformer.checkpoint import LoadedCheckpoint

logger = logging.getLogger(__name__)

Format = Literal["ct2", "hf", "marian", "onnx"]
FORMATS: tuple[str, ...] = ("ct2", "hf", "marian", "onnx")
EXTRA_OF_FORMAT = {
    "ct2": ("ctranslate2", "bench"),
    "hf": ("transformers", "bench"),
    "marian": ("transformers", "bench"),
    "onnx": ("onnx", "onnx"),
}


def require_package(module: str, extra: str, purpose: str) -> None:
    """Raise :class:`MissingDataError` naming the ``pip install`` to run unless ``module`` can be imported."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise MissingDataError(f'{purpose} needs the {module} package: pip install "dotformer[{extra}]"')


def export_checkpoint(
    checkpoint: str | Path, output_dir: str | Path, to: Format, quantization: str | None = None
) -> Path:
    """Write the model of ``checkpoint`` as ``to`` into ``output_dir`` (absent or empty), with its tokenizers.

    Args:
        checkpoint: a checkpoint or run directory.
        output_dir: created; an existing non-empty directory is refused before anything is read or written.
        to: ``"ct2"`` (CTranslate2 directory; vocabularies are the tokenizers' pieces), ``"hf"`` (a Hugging Face
            model directory of the model's family, :func:`write_hf`), ``"marian"`` (HF
            ``MarianMTModel`` directory with dotformer's ids), or ``"onnx"`` (encoder + decoder-step graphs; a
            language model's cached step; an encoder-only model's one graph of its head's logits).
        quantization: CTranslate2 only: store weights as ``int8``, ``int8_float32``, ``float16``, ...

    Returns:
        ``output_dir``.

    Raises:
        ConfigError: unknown format, a non-empty ``output_dir``, quantization for another format, or a model the
            format cannot hold (the message says why).
        MissingDataError: the format's package is not installed (the message names the extra).
        CheckpointError: the checkpoint cannot be read.
    """
    if to not in FORMATS:
        raise ConfigError(f"unknown export format {to!r}; choose one of {', '.join(FORMATS)}")
    if quantization is not None and to != "ct2":
        raise ConfigError(f"--quantization is for --to ct2 only (got --to {to})")
    if quantization is not None:
        from dotformer.export.ct2_rules import check_quantization

        check_quantization(quantization)
    check_output_dir(output_dir)
    module, extra = EXTRA_OF_FORMAT[to]
    require_package(module, extra, f"exporting to {to}")
    from dotformer.checkpoint import load_checkpoint

    loaded = load_checkpoint(checkpoint)
    with fresh_output_dir(output_dir) as tmp:
        if to == "ct2":
            write_ct2(loaded, tmp, quantization)
        elif to == "hf":
            write_hf(loaded, tmp)
        elif to == "marian":
            from dotformer.export.marian import save_marian

            save_marian(loaded.model, tmp)
        elif loaded.config.arch == "encoder-only":  # a classifier, tagger or masked language model: one graph
            from dotformer.export.onnx_encoder import export_encoder_onnx

            labels = loaded.info.get("labels") if loaded.config.head != "generator" else None
            export_encoder_onnx(loaded.model, tmp, labels)
        elif loaded.config.arch == "decoder-only":  # a language model: one cached step
            from dotformer.export.onnx_lm import export_lm_onnx

            export_lm_onnx(loaded.model, tmp)
        else:
            from dotformer.export.onnx import export_onnx

            export_onnx(loaded.model, tmp)
        shutil.copyfile(loaded.path / SRC_TOKENIZER_FILE, tmp / SRC_TOKENIZER_FILE)
        shutil.copyfile(loaded.path / TGT_TOKENIZER_FILE, tmp / TGT_TOKENIZER_FILE)
    return Path(output_dir)


def write_ct2(
    loaded: LoadedCheckpoint, directory: Path, quantization: str | None, suppress_specials: bool = True
) -> None:
    """CTranslate2 files in ``directory`` (which exists and is empty), with the tokenizers' pieces as vocabularies:
    a ``Translator`` directory for an encoder-decoder, a ``Generator`` directory for a language model.

    Args:
        loaded: the checkpoint (float weights).
        directory: where the files go.
        quantization: the weights' storage type (:data:`~dotformer.export.ct2_rules.QUANTIZATIONS`; None: float32).
        suppress_specials: PAD and BOS never generated with CTranslate2's default options (``dotformer export``);
            False keeps the trained generator (the CTranslate2 engine suppresses them per call, so that its scores
            are dotformer's, see :class:`~dotformer.export.ct2.SpecWriter`).

    Raises:
        ConfigError: a model CTranslate2 cannot hold (the message says why).
    """
    from dotformer.export.ct2 import id_vocabulary, tokenizer_vocabulary, transformer_spec

    config = loaded.config
    vocabularies = []
    for side, tokenizer, size in (
        ("source", loaded.src_tokenizer, config.src_vocab_size),
        ("target", loaded.tgt_tokenizer, config.tgt_vocab_size),
    ):
        pieces = tokenizer_vocabulary(tokenizer)
        if len(set(pieces)) != len(pieces):
            logger.warning(
                "the %s tokenizer shows some pieces alike; the CTranslate2 vocabulary names its ids t4, t5, ... "
                "instead (map ids with dotformer.export.ct2.ids_to_tokens)",
                side,
            )
            pieces = id_vocabulary(size)
        vocabularies.append(pieces)
    from dotformer.decoding.quantization import require_float_weights

    require_float_weights(loaded.model, "export to CTranslate2")
    if config.arch == "decoder-only":  # a language model: CTranslate2's decoder-only spec (ctranslate2.Generator)
        from dotformer.export.ct2_lm import language_model_spec

        spec = language_model_spec(loaded.model, vocabularies[1], suppress_specials)
    else:
        spec = transformer_spec(loaded.model, *vocabularies, suppress_specials=suppress_specials)
    spec.optimize(quantization=quantization)
    spec.save(str(directory))


def write_hf(loaded: LoadedCheckpoint, directory: Path) -> None:
    """A Hugging Face model directory of the checkpoint's family in ``directory`` (which exists and is empty), with
    its tokenizer as ``tokenizer.json`` and ``tokenizer_config.json`` (:mod:`dotformer.export.hf_tokenizer`):

    * a language model: a causal LM in GPT-2's layout, or the Llama family's for the modern block
      (:mod:`dotformer.export.hf_lm`), for ``AutoModelForCausalLM``, with its ``generation_config.json``;
    * an encoder: a ``BertModel`` (:mod:`dotformer.export.hf_encoder`), for ``AutoModel``;
    * an encoder-decoder: a ``MarianMTModel`` (:mod:`dotformer.export.marian`; its tokenizers stay dotformer's).

    Raises:
        ConfigError: a model that fits no HF layout (one line naming the field), or a tokenizer without a
            tokenizer.json form.
    """
    from dotformer.decoding.quantization import require_float_weights
    from dotformer.export.hf_tokenizer import hf_vocabulary

    model, config = loaded.model, loaded.config
    require_float_weights(model, "export to HF")
    if config.arch == "encoder-decoder":
        from dotformer.export.marian import save_marian

        save_marian(model, directory)
    elif config.arch == "decoder-only":
        from dotformer.export.hf_lm import lm_layout, write_causal_lm

        lm_layout(config)  # refused before the tokenizer is looked at
        assert model.tgt_embed is not None
        vocabulary = hf_vocabulary(
            loaded.tgt_tokenizer, model.tgt_embed.token.weight.detach(), "continuation", loaded.info
        )
        write_causal_lm(model, vocabulary, directory)
    else:
        from dotformer.export.hf_encoder import bert_problem, write_bert

        problem = bert_problem(config)
        if problem is not None:
            raise ConfigError(problem)
        assert model.src_embed is not None
        vocabulary = hf_vocabulary(loaded.src_tokenizer, model.src_embed.token.weight.detach(), "encoder", loaded.info)
        write_bert(model, vocabulary, directory)
