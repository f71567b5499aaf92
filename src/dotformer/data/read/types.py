"""The shared corpus types and the helpers every reader uses: :class:`Pair`, :class:`Corpus`, :class:`CorpusOptions`,
the column and delimiter parsers, the drop/replace bookkeeping of :func:`make_report`, and :func:`describe_corpus`.

The readers (:mod:`.cmudict`, :mod:`.bible`, :mod:`.synthetic`, :mod:`.hf`, :mod:`.tsv`, :mod:`.parallel`) import
this module only; :mod:`dotformer.data.read.corpora` dispatches a spec to them.
"""

from __future__ import annotations

import dataclasses
import re
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from dotformer.errors import ConfigError, DataError

Task = Literal["g2p", "translation", "exact", "synthetic"]
TASKS = ("g2p", "translation", "exact", "synthetic")
FILE_TASKS = ("g2p", "translation", "exact")  # the tasks a user's file may have ("synthetic" is copy/reverse's)
NAMED_SPECS = ("cmudict", "bible", "copy", "reverse")
NAMED_TASKS = {"cmudict": "g2p", "bible": "translation", "copy": "synthetic", "reverse": "synthetic"}
DELIMITER_NAMES = {"tab": "\t", "\\t": "\t", "comma": ",", "semicolon": ";", "pipe": "|", "space": " "}
SOURCE_NAMES = ("source", "src")  # header names found without being asked for (case-insensitive)
TARGET_NAMES = ("target", "tgt")
Column = int | str  # a 0-based column number, or a name from the header row
_BREAK_RUN = re.compile(r"[ \t\r\n]*[\t\r\n][ \t\r\n]*")  # a run of blanks holding a tab or line break


class Pair(NamedTuple):
    """One training example: a source text and the target text the model should produce from it."""

    source: str  # e.g. "abandon" (CMUdict) or a Spanish verse
    target: str  # e.g. "AH0 B AE1 N D AH0 N" or the English verse


@dataclass
class Corpus:
    """The pairs of one source, with what the reader did to them.

    Attributes:
        name: the source, e.g. ``"cmudict"``, ``"bible:SpaRV-KJV"``, ``"data/train.tsv"``.
        task: ``"g2p"``, ``"translation"``, ``"exact"`` (a file scored by exact match) or ``"synthetic"`` (copy /
            reverse, scored by exact match); it picks the metrics and the default tokenizers downstream.
        pairs: the examples, in the source's order.
        groups: one key per pair that a split must not cut (the word for CMUdict and for g2p files, so all
            pronunciations of a word land in one split; the book for the Bible), or ``None``.
        report: JSON-serialisable counts: ``report["pairs"]`` kept, ``report["dropped"]`` reason -> count, and
            source-specific details (``limit`` when a limit cut the corpus).
        keep_groups_together: whether :func:`dotformer.data.prepared.splits.assign_splits` keeps each group in one split
            by default. False for the Bible: its books serve held-out-book splits (``test_groups``), while the default
            split draws random verses.

    Raises:
        DataError: ``groups`` is given with a length different from ``pairs``.
    """

    name: str
    task: Task
    pairs: list[Pair]
    groups: list[str] | None = None
    report: dict[str, Any] = field(default_factory=dict)
    keep_groups_together: bool = True

    def __post_init__(self) -> None:
        if self.groups is not None and len(self.groups) != len(self.pairs):
            raise DataError(f"corpus {self.name}: {len(self.groups)} group keys for {len(self.pairs)} pairs")

    def __len__(self) -> int:
        return len(self.pairs)


class PairReader(ABC):
    """A source of pairs read in passes: each call of :meth:`records` reads the source again from its start, one pair
    at a time, so a corpus of any size is never held whole. The file readers stream (:mod:`.tsv`, :mod:`.parallel`,
    :mod:`.hf`); a corpus built in memory (CMUdict, the Bible, copy/reverse) is read through :class:`CorpusReader`.

    Attributes:
        name: the source, as :attr:`Corpus.name`. task: as :attr:`Corpus.task`.
        grouped: whether :meth:`records` gives group keys (a g2p file's words, the Bible's books).
        keep_groups_together: as :attr:`Corpus.keep_groups_together`.
        report: after a whole pass, the counts of :func:`make_report` (read, pairs kept, dropped by reason, details).
    """

    name: str
    task: Task
    grouped: bool = False
    keep_groups_together: bool = True

    def __init__(self) -> None:
        self.report: dict[str, Any] = {}

    @abstractmethod
    def records(self) -> Iterator[tuple[Pair, str | None]]:
        """One pass over the kept pairs in the source's order, each with its group key (None without groups); the
        report is complete when the pass ends.

        Raises:
            DataError: a malformed row (FILE:LINE in the message); MissingDataError: the source is gone.
        """

    def corpus(self) -> Corpus:
        """The whole source as an in-memory :class:`Corpus` (one pass)."""
        pairs: list[Pair] = []
        groups: list[str] = []
        for pair, group in self.records():
            pairs.append(pair)
            if self.grouped:
                groups.append(group or "")
        return Corpus(self.name, self.task, pairs, groups if self.grouped else None, self.report,
                      self.keep_groups_together)  # fmt: skip


class CorpusReader(PairReader):
    """The :class:`PairReader` of a corpus already in memory (each pass walks its list)."""

    def __init__(self, corpus: Corpus) -> None:
        super().__init__()
        self._corpus = corpus
        self.name, self.task = corpus.name, corpus.task
        self.grouped = corpus.groups is not None
        self.keep_groups_together = corpus.keep_groups_together
        self.report = corpus.report

    def records(self) -> Iterator[tuple[Pair, str | None]]:
        groups = self._corpus.groups
        for i, pair in enumerate(self._corpus.pairs):
            yield pair, (groups[i] if groups is not None else None)

    def corpus(self) -> Corpus:
        return self._corpus


def file_group(task: str, pair: Pair) -> str | None:
    """The group key of a pair of a user's file: the source word for ``g2p`` (a word's pronunciations stay in one
    split, and are its references together), else None."""
    return pair.source if task == "g2p" else None


@dataclass(frozen=True)
class CorpusOptions:
    """How to read a corpus; every source reads only the fields it needs. Frozen and validated.

    Raises:
        ConfigError: a field is out of range (the message names it).
    """

    # --- every source ---
    limit: int | None = None  # keep only the first `limit` pairs (None = all); recorded in report["limit"] when it cuts
    empty_lines: Literal["skip", "error"] = "skip"  # empty source/target: skip and count it, or raise DataError
    task: Task | None = None  # task of a file corpus ("g2p", "translation", "exact"); None = "translation"
    # --- TSV / CSV files ---
    delimiter: str | None = None  # column separator; None = "," for *.csv (with CSV quoting), a tab otherwise
    # the columns of the source and target texts: a 0-based number, or a name of the header row; None = columns 0
    # and 1 of a 2-column file, or the header's "source"/"target" ("src"/"tgt") columns; a file of 3 or more columns
    # without either is refused (which two columns hold the pair is not guessed)
    source_column: Column | None = None
    target_column: Column | None = None
    num_columns: int | None = None  # columns every row must have; None = as many as the first row has
    header: bool | None = None  # the first row holds column names and is skipped; None = yes when a column is named
    # --- CMUdict ---
    strip_stress: bool = False  # drop the stress digits of the vowels (AH0 -> AH); duplicates then are counted, dropped
    # --- Bible (SWORD modules read with pysword) ---
    source_module: str = "SpaRV"  # source-language module: "SpaRV" (Reina-Valera 1909), or any installed module id
    target_module: str = "KJV"  # target-language module: "KJV" (King James) or "WEB" (World English Bible)
    sword_path: str | None = None  # SWORD library root; None = $SWORD_PATH, then ~/.sword, then /usr/share/sword
    bible_max_ratio: float = 2.0  # drop verse pairs whose length ratio (longer / shorter, in characters) exceeds this
    bible_check_alignment: bool = True  # drop whole chapters whose verse numbering is shifted between the modules
    # --- Hugging Face datasets (spec "hf:NAME_OR_PATH") ---
    hf_config: str | None = None  # dataset configuration name, e.g. "de-en" for wmt14
    hf_split: str = "train"  # split to read, e.g. "train", "validation", "train[:1000]"
    hf_data_files: tuple[str, ...] | None = None  # data files for the generic builders ("json", "csv", "text")
    hf_cache_dir: str | None = None  # where datasets caches its arrow files; None = its default (~/.cache/huggingface)
    source_field: str = "source"  # column with the source text, or a key of the "translation" dict (e.g. "es")
    target_field: str = "target"  # column with the target text, or a key of the "translation" dict (e.g. "en")
    # --- synthetic copy / reverse tasks ---
    num_examples: int = 10_000  # number of random sequences
    vocab: int = 20  # number of distinct symbols (a0 ... a9, b0 ..., at most 260)
    min_len: int = 1  # shortest sequence, in symbols
    max_len: int = 10  # longest sequence, in symbols
    seed: int = 0  # seed of the random sequences

    def __post_init__(self) -> None:
        if self.limit is not None and (not isinstance(self.limit, int) or self.limit <= 0):
            raise ConfigError(f"CorpusOptions.limit must be a positive integer or None, got {self.limit!r}")
        if self.empty_lines not in ("skip", "error"):
            raise ConfigError(f"CorpusOptions.empty_lines must be 'skip' or 'error', got {self.empty_lines!r}")
        if self.task is not None and self.task not in TASKS:
            raise ConfigError(f"CorpusOptions.task must be one of {', '.join(TASKS)} or None, got {self.task!r}")
        if self.delimiter is not None:
            object.__setattr__(self, "delimiter", parse_delimiter(self.delimiter, "CorpusOptions.delimiter"))
        for name in ("source_column", "target_column"):
            check_column(getattr(self, name), f"CorpusOptions.{name}")
        if self.source_column is not None and self.source_column == self.target_column:
            raise ConfigError(
                f"CorpusOptions.source_column and target_column are both {self.source_column!r}: the source and the "
                f"target need two different columns"
            )
        numbers = [c for c in (self.source_column, self.target_column) if isinstance(c, int)]
        if self.num_columns is not None and self.num_columns < 2:
            raise ConfigError(
                f"CorpusOptions.num_columns must be at least 2 (a source and a target), got {self.num_columns}"
            )
        if self.num_columns is not None and numbers and self.num_columns <= max(numbers):
            raise ConfigError(
                f"CorpusOptions.num_columns={self.num_columns} has no column {max(numbers)} (columns count from 0)"
            )
        if self.header is None:
            named = any(isinstance(c, str) for c in (self.source_column, self.target_column))
            object.__setattr__(self, "header", named)
        elif not self.header and any(isinstance(c, str) for c in (self.source_column, self.target_column)):
            raise ConfigError(
                f"CorpusOptions: columns named {self.source_column!r}/{self.target_column!r} need a header row "
                f"(header=True), or give column numbers"
            )
        if not self.bible_max_ratio >= 1.0:
            raise ConfigError(f"CorpusOptions.bible_max_ratio must be >= 1, got {self.bible_max_ratio!r}")
        if self.num_examples <= 0:
            raise ConfigError(f"CorpusOptions.num_examples must be positive, got {self.num_examples!r}")
        if not 1 <= self.vocab <= 260:
            raise ConfigError(f"CorpusOptions.vocab must be in [1, 260], got {self.vocab!r}")
        if not 1 <= self.min_len <= self.max_len:
            raise ConfigError(
                f"CorpusOptions needs 1 <= min_len <= max_len, got min_len={self.min_len}, max_len={self.max_len}"
            )

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-serialisable dict (saved with a run's data description)."""
        data = dataclasses.asdict(self)
        if data["hf_data_files"] is not None:
            data["hf_data_files"] = list(data["hf_data_files"])
        return data


def parse_delimiter(value: str, where: str = "delimiter") -> str:
    """One delimiter character from a value or a name: ``"\\t"`` or ``"tab"`` -> a tab, ``"comma"`` -> ``","``,
    also ``semicolon``, ``pipe``, ``space`` (names are what a shell or a TOML file passes easily).

    Raises:
        ConfigError: not one character (and not a name), or a line break.
    """
    if not isinstance(value, str):
        raise ConfigError(f"{where} must be one character, got {value!r}")
    char = DELIMITER_NAMES.get(value.lower(), value) if len(value) != 1 else value
    if len(char) != 1 or char in "\r\n":
        names = ", ".join(name for name in DELIMITER_NAMES if "\\" not in name)
        raise ConfigError(f"{where} must be one character (not a line break) or one of {names}, got {value!r}")
    return char


def parse_column(value: str | int) -> Column:
    """A column as given on a command line: digits -> a 0-based number, anything else -> a header name."""
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return value


def check_column(value: Any, where: str) -> None:
    """Raise ConfigError unless ``value`` is None, a non-negative column number, or a non-empty column name."""
    if value is None or (isinstance(value, str) and value.strip()):
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"{where} must be a column number counting from 0, or a header name, got {value!r}")


def apply_limit(corpus: Corpus, limit: int | None) -> Corpus:
    """Keep the first ``limit`` pairs (and their groups); record ``limit`` and ``pairs_before_limit`` when it cuts.

    Returns the same corpus object, changed in place, for chaining.
    """
    if limit is None or limit >= len(corpus.pairs):
        return corpus
    corpus.report["limit"] = limit
    corpus.report["pairs_before_limit"] = len(corpus.pairs)
    corpus.pairs = corpus.pairs[:limit]
    if corpus.groups is not None:
        corpus.groups = corpus.groups[:limit]
    corpus.report["pairs"] = len(corpus.pairs)
    return corpus


def is_empty(text: str) -> bool:
    """True for a text with nothing but whitespace."""
    return not text.strip()


def check_empty(source: str, target: str, where: str, options: CorpusOptions, dropped: Counter[str]) -> bool:
    """Whether a pair may be kept; an empty side is counted in ``dropped`` (``empty_source`` / ``empty_target``).

    Args:
        source, target: the two texts.
        where: the location for the error, ``FILE:LINE`` (or ``dataset row N``).
        options: ``options.empty_lines`` chooses between skipping and raising.
        dropped: reason -> count, updated in place.

    Raises:
        DataError: an empty side while ``options.empty_lines == "error"``.
    """
    empty_source, empty_target = is_empty(source), is_empty(target)
    if not (empty_source or empty_target):
        return True
    side = "source and target" if empty_source and empty_target else "source" if empty_source else "target"
    if options.empty_lines == "error":
        raise DataError(f"{where}: empty {side} (CorpusOptions.empty_lines='skip' skips and counts such pairs)")
    dropped["empty_source" if empty_source else "empty_target"] += 1
    return False


def one_line(text: str, replaced: Counter[str]) -> str:
    """``text`` with tabs and line breaks replaced by single spaces (counted in ``replaced["whitespace_replaced"]``).

    Splits are saved as TSV, one pair per line, so a field must hold neither a tab nor a newline; readers whose
    fields can (quoted CSV, datasets) pass them through here.
    """
    if "\t" not in text and "\n" not in text and "\r" not in text:
        return text
    replaced["whitespace_replaced"] += 1
    return _BREAK_RUN.sub(" ", text)


def make_report(read: int, kept: int, dropped: Mapping[str, int], **details: Any) -> dict[str, Any]:
    """The standard report: ``read`` rows, ``pairs`` kept, ``dropped`` reason -> count, then ``details``.

    Every reader keeps ``read == pairs + sum(dropped.values())`` (before a limit, which is recorded apart).
    """
    return {"read": read, "pairs": kept, "dropped": dict(sorted(dropped.items())), **details}


def describe_corpus(corpus: Corpus, role: str = "data") -> str:
    """One line on what was read: ``role``, the name, the columns used, rows read, pairs kept, and every drop.

    Example: ``train data/train.tsv (tsv, source = column 1 "word", target = column 2 "phones"): 1,002 rows read,
    1,000 pairs kept, 2 dropped (1 blank_line, 1 empty_target)``.
    """
    return describe_report(corpus.name, corpus.task, {"pairs": len(corpus.pairs), **corpus.report}, role)


def describe_report(name: str, task: str, report: Mapping[str, Any], role: str = "data") -> str:
    """The line of :func:`describe_corpus` from a source's name, task and report (a streamed source has no list of
    pairs)."""
    details = [str(report["format"])] if "format" in report else []
    columns = report.get("columns")
    if columns:
        names = report.get("column_names") or {}
        for side in ("source", "target"):
            label = f" {names[side]!r}" if side in names else ""
            details.append(f"{side} = column {columns[side]}{label}")
    if report.get("split"):
        details.append(f"split {report['split']}")
    head = f"{role} {name}" + (f" ({', '.join(details)})" if details else "") + f", task {task}: "
    read = report.get("read", report["pairs"])
    kept = report.get("pairs_before_limit", report["pairs"])
    dropped = report.get("dropped") or {}
    text = f"{read:,} rows read, {kept:,} pairs kept"
    total = sum(dropped.values())
    if total:
        text += f", {total:,} dropped ({', '.join(f'{n:,} {reason}' for reason, n in dropped.items())})"
    else:
        text += ", none dropped"
    if report.get("whitespace_replaced"):
        text += f", {report['whitespace_replaced']:,} with tabs or line breaks made spaces"
    if "limit" in report:
        text += f"; --limit keeps the first {report['limit']:,}"
    return head + text
