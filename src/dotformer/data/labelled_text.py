"""Texts with labels: what a classifier and a tagger train on, read from files or from the Bible.

Sources (``dataset``):

* classification, ``text<TAB>label`` lines: one text and its label a line (a first line ``text<TAB>label`` is a
  header; blank lines are skipped and counted);
* tagging, a label per word, in either of two forms: ``tokens<TAB>labels`` lines (a sentence's words and its labels,
  each separated by spaces, as many of both), or CoNLL-style ``word ... label`` lines (the first column the word,
  the last its label) with a blank line between sentences (``-DOCSTART-`` lines are skipped and counted). Which one
  a file is: ``tag_format``, else CoNLL when a non-blank line has no tab or a blank line separates two sentences;
* ``"bible"`` (``"bible:MODULE"``): the verses of an English Bible, each labelled by the kind of book it is in
  (:func:`bible_genres`: law, history, poetry, prophets, gospels, letters), grouped by book so that splits hold out
  whole books.

A line of a file that cannot be read as its form is one :class:`~dotformer.errors.DataError` naming FILE:LINE.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from dotformer.data.textio import read_text_lines
from dotformer.errors import ConfigError, DataError

GENRES_FILE = "bible_genres.tsv"  # package data beside this module: OSIS book id <TAB> genre
TAG_FORMATS = ("conll", "tsv")
DOCSTART = "-DOCSTART-"


@dataclass
class LabelledTexts:
    """Texts and their labels, in the source's order.

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


def read_classified(path: str | Path) -> LabelledTexts:
    """The ``text<TAB>label`` lines of a file (module docstring).

    Raises:
        MissingDataError: no such file. DataError: a line without exactly one tab, or with an empty text or label
            (FILE:LINE), no texts at all, or invalid UTF-8.
    """
    lines = read_text_lines(path)
    texts, labels, blank, header = [], [], 0, 0
    for number, line in enumerate(lines, 1):
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
            raise DataError(f"{path}:{number}: an empty {'text' if not text else 'label'}; a line is TEXT<TAB>LABEL")
        texts.append(text)
        labels.append(label)
    if not texts:
        raise DataError(f"{path}: no TEXT<TAB>LABEL lines")
    report = {"format": "text<TAB>label", "lines": len(lines), "texts": len(texts), "blank": blank, "header": header}
    return LabelledTexts(str(path), texts, labels, report=report)


def tag_format_of(lines: list[str]) -> str:
    """``"conll"`` when a non-blank line has no tab or a blank line separates two sentences, else ``"tsv"``."""
    seen_text, blank_after_text = False, False
    for line in lines:
        if not line.strip():
            blank_after_text = seen_text
            continue
        if "\t" not in line or blank_after_text:
            return "conll"
        seen_text = True
    return "tsv"


def read_tagged(path: str | Path, tag_format: str | None = None) -> LabelledTexts:
    """The tagged sentences of a file: ``tokens<TAB>labels`` lines or CoNLL-style columns (module docstring).

    Raises:
        MissingDataError: no such file. ConfigError: an unknown ``tag_format``. DataError: a line that is not of the
            form (FILE:LINE: as many labels as words, a CoNLL line of at least two columns), no sentences at all.
    """
    lines = read_text_lines(path)
    form = tag_format or tag_format_of(lines)
    if form not in TAG_FORMATS:
        raise ConfigError(f"tag_format must be one of {', '.join(TAG_FORMATS)}, got {form!r}")
    sentences: list[list[str]] = []
    tags: list[list[str]] = []
    skipped = 0
    if form == "tsv":
        for number, line in enumerate(lines, 1):
            if not line.strip():
                skipped += 1
                continue
            left, tab, right = line.partition("\t")
            words, labels = left.split(), right.split()
            if not tab or "\t" in right or len(words) != len(labels) or not words:
                raise DataError(
                    f"{path}:{number}: {len(words)} words and {len(labels)} labels; a line is "
                    f"WORDS<TAB>LABELS, as many of both, each separated by spaces"
                )
            sentences.append(words)
            tags.append(labels)
    else:
        words, labels = [], []
        for number, line in enumerate([*lines, ""], 1):
            fields = line.split()
            if not fields or fields[0] == DOCSTART:
                skipped += bool(fields)
                if words:
                    sentences.append(words)
                    tags.append(labels)
                words, labels = [], []
                continue
            if len(fields) < 2:
                raise DataError(f"{path}:{number}: one column; a CoNLL line is WORD ... LABEL (a blank line ends a "
                                f"sentence)")  # fmt: skip
            words.append(fields[0])
            labels.append(fields[-1])
    if not sentences:
        raise DataError(f"{path}: no tagged sentences")
    report = {"format": form, "lines": len(lines), "texts": len(sentences), "words": sum(map(len, sentences))}
    report["skipped"] = skipped
    return LabelledTexts(str(path), [" ".join(words) for words in sentences], tags, report=report)


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
    from dotformer.data.text import read_bible_text

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
    """The texts of ``dataset`` for ``task`` ("classify" or "tag"; module docstring).

    Raises:
        ConfigError: the Bible for tagging. MissingDataError, DataError: as the readers.
    """
    if dataset == "bible" or dataset.startswith("bible:"):
        if task != "classify":
            raise ConfigError("the Bible's verses are labelled by genre for --task classify; tagging reads a file")
        return read_bible_genres(dataset.partition(":")[2] or "KJV", sword_path)
    return read_tagged(dataset, tag_format) if task == "tag" else read_classified(dataset)


def label_vocabulary(labels: list[Any], where: str) -> list[str]:
    """The sorted distinct labels of the training texts (a tagger's: of their words).

    Raises:
        DataError: fewer than two labels (nothing to tell apart), naming ``where``.
    """
    flat = [label for item in labels for label in (item if isinstance(item, list) else [item])]
    names = sorted(set(flat))
    if len(names) < 2:
        raise DataError(f"{where}: the training texts have {len(names)} label(s) ({', '.join(names)}); need 2 or more")
    return names


def label_ids(texts: LabelledTexts, names: list[str], where: str) -> list[Any]:
    """The labels of ``texts`` as ids in ``names``.

    Raises:
        DataError: a label the training texts do not have (the model cannot predict it), naming ``where``.
    """
    index = {name: i for i, name in enumerate(names)}

    def one(label: str) -> int:
        if label not in index:
            raise DataError(
                f"{where}: label {label!r} is not among the training labels ({', '.join(names)}): the model cannot "
                f"predict it"
            )
        return index[label]

    return [[one(label) for label in item] if isinstance(item, list) else one(item) for item in texts.labels]


def write_labelled(texts: LabelledTexts, path: Path) -> None:
    """``text<TAB>label`` lines, or a tagger's ``words<TAB>labels`` lines (the forms :func:`read_labelled` reads)."""
    rows = (f"{text}\t{' '.join(label) if isinstance(label, list) else label}\n" for text, label in
            zip(texts.texts, texts.labels, strict=True))  # fmt: skip
    path.write_text("".join(rows), encoding="utf-8")


def read_saved(path: Path, task: str) -> LabelledTexts:
    """A split :func:`write_labelled` wrote (an empty file: no texts)."""
    if not path.is_file() or not path.read_bytes().strip():
        return LabelledTexts(str(path), [], [])
    return read_tagged(path, "tsv") if task == "tag" else read_classified(path)


__all__ = [
    "GENRES_FILE",
    "LabelledTexts",
    "bible_genres",
    "label_ids",
    "label_vocabulary",
    "read_bible_genres",
    "read_classified",
    "read_labelled",
    "read_saved",
    "read_tagged",
    "tag_format_of",
    "write_labelled",
]
