"""A prepared-data directory: its layout, its report, and what the handles of every kind share (what every training
run and every rank reads).

Data is prepared once (:meth:`dotformer.data.prepared.skeleton.DataKind.prepare`) into a directory
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
    DIR/{train,valid,test}.{src,tgt}.bin/.idx    pairs: the token ids of each side
                                                 (:mod:`dotformer.data.prepared.arrays`)
    DIR/{train,valid,test}.text.bin/.idx         text: one row per line, its ids and EOS (the flat ids are the
                                                 stream); labelled: one row per text, its ids
    DIR/{train,valid,test}.labels.npy            classify: (N,) int16 (int32 beyond 32,767 labels), each text's
                                                 label id
    DIR/{train,valid,test}.tags.bin/.idx         tag: a label id per token, aligned with ``text`` (-100 where a token
                                                 carries none: a word's later pieces)
    DIR/valid.tsv, test.tsv  pairs: the held-out pairs as text (what decoding metrics and ``evaluate`` compare with);
                             labelled: TEXT<TAB>LABEL or WORDS<TAB>LABELS lines
    DIR/valid.txt, test.txt  text: the held-out lines

:func:`~dotformer.data.prepared.kinds.open_prepared` gives a
:class:`~dotformer.data.prepared.pair_kind.PreparedPairs`, a :class:`~dotformer.data.prepared.text_kind.PreparedText`
or a :class:`~dotformer.data.prepared.labelled_kind.PreparedLabelled`; their arrays are memory-mapped, so opening
costs milliseconds and N processes share one copy of the data. What batching decides (the block size, a masked
language model's unit and masking: ``batch_time_fields``) is no part of the prepared data, so one preparation serves
every choice of it. A masked language model's text differs from a language model's by its tokenizer (a mask token).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np

from dotformer.data.prepared.arrays import load_array
from dotformer.data.prepared.fingerprint import changed_inputs
from dotformer.data.prepared.splits import TRAIN
from dotformer.data.read.textio import read_json, split_lines
from dotformer.errors import DataError

FORMAT_VERSION = 1
REPORT_FILE = "prepared.json"
SRC_TOKENIZER_FILE, TGT_TOKENIZER_FILE = "tokenizer_src.json", "tokenizer_tgt.json"  # a checkpoint's names
SPLIT_FILE = "split.npy"
UNUSED = 255  # the split code of a pair (line) cut by a limit
SplitName = Literal["train", "valid", "test"]


def array_stem(directory: Path, split: str, side: str) -> Path:
    """``DIR/SPLIT.SIDE``, the stem of one array (side ``src``, ``tgt``, ``text`` or ``tags``)."""
    return directory / f"{split}.{side}"


def labels_file(directory: Path, split: str) -> Path:
    """``DIR/SPLIT.labels.npy``, a classifier's label id per text."""
    return directory / f"{split}.labels.npy"


class PreparedData:
    """What the handles of every kind share: the directory, its report (``prepared.json``), and what the report says.

    Class attributes (each kind's handle sets them):
        held_out_suffix: ``tsv`` or ``txt``, the held-out splits' text files (``DIR/valid.SUFFIX``).
        batch_time_fields: per task, the fields of its data config decided when batching (no part of the data).
    """

    held_out_suffix: ClassVar[str] = "tsv"
    batch_time_fields: ClassVar[dict[str, tuple[str, ...]]] = {}
    directory: Path
    report: dict[str, Any]

    @property
    def fingerprint(self) -> str:
        """The fingerprint of the inputs and options (:mod:`dotformer.data.prepared.fingerprint`)."""
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

    def text_file(self, split: str) -> Path:
        """``DIR/SPLIT.tsv`` or ``DIR/SPLIT.txt``: the held-out split as text."""
        return self.directory / f"{split}.{self.held_out_suffix}"

    def same_setting(self, key: str, value: Any) -> bool:
        """Whether ``key = value`` leaves the data settings as they were prepared (as written; a kind whose
        defaults depend on its task compares them filled in)."""
        return self.report["data"].get(key) == value

    def _check_inputs(self) -> None:
        """Raise DataError when an input file changed since the data was prepared (its text would not match)."""

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

    def _text_path(self, split: str) -> Path:
        if split not in ("valid", "test"):
            raise DataError(f"{self.directory}: the text of the {split!r} split is not kept (valid and test are)")
        return self.text_file(split)

    def texts(self, split: SplitName) -> Any:
        """The lines of ``valid`` or ``test`` as text (``DIR/SPLIT.txt`` or ``.tsv``; a kind reads them as its
        examples).

        Raises:
            DataError: ``train`` (its text is not kept: it is the source's, which the kind reads again).
        """
        path = self._text_path(split)
        return split_lines(path.read_text(encoding="utf-8")) if path.stat().st_size else []


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
