"""A training run from end to end, as ``dotformer train`` does it: configs from a TOML file and flags, the corpus
read and split, tokenizers trained, the model built, :func:`dotformer.training.fit` called, everything recorded in a
run directory.

Run directory layout::

    RUN/run.json          dataset, task, every config, versions, command lines and flags (the first and each resume)
    RUN/data/             the saved split (train.tsv, valid.tsv, test.tsv, split.json) and the tokenizers
    RUN/metrics.jsonl     one JSON object per logged step and per validation pass
    RUN/checkpoints/step_XXXXXXX/, RUN/last/, RUN/best/    checkpoints (see dotformer.checkpoint)

Config precedence, lowest first: built-in defaults (with per-task choices: tokenizers, preset), the task's defaults
(the ``[model]`` and ``[train]`` of its shipped config: g2p for g2p and exact, bible for translation; see
:func:`~dotformer.training.config_files.task_defaults`), the config file's sections ``[model]``, ``[train]``,
``[data]``, then command-line flags. A warmup that neither the file nor a flag sets is fitted to a budget of known
steps, and a warmup longer than the budget can reach is warned about before step 1
(:mod:`~dotformer.training.warmup`). On ``--resume`` the run's own run.json takes
the place of the defaults and the config file; the model and data may not change (CheckpointError), the recipe and
budgets may.

The parts, one concern each (their names are re-exported here): :mod:`~dotformer.training.config_files` (TOML
files, layering, key checks), :mod:`~dotformer.training.preparation` (data, tokenizers, model config for a fresh,
fine-tuned or resumed run), :mod:`~dotformer.training.records` (run.json, versions).
"""

from __future__ import annotations

import logging
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
    budgeted_train_config,
    check_keys,
    merge,
    read_config_file,
    task_defaults,
)
from dotformer.training.preparation import (
    DEFAULT_BPE_VOCAB,
    _prepare_fresh,
    _prepare_resume,
    _Prepared,
    build_model_config,
    default_run_dir,
    epoch_steps_of,
    resolve_data_config,
)
from dotformer.training.progress import count
from dotformer.training.records import (
    _read_run_json,
    check_no_run_there,
    invocation_of,
    removed_if_unfinished,
    resumed_sections,
    versions,
    write_json_atomic,
)

if TYPE_CHECKING:
    from dotformer.training.loop import FitResult

logger = logging.getLogger(__name__)  # "dotformer.training.run": warnings about the recipe before step 1
ANY_VOCAB_SIZE = 1 << 20  # the vocabulary sizes of the model config checked before the data is read (not yet known)


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
    extend_vocab: bool = False,
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
            (:mod:`dotformer.training.finetune`); a fresh optimizer and schedule. Not with ``resume``. Data with
            symbols the checkpoint's vocabulary does not know is refused (CheckpointError), unless
        extend_vocab: with ``init_from``: append those symbols to the checkpoint's char/symbol vocabularies; their
            embedding and output rows start as a fresh model's, every other weight is the checkpoint's.

    Returns:
        :class:`RunResult`.

    A run that fails before its first checkpoint removes the directories it made for ``out_dir`` (none that existed
    before), so the same ``out_dir`` can be tried again (:func:`~dotformer.training.records.removed_if_unfinished`);
    the [model] fields of a fresh run are checked before anything is written.

    Raises:
        ConfigError: bad configs, a missing dataset, an existing run without --resume.
        CheckpointError: --resume with nothing to resume, or with a model or data config that differs from the run's.
        DataError / MissingDataError: the corpus cannot be read. MissingExtraError: an option's package is not
            installed (:func:`check_requirements`, before anything is read or written). TrainingError: see :func:`fit`.
    """
    from dotformer.training.distributed import setup_distributed, teardown_distributed

    if resume and (overwrite or init_from is not None):
        flag = "--overwrite" if overwrite else "--init-from"
        raise ConfigError(f"--resume continues a run as it is: it cannot be combined with {flag}")
    if extend_vocab and init_from is None:
        raise ConfigError("--extend-vocab extends the vocabulary of a checkpoint: it needs --init-from CKPT")
    invocation = invocation_of(file_sections, flag_sections, command)
    sections = merge(file_sections, flag_sections)
    dataset = sections.data.get("dataset")
    if dataset and not resume:  # the task's model and recipe under the file's and the flags' (config_files.py)
        task = sections.data.get("task") or NAMED_TASKS.get(dataset, "translation")
        sections = merge(task_defaults(task, fine_tuning=init_from is not None), file_sections, flag_sections)
    explicit_warmup = any("warmup_steps" in layer.train for layer in (file_sections, flag_sections))
    if out_dir is None:
        if not dataset:
            raise ConfigError("no dataset: pass --data (cmudict, bible, copy, reverse, a TSV file, or SRC,TGT files)")
        preset = sections.model.get("preset") or TASK_PRESETS.get(NAMED_TASKS.get(dataset, "translation"))
        out_dir = default_run_dir(dataset, preset)
    run_dir = Path(out_dir)
    record = None
    if resume:  # the run's own configs take the place of the defaults
        record = _read_run_json(run_dir)
        sections = resumed_sections(record, file_sections, flag_sections)
    elif not dataset:
        raise ConfigError("no dataset: pass --data (cmudict, bible, copy, reverse, a TSV file, or SRC,TGT files)")
    train_config = budgeted_train_config(sections.train, file_sections, flag_sections)
    check_requirements(train_config)
    if record is None and init_from is None:  # before the run directory is made: bad [model] fields are one line
        task = sections.data.get("task") or NAMED_TASKS.get(dataset, "translation")
        build_model_config(sections.model, task, ANY_VOCAB_SIZE, ANY_VOCAB_SIZE, False)
    context = setup_distributed(train_config.device)
    try:
        with removed_if_unfinished(run_dir, context.is_main):  # a failure before the first checkpoint: no leftovers
            if record is not None:
                prepared = _prepare_resume(run_dir, record, sections, train_config, invocation, context.is_main)
            else:
                prepared = _prepare_fresh(
                    run_dir,
                    sections,
                    train_config,
                    invocation,
                    context,
                    overwrite,
                    init_from,
                    explicit_warmup,
                    extend_vocab,
                )
            return _train(prepared, run_dir, resume, context.is_main, context.device.type, context.world_size)
    finally:
        teardown_distributed(context)


# what an option needs beyond the core: TrainConfig field, value -> (extra, module, the option as the user wrote it)
_OPTION_NEEDS: dict[tuple[str, object], tuple[str, str, str]] = {
    ("best_metric", "wer"): ("eval", "rapidfuzz", "--best-metric wer"),
    ("best_metric", "per"): ("eval", "rapidfuzz", "--best-metric per"),
    ("best_metric", "bleu"): ("eval", "sacrebleu", "--best-metric bleu"),
    ("best_metric", "chrf"): ("eval", "sacrebleu", "--best-metric chrf"),
    ("tensorboard", True): ("tensorboard", "tensorboard", "--tensorboard"),
}


def check_requirements(config: TrainConfig) -> None:
    """Check before any data is read or step is taken that the packages the options ask for are installed, so that
    a missing one does not stop the run at its first validation pass (or first log line) with nothing saved.

    Raises:
        MissingExtraError: one line naming the option, the missing package and the ``pip install`` that brings it.
    """
    from dotformer.errors import require_extra

    for (name, value), (extra, module, option) in _OPTION_NEEDS.items():
        if getattr(config, name) == value:
            require_extra(extra, module, option)


def _train(
    prepared: _Prepared, run_dir: Path, resume: bool, is_main: bool, device_type: str = "cpu", world_size: int = 1
) -> RunResult:
    import torch

    from dotformer.data.batching import encode_pairs
    from dotformer.model import Transformer
    from dotformer.training.loop import fit
    from dotformer.training.state import TrainData
    from dotformer.training.warmup import peak_flops, warmup_warning

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
    if is_main and not resume:  # a resumed run was warned about when it started
        c = p.train_config
        epoch_steps = epoch_steps_of(c, data.train, world_size) if c.max_epochs is not None else None
        flops = peak_flops(device_type, torch.get_num_threads())
        message = warmup_warning(c, epoch_steps, model.num_parameters(), flops)
        if message:
            logger.warning(message)
    info = {"task": p.task, "dataset": p.data_config.dataset, "data": p.data_config.to_dict()}
    init_from = p.init_from
    if p.extend_vocab and init_from is not None:  # the grown tables: copied here by rows, not by fit's strict copy
        from dotformer.training.finetune import load_extended_weights

        load_extended_weights(model, init_from)
        info["init_from"] = str(init_from)
        init_from = None
    if is_main and p.train_config.progress:
        for line in p.data_lines:
            print(f"data: {line}", file=sys.stderr)
    result = fit(model, data, p.train_config, run_dir=run_dir, info=info, resume=resume, init_from=init_from)
    return RunResult(fit=result, run_dir=run_dir, is_main=is_main)


__all__ = [
    "ConfigSections",
    "DEFAULT_BPE_VOCAB",
    "NAMED_TASKS",
    "RunResult",
    "SECTIONS",
    "TASK_PRESETS",
    "build_model_config",
    "check_requirements",
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
