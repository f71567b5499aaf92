"""The training configs shipped inside the package, so ``--config g2p`` works after ``pip install dotformer``.

They are package data (``dotformer/configs/*.toml``; in the repository ``src/dotformer/configs`` is a link to the
top-level ``configs/``, the one copy). A ``--config`` value names a file when one exists at that path; a bare name
(no directory part, with or without ``.toml``) that is no file names a shipped config.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from dotformer.errors import ConfigError, MissingDataError

SUFFIX = ".toml"


def shipped_config_dir() -> Path:
    """The directory of the shipped configs inside the installed package."""
    return Path(str(resources.files("dotformer").joinpath("configs")))


def shipped_config_names() -> list[str]:
    """The names of the shipped configs (file names without ``.toml``), sorted: e.g. ``["bible", "copy", "g2p"]``."""
    directory = shipped_config_dir()
    return sorted(p.stem for p in directory.glob(f"*{SUFFIX}")) if directory.is_dir() else []


def find_config_file(value: str | Path) -> Path:
    """The config file that a ``--config`` value means: the file at that path, else the shipped config of that name.

    Args:
        value: a path (``configs/g2p.toml``, ``my.toml``) or a shipped config's name (``g2p`` or ``g2p.toml``).

    Returns:
        The path to read.

    Raises:
        MissingDataError: no such file and no shipped config of that name (the message lists the shipped ones).
        ConfigError: a directory (and no shipped config of that name).
    """
    path = Path(value)
    if path.is_file():
        return path
    text = str(value)
    bare = path.name == text and text not in ("", ".", "..")  # a bare name: no directory part
    if bare:
        stem = text[: -len(SUFFIX)] if text.endswith(SUFFIX) else text
        shipped = shipped_config_dir() / f"{stem}{SUFFIX}"
        if shipped.is_file():
            return shipped
    if path.is_dir():
        raise ConfigError(f"{text} is a directory; give a config file (TOML) or the name of a shipped config")
    if bare:
        names = ", ".join(shipped_config_names()) or "none"
        raise MissingDataError(f"{text}: no such config file, and no shipped config of that name (shipped: {names})")
    raise MissingDataError(f"{text}: no such config file")
