"""Training config files: the TOML tables ``[model]``, ``[train]``, ``[data]`` read, checked and layered.

Config precedence, lowest first: built-in defaults (with per-task choices: tokenizers, preset), the task's defaults
(:meth:`dotformer.runs.task.Task.defaults`: the model and recipe of the task's shipped config,
:func:`recipe_defaults`), the config file's sections, then command-line flags (:func:`merge`). The ``[data]`` table
is the task's own (:class:`~dotformer.data.config.DataConfig` for pairs, :class:`~dotformer.data.config.LMDataConfig`
for a language model): which task a file is for is its ``[data] task``, else its dataset's
(:func:`dotformer.runs.tasks.task_of_section`).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dotformer.config import PRESETS, ModelConfig
from dotformer.data.config import data_table
from dotformer.errors import ConfigError
from dotformer.training.config import TrainConfig

SECTIONS = ("model", "train", "data")
BUDGETS = ("max_steps", "max_minutes", "max_epochs")  # never a default: a run's length is the user's choice


@dataclass(frozen=True)
class ConfigSections:
    """The raw ``[model]``, ``[train]`` and ``[data]`` tables of a config file (or of flags, or of run.json).

    Attributes:
        model: ModelConfig fields (without the vocabulary sizes) plus an optional "preset".
        train: TrainConfig fields. data: the task's data config fields (DataConfig or LMDataConfig).
        source: where they came from, for error messages.
        origins: where each key came from (``"model.d_ff"`` -> a config file's path, the flag that set it,
            ``"command line"`` or ``"defaults"``); a key it lacks came from ``source``.
    """

    model: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    source: str = "defaults"
    origins: dict[str, str] = field(default_factory=dict)

    def origin(self, section: str, key: str) -> str:
        """Where ``[section] key`` came from: a config file's path, a flag, ``"command line"`` or ``"defaults"``."""
        return self.origins.get(f"{section}.{key}", self.source)


def read_config_file(path: str | Path) -> ConfigSections:
    """Read a TOML config file with the sections ``[model]``, ``[train]``, ``[data]`` (all optional).

    ``path`` is a file, or the name of a config shipped with the package (``"g2p"``: see
    :mod:`dotformer.runs.shipped_configs`).

    Raises:
        ConfigError: not TOML, an unknown section, or an unknown key (the message names the file and the key).
        MissingDataError (a FileNotFoundError): no such file and no shipped config of that name.
    """
    from dotformer.runs.shipped_configs import find_config_file

    path = find_config_file(path)
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ModuleNotFoundError:
            raise ConfigError("reading TOML config files needs Python 3.11 or the tomli package") from None
    with open(path, "rb") as f:
        try:
            table = tomllib.load(f)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    unknown = sorted(set(table) - set(SECTIONS))
    if unknown:
        raise ConfigError(f"{path}: unknown section or key {unknown[0]!r} (sections: [model], [train], [data])")
    for name in SECTIONS:
        if name in table and not isinstance(table[name], dict):
            raise ConfigError(f"{path}: {name} must be a table, [{name}]")
    sections = ConfigSections(
        model=dict(table.get("model", {})),
        train=dict(table.get("train", {})),
        data=data_table(table.get("data", {}), str(path)),  # [data] train = ... is the dataset
        source=str(path),
    )
    check_keys(sections)
    return sections


def recipe_defaults(name: str | None, fine_tuning: bool = False) -> ConfigSections:
    """The ``[model]`` and ``[train]`` tables of the shipped config ``name``, without its budgets: a task's defaults,
    between the built-in defaults and the config file. So ``dotformer train --data mine.tsv --task g2p
    --max-minutes 10`` trains the model and recipe that ``--config g2p`` trains, sized for a few minutes on a CPU,
    rather than the paper's base recipe (4,096-token batches, 4,000 warmup steps) that would not leave its warmup in
    that time.

    Args:
        name: a shipped config's name (None: no defaults).
        fine_tuning: ``--init-from``: only the recipe (the model is the checkpoint's, dropout included).
    """
    if name is None:
        return ConfigSections(source="defaults")
    recipe = read_config_file(name)
    train = {key: value for key, value in recipe.train.items() if key not in BUDGETS}
    return ConfigSections(model={} if fine_tuning else dict(recipe.model), train=train, source="defaults")


def budgeted_train_config(
    section: dict[str, Any], file_sections: ConfigSections, flag_sections: ConfigSections
) -> TrainConfig:
    """The ``[train]`` section (merged from defaults, ``file_sections`` and ``flag_sections``) as a
    :class:`TrainConfig` that has a budget (one of :data:`BUDGETS`).

    An invalid value that comes from the config file is reported as ``g2p.toml [train] max_steps must be ...``,
    others as ``TrainConfig.max_steps must be ...``.

    Raises:
        ConfigError: an invalid field, or no budget (the message names the flags that set one).
    """
    source = f"{file_sections.source} [train]"
    file_keys = set(file_sections.train) - set(flag_sections.train)
    try:
        config = TrainConfig.from_dict(section, source)
    except ConfigError as exc:
        field = re.match(r"TrainConfig\.(\w+) ", str(exc))
        if field is None or field.group(1) not in file_keys:
            raise
        raise ConfigError(f"{source} {str(exc).removeprefix('TrainConfig.')}") from None
    if not config.has_budget:
        raise ConfigError("no training budget: pass --max-steps, --max-minutes or --max-epochs (or set one in [train])")
    return config


def check_keys(sections: ConfigSections) -> None:
    """Raise ConfigError naming the first unknown key of ``[model]`` or ``[train]`` and the file it came from (the
    ``[data]`` table is its task's: :func:`dotformer.runs.tasks.read_task_config_file` checks it)."""
    model_keys = {f.name for f in dataclasses.fields(ModelConfig)} - {"src_vocab_size", "tgt_vocab_size"} | {"preset"}
    known = {"model": model_keys, "train": {f.name for f in dataclasses.fields(TrainConfig)}}
    for name in ("model", "train"):
        for key in getattr(sections, name):
            if key not in known[name]:
                raise ConfigError(
                    f"{sections.source}: unknown key {key!r} in [{name}] (known: {', '.join(sorted(known[name]))})"
                )


# [data] keys that say one thing two ways: a layer that gives one drops the other from the layers below it
DATA_RIVALS = {
    "src_tokenizer": "src_tokenizer_file",
    "src_tokenizer_file": "src_tokenizer",
    "tgt_tokenizer": "tgt_tokenizer_file",
    "tgt_tokenizer_file": "tgt_tokenizer",
}


def merge(*layers: ConfigSections) -> ConfigSections:
    """Later layers override earlier ones, key by key within each section.

    A later layer's model ``preset`` names a whole shape: it also replaces the earlier layers' values of the fields
    that preset defines (``--config g2p --preset tiny`` trains the tiny model, not g2p.toml's d_model with a tiny
    label); fields the preset does not define (``norm_first``, ``activation``, ...) carry over. Likewise a later
    layer's tokenizer file replaces the earlier layers' tokenizer kind of that side, and the other way round
    (``--config bible --src-tokenizer-file tok.json`` reads the file instead of training bible.toml's BPE).
    """
    merged: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    origins: dict[str, str] = {}
    for layer in layers:
        preset = layer.model.get("preset")
        if preset in PRESETS:
            for key in PRESETS[preset]:
                merged["model"].pop(key, None)
                origins.pop(f"model.{key}", None)
        for key, rival in DATA_RIVALS.items():
            if key in layer.data:
                merged["data"].pop(rival, None)
                origins.pop(f"data.{rival}", None)
        for name in SECTIONS:
            merged[name].update(getattr(layer, name))
            origins.update({f"{name}.{key}": layer.origin(name, key) for key in getattr(layer, name)})
    return ConfigSections(**merged, source=layers[-1].source if layers else "defaults", origins=origins)


__all__ = [
    "BUDGETS",
    "SECTIONS",
    "ConfigSections",
    "budgeted_train_config",
    "check_keys",
    "merge",
    "read_config_file",
    "recipe_defaults",
]
