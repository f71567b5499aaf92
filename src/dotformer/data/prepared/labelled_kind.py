"""Labelled texts of a classifier or a tagger (the ``labelled`` kind of :mod:`dotformer.data.prepared`), prepared in
the skeleton's passes (:mod:`dotformer.data.prepared.skeleton`) over a
:class:`~dotformer.data.read.labelled_reader.LabelledReader` (a file streamed a block at a time; the Bible's verses with
their genres). What differs from a text's preparation:

* the split: each text of a file is held out on its own (the Bible's whole books), and ``limit`` keeps a seeded
  sample of the training texts (a file's first lines may all have one label);
* the labels: their names are the training split's, sorted (a tagger's: of its words); a held-out text whose label
  is not among them is refused before anything is written (the model could not predict it);
* the encoding: each text's ids (no BOS/EOS: batching adds them, and cuts a text to the block size then), and its
  label id (``SPLIT.labels.npy``) or a label per token aligned with its ids (``SPLIT.tags``: each word's label on
  its first real token, or on every one, :mod:`dotformer.data.tokenize.words`; -100 elsewhere); the valid and test
  texts are written beside them as ``TEXT<TAB>LABEL`` (``WORDS<TAB>LABELS``) lines, what ``evaluate`` scores.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from dotformer.data.config import EncoderDataConfig
from dotformer.data.prepared.arrays import LabelledArrays, load_array, token_dtype
from dotformer.data.prepared.fingerprint import InputFile, describe_inputs, text_inputs
from dotformer.data.prepared.layout import REPORT_FILE, UNUSED, PreparedData, SplitName, labels_file
from dotformer.data.prepared.skeleton import (
    DataKind,
    Reading,
    UnknownCount,
    chunks,
    held_out_split,
    scan_source,
    tokenizer_report,
    training_chunks,
)
from dotformer.data.prepared.splits import SPLIT_NAMES, TEST, TRAIN, VALID
from dotformer.data.prepared.writing import SplitWriters
from dotformer.data.read.labelled_reader import (
    GENRES_FILE,
    LabelledReader,
    LabelledText,
    LabelledTexts,
    label_vocabulary,
    labelled_line,
    labels_of,
    read_labelled,
    read_saved,
    unknown_label,
)
from dotformer.data.tokenize.tokenizer_files import TokenizerPair
from dotformer.data.tokenize.tokenizers import EncodedChunk, Tokenizer
from dotformer.data.tokenize.words import WordPieces, token_labels
from dotformer.errors import ConfigError, DataError

LABEL_DTYPE = np.dtype(np.int16)  # a label id (and -100, no label) of up to 32,767 labels; int32 beyond
NO_LABEL = -1  # the label id of a text left out (past a limit), whose label no name may have
BATCH_TIME_FIELDS = {"classify": ("block_size",), "tag": ("block_size",)}  # the most tokens an encoder reads
LABELLED_TASKS = tuple(BATCH_TIME_FIELDS)


@dataclass(frozen=True)
class PreparedLabelled(PreparedData):
    """Prepared texts of a classifier or a tagger: the tokenizer, the label names, and per split the mapped token ids
    of each text with its label id (classify) or a label id per token (tag).

    Attributes:
        directory, report: the prepared directory, its ``prepared.json``.
        tokenizer: the one tokenizer.
        splits: ``"train"``, ``"valid"``, ``"test"`` -> :class:`~dotformer.data.prepared.arrays.LabelledArrays`.
    """

    batch_time_fields = BATCH_TIME_FIELDS
    directory: Path
    report: dict[str, Any]
    tokenizer: Tokenizer
    splits: dict[str, LabelledArrays]

    @property
    def data_config(self) -> EncoderDataConfig:
        """The data config it was prepared from (its block size is the one given then: texts are cut later)."""
        return EncoderDataConfig.from_section(self.report["data"], str(self.directory / REPORT_FILE))

    @property
    def labels(self) -> list[str]:
        """The label names, the training split's sorted (label id i is ``labels[i]``)."""
        return list(self.report["labels"])

    def texts(self, split: SplitName) -> LabelledTexts:
        """The labelled texts of ``valid`` or ``test`` (``DIR/SPLIT.tsv``).

        Raises:
            DataError: ``train`` (:meth:`training_texts` reads it).
        """
        return read_saved(self._text_path(split), self.task)

    def training_texts(self) -> Iterator[LabelledText]:
        """The training texts and their labels, in order, read again from the source (for a peer that trains on the
        same texts); one text at a time.

        Raises:
            DataError: the source changed since it was prepared.
        """
        self._check_inputs()
        config = self.data_config
        reader = LabelledReader(config.dataset, config.task, config.sword_path, config.tag_format)
        yield from self._training_records(reader.records())


class LabelledKind(DataKind):
    """Labelled texts of a classifier or a tagger (the passes are in the module docstring).

    Args:
        config: the data config of task ``classify`` or ``tag`` (its block size is not used: texts are cut when
            batched).
    """

    name = "labelled"
    unit = "texts"
    handle = PreparedLabelled
    config: EncoderDataConfig

    def inputs(self) -> list[InputFile]:
        """The files :func:`~dotformer.data.prepared.fingerprint.text_inputs` names, and the table of the Bible's
        genres for a classifier of its verses."""
        inputs = text_inputs(self.config)
        config = self.config
        if config.task == "classify" and (config.dataset == "bible" or config.dataset.startswith("bible:")):
            inputs += describe_inputs([Path(str(resources.files("dotformer.data").joinpath(GENRES_FILE)))])
        return inputs

    def uses_seed(self) -> bool:
        """A random split, or a ``limit`` (a seeded sample of the training texts)."""
        return self.config.valid is None or self.config.limit is not None

    def text_of(self, item: LabelledText) -> str:
        return item.text

    def check(self) -> None:
        if self.config.task not in LABELLED_TASKS:
            raise ConfigError(f"labelled texts are prepared for --task classify or tag, not {self.config.task}")

    def read(self, seed: int) -> Reading:
        """Pass 1, and pass 2: the label names of the training split, every held-out label checked against them.

        Raises:
            DataError: fewer than two training labels, or a held-out label the training texts lack.
        """
        config = self.config
        reader = LabelledReader(config.dataset, config.task, config.sword_path, config.tag_format)
        scan = scan_source(reader, None)
        given = {
            role: read_labelled(getattr(config, role), config.task, config.sword_path, config.tag_format)
            for role in ("valid", "test")
            if getattr(config, role)
        }
        split, info = held_out_split(scan, reader, config, seed, given, "texts")
        if config.limit is not None:  # a seeded sample of the training texts (a file's head may be one label)
            train = np.flatnonzero(split == TRAIN)
            if config.limit < len(train):
                keep = np.zeros(len(train), dtype=bool)
                keep[random.Random(seed).sample(range(len(train)), config.limit)] = True
                split[train[~keep]] = UNUSED
            info["limit"] = config.limit
        reading = Reading(reader, scan, split, given, info)
        reading.info["labels"] = _label_names(reader, scan.used, split, given, config)
        return reading

    def encode(self, directory: Path, reading: Reading, tokenizers: TokenizerPair, chunk: int) -> dict[str, Any]:
        """Pass 3 (after the labels): every text's ids and labels into its split's arrays, the valid/test texts
        written as lines; per split the texts and tokens, and the training tokens read as <unk> (how many, and their
        share).

        Raises:
            DataError: a tokenizer file that reads more than half of the training text as <unk>; a tagger's word that
                encodes to no token.
        """
        config, given, tokenizer, names = self.config, reading.given, tokenizers.src, reading.info["labels"]
        index = {name: i for i, name in enumerate(names)}
        label_dtype = LABEL_DTYPE if len(names) <= np.iinfo(LABEL_DTYPE).max else np.dtype(np.int32)
        tagging = config.task == "tag"
        pieces = WordPieces(tokenizer) if tagging else None

        def encode(items: Sequence[LabelledText], where: str) -> tuple[tuple[EncodedChunk, ...], np.ndarray | None]:
            """The ids of ``items`` (and a tagger's labels per token; or a classifier's label per text)."""
            if pieces is None:
                labels = np.fromiter((index.get(item.label, NO_LABEL) for item in items), np.int64, len(items))
                return (tokenizer.encode_arrays([item.text for item in items]),), labels
            try:
                tokens = pieces.encode_sentences([item.text.split() for item in items])
            except DataError as exc:
                raise DataError(f"{where}: {exc}; a word needs a token to carry its label") from None
            word_labels = _word_labels((item.label for item in items), index, len(tokens.word_lengths))
            return (tokens.ids, token_labels(tokens, word_labels, config.label_subtokens)), None

        sides = ("text", "tags") if tagging else ("text",)
        dtypes = (token_dtype(tokenizer.vocab_size), label_dtype)[: len(sides)]
        unknown = UnknownCount()
        with SplitWriters(directory, sides, dtypes, self, None if tagging else label_dtype) as out:
            for items, codes in training_chunks(reading, chunk):
                encoded, labels = encode(items, reading.source.name)
                unknown.add(encoded[0], codes == TRAIN)
                for code, name in enumerate(SPLIT_NAMES):
                    out.write(name, codes == code, encoded, items if name not in given else (), labels)
            for role, texts in given.items():
                rows = [LabelledText(text, label) for text, label in zip(texts.texts, texts.labels, strict=True)]
                for items in chunks(rows, chunk):
                    encoded, labels = encode(items, texts.name)
                    out.write(role, np.ones(len(items), dtype=bool), encoded, items, labels)
        return unknown.checked(config, out.summary())

    def report(
        self, reading: Reading, written: dict[str, Any], tokenizers: TokenizerPair, sample: dict[str, Any], seed: int
    ) -> tuple[dict[str, Any], list[str]]:
        config, reader = self.config, reading.source
        info = dict(reading.info)
        names = info.pop("labels")
        counts = {name: written[name]["examples"] for name in SPLIT_NAMES}
        how = "given files" if not info["random"] else f"held out at random (seed {seed})"
        limit = f" (--limit keeps a sample of {config.limit:,}, seed {seed})" if config.limit else ""
        shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
        lines = [
            f"labelled texts {reader.name}: {reading.scan.count:,} texts; {how}: {counts['train']:,} train / "
            f"{counts['valid']:,} valid / {counts['test']:,} test texts{limit}; {len(names)} labels: {shown}",
            sample["line"],
        ]
        if reading.scan.report.get("comments"):
            lines.insert(1, f"{reader.name}: {reading.scan.report['comments']:,} comment lines (#) skipped")
        body = {
            "data": config.to_dict(),
            "corpus": {"name": reader.name, "report": reading.scan.report},
            "given": {role: {"name": texts.name, "report": texts.report} for role, texts in reading.given.items()},
            "split": info,
            "labels": names,
            "tokenizers": tokenizer_report(tokenizers.src, tokenizers.tgt, sample),
            "splits": written,
        }
        if reader.warnings:
            body["warnings"] = reader.warnings
        return body, lines

    @classmethod
    def sides(cls, report: dict[str, Any]) -> tuple[str, ...]:
        return ("text", "tags") if report["task"] == "tag" else ("text",)

    @classmethod
    def mapped(
        cls, directory: Path, report: dict[str, Any], tokenizers: TokenizerPair, arrays: dict[str, dict[str, Any]]
    ) -> PreparedLabelled:
        labelled = {}
        for split in SPLIT_NAMES:
            labels = None if report["task"] == "tag" else load_array(labels_file(directory, split))
            labelled[split] = LabelledArrays(arrays[split]["text"], labels, arrays[split].get("tags"))
        return PreparedLabelled(directory, report, tokenizers.src, labelled)

    def text_line(self, item: LabelledText, split: str) -> str:
        """``TEXT<TAB>LABEL`` or ``WORDS<TAB>LABELS``.

        Raises:
            DataError: a text holds a tab or line break.
        """
        try:
            return labelled_line(item)
        except DataError as exc:
            raise DataError(f"{split} text: {exc}") from None


def _label_names(
    reader: LabelledReader, used: int, split: np.ndarray, given: dict[str, LabelledTexts], config: EncoderDataConfig
) -> list[str]:
    """Pass 2: the training split's labels, sorted; every held-out text's label checked against them.

    Raises:
        DataError: fewer than two training labels, or a held-out label the training texts lack (naming the split).
    """
    train: set[str] = set()
    held: dict[int, set[str]] = {VALID: set(), TEST: set()}
    for i, (item, _) in enumerate(islice(reader.records(), used)):
        code = int(split[i])
        if code == TRAIN:
            train.update(labels_of(item.label))
        elif code in held:
            held[code].update(labels_of(item.label))
    names = label_vocabulary(train, f"{config.dataset} (the training split)")
    known = set(names)
    for code, role in ((VALID, "valid"), (TEST, "test")):
        if role in given:
            texts = given[role]
            unknown = [label for item in texts.labels for label in labels_of(item) if label not in known]
            where = texts.name
        else:
            unknown, where = sorted(held[code] - known), reader.name
        if unknown:
            raise unknown_label(unknown[0], names, f"{where} (the {role} split)")
    return names


def _word_labels(labels: Iterable[list[str]], index: dict[str, int], words: int) -> np.ndarray:
    """(W,) int64, the label id of every word of a chunk's sentences (:data:`NO_LABEL` for one no name has)."""
    return np.fromiter((index.get(label, NO_LABEL) for sentence in labels for label in sentence), np.int64, words)
