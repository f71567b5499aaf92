"""Plain text for language models: a file's lines, or the verses of one English Bible, and their held-out splits.

A language model reads text, not pairs. A :class:`TextCorpus` is the text as lines in reading order, each with a
group key: the OSIS book of a Bible verse ("Gen", "Matt"), or a piece of ``PIECE_LINES`` consecutive lines of a file.
Splits hold out whole groups (whole books, or whole pieces of a file), so no held-out line has its neighbours in the
training text: the Bible translation job holds out its test books the same way. The dealing itself is
:func:`dotformer.data.prepared.splits.assign_splits`'s (seeded, whole groups), so both jobs split alike.

Datasets: ``"bible"`` (the King James Version), ``"bible:WEB"`` (the World English Bible) or ``"bible:MODULE"`` for
any installed SWORD module (:mod:`dotformer.data.read.bible` reads them), or the path of a UTF-8 text file.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dotformer.data.read.bible import (
    _missing_message,
    book_ids,
    find_modules,
    read_verses,
    resolve_module,
    sword_libraries,
)
from dotformer.data.read.textio import iter_text_lines, read_text_lines
from dotformer.errors import ConfigError, DataError, MissingDataError

PIECE_LINES = 100  # lines of a file held out together at most (a file has no books)
MIN_PIECES = 10  # a short file is cut in at least this many pieces, so its valid and test splits leave it most
DEFAULT_BIBLE_MODULE = "KJV"


@dataclass
class TextCorpus:
    """Text in reading order.

    Attributes:
        name: the source, e.g. ``"bible:KJV"`` or ``"corpus.txt"``.
        lines: the lines (verses), without line ends; empty lines of a file are kept (paragraph breaks).
        groups: one key per line, what a split keeps together (OSIS book, or ``"lines 1-100"``).
        report: JSON-serialisable facts (lines, characters, module).

    Raises:
        DataError: ``groups`` and ``lines`` differ in length.
    """

    name: str
    lines: list[str]
    groups: list[str]
    report: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.groups) != len(self.lines):
            raise DataError(f"text {self.name}: {len(self.groups)} group keys for {len(self.lines)} lines")


def read_text_corpus(dataset: str, sword_path: str | None = None) -> TextCorpus:
    """Read ``"bible"``, ``"bible:MODULE"`` or a UTF-8 text file (see the module docstring).

    Raises:
        MissingDataError: no such file, pysword missing, or the Bible module not installed (with the apt-get line).
        DataError: an empty file or invalid UTF-8 (FILE:LINE).
    """
    if dataset == "bible" or dataset.startswith("bible:"):
        module = dataset.partition(":")[2] or DEFAULT_BIBLE_MODULE
        return read_bible_text(module, sword_path)
    return read_file_text(dataset)


def read_file_text(path: str | Path) -> TextCorpus:
    """A text file's lines, grouped in pieces of :data:`PIECE_LINES` lines (fewer in a file shorter than
    :data:`MIN_PIECES` such pieces: at least :data:`MIN_PIECES` pieces, or one line each).

    Raises:
        MissingDataError: no such file. DataError: empty, or not UTF-8 (FILE:LINE).
    """
    lines = read_text_lines(path)
    group_of, names = pieces(len(lines))
    groups = [names[number] for number in group_of.tolist()]
    report = {"format": "text", "lines": len(lines), "characters": sum(len(line) for line in lines)}
    return TextCorpus(str(path), lines, groups, report)


def pieces(count: int) -> tuple[np.ndarray, list[str]]:
    """The groups of the ``count`` lines of a file: (count,) int64 piece numbers, and the pieces' names
    ("lines 1-100"). A piece is :data:`PIECE_LINES` lines, fewer in a short file (at least :data:`MIN_PIECES`
    pieces, or one line each)."""
    piece = max(1, min(PIECE_LINES, count // MIN_PIECES))
    names = [f"lines {start + 1}-{min(start + piece, count)}" for start in range(0, count, piece)]
    return np.arange(count, dtype=np.int64) // piece, names


class TextReader:
    """The lines of a language model's text read in passes (as :class:`~dotformer.data.read.types.PairReader` reads
    pairs): a file streamed a block at a time (its groups are pieces, numbered once the lines are counted: see
    :func:`pieces`), or the verses of a Bible in memory, grouped by book.

    Raises:
        MissingDataError, DataError: as :func:`read_text_corpus` (a file's lines are checked as a pass reads them).
    """

    def __init__(self, dataset: str, sword_path: str | None = None) -> None:
        self.name = dataset
        self.groups: list[str] | None = None  # one key per line (a Bible's books); None for a file
        self.report: dict[str, Any] = {"format": "text"}
        self._lines: list[str] | None = None
        if dataset == "bible" or dataset.startswith("bible:"):
            corpus = read_bible_text(dataset.partition(":")[2] or DEFAULT_BIBLE_MODULE, sword_path)
            self.name, self._lines, self.groups, self.report = corpus.name, corpus.lines, corpus.groups, corpus.report

    @property
    def grouped(self) -> bool:
        """Whether :meth:`records` gives group keys (a Bible's books)."""
        return self.groups is not None

    def records(self) -> Iterator[tuple[str, str | None]]:
        """One pass over the lines in reading order, each with its group key (None for a file)."""
        if self._lines is not None:
            assert self.groups is not None
            yield from zip(self._lines, self.groups, strict=True)
            return
        for line in iter_text_lines(self.name):
            yield line, None


def read_bible_text(module: str = DEFAULT_BIBLE_MODULE, sword_path: str | None = None) -> TextCorpus:
    """Every non-empty verse of one SWORD module in canonical order, one verse a line, grouped by OSIS book.

    Raises:
        MissingDataError: pysword is not installed, or the module is not (the message gives the apt-get line).
        DataError: the module cannot be read.
    """

    libraries = sword_libraries(sword_path)
    info = resolve_module(module, find_modules(libraries))
    if info is None:
        raise MissingDataError(_missing_message([module], (module,), libraries))
    verses = [(ref.book, text) for ref, text in read_verses(info).items() if text.strip()]
    lines = [text for _, text in verses]
    report = {"format": "bible", "module": info.module_id, "lines": len(lines)}
    report["characters"] = sum(len(line) for line in lines)
    return TextCorpus(f"bible:{module}", lines, [book for book, _ in verses], report)


def check_books(corpus: Any, books: Sequence[str] | None) -> list[str]:
    """OSIS ids of ``books`` (names, ids or abbreviations) held out of a Bible (none for none); ``corpus``: a text or
    labelled texts (a :class:`TextCorpus`, a :class:`TextReader`, a labelled reader: their ``name`` and ``report``).

    Raises:
        ConfigError: the corpus is not a Bible, or a name matches no book.
    """
    if not books:
        return []
    if corpus.report.get("format") != "bible":
        raise ConfigError(f"test books hold out Bible books; {corpus.name} is not a Bible (use --test FILE)")
    return book_ids(list(books))
