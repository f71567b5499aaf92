"""Reading the TOML config file of a language-model run (``dotformer train --task lm``); its ``[data]`` is
:class:`dotformer.data.config.LMDataConfig`.

A language model reads one text, not pairs, so its data section is its own: the text, held-out texts or a
seeded split by whole groups (:mod:`dotformer.data.text`), one tokenizer, and the block size. ``[model]`` and
``[train]`` are the translation job's (:class:`~dotformer.config.ModelConfig`, :class:`TrainConfig`); the model is
built decoder-only. The flags of ``dotformer train`` name the same keys (``--tokenizer``, ``--vocab-size``,
``--valid``, ``--test``, ``--test-books``, ``--valid-fraction``, ``--test-fraction``, ``--limit``, ``--sword-path``,
``--tgt-tokenizer-file``, ``--block-size``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from dotformer.data.config import LM_TASK, LMDataConfig
from dotformer.errors import ConfigError
from dotformer.training.config_files import SECTIONS, ConfigSections


def is_lm_config_file(path: str | Path) -> bool:
    """Whether a ``--config`` file (or shipped name) sets ``[data] task = "lm"``. False for an unreadable file:
    reading it the usual way then reports what is wrong."""
    try:
        table = _read_toml(path)
    except (ConfigError, OSError):
        return False
    data = table.get("data")
    return isinstance(data, dict) and data.get("task") == LM_TASK


def read_lm_config_file(path: str | Path) -> ConfigSections:
    """The ``[model]``, ``[train]``, ``[data]`` tables of a language-model config (``[data]`` checked here, the
    others by the translation job's checks).

    Raises:
        ConfigError: not TOML, an unknown section or key. MissingDataError: no such file or shipped config.
    """
    from dotformer.training.config_files import check_keys

    table = _read_toml(path)
    unknown = sorted(set(table) - set(SECTIONS))
    if unknown:
        raise ConfigError(f"{path}: unknown section or key {unknown[0]!r} (sections: [model], [train], [data])")
    sections = ConfigSections(model=dict(table.get("model", {})), train=dict(table.get("train", {})), source=str(path))
    check_keys(sections)
    data = dict(table.get("data", {}))
    LMDataConfig.from_section(data, f"{path} [data]")  # the keys and values checked now, before any work
    return dataclasses.replace(sections, data=data)


def _read_toml(path: str | Path) -> dict[str, Any]:
    import tomllib

    from dotformer.training.shipped_configs import find_config_file

    found = find_config_file(path)
    with open(found, "rb") as f:
        try:
            return tomllib.load(f)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{found}: not valid TOML ({exc})") from None
