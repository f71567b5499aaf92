"""A training run from end to end, as ``dotformer train`` does it: configs from a TOML file and flags, the corpus
read and split, tokenizers trained, the model built, :func:`dotformer.training.fit` called, everything recorded in a
run directory.

Run directory layout::

    RUN/run.json          dataset, task, every config, versions, command lines and flags (the first and each resume)
    RUN/data/             the saved split (train.tsv, valid.tsv, test.tsv, split.json) and the tokenizers
    RUN/metrics.jsonl     one JSON object per logged step and per validation pass
    RUN/checkpoints/step_XXXXXXX/, RUN/last/, RUN/best/    checkpoints (see dotformer.checkpoint)

Config precedence, lowest first: built-in defaults (with per-task choices: tokenizers, preset), the config file's
sections ``[model]``, ``[train]``, ``[data]``, then command-line flags. On ``--resume`` the run's own run.json takes
the place of the defaults and the config file; the model and data may not change (CheckpointError), the recipe and
budgets may.

The parts, one concern each (their names are re-exported here): :mod:`~dotformer.training.config_files` (TOML
files, layering, key checks), :mod:`~dotformer.training.preparation` (data, tokenizers, model config for a fresh,
fine-tuned or resumed run), :mod:`~dotformer.training.records` (run.json, versions).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dotformer.errors import ConfigError
from dotformer.training.config import TrainConfig
from dotformer.training.config_files import (
    NAMED_TASKS,
    SECTIONS,
    TASK_PRESETS,
    ConfigSections,
    check_keys,
    merge,
    read_config_file,
)
from dotformer.training.preparation import (
    DEFAULT_BPE_VOCAB,
    _prepare_fresh,
    _prepare_resume,
    _Prepared,
    build_model_config,
    default_run_dir,
    resolve_data_config,
)
from dotformer.training.progress import count
from dotformer.training.records import (
    _jsonable,
    _read_run_json,
    _record_sections,
    check_no_run_there,
    versions,
    write_json_atomic,
)

if TYPE_CHECKING:
    from dotformer.training.loop import FitResult


@dataclass(frozen=True)
class RunResult:
    """What ``dotformer train`` reports at the end.

    Attributes:
        fit: the :class:`dotformer.training.loop.FitResult`. run_dir: the run directory.
        is_main: True on rank 0 (the process that prints).
    """

    fit: FitResult
    run_dir: Path
    is_main: bool

    def summary(self) -> str:
        """One line: steps, time, tokens/s, best validation loss/perplexity, where the checkpoint is."""
        f = self.fit
        text = (
            f"trained {count(f.steps, 'step')} ({f.epochs:.2f} epochs, stopped by {f.stopped_by}) in "
            f"{f.run_seconds:.1f} s, "
            f"{f.tokens_per_second:,.0f} target tokens/s"
        )
        if f.best_valid_loss is not None and f.best_metric != "loss" and f.best_score is not None:
            text += f"; best valid {f.best_metric} {f.best_score:.2f} (loss {f.best_valid_loss:.4f})"
            text += f" at step {f.best_step:,}"
        elif f.best_valid_loss is not None:
            text += (
                f"; best valid loss {f.best_valid_loss:.4f} (ppl {f.best_valid_perplexity:.3f}) at step {f.best_step:,}"
            )
        return text + f"; checkpoint: {f.checkpoint}"


def train_run(
    file_sections: ConfigSections,
    flag_sections: ConfigSections,
    out_dir: str | Path | None,
    resume: bool = False,
    command: Sequence[str] | None = None,
    overwrite: bool = False,
    init_from: str | Path | None = None,
) -> RunResult:
    """Prepare data, tokenizers and model from the configs, and train (the work of ``dotformer train``).

    Args:
        file_sections: the config file's tables (empty without --config).
        flag_sections: the values of the flags given on the command line (they override the file).
        out_dir: the run directory (None: ``runs/<dataset>-<preset>``).
        resume: continue the run in ``out_dir``.
        command: the command line, recorded in run.json.
        overwrite: start afresh in ``out_dir`` even though it holds a run (its run.json, data/, checkpoints and
            metrics are deleted first; other files are left alone; a directory that is not a run is refused).
        init_from: fine-tune: start from this checkpoint's weights, tokenizers and model config
            (:mod:`dotformer.training.finetune`); a fresh optimizer and schedule. Not with ``resume``.

    Returns:
        :class:`RunResult`.

    Raises:
        ConfigError: bad configs, a missing dataset, an existing run without --resume.
        CheckpointError: --resume with nothing to resume, or with a model or data config that differs from the run's.
        DataError / MissingDataError: the corpus cannot be read. TrainingError: see :func:`fit`.
    """
    from dotformer.training.distributed import setup_distributed, teardown_distributed

    if resume and (overwrite or init_from is not None):
        flag = "--overwrite" if overwrite else "--init-from"
        raise ConfigError(f"--resume continues a run as it is: it cannot be combined with {flag}")
    invocation = {
        "command": list(command if command is not None else sys.argv),
        "config_file": None if file_sections.source == "defaults" else file_sections.source,
        "flags": {name: _jsonable(getattr(flag_sections, name)) for name in SECTIONS},
    }
    sections = merge(file_sections, flag_sections)
    dataset = sections.data.get("dataset")
    if out_dir is None:
        if not dataset:
            raise ConfigError("no dataset: pass --data (cmudict, bible, copy, reverse, a TSV file, or SRC,TGT files)")
        preset = sections.model.get("preset") or TASK_PRESETS.get(NAMED_TASKS.get(dataset, "translation"))
        out_dir = default_run_dir(dataset, preset)
    run_dir = Path(out_dir)
    record = None
    if resume:  # the run's own configs take the place of the defaults
        record = _read_run_json(run_dir)
        sections = merge(_record_sections(record), file_sections, flag_sections)
    elif not dataset:
        raise ConfigError("no dataset: pass --data (cmudict, bible, copy, reverse, a TSV file, or SRC,TGT files)")
    train_config = TrainConfig.from_dict(sections.train, f"{file_sections.source} [train]")
    if not train_config.has_budget:
        raise ConfigError("no training budget: pass --max-steps, --max-minutes or --max-epochs (or set one in [train])")
    context = setup_distributed(train_config.device)
    try:
        if record is not None:
            prepared = _prepare_resume(run_dir, record, sections, train_config, invocation, context.is_main)
        else:
            prepared = _prepare_fresh(run_dir, sections, train_config, invocation, context, overwrite, init_from)
        return _train(prepared, run_dir, resume, context.is_main)
    finally:
        teardown_distributed(context)


def _train(prepared: _Prepared, run_dir: Path, resume: bool, is_main: bool) -> RunResult:
    import torch

    from dotformer.data.batching import encode_pairs
    from dotformer.model import Transformer
    from dotformer.training.loop import TrainData, fit

    p = prepared
    torch.manual_seed(p.train_config.seed)  # the model's initial weights
    model = Transformer(p.model_config)
    data = TrainData(
        train=encode_pairs(p.train_pairs, p.src_tokenizer, p.tgt_tokenizer),
        valid=encode_pairs(p.valid_pairs, p.src_tokenizer, p.tgt_tokenizer),
        src_tokenizer=p.src_tokenizer,
        tgt_tokenizer=p.tgt_tokenizer,
        valid_pairs=p.valid_pairs,
    )
    if p.init_from is not None and is_main:
        import warnings

        from dotformer.checkpoint import CheckpointWarning
        from dotformer.training.finetune import unknown_symbols_warning

        message = unknown_symbols_warning(data.train, p.init_from)
        if message:
            warnings.warn(message, CheckpointWarning, stacklevel=2)
    info = {"task": p.task, "dataset": p.data_config.dataset, "data": p.data_config.to_dict()}
    if is_main and p.train_config.progress:
        for line in p.data_lines:
            print(f"data: {line}", file=sys.stderr)
    result = fit(model, data, p.train_config, run_dir=run_dir, info=info, resume=resume, init_from=p.init_from)
    return RunResult(fit=result, run_dir=run_dir, is_main=is_main)


__all__ = [
    "ConfigSections",
    "DEFAULT_BPE_VOCAB",
    "NAMED_TASKS",
    "RunResult",
    "SECTIONS",
    "TASK_PRESETS",
    "build_model_config",
    "check_keys",
    "check_no_run_there",
    "default_run_dir",
    "merge",
    "read_config_file",
    "resolve_data_config",
    "train_run",
    "versions",
    "write_json_atomic",
]
