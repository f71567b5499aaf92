"""Preparing a run: the data read and split, tokenizers made, the model config built (fresh, fine-tuned or resumed).

Rank 0 writes ``RUN/data/`` and ``run.json``; every rank then reads them back, so that all train on exactly the same
data and vocabularies.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dotformer.config import PRESETS, ModelConfig
from dotformer.data.config import DataConfig
from dotformer.errors import CheckpointError, ConfigError, DotformerError
from dotformer.training.config import TrainConfig
from dotformer.training.config_files import TASK_PRESETS, ConfigSections
from dotformer.training.records import (
    _read_run_json,
    _same_or_raise,
    check_no_run_there,
    record_resume,
    write_new_record,
)

if TYPE_CHECKING:
    from dotformer.data.splits import Splits
    from dotformer.data.tokenizers import Tokenizer

logger = logging.getLogger(__name__)  # "dotformer.training.preparation": warnings about the data before training

DEFAULT_BPE_VOCAB = 8000


def resolve_data_config(data: DataConfig, task: str) -> DataConfig:
    """Fill the task-dependent defaults: tokenizer kinds (char -> symbol for g2p, symbol for synthetic tasks, BPE
    otherwise), a shared vocabulary for BPE on both sides, and 8000 BPE tokens."""
    from dotformer.data.tokenizer_files import default_kinds

    src_default, tgt_default = default_kinds(task)
    src = None if data.src_tokenizer_file else data.src_tokenizer or src_default  # a side read from a file: no kind
    tgt = None if data.tgt_tokenizer_file else data.tgt_tokenizer or tgt_default
    if data.src_tokenizer_file or data.tgt_tokenizer_file:
        same_file = data.src_tokenizer_file == data.tgt_tokenizer_file
        if data.shared_vocab and not same_file:
            raise ConfigError("a shared vocabulary with tokenizer files needs the same file on both sides")
        shared = same_file
    else:
        shared = data.shared_vocab if data.shared_vocab is not None else (src == tgt == "bpe")
    vocab = data.vocab_size if data.vocab_size is not None else (DEFAULT_BPE_VOCAB if "bpe" in (src, tgt) else None)
    if shared and src != tgt:
        raise ConfigError(f"a shared vocabulary needs one tokenizer kind for both sides, got {src} and {tgt}")
    return data.replace(src_tokenizer=src, tgt_tokenizer=tgt, shared_vocab=shared, vocab_size=vocab)


def build_model_config(model_section: dict[str, Any], task: str, src_vocab: int, tgt_vocab: int, shared: bool):
    """The ModelConfig: preset (the section's "preset", else the task's) + the section's fields + vocabularies.

    Embeddings are shared (§3.4) by default when the vocabulary is shared.

    Raises:
        ConfigError: an unknown preset or an invalid field.
    """
    section = dict(model_section)
    preset = section.pop("preset", None) or TASK_PRESETS.get(task, "small")
    if preset not in PRESETS:
        raise ConfigError(f"unknown model preset {preset!r}; choose one of {', '.join(PRESETS)}")
    section.setdefault("share_embeddings", shared)
    return ModelConfig.preset(preset, src_vocab_size=src_vocab, tgt_vocab_size=tgt_vocab, **section), preset


def default_run_dir(dataset: str, preset: str | None) -> Path:
    """``runs/<dataset>-<preset>``, with the dataset reduced to a file-name-safe stem."""
    stem = Path(dataset.split(",")[0]).stem if ("/" in dataset or "." in dataset) else dataset
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", stem) or "run"
    return Path("runs") / f"{stem}-{preset or 'auto'}"


def leakage_warnings(splits: Splits, data: DataConfig) -> list[str]:
    """One line per given valid/test file that shares sources with the training split (its scores would measure
    recall of trained pairs, not generalisation); the file named, and said when it is the training file itself.

    Splits drawn at random from one corpus are disjoint by construction and give no line.
    """
    train_sources = {pair.source for pair in splits.train}
    lines = []
    for role in ("valid", "test"):
        spec = getattr(data, role)
        if spec is None:
            continue
        sources = {pair.source for pair in getattr(splits, role)}
        shared = len(sources & train_sources)
        if not shared:
            continue
        same = " (the training file itself)" if _same_file(spec, data.dataset) else ""
        lines.append(
            f"--{role} {spec}{same}: {shared:,} of its {len(sources):,} sources are training sources too, so its "
            f"{'scores' if role == 'test' else 'loss and best/'} measure recall of trained pairs, not "
            f"generalisation: give {role} pairs that are not in the training data"
        )
    return lines


def epoch_steps_of(config: TrainConfig, examples: list, world_size: int = 1) -> int:
    """Optimizer steps in one epoch of the encoded ``examples`` (EncodedPair) on each of ``world_size`` processes."""
    from dotformer.data.batching import BatchSampler
    from dotformer.training.warmup import steps_per_epoch

    sampler = BatchSampler(examples, config.max_tokens, config.seed, rank=0, world_size=world_size)
    return steps_per_epoch(len(sampler.batch_indices(0)), config.accumulation_steps)


def _fit_warmup(config: TrainConfig, train_pairs: list, tokenizers: Any, world_size: int) -> TrainConfig:
    """``config`` with the default warmup fitted to a budget of known steps (:func:`~dotformer.training.warmup.
    scaled_warmup`), said in one line; unchanged when the budget's steps are unknown or many."""
    from dotformer.data.batching import encode_pairs
    from dotformer.training.warmup import WARMUP_FRACTION, known_steps, scaled_warmup

    epoch_steps = None
    if config.max_epochs is not None:
        epoch_steps = epoch_steps_of(config, encode_pairs(train_pairs, tokenizers.src, tokenizers.tgt), world_size)
    warmup = scaled_warmup(config, epoch_steps)
    if warmup == config.warmup_steps:
        return config
    if config.progress:
        logger.info(
            f"warmup: {warmup:,} step{'s' if warmup != 1 else ''}, {WARMUP_FRACTION:.0%} of the budget's "
            f"{known_steps(config, epoch_steps):,} "
            f"(the recipe's {config.warmup_steps:,} would not end in time; --warmup N sets it)"
        )
    return config.replace(warmup_steps=warmup)


def _same_file(a: str, b: str) -> bool:
    """True when the paths ``a`` and ``b`` are one existing file (also through ``../`` or a link)."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


@dataclass
class _Prepared:
    model_config: ModelConfig
    train_config: TrainConfig
    data_config: DataConfig
    task: str
    train_pairs: list
    valid_pairs: list
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    init_from: Path | None = None
    extend_vocab: bool = False  # the init_from checkpoint's vocabularies were extended: its weights are copied by rows
    data_lines: list[str] = field(default_factory=list)  # what reading each file said (printed before training)


def _prepare_fresh(
    run_dir: Path,
    sections: ConfigSections,
    train_config: TrainConfig,
    invocation: dict[str, Any],
    context: Any,
    overwrite: bool = False,
    init_from: str | Path | None = None,
    explicit_warmup: bool = True,
    extend_vocab: bool = False,
) -> _Prepared:
    from dotformer.checkpoint import clear_run_directory
    from dotformer.data.prepare import make_tokenizers, read_run_data
    from dotformer.data.splits import load_split, save_splits
    from dotformer.data.tokenizer_files import TokenizerPair, load_tokenizer
    from dotformer.training.distributed import barrier, check_shared_file
    from dotformer.training.finetune import check_known_symbols, extend_vocabulary, init_data_config, read_init_source
    from dotformer.training.warmup import fitted_record

    data_config = DataConfig.from_dict(sections.data, "[data]")
    if not overwrite:
        check_no_run_there(run_dir)
    init = read_init_source(init_from, sections.model, sections.data) if init_from is not None else None
    barrier(context)  # every rank has looked before rank 0 writes
    data_dir = run_dir / "data"
    data_lines: list[str] = []
    if context.is_main:
        run_data = read_run_data(data_config, train_config.seed)  # given valid/test files, or a random split
        corpus, splits = run_data.corpus, run_data.splits
        data_lines = run_data.lines  # columns used, rows read, pairs kept and dropped, per file
        if init is not None and extend_vocab:  # new symbols get new rows
            init, added_src, added_tgt = extend_vocabulary(init, [*splits.train, *splits.valid])
            if train_config.progress:
                logger.info(
                    f"vocabulary: {added_src:,} source and {added_tgt:,} target symbols added to those of {init.path}"
                    f" (their embedding and output rows start as a fresh model's)"
                )
        elif init is not None:  # before anything is written: data the checkpoint cannot read is refused
            check_known_symbols([*splits.train, *splits.valid], init.src_tokenizer, init.tgt_tokenizer, init.path)
        for line in leakage_warnings(splits, data_config):  # on standard error with --no-progress too
            logger.warning(line)
        data_config = resolve_data_config(data_config, corpus.task)
        tokenizers = None if init is None else TokenizerPair(init.src_tokenizer, init.tgt_tokenizer)
        if init is not None:
            data_config = init_data_config(data_config, init)
        if overwrite:  # the old run goes only once the new one's data has been read and accepted
            clear_run_directory(run_dir)
        save_splits(splits, data_dir)
        tokenizers = tokenizers or make_tokenizers(data_config, splits.train)  # files, or trained on train
        if not explicit_warmup:
            fitted = _fit_warmup(train_config, splits.train, tokenizers, context.world_size)
            invocation, train_config = {**invocation, **fitted_record(train_config, fitted)}, fitted  # kept on resume
        tokenizers.src.save(data_dir / "tokenizer_src.json")
        tokenizers.tgt.save(data_dir / "tokenizer_tgt.json")
        model_config, preset = build_model_config(
            sections.model,
            corpus.task,
            tokenizers.src.vocab_size,
            tokenizers.tgt.vocab_size,
            tokenizers.src is tokenizers.tgt,
        )
        if init is not None:
            model_config, preset = init.model_config, init.preset or sections.model.get("preset")
            invocation = {**invocation, "init_from": str(init.path), **({"extend_vocab": True} if extend_vocab else {})}
        corpus_info = {"name": corpus.name, "report": corpus.report}
        configs = (model_config, train_config, data_config)
        write_new_record(
            run_dir, data_config.dataset, corpus.task, corpus_info, preset, configs, invocation, context.world_size
        )
    barrier(context)
    check_shared_file(run_dir / "run.json", "--out", context)
    # every rank (rank 0 too) reads what rank 0 wrote, so all train on exactly the same data and vocabularies
    record = _read_run_json(run_dir)
    train_config = TrainConfig.from_dict(record["train"], str(run_dir / "run.json"))  # rank 0's warmup on every rank
    prepared = _load_prepared(run_dir, record, train_config, load_split, load_tokenizer)
    prepared.init_from = None if init is None else init.path
    prepared.extend_vocab = extend_vocab and init is not None
    prepared.data_lines = data_lines
    return prepared


def _prepare_resume(
    run_dir: Path,
    record: dict[str, Any],
    sections: ConfigSections,
    train_config: TrainConfig,
    invocation: dict[str, Any],
    is_main: bool,
) -> _Prepared:
    from dotformer.data.splits import load_split
    from dotformer.data.tokenizer_files import load_tokenizer

    saved_model = {**record["model"], "preset": record.get("preset")}
    _same_or_raise("model", saved_model, sections.model, run_dir)
    _same_or_raise("data", record["data"], sections.data, run_dir)
    if is_main:
        record_resume(run_dir, record, invocation, train_config)
    return _load_prepared(run_dir, record, train_config, load_split, load_tokenizer)


def _load_prepared(run_dir: Path, record: dict[str, Any], train_config: TrainConfig, load_split, load_tokenizer):
    data_dir = run_dir / "data"
    src = load_tokenizer(data_dir / "tokenizer_src.json")
    tgt = load_tokenizer(data_dir / "tokenizer_tgt.json")
    if record["data"].get("shared_vocab"):
        tgt = src  # one vocabulary object, as when it was trained
    where = str(run_dir / "run.json")
    try:
        model_config = ModelConfig.from_dict(record["model"])
        data_config = DataConfig.from_dict(record["data"], where)
    except DotformerError as exc:  # the path once: DataConfig's messages name it already
        message = str(exc)
        raise CheckpointError(message if message.startswith(f"{where}:") else f"{where}: {message}") from None
    return _Prepared(
        model_config=model_config,
        train_config=train_config,
        data_config=data_config,
        task=record["task"],
        train_pairs=load_split(data_dir, "train"),
        valid_pairs=load_split(data_dir, "valid"),
        src_tokenizer=src,
        tgt_tokenizer=tgt,
    )
