"""Pairs (translation, G2P, copy/reverse: a :class:`~dotformer.data.config.DataConfig`): a source and a target
side, each with its tokenizer (one when the vocabulary is shared); the held-out pairs kept as ``valid.tsv`` and
``test.tsv`` (what decoding metrics and ``evaluate`` compare with). No torch here.

Two ways to get the splits:

* **given files**: ``DataConfig.valid`` (and ``test``) name files of their own; nothing is split at random, each split
  holds exactly its file's pairs (the training file's ``limit`` aside). Without ``test`` there is no test split: a
  test file is evaluated later with ``dotformer evaluate --data TEST``. ``test`` without ``valid`` draws the
  validation split from the training file (``valid_fraction``, seeded) and takes the test split from its file.
* **one corpus**: the deterministic, group-disjoint split of :func:`dotformer.data.prepared.splits.assign_splits`.

Every file is read with the same reader options (:meth:`dotformer.data.config.DataConfig.corpus_options`), and
each gives one line for the screen (:func:`dotformer.data.read.types.describe_report`: columns used, rows read, pairs
kept, every drop counted). :func:`read_run_data` gives the same splits read whole into memory (what fine-tuning reads
to check, or extend, a checkpoint's vocabulary).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from dotformer.data.config import DataConfig
from dotformer.data.prepared.arrays import PairArrays, token_dtype
from dotformer.data.prepared.fingerprint import InputFile, pair_inputs
from dotformer.data.prepared.layout import REPORT_FILE, UNUSED, PreparedData, SplitName
from dotformer.data.prepared.skeleton import (
    DataKind,
    Reading,
    SampleFile,
    chunks,
    deal,
    sample_mask,
    sample_report,
    scan_source,
    tokenizer_report,
    training_chunks,
)
from dotformer.data.prepared.splits import SPLIT_NAMES, TEST, TRAIN, VALID, Splits
from dotformer.data.prepared.writing import SplitWriters
from dotformer.data.read.bible import book_ids
from dotformer.data.read.corpora import load_pairs, open_pairs
from dotformer.data.read.types import NAMED_TASKS, Corpus, Pair, describe_corpus, describe_report
from dotformer.data.tokenize.tokenizer_files import (
    TokenizerPair,
    read_tokenizer_file,
    train_tokenizer,
    train_tokenizer_pair,
)
from dotformer.data.tokenize.tokenizers import DEFAULT_BPE_VOCAB_SIZE, Tokenizer
from dotformer.errors import ConfigError, DataError

logger = logging.getLogger(__name__)

NO_TEST_LINE = (
    "test: none (no --test file): evaluate a test file later with dotformer evaluate --checkpoint RUN --data TEST"
)
SINGLE_WORD_SHARE = 0.9  # a side whose training texts are single words this often gets a note when BPE reads it


def check_named_task(data: DataConfig) -> None:
    """Raise ConfigError when ``data.task`` contradicts a named corpus (copy/reverse may be scored as exact match)."""
    named_task = NAMED_TASKS.get(data.dataset)
    compatible = data.task == named_task or (named_task == "synthetic" and data.task == "exact")
    if data.task is not None and named_task is not None and not compatible:
        raise ConfigError(f"--task {data.task}: {data.dataset} is a {named_task} corpus; --task is for your own files")


def read_given(data: DataConfig, task: str, name: str) -> tuple[dict[str, Corpus], list[str]]:
    """The given valid and test files of ``data`` read whole, and a line for each (the training data ``name`` is of
    ``task``).

    Raises:
        ConfigError: ``test_books`` beside given files, or a file whose task differs from the training data's.
    """
    if data.test_books:
        raise ConfigError(
            f"test_books ({','.join(data.test_books)}) holds Bible books out of a random split, and --valid/--test "
            f"give the splits as files: drop one (--test-books '' clears a config file's books)"
        )
    given: dict[str, Corpus] = {}
    lines = []
    for role in ("valid", "test"):
        spec = getattr(data, role)
        if spec is not None:
            given[role] = load_pairs(spec, data.corpus_options(role))
            if given[role].task != task:
                raise ConfigError(f"{spec}: task {given[role].task}, but the training data {name} is {task}")
            lines.append(describe_corpus(given[role], role))
    return given, lines


def make_tokenizers(data: DataConfig, train: Iterable[Pair]) -> TokenizerPair:
    """The run's tokenizers: read from ``src_tokenizer_file``/``tgt_tokenizer_file`` when given, else trained on
    the training pairs (kinds, vocabulary size and sharing as resolved in ``data``). ``train`` is read in passes
    (a list, or an object whose every iteration reads a file again: no side is held whole).

    The same file on both sides gives one shared tokenizer object (and shared embeddings by default).

    Raises:
        MissingDataError / DataError: a tokenizer file cannot be read. ConfigError: a bad kind or size.
    """

    src_file, tgt_file = data.src_tokenizer_file, data.tgt_tokenizer_file
    src_vocab = data.vocab_size if data.src_tokenizer == "bpe" else None
    tgt_vocab = data.vocab_size if data.tgt_tokenizer == "bpe" else None
    note = bpe_on_words_note(data, train)
    if note is not None:
        logger.warning(note)
    if src_file is None and tgt_file is None:
        return train_tokenizer_pair(
            (p.source for p in train),
            (p.target for p in train),
            data.src_tokenizer,
            data.tgt_tokenizer,
            src_vocab,
            tgt_vocab,
            shared=bool(data.shared_vocab),
        )
    if src_file is not None and src_file == tgt_file:
        tokenizer = read_tokenizer_file(src_file)
        return TokenizerPair(tokenizer, tokenizer)
    src: Tokenizer = (
        read_tokenizer_file(src_file)
        if src_file is not None
        else train_tokenizer(data.src_tokenizer, (p.source for p in train), src_vocab)
    )
    tgt: Tokenizer = (
        read_tokenizer_file(tgt_file)
        if tgt_file is not None
        else train_tokenizer(data.tgt_tokenizer, (p.target for p in train), tgt_vocab)
    )
    return TokenizerPair(src, tgt)


def bpe_on_words_note(data: DataConfig, train: Iterable[Pair]) -> str | None:
    """One line when a BPE vocabulary is to be learned from texts that are single words (at least
    :data:`SINGLE_WORD_SHARE` of a side's training texts have no space), else None.

    BPE (the default of ``translation``, the task of a file without ``--task``) merges pieces inside words: on single
    words its vocabulary (8,000 pieces by default) holds many whole words, and a new word falls apart into rare
    pieces. Words to pronunciations is ``--task g2p`` (characters -> phone symbols), a word to a word ``--task exact``.
    """

    sides_given = ((data.src_tokenizer, data.src_tokenizer_file), (data.tgt_tokenizer, data.tgt_tokenizer_file))
    learned = [kind == "bpe" and given is None for kind, given in sides_given]
    if not any(learned):
        return None
    total, words = 0, [0, 0]  # one pass: texts, and single words of each side
    for pair in train:
        total += 1
        words[0] += len(pair.source.split()) == 1
        words[1] += len(pair.target.split()) == 1
    sides = [
        f"{words[i]:,} of {total:,} training {side}s"
        for i, side in enumerate(("source", "target"))
        if learned[i] and total and words[i] >= SINGLE_WORD_SHARE * total
    ]
    if not sides:
        return None
    size = DEFAULT_BPE_VOCAB_SIZE if data.vocab_size is None else data.vocab_size
    return (
        f"the texts are single words ({' and '.join(sides)}) and get a BPE vocabulary of up to {size:,} pieces "
        f"learned from them, so many words are a piece of their own and a new word splits into rare pieces; for "
        f"words to pronunciations use --task g2p (characters -> phone symbols), for words to words --task exact, or "
        f"give a smaller --vocab-size"
    )


_NOT_READ = ("hf_cache_dir",)  # a field of pairs that does not change the data (where datasets caches a download)


@dataclass(frozen=True)
class PreparedPairs(PreparedData):
    """Prepared pairs (translation, G2P, copy/reverse): tokenizers and the mapped token arrays of each split.

    Attributes:
        directory, report: the prepared directory, its ``prepared.json``.
        tokenizers: the source and target tokenizers (one object when the vocabulary is shared).
        splits: ``"train"``, ``"valid"``, ``"test"`` -> :class:`~dotformer.data.prepared.arrays.PairArrays` (a split
            with no pairs has empty arrays).
    """

    directory: Path
    report: dict[str, Any]
    tokenizers: TokenizerPair
    splits: dict[str, PairArrays]

    @property
    def data_config(self) -> DataConfig:
        """The data config it was prepared from, its task's defaults filled in."""
        return DataConfig.from_dict(self.report["data"], str(self.directory / REPORT_FILE))

    def same_setting(self, key: str, value: Any) -> bool:
        """Whether ``key = value`` leaves the data settings as they were prepared, the task's defaults filled in
        (``vocab_size = 8000`` is the default's own value); a value the config refuses is another setting."""
        own = self.report["data"]
        try:
            asked = DataConfig.from_dict({**own, key: value}).resolved(self.task)
            return asked == DataConfig.from_dict(own).resolved(self.task)
        except ConfigError:
            return False

    def lengths(self, split: SplitName) -> np.ndarray:
        """(N,) int64, the padded length of every example of ``split``: max(source, target) + 1."""
        return self.splits[split].lengths

    def texts(self, split: SplitName) -> list[Pair]:
        """The pairs of ``valid`` or ``test`` as text, exactly as read (``DIR/SPLIT.tsv``).

        Raises:
            DataError: ``train`` (its text is not kept: it is the source's; :meth:`training_pairs` reads it).
        """
        return [Pair(*line.split("\t")) for line in super().texts(split)]

    def training_pairs(self) -> Iterator[Pair]:
        """The training pairs as text, in order, read again from the training source (for a peer that trains on
        the same pairs); one pair at a time.

        Raises:
            DataError: the source changed since it was prepared.
        """

        self._check_inputs()
        config = self.data_config
        yield from self._training_records(open_pairs(config.dataset, config.corpus_options("train")).records())


class PairsKind(DataKind):
    """Pairs of texts: read in passes from a corpus (:func:`~dotformer.data.read.corpora.open_pairs`), split at random
    (seeded, group-disjoint) or by given valid/test files, a source and a target tokenizer.

    Args:
        config: the dataset, valid/test files, reader options, tokenizer settings, fractions of a random split.
    """

    name = "pairs"
    unit = "pairs"
    handle = PreparedPairs
    config: DataConfig

    def inputs(self) -> list[InputFile]:
        return pair_inputs(self.config)

    def settings_data(self) -> dict[str, Any]:
        """The config with its task's defaults filled in (a setting left to its default and the same setting given
        are one), less the datasets cache directory."""
        config = self.config
        resolved = config.resolved(NAMED_TASKS.get(config.dataset) or config.task or "translation")
        return {key: value for key, value in resolved.to_dict().items() if key not in _NOT_READ}

    def check(self) -> None:
        """Raise ConfigError when ``config.task`` contradicts a named corpus."""

        check_named_task(self.config)

    def read(self, seed: int) -> Reading:
        config = self.config
        reader = open_pairs(config.dataset, config.corpus_options("train"))
        scan = scan_source(reader, config.limit)
        if scan.used == 0:
            raise DataError(f"{config.dataset}: no pairs left to train on (report: {scan.report})")
        lines = [describe_report(reader.name, reader.task, scan.report, "train")]
        given: dict[str, Corpus] = {}
        info: dict[str, Any] = {"random": config.valid is None}
        if config.valid is None and config.test is None:
            test_groups = book_ids(list(config.test_books)) if config.test_books and config.dataset == "bible" else None
            split = deal(scan, seed, config.valid_fraction, config.test_fraction, test_groups or config.test_books,
                          reader.keep_groups_together, reader.name)  # fmt: skip
            counts = [int((split == code).sum()) for code in (TRAIN, VALID, TEST)]
            lines[0] += f"; split at random (seed {seed}): {counts[0]:,} / {counts[1]:,} / {counts[2]:,}"
            info.update(valid_fraction=config.valid_fraction, test_fraction=config.test_fraction)
            info.update(test_groups=list(test_groups or config.test_books or []) or None)
        else:
            given, given_lines = read_given(config, reader.task, reader.name)
            lines += given_lines
            if "valid" in given:
                split = np.full(scan.used, TRAIN, dtype=np.uint8)
            else:  # a test file, and valid drawn from the training file
                split = deal(scan, seed, config.valid_fraction, 0.0, None, reader.keep_groups_together, reader.name)
                info.update(valid_fraction=config.valid_fraction)
                lines.append(
                    f"valid: {int((split == VALID).sum()):,} pairs drawn at random (seed {seed}) from {reader.name}"
                )
            if "test" not in given:
                lines.append(NO_TEST_LINE)
            info["given"] = {role: getattr(config, role) for role in ("valid", "test")}
        unused = np.full(scan.count - scan.used, UNUSED, dtype=np.uint8)  # the examples past a limit
        return Reading(reader, scan, np.concatenate([split, unused]), given, info, lines)

    def resolved(self, reading: Reading) -> DataConfig:
        """The config with the reader's task's defaults filled in (tokenizer kinds and sizes)."""
        return self.config.resolved(reading.source.task)

    def tokenizers(
        self, directory: Path, reading: Reading, given: Any, sample_lines: int
    ) -> tuple[TokenizerPair, dict[str, Any]]:
        """The tokenizers: given, read from files, or learned on a sample of the training pairs (written to a file
        of ``directory`` for the time it takes)."""

        if isinstance(given, TokenizerPair):
            return given, {"given": True, "line": "tokenizers: given (those of the checkpoint fine-tuned)"}
        config, reader, used = self.resolved(reading), reading.source, reading.scan.used
        if config.src_tokenizer_file and config.tgt_tokenizer_file:
            files = f"{config.src_tokenizer_file}" + (
                "" if config.src_tokenizer_file == config.tgt_tokenizer_file else f", {config.tgt_tokenizer_file}"
            )
            return make_tokenizers(config, []), {"given": True, "line": f"tokenizers: read from {files}"}
        mask, train_count = sample_mask(reading.split, sample_lines)
        with SampleFile(
            directory, (pair for i, (pair, _) in enumerate(islice(reader.records(), used)) if mask[i])
        ) as sample:
            tokenizers = make_tokenizers(config, sample)
        kinds = [f"{side} {kind}" for side, kind in (("source", config.src_tokenizer), ("target", config.tgt_tokenizer))
                 if kind is not None]  # fmt: skip
        learned = "shared " + config.src_tokenizer if config.shared_vocab else ", ".join(kinds)  # type: ignore[operator]
        return tokenizers, sample_report(learned, sample.count, train_count, sample_lines, "pairs")

    def encode(self, directory: Path, reading: Reading, tokenizers: TokenizerPair, chunk: int) -> dict[str, Any]:
        """Every pair encoded into its split's arrays, the valid/test pairs written as TSV; per split the examples
        and tokens, and how many distinct sources of each given file the training pairs share."""
        given = reading.given
        dtypes = (token_dtype(tokenizers.src.vocab_size), token_dtype(tokenizers.tgt.vocab_size))
        held_out = {role: {pair.source for pair in corpus.pairs} for role, corpus in given.items()}
        shared: dict[str, set[str]] = {role: set() for role in given}
        with SplitWriters(directory, ("src", "tgt"), dtypes, self) as out:
            for pairs, codes in training_chunks(reading, chunk):
                encoded = (tokenizers.src.encode_arrays([p.source for p in pairs]),
                           tokenizers.tgt.encode_arrays([p.target for p in pairs]))  # fmt: skip
                for code, name in enumerate(SPLIT_NAMES):
                    out.write(name, codes == code, encoded, pairs if name not in given else ())
                for role, sources in held_out.items():
                    trained = (pair.source for pair, code in zip(pairs, codes, strict=True) if code == TRAIN)
                    shared[role].update(source for source in trained if source in sources)
            for role, corpus in given.items():
                for pairs in chunks(corpus.pairs, chunk):
                    encoded = (tokenizers.src.encode_arrays([p.source for p in pairs]),
                               tokenizers.tgt.encode_arrays([p.target for p in pairs]))  # fmt: skip
                    out.write(role, np.ones(len(pairs), dtype=bool), encoded, pairs)
        shared_sources = {role: (len(found), len(held_out[role])) for role, found in shared.items()}
        return {**out.summary(), "shared_sources": shared_sources}

    def report(
        self, reading: Reading, written: dict[str, Any], tokenizers: TokenizerPair, sample: dict[str, Any], seed: int
    ) -> tuple[dict[str, Any], list[str]]:
        config, reader = self.config, reading.source
        warnings = [
            _leakage_line(role, getattr(config, role), config.dataset, shared, sources)
            for role, (shared, sources) in written.pop("shared_sources").items()
            if shared
        ]
        body = {
            "data": self.resolved(reading).to_dict(),
            "corpus": {"name": reader.name, "task": reader.task, "report": reading.scan.report},
            "given": {role: {"name": c.name, "report": c.report} for role, c in reading.given.items()},
            "split": reading.info,
            "tokenizers": tokenizer_report(tokenizers.src, tokenizers.tgt, sample),
            "splits": written,
            "warnings": warnings,
        }
        return body, [*reading.lines, sample["line"]]

    def task_of(self, reading: Reading) -> str:
        return str(reading.source.task)

    @classmethod
    def sides(cls, report: dict[str, Any]) -> tuple[str, ...]:
        return ("src", "tgt")

    @classmethod
    def mapped(
        cls, directory: Path, report: dict[str, Any], tokenizers: TokenizerPair, arrays: dict[str, dict[str, Any]]
    ) -> PreparedPairs:
        splits = {split: PairArrays(arrays[split]["src"], arrays[split]["tgt"]) for split in SPLIT_NAMES}
        return PreparedPairs(directory, report, tokenizers, splits)

    @classmethod
    def given_tokenizers(cls, tokenizers: TokenizerPair) -> TokenizerPair:
        return tokenizers

    def text_line(self, item: Pair, split: str) -> str:
        """``SOURCE<TAB>TARGET``.

        Raises:
            DataError: a text holds a tab or line break, which a TSV line cannot hold (the readers replace them).
        """
        for side, text in zip(("source", "target"), item, strict=True):
            if any(char in text for char in "\t\n\r"):
                raise DataError(f"{split} pair: the {side} holds a tab or line break: {text!r:.80}")
        return f"{item.source}\t{item.target}\n"


@dataclass
class RunData:
    """The splits of a run read whole, and what reading them said.

    Attributes:
        splits: train, valid and test pairs; ``splits.info`` says how they were made.
        lines: one line per file read (and one for a missing test split), for standard error.
    """

    splits: Splits
    lines: list[str] = field(default_factory=list)


def read_run_data(data: DataConfig, seed: int) -> RunData:
    """The training pairs, and the valid/test files when given, read whole into the run's splits (module
    docstring): the first pass of :meth:`PairsKind.read`, its split applied to the training pairs.

    Args:
        data: the data settings (``dataset``, ``valid``, ``test``, ``task``, reader options, fractions).
        seed: the seed of a random split.

    Raises:
        ConfigError: a ``task`` that contradicts a named corpus, ``test_books`` with a given valid file, or valid /
            test files whose task differs from the training file's.
        DataError / MissingDataError: a file cannot be read (FILE:LINE in the message).
    """
    check_named_task(data)
    reading = PairsKind(data).read(seed)
    reader, given = reading.source, reading.given
    held: dict[int, list[Pair]] = {TRAIN: [], VALID: [], TEST: []}
    for (pair, _), code in zip(islice(reader.records(), reading.scan.used), reading.split, strict=False):
        held[int(code)].append(pair)
    for role, corpus in given.items():
        held[VALID if role == "valid" else TEST] = list(corpus.pairs)
    info: dict[str, Any] = {"seed": seed, "valid_fraction": data.valid_fraction, "test_fraction": data.test_fraction}
    if data.valid is None and data.test is None:
        together = reader.keep_groups_together and reader.grouped
        info.update(test_groups=reading.info["test_groups"], keep_groups_together=together)
    else:
        names = {role: given[role].name if role in given else None for role in ("valid", "test")}
        valid_fraction = None if "valid" in given else data.valid_fraction
        info = {"given": {"train": reader.name, **names}, "seed": seed, "valid_fraction": valid_fraction}
        info.update(test_fraction=None, test_groups=None, keep_groups_together=False)
    info["counts"] = {name: len(held[code]) for code, name in enumerate(SPLIT_NAMES)}
    info["corpus"] = {"name": reader.name, "task": reader.task, "report": reading.scan.report}
    info.update({f"{role}_corpus": {"name": c.name, "report": c.report} for role, c in given.items()})
    return RunData(Splits(held[TRAIN], held[VALID], held[TEST], info), reading.lines)


def _leakage_line(role: str, spec: str, dataset: str, shared: int, sources: int) -> str:
    """The warning for a given valid/test file that shares ``shared`` of its ``sources`` with the training pairs:
    its scores would measure recall of trained pairs, not generalisation."""
    same = " (the training file itself)" if _same_file(spec, dataset) else ""
    return (
        f"--{role} {spec}{same}: {shared:,} of its {sources:,} sources are training sources too, so its "
        f"{'scores' if role == 'test' else 'loss and best/'} measure recall of trained pairs, not generalisation: "
        f"give {role} pairs that are not in the training data"
    )


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False
