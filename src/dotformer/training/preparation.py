"""Preparing a run: the data read and split, tokenizers made, the model config built (fresh, fine-tuned or resumed).

Rank 0 writes ``RUN/data/`` and ``run.json``; every rank then reads them back, so that all train on exactly the same
data and vocabularies.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dotformer.config import PRESETS, ModelConfig
from dotformer.errors import CheckpointError, ConfigError, DotformerError
from dotformer.training.config import DataConfig, TrainConfig
from dotformer.training.config_files import TASK_PRESETS, ConfigSections
from dotformer.training.records import (
    _now,
    _read_run_json,
    _same_or_raise,
    check_no_run_there,
    versions,
    write_json_atomic,
)

if TYPE_CHECKING:
    from dotformer.data.tokenizers import Tokenizer


DEFAULT_BPE_VOCAB = 8000


def resolve_data_config(data: DataConfig, task: str) -> DataConfig:
    """Fill the task-dependent defaults: tokenizer kinds (char -> symbol for g2p, symbol for synthetic tasks, BPE
    otherwise), a shared vocabulary for BPE on both sides, and 8000 BPE tokens."""
    from dotformer.data.tokenizers import default_kinds

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
    data_lines: list[str] = field(default_factory=list)  # what reading each file said (printed before training)


def _prepare_fresh(
    run_dir: Path,
    sections: ConfigSections,
    train_config: TrainConfig,
    invocation: dict[str, Any],
    context: Any,
    overwrite: bool = False,
    init_from: str | Path | None = None,
) -> _Prepared:
    from dotformer.checkpoint import clear_run_directory
    from dotformer.data.prepare import make_tokenizers, read_run_data
    from dotformer.data.splits import load_split, save_splits
    from dotformer.data.tokenizers import TokenizerPair, load_tokenizer
    from dotformer.training.distributed import barrier, check_shared_file
    from dotformer.training.finetune import init_data_config, read_init_source

    data_config = DataConfig.from_dict(sections.data, "[data]")
    if not overwrite:
        check_no_run_there(run_dir)
    init = read_init_source(init_from, sections.model, sections.data) if init_from is not None else None
    barrier(context)  # every rank has looked before rank 0 writes
    if overwrite and context.is_main:
        clear_run_directory(run_dir)
    data_dir = run_dir / "data"
    data_lines: list[str] = []
    if context.is_main:
        run_data = read_run_data(data_config, train_config.seed)  # given valid/test files, or a random split
        corpus, splits = run_data.corpus, run_data.splits
        data_lines = run_data.lines  # columns used, rows read, pairs kept and dropped, per file
        data_config = resolve_data_config(data_config, corpus.task)
        save_splits(splits, data_dir)
        tokenizers = None if init is None else TokenizerPair(init.src_tokenizer, init.tgt_tokenizer)
        if init is not None:
            data_config = init_data_config(data_config, init)
        tokenizers = tokenizers or make_tokenizers(data_config, splits.train)  # files, or trained on train
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
            invocation = {**invocation, "init_from": str(init.path)}
        record = {
            "dataset": data_config.dataset,
            "task": corpus.task,
            "corpus": {"name": corpus.name, "report": corpus.report},
            "preset": preset,
            "model": model_config.to_dict(),
            "train": train_config.to_dict(),
            "data": data_config.to_dict(),
            "versions": versions(),
            **invocation,
            "created": _now(),
            "world_size": context.world_size,
        }
        write_json_atomic(run_dir / "run.json", record)
    barrier(context)
    check_shared_file(run_dir / "run.json", "--out", context)
    # every rank (rank 0 too) reads what rank 0 wrote, so all train on exactly the same data and vocabularies
    prepared = _load_prepared(run_dir, _read_run_json(run_dir), train_config, load_split, load_tokenizer)
    prepared.init_from = None if init is None else init.path
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
    from dotformer.data.tokenizers import load_tokenizer

    saved_model = {**record["model"], "preset": record.get("preset")}
    _same_or_raise("model", saved_model, sections.model, run_dir)
    _same_or_raise("data", record["data"], sections.data, run_dir)
    if is_main:
        record.setdefault("resumes", []).append(
            {**invocation, "time": _now(), "train": train_config.to_dict(), "versions": versions()}
        )
        write_json_atomic(run_dir / "run.json", record)
    return _load_prepared(run_dir, record, train_config, load_split, load_tokenizer)


def _load_prepared(run_dir: Path, record: dict[str, Any], train_config: TrainConfig, load_split, load_tokenizer):
    data_dir = run_dir / "data"
    src = load_tokenizer(data_dir / "tokenizer_src.json")
    tgt = load_tokenizer(data_dir / "tokenizer_tgt.json")
    if record["data"].get("shared_vocab"):
        tgt = src  # one vocabulary object, as when it was trained
    try:
        model_config = ModelConfig.from_dict(record["model"])
        data_config = DataConfig.from_dict(record["data"], str(run_dir / "run.json"))
    except DotformerError as exc:
        raise CheckpointError(f"{run_dir / 'run.json'}: {exc}") from None
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
