"""Exceptions raised by dotformer.

Every error a user can cause derives from :class:`DotformerError`, so the CLI can turn it into one line and a
non-zero exit. Each subclass also derives from the built-in exception a Python user would expect
(``ValueError`` for bad values and shapes, ``FileNotFoundError`` for missing files), so ``except ValueError`` works.
"""

from __future__ import annotations


class DotformerError(Exception):
    """Base class of every error that a user's input (not a bug in dotformer) can cause."""


class ShapeError(DotformerError, ValueError):
    """A tensor has the wrong shape or size; the message names the shapes involved."""


class ConfigError(DotformerError, ValueError):
    """A configuration field is invalid; the message names the field and the value."""


class DataError(DotformerError, ValueError):
    """A corpus or input file is malformed; the message names the file and line."""


class MissingDataError(DotformerError, FileNotFoundError):
    """A corpus or resource is not installed; the message says how to install it."""


class CheckpointError(DotformerError, ValueError):
    """A checkpoint is missing, truncated, corrupted, or does not match the config or vocabulary."""


class TrainingError(DotformerError, RuntimeError):
    """Training cannot go on (a NaN/inf loss, a budget that allows no step); the last good checkpoint is kept."""


class MissingExtraError(MissingDataError):
    """An optional package is not installed; the message names the ``pip install "dotformer[EXTRA]"`` to run.

    Attributes:
        extra: the pip extra that brings the package (e.g. "plots"). module: the missing module (e.g. "matplotlib").
    """

    def __init__(self, message: str, extra: str = "", module: str = "") -> None:
        super().__init__(message)
        self.extra = extra
        self.module = module
