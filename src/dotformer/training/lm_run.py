"""A language-model run from end to end (``dotformer train --task lm``): the text read and split, one tokenizer made,
a decoder-only model built, and :func:`dotformer.training.fit` called, the translation job's loop, step, checkpoints,
resume, DDP and metrics, on blocks of text (:mod:`dotformer.data.blocks`).

Run directory layout (as a translation run's, with text in place of pairs)::

    RUN/run.json          task "lm", the text, every config, versions, command lines (the first and each resume)
    RUN/data/             train.txt, valid.txt, test.txt (one line each), split.json, tokenizer_src.json and
                          tokenizer_tgt.json (the one tokenizer, under the names checkpoints use)
    RUN/metrics.jsonl, RUN/checkpoints/, RUN/last/, RUN/best/

Defaults that differ from translation: no label smoothing (the validation loss is then the NLL that bits per
character are computed from) and the "small" preset built decoder-only, with ``max_len`` = the block size (its
positions are those it trained on; generation reads at most that many tokens).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dotformer.config import PRESETS, ModelConfig
from dotformer.data.config import LM_TASK, LMDataConfig
from dotformer.errors import CheckpointError, ConfigError, DataError
from dotformer.training.config import TrainConfig
from dotformer.training.config_files import ConfigSections, budgeted_train_config, merge
from dotformer.training.records import (
    _read_run_json,
    check_no_run_there,
    invocation_of,
    record_resume,
    removed_if_unfinished,
    resumed_sections,
    write_json_atomic,
    write_new_record,
)

if TYPE_CHECKING:
    from dotformer.data.text import TextSplits
    from dotformer.data.tokenizers import Tokenizer
    from dotformer.training.run import RunResult

LM_TRAIN_DEFAULTS = {"label_smoothing": 0.0}  # [train] defaults of a language model (flags and files override them)
SPLIT_NAMES = ("train", "valid", "test")


@dataclass
class LMPrepared:
    """What training needs, read back from the run directory (every rank reads the same files)."""

    model_config: ModelConfig
    train_config: TrainConfig
    data_config: LMDataConfig
    tokenizer: Tokenizer
    train_lines: list[str]
    valid_lines: list[str]


def lm_model_config(model_section: dict[str, Any], vocab_size: int, block_size: int) -> tuple[ModelConfig, str]:
    """The decoder-only ModelConfig: the preset (default "small") + the section's fields, ``max_len`` = the block size
    unless set.

    Raises:
        ConfigError: an unknown preset, an ``arch`` other than decoder-only, a ``max_len`` below the block size, or
            an invalid field.
    """
    section = dict(model_section)
    preset = section.pop("preset", None) or "small"
    if preset not in PRESETS:
        raise ConfigError(f"unknown model preset {preset!r}; choose one of {', '.join(PRESETS)}")
    if section.setdefault("arch", "decoder-only") != "decoder-only":
        raise ConfigError(f"a language model is decoder-only; [model] arch = {section['arch']!r}")
    if section.setdefault("max_len", block_size) < block_size:
        raise ConfigError(f"[model] max_len = {section['max_len']} is shorter than the block size {block_size}")
    config = ModelConfig.preset(preset, src_vocab_size=vocab_size, tgt_vocab_size=vocab_size, **section)
    return config, preset


def make_lm_splits(data: LMDataConfig, seed: int) -> tuple[TextSplits, dict[str, Any]]:
    """The train / valid / test lines: given files, or whole groups held out of ``data.dataset`` (seeded); and the
    corpus description for run.json.

    Raises:
        MissingDataError, DataError: a text cannot be read. ConfigError: bad fractions or books.
    """
    from dotformer.data.text import TextSplits, check_books, read_file_text, read_text_corpus, split_text

    corpus = read_text_corpus(data.dataset, data.sword_path)
    test_file = read_file_text(data.test).lines if data.test else None
    if data.valid:
        splits = TextSplits(corpus.lines, read_file_text(data.valid).lines, test_file or [], {"valid": data.valid})
    else:
        books = check_books(corpus, data.test_books or ())
        test_fraction = 0.0 if test_file is not None else data.test_fraction
        splits = split_text(corpus, seed, data.valid_fraction, test_fraction, books or None)
        if test_file is not None:
            splits = TextSplits(splits.train, splits.valid, test_file, {**splits.info, "test": data.test})
    if data.limit is not None and data.limit < len(splits.train):
        splits = TextSplits(splits.train[: data.limit], splits.valid, splits.test, {**splits.info, "limit": data.limit})
    return splits, {"name": corpus.name, "report": corpus.report}


def make_lm_tokenizer(data: LMDataConfig, train_lines: list[str]) -> Tokenizer:
    """The tokenizer file when given, else a char or BPE tokenizer trained on the training lines.

    Raises:
        MissingDataError, DataError: the file cannot be read, or it reads more than half of the training text's
            tokens as <unk> (the tokenizer of another text: the model would learn <unk>). ConfigError: a bad
            vocabulary size.
    """
    from dotformer.data.tokenizer_files import train_tokenizer

    if data.tokenizer_file:
        from dotformer.data.tokenizer_files import read_tokenizer_file
        from dotformer.decoding.evaluation import unknown_fraction

        tokenizer = read_tokenizer_file(data.tokenizer_file)
        share = unknown_fraction(tokenizer, train_lines)
        if share > 0.5:
            raise DataError(
                f"{data.tokenizer_file}: {share:.0%} of the training text's tokens are unknown to this tokenizer "
                f"(<unk>): is it the tokenizer of this text?"
            )
        return tokenizer
    return train_tokenizer(data.tokenizer, train_lines, data.vocab_size)


def save_text_splits(splits: TextSplits, directory: Path) -> None:
    """data/train.txt, valid.txt, test.txt (one line each, newline-terminated) and split.json."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in SPLIT_NAMES:
        lines = getattr(splits, name)
        (directory / f"{name}.txt").write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    write_json_atomic(directory / "split.json", splits.info)


def load_text_split(directory: Path, name: str) -> list[str]:
    """The lines of a saved split (empty for a split saved empty)."""
    from dotformer.data.textio import split_lines

    return split_lines((directory / f"{name}.txt").read_text(encoding="utf-8"))


def train_lm_run(
    file_sections: ConfigSections,
    flag_sections: ConfigSections,
    out_dir: str | Path | None,
    resume: bool = False,
    command: Sequence[str] | None = None,
    overwrite: bool = False,
) -> RunResult:
    """Prepare the text, tokenizer and model from the configs, and train (the work of ``dotformer train --task lm``).

    Args: as :func:`dotformer.training.run.train_run` (no fine-tuning from another checkpoint). As there, a run that
    fails before its first checkpoint removes the directories it made for ``out_dir``.

    Returns:
        :class:`~dotformer.training.run.RunResult`.

    Raises:
        ConfigError: bad configs, no budget, an existing run without --resume or --overwrite.
        CheckpointError: --resume with nothing to resume, or with other data or model settings.
        DataError / MissingDataError: a text cannot be read. TrainingError: see :func:`fit`.
    """
    from dotformer.training.distributed import setup_distributed, teardown_distributed
    from dotformer.training.run import ANY_VOCAB_SIZE, check_requirements

    if resume and overwrite:
        raise ConfigError("--resume continues a run as it is: it cannot be combined with --overwrite")
    invocation = invocation_of(file_sections, flag_sections, command)
    sections = merge(file_sections, flag_sections)
    dataset = sections.data.get("dataset") or LMDataConfig.dataset
    run_dir = Path(out_dir) if out_dir is not None else Path("runs") / f"{Path(dataset.replace(':', '-')).stem}-lm"
    record = _read_run_json(run_dir) if resume else None
    if record is not None:
        if record.get("task") != LM_TASK:
            raise CheckpointError(f"{run_dir} holds a {record.get('task')} run, not a language model (--task lm)")
        sections = resumed_sections(record, file_sections, flag_sections)
    data_config = LMDataConfig.from_section(sections.data, f"{sections.source} [data]")
    train_config = budgeted_train_config({**LM_TRAIN_DEFAULTS, **sections.train}, file_sections, flag_sections)
    check_requirements(train_config)  # before any text is read: a missing package is one line, not a lost run
    if record is None:  # before the run directory is made: bad [model] fields are one line
        lm_model_config(sections.model, ANY_VOCAB_SIZE, data_config.block_size)
    context = setup_distributed(train_config.device)
    try:
        with removed_if_unfinished(run_dir, context.is_main):  # a failure before the first checkpoint: no leftovers
            if record is None:
                prepared = _prepare_fresh(run_dir, sections, data_config, train_config, invocation, context, overwrite)
            else:
                prepared = _prepare_resume(run_dir, record, sections, data_config, train_config, invocation, context)
            return _train(prepared, run_dir, resume, context.is_main)
    finally:
        teardown_distributed(context)


def _prepare_fresh(
    run_dir: Path,
    sections: ConfigSections,
    data: LMDataConfig,
    train_config: TrainConfig,
    invocation: dict[str, Any],
    context: Any,
    overwrite: bool,
) -> LMPrepared:
    from dotformer.checkpoint import SRC_TOKENIZER_FILE, TGT_TOKENIZER_FILE, clear_run_directory
    from dotformer.training.distributed import barrier

    if not overwrite:
        check_no_run_there(run_dir)
    barrier(context)  # every rank has looked before rank 0 writes
    if context.is_main:
        if overwrite:
            clear_run_directory(run_dir)
        splits, corpus = make_lm_splits(data, train_config.seed)
        tokenizer = make_lm_tokenizer(data, splits.train)
        save_text_splits(splits, run_dir / "data")
        for name in (SRC_TOKENIZER_FILE, TGT_TOKENIZER_FILE):
            tokenizer.save(run_dir / "data" / name)
        model_config, preset = lm_model_config(sections.model, tokenizer.vocab_size, data.block_size)
        configs = (model_config, train_config, data)
        write_new_record(run_dir, data.dataset, LM_TASK, corpus, preset, configs, invocation, context.world_size)
    barrier(context)
    return _load_prepared(run_dir, _read_run_json(run_dir), train_config)  # every rank reads what rank 0 wrote


def _prepare_resume(
    run_dir: Path,
    record: dict[str, Any],
    sections: ConfigSections,
    data: LMDataConfig,
    train_config: TrainConfig,
    invocation: dict[str, Any],
    context: Any,
) -> LMPrepared:
    saved = json.loads(json.dumps(record["data"]))
    if data.to_dict() != saved:
        changed = sorted(k for k, v in data.to_dict().items() if saved.get(k) != v)
        raise CheckpointError(
            f"cannot resume {run_dir}: [data] {', '.join(changed)} differ from the run's ({run_dir / 'run.json'}); "
            f"start a new run with --out instead"
        )
    model_config, _ = lm_model_config(sections.model, record["model"]["tgt_vocab_size"], data.block_size)
    if model_config.to_dict() != record["model"]:
        raise CheckpointError(f"cannot resume {run_dir}: the [model] settings differ from the run's; use a new --out")
    if context.is_main:
        record_resume(run_dir, record, invocation, train_config)
    return _load_prepared(run_dir, record, train_config)


def _load_prepared(run_dir: Path, record: dict[str, Any], train_config: TrainConfig) -> LMPrepared:
    from dotformer.checkpoint import TGT_TOKENIZER_FILE
    from dotformer.data.tokenizer_files import load_tokenizer

    data_dir = run_dir / "data"
    return LMPrepared(
        model_config=ModelConfig.from_dict(record["model"]),
        train_config=train_config,
        data_config=LMDataConfig.from_section(record["data"], str(run_dir / "run.json")),
        tokenizer=load_tokenizer(data_dir / TGT_TOKENIZER_FILE),
        train_lines=load_text_split(data_dir, "train"),
        valid_lines=load_text_split(data_dir, "valid"),
    )


def _train(p: LMPrepared, run_dir: Path, resume: bool, is_main: bool) -> RunResult:
    import torch

    from dotformer.data.blocks import check_training_stream, encode_text
    from dotformer.model import Transformer
    from dotformer.training.loop import fit
    from dotformer.training.run import RunResult
    from dotformer.training.state import TrainData

    torch.manual_seed(p.train_config.seed)  # the model's initial weights
    model = Transformer(p.model_config)
    T = p.data_config.block_size
    data = TrainData(
        train=encode_text(p.train_lines, p.tokenizer, T),  # type: ignore[arg-type]
        valid=encode_text(p.valid_lines, p.tokenizer, T),  # type: ignore[arg-type]
        src_tokenizer=p.tokenizer,
        tgt_tokenizer=p.tokenizer,
        valid_pairs=[],
    )
    check_training_stream(data.train)  # type: ignore[arg-type]  # before the data line: an error is one line
    info = {"task": LM_TASK, "dataset": p.data_config.dataset, "data": p.data_config.to_dict()}
    if is_main and p.train_config.progress:
        characters = sum(len(line) + 1 for line in p.train_lines)
        print(f"data: {len(p.train_lines):,} train lines ({characters:,} characters, {len(data.train):,} tokens), "
              f"{len(p.valid_lines):,} valid lines; blocks of {T} tokens", file=sys.stderr)  # fmt: skip
    result = fit(model, data, p.train_config, run_dir=run_dir, info=info, resume=resume)
    return RunResult(fit=result, run_dir=run_dir, is_main=is_main)
