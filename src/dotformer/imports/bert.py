"""Import a BERT-family encoder (a local ``BertModel`` directory) into a dotformer encoder-only checkpoint.

The directory holds ``config.json``, ``model.safetensors`` (a ``pytorch_model.bin`` is refused: it is a pickle) and
the WordPiece ``tokenizer.json``. BERT is the paper's post-LN encoder with three differences, each a named
:class:`~dotformer.config.ModelConfig` option or an exact rewrite:

* its token embeddings are not multiplied by √D (``scale_embeddings=False``) and its embedding sum goes through a
  LayerNorm (``embedding_norm=True``); positions are a learned table (``positional="learned"``);
* it adds a token-type (segment) embedding; dotformer reads one segment, so type 0's vector is added to every row
  of the positional table (exact for single-segment inputs, which is what dotformer feeds);
* its ids: dotformer's ids are BERT's shifted by 4 (:class:`dotformer.data.tokenize.pretrained.HFFileTokenizer`), and
  rows 0..3 (PAD, BOS, EOS, UNK) are BERT's ``[PAD]``, ``[CLS]``, ``[SEP]``, ``[UNK]`` rows, so ``[BOS] ids [EOS]`` is
  BERT's ``[CLS] ids [SEP]`` (:func:`bert_inputs`).

The encoder's memory is then BERT's ``last_hidden_state`` (tested). The pooler and any task head (``cls.*``) are
not part of it and are not imported (logged); the checkpoint's generator is tied to the embeddings and is no MLM head.
A sentence-transformers directory's ``max_seq_length`` (``sentence_bert_config.json``) is kept in the checkpoint's
config.json: ``embed`` cuts texts to it, as sentence-transformers does. So are its modules' facts
(``modules.json``): the pooling of its ``Pooling`` module (``1_Pooling/config.json``: mean or CLS) and whether a
``Normalize`` module follows it, as ``info["sentence_embedding"] = {"pooling": "mean", "normalize": true}``: ``embed``
pools and normalises by them unless told otherwise, as sentence-transformers does.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from dotformer.checkpoint import save_checkpoint
from dotformer.config import ModelConfig
from dotformer.data.tokenize.pretrained import HFFileTokenizer
from dotformer.data.tokenize.tokenizer_files import read_tokenizer_file
from dotformer.data.tokenize.tokenizers import BOS_ID, EOS_ID, NUM_SPECIAL, PAD_ID
from dotformer.decoding.translate import pad_batch
from dotformer.errors import CheckpointError, ConfigError
from dotformer.export.hf_encoder import BERT_NAMES  # BertModel's names (the pooler and heads are not imported)
from dotformer.export.outdir import check_output_dir, fresh_output_dir
from dotformer.imports.common import Copier, TensorReader, TensorSource, read_hf_config, read_safetensors
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

    directory, output = Path(directory), check_output_dir(output)
    model, tokenizer = read_bert(directory)
    info = {"task": "encoder", "imported_from": {"format": "hf-bert", "path": str(directory.resolve())}}
    max_seq_length = sentence_transformers_length(directory, model.config.max_len)
    if max_seq_length is not None:  # what `embed` cuts texts to, as sentence-transformers does
        info["max_seq_length"] = max_seq_length
    modules = sentence_transformers_modules(directory)
    if modules is not None:  # the pooling and normalisation `embed` applies by default
        info["sentence_embedding"] = modules
    with fresh_output_dir(output) as tmp:
        save_checkpoint(tmp, model, tokenizer, tokenizer, info)
    return output


SENTENCE_CONFIG = "sentence_bert_config.json"  # a sentence-transformers model's settings: {"max_seq_length": 256, ...}


def sentence_transformers_length(directory: Path, max_len: int) -> int | None:
    """The ``max_seq_length`` of a sentence-transformers model directory (``sentence_bert_config.json``), or None.

    Raises:
        CheckpointError: the file is not JSON, or its length is not an integer in [2, ``max_len``].
    """
    import json

    path = directory / SENTENCE_CONFIG
    if not path.is_file():
        return None
    try:
        length = json.loads(path.read_text(encoding="utf-8")).get("max_seq_length")
    except (ValueError, AttributeError) as exc:
        raise CheckpointError(f"{path}: not a JSON object ({exc})") from None
    if length is None:
        return None
    if not isinstance(length, int) or isinstance(length, bool) or not 2 <= length <= max_len:
        raise CheckpointError(f"{path}: max_seq_length {length!r} is not an integer in [2, {max_len}] (positions)")
    return length


MODULES_FILE = "modules.json"  # a sentence-transformers model's modules, in order: [{"type": ..., "path": ...}, ...]
ST_MODULE = "sentence_transformers.models."  # the prefix of its module types
ST_POOLINGS = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls"}  # the poolings `embed` has


def sentence_transformers_modules(directory: Path) -> dict[str, Any] | None:
    """``{"pooling": "mean" | "cls", "normalize": bool}`` of a sentence-transformers model directory
    (``modules.json``, its ``Pooling`` module's ``config.json``), or None for a plain BERT directory.

    A pooling other than exactly one of mean and CLS (max, several concatenated), or a module ``embed`` does not run
    (``Dense``), is logged as a warning and that fact is not recorded (``embed`` then pools by its own default).

    Raises:
        CheckpointError: ``modules.json`` or the pooling config is not the JSON sentence-transformers writes.
    """
    import json

    path = directory / MODULES_FILE
    if not path.is_file():
        return None
    try:
        modules = json.loads(path.read_text(encoding="utf-8"))
        types = [(str(m["type"]).removeprefix(ST_MODULE), str(m.get("path", ""))) for m in modules]
    except (ValueError, TypeError, KeyError) as exc:
        raise CheckpointError(f"{path}: not a sentence-transformers modules list ({exc!r})") from None
    facts: dict[str, Any] = {"normalize": any(kind == "Normalize" for kind, _ in types)}
    unknown = [kind for kind, _ in types if kind not in ("Transformer", "Pooling", "Normalize")]
    if unknown:
        logger.warning("%s: embed does not run the module(s) %s; its vectors are the pooled encoder's", path,
                       ", ".join(unknown))  # fmt: skip
    for kind, where in types:
        if kind == "Pooling":
            pooling_path = directory / (where or "1_Pooling") / "config.json"
            try:
                config = json.loads(pooling_path.read_text(encoding="utf-8"))
                modes = [name for name, on in config.items() if name.startswith("pooling_mode_") and on is True]
            except (OSError, ValueError, AttributeError) as exc:
                raise CheckpointError(f"{pooling_path}: not a sentence-transformers pooling config ({exc})") from None
            if len(modes) == 1 and modes[0] in ST_POOLINGS:
                facts["pooling"] = ST_POOLINGS[modes[0]]
            else:
                logger.warning("%s: pooling %s is not one embed has (mean, cls); embed pools by its --pooling",
                               pooling_path, " + ".join(modes) or "none")  # fmt: skip
    return facts


TOKEN_TYPES = "embeddings.token_type_embeddings"  # BERT's segment vectors; dotformer reads segment 0 only


def read_bert(directory: Path) -> tuple[Transformer, Any]:
    """The encoder-only dotformer model (eval mode) and its :class:`HFFileTokenizer` from a BERT directory.

    Raises:
        as :func:`import_bert`.
    """
    hf = read_hf_config(directory)
    activation = _check_config(hf, directory / "config.json")
    tokenizer, rows = _vocabulary(directory, int(hf["vocab_size"]), int(hf.get("pad_token_id") or 0))
    config = _model_config(hf, activation)
    source = TensorSource(read_safetensors(directory), directory, prefixes=("", "bert."))
    model = Transformer(config).eval()
    reader = BertReader(BERT_NAMES, source, Copier(model))
    reader.copy_embeddings(model, rows)
    reader.copy_stacks(model)
    reader.copier.check_all_filled()
    skipped = sorted(name for name in source.tensors if name not in source.used and _not_imported(name))
    if skipped:
        logger.info("not imported (not part of the last hidden state): %s", ", ".join(skipped))
    source.check_all_used(ignore=_not_imported)
    return model, tokenizer


def _check_config(hf: dict[str, Any], where: Path) -> str:
    """The activation of a BERT ``config.json`` dotformer can hold.

    Raises:
        ConfigError: not a BERT model, relative position embeddings, an activation other than GELU/ReLU.
    """
    if hf.get("model_type") not in BERT_TYPES:
        raise ConfigError(f"{where}: model_type is {hf.get('model_type')!r}, not one of {', '.join(BERT_TYPES)}")
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise ConfigError(f"{where}: position_embedding_type={hf['position_embedding_type']!r}; only 'absolute'")
    activation = hf.get("hidden_act", "gelu")
    if activation not in ("gelu", "relu"):
        raise ConfigError(f"{where}: hidden_act={activation!r}; dotformer's feed-forward has relu and gelu only")
    return str(activation)


def _vocabulary(directory: Path, V: int, pad: int) -> tuple[Any, Tensor]:
    """The :class:`HFFileTokenizer` of ``tokenizer.json`` and (V + 4,) LongTensor: dotformer id i is BERT id
    ``rows[i]`` (PAD, BOS, EOS, UNK are BERT's [PAD], [CLS], [SEP], [UNK]; then BERT's ids in order).

    Raises:
        CheckpointError: not a BERT tokenizer.json, not of ``V`` tokens, or without [CLS], [SEP] or [UNK].
    """
    from tokenizers import Tokenizer as HFTokenizer

    tokenizer_file = directory / "tokenizer.json"
    tokenizer = read_tokenizer_file(tokenizer_file)
    if not isinstance(tokenizer, HFFileTokenizer) or tokenizer.offset != NUM_SPECIAL:
        raise CheckpointError(f"{tokenizer_file}: expected a BERT tokenizer.json ([PAD] first, not dotformer's ids)")
    hf_tokenizer = HFTokenizer.from_file(str(tokenizer_file))  # read_tokenizer_file has checked it
    if tokenizer.vocab_size != V + NUM_SPECIAL:
        raise CheckpointError(f"{tokenizer_file} has {tokenizer.vocab_size - NUM_SPECIAL} tokens, config.json {V}")
    specials = [
        pad,
        _special_id(hf_tokenizer, ("[CLS]", "<s>"), tokenizer_file),
        _special_id(hf_tokenizer, ("[SEP]", "</s>"), tokenizer_file),
        _special_id(hf_tokenizer, ("[UNK]", "<unk>"), tokenizer_file),
    ]
    return tokenizer, torch.tensor([*specials, *range(V)], dtype=torch.int64)


def _model_config(hf: dict[str, Any], activation: str) -> ModelConfig:
    """The encoder-only dotformer config of a BERT ``config.json``: post-LN, learned positions, no √D scaling, a
    LayerNorm on the embeddings, the generator tied to them."""
    V = int(hf["vocab_size"])
    return ModelConfig(
        src_vocab_size=V + NUM_SPECIAL,
        tgt_vocab_size=V + NUM_SPECIAL,
        d_model=int(hf["hidden_size"]),
        num_heads=int(hf["num_attention_heads"]),
        d_ff=int(hf["intermediate_size"]),
        num_encoder_layers=int(hf["num_hidden_layers"]),
        num_decoder_layers=0,
        dropout=float(hf.get("hidden_dropout_prob", 0.1)),
        attention_dropout=float(hf.get("attention_probs_dropout_prob", 0.1)),
        activation=activation,  # type: ignore[arg-type]
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


class BertReader(TensorReader):
    """Copies a BERT checkpoint into dotformer's encoder by :data:`BERT_NAMES` (LayerNorms may be TF's
    ``gamma``/``beta``)."""

    def copy_norm(self, ours: nn.LayerNorm, theirs: str) -> None:
        """``theirs.weight``/``.gamma`` and ``theirs.bias``/``.beta`` (D,).

        Raises:
            CheckpointError: missing, or of another shape.
        """
        D = ours.weight.size(0)
        for part, tf_part in (("weight", "gamma"), ("bias", "beta")):
            tensor = self.source.find(f"{theirs}.{part}", f"{theirs}.{tf_part}")
            if tensor is None:
                raise CheckpointError(f"{self.source.where}: the weights have no tensor {theirs}.{part}")
            if tuple(tensor.shape) != (D,):
                raise CheckpointError(
                    f"{self.source.where}: {theirs}.{part} has shape {tuple(tensor.shape)}, expected ({D},)"
                )
            self.copier.copy(getattr(ours, part), tensor, f"{theirs}.{part}")

    def copy_embeddings(self, model: Transformer, rows: Tensor) -> None:
        """Word embeddings (rows in dotformer's id order), positions + token type 0, the embedding LayerNorm."""
        embed = model.src_embed
        assert embed is not None and embed.norm is not None
        (V, D), names = embed.token.weight.shape, self.names
        words = self.source.get(names.embeddings["src"] + ".weight", (V - NUM_SPECIAL, D))
        self.copier.copy(embed.token.weight, words[rows], names.embeddings["src"])
        positions = self.source.get(names.positions["src"] + ".weight", (model.config.max_len, D))
        types = self.source.find(TOKEN_TYPES + ".weight")
        segment = types[0] if types is not None else torch.zeros(D)  # (D,) type 0, the one segment dotformer reads
        self.copier.copy(embed.position.table.weight, positions + segment, f"{names.positions['src']} + token_type[0]")
        self.copy_norm(embed.norm, names.embedding_norms["src"])


def _not_imported(name: str) -> bool:
    bare = name.removeprefix("bert.")
    return bare.startswith(NOT_IMPORTED)


def bert_inputs(tokenizer: Any, texts: Sequence[str]) -> Tensor:
    """(B, S) int64: each text as ``[BOS] ids [EOS]`` (BERT's ``[CLS] ... [SEP]``), right-padded with PAD."""

    return pad_batch([[BOS_ID, *tokenizer.encode(text), EOS_ID] for text in texts])
