"""Where the library's log messages go while a ``dotformer`` command runs: standard error, one line each.

The library logs through :mod:`logging` under the logger "dotformer" and configures nothing, so a Python user decides
what is shown (``logging.getLogger("dotformer").setLevel(logging.WARNING)`` silences the informational lines). The
command line attaches one handler for the length of a command: INFO lines as they are, warnings as
``dotformer COMMAND: warning: ...``, written through tqdm so that they appear above a progress bar. Python warnings
(``warnings.warn``, e.g. a checkpoint without a manifest) become the same one line instead of file:line and source.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import warnings
from collections.abc import Iterator
from typing import Any, TextIO

LOGGER = "dotformer"


class StderrLineHandler(logging.Handler):
    """Writes each record as one line on the current ``sys.stderr`` (above any tqdm bar)."""

    def __init__(self, command: str, level: int = logging.INFO) -> None:
        super().__init__(level)
        self.command = command

    def format(self, record: logging.LogRecord) -> str:
        """The message; warnings and errors prefixed with the command, like the CLI's error lines."""
        message = " ".join(record.getMessage().splitlines())
        if record.levelno >= logging.WARNING:
            message = f"dotformer {self.command}: {record.levelname.lower()}: {message}"
        if record.exc_info:  # a bug (logger.exception): its traceback follows, for the report
            message += "\n" + logging.Formatter().formatException(record.exc_info)
        return message

    def emit(self, record: logging.LogRecord) -> None:
        try:
            from tqdm import tqdm

            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # never let a log line break a command (logging's own convention)
            self.handleError(record)


@contextlib.contextmanager
def command_logging(command: str, level: int = logging.INFO) -> Iterator[logging.Handler]:
    """Route the "dotformer" logger and Python warnings to standard error (one line each) while the block runs, then
    restore both as they were."""
    logger = logging.getLogger(LOGGER)
    handler = StderrLineHandler(command, level)
    previous_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)

    def show_warning(message: Any, category: type, filename: str, lineno: int, file: TextIO | None = None,
                     line: str | None = None) -> None:  # fmt: skip
        text = " ".join(str(message).splitlines())
        handler.emit(logging.LogRecord(LOGGER, logging.WARNING, filename, lineno, text, None, None))

    try:
        with warnings.catch_warnings():  # restores warnings.showwarning afterwards
            warnings.showwarning = show_warning
            yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous_level)
