"""Import a local Hugging Face Marian directory into a dotformer encoder-decoder checkpoint.

The directory is what ``MarianMTModel.save_pretrained`` and ``MarianTokenizer.save_pretrained`` write:
``config.json``, ``model.safetensors`` (a ``pytorch_model.bin`` is refused: it is a pickle), ``source.spm``,
``target.spm`` and ``vocab.json`` (plus ``target_vocab.json`` when the vocabularies are separate).

What changes on the way, and why the function stays the same:

* Ids. dotformer's ids 0..3 are ``<pad> <s> </s> <unk>``; Marian's come from vocab.json (typically ``</s>`` 0,
  ``<unk>`` 1, ``<pad>`` last) and its decoder starts from ``decoder_start_token_id`` (the PAD token). The import
  reorders the embedding rows (and the generator's rows and bias): dotformer's PAD and BOS rows are Marian's PAD
  and decoder-start rows, EOS and UNK are Marian's ``</s>`` and ``<unk>``, the other pieces follow in Marian's order.
  dotformer never generates PAD or BOS, as Marian's ``generate`` never generates PAD.
* The D axis. HF's sinusoids put all sines first, dotformer interleaves them; the import permutes every matrix that
  reads or writes the residual stream (:func:`dotformer.export.marian.sinusoid_permutation`, inverted), so dotformer's
  own table gives Marian's positions. LayerNorm does not care about the order of its dimensions.
* Tokenizers. Each side's sentencepiece model becomes a Hugging Face ``tokenizers`` Unigram model over dotformer's
  ids (the pieces' scores, the spm normaliser's precompiled character map, its whitespace rules), saved with the
  checkpoint (:class:`dotformer.data.pretrained.HFFileTokenizer`); it segments as ``MarianTokenizer`` does (tested).

Refused with one line (:class:`~dotformer.errors.ConfigError` / :class:`~dotformer.errors.CheckpointError`): an
activation other than ReLU/GELU (OPUS-MT's ``swish``), different encoder/decoder head counts or FFN widths, a
vocabulary that does not cover the embedding rows, a vocabulary whose ``<s>`` is not the decoder start, tensors
left over. A model written by ``dotformer export --to marian`` (ids 0..3 = ``<pad> <s> </s> <unk>``, ``<s>`` the
decoder start) comes back with its own ids; its directory has no ``vocab.json`` or ``.spm`` files but the
checkpoint's own ``tokenizer_src.json`` and ``tokenizer_tgt.json``, which the import reads instead.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from dotformer.checkpoint.format import TGT_TOKENIZER_FILE
from dotformer.config import ModelConfig
from dotformer.data.tokenizers import SPECIAL_TOKENS, UNK_ID
from dotformer.errors import CheckpointError, ConfigError, MissingDataError
from dotformer.imports.common import Copier, TensorSource, read_hf_config, read_json_file, read_safetensors
from dotformer.model import Transformer

logger = logging.getLogger(__name__)

ACTIVATIONS = {"relu": "relu", "gelu": "gelu"}  # HF name -> dotformer's (HF "gelu" is the exact erf GELU)
UNSEEN_PIECE_PENALTY = 100.0  # score below the spm's lowest for vocabulary pieces this side's spm never produces


class MarianSide:
    """One side's vocabulary: Marian's ids in dotformer's order.

    Attributes:
        rows: (V_ours,) LongTensor: dotformer id i is Marian id ``rows[i]``.
        pieces: dotformer id -> piece string (the four specials first).
    """

    def __init__(self, vocab: dict[str, int], size: int, pad: int, start: int, eos: int, where: Path) -> None:
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
        order = [pad, start, eos, unk, *(i for i in range(size) if i not in specials)]
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
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

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
    spec = proto.normalizer_spec
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
    return tokenizer


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
    from dotformer.checkpoint import save_checkpoint
    from dotformer.data.pretrained import HFFileTokenizer
    from dotformer.data.tokenizers import Tokenizer
    from dotformer.export.outdir import check_output_dir, fresh_output_dir

    directory, output = Path(directory), check_output_dir(output)
    model, src_tokenizer, tgt_tokenizer = read_marian(directory)
    own = isinstance(src_tokenizer, Tokenizer)  # a dotformer export: its own tokenizers came back
    origin = {"format": "dotformer-marian-export" if own else "hf-marian", "path": str(directory.resolve())}
    info = {"task": "translation", "imported_from": origin}
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
    from dotformer.export.marian import MARIAN_LAYER_NORM_EPS, sinusoid_permutation

    hf = read_hf_config(directory)
    where = directory / "config.json"
    _check_config(hf, where)
    D = int(hf["d_model"])
    V_src = int(hf["vocab_size"])
    V_tgt = int(hf.get("decoder_vocab_size") or V_src)
    pad, eos = int(hf["pad_token_id"]), int(hf["eos_token_id"])
    start = int(hf.get("decoder_start_token_id", pad) if hf.get("decoder_start_token_id") is not None else pad)
    own = dotformer_export_tokenizers(directory, V_src, V_tgt)
    target_vocab_file = directory / "target_vocab.json"
    if own is None:
        vocab = read_json_file(directory / "vocab.json")
        separate = not hf.get("share_encoder_decoder_embeddings", True) and target_vocab_file.is_file()
    else:  # dotformer's own ids: the vocabularies are the identity
        vocab = _id_vocabulary(V_src)
        separate = V_src != V_tgt or not hf.get("share_encoder_decoder_embeddings", True)
        target_vocab_file = directory / TGT_TOKENIZER_FILE
    src_side = MarianSide(vocab, V_src, pad, start, eos, directory / "vocab.json")
    tgt_vocab = (read_json_file(target_vocab_file) if own is None else _id_vocabulary(V_tgt)) if separate else vocab
    tgt_side = MarianSide(
        tgt_vocab, V_tgt, pad, start, eos, target_vocab_file if separate else directory / "vocab.json"
    )

    source = TensorSource(read_safetensors(directory), directory, prefixes=("model.", ""))
    shared = source.find("shared.weight")
    enc_emb = source.find("encoder.embed_tokens.weight")
    dec_emb = source.find("decoder.embed_tokens.weight")
    enc_emb = enc_emb if enc_emb is not None else shared
    dec_emb = dec_emb if dec_emb is not None else shared
    if enc_emb is None or dec_emb is None:
        raise CheckpointError(f"{directory}: the weights have no token embeddings (model.shared.weight)")
    lm_head = source.find("lm_head.weight")
    lm_head = lm_head if lm_head is not None else dec_emb
    logits_bias = source.find("final_logits_bias")
    bias = logits_bias.reshape(-1) if logits_bias is not None else torch.zeros(V_tgt)
    bias_ours = bias[tgt_side.rows]
    share = not separate and torch.equal(enc_emb, dec_emb)

    config = ModelConfig(
        src_vocab_size=src_side.size,
        tgt_vocab_size=tgt_side.size,
        d_model=D,
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
        tie_output=torch.equal(lm_head, dec_emb),
        pad_id=0,
        arch="encoder-decoder",
        scale_embeddings=bool(hf.get("scale_embedding", False)),
        generator_bias=bool(bias_ours.ne(0).any()),
    )
    model = Transformer(config).eval()
    assert model.src_embed is not None and model.tgt_embed is not None
    assert model.encoder is not None and model.decoder is not None
    inv = torch.argsort(sinusoid_permutation(D))  # dotformer dimension j is HF's dimension inv[j]
    copier = Copier(model)
    copier.copy(model.src_embed.token.weight, _rows(enc_emb, src_side, V_src, "embeddings")[:, inv], "src embed")
    if not share:
        copier.copy(model.tgt_embed.token.weight, _rows(dec_emb, tgt_side, V_tgt, "decoder embeddings")[:, inv], "tgt")
    if not config.tie_output:
        copier.copy(model.generator.weight, _rows(lm_head, tgt_side, V_tgt, "lm_head")[:, inv], "lm_head")
    if model.generator.bias is not None:
        copier.copy(model.generator.bias, bias_ours, "final_logits_bias")

    def linear(target: torch.nn.Linear, name: str, reads: bool) -> None:
        shape = tuple(target.weight.shape)
        weight, b = source.get(name + ".weight", shape), source.get(name + ".bias", (shape[0],))
        if reads:
            weight = weight[:, inv]
        else:
            weight, b = weight[inv], b[inv]
        copier.copy(target.weight, weight, name)
        assert target.bias is not None
        copier.copy(target.bias, b, name + ".bias")

    def norm(target: torch.nn.LayerNorm, name: str) -> None:
        copier.copy(target.weight, source.get(name + ".weight", (D,))[inv], name)
        copier.copy(target.bias, source.get(name + ".bias", (D,))[inv], name + ".bias")

    def attention(target: Any, name: str) -> None:
        for ours, theirs in (("W_q", "q_proj"), ("W_k", "k_proj"), ("W_v", "v_proj")):
            linear(getattr(target, ours), f"{name}.{theirs}", reads=True)
        linear(target.W_o, f"{name}.out_proj", reads=False)

    for i, layer in enumerate(model.encoder.layers):
        prefix = f"encoder.layers.{i}"
        attention(layer.self_attn, prefix + ".self_attn")
        norm(layer.res_attn.norm, prefix + ".self_attn_layer_norm")
        linear(layer.feed_forward.W_1, prefix + ".fc1", reads=True)
        linear(layer.feed_forward.W_2, prefix + ".fc2", reads=False)
        norm(layer.res_ff.norm, prefix + ".final_layer_norm")
    for i, layer in enumerate(model.decoder.layers):
        prefix = f"decoder.layers.{i}"
        assert layer.cross_attn is not None and layer.res_cross is not None
        attention(layer.self_attn, prefix + ".self_attn")
        norm(layer.res_self.norm, prefix + ".self_attn_layer_norm")
        attention(layer.cross_attn, prefix + ".encoder_attn")
        norm(layer.res_cross.norm, prefix + ".encoder_attn_layer_norm")
        linear(layer.feed_forward.W_1, prefix + ".fc1", reads=True)
        linear(layer.feed_forward.W_2, prefix + ".fc2", reads=False)
        norm(layer.res_ff.norm, prefix + ".final_layer_norm")
    copier.check_all_filled()
    source.check_all_used(ignore=lambda name: name.endswith("embed_positions.weight"))  # HF rebuilds them on load

    if own is not None:
        return model, *own
    src_tokenizer = spm_tokenizer(directory / "source.spm", src_side.pieces)
    tgt_tokenizer = spm_tokenizer(directory / "target.spm", tgt_side.pieces)
    return model, src_tokenizer, tgt_tokenizer


def dotformer_export_tokenizers(directory: Path, src_size: int, tgt_size: int) -> tuple[Any, Any] | None:
    """The tokenizers of a directory written by ``dotformer export --to marian`` (no ``vocab.json``, but the
    checkpoint's ``tokenizer_src.json`` and ``tokenizer_tgt.json``, over dotformer's own ids), or None for another
    Marian directory.

    Raises:
        CheckpointError: a tokenizer file is damaged, or its vocabulary size is not the model's.
    """
    from dotformer.checkpoint.format import SRC_TOKENIZER_FILE, load_tokenizer_file

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


def _rows(table: Tensor, side: MarianSide, size: int, name: str) -> Tensor:
    """(V_marian, D) -> (V_ours, D): the rows in dotformer's id order."""
    if table.size(0) != size:
        raise CheckpointError(f"the {name} have {table.size(0)} rows, config.json says {size}")
    return table[side.rows]
