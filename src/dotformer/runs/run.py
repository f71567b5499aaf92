"""A training run from end to end, as ``dotformer train`` does it, for every task: configs from a TOML file and
flags, the data read and split, tokenizers made, the model built, :func:`dotformer.training.fit` called, everything
recorded in a run directory. What differs between tasks (pairs, a language model) is the task's
(:mod:`dotformer.runs.task`); this module is written once for all of them.

Run directory layout::

    RUN/run.json          dataset, task, every config, versions, command lines and flags (the first and each resume)
    RUN/data/             the saved split and the tokenizers (the task's layout)
    RUN/metrics.jsonl     one JSON object per logged step and per validation pass
    RUN/checkpoints/step_XXXXXXX/, RUN/last/, RUN/best/    checkpoints (see dotformer.checkpoint)

Config precedence, lowest first: built-in defaults (with per-task choices: tokenizers, preset), the task's defaults
(the ``[model]`` and ``[train]`` of its shipped config: g2p for g2p and exact, bible for translation, copy for
copy/reverse, lm-bible for a language model), the config file's sections ``[model]``, ``[train]``, ``[data]``, then
command-line flags. A warmup longer than the budget can reach is warned about before step 1
(:mod:`~dotformer.training.warmup`). On ``--resume`` the run's own run.json takes the place of the defaults and the
config file; the model and data may not change (CheckpointError), the recipe and budgets may: a resumed run keeps its
warmup, so extending a budget does not change the steps already taken (only a cooldown, which is a share of the
budget, follows the new budget).

Under ``torchrun`` rank 0 reads the data and writes ``RUN/data`` and run.json; every rank then reads them back, so
that all train on exactly the same data and vocabularies.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dotformer.config import DEFAULT_SEED, ModelConfig
from dotformer.data.prepared.cache import prepared_for
from dotformer.data.prepared.kinds import Prepared, prepare
from dotformer.errors import CheckpointError, ConfigError, require_extra
from dotformer.runs.config_files import ConfigSections, budgeted_train_config, merge
from dotformer.runs.records import (
    check_no_run_there,
    invocation_of,
    read_run_json,
    record_resume,
    removed_if_unfinished,
    resumed_sections,
    write_new_record,
)
from dotformer.runs.task import Loaded, Task
from dotformer.runs.tasks import prepared_source, task_named, task_of_section
from dotformer.training.config import TrainConfig
from dotformer.training.progress import count

if TYPE_CHECKING:
    from dotformer.runs.finetune import InitSource
    from dotformer.training.distributed import DistContext
    from dotformer.training.loop import FitResult

logger = logging.getLogger(__name__)  # "dotformer.runs.run": warnings about the recipe before step 1


@dataclass(frozen=True)
class RunResult:
    """What ``dotformer train`` reports at the end.

    Attributes:
        fit: the :class:`dotformer.training.loop.FitResult`. run_dir: the run directory.
        is_main: True on rank 0 (the process that prints). task: the run's task.
    """

    fit: FitResult
    run_dir: Path
    is_main: bool
    task: Task

    def summary(self) -> str:
        """One line: steps, time, tokens/s, best validation loss/perplexity (and the task's own figure), where the
        checkpoint is."""
        f = self.fit
        text = (
            f"trained {count(f.steps, 'step')} ({f.epochs:.2f} epochs, stopped by {f.stopped_by}) in "
            f"{f.run_seconds:.1f} s, "
            f"{f.tokens_per_second:,.0f} {f.scored}/s"
        )
        if f.best_valid_loss is not None and f.best_metric != "loss" and f.best_score is not None:
            text += f"; best valid {f.best_metric} {f.best_score:.2f} (loss {f.best_valid_loss:.4f})"
            text += f" at step {f.best_step:,}"
        elif f.best_valid_loss is not None:
            ppl = f" (ppl {f.best_valid_perplexity:.3f})" if f.best_valid_perplexity is not None else ""
            text += f"; best valid loss {f.best_valid_loss:.4f}{ppl} at step {f.best_step:,}"
        return text + f"; checkpoint: {f.checkpoint}" + self.task.summary(self.run_dir, f.best_valid_loss)


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
        out_dir: the run directory (None: the task's default, ``runs/<dataset>-<preset>``).
        resume: continue the run in ``out_dir``; its task is the one its run.json records.
        command: the command line, recorded in run.json.
        overwrite: start afresh in ``out_dir`` even though it holds a run (its run.json, data/, checkpoints and
            metrics are deleted first; other files are left alone; a directory that is not a run is refused).
        init_from: fine-tune: start from this checkpoint's weights, tokenizers and model config
            (:mod:`dotformer.runs.finetune`); a fresh optimizer and schedule. Not with ``resume``; only for a task
            that can be fine-tuned (pairs). Data with symbols the checkpoint's vocabulary does not know is refused
            (CheckpointError), unless
        extend_vocab: with ``init_from``: append those symbols to the checkpoint's char/symbol vocabularies; their
            embedding and output rows start as a fresh model's, every other weight is the checkpoint's.

    A run that fails before its first checkpoint removes the directories it made for ``out_dir`` (none that existed
    before), so the same ``out_dir`` can be tried again (:func:`~dotformer.runs.records.removed_if_unfinished`);
    the [model] fields of a fresh run are checked before anything is written.

    Raises:
        ConfigError: bad configs, a missing dataset, an existing run without --resume, a best_metric the task does
            not offer (:meth:`~dotformer.runs.task.Task.check_best_metric`).
        RunBusyError: another process is training in ``out_dir`` (it is named).
        CheckpointError: --resume with nothing to resume, or with a model or data config that differs from the run's.
        DataError / MissingDataError: the data cannot be read. MissingExtraError: an option's package is not
            installed (:func:`check_requirements`, before anything is read or written). TrainingError: see :func:`fit`.
    """
    from dotformer.checkpoint import training_lock
    from dotformer.training.distributed import setup_distributed, teardown_distributed

    if resume and (overwrite or init_from is not None):
        flag = "--overwrite" if overwrite else "--init-from"
        raise ConfigError(f"--resume continues a run as it is: it cannot be combined with {flag}")
    if extend_vocab and init_from is None:
        raise ConfigError("--extend-vocab extends the vocabulary of a checkpoint: it needs --init-from CKPT")
    invocation = invocation_of(file_sections, flag_sections, command)
    sections = merge(file_sections, flag_sections)
    record, source = None, None
    if resume:  # the run's own task and configs take the place of the defaults
        if out_dir is None:
            raise ConfigError("--resume continues the run in --out: give --out RUN")
        record = read_run_json(Path(out_dir))
        task = task_named(str(record["task"]))
        sections = resumed_sections(record, file_sections, flag_sections)
    else:
        if not sections.data.get("dataset") and "task" not in sections.data:
            raise ConfigError("no dataset: pass --data (cmudict, bible, copy, reverse, a TSV file, or SRC,TGT files)")
        prepared_data = prepared_source(sections.data)  # --data DIR of dotformer prepare
        if prepared_data is None:
            task = task_of_section(sections.data)
        else:
            if init_from is not None:
                raise ConfigError(
                    f"--init-from trains on the data read with the checkpoint's tokenizers; {sections.data['dataset']} "
                    f"was prepared with its own: give the data files instead"
                )
            section, source = prepared_data
            task = task_named(str(section.get("task") or source.task))  # the task asked, of data prepared as its own
            file_sections = dataclasses.replace(file_sections, data={})  # the prepared data's settings, and no other
            flag_sections = dataclasses.replace(flag_sections, data=section)
        if init_from is not None and not task.fine_tunable:
            raise ConfigError(f"--init-from fine-tunes a checkpoint; a {task.name} run starts afresh")
        sections = merge(task.defaults(fine_tuning=init_from is not None), file_sections, flag_sections)
    where = str(Path(str(out_dir)) / "run.json") if record is not None else f"{sections.source} [data]"
    data = task.data_config(sections.data, where)
    run_dir = Path(out_dir) if out_dir is not None else task.default_run_dir(data, sections.model)
    train_config = budgeted_train_config(sections.train, file_sections, flag_sections)
    task.check_best_metric(train_config.best_metric)
    check_requirements(train_config)
    if train_config.ctc_weight and not task.joint_ctc:
        raise ConfigError(f"--ctc-weight adds CTC on the encoder of an encoder-decoder (pairs); {task.title} has none")
    if train_config.lora_rank and record is None and init_from is None:  # before anything is read or written
        raise ConfigError("--lora-rank trains adapters on the frozen weights of a checkpoint: give --init-from CKPT")
    if train_config.lora_rank and extend_vocab:
        raise ConfigError(
            "--extend-vocab adds embedding rows that LoRA would keep frozen: fine-tune without --lora-rank"
        )
    if record is None and init_from is None:  # before the run directory is made: bad [model] fields are one line
        task.check_model(sections.model, data)
    context = setup_distributed(train_config.device)
    try:
        from dotformer.training.optim import autocast_dtype

        autocast_dtype(train_config.amp, context.device)  # fp16 on a CPU: one line before anything is read or written
        with (
            removed_if_unfinished(run_dir, context.is_main),  # a failure before the first checkpoint: no leftovers
            training_lock(run_dir) if context.is_main else contextlib.nullcontext(),  # one process trains in it
        ):
            if record is not None:
                check_resumable(task, record, sections, run_dir)
                if context.is_main:
                    record_resume(run_dir, record, invocation, train_config)
                loaded, lines, init = task.load(run_dir, record), [], None
            else:
                loaded, lines, init = _prepare_fresh(
                    task, run_dir, sections, data, train_config, invocation, context, overwrite, init_from,
                    extend_vocab, source,
                )  # fmt: skip
                record = read_run_json(run_dir)
                train_config = TrainConfig.from_dict(record["train"], str(run_dir / "run.json"))
            return _train(task, record, loaded, lines, train_config, run_dir, resume, context, init, extend_vocab)
    finally:
        teardown_distributed(context)


def _prepare_fresh(
    task: Task,
    run_dir: Path,
    sections: ConfigSections,
    data: Any,
    train_config: TrainConfig,
    invocation: dict[str, Any],
    context: DistContext,
    overwrite: bool,
    init_from: str | Path | None,
    extend_vocab: bool,
    source: Any = None,
) -> tuple[Loaded, list[str], InitSource | None]:
    """A fresh run's set-up: the data prepared (or mapped from the cache of prepared data), rank 0 writes ``RUN/data``
    (a reference to it) and run.json, then every rank reads them back. Returns what every rank trains on, what
    preparing said (rank 0), and the fine-tuning source. ``source``: data prepared already, mapped as it is."""
    from dotformer.checkpoint import clear_run_directory
    from dotformer.training.distributed import barrier, check_shared_file

    if not overwrite:
        check_no_run_there(run_dir)
    init = task.read_init(init_from, sections.model, sections.data, sections.origins) if init_from is not None else None
    barrier(context)  # every rank has looked before rank 0 writes
    # every rank: the first to get there prepares the data into the cache, the others wait (no collective call is in
    # flight meanwhile, so a long preparation meets no timeout) and map what it wrote
    progress = train_config.progress and context.is_main
    data = data if source is not None else task.kind_data(data)  # prepared data holds its kind's inputs already
    prepared, init = task.prepare(data, train_config.seed, init, extend_vocab, progress, source)
    if context.is_main:
        for line in prepared.warnings:  # on standard error with --no-progress too
            logger.warning(line)
        if overwrite:  # the old run goes only once the new one's data has been read and accepted
            clear_run_directory(run_dir)
        task.save(prepared, run_dir / "data")
        model_config, preset = task.model_config(sections.model, prepared, init)
        if init is not None:
            invocation = {**invocation, "init_from": str(init.path), **({"extend_vocab": True} if extend_vocab else {})}
            if init.carried:  # what every checkpoint of the run keeps of its base (read back when resuming)
                invocation["from_base"] = init.carried
        configs = (model_config, train_config, prepared.data)
        write_new_record(
            run_dir, prepared.data.dataset, task.name, prepared.corpus, preset, configs, invocation, context.world_size
        )
    barrier(context)
    check_shared_file(run_dir / "run.json", "--out", context)
    lines = prepared.lines if context.is_main else []
    return task.load(run_dir, read_run_json(run_dir)), lines, init  # every rank reads what rank 0 wrote


def check_resumable(task: Task, record: dict[str, Any], sections: ConfigSections, run_dir: Path) -> None:
    """Refuse to resume with other data or model settings than the run's (the file's and the flags' over its own).

    Raises:
        CheckpointError: the first setting that differs, named with both values and run.json.
    """

    saved = json.loads(json.dumps(record["data"]))
    asked = json.loads(json.dumps(task.data_config(sections.data, f"{sections.source} [data]").to_dict()))
    _same_or_raise("data", saved, asked, run_dir)
    saved_model = {**record["model"], "preset": record.get("preset")}
    _same_or_raise("model", saved_model, sections.model, run_dir)


def _same_or_raise(section: str, saved: dict[str, Any], requested: dict[str, Any], run_dir: Path) -> None:
    for key, value in requested.items():
        old = saved.get(key)
        if isinstance(old, list):
            old = tuple(old)
        if isinstance(value, list):
            value = tuple(value)
        if old != value:
            raise CheckpointError(
                f"cannot resume {run_dir}: [{section}] {key} = {value!r} differs from the run's {old!r} "
                f"({run_dir / 'run.json'}); start a new run with --out instead"
            )


# what an option needs beyond the core: TrainConfig field, value -> (extra, module, the option as the user wrote it)
_OPTION_NEEDS: dict[tuple[str, object], tuple[str, str, str]] = {
    ("best_metric", "wer"): ("eval", "rapidfuzz", "--best-metric wer"),
    ("best_metric", "per"): ("eval", "rapidfuzz", "--best-metric per"),
    ("best_metric", "bleu"): ("eval", "sacrebleu", "--best-metric bleu"),
    ("best_metric", "chrf"): ("eval", "sacrebleu", "--best-metric chrf"),
    ("best_metric", "accuracy"): ("eval", "sklearn", "--best-metric accuracy"),
    ("best_metric", "f1"): ("eval", "sklearn", "--best-metric f1"),
    ("tensorboard", True): ("tensorboard", "tensorboard", "--tensorboard"),
}


def check_requirements(config: TrainConfig) -> None:
    """Check before any data is read or step is taken that the packages the options ask for are installed, so that
    a missing one does not stop the run at its first validation pass (or first log line) with nothing saved.

    Raises:
        MissingExtraError: one line naming the option, the missing package and the ``pip install`` that brings it.
    """

    for (name, value), (extra, module, option) in _OPTION_NEEDS.items():
        if getattr(config, name) == value:
            require_extra(extra, module, option)


def _train(
    task: Task,
    record: dict[str, Any],
    loaded: Loaded,
    lines: list[str],
    train_config: TrainConfig,
    run_dir: Path,
    resume: bool,
    context: DistContext,
    init: InitSource | None,
    extend_vocab: bool,
) -> RunResult:
    import torch

    from dotformer.data.batch.batching import sampler_for
    from dotformer.model import Transformer
    from dotformer.training.loop import fit
    from dotformer.training.warmup import peak_flops, steps_per_epoch, warmup_unfinished, warmup_warning

    model_config = ModelConfig.from_dict(record["model"])
    torch.manual_seed(train_config.seed)  # the model's initial weights
    model = Transformer(model_config)
    data = loaded.train_data
    foreseen = False  # the warmup's end was warned about before step 1
    if context.is_main and not resume:  # a resumed run was warned about when it started
        c = train_config
        epoch_steps = None
        if c.max_epochs is not None:
            sampler = sampler_for(data.train, c.max_tokens, c.seed, world_size=context.world_size)
            epoch_steps = steps_per_epoch(sampler.num_batches(0), c.accumulation_steps)
        flops = peak_flops(context.device.type, torch.get_num_threads())
        message = warmup_warning(c, epoch_steps, model.num_parameters(), flops)
        if message:
            logger.warning(message)
            foreseen = True
    if context.is_main and resume:
        message = _cooldown_note(record, train_config, run_dir)
        if message:
            logger.warning(message)
    base = record.get("from_base") if isinstance(record.get("from_base"), dict) else {}  # an imported base's rules
    if isinstance(base.get("text_rules"), dict) and model.generator.bias is not None:
        # an imported base's generator bias only holds dotformer's four special rows down (its released rows have
        # none): kept as it is, so the continued model stays in its family's layout (export --to hf, ct2)
        model.generator.bias.requires_grad_(False)
    info = {**base, "task": task.name, "dataset": loaded.data.dataset, "data": loaded.data.to_dict(), **loaded.info}
    init_path = None if init is None else init.path
    if extend_vocab and init_path is not None:  # the grown tables: copied here by rows, not by fit's strict copy
        from dotformer.runs.finetune import load_extended_weights

        load_extended_weights(model, init_path)
        info["init_from"] = str(init_path)
        init_path = None
    if context.is_main and train_config.progress:
        for line in [*lines, *loaded.lines]:
            print(f"data: {line}", file=sys.stderr)
    result = fit(model, data, train_config, run_dir=run_dir, info=info, resume=resume, init_from=init_path)
    late = warmup_unfinished(train_config, result.steps, result.stopped_by)
    if context.is_main and late and not foreseen:
        logger.warning(late)
    return RunResult(fit=result, run_dir=run_dir, is_main=context.is_main, task=task)


def _cooldown_note(record: dict[str, Any], train_config: TrainConfig, run_dir: Path) -> str | None:
    """The line of :func:`~dotformer.training.schedule.cooldown_resume_note` for a run resumed with
    ``train_config``: its budget before this resume (run.json's previous ``[train]``) and the step it resumes at."""
    from dotformer.checkpoint import TRAIN_STATE_JSON, find_resume_checkpoint, read_json
    from dotformer.training.schedule import cooldown_resume_note

    resumes = record.get("resumes", [])
    before = resumes[-2]["train"] if len(resumes) > 1 else record["train"]
    state = read_json(find_resume_checkpoint(run_dir) / TRAIN_STATE_JSON)
    previous = TrainConfig.from_dict(before, str(run_dir / "run.json"))
    return cooldown_resume_note(previous, train_config, int(state["step"]), float(state.get("seconds", 0.0)))


def prepare_data(
    section: dict[str, Any], seed: int = DEFAULT_SEED, out: str | Path | None = None, **options: Any
) -> Prepared:
    """Prepare the data of a ``[data]`` table once (``dotformer prepare``): into the directory ``out`` (new or empty),
    which ``train --data OUT`` then maps as it is, or into the cache of prepared data (``out`` None), where a run on
    the same files and settings finds it.

    Args:
        section: the ``[data]`` table (its task: :func:`~dotformer.runs.tasks.task_of_section`).
        seed: the seed of a random split (a run with another ``--seed`` on a random split prepares its own).
        out: the directory, or None for the cache.
        options: ``sample_lines`` and ``chunk`` of :meth:`dotformer.data.prepared.skeleton.DataKind.prepare`.

    An encoder's data is prepared for its task: a masked language model's text with ``<mask>`` in its tokenizer, a
    classifier's or a tagger's labelled texts (the ``labelled`` kind).

    Raises:
        ConfigError: no dataset, bad settings, an ``out`` that is a file or a directory that is not empty.
        DataError / MissingDataError: the data cannot be read.
    """

    if not section.get("dataset") and "task" not in section:
        raise ConfigError("no dataset: pass --data (cmudict, bible, copy, reverse, a TSV file, or SRC,TGT files)")
    task = task_of_section(section)
    data = task.kind_data(task.data_config(section, "[data]"))
    if out is None:
        return prepared_for(data, seed, **options)
    return prepare(data, seed, out, **options)


__all__ = ["RunResult", "check_requirements", "check_resumable", "prepare_data", "train_run"]
