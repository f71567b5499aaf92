"""The table of tasks: the task of a name (``run.json``'s and every checkpoint's ``"task"``), of a ``[data]`` table,
and config files read with their task's ``[data]`` checked.

=====================================  ==========================================
name                                   task
=====================================  ==========================================
g2p, translation, exact, synthetic     :class:`~dotformer.runs.pairs.PairsTask`
lm                                     :class:`~dotformer.runs.text.LanguageModelTask`
mlm                                    :class:`~dotformer.runs.encoder.MaskedLanguageModelTask`
classify                               :class:`~dotformer.runs.encoder.ClassifyTask`
tag                                    :class:`~dotformer.runs.encoder.TagTask`
classify-pairs                         :class:`~dotformer.runs.sentence_pairs.SentencePairTask`
=====================================  ==========================================

A new task is a module of its own (a :class:`~dotformer.runs.task.Task`) and a row of :data:`TASKS`, which the
command line's ``--task`` reads.
"""

from __future__ import annotations

from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dotformer.data.read.types import NAMED_TASKS
from dotformer.errors import ConfigError

if TYPE_CHECKING:
    from dotformer.data.prepared.kinds import Prepared
    from dotformer.runs.config_files import ConfigSections
    from dotformer.runs.task import Task

# task name -> "module:class" of its Task, imported when the task is asked for (the command line lists the names
# without loading the tasks)
TASKS: dict[str, str] = {
    "g2p": "dotformer.runs.pairs:PairsTask",
    "translation": "dotformer.runs.pairs:PairsTask",
    "exact": "dotformer.runs.pairs:PairsTask",
    "synthetic": "dotformer.runs.pairs:PairsTask",
    "lm": "dotformer.runs.text:LanguageModelTask",
    "mlm": "dotformer.runs.encoder:MaskedLanguageModelTask",
    "classify": "dotformer.runs.encoder:ClassifyTask",
    "tag": "dotformer.runs.encoder:TagTask",
    "classify-pairs": "dotformer.runs.sentence_pairs:SentencePairTask",
}


def task_named(name: str) -> Task:
    """The task of a name as run.json and checkpoints record it.

    Raises:
        ConfigError: an unknown name (the message lists the known ones).
    """
    if name not in TASKS:
        raise ConfigError(f"unknown task {name!r}; the tasks are {', '.join(TASKS)}")
    module, _, cls = TASKS[name].partition(":")
    return getattr(import_module(module), cls)(name)  # type: ignore[no-any-return]


def task_of_section(data: dict[str, Any]) -> Task:
    """The task a ``[data]`` table asks for: its ``task``, else the task of a named corpus (cmudict: g2p, bible:
    translation, copy/reverse: synthetic), else translation (a file of pairs).

    Raises:
        ConfigError: an unknown task.
    """
    name = data.get("task") or NAMED_TASKS.get(str(data.get("dataset")), "translation")
    return task_named(str(name))


def prepared_source(
    section: dict[str, Any],
) -> tuple[dict[str, Any], Prepared] | None:
    """When ``section``'s dataset names a prepared directory (``dotformer prepare --out DIR``): the ``[data]`` it was
    prepared from (with the section's settings that are decided at batching time: a block size, a masked language
    model's unit and masking), and the mapped data; else None.

    Other settings beside it are accepted when they are the prepared data's own (a config file's ``[data]``, read
    with ``train --data DIR --config FILE``, as ``dotformer prepare --config FILE`` read it): a value that gives
    the same data settings as the prepared data's (after the task's defaults are filled in) changes nothing.

    Raises:
        ConfigError: a setting beside it that differs from the prepared data's (each named with both values: the
            data settings are fixed when the data is prepared), or another task.
        DataError: a damaged prepared directory.
    """
    from dotformer.data.prepared.kinds import open_prepared
    from dotformer.data.prepared.layout import REPORT_FILE

    dataset = section.get("dataset")
    if not isinstance(dataset, str) or not (Path(dataset) / REPORT_FILE).is_file():
        return None
    prepared = open_prepared(dataset)
    batch_time = prepared.batch_time_fields.get(prepared.task, ())
    asked = section.get("task")
    if asked is not None and task_named(str(asked)).data_task != prepared.task:
        raise ConfigError(f"{dataset} is prepared for task {prepared.task}, not {asked}")
    differing = [
        f"{key} = {section[key]!r} (prepared with {prepared.report['data'].get(key)!r})"
        for key in sorted(set(section) - {"dataset", "task", *batch_time})
        if not prepared.same_setting(key, section[key])
    ]
    if differing:
        raise ConfigError(
            f"{dataset} is prepared data: its data settings were fixed when it was prepared, and "
            f"{', '.join(differing)} would change them; prepare the data again with "
            f"{'them' if len(differing) > 1 else 'it'} (dotformer prepare)"
        )
    data = dict(prepared.report["data"])
    data.update({key: section[key] for key in (*batch_time, "task") if key in section})
    return data, prepared


def read_task_config_file(path: str | Path) -> ConfigSections:
    """A config file's ``[model]``, ``[train]`` and ``[data]`` tables (:func:`~dotformer.runs.config_files.
    read_config_file`), its ``[data]`` checked by the task it is for (keys and values, named with the file).

    Raises:
        ConfigError: not TOML, an unknown section, key or task, or a bad ``[data]`` value.
        MissingDataError: no such file and no shipped config of that name.
    """
    from dotformer.runs.config_files import read_config_file

    sections = read_config_file(path)
    if sections.data:
        task_of_section(sections.data).data_config(sections.data, f"{sections.source} [data]")
    return sections


__all__ = ["TASKS", "prepared_source", "read_task_config_file", "task_named", "task_of_section"]
