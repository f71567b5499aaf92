"""The ``[data]`` of a language-model run (``dotformer train --task lm``), and reading its TOML config file.

A language model reads one text, not pairs, so its data section is its own: the text, held-out texts or a
seeded split by whole groups (:mod:`dotformer.data.text`), one tokenizer, and the block size. ``[model]`` and
``[train]`` are the translation job's (:class:`~dotformer.config.ModelConfig`, :class:`TrainConfig`); the model is
built decoder-only. The flags of ``dotformer train`` name the same keys (``--tokenizer``, ``--vocab-size``,
``--valid``, ``--test``, ``--test-books``, ``--valid-fraction``, ``--test-fraction``, ``--limit``, ``--sword-path``,
``--tgt-tokenizer-file``, ``--block-size``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from dotformer.data.config import config_from_dict
from dotformer.errors import ConfigError
from dotformer.training.config_files import SECTIONS, ConfigSections

LM_TASK = "lm"
DEFAULT_BLOCK_SIZE = 128
# translation [data] keys that mean one LM key (the flags of dotformer train write them)
_ALIASES = {"src_tokenizer": "tokenizer", "tgt_tokenizer": "tokenizer", "tgt_tokenizer_file": "tokenizer_file",
            "src_tokenizer_file": "tokenizer_file", "train": "dataset"}  # fmt: skip


@dataclass(frozen=True)
class LMDataConfig:
    """Which text a language model trains on and how it is cut; frozen, validated.

    Raises:
        ConfigError: a field out of range (the message names it).
    """

    dataset: str = "bible"  # "bible" (KJV), "bible:WEB", "bible:MODULE", or a UTF-8 text file
    task: str = LM_TASK  # always "lm" (it marks a language-model config)
    valid: str | None = None  # held-out text file for validation; given: nothing is split at random
    test: str | None = None  # held-out text file for testing (saved as the run's data/test.txt)
    limit: int | None = None  # keep only the first N lines of the training text (quick experiments)
    tokenizer: Literal["char", "bpe"] = "char"  # one token per character, or byte-level BPE trained on the train text
    tokenizer_file: str | None = None  # an existing tokenizer instead: HF tokenizer.json or sentencepiece .model
    vocab_size: int | None = None  # at most this many tokens (BPE: the merge budget, default 8000)
    block_size: int = DEFAULT_BLOCK_SIZE  # T, tokens of context per training block (the model's window)
    test_books: tuple[str, ...] | None = None  # bible: whole books held out as the test split
    valid_fraction: float = 0.05  # share of the lines (whole books / pieces of 100 lines) held out for validation
    test_fraction: float = 0.05  # the same for the test split (unused with test_books or a test file)
    sword_path: str | None = None  # bible: the SWORD library root (None: $SWORD_PATH, ~/.sword, /usr/share/sword)

    def __post_init__(self) -> None:
        if self.task != LM_TASK:
            raise ConfigError(f"LMDataConfig.task must be {LM_TASK!r}, got {self.task!r}")
        if self.tokenizer not in ("char", "bpe"):
            raise ConfigError(f"a language model's tokenizer must be char or bpe, got {self.tokenizer!r}")
        if not isinstance(self.block_size, int) or self.block_size < 2:
            raise ConfigError(f"block_size must be an integer >= 2 tokens, got {self.block_size!r}")
        if self.limit is not None and (not isinstance(self.limit, int) or self.limit < 1):
            raise ConfigError(f"limit must be a positive number of lines, got {self.limit!r}")
        if self.test_books is not None:
            object.__setattr__(self, "test_books", tuple(self.test_books))

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-serialisable dict (run.json, every checkpoint's config.json)."""
        data = dataclasses.asdict(self)
        data["test_books"] = list(self.test_books) if self.test_books is not None else None
        return data

    @classmethod
    def from_section(cls, section: dict[str, Any], source: str = "[data]") -> LMDataConfig:
        """Build from a ``[data]`` table or the flags' values, reading the translation names of the same keys.

        Raises:
            ConfigError: an unknown key (named with ``source``), two values for one key, or a bad value.
        """
        data: dict[str, Any] = {}
        for key, value in section.items():
            name = _ALIASES.get(key, key)
            if name in data and data[name] != value:
                raise ConfigError(f"{source}: {key} = {value!r} contradicts {name} = {data[name]!r}")
            data[name] = value
        data.pop("shared_vocab", None)  # one tokenizer: always shared
        return config_from_dict(cls, data, source)


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
