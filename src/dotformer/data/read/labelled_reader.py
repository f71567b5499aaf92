"""Texts with labels: what a classifier and a tagger train on, read from files or from the Bible, in passes.

Sources (``dataset``):

* classification, ``text<TAB>label`` lines: one text and its label a line (a first line ``text<TAB>label`` is a
  header; blank lines are skipped and counted);
* tagging, a label per word, in either of two forms: ``tokens<TAB>labels`` lines (a sentence's words and its labels,
  each separated by spaces, as many of both), or CoNLL-style ``word ... label`` lines (the first column the word,
  the last its label) with a blank line between sentences (``-DOCSTART-`` lines are skipped and counted, and so are
  comment lines, as CoNLL-U's: a line that starts with ``#`` before a sentence's first word). Which one a file is:
  ``tag_format``, else CoNLL when a non-blank line has no tab or a blank line separates two sentences;
* ``"bible"`` (``"bible:MODULE"``): the verses of an English Bible, each labelled by the kind of book it is in
  (:func:`bible_genres`: law, history, poetry, prophets, gospels, letters), grouped by book so that splits hold out
  whole books.

:class:`LabelledReader` reads a source in passes, one text at a time (a file is streamed a block at a time, never
held whole; a Bible's verses are held as :class:`~dotformer.data.read.text_corpus.TextReader` holds them), which is how
data is prepared (:mod:`dotformer.data.prepared.labelled_kind`); :func:`read_labelled` collects one pass into
:class:`LabelledTexts` (a held-out file, what ``evaluate`` scores). A line of a file that cannot be read as its form
is one :class:`~dotformer.errors.DataError` naming FILE:LINE. No torch here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from itertools import chain
from pathlib import Path
from typing import Any, NamedTuple

from dotformer.data.read.text_corpus import read_bible_text
from dotformer.data.read.textio import iter_text_lines
from dotformer.errors import ConfigError, DataError

GENRES_FILE = "bible_genres.tsv"  # package data beside this module: OSIS book id <TAB> genre
TAG_FORMATS = ("conll", "tsv")
LABELLED_TASKS = ("classify", "tag")
DOCSTART = "-DOCSTART-"


class LabelledText(NamedTuple):
    """One text and its label: one label (classification), or one per word (tagging: ``text.split()`` are the
    words)."""

    text: str
    label: Any  # str, or list[str] of one label per word


@dataclass
class LabelledTexts:
    """Texts and their labels, in the source's order (a held-out file, read whole).

    Attributes:
        name: the source (a file, ``"bible:KJV"``).
        texts: the texts; a tagged sentence's words joined by single spaces.
        labels: one label per text (classification), or one list of labels per text, one per word (tagging).
        groups: one key per text that a split keeps together (the Bible's book; each text its own otherwise).
        report: JSON facts about what was read (lines, texts, what was skipped).
    """

    name: str
    texts: list[str]
    labels: list[Any]
    groups: list[str] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.labels) != len(self.texts):
            raise DataError(f"{self.name}: {len(self.labels)} labels for {len(self.texts)} texts")
        if not self.groups:
            self.groups = [str(i) for i in range(len(self.texts))]

    def subset(self, indices: list[int]) -> LabelledTexts:
        """The texts at ``indices``, in that order."""
        return LabelledTexts(
            self.name, [self.texts[i] for i in indices], [self.labels[i] for i in indices],
            [self.groups[i] for i in indices], dict(self.report),
        )  # fmt: skip


class LabelledReader:
    """The labelled texts of ``dataset`` for ``task`` read in passes: each call of :meth:`records` reads the source
    again from its start, one text at a time (module docstring).

    Args:
        dataset: a file, or ``"bible"`` / ``"bible:MODULE"`` (classification only).
        task: ``"classify"`` or ``"tag"``.
        sword_path: the SWORD library of a Bible. tag_format: a tagging file's form (None: found by reading it).

    Raises:
        ConfigError: another task, the Bible for tagging, an unknown ``tag_format``. MissingDataError: no such file
            or Bible module. DataError: a file that is empty or not UTF-8.
    """

    def __init__(self, dataset: str, task: str, sword_path: str | None = None, tag_format: str | None = None) -> None:
        if task not in LABELLED_TASKS:
            raise ConfigError(f"labelled texts are for --task classify or tag, not {task!r}")
        self.name = dataset
        self.task = task
        self.groups: list[str] | None = None  # one key per text (a Bible's books); None for a file
        self.report: dict[str, Any] = {}
        self.warnings: list[str] = []  # what the last pass found suspicious (a CoNLL file of one sentence)
        self.form = "text<TAB>label"
        self._bible: LabelledTexts | None = None
        if dataset == "bible" or dataset.startswith("bible:"):
            if task != "classify":
                raise ConfigError("the Bible's verses are labelled by genre for --task classify; tagging reads a file")
            self._bible = read_bible_genres(dataset.partition(":")[2] or "KJV", sword_path)
            self.name, self.groups, self.report = self._bible.name, self._bible.groups, self._bible.report
        elif task == "tag":
            if tag_format is not None and tag_format not in TAG_FORMATS:
                raise ConfigError(f"tag_format must be one of {', '.join(TAG_FORMATS)}, got {tag_format!r}")
            self.form = tag_format or tag_format_of(iter_text_lines(dataset))

    @property
    def grouped(self) -> bool:
        """Whether :meth:`records` gives group keys (a Bible's books)."""
        return self.groups is not None

    def records(self) -> Iterator[tuple[LabelledText, str | None]]:
        """One pass over the texts in the source's order, each with its group key (None for a file); the report is
        complete when the pass ends.

        Raises:
            DataError: a line that is not of the form (FILE:LINE), or no texts at all.
        """
        if self._bible is not None:
            assert self.groups is not None
            for text, label, group in zip(self._bible.texts, self._bible.labels, self.groups, strict=True):
                yield LabelledText(text, label), group
            return
        if self.task == "classify":
            items = self._classified()
        elif self.form == "tsv":
            items = self._tagged_lines()
        else:
            items = self._conll()
        for item in items:
            yield item, None

    def _classified(self) -> Iterator[LabelledText]:
        path, texts, blank, header, lines = self.name, 0, 0, 0, 0
        for number, line in enumerate(iter_text_lines(path), 1):
            lines = number
            if not line.strip():
                blank += 1
                continue
            fields = line.split("\t")
            if number == 1 and [f.strip().lower() for f in fields] == ["text", "label"]:
                header = 1
                continue
            if len(fields) != 2:
                raise DataError(
                    f"{path}:{number}: {len(fields) - 1} tabs; a line of a classification file is TEXT<TAB>LABEL"
                )
            text, label = fields[0].strip(), fields[1].strip()
            if not text or not label:
                raise DataError(
                    f"{path}:{number}: an empty {'text' if not text else 'label'}; a line is TEXT<TAB>LABEL"
                )
            texts += 1
            yield LabelledText(text, label)
        if not texts:
            raise DataError(f"{path}: no TEXT<TAB>LABEL lines")
        self.report = {"format": self.form, "lines": lines, "texts": texts, "blank": blank, "header": header}

    def _tagged_lines(self) -> Iterator[LabelledText]:
        path, texts, words, skipped, lines = self.name, 0, 0, 0, 0
        for number, line in enumerate(iter_text_lines(path), 1):
            lines = number
            if not line.strip():
                skipped += 1
                continue
            left, tab, right = line.partition("\t")
            sentence, labels = left.split(), right.split()
            if not tab or "\t" in right or len(sentence) != len(labels) or not sentence:
                raise DataError(
                    f"{path}:{number}: {len(sentence)} words and {len(labels)} labels; a line is "
                    f"WORDS<TAB>LABELS, as many of both, each separated by spaces"
                )
            texts, words = texts + 1, words + len(sentence)
            yield LabelledText(" ".join(sentence), labels)
        self._tagged_report(texts, words, skipped, lines)

    def _conll(self) -> Iterator[LabelledText]:
        path, texts, words, skipped, lines, comments = self.name, 0, 0, 0, 0, 0
        sentence: list[str] = []
        labels: list[str] = []
        for number, line in enumerate(chain(iter_text_lines(path), [""]), 1):  # a last blank line ends the last one
            lines = number - 1
            if line.startswith("#") and not sentence:  # a comment (# sent_id = 1, # text = ...), not a word
                comments += 1
                continue
            fields = line.split()
            if not fields or fields[0] == DOCSTART:
                skipped += bool(fields)
                if sentence:
                    texts, words = texts + 1, words + len(sentence)
                    yield LabelledText(" ".join(sentence), labels)
                sentence, labels = [], []
                continue
            if len(fields) < 2:
                raise DataError(f"{path}:{number}: one column; a CoNLL line is WORD ... LABEL (a blank line ends a "
                                f"sentence)")  # fmt: skip
            sentence.append(fields[0])
            labels.append(fields[-1])
        self._tagged_report(texts, words, skipped, lines)
        if comments:
            self.report["comments"] = comments
        if texts == 1:
            self.warnings = [f"{path} holds one sentence of {words:,} words: a blank line ends a CoNLL sentence"]

    def _tagged_report(self, texts: int, words: int, skipped: int, lines: int) -> None:
        if not texts:
            raise DataError(f"{self.name}: no tagged sentences")
        self.report = {"format": self.form, "lines": lines, "texts": texts, "words": words, "skipped": skipped}
        self.warnings = []


def tag_format_of(lines: Iterable[str]) -> str:
    """``"conll"`` when a non-blank line has no tab or a blank line separates two sentences, else ``"tsv"`` (reads
    ``lines`` only as far as it must)."""
    seen_text, blank_after_text = False, False
    for line in lines:
        if not line.strip():
            blank_after_text = seen_text
            continue
        if "\t" not in line or blank_after_text:
            return "conll"
        seen_text = True
    return "tsv"


def read_classified(path: str | Path) -> LabelledTexts:
    """The ``text<TAB>label`` lines of a file, read whole (module docstring).

    Raises:
        MissingDataError: no such file. DataError: a line without exactly one tab, or with an empty text or label
            (FILE:LINE), no texts at all, or invalid UTF-8.
    """
    return read_labelled(str(path), "classify")


def read_tagged(path: str | Path, tag_format: str | None = None) -> LabelledTexts:
    """The tagged sentences of a file, read whole: ``tokens<TAB>labels`` lines or CoNLL-style columns (module
    docstring).

    Raises:
        MissingDataError: no such file. ConfigError: an unknown ``tag_format``. DataError: a line that is not of the
            form (FILE:LINE: as many labels as words, a CoNLL line of at least two columns), no sentences at all.
    """
    return read_labelled(str(path), "tag", tag_format=tag_format)


def bible_genres() -> dict[str, str]:
    """The genre of each book of the Bible, by OSIS id, from the package's table ``bible_genres.tsv``."""
    text = resources.files("dotformer.data").joinpath(GENRES_FILE).read_text(encoding="utf-8")
    rows = [line.split("\t") for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return {book: genre for book, genre in rows}


def read_bible_genres(module: str = "KJV", sword_path: str | None = None) -> LabelledTexts:
    """Every verse of an English Bible, labelled by the genre of its book and grouped by book.

    Raises:
        MissingDataError: pysword or the module is not installed (the message gives the apt-get line).
        DataError: a book the genre table does not list.
    """

    corpus = read_bible_text(module, sword_path)
    genres = bible_genres()
    unknown = sorted(set(corpus.groups) - set(genres))
    if unknown:
        raise DataError(f"{corpus.name}: books without a genre in {GENRES_FILE}: {', '.join(unknown)}")
    report = {**corpus.report, "format": "bible", "texts": len(corpus.lines), "genres_table": GENRES_FILE}
    labels = [genres[book] for book in corpus.groups]
    return LabelledTexts(corpus.name, list(corpus.lines), labels, list(corpus.groups), report)


def read_labelled(
    dataset: str, task: str, sword_path: str | None = None, tag_format: str | None = None
) -> LabelledTexts:
    """The texts of ``dataset`` for ``task`` ("classify" or "tag"; module docstring), read whole: one pass of
    :class:`LabelledReader`.

    Raises:
        ConfigError: the Bible for tagging. MissingDataError, DataError: as the reader.
    """
    reader = LabelledReader(dataset, task, sword_path, tag_format)
    texts, labels, groups = [], [], []
    for item, group in reader.records():
        texts.append(item.text)
        labels.append(item.label)
        if group is not None:
            groups.append(group)
    return LabelledTexts(reader.name, texts, labels, groups, reader.report)


def labels_of(label: Any) -> list[str]:
    """The labels of one text: its label (classification), or its words' labels (tagging)."""
    return label if isinstance(label, list) else [label]


def label_vocabulary(labels: Iterable[str], where: str) -> list[str]:
    """The sorted distinct labels of the training texts (a tagger's: of their words).

    Raises:
        DataError: fewer than two labels (nothing to tell apart), naming ``where``.
    """
    names = sorted(set(labels))
    if len(names) < 2:
        raise DataError(f"{where}: the training texts have {len(names)} label(s) ({', '.join(names)}); need 2 or more")
    return names


def unknown_label(label: str, names: list[str], where: str) -> DataError:
    """The error of a label the training texts do not have (the model cannot predict it), naming ``where``."""
    return DataError(
        f"{where}: label {label!r} is not among the training labels ({', '.join(names)}): the model cannot predict it"
    )


def label_ids(texts: LabelledTexts, names: list[str], where: str) -> list[Any]:
    """The labels of ``texts`` as ids in ``names``.

    Raises:
        DataError: a label the training texts do not have (:func:`unknown_label`).
    """
    index = {name: i for i, name in enumerate(names)}

    def one(label: str) -> int:
        if label not in index:
            raise unknown_label(label, names, where)
        return index[label]

    return [[one(label) for label in item] if isinstance(item, list) else one(item) for item in texts.labels]


def labelled_line(item: LabelledText) -> str:
    """One ``text<TAB>label`` line, or a tagger's ``words<TAB>labels`` line (the forms the readers read).

    Raises:
        DataError: a text or label that holds a tab or line break (a line cannot hold it).
    """
    label = " ".join(item.label) if isinstance(item.label, list) else item.label
    for what, value in (("text", item.text), ("label", label)):
        if any(char in value for char in "\t\n\r"):
            raise DataError(f"a {what} holds a tab or line break: {value!r:.80}")
    return f"{item.text}\t{label}\n"


def read_saved(path: Path, task: str) -> LabelledTexts:
    """A held-out split as prepared data keeps it (:func:`labelled_line`; an empty file: no texts)."""
    if not path.is_file() or not path.read_bytes().strip():
        return LabelledTexts(str(path), [], [])
    return read_tagged(path, "tsv") if task == "tag" else read_classified(path)
