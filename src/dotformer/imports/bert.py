"""Import a BERT-family encoder (a local ``BertModel`` directory) into a dotformer encoder-only checkpoint.

The directory holds ``config.json``, ``model.safetensors`` (a ``pytorch_model.bin`` is refused: it is a pickle) and
the WordPiece ``tokenizer.json``. BERT is the paper's post-LN encoder with three differences, each a named
:class:`~dotformer.config.ModelConfig` option or an exact rewrite:

* its token embeddings are not multiplied by √D (``scale_embeddings=False``) and its embedding sum goes through a
  LayerNorm (``embedding_norm=True``); positions are a learned table (``positional="learned"``);
* it adds a token-type (segment) embedding; dotformer reads one segment, so type 0's vector is added to every row
  of the positional table (exact for single-segment inputs, which is what dotformer feeds);
* its ids: dotformer's ids are BERT's shifted by 4 (:class:`dotformer.data.pretrained.HFFileTokenizer`), and rows
  0..3 (PAD, BOS, EOS, UNK) are BERT's ``[PAD]``, ``[CLS]``, ``[SEP]``, ``[UNK]`` rows, so ``[BOS] ids [EOS]`` is
  BERT's ``[CLS] ids [SEP]`` (:func:`bert_inputs`).

The encoder's memory is then BERT's ``last_hidden_state`` (tested). The pooler and any task head (``cls.*``) are
not part of it and are not imported (logged); the checkpoint's generator is tied to the embeddings and is no MLM head.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from dotformer.config import ModelConfig
from dotformer.data.tokenizers import BOS_ID, EOS_ID, NUM_SPECIAL, PAD_ID
from dotformer.errors import CheckpointError, ConfigError
from dotformer.imports.common import Copier, TensorSource, read_hf_config, read_safetensors
from dotformer.model import Transformer

logger = logging.getLogger(__name__)

BERT_TYPES = ("bert",)  # model_type values read (the BertModel layout)
NOT_IMPORTED = ("pooler.", "cls.", "embeddings.position_ids")  # not part of the last hidden state


def _special_id(tokenizer: Any, names: Sequence[str], where: Path) -> int:
    for name in names:
        index = tokenizer.token_to_id(name)
        if index is not None:
            return int(index)
    raise CheckpointError(f"{where}: the tokenizer has none of {', '.join(names)}")


def import_bert(directory: str | Path, output: str | Path) -> Path:
    """Write the BERT encoder of ``directory`` as a dotformer encoder-only checkpoint at ``output`` (absent or empty).

    Raises:
        ConfigError: not a BERT model, relative position embeddings, an activation other than GELU/ReLU, or a
            non-empty ``output``.
        CheckpointError: a file is missing or damaged, only a pickle holds the weights, or tensors do not fit.
    """
    from dotformer.checkpoint import save_checkpoint
    from dotformer.export.outdir import check_output_dir, fresh_output_dir

    directory, output = Path(directory), check_output_dir(output)
    model, tokenizer = read_bert(directory)
    info = {"task": "encoder", "imported_from": {"format": "hf-bert", "path": str(directory.resolve())}}
    with fresh_output_dir(output) as tmp:
        save_checkpoint(tmp, model, tokenizer, tokenizer, info)
    return output


def read_bert(directory: Path) -> tuple[Transformer, Any]:
    """The encoder-only dotformer model (eval mode) and its :class:`HFFileTokenizer` from a BERT directory.

    Raises:
        as :func:`import_bert`.
    """
    from dotformer.data.pretrained import HFFileTokenizer, read_tokenizer_file

    hf = read_hf_config(directory)
    where = directory / "config.json"
    if hf.get("model_type") not in BERT_TYPES:
        raise ConfigError(f"{where}: model_type is {hf.get('model_type')!r}, not one of {', '.join(BERT_TYPES)}")
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise ConfigError(f"{where}: position_embedding_type={hf['position_embedding_type']!r}; only 'absolute'")
    activation = hf.get("hidden_act", "gelu")
    if activation not in ("gelu", "relu"):
        raise ConfigError(f"{where}: hidden_act={activation!r}; dotformer's feed-forward has relu and gelu only")
    tokenizer_file = directory / "tokenizer.json"
    tokenizer = read_tokenizer_file(tokenizer_file)
    if not isinstance(tokenizer, HFFileTokenizer) or tokenizer.offset != NUM_SPECIAL:
        raise CheckpointError(f"{tokenizer_file}: expected a BERT tokenizer.json ([PAD] first, not dotformer's ids)")
    from tokenizers import Tokenizer as HFTokenizer

    hf_tokenizer = HFTokenizer.from_file(str(tokenizer_file))  # read_tokenizer_file has checked it
    V, D = int(hf["vocab_size"]), int(hf["hidden_size"])
    if tokenizer.vocab_size != V + NUM_SPECIAL:
        raise CheckpointError(f"{tokenizer_file} has {tokenizer.vocab_size - NUM_SPECIAL} tokens, config.json {V}")
    specials = [
        int(hf.get("pad_token_id") or 0),
        _special_id(hf_tokenizer, ("[CLS]", "<s>"), tokenizer_file),
        _special_id(hf_tokenizer, ("[SEP]", "</s>"), tokenizer_file),
        _special_id(hf_tokenizer, ("[UNK]", "<unk>"), tokenizer_file),
    ]
    rows = torch.tensor([*specials, *range(V)], dtype=torch.int64)  # dotformer id i is BERT id rows[i]

    config = ModelConfig(
        src_vocab_size=V + NUM_SPECIAL,
        tgt_vocab_size=V + NUM_SPECIAL,
        d_model=D,
        num_heads=int(hf["num_attention_heads"]),
        d_ff=int(hf["intermediate_size"]),
        num_encoder_layers=int(hf["num_hidden_layers"]),
        num_decoder_layers=0,
        dropout=float(hf.get("hidden_dropout_prob", 0.1)),
        attention_dropout=float(hf.get("attention_probs_dropout_prob", 0.1)),
        activation=activation,
        norm_first=False,
        layer_norm_eps=float(hf.get("layer_norm_eps", 1e-12)),
        positional="learned",
        max_len=int(hf.get("max_position_embeddings", 512)),
        tie_output=True,
        pad_id=PAD_ID,
        arch="encoder-only",
        scale_embeddings=False,
        embedding_norm=True,
    )
    source = TensorSource(read_safetensors(directory), directory, prefixes=("", "bert."))
    model = Transformer(config).eval()
    assert model.src_embed is not None and model.encoder is not None and model.src_embed.norm is not None
    copier = Copier(model)
    embed = model.src_embed
    words = source.get("embeddings.word_embeddings.weight", (V, D))
    copier.copy(embed.token.weight, words[rows], "embeddings.word_embeddings")
    positions = source.get("embeddings.position_embeddings.weight", (config.max_len, D))
    types = source.find("embeddings.token_type_embeddings.weight")
    segment = types[0] if types is not None else torch.zeros(D)  # (D,) type 0, the one segment dotformer reads
    copier.copy(embed.position.table.weight, positions + segment, "embeddings.position_embeddings + token_type[0]")
    _norm(copier, source, embed.norm, "embeddings.LayerNorm", D)
    for i, layer in enumerate(model.encoder.layers):
        prefix = f"encoder.layer.{i}"
        for ours, theirs in (("W_q", "query"), ("W_k", "key"), ("W_v", "value")):
            _linear(copier, source, getattr(layer.self_attn, ours), f"{prefix}.attention.self.{theirs}")
        _linear(copier, source, layer.self_attn.W_o, f"{prefix}.attention.output.dense")
        _norm(copier, source, layer.res_attn.norm, f"{prefix}.attention.output.LayerNorm", D)
        _linear(copier, source, layer.feed_forward.W_1, f"{prefix}.intermediate.dense")
        _linear(copier, source, layer.feed_forward.W_2, f"{prefix}.output.dense")
        _norm(copier, source, layer.res_ff.norm, f"{prefix}.output.LayerNorm", D)
    copier.check_all_filled()
    skipped = sorted(name for name in source.tensors if name not in source.used and _not_imported(name))
    if skipped:
        logger.info("not imported (not part of the last hidden state): %s", ", ".join(skipped))
    source.check_all_used(ignore=_not_imported)
    return model, tokenizer


def _not_imported(name: str) -> bool:
    bare = name.removeprefix("bert.")
    return bare.startswith(NOT_IMPORTED)


def _linear(copier: Copier, source: TensorSource, target: torch.nn.Linear, name: str) -> None:
    copier.copy(target.weight, source.get(name + ".weight", tuple(target.weight.shape)), name)
    if target.bias is None:
        raise ConfigError(f"{name}: dotformer layer without bias")
    copier.copy(target.bias, source.get(name + ".bias", (target.weight.size(0),)), name + ".bias")


def _norm(copier: Copier, source: TensorSource, target: torch.nn.LayerNorm, name: str, D: int) -> None:
    for part in ("weight", "bias"):
        tensor = source.find(f"{name}.{part}", f"{name}.{'gamma' if part == 'weight' else 'beta'}")
        if tensor is None:
            raise CheckpointError(f"{source.where}: the weights have no tensor {name}.{part}")
        if tuple(tensor.shape) != (D,):
            raise CheckpointError(f"{source.where}: {name}.{part} has shape {tuple(tensor.shape)}, expected ({D},)")
        copier.copy(getattr(target, part), tensor, f"{name}.{part}")


def bert_inputs(tokenizer: Any, texts: Sequence[str]) -> Tensor:
    """(B, S) int64: each text as ``[BOS] ids [EOS]`` (BERT's ``[CLS] ... [SEP]``), right-padded with PAD."""
    from dotformer.decoding.translate import pad_batch

    return pad_batch([[BOS_ID, *tokenizer.encode(text), EOS_ID] for text in texts])
