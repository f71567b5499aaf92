"""The shared skeleton of every data kind: :class:`DataKind` says what prepared data of a kind depends on (its input
files and settings: the fingerprint) and prepares it in one order, the kind supplying only what differs:

1. **check** the settings (:meth:`DataKind.check`);
2. **read**: count the examples the training source keeps and their group keys (a g2p file's words, the Bible's
   books, a text's pieces of 100 lines), and deal the split (:meth:`DataKind.read`);
3. **tokenizers**, learned on a sample of at most ``sample_lines`` training examples drawn with a fixed seed (as
   sentencepiece's ``input_sentence_size``), read from files, or given (:meth:`DataKind.tokenizers`);
4. **encode**: chunks of ``chunk`` examples through the tokenizers' batch encoders, written straight to each split's
   arrays, the valid and test text beside them (:meth:`DataKind.encode`);
5. **report** and **finish**: ``prepared.json`` written last (:meth:`DataKind.report`, :func:`finish`).

Everything is written into a partial directory beside the target, renamed to it at the end (a crash leaves no
directory that looks prepared). The passes hold a chunk of the source at a time, never the corpus. No torch here.
"""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from collections.abc import Container, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from dotformer.data.prepared.arrays import open_ragged, save_array
from dotformer.data.prepared.fingerprint import InputFile, fingerprint, tokenizer_digest
from dotformer.data.prepared.layout import (
    FORMAT_VERSION,
    REPORT_FILE,
    SPLIT_FILE,
    SRC_TOKENIZER_FILE,
    TGT_TOKENIZER_FILE,
    PreparedData,
    array_stem,
    read_report,
)
from dotformer.data.prepared.splits import SPLIT_NAMES, TRAIN, VALID, GroupIndex, assign_splits
from dotformer.data.prepared.writing import writing_directory
from dotformer.data.read.text_corpus import check_books
from dotformer.data.read.types import Pair
from dotformer.data.tokenize.tokenizer_files import TokenizerPair, load_tokenizer, read_tokenizer_file, train_tokenizer
from dotformer.data.tokenize.tokenizers import MASK_TOKEN, UNK_ID, EncodedChunk, Tokenizer
from dotformer.errors import ConfigError, DataError

DEFAULT_SAMPLE_LINES = 1_000_000  # training examples a tokenizer learns from at most
SAMPLE_SEED = 0  # the sample's draw: fixed, so that a preparation without a random split serves every run seed
CHUNK_EXAMPLES = 20_000  # examples encoded at a time
MAX_UNKNOWN_SHARE = 0.5  # a given tokenizer that reads more of the training text as <unk> is another text's


@dataclass
class Scan:
    """Pass 1 over a training source: how many examples it keeps, how many are used (a limit), their groups."""

    count: int  # examples the source keeps
    used: int  # the first `used` of them are prepared (limit)
    group_of: np.ndarray | None  # (used,) int64 group numbers, or None without groups
    group_names: list[str]
    report: dict[str, Any]  # the reader's report, the limit recorded as apply_limit records it


@dataclass
class Reading:
    """What the read step found: the training source, its scan, the split of its used examples, the given valid/test
    files (read whole), what the report says of the split, and the lines said so far."""

    source: Any  # the reader of the training source (records() in passes)
    scan: Scan
    split: np.ndarray  # (used,) or (count,) uint8 split codes: what split.npy holds
    given: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)


class DataKind(ABC):
    """One kind of prepared data (pairs, running text, labelled texts) for one data config: its inputs and settings
    (the fingerprint), its preparation (the skeleton of the module docstring, its steps filled by the kind), and the
    handle that maps a directory of it.

    Class attributes:
        name: the kind in ``prepared.json`` and in the cache's directory names.
        unit: what an example is called in the last line of the report ("pairs", "lines", "texts").
        handle: the class that maps a directory of this kind (its ``batch_time_fields``: per task, the fields
        decided when batching, no part of the data).

    Args:
        config: the kind's data config.
    """

    name: ClassVar[str]
    unit: ClassVar[str]
    handle: ClassVar[type[PreparedData]]
    held_out_suffix: ClassVar[str] = "tsv"  # valid.tsv / test.tsv, or valid.txt / test.txt
    counts_characters: ClassVar[bool] = False  # whether each split's characters are counted (bits per character)

    def __init__(self, config: Any) -> None:
        self.config = config

    # --- what the data depends on -----------------------------------------------------------------------------------

    @abstractmethod
    def inputs(self) -> list[InputFile]:
        """The input files, each with its size, time and content hash (:mod:`~dotformer.data.prepared.fingerprint`)."""

    def uses_seed(self) -> bool:
        """Whether the prepared data depends on the run's seed (a random split: no ``valid`` file)."""
        return self.config.valid is None

    def settings_data(self) -> dict[str, Any]:
        """The data config as the fingerprint sees it: less what does not change the data (the fields its task
        decides when batching)."""
        skipped = self.handle.batch_time_fields.get(self.config.task, ())
        return {key: value for key, value in self.config.to_dict().items() if key not in skipped}

    def given_digests(self, tokenizers: Any) -> list[Any]:
        """The hashes of the tokenizers given (fine-tuning), as the fingerprint records them: one tokenizer's, or a
        pair's (and whether its two are one)."""
        if isinstance(tokenizers, TokenizerPair):
            src, tgt = tokenizers
            return [tokenizer_digest(src), tokenizer_digest(tgt), src is tgt]
        return [tokenizer_digest(tokenizers)]

    def settings(self, seed: int, tokenizers: Any = None, sample_lines: int = DEFAULT_SAMPLE_LINES) -> dict[str, Any]:
        """Everything but the input files' contents that prepared data depends on: the kind, the format, the data
        config (:meth:`settings_data`), the seed when it matters (:meth:`uses_seed`), the tokenizer sample, the
        ``tokenizers`` library's version and the given tokenizers' hashes; a masked language model's mask token (its
        tokenizer is learned with it)."""
        import tokenizers as hf_tokenizers

        settings = {
            "kind": self.name,
            "format": FORMAT_VERSION,
            "data": self.settings_data(),
            "seed": seed if self.uses_seed() else None,
            "sample": [sample_lines, SAMPLE_SEED],
            "tokenizers_library": hf_tokenizers.__version__,
            "given_tokenizers": None if tokenizers is None else self.given_digests(tokenizers),
        }
        return {**settings, "mask_token": MASK_TOKEN} if self.masked else settings

    def fingerprint(
        self, seed: int, tokenizers: Any = None, sample_lines: int = DEFAULT_SAMPLE_LINES,
        inputs: list[InputFile] | None = None,
    ) -> str:  # fmt: skip
        """:func:`~dotformer.data.prepared.fingerprint.fingerprint` of :meth:`settings` and the content of every
        input file (:meth:`inputs`, hashed here when not given)."""
        return fingerprint(self.settings(seed, tokenizers, sample_lines), self.inputs() if inputs is None else inputs)

    # --- the skeleton -----------------------------------------------------------------------------------------------

    def prepare(
        self,
        seed: int,
        directory: str | Path,
        tokenizers: Any = None,
        *,
        sample_lines: int = DEFAULT_SAMPLE_LINES,
        chunk: int = CHUNK_EXAMPLES,
        inputs: list[InputFile] | None = None,
    ) -> Any:
        """Prepare the data into ``directory`` (a new or empty directory) and map it.

        Args:
            seed: the seed of a random split (and of a labelled ``limit``'s sample; the tokenizer sample's draw is
                fixed).
            directory: where the prepared data goes (:mod:`~dotformer.data.prepared.layout` gives the layout).
            tokenizers: use these instead of learning or reading tokenizers (fine-tuning a checkpoint): a
                :class:`~dotformer.data.tokenize.tokenizer_files.TokenizerPair` for pairs, one tokenizer for the others.
            sample_lines: at most this many training examples teach the tokenizers.
            chunk: examples encoded at a time (memory is bounded by a chunk).
            inputs: the input files described already (:meth:`inputs`; None: described here, each file hashed).

        Raises:
            ConfigError: settings the kind refuses, a directory that is not empty.
            DataError / MissingDataError: a file cannot be read (FILE:LINE in the message), nothing is left to train
                on, or what the kind's steps refuse.
        """
        started = time.monotonic()
        self.check()
        for name, value in (("sample_lines", sample_lines), ("chunk", chunk)):
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive number of examples, got {value!r}")
        inputs = self.inputs() if inputs is None else inputs
        settings = self.settings(seed, tokenizers, sample_lines)
        reading = self.read(seed)
        with writing_directory(Path(directory)) as partial:
            save_array(partial / SPLIT_FILE, reading.split)
            pair, sample = self.tokenizers(partial, reading, tokenizers, sample_lines)
            written = self.encode(partial, reading, pair, chunk)
            pair.src.save(partial / SRC_TOKENIZER_FILE)
            pair.tgt.save(partial / TGT_TOKENIZER_FILE)
            body, lines = self.report(reading, written, pair, sample, seed)
            report = {
                "format": FORMAT_VERSION,
                "kind": self.name,
                "fingerprint": fingerprint(settings, inputs),
                "task": self.task_of(reading),
                "seed": seed if self.uses_seed() else None,
                **body,
            }
            finish(partial, report, lines, started, inputs, Path(directory), self.unit)
        return self.open(directory)

    def check(self) -> None:  # noqa: B027 (a step a kind may fill)
        """Refuse settings the kind cannot prepare before anything is read (none by default).

        Raises:
            ConfigError: naming the setting.
        """

    @abstractmethod
    def read(self, seed: int) -> Reading:
        """Pass 1: the training source counted, the given files read, the split dealt with ``seed``.

        Raises:
            DataError: nothing left to train on, or a source that cannot be read.
        """

    masked: bool = False  # whether its one tokenizer is a masked language model's (learned with <mask>)

    def text_of(self, item: Any) -> str:
        """The text of one example of the training source (what a learned tokenizer reads)."""
        return str(item)

    def tokenizers(
        self, directory: Path, reading: Reading, given: Any, sample_lines: int
    ) -> tuple[TokenizerPair, dict[str, Any]]:
        """Pass 2: the tokenizers (given, read from files, or learned on a sample of the training examples, written to
        a file of ``directory`` that the tokenizers read again per side, never held as strings) as a pair, and what
        the report says of the sample (its ``line``: how many of how many). Here a kind of one tokenizer (a text,
        labelled texts), as a pair of it twice; a masked language model's (:attr:`masked`) is learned with
        ``<mask>``, and must have a mask token.

        Raises:
            DataError: a masked language model's tokenizer without a mask token.
        """
        config, mask = self.config, self.masked
        if isinstance(given, Tokenizer):
            tokenizer, sample = given, {"given": True, "line": "tokenizer: given"}
        elif config.tokenizer_file:
            tokenizer = read_tokenizer_file(config.tokenizer_file)
            sample = {"given": True, "line": f"tokenizer: read from {config.tokenizer_file}"}
        else:
            chosen, train_count = sample_mask(reading.split, sample_lines)
            texts = islice((self.text_of(item) for item, _ in reading.source.records()), reading.scan.used)
            with SampleFile(directory, (text for i, text in enumerate(texts) if chosen[i])) as file:
                tokenizer = train_tokenizer(config.tokenizer, file, config.vocab_size, mask=mask)
            sample = sample_report(config.tokenizer + (" with <mask>" if mask else ""), file.count, train_count,
                                   sample_lines, self.unit)  # fmt: skip
        if mask and tokenizer.mask_id is None:
            where = config.tokenizer_file if not isinstance(given, Tokenizer) else "the tokenizer given"
            raise DataError(f"{where}: the vocabulary has no mask token (<mask> or [MASK]) for a masked language model")
        return TokenizerPair(tokenizer, tokenizer), sample

    @abstractmethod
    def encode(self, directory: Path, reading: Reading, tokenizers: TokenizerPair, chunk: int) -> dict[str, Any]:
        """Pass 3: every example into its split's arrays (through
        :meth:`~dotformer.data.tokenize.tokenizers.Tokenizer.encode_arrays`: BPE on every core, characters through
        numpy), the valid/test text beside them; per split the examples and tokens (``prepared.json``'s ``splits``)."""

    @abstractmethod
    def report(
        self, reading: Reading, written: dict[str, Any], tokenizers: TokenizerPair, sample: dict[str, Any], seed: int
    ) -> tuple[dict[str, Any], list[str]]:
        """The kind's part of ``prepared.json`` (``data`` onward), and the lines to print."""

    def task_of(self, reading: Reading) -> str:
        """The task ``prepared.json`` records (the data config's)."""
        return str(self.config.task)

    # --- the directory ----------------------------------------------------------------------------------------------

    @classmethod
    def sides(cls, report: dict[str, Any]) -> tuple[str, ...]:
        """The arrays of each split (``src`` and ``tgt``, ``text``, ``text`` and ``tags``)."""
        return ("text",)

    @classmethod
    @abstractmethod
    def mapped(
        cls, directory: Path, report: dict[str, Any], tokenizers: TokenizerPair, arrays: dict[str, dict[str, Any]]
    ) -> PreparedData:
        """The handle of a directory, given its report, its tokenizers and its mapped arrays (split -> side)."""

    @classmethod
    def open(cls, directory: str | Path) -> Any:
        """Map a prepared directory of this kind (its layout is :mod:`~dotformer.data.prepared.layout`'s).

        Raises:
            MissingDataError: no ``prepared.json`` there.
            DataError: a damaged directory: an array missing, of another length than the report says, or holding a
                token id outside its tokenizer's vocabulary (the file named).
        """

        directory = Path(directory)
        report = read_report(directory)
        src = load_tokenizer(directory / SRC_TOKENIZER_FILE)
        tgt = src if report["tokenizers"]["shared"] else load_tokenizer(directory / TGT_TOKENIZER_FILE)
        arrays: dict[str, dict[str, Any]] = {}
        for split in SPLIT_NAMES:
            arrays[split] = {side: open_ragged(array_stem(directory, split, side)) for side in cls.sides(report)}
            expected = report["splits"][split]["examples"]
            for side, array in arrays[split].items():
                if len(array) != expected:
                    raise DataError(f"{array.name}: {len(array):,} rows, but {REPORT_FILE} says {expected:,}")
                vocabulary = {"src": src, "text": src, "tgt": tgt}.get(side)  # tags are labels: checked where read
                largest = int(array.ids.max()) if vocabulary is not None and len(array.ids) else -1
                if vocabulary is not None and largest >= vocabulary.vocab_size:
                    raise DataError(
                        f"{array.name}.bin: token id {largest} outside the tokenizer's {vocabulary.vocab_size} ids: "
                        f"the array is damaged (prepare the data again)"
                    )
        return cls.mapped(directory, report, TokenizerPair(src, tgt), arrays)

    @classmethod
    def given_tokenizers(cls, tokenizers: TokenizerPair) -> Any:
        """The tokenizers to give :meth:`prepare` from a pair read back (a run's saved ones): one tokenizer for a kind
        of one vocabulary, the pair for pairs."""
        return tokenizers.src

    def text_line(self, item: Any, split: str) -> str:
        """One line of the held-out text file of ``split`` (``valid.tsv`` or ``valid.txt``).

        Raises:
            DataError: a text a line cannot hold.
        """
        return f"{item}\n"


# --- the passes -----------------------------------------------------------------------------------------------------


def scan_source(reader: Any, limit: int | None) -> Scan:
    """Pass 1: count the examples, and number the groups of the first ``limit`` of them (all without a limit)."""
    index = GroupIndex() if reader.grouped else None
    parts: list[np.ndarray] = []
    keys: list[str] = []
    count = 0
    for _, group in reader.records():
        count += 1
        if index is not None and (limit is None or count <= limit):
            keys.append(group or "")
            if len(keys) == CHUNK_EXAMPLES:
                parts.append(index.ids(keys))
                keys = []
    used = count if limit is None else min(limit, count)
    report = dict(reader.report)
    if limit is not None and limit < count:  # as dotformer.data.read.types.apply_limit records it
        report.update(limit=limit, pairs_before_limit=count, pairs=limit)
    if index is None:
        return Scan(count, used, None, [], report)
    parts.append(index.ids(keys))
    return Scan(count, used, np.concatenate(parts), index.names, report)


def deal(
    scan: Scan, seed: int, valid_fraction: float, test_fraction: float, test_groups: Sequence[str] | None,
    together: bool, name: str,
) -> np.ndarray:  # fmt: skip
    """The split of the used examples: :func:`~dotformer.data.prepared.splits.assign_splits`."""
    return assign_splits(scan.used, seed, valid_fraction, test_fraction, scan.group_of, scan.group_names,
                         test_groups, together, name)  # fmt: skip


def sample_mask(split: np.ndarray, sample_lines: int) -> tuple[np.ndarray, int]:
    """Which examples teach the tokenizers: every training one, or ``sample_lines`` of them drawn with
    :data:`SAMPLE_SEED`; and the number of training examples."""
    train = np.flatnonzero(split == TRAIN)
    if len(train) > sample_lines:
        train = np.sort(np.random.default_rng(SAMPLE_SEED).choice(train, sample_lines, replace=False))
    mask = np.zeros(len(split), dtype=bool)
    mask[train] = True
    return mask, int((split == TRAIN).sum())


class SampleFile:
    """The tokenizer sample (pairs or lines), written to ``DIR/sample.jsonl`` while the block lasts: every iteration
    reads it again, so a tokenizer learns from up to a million examples without holding them as strings.

    Args:
        directory: the partial directory. items: the sample (read once, here).
    """

    def __init__(self, directory: Path, items: Iterable[Pair | str]) -> None:
        self.path = directory / "sample.jsonl"
        self.count = 0
        self.pairs = False
        with self.path.open("w", encoding="utf-8", newline="\n") as handle:
            for item in items:
                self.pairs = isinstance(item, Pair)
                handle.write(json.dumps(item, ensure_ascii=False) + "\n")
                self.count += 1

    def __iter__(self) -> Iterator[Any]:
        with self.path.open(encoding="utf-8", newline="\n") as handle:
            for line in handle:
                item = json.loads(line)
                yield Pair(*item) if self.pairs else item

    def __enter__(self) -> SampleFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.path.unlink(missing_ok=True)


def sample_report(learned: str, size: int, train_count: int, sample_lines: int, unit: str) -> dict[str, Any]:
    how = f"all {size:,} training {unit}" if size == train_count else (
        f"a sample of {size:,} of the {train_count:,} training {unit} (seed {SAMPLE_SEED})"
    )  # fmt: skip
    return {"given": False, "learned": learned, "lines": size, "of": train_count, "sample_lines": sample_lines,
            "seed": SAMPLE_SEED, "line": f"tokenizers: {learned}, learned on {how}"}  # fmt: skip


def chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """Lists of ``size`` items (the last one shorter)."""
    iterator = iter(items)
    while piece := list(islice(iterator, size)):
        yield piece


def training_chunks(reading: Reading, size: int) -> Iterator[tuple[list[Any], np.ndarray]]:
    """Pass 3 over the training source: its used examples in lists of ``size``, each with their split codes."""
    start = 0
    for items in chunks((item for item, _ in islice(reading.source.records(), reading.scan.used)), size):
        yield items, reading.split[start : start + len(items)]
        start += len(items)


# --- checks, the report -------------------------------------------------------------------------------------------


def held_out_split(
    scan: Scan, source: Any, config: Any, seed: int, given: Container[str], unit: str
) -> tuple[np.ndarray, dict[str, Any]]:
    """The split of a text's lines or of labelled texts, and what the report says of it: with a ``valid`` file,
    every example is a training one; else whole groups (Bible books, pieces of a text file, single labelled texts of
    a file: ``scan``'s) are dealt with ``seed`` to test (``test_books``, or ``test_fraction`` unless a test file
    is ``given``) and to valid.

    Raises:
        ConfigError: test books of a source that is no Bible, unknown books, bad fractions. DataError: nothing left
            for training.
    """
    info: dict[str, Any] = {"random": config.valid is None, "corpus": source.name}
    if config.valid is None:
        books = check_books(source, config.test_books)
        test_fraction = 0.0 if "test" in given else config.test_fraction
        try:
            split = deal(scan, seed, config.valid_fraction, test_fraction, books or None, True, source.name)
        except DataError:
            held = f" in {len(scan.group_names)} held-out pieces" if scan.group_of is not None else ""
            raise DataError(
                f"{source.name}: no {unit} left for training ({scan.used} {unit}{held}; valid_fraction="
                f"{config.valid_fraction}, test_fraction={test_fraction}): give a longer text, or --valid and --test "
                f"files"
            ) from None
        info.update(seed=seed, valid_fraction=config.valid_fraction, test_fraction=test_fraction, test_groups=books)
        if scan.group_of is not None:
            valid_groups = np.unique(scan.group_of[split == VALID])
            info["valid_groups"] = sorted(scan.group_names[g] for g in valid_groups)
    else:
        split = np.full(scan.used, TRAIN, dtype=np.uint8)
    info["given"] = {role: getattr(config, role) for role in ("valid", "test")}
    return split, info


class UnknownCount:
    """The training tokens read as <unk>, counted chunk by chunk; a tokenizer file that reads more than
    :data:`MAX_UNKNOWN_SHARE` of them as <unk> is refused (the tokenizer of another text: the model would learn
    <unk>)."""

    def __init__(self) -> None:
        self.unknown = self.tokens = 0

    def add(self, encoded: EncodedChunk, train: np.ndarray) -> None:
        """Count the ids of the texts of ``encoded`` that ``train`` ((n,) bool) selects."""
        ids = np.repeat(train, encoded.lengths)
        self.unknown += int((encoded.ids[ids] == UNK_ID).sum())
        self.tokens += int(ids.sum())

    def checked(self, config: Any, summary: dict[str, Any]) -> dict[str, Any]:
        """``summary`` with the count in its training split (``unknown`` and ``unknown_share``).

        Raises:
            DataError: ``config.tokenizer_file`` reads too many training tokens as <unk> (the file and the share named).
        """
        share = self.unknown / self.tokens if self.tokens else 0.0
        summary["train"].update(unknown=self.unknown, unknown_share=share)
        if config.tokenizer_file and share > MAX_UNKNOWN_SHARE:
            raise DataError(
                f"{config.tokenizer_file}: {share:.0%} of the training text's tokens are unknown to this tokenizer "
                f"(<unk>): is it the tokenizer of this text?"
            )
        return summary


def tokenizer_report(src: Tokenizer, tgt: Tokenizer, sample: dict[str, Any]) -> dict[str, Any]:
    return {
        "shared": src is tgt,
        "src": {"kind": src.kind, "vocab_size": src.vocab_size},
        "tgt": {"kind": tgt.kind, "vocab_size": tgt.vocab_size},
        "sample": {key: value for key, value in sample.items() if key != "line"},
    }


def finish(
    partial: Path,
    report: dict[str, Any],
    lines: list[str],
    started: float,
    inputs: list[InputFile],
    directory: Path,
    unit: str,
) -> None:
    """Write ``prepared.json`` last (into ``partial``, which becomes ``directory``): the inputs, the split counts, the
    lines, the seconds taken; ``unit``: what an example is called."""
    seconds = time.monotonic() - started
    tokens = sum(n for split in report["splits"].values() for side, n in split["tokens"].items() if side != "tags")
    counts = " / ".join(f"{report['splits'][name]['examples']:,}" for name in SPLIT_NAMES)
    lines.append(f"prepared {counts} {unit} ({tokens:,} tokens) in {seconds:.1f} s: {directory}")
    report.update(inputs=[entry.to_dict() for entry in inputs], lines=lines, seconds=round(seconds, 3))
    path = partial / REPORT_FILE
    path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
