"""Import a local Hugging Face Marian directory into a dotformer encoder-decoder checkpoint.

The directory is what ``MarianMTModel.save_pretrained`` and ``MarianTokenizer.save_pretrained`` write:
``config.json``, ``model.safetensors`` (a ``pytorch_model.bin`` is refused: it is a pickle), ``source.spm``,
``target.spm`` and ``vocab.json`` (plus ``target_vocab.json`` when the vocabularies are separate).

What changes on the way, and why the function stays the same:

* Ids. dotformer's ids 0..3 are ``<pad> <s> </s> <unk>``; Marian's come from vocab.json (typically ``</s>`` 0,
  ``<unk>`` 1, ``<pad>`` last) and its decoder starts from ``decoder_start_token_id``. The import reorders the
  embedding rows (and the generator's rows and bias): dotformer's BOS row is Marian's decoder-start row, EOS and UNK
  are Marian's ``</s>`` and ``<unk>``, the other pieces follow in Marian's order. OPUS-MT models start the decoder
  with their pad token: that row becomes dotformer's BOS (the one token that starts the decoder), and dotformer's PAD
  gets a row of its own that is no copy of a real output: zeros, with the generator bias
  :data:`~dotformer.export.params.SUPPRESSED_LOGIT` (probability 0), so that the softmax counts Marian's pad logit
  once, as HF's does: the log-probabilities are HF's, not lower by log(1 + p_pad). A model whose PAD differs from
  its decoder start (dotformer's own export) keeps its PAD row. dotformer never generates PAD or BOS, as the OPUS-MT
  generation configs forbid their pad (``bad_words_ids``).
* Activation. HF's ``swish`` (OPUS-MT's) and ``silu`` are one function, dotformer's ``"silu"``.
* The D axis. HF's sinusoids put all sines first, dotformer interleaves them; the import permutes every matrix that
  reads or writes the residual stream (:func:`dotformer.export.marian.sinusoid_permutation`, inverted), so dotformer's
  own table gives Marian's positions. LayerNorm does not care about the order of its dimensions.
* Tokenizers. Each side's sentencepiece model becomes a Hugging Face ``tokenizers`` Unigram model over dotformer's
  ids (the pieces' scores, the spm normaliser's precompiled character map, its whitespace rules), saved with the
  checkpoint (:class:`dotformer.data.tokenize.pretrained.HFFileTokenizer`); it segments as ``MarianTokenizer`` does
  (tested).

Refused with one line (:class:`~dotformer.errors.ConfigError` / :class:`~dotformer.errors.CheckpointError`): an
activation other than ReLU, GELU and SiLU/swish, different encoder/decoder head counts or FFN widths, a
vocabulary that does not cover the embedding rows, a vocabulary whose ``<s>`` is not the decoder start, tensors
left over. A model written by ``dotformer export --to marian`` (ids 0..3 = ``<pad> <s> </s> <unk>``, ``<s>`` the
decoder start) comes back with its own ids; its directory has no ``vocab.json`` or ``.spm`` files but the
checkpoint's own ``tokenizer_src.json`` and ``tokenizer_tgt.json``, which the import reads instead.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import Tensor

from dotformer.checkpoint import save_checkpoint
from dotformer.checkpoint.format import SRC_TOKENIZER_FILE, TGT_TOKENIZER_FILE, load_tokenizer_file
from dotformer.config import ModelConfig
from dotformer.data.tokenize.pretrained import HFFileTokenizer
from dotformer.data.tokenize.tokenizers import SPECIAL_TOKENS, UNK_ID, Tokenizer
from dotformer.errors import CheckpointError, ConfigError, MissingDataError
from dotformer.export.marian import MARIAN_LAYER_NORM_EPS, MARIAN_NAMES, sinusoid_permutation
from dotformer.export.outdir import check_output_dir, fresh_output_dir
from dotformer.export.params import SUPPRESSED_LOGIT
from dotformer.imports.common import (
    Copier,
    TensorReader,
    TensorSource,
    read_hf_config,
    read_json_file,
    read_safetensors,
)
from dotformer.model import Transformer

logger = logging.getLogger(__name__)

# HF name -> dotformer's (HF "gelu" is the exact erf GELU; "swish", OPUS-MT's name, is SiLU)
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "silu": "silu", "swish": "silu"}
UNSEEN_PIECE_PENALTY = 100.0  # score below the spm's lowest for vocabulary pieces this side's spm never produces


class MarianSide:
    """One side's vocabulary: Marian's ids in dotformer's order.

    Attributes:
        rows: (V_ours,) LongTensor: dotformer id i is Marian id ``rows[i]``; ``rows[PAD_ID]`` is ``marian_size``
            (a row of its own, :func:`_rows`) when Marian's pad is its decoder start.
        marian_size: V_marian, the number of Marian's ids (its embedding rows).
        pieces: dotformer id -> piece string (the four specials first).
    """

    def __init__(self, vocab: dict[str, int], size: int, pad: int, start: int, eos: int, where: Path) -> None:
        self.marian_size = size  # V_marian, the rows of Marian's tables
        ids = sorted(vocab.values())
        if ids != list(range(size)):
            raise CheckpointError(
                f"{where}: the vocabulary's ids must be 0..{size - 1} (the embedding rows); it has {len(ids)} ids "
                f"from {ids[0] if ids else None} to {ids[-1] if ids else None}"
            )
        piece_of = {index: piece for piece, index in vocab.items()}
        if "<unk>" not in vocab:
            raise CheckpointError(f"{where}: the vocabulary has no <unk>")
        if "<s>" in vocab and vocab["<s>"] != start:
            raise ConfigError(
                f"{where}: the vocabulary has its own <s> (id {vocab['<s>']}, not the decoder start {start}), which "
                f"dotformer reserves for the decoder start"
            )
        unk = vocab["<unk>"]
        if len({pad, eos, unk}) != 3:
            raise ConfigError(f"{where}: pad ({pad}), eos ({eos}) and <unk> ({unk}) must be three different ids")
        specials = {pad, eos, unk} | ({start} if "<s>" in vocab else set())  # <s>: a model dotformer exported
        own_pad = size if pad == start else pad  # pad as decoder start: BOS takes its row, PAD one of its own
        order = [own_pad, start, eos, unk, *(i for i in range(size) if i not in specials)]
        self.rows = torch.tensor(order, dtype=torch.int64)
        self.pieces = [*SPECIAL_TOKENS, *(piece_of[i] for i in order[len(SPECIAL_TOKENS) :])]

    @property
    def size(self) -> int:
        """V_ours, dotformer's vocabulary size for this side."""
        return len(self.pieces)


def spm_tokenizer(spm_path: Path, pieces: list[str]) -> Any:
    """A ``tokenizers.Tokenizer`` (Unigram) over ``pieces`` (dotformer's ids) that segments as the sentencepiece
    model at ``spm_path`` does.

    Raises:
        MissingDataError: sentencepiece or protobuf (to read the model file) is not installed, or the file is missing.
        CheckpointError: the file is not a sentencepiece Unigram model.
    """
    try:
        from sentencepiece import sentencepiece_model_pb2
    except ImportError:
        raise MissingDataError(
            'reading Marian .spm files needs sentencepiece and protobuf: pip install "dotformer[bench]"'
        ) from None
    from tokenizers import Tokenizer, models

    if not spm_path.is_file():
        raise MissingDataError(f"{spm_path} is missing (the Marian directory's sentencepiece model)")
    proto = sentencepiece_model_pb2.ModelProto()
    try:
        proto.ParseFromString(spm_path.read_bytes())
    except Exception as exc:  # protobuf's DecodeError
        raise CheckpointError(f"{spm_path} is not a sentencepiece model ({exc})") from None
    if proto.trainer_spec.model_type != sentencepiece_model_pb2.TrainerSpec.UNIGRAM:
        raise CheckpointError(f"{spm_path}: only sentencepiece Unigram models are read (Marian's kind)")
    if proto.trainer_spec.byte_fallback:
        raise CheckpointError(f"{spm_path}: sentencepiece byte fallback is not supported")
    normal = (sentencepiece_model_pb2.ModelProto.SentencePiece.NORMAL,)
    scores = {p.piece: p.score for p in proto.pieces if p.type in normal}
    if not scores:
        raise CheckpointError(f"{spm_path} has no pieces")
    floor = min(scores.values()) - UNSEEN_PIECE_PENALTY
    vocab = [(piece, scores.get(piece, floor)) for piece in pieces]
    vocab[: len(SPECIAL_TOKENS)] = [(token, floor) for token in SPECIAL_TOKENS]
    tokenizer = Tokenizer(models.Unigram(vocab, unk_id=UNK_ID, byte_fallback=False))
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))  # never produced from text (encode_special_tokens is set)
    _set_spm_normalizer(tokenizer, proto.normalizer_spec)
    return tokenizer


def _set_spm_normalizer(tokenizer: Any, spec: Any) -> None:
    """Give ``tokenizer`` the normaliser, pre-tokenizer and decoder of a sentencepiece ``normalizer_spec``: its
    precompiled character map, whitespace rules and dummy prefix."""
    from tokenizers import Regex, decoders, normalizers, pre_tokenizers

    steps = []
    if spec.precompiled_charsmap:
        steps.append(normalizers.Precompiled(spec.precompiled_charsmap))
    if spec.remove_extra_whitespaces:
        steps += [normalizers.Replace(Regex(r"\A +| +\z"), ""), normalizers.Replace(Regex(" {2,}"), " ")]
    if spec.escape_whitespaces:
        steps.append(normalizers.Replace(" ", "▁"))
    if spec.add_dummy_prefix:
        steps.append(normalizers.Replace(Regex(r"\A▁"), "▁▁"))  # spm adds the prefix even before a leading space
    tokenizer.normalizer = normalizers.Sequence(steps)
    if spec.add_dummy_prefix:
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=False)
        tokenizer.decoder = decoders.Sequence(
            [decoders.Replace("▁", " "), decoders.Fuse(), decoders.Strip(content=" ", left=1)]
        )
    else:
        tokenizer.decoder = decoders.Replace("▁", " ")


def _check_config(hf: dict[str, Any], where: Path) -> None:
    if hf.get("model_type") != "marian":
        raise ConfigError(f"{where}: model_type is {hf.get('model_type')!r}, not 'marian'")
    activation = hf.get("activation_function", "gelu")
    if activation not in ACTIVATIONS:
        raise ConfigError(
            f"{where}: activation_function={activation!r}; dotformer's feed-forward has {', '.join(ACTIVATIONS)} only"
        )
    for ours, (a, b) in {
        "num_heads": ("encoder_attention_heads", "decoder_attention_heads"),
        "d_ff": ("encoder_ffn_dim", "decoder_ffn_dim"),
    }.items():
        if hf.get(a) != hf.get(b):
            raise ConfigError(f"{where}: {a}={hf.get(a)} != {b}={hf.get(b)}; dotformer has one {ours} for both stacks")


def import_marian(directory: str | Path, output: str | Path) -> Path:
    """Write the Marian model of ``directory`` as a dotformer checkpoint at ``output`` (absent or empty).

    Args:
        directory: a local Hugging Face Marian directory (see the module docstring).
        output: the checkpoint directory to create.

    Returns:
        ``output``; ``dotformer translate --checkpoint OUTPUT`` decodes with it.

    Raises:
        ConfigError: the model cannot be held (see the module docstring), or ``output`` is not empty.
        CheckpointError: a file is missing or damaged, only a pickle holds the weights, or tensors do not fit.
        MissingDataError: sentencepiece is not installed.
    """

    directory, output = Path(directory), check_output_dir(output)
    model, src_tokenizer, tgt_tokenizer = read_marian(directory)
    own = isinstance(src_tokenizer, Tokenizer)  # a dotformer export: its own tokenizers came back
    origin = {"format": "dotformer-marian-export" if own else "hf-marian", "path": str(directory.resolve())}
    # two tokenizers (source.spm and target.spm segment differently over one id space; a dotformer export's two
    # files): a fine-tune (train --init-from) keeps both rather than one for both sides
    info: dict[str, Any] = {"task": "translation", "imported_from": origin, "data": {"shared_vocab": False}}
    src = src_tokenizer if own else HFFileTokenizer(src_tokenizer, str(directory / "source.spm"))
    tgt = tgt_tokenizer if own else HFFileTokenizer(tgt_tokenizer, str(directory / "target.spm"))
    with fresh_output_dir(output) as tmp:
        save_checkpoint(tmp, model, src, tgt, info)
    return output


def read_marian(directory: Path) -> tuple[Transformer, Any, Any]:
    """The dotformer model (eval mode) and the source/target ``tokenizers.Tokenizer`` of a Marian directory.

    Raises:
        as :func:`import_marian`.
    """

    hf = read_hf_config(directory)
    _check_config(hf, directory / "config.json")
    own = dotformer_export_tokenizers(directory, *_vocabulary_sizes(hf))  # a dotformer export's own tokenizers
    src_side, tgt_side, separate = _vocabularies(directory, hf, own is not None)
    _warn_other_bad_words(directory, hf)
    source = TensorSource(read_safetensors(directory), directory, prefixes=("model.", ""))
    tables = _tables(source, tgt_side, directory)
    share = not separate and torch.equal(tables.src, tables.tgt)
    model = Transformer(_model_config(hf, src_side, tgt_side, share, tables)).eval()
    inv = torch.argsort(sinusoid_permutation(model.config.d_model))  # dotformer dimension j is HF's dimension inv[j]
    reader = MarianReader(MARIAN_NAMES, source, Copier(model), inv)
    reader.copy_embeddings(model, tables, src_side, tgt_side)
    reader.copy_stacks(model)
    reader.copier.check_all_filled()
    source.check_all_used(ignore=lambda name: name.endswith("embed_positions.weight"))  # HF rebuilds them on load
    if own is not None:
        return model, *own
    src_tokenizer = spm_tokenizer(directory / "source.spm", src_side.pieces)
    tgt_tokenizer = spm_tokenizer(directory / "target.spm", tgt_side.pieces)
    return model, src_tokenizer, tgt_tokenizer


def _warn_other_bad_words(directory: Path, hf: dict[str, Any]) -> None:
    """Log a warning when the generation config forbids tokens other than the pad and the decoder start (OPUS-MT's
    ``bad_words_ids`` forbid the pad, which is dotformer's BOS here): dotformer's search forbids PAD and BOS only."""
    file = directory / "generation_config.json"
    generation = read_json_file(file) if file.is_file() else hf
    banned = generation.get("bad_words_ids") or [] if isinstance(generation, dict) else []
    allowed = {hf.get("pad_token_id"), hf.get("decoder_start_token_id")}
    others = sorted({int(ids[0]) for ids in banned if isinstance(ids, list) and len(ids) == 1} - allowed)
    longer = [ids for ids in banned if not (isinstance(ids, list) and len(ids) == 1)]
    if others or longer:
        logger.warning(
            "%s: bad_words_ids forbids %s; dotformer's search forbids only PAD and BOS, so these stay possible",
            file if file.is_file() else directory / "config.json",
            ", ".join([*(str(i) for i in others), *(str(ids) for ids in longer)]),
        )


def _vocabulary_sizes(hf: dict[str, Any]) -> tuple[int, int]:
    """V_src and V_tgt of a Marian ``config.json`` (one shared size unless ``decoder_vocab_size`` says otherwise)."""
    V_src = int(hf["vocab_size"])
    return V_src, int(hf.get("decoder_vocab_size") or V_src)


def _vocabularies(directory: Path, hf: dict[str, Any], own: bool) -> tuple[MarianSide, MarianSide, bool]:
    """Both sides' vocabularies in dotformer's order, and whether they are separate (``target_vocab.json``); with
    ``own`` (a dotformer export) the ids are dotformer's and each vocabulary is the identity."""
    V_src, V_tgt = _vocabulary_sizes(hf)
    pad, eos = int(hf["pad_token_id"]), int(hf["eos_token_id"])
    start = int(hf.get("decoder_start_token_id", pad) if hf.get("decoder_start_token_id") is not None else pad)
    if own:  # dotformer's own ids: the vocabularies are the identity
        separate = V_src != V_tgt or not hf.get("share_encoder_decoder_embeddings", True)
        src_side = MarianSide(_id_vocabulary(V_src), V_src, pad, start, eos, directory / SRC_TOKENIZER_FILE)
        tgt_side = MarianSide(_id_vocabulary(V_tgt), V_tgt, pad, start, eos, directory / TGT_TOKENIZER_FILE)
        return src_side, tgt_side if separate else src_side, separate
    vocab_file, target_vocab_file = directory / "vocab.json", directory / "target_vocab.json"
    vocab = read_json_file(vocab_file)
    separate = not hf.get("share_encoder_decoder_embeddings", True) and target_vocab_file.is_file()
    src_side = MarianSide(vocab, V_src, pad, start, eos, vocab_file)
    tgt_vocab = read_json_file(target_vocab_file) if separate else vocab
    tgt_side = MarianSide(tgt_vocab, V_tgt, pad, start, eos, target_vocab_file if separate else vocab_file)
    return src_side, tgt_side, separate


class MarianTables(NamedTuple):
    """The tables outside the layers: token embeddings and generator (V_marian, D) in Marian's id order, and the
    generator's bias (V_ours,) in dotformer's (:data:`~dotformer.export.params.SUPPRESSED_LOGIT` for an own PAD)."""

    src: Tensor
    tgt: Tensor
    generator: Tensor
    bias: Tensor


def _tables(source: TensorSource, tgt_side: MarianSide, directory: Path) -> MarianTables:
    """The embeddings (``shared`` when a side has none of its own), ``lm_head`` (the decoder's embeddings when
    absent) and ``final_logits_bias`` (zeros when absent).

    Raises:
        CheckpointError: no token embeddings.
    """

    names = MARIAN_NAMES
    shared = source.find("shared.weight")
    src, tgt = (source.find(names.embeddings[side] + ".weight") for side in ("src", "tgt"))
    src = src if src is not None else shared
    tgt = tgt if tgt is not None else shared
    if src is None or tgt is None:
        raise CheckpointError(f"{directory}: the weights have no token embeddings (model.shared.weight)")
    generator = source.find(f"{names.generator}.weight")
    logits_bias = source.find("final_logits_bias")
    bias = logits_bias.reshape(-1) if logits_bias is not None else torch.zeros(tgt_side.marian_size)
    bias = torch.cat([bias, bias.new_full((1,), SUPPRESSED_LOGIT)])  # (V_marian + 1,): the own PAD row's, last
    return MarianTables(src, tgt, generator if generator is not None else tgt, bias[tgt_side.rows])


def _model_config(
    hf: dict[str, Any], src_side: MarianSide, tgt_side: MarianSide, share: bool, tables: MarianTables
) -> ModelConfig:
    """The dotformer config of a Marian ``config.json``: post-LN, sinusoidal, Marian's fixed epsilon, biases."""

    return ModelConfig(
        src_vocab_size=src_side.size,
        tgt_vocab_size=tgt_side.size,
        d_model=int(hf["d_model"]),
        num_heads=int(hf["encoder_attention_heads"]),
        d_ff=int(hf["encoder_ffn_dim"]),
        num_encoder_layers=int(hf["encoder_layers"]),
        num_decoder_layers=int(hf["decoder_layers"]),
        dropout=float(hf.get("dropout", 0.1)),
        attention_dropout=float(hf.get("attention_dropout", 0.0)),
        activation_dropout=float(hf.get("activation_dropout", 0.0)),
        activation=ACTIVATIONS[hf.get("activation_function", "gelu")],  # type: ignore[arg-type]
        norm_first=False,
        layer_norm_eps=MARIAN_LAYER_NORM_EPS,
        bias=True,
        positional="sinusoidal",
        max_len=int(hf.get("max_position_embeddings", 512)),
        share_embeddings=share,
        tie_output=torch.equal(tables.generator, tables.tgt),
        pad_id=0,
        arch="encoder-decoder",
        scale_embeddings=bool(hf.get("scale_embedding", False)),
        generator_bias=bool(tables.bias.ne(0).any()),
    )


class MarianReader(TensorReader):
    """Copies a Marian checkpoint into dotformer: the layers by :data:`~dotformer.export.marian.MARIAN_NAMES` with
    the D axis permuted back; the tables' rows in dotformer's id order."""

    def copy_embeddings(
        self, model: Transformer, tables: MarianTables, src_side: MarianSide, tgt_side: MarianSide
    ) -> None:
        """Token embeddings (the target's unless shared), the generator (unless tied) and its bias.

        Raises:
            CheckpointError: a table's rows are not the vocabulary's size.
        """
        assert model.src_embed is not None and model.tgt_embed is not None
        inv, copy = self.perm, self.copier.copy
        copy(model.src_embed.token.weight, _rows(tables.src, src_side, "embeddings")[:, inv], "src embed")
        if not model.config.share_embeddings:
            copy(model.tgt_embed.token.weight, _rows(tables.tgt, tgt_side, "decoder embeddings")[:, inv], "tgt")
        if not model.config.tie_output:
            copy(model.generator.weight, _rows(tables.generator, tgt_side, "lm_head")[:, inv], "lm_head")
        if model.generator.bias is not None:
            copy(model.generator.bias, tables.bias, "final_logits_bias")


def dotformer_export_tokenizers(directory: Path, src_size: int, tgt_size: int) -> tuple[Any, Any] | None:
    """The tokenizers of a directory written by ``dotformer export --to marian`` (no ``vocab.json``, but the
    checkpoint's ``tokenizer_src.json`` and ``tokenizer_tgt.json``, over dotformer's own ids), or None for another
    Marian directory.

    Raises:
        CheckpointError: a tokenizer file is damaged, or its vocabulary size is not the model's.
    """

    files = (directory / SRC_TOKENIZER_FILE, directory / TGT_TOKENIZER_FILE)
    if (directory / "vocab.json").is_file() or not all(file.is_file() for file in files):
        return None
    tokenizers = tuple(load_tokenizer_file(file) for file in files)
    for file, tokenizer, size in zip(files, tokenizers, (src_size, tgt_size), strict=True):
        if tokenizer.vocab_size != size:
            raise CheckpointError(f"{file} has {tokenizer.vocab_size} tokens; config.json says {size}")
    return tokenizers[0], tokenizers[1]


def _id_vocabulary(size: int) -> dict[str, int]:
    """dotformer's ids as a Marian vocabulary: the four specials, then one name per id."""
    return {
        piece: i for i, piece in enumerate([*SPECIAL_TOKENS, *(f"<id{i}>" for i in range(len(SPECIAL_TOKENS), size))])
    }


def _rows(table: Tensor, side: MarianSide, name: str) -> Tensor:
    """(V_marian, D) -> (V_ours, D): the rows in dotformer's id order (zeros for an own PAD row)."""
    if table.size(0) != side.marian_size:
        raise CheckpointError(f"the {name} have {table.size(0)} rows, config.json says {side.marian_size}")
    return torch.cat([table, table.new_zeros(1, table.size(1))])[side.rows]  # row V_marian: an own PAD's zeros
