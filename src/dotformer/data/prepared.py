"""A prepared-data directory, and the handle that maps it: what every training run and every rank reads.

Data is prepared once (:mod:`dotformer.data.preparing`, :mod:`dotformer.data.preparing_labelled`) into a directory
of one of three kinds, ``pairs`` (translation, G2P, copy/reverse), ``text`` (a language model, a masked language
model) and ``labelled`` (a classifier, a tagger)::

    DIR/prepared.json        the report: format, kind, fingerprint, inputs (size, time, hash), task, data config, seed
                             (when a random split depends on it), tokenizer sample, per split: examples, tokens,
                             characters (text), where they came from and what was dropped; the label names
                             (labelled: the training split's, sorted); the lines to print and the warnings (valid/test
                             files that share sources with the training pairs); seconds taken
    DIR/tokenizer_src.json   the tokenizers, under the names checkpoints use (text's and labelled's one tokenizer is
    DIR/tokenizer_tgt.json   both)
    DIR/split.npy            (N,) uint8, the split of every example of the training source, in its order: 0 train,
                             1 valid, 2 test, 255 unused (cut by a limit); with the source and the options it gives
                             the split back exactly
    DIR/{train,valid,test}.{src,tgt}.bin/.idx    pairs: the token ids of each side (:mod:`dotformer.data.arrays`)
    DIR/{train,valid,test}.text.bin/.idx         text: one row per line, its ids and EOS (the flat ids are the
                                                 stream); labelled: one row per text, its ids
    DIR/{train,valid,test}.labels.npy            classify: (N,) int16 (int32 beyond 32,767 labels), each text's
                                                 label id
    DIR/{train,valid,test}.tags.bin/.idx         tag: a label id per token, aligned with ``text`` (-100 where a token
                                                 carries none: a word's later pieces)
    DIR/valid.tsv, test.tsv  pairs: the held-out pairs as text (what decoding metrics and ``evaluate`` compare with);
                             labelled: TEXT<TAB>LABEL or WORDS<TAB>LABELS lines
    DIR/valid.txt, test.txt  text: the held-out lines

:func:`open_prepared` gives a :class:`PreparedPairs`, a :class:`PreparedText` or a :class:`PreparedLabelled`; their
arrays are memory-mapped, so opening costs milliseconds and N processes share one copy of the data. What batching
decides is no part of the prepared data: a language model's block size, a masked language model's unit (lines or
blocks) and masking, the most tokens an encoder reads (texts are cut when batched), so one preparation serves them
all. A masked language model's text differs from a language model's by its tokenizer, which has a mask token (the
task ``mlm`` is in the fingerprint). No torch here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from dotformer.data.arrays import LabelledArrays, PairArrays, RaggedArray, load_array, open_ragged
from dotformer.data.config import LM_TASK, DataConfig, EncoderDataConfig, LMDataConfig
from dotformer.data.labelled_text import LabelledReader, LabelledText, LabelledTexts, read_saved
from dotformer.data.splits import SPLIT_NAMES, TRAIN
from dotformer.data.textio import read_json, split_lines
from dotformer.data.tokenizer_files import TokenizerPair, load_tokenizer
from dotformer.data.tokenizers import Tokenizer
from dotformer.data.types import Pair
from dotformer.errors import DataError

FORMAT_VERSION = 1
REPORT_FILE = "prepared.json"
SRC_TOKENIZER_FILE, TGT_TOKENIZER_FILE = "tokenizer_src.json", "tokenizer_tgt.json"  # a checkpoint's names
SPLIT_FILE = "split.npy"
UNUSED = 255  # the split code of a pair (line) cut by a limit
KINDS = ("pairs", "text", "labelled")
Kind = Literal["pairs", "text", "labelled"]
SplitName = Literal["train", "valid", "test"]


def array_stem(directory: Path, split: str, side: str) -> Path:
    """``DIR/SPLIT.SIDE``, the stem of one array (side ``src``, ``tgt``, ``text`` or ``tags``)."""
    return directory / f"{split}.{side}"


def labels_file(directory: Path, split: str) -> Path:
    """``DIR/SPLIT.labels.npy``, a classifier's label id per text."""
    return directory / f"{split}.labels.npy"


def text_file(directory: Path, split: str, kind: Kind) -> Path:
    """``DIR/SPLIT.tsv`` (pairs, labelled) or ``DIR/SPLIT.txt`` (text): the held-out split as text."""
    return directory / f"{split}.{'txt' if kind == 'text' else 'tsv'}"


def kind_of_task(task: str) -> Kind:
    """The kind of prepared data a task reads: ``text`` (lm, mlm), ``labelled`` (classify, tag), else ``pairs``."""
    if task in (LM_TASK, "mlm"):
        return "text"
    return "labelled" if task in ("classify", "tag") else "pairs"


class _Prepared:
    """What both handles share: the directory, its report, and what the report says."""

    directory: Path
    report: dict[str, Any]

    @property
    def fingerprint(self) -> str:
        """The fingerprint of the inputs and options (:mod:`dotformer.data.fingerprint`)."""
        return str(self.report["fingerprint"])

    @property
    def task(self) -> str:
        """The task: ``g2p``, ``translation``, ``exact``, ``synthetic``, ``lm``, ``mlm``, ``classify`` or ``tag``."""
        return str(self.report["task"])

    @property
    def lines(self) -> list[str]:
        """The lines to print before training: each input read (rows, kept, dropped), the split, the tokenizers."""
        return list(self.report["lines"])

    @property
    def warnings(self) -> list[str]:
        """What a run on this data should be warned about (a given valid/test file that shares sources with the
        training pairs: its scores would measure recall of trained pairs, not generalisation)."""
        return list(self.report.get("warnings", []))

    @property
    def seed(self) -> int | None:
        """The seed of the random split (None: no random split, any seed gives this data)."""
        return self.report.get("seed")

    @property
    def split_of(self) -> np.ndarray:
        """(N,) uint8, the split of every pair (line) of the training source (``DIR/split.npy``), memory-mapped."""
        return load_array(self.directory / SPLIT_FILE)

    def _check_inputs(self) -> None:
        """Raise DataError when an input file changed since the data was prepared (its text would not match)."""
        from dotformer.data.fingerprint import changed_inputs

        changed = changed_inputs(self.report.get("inputs", []))
        if changed:
            raise DataError(f"{self.directory}: {'; '.join(changed)}: its training text is no longer there to read")

    def _training_records(self, records: Iterator[Any]) -> Iterator[Any]:
        """The records of the training source that are in the training split, in order."""
        split = self.split_of
        for i, (record, _) in enumerate(records):
            if i >= len(split):
                break
            if split[i] == TRAIN:
                yield record

    def _text_path(self, split: str, kind: Kind) -> Path:
        if split not in ("valid", "test"):
            raise DataError(f"{self.directory}: the text of the {split!r} split is not kept (valid and test are)")
        return text_file(self.directory, split, kind)

    def _texts(self, split: str, kind: Kind) -> list[str]:
        path = self._text_path(split, kind)
        return split_lines(path.read_text(encoding="utf-8")) if path.stat().st_size else []


@dataclass(frozen=True)
class PreparedPairs(_Prepared):
    """Prepared pairs (translation, G2P, copy/reverse): tokenizers and the mapped token arrays of each split.

    Attributes:
        directory: the prepared directory.
        report: ``prepared.json``.
        tokenizers: the source and target tokenizers (one object when the vocabulary is shared).
        splits: ``"train"``, ``"valid"``, ``"test"`` -> :class:`~dotformer.data.arrays.PairArrays` (a split with no
            pairs has empty arrays).
    """

    directory: Path
    report: dict[str, Any]
    tokenizers: TokenizerPair
    splits: dict[str, PairArrays]

    @property
    def data_config(self) -> DataConfig:
        """The data config it was prepared from, its task's defaults filled in."""
        return DataConfig.from_dict(self.report["data"], str(self.directory / REPORT_FILE))

    def lengths(self, split: SplitName) -> np.ndarray:
        """(N,) int64, the padded length of every example of ``split``: max(source, target) + 1."""
        return self.splits[split].lengths

    def texts(self, split: SplitName) -> list[Pair]:
        """The pairs of ``valid`` or ``test`` as text, exactly as read (``DIR/SPLIT.tsv``).

        Raises:
            DataError: ``train`` (its text is not kept: it is the source's; :meth:`training_pairs` reads it).
        """
        return [Pair(*line.split("\t")) for line in self._texts(split, "pairs")]

    def training_pairs(self) -> Iterator[Pair]:
        """The training pairs as text, in order, read again from the training source (for a peer that trains on
        the same pairs); one pair at a time.

        Raises:
            DataError: the source changed since it was prepared.
        """
        from dotformer.data.corpora import open_pairs

        self._check_inputs()
        config = self.data_config
        yield from self._training_records(open_pairs(config.dataset, config.corpus_options("train")).records())


@dataclass(frozen=True)
class PreparedText(_Prepared):
    """Prepared text of a language model or a masked language model (task ``mlm``: its tokenizer has a mask token):
    its tokenizer and, per split, its lines as one mapped token stream.

    Attributes:
        directory: the prepared directory.
        report: ``prepared.json``.
        tokenizer: the one tokenizer.
        splits: ``"train"``, ``"valid"``, ``"test"`` -> :class:`~dotformer.data.arrays.RaggedArray` whose rows are
            the lines (ids, then EOS); its ``ids`` are the split's token stream.
    """

    directory: Path
    report: dict[str, Any]
    tokenizer: Tokenizer
    splits: dict[str, RaggedArray]

    @property
    def data_config(self) -> LMDataConfig | EncoderDataConfig:
        """The data config it was prepared from (its block size is the one given then: blocks are cut later); a
        masked language model's :class:`EncoderDataConfig`."""
        where = str(self.directory / REPORT_FILE)
        if self.task == LM_TASK:
            return LMDataConfig.from_section(self.report["data"], where)
        return EncoderDataConfig.from_section(self.report["data"], where)

    def stream(self, split: SplitName) -> np.ndarray:
        """(N,) the token stream of ``split`` (every line's ids and EOS, in order), memory-mapped."""
        return self.splits[split].ids

    def characters(self, split: SplitName) -> int:
        """C, the characters of ``split``, each line end counted as one (bits per character need it)."""
        return int(self.report["splits"][split]["characters"])

    def texts(self, split: SplitName) -> list[str]:
        """The lines of ``valid`` or ``test`` as text (``DIR/SPLIT.txt``).

        Raises:
            DataError: ``train`` (:meth:`training_lines` reads it).
        """
        return self._texts(split, "text")

    def training_lines(self) -> Iterator[str]:
        """The training lines as text, in order, read again from the text (for a peer that trains on the same text).

        Raises:
            DataError: the text changed since it was prepared.
        """
        from dotformer.data.text import TextReader

        self._check_inputs()
        config = self.data_config
        yield from self._training_records(TextReader(config.dataset, config.sword_path).records())


@dataclass(frozen=True)
class PreparedLabelled(_Prepared):
    """Prepared texts of a classifier or a tagger: the tokenizer, the label names, and per split the mapped token ids
    of each text with its label id (classify) or a label id per token (tag).

    Attributes:
        directory: the prepared directory.
        report: ``prepared.json``.
        tokenizer: the one tokenizer.
        splits: ``"train"``, ``"valid"``, ``"test"`` -> :class:`~dotformer.data.arrays.LabelledArrays`.
    """

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
        return read_saved(self._text_path(split, "labelled"), self.task)

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


def read_report(directory: str | Path) -> dict[str, Any]:
    """``DIR/prepared.json``.

    Raises:
        MissingDataError: no such file (not a prepared directory, or one whose preparation did not finish).
        DataError: not JSON, or a format this version cannot read.
    """
    path = Path(directory) / REPORT_FILE
    report = read_json(path, "no prepared data here (prepare it first: dotformer prepare)")
    if not isinstance(report, dict) or report.get("format") != FORMAT_VERSION:
        found = report.get("format") if isinstance(report, dict) else None
        raise DataError(f"{path}: prepared-data format {found!r}, this dotformer reads {FORMAT_VERSION}")
    return report


def open_prepared(directory: str | Path) -> PreparedPairs | PreparedText | PreparedLabelled:
    """Map a prepared directory (its layout is in the module docstring).

    Raises:
        MissingDataError: no ``prepared.json`` there.
        DataError: a damaged directory: an array missing, of another length than the report says, or holding a
            token id outside its tokenizer's vocabulary (the file named).
    """
    directory = Path(directory)
    report = read_report(directory)
    kind: Kind = report.get("kind")  # type: ignore[assignment]
    if kind not in KINDS:
        raise DataError(f"{directory / REPORT_FILE}: unknown kind of prepared data {kind!r}")
    src = load_tokenizer(directory / SRC_TOKENIZER_FILE)
    tgt = src if report["tokenizers"]["shared"] else load_tokenizer(directory / TGT_TOKENIZER_FILE)
    sides = {"pairs": ("src", "tgt"), "text": ("text",), "labelled": ("text", "tags") if report["task"] == "tag"
             else ("text",)}[kind]  # fmt: skip
    arrays: dict[str, dict[str, RaggedArray]] = {}
    for split in SPLIT_NAMES:
        arrays[split] = {side: open_ragged(array_stem(directory, split, side)) for side in sides}
        expected = report["splits"][split]["examples"]
        for side, array in arrays[split].items():
            if len(array) != expected:
                raise DataError(f"{array.name}: {len(array):,} rows, but {REPORT_FILE} says {expected:,}")
            vocabulary = {"src": src, "text": src, "tgt": tgt}.get(side)  # tags are labels: checked where read
            largest = int(array.ids.max()) if vocabulary is not None and len(array.ids) else -1
            if vocabulary is not None and largest >= vocabulary.vocab_size:
                raise DataError(
                    f"{array.name}.bin: token id {largest} outside the tokenizer's {vocabulary.vocab_size} ids: the "
                    f"array is damaged (prepare the data again)"
                )
    if kind == "pairs":
        splits = {split: PairArrays(arrays[split]["src"], arrays[split]["tgt"]) for split in SPLIT_NAMES}
        return PreparedPairs(directory, report, TokenizerPair(src, tgt), splits)
    if kind == "labelled":
        labelled = {}
        for split in SPLIT_NAMES:
            labels = None if report["task"] == "tag" else load_array(labels_file(directory, split))
            labelled[split] = LabelledArrays(arrays[split]["text"], labels, arrays[split].get("tags"))
        return PreparedLabelled(directory, report, src, labelled)
    return PreparedText(directory, report, src, {split: arrays[split]["text"] for split in SPLIT_NAMES})
