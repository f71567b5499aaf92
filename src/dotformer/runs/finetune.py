"""Fine-tuning (``dotformer train --init-from CKPT``): a fresh run that starts from a checkpoint's weights.

The new run takes the checkpoint's tokenizers and model config (its vocabulary is what the weights were trained
on), a fresh optimizer, learning-rate schedule and data position, and its own data. Flags may change the dropout
rates; a flag asking for another model size or another tokenizer is refused with one line naming both sides. The
weights themselves are copied by :func:`dotformer.training.fit` (``init_from=``), which checks them again.

Data with symbols the checkpoint's vocabulary does not know is refused (:func:`check_known_symbols`), unless the user
asks to extend the vocabulary (``--extend-vocab``, :func:`extend_vocabulary`): char and symbol vocabularies grow by
the new symbols at the end (the old ids unchanged), and :func:`load_extended_weights` copies the checkpoint's tables
into the first rows of the larger ones.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from dotformer import checkpoint as ckpt
from dotformer.config import PRESETS, ModelConfig
from dotformer.data.config import DataConfig
from dotformer.data.tokenize.tokenizers import NUM_SPECIAL, UNK_ID, VocabularyTokenizer
from dotformer.errors import CheckpointError, DotformerError

TUNABLE_MODEL_FIELDS = ("dropout", "attention_dropout", "activation_dropout")  # flags may change these
SIZE_FIELDS = ("d_model", "num_heads", "d_ff", "num_encoder_layers", "num_decoder_layers")
TOKENIZER_FIELDS = ("src_tokenizer", "tgt_tokenizer", "vocab_size", "shared_vocab")  # taken from the checkpoint


class InitSource(NamedTuple):
    """What a fine-tuning run takes from its checkpoint.

    Attributes:
        path: the checkpoint directory (a run directory resolves to its best/, else last/).
        model_config: its ModelConfig with the dropout rates the flags asked for.
        preset: the checkpoint run's preset name (or None).
        data: the tokenizer fields of its DataConfig (kinds, vocabulary size, shared vocabulary).
        src_tokenizer, tgt_tokenizer: its tokenizers (one object when the vocabulary is shared).
        carried: facts of its config.json that the run's checkpoints keep (an imported language model's text rules,
            family and origin); None: none.
    """

    path: Path
    model_config: ModelConfig
    preset: str | None
    data: dict[str, Any]
    src_tokenizer: Any
    tgt_tokenizer: Any
    carried: dict[str, Any] | None = None


def asked(key: str, value: Any, where: str | None) -> str:
    """``d_ff = 352 (configs/classify-bible.toml [model])``: a value asked for and where it was asked (``where``: a
    config file's table, ``the command line``, ``the task's defaults``; None: unknown, ``asked for``)."""
    return f"{key} = {value!r} " + (f"({where})" if where else "asked for")


def where_asked(origins: Mapping[str, str] | None, section: str, key: str) -> str | None:
    """How a message names where ``[section] key`` came from, by ``origins`` (those of
    :class:`~dotformer.runs.config_files.ConfigSections`: ``"model.d_ff"`` -> a file's path, a flag, ``"command
    line"``, ``"defaults"``): ``configs/g2p.toml [model]``, ``--vocab-size``, ``the task's defaults``; None without
    them."""
    if origins is None or f"{section}.{key}" not in origins:
        return None
    source = origins[f"{section}.{key}"]
    if source.startswith("--"):  # the flag that set it
        return source
    named = {"command line": "the command line", "defaults": "the task's defaults"}
    return named.get(source, f"{source} [{section}]")


def preset_phrase(preset: str, origins: Mapping[str, str] | None) -> str:
    """``preset 'small' (configs/g2p.toml [model])``: a preset and where it was named."""
    where = where_asked(origins, "model", "preset")
    return f"preset {preset!r}" + (f" ({where})" if where else "")


def model_changes(
    model_section: Mapping[str, Any], config: ModelConfig, path: Path, origins: Mapping[str, str] | None,
    tunable: Sequence[str] = TUNABLE_MODEL_FIELDS, task_set: Sequence[str] = (),
) -> dict[str, Any]:  # fmt: skip
    """The fields of ``model_section`` that fine-tuning changes (``tunable``), a preset checked (:func:`_check_preset`).

    Raises:
        CheckpointError: a preset or a field asked for (but ``task_set``, the task's) unlike the checkpoint's.
    """
    saved, changes = config.to_dict(), {}
    for key, value in model_section.items():
        if key == "preset":
            _check_preset(value, config, path, origins)
        elif key in tunable:
            changes[key] = value
        elif key in saved and saved[key] != value and key not in task_set:
            raise CheckpointError(
                f"--init-from {path}: model {asked(key, value, where_asked(origins, 'model', key))}, the checkpoint "
                f"has {saved[key]!r} ({path / ckpt.CONFIG_FILE}); fine-tuning keeps the checkpoint's shapes"
            )
    return changes


def tuned(config: ModelConfig, changes: dict[str, Any], path: Path) -> ModelConfig:
    """``config`` with ``changes`` (:func:`model_changes`). Raises CheckpointError: a value the config refuses."""
    try:
        return config.replace(**changes)
    except DotformerError as exc:
        raise CheckpointError(f"--init-from {path}: {exc}") from None


def saved_preset(info: dict[str, Any]) -> str | None:
    """The preset a checkpoint's config.json names, or None."""
    return info.get("preset") if isinstance(info.get("preset"), str) else None


def read_init_source(
    path: str | Path,
    model_section: dict[str, Any],
    data_section: dict[str, Any],
    origins: Mapping[str, str] | None = None,
) -> InitSource:
    """Read the checkpoint of ``--init-from`` and check the requested model and tokenizer fields against it.

    Args:
        path: a checkpoint or run directory.
        model_section: the [model] fields asked for (file and flags; "preset" included).
        data_section: the [data] fields asked for.
        origins: where each of those fields came from, for the messages (see :func:`where_asked`); None: unknown.

    Raises:
        CheckpointError: a missing or damaged checkpoint, one that is not an encoder-decoder, or a requested
            model/tokenizer field that differs from the checkpoint's (the message names the field, both values and the
            checkpoint's config.json).
    """
    path, info, config = ckpt.open_checkpoint(path)
    if config.arch != "encoder-decoder":
        kind = "a decoder-only language model" if config.arch == "decoder-only" else f"an {config.arch} model"
        raise CheckpointError(f"{path} is {kind}; --init-from needs an encoder-decoder checkpoint")
    where = path / ckpt.CONFIG_FILE
    changes = model_changes(model_section, config, path, origins)
    saved_data = info.get("data") if isinstance(info.get("data"), dict) else {}
    data = {k: saved_data[k] for k in TOKENIZER_FIELDS if k in saved_data}
    for key in TOKENIZER_FIELDS:
        if key in data_section and key in data and data_section[key] != data[key]:
            raise CheckpointError(
                f"--init-from {path}: {asked(key, data_section[key], where_asked(origins, 'data', key))}, the "
                f"checkpoint's vocabulary was built with {data[key]!r} ({where}); fine-tuning keeps the checkpoint's "
                "tokenizers"
            )
    src = ckpt.load_tokenizer_file(path / ckpt.SRC_TOKENIZER_FILE)
    tgt = ckpt.load_tokenizer_file(path / ckpt.TGT_TOKENIZER_FILE)
    ckpt.check_vocabulary(config, src, tgt, path)
    if data.get("shared_vocab"):
        tgt = src
    return InitSource(path, tuned(config, changes, path), saved_preset(info), data, src, tgt)


def read_encoder_init(
    path: str | Path,
    model_section: dict[str, Any],
    data_section: dict[str, Any],
    origins: Mapping[str, str] | None = None,
) -> InitSource:
    """Read the encoder checkpoint of ``--init-from`` for an encoder task (a masked language model's, an imported
    BERT's, a classifier's): its tokenizer and model config; the task gives it its head. ``origins``: where the
    fields asked for came from, for the messages (:func:`where_asked`).

    Raises:
        CheckpointError: a missing or damaged checkpoint, one that is not encoder-only, a requested model field
            or tokenizer setting that differs from the checkpoint's, or a tokenizer file (the checkpoint's is kept).
    """
    path, info, config = ckpt.open_checkpoint(path)
    if config.arch != "encoder-only":
        raise CheckpointError(
            f"{path} is {'a' if config.arch == 'decoder-only' else 'an'} {config.arch} model; an encoder task's "
            f"--init-from needs an encoder-only checkpoint (a "
            f"--task mlm run's, or dotformer import --from bert)"
        )
    where = path / ckpt.CONFIG_FILE
    saved = config.to_dict()
    preset = model_section.get("preset")
    if preset is not None:  # the sizes the preset gives where the section sets none
        if preset not in PRESETS:
            raise CheckpointError(f"--init-from {path}: unknown model preset {preset!r}")
        for key in SIZE_FIELDS[:4]:  # the encoder's sizes
            if key in model_section:  # set beside the preset: where it was set
                wanted = asked(key, model_section[key], where_asked(origins, "model", key))
            else:
                wanted = f"{key} = {PRESETS[preset][key]!r} of {preset_phrase(preset, origins)}"
            if model_section.get(key, PRESETS[preset][key]) != saved[key]:
                raise CheckpointError(
                    f"--init-from {path}: model {wanted}, the checkpoint has {saved[key]!r} ({where}); fine-tuning "
                    "keeps the checkpoint's shapes"
                )
    fields = {key: value for key, value in model_section.items() if key != "preset"}  # the preset: checked above
    tunable, task_set = (*TUNABLE_MODEL_FIELDS, "pooling"), ("head", "num_labels", "max_len")
    changes = model_changes(fields, config, path, origins, tunable, task_set)
    saved_data = info.get("data") if isinstance(info.get("data"), dict) else {}
    for key in ("tokenizer", "vocab_size"):  # asked for, and the checkpoint's run recorded another
        if data_section.get(key) is not None and saved_data.get(key) not in (None, data_section[key]):
            raise CheckpointError(
                f"--init-from {path}: {asked(key, data_section[key], where_asked(origins, 'data', key))}, the "
                f"checkpoint's vocabulary was built with {saved_data[key]!r} ({where}); fine-tuning keeps the "
                "checkpoint's tokenizer"
            )
    if data_section.get("tokenizer_file") is not None:
        raise CheckpointError(f"--init-from {path}: fine-tuning keeps the checkpoint's tokenizer; leave out its file")
    tokenizer = ckpt.load_tokenizer_file(path / ckpt.SRC_TOKENIZER_FILE)
    ckpt.check_vocabulary(config, tokenizer, ckpt.load_tokenizer_file(path / ckpt.TGT_TOKENIZER_FILE), path)
    return InitSource(path, tuned(config, changes, path), saved_preset(info), {}, tokenizer, tokenizer)


def _check_preset(
    preset: str | None, config: ModelConfig, path: Path, origins: Mapping[str, str] | None = None
) -> None:
    """Raise CheckpointError when the sizes of ``preset`` differ from the checkpoint's ``config`` (the stacks it
    has); ``origins`` say where the preset was named (:func:`where_asked`)."""
    if preset is None:
        return
    try:
        wanted = ModelConfig.preset(preset, src_vocab_size=config.src_vocab_size, tgt_vocab_size=config.tgt_vocab_size)
    except DotformerError as exc:
        raise CheckpointError(f"--init-from {path}: {exc}") from None
    stacks = {"encoder-only": "num_decoder_layers", "decoder-only": "num_encoder_layers"}
    for key in (k for k in SIZE_FIELDS if k != stacks.get(config.arch)):
        if getattr(wanted, key) != getattr(config, key):
            raise CheckpointError(
                f"--init-from {path}: {preset_phrase(preset, origins)} has {key} = {getattr(wanted, key)}, the "
                f"checkpoint has {getattr(config, key)} ({path / ckpt.CONFIG_FILE}); fine-tuning keeps the "
                "checkpoint's shapes"
            )


class UnknownSymbols(NamedTuple):
    """The pieces of some texts that a vocabulary does not know.

    Attributes:
        count: how many pieces in all encode to ``<unk>``.
        examples: the most frequent of them, most frequent first (empty when the tokenizer cannot name its pieces,
            e.g. a Hugging Face tokenizer file).
    """

    count: int
    examples: list[str]


def unknown_symbols(texts: Iterable[str], tokenizer: Any, num_examples: int = 3) -> UnknownSymbols:
    """Count the pieces of ``texts`` that ``tokenizer`` reads as ``<unk>``, and name the most frequent ones."""

    texts = list(texts)
    if isinstance(tokenizer, VocabularyTokenizer):  # char and symbol: the pieces are there to name
        known = set(tokenizer.vocab[NUM_SPECIAL:])
        missing = Counter(piece for text in texts for piece in tokenizer.split(text) if piece not in known)
        return UnknownSymbols(sum(missing.values()), [piece for piece, _ in missing.most_common(num_examples)])
    count = sum(ids.count(UNK_ID) for ids in tokenizer.encode_batch(texts))
    return UnknownSymbols(count, [])


def check_known_symbols(pairs: Sequence[Any], src_tokenizer: Any, tgt_tokenizer: Any, source: Path) -> None:
    """Refuse fine-tuning data with symbols that the checkpoint's vocabulary does not know.

    Fine-tuning keeps the checkpoint's tokenizers (its embedding rows are what the weights learned), so an unknown
    symbol would be trained as ``<unk>``: data in another alphabet or phone set would train on ``<unk>`` alone.

    Args:
        pairs: the training and validation pairs (``.source``, ``.target``).
        src_tokenizer, tgt_tokenizer: the checkpoint's tokenizers.
        source: the checkpoint, named in the message.

    Raises:
        CheckpointError: one line: how many source and target symbols are unknown, the most frequent of each, and
            what to do instead.
    """
    src = unknown_symbols((p.source for p in pairs), src_tokenizer)
    tgt = unknown_symbols((p.target for p in pairs), tgt_tokenizer)
    if not src.count and not tgt.count:
        return
    raise CheckpointError(
        f"--init-from {source}: the training and validation pairs hold {_described(src, 'source')} and "
        f"{_described(tgt, 'target')} that the checkpoint's vocabulary does not know (fine-tuning would train on "
        f"<unk> in their place): pass --extend-vocab to add them (char and symbol vocabularies), fine-tune on data "
        f"written in the checkpoint's symbols, or train without --init-from to build a vocabulary from these pairs"
    )


def _described(unknown: UnknownSymbols, side: str) -> str:
    """``"900 source symbols (e.g. 'ж', 'ы', 'ц')"``, ``"1 target symbol"``, ``"0 target symbols"``."""
    noun = "symbol" if unknown.count == 1 else "symbols"
    examples = f" (e.g. {', '.join(repr(piece) for piece in unknown.examples)})" if unknown.examples else ""
    return f"{unknown.count:,} {side} {noun}{examples}"


def extend_vocabulary(source: InitSource, pairs: Sequence[Any]) -> tuple[InitSource, int, int]:
    """``--extend-vocab``: the checkpoint's tokenizers with the unknown symbols of ``pairs`` appended (the old ids
    unchanged; the new ones most frequent first), and its model config with the larger vocabularies.

    Returns:
        (the extended source, symbols added to the source side, to the target side); one shared vocabulary grows
        once, by the symbols of both sides (counted on the source side).

    Raises:
        CheckpointError: a side whose tokenizer is not char or symbol (BPE merges and tokenizer files cannot grow).
    """
    shared = source.src_tokenizer is source.tgt_tokenizer
    if shared:
        texts = [text for p in pairs for text in (p.source, p.target)]
        src = _extended(source.src_tokenizer, texts, "the shared", source.path)
        tgt = src
    else:
        src = _extended(source.src_tokenizer, [p.source for p in pairs], "the source", source.path)
        tgt = _extended(source.tgt_tokenizer, [p.target for p in pairs], "the target", source.path)
    config = source.model_config.replace(src_vocab_size=src.vocab_size, tgt_vocab_size=tgt.vocab_size)
    added_src = src.vocab_size - source.src_tokenizer.vocab_size
    added_tgt = 0 if shared else tgt.vocab_size - source.tgt_tokenizer.vocab_size
    return source._replace(model_config=config, src_tokenizer=src, tgt_tokenizer=tgt), added_src, added_tgt


def _extended(tokenizer: Any, texts: Sequence[str], side: str, path: Path) -> Any:
    """``tokenizer`` with the pieces of ``texts`` it does not know appended (itself when it knows them all)."""

    if not isinstance(tokenizer, VocabularyTokenizer):
        raise CheckpointError(
            f"--extend-vocab: {side} vocabulary of --init-from {path} is {tokenizer.kind}; only char and symbol "
            f"vocabularies can grow (new BPE merges would change how known words split)"
        )
    known = set(tokenizer.vocab[NUM_SPECIAL:])
    counts = Counter(piece for text in texts for piece in tokenizer.split(text) if piece not in known)
    if not counts:
        return tokenizer
    new = sorted(counts, key=lambda piece: (-counts[piece], piece))
    return type(tokenizer)([*tokenizer.vocab, *new])


def load_extended_weights(model: Any, path: Path) -> None:
    """Copy the checkpoint's weights into ``model`` whose vocabularies are larger (:func:`extend_vocabulary`): every
    tensor whole, except the vocabulary tables (embeddings, output projection), whose first rows are copied and whose
    new rows keep the model's own initialisation (as a fresh model's).

    Raises:
        CheckpointError: a tensor missing, unexpected, or of another shape than a vocabulary table grown by rows.
    """
    import torch

    saved = ckpt.load_weights(path / ckpt.MODEL_FILE)
    state = model.state_dict()
    if set(saved) != set(state):
        raise CheckpointError(f"--extend-vocab: {path / ckpt.MODEL_FILE} does not fit the model's tensors")
    with torch.no_grad():
        for name, tensor in saved.items():
            target = state[name]
            same = tensor.shape == target.shape
            grown = tensor.dim() == target.dim() and tensor.shape[1:] == target.shape[1:]
            if not same and not (grown and tensor.shape[0] < target.shape[0]):
                raise CheckpointError(
                    f"--extend-vocab: {path / ckpt.MODEL_FILE}: tensor {name} has shape {tuple(tensor.shape)}, "
                    f"the extended model needs {tuple(target.shape)}"
                )
            target[: tensor.shape[0]].copy_(tensor)


def init_data_config(data_config: DataConfig, source: InitSource) -> DataConfig:
    """``data_config`` with the checkpoint's tokenizer fields (so run.json says how the vocabulary was built)."""
    return data_config.replace(**source.data)
