"""Preparing data once: a corpus read in passes, split, tokenizers learned on a bounded sample, every split encoded in
chunks into memory-mapped token arrays (the directory of :mod:`dotformer.data.prepared`).

:func:`prepare_pairs` (translation, G2P, copy/reverse: a :class:`~dotformer.data.config.DataConfig`) and
:func:`prepare_text` (a language model: an :class:`~dotformer.data.config.LMDataConfig`; a masked language model:
an :class:`~dotformer.data.config.EncoderDataConfig` of task ``mlm``) read the training source in up to three
passes, holding a chunk of it at a time, never the corpus (a classifier's and a tagger's texts go through the same
passes and one more for their labels: :mod:`dotformer.data.preparing_labelled`):

1. **count**: the pairs (lines) kept, every drop counted, and their group keys (a g2p file's words, the Bible's
   books, a text's pieces of 100 lines); the split is then dealt by :func:`~dotformer.data.splits.assign_splits`
   (given valid/test files are read whole: they are small);
2. **sample** (only when a tokenizer is learned): the texts of at most ``sample_lines`` training examples, drawn with
   a fixed seed (all of them when there are fewer; as sentencepiece's ``input_sentence_size``), written to a file
   that the tokenizers learn from (read again per side, never held as strings); the report says how many of how
   many;
3. **encode**: chunks of ``chunk`` examples through the tokenizers' batch encoders
   (:meth:`~dotformer.data.tokenizers.Tokenizer.encode_arrays`: BPE on every core, characters through numpy),
   written straight to each split's arrays; the valid and test text is written beside them.

Everything is written into a partial directory beside the target, renamed to it at the end (a crash leaves no
directory that looks prepared). No torch here.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Container, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from dotformer.data.arrays import save_array, token_dtype
from dotformer.data.config import DataConfig, EncoderDataConfig, LMDataConfig
from dotformer.data.corpora import NAMED_TASKS, PairReader, describe_corpus, describe_report, load_pairs, open_pairs
from dotformer.data.fingerprint import InputFile, fingerprint, pair_inputs, text_inputs, tokenizer_digest
from dotformer.data.labelled_text import LabelledReader
from dotformer.data.prepared import (
    FORMAT_VERSION,
    REPORT_FILE,
    SPLIT_FILE,
    SRC_TOKENIZER_FILE,
    TGT_TOKENIZER_FILE,
    UNUSED,
    PreparedPairs,
    PreparedText,
    kind_of_task,
    open_prepared,
)
from dotformer.data.splits import SPLIT_NAMES, TEST, TRAIN, VALID, GroupIndex, assign_splits
from dotformer.data.text import TextReader, pieces
from dotformer.data.tokenizer_files import TokenizerPair
from dotformer.data.tokenizers import MASK_TOKEN, UNK_ID, Tokenizer
from dotformer.data.types import Corpus, Pair
from dotformer.data.writing import SplitWriters, writing_directory
from dotformer.errors import ConfigError, DataError

DEFAULT_SAMPLE_LINES = 1_000_000  # training examples a tokenizer learns from at most
SAMPLE_SEED = 0  # the sample's draw: fixed, so that a preparation without a random split serves every run seed
CHUNK_EXAMPLES = 20_000  # examples encoded at a time
MAX_UNKNOWN_SHARE = 0.5  # a given tokenizer that reads more of the training text as <unk> is another text's
# the fields of a task's data config decided when batching, so no part of its prepared data: a language model's block
# size, a masked language model's unit and masking, the most tokens an encoder reads (its texts are cut then)
BATCH_TIME_FIELDS = {"lm": ("block_size",), "mlm": ("block_size", "mlm_unit", "mask_probability"),
                     "classify": ("block_size",), "tag": ("block_size",)}  # fmt: skip
_NOT_READ = ("hf_cache_dir",)  # a field of pairs that does not change the data (where datasets caches a download)
AnyDataConfig = DataConfig | LMDataConfig | EncoderDataConfig


def uses_seed(config: AnyDataConfig) -> bool:
    """Whether the prepared data of ``config`` depends on the run's seed: a random split (no ``valid`` file), or a
    classifier's or tagger's ``limit`` (a seeded sample of the training texts)."""
    return config.valid is None or (isinstance(config, EncoderDataConfig) and config.task != "mlm" and
                                    config.limit is not None)  # fmt: skip


def settings_of(
    config: AnyDataConfig,
    seed: int,
    tokenizers: TokenizerPair | Tokenizer | None = None,
    sample_lines: int = DEFAULT_SAMPLE_LINES,
) -> dict[str, Any]:
    """Everything but the input files' contents that prepared data depends on: the kind, the format, the data config
    with its task's defaults filled in (less what does not change the data: the datasets cache directory, what is
    decided when batching, :data:`BATCH_TIME_FIELDS`), the seed when it matters (:func:`uses_seed`), the tokenizer
    sample, the ``tokenizers`` library's version, the given tokenizers' hashes, and a masked language model's mask
    token (its tokenizer is learned with it)."""
    import tokenizers as hf_tokenizers

    if isinstance(config, DataConfig):  # a setting left to its task's default and the same setting given are one
        config = config.resolved(NAMED_TASKS.get(config.dataset) or config.task or "translation")
        kind, skipped = "pairs", _NOT_READ
    else:
        kind, skipped = kind_of_task(config.task), BATCH_TIME_FIELDS[config.task]
    data = {key: value for key, value in config.to_dict().items() if key not in skipped}
    given: list[Any] | None = None
    if isinstance(tokenizers, Tokenizer):
        given = [tokenizer_digest(tokenizers)]
    elif tokenizers is not None:
        given = [tokenizer_digest(tokenizers.src), tokenizer_digest(tokenizers.tgt), tokenizers.src is tokenizers.tgt]
    settings = {
        "kind": kind,
        "format": FORMAT_VERSION,
        "data": data,
        "seed": seed if uses_seed(config) else None,
        "sample": [sample_lines, SAMPLE_SEED],
        "tokenizers_library": hf_tokenizers.__version__,
        "given_tokenizers": given,
    }
    if config.task == "mlm":
        settings["mask_token"] = MASK_TOKEN
    return settings


def inputs_of(config: AnyDataConfig) -> list[InputFile]:
    """The input files of ``config``, each with its size, time and content hash (:mod:`dotformer.data.fingerprint`)."""
    return pair_inputs(config) if isinstance(config, DataConfig) else text_inputs(config)


def fingerprint_of(
    config: AnyDataConfig,
    seed: int,
    tokenizers: TokenizerPair | Tokenizer | None = None,
    sample_lines: int = DEFAULT_SAMPLE_LINES,
    inputs: list[InputFile] | None = None,
) -> str:
    """The fingerprint of the prepared data of ``config``: :func:`~dotformer.data.fingerprint.fingerprint` of
    :func:`settings_of` and the content of every input file (:func:`inputs_of`, hashed here when not given)."""
    return fingerprint(
        settings_of(config, seed, tokenizers, sample_lines), inputs_of(config) if inputs is None else inputs
    )


@dataclass
class Scan:
    """Pass 1 over a training source: how many examples it keeps, how many are used (a limit), their groups."""

    count: int  # examples the source keeps
    used: int  # the first `used` of them are prepared (limit)
    group_of: np.ndarray | None  # (used,) int64 group numbers, or None without groups
    group_names: list[str]
    report: dict[str, Any]  # the reader's report, the limit recorded as apply_limit records it


def prepare_pairs(
    config: DataConfig,
    seed: int,
    directory: str | Path,
    tokenizers: TokenizerPair | None = None,
    *,
    sample_lines: int = DEFAULT_SAMPLE_LINES,
    chunk: int = CHUNK_EXAMPLES,
    inputs: list[InputFile] | None = None,
) -> PreparedPairs:
    """Prepare the pairs of ``config`` into ``directory`` (a new or empty directory) and map them.

    Args:
        config: the dataset, valid/test files, reader options, tokenizer settings, fractions of a random split.
        seed: the seed of a random split (no other use: the tokenizer sample's draw is fixed).
        directory: where the prepared data goes (:mod:`dotformer.data.prepared` gives the layout).
        tokenizers: use these instead of learning or reading tokenizers (fine-tuning a checkpoint).
        sample_lines: at most this many training pairs teach the tokenizers.
        chunk: pairs encoded at a time (memory is bounded by a chunk).
        inputs: the input files described already (:func:`inputs_of`; None: described here, each file hashed).

    Raises:
        ConfigError: a task that contradicts a named corpus, test_books beside given files, a directory that is
            not empty, or bad tokenizer settings.
        DataError / MissingDataError: a file cannot be read (FILE:LINE in the message), nothing is left to train on.
    """
    started = time.monotonic()
    _check_task(config)
    check_sizes(sample_lines, chunk)
    inputs = inputs_of(config) if inputs is None else inputs
    settings = settings_of(config, seed, tokenizers, sample_lines)
    reader = open_pairs(config.dataset, config.corpus_options("train"))
    scan = scan_source(reader, config.limit)
    if scan.used == 0:
        raise DataError(f"{config.dataset}: no pairs left to train on (report: {scan.report})")
    lines = [describe_report(reader.name, reader.task, scan.report, "train")]
    given: dict[str, Corpus] = {}
    info: dict[str, Any] = {"random": config.valid is None}
    if config.valid is None and config.test is None:
        test_groups = book_ids(config.test_books) if config.test_books and config.dataset == "bible" else None
        split = deal(scan, seed, config.valid_fraction, config.test_fraction, test_groups or config.test_books,
                      reader.keep_groups_together, reader.name)  # fmt: skip
        counts = [int((split == code).sum()) for code in (TRAIN, VALID, TEST)]
        lines[0] += f"; split at random (seed {seed}): {counts[0]:,} / {counts[1]:,} / {counts[2]:,}"
        info.update(valid_fraction=config.valid_fraction, test_fraction=config.test_fraction)
        info.update(test_groups=list(test_groups or config.test_books or []) or None)
    else:
        if config.test_books:
            raise ConfigError(
                f"test_books ({','.join(config.test_books)}) holds Bible books out of a random split, and --valid/"
                f"--test give the splits as files: drop one (--test-books '' clears a config file's books)"
            )
        for role in ("valid", "test"):
            spec = getattr(config, role)
            if spec is not None:
                given[role] = load_pairs(spec, config.corpus_options(role))
                if given[role].task != reader.task:
                    raise ConfigError(
                        f"{spec}: task {given[role].task}, but the training data {reader.name} is {reader.task}"
                    )
                lines.append(describe_corpus(given[role], role))
        if "valid" in given:
            split = np.full(scan.used, TRAIN, dtype=np.uint8)
        else:  # a test file, and valid drawn from the training file
            split = deal(scan, seed, config.valid_fraction, 0.0, None, reader.keep_groups_together, reader.name)
            info.update(valid_fraction=config.valid_fraction)
            lines.append(
                f"valid: {int((split == VALID).sum()):,} pairs drawn at random (seed {seed}) from {reader.name}"
            )
        if "test" not in given:
            lines.append(
                "test: none (no --test file): evaluate a test file later with dotformer evaluate --checkpoint RUN "
                "--data TEST"
            )
        info["given"] = {role: getattr(config, role) for role in ("valid", "test")}
    resolved = config.resolved(reader.task)
    with writing_directory(Path(directory)) as partial:
        save_array(partial / SPLIT_FILE, with_unused(split, scan.count))
        tokenizers, sample = _pair_tokenizers(partial, resolved, reader, scan.used, split, tokenizers, sample_lines)
        lines.append(sample["line"])
        written = _encode_pairs(partial, reader, scan.used, split, given, tokenizers, chunk)
        warnings = [
            _leakage_line(role, getattr(config, role), config.dataset, shared, sources)
            for role, (shared, sources) in written.pop("shared_sources").items()
            if shared
        ]
        tokenizers.src.save(partial / SRC_TOKENIZER_FILE)
        tokenizers.tgt.save(partial / TGT_TOKENIZER_FILE)
        report = {
            "format": FORMAT_VERSION,
            "kind": "pairs",
            "fingerprint": fingerprint(settings, inputs),
            "task": reader.task,
            "seed": seed if info["random"] else None,
            "data": resolved.to_dict(),
            "corpus": {"name": reader.name, "task": reader.task, "report": scan.report},
            "given": {role: {"name": c.name, "report": c.report} for role, c in given.items()},
            "split": info,
            "tokenizers": tokenizer_report(tokenizers.src, tokenizers.tgt, sample),
            "splits": written,
            "warnings": warnings,
        }
        finish(partial, report, lines, started, inputs, Path(directory))
    return open_prepared(directory)  # type: ignore[return-value]


def prepare_text(
    config: LMDataConfig | EncoderDataConfig,
    seed: int,
    directory: str | Path,
    tokenizer: Tokenizer | None = None,
    *,
    sample_lines: int = DEFAULT_SAMPLE_LINES,
    chunk: int = CHUNK_EXAMPLES,
    inputs: list[InputFile] | None = None,
) -> PreparedText:
    """Prepare the text of a language model (or a masked language model's) into ``directory`` (a new or empty
    directory) and map it.

    Each line becomes its ids followed by EOS (its line end); a split's rows one after the other are its token
    stream. Held-out text: the ``valid``/``test`` files, or whole groups of the text (Bible books, or pieces of 100
    lines: :mod:`dotformer.data.text`) dealt with ``seed``; ``limit`` keeps the first lines of the training split.
    A masked language model's tokenizer (an :class:`EncoderDataConfig` of task ``mlm``) is learned with the mask
    token ``<mask>``, or must have one (a file, or a given tokenizer).

    Args:
        config: the text, held-out files, tokenizer settings (what is decided when batching is not used: the block
            size, a masked language model's unit and masking).
        seed: the seed of a random split.
        directory: where the prepared data goes.
        tokenizer: use this tokenizer instead of learning or reading one.
        sample_lines, chunk, inputs: as :func:`prepare_pairs`.

    Raises:
        ConfigError: test books of a text that is no Bible, unknown books, a directory that is not empty.
        DataError / MissingDataError: a text cannot be read, no lines left for training, a tokenizer file that
            reads more than half of the training text as <unk>, or a masked language model's tokenizer without a
            mask token.
    """
    from dotformer.data.text import read_file_text

    started = time.monotonic()
    check_sizes(sample_lines, chunk)
    inputs = inputs_of(config) if inputs is None else inputs
    settings = settings_of(config, seed, tokenizer, sample_lines)
    source = TextReader(config.dataset, config.sword_path)
    scan = scan_source(source, None)
    if scan.used == 0:
        raise DataError(f"{config.dataset}: no lines to train on")
    if source.groups is None:  # a file: pieces of PIECE_LINES lines, fewer in a short file
        scan.group_of, scan.group_names = pieces(scan.used)
    given = {role: read_file_text(getattr(config, role)).lines for role in ("valid", "test") if getattr(config, role)}
    split, info = held_out_split(scan, source, config, seed, given, "lines")
    if config.limit is not None:
        train = np.flatnonzero(split == TRAIN)
        split[train[config.limit :]] = UNUSED
        info["limit"] = config.limit
    with writing_directory(Path(directory)) as partial:
        save_array(partial / SPLIT_FILE, split)
        texts = (line for line, _ in source.records())
        tokenizer, sample = text_tokenizer(partial, config, texts, scan.used, split, tokenizer, sample_lines)
        written = _encode_text(partial, source, scan.used, split, given, tokenizer, chunk)
        check_unknown_share(config, written["train"])
        for name in (SRC_TOKENIZER_FILE, TGT_TOKENIZER_FILE):
            tokenizer.save(partial / name)
        counts = {name: written[name]["examples"] for name in SPLIT_NAMES}
        how = "given files" if not info["random"] else f"whole groups held out at random (seed {seed})"
        lines = [
            f"text {source.name}: {scan.count:,} lines; {how}: {counts['train']:,} train / {counts['valid']:,} valid / "
            f"{counts['test']:,} test lines" + (f" (--limit keeps the first {config.limit:,})" if config.limit else ""),
            sample["line"],
        ]
        report = {
            "format": FORMAT_VERSION,
            "kind": "text",
            "fingerprint": fingerprint(settings, inputs),
            "task": config.task,
            "seed": seed if info["random"] else None,
            "data": config.to_dict(),
            "corpus": {"name": source.name, "report": {**source.report, "lines": scan.count}},
            "split": info,
            "tokenizers": tokenizer_report(tokenizer, tokenizer, sample),
            "splits": written,
        }
        finish(partial, report, lines, started, inputs, Path(directory))
    return open_prepared(directory)  # type: ignore[return-value]


def held_out_split(
    scan: Scan, source: Any, config: LMDataConfig | EncoderDataConfig, seed: int, given: Container[str], unit: str
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
        books = text_books(source, config.test_books)
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


def check_unknown_share(config: LMDataConfig | EncoderDataConfig, train: dict[str, Any]) -> None:
    """Refuse a tokenizer file that reads more than :data:`MAX_UNKNOWN_SHARE` of the training tokens as <unk> (the
    tokenizer of another text: the model would learn <unk>); ``train``: the training split's counts (its
    ``unknown_share``).

    Raises:
        DataError: naming the file and the share.
    """
    share = train["unknown_share"]
    if config.tokenizer_file and share > MAX_UNKNOWN_SHARE:
        raise DataError(
            f"{config.tokenizer_file}: {share:.0%} of the training text's tokens are unknown to this tokenizer "
            f"(<unk>): is it the tokenizer of this text?"
        )


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
    if limit is not None and limit < count:  # as dotformer.data.types.apply_limit records it
        report.update(limit=limit, pairs_before_limit=count, pairs=limit)
    if index is None:
        return Scan(count, used, None, [], report)
    parts.append(index.ids(keys))
    return Scan(count, used, np.concatenate(parts), index.names, report)


def deal(
    scan: Scan, seed: int, valid_fraction: float, test_fraction: float, test_groups: Sequence[str] | None,
    together: bool, name: str,
) -> np.ndarray:  # fmt: skip
    """The split of the used examples: :func:`~dotformer.data.splits.assign_splits`."""
    return assign_splits(scan.used, seed, valid_fraction, test_fraction, scan.group_of, scan.group_names,
                         test_groups, together, name)  # fmt: skip


def with_unused(split: np.ndarray, count: int) -> np.ndarray:
    """``split`` extended to every example of the source: those past a limit are :data:`UNUSED`."""
    return np.concatenate([split, np.full(count - len(split), UNUSED, dtype=np.uint8)])


def sample_mask(split: np.ndarray, sample_lines: int) -> tuple[np.ndarray, int]:
    """Which examples teach the tokenizers: every training one, or ``sample_lines`` of them drawn with
    :data:`SAMPLE_SEED`; and the number of training examples."""
    train = np.flatnonzero(split == TRAIN)
    if len(train) > sample_lines:
        train = np.sort(np.random.default_rng(SAMPLE_SEED).choice(train, sample_lines, replace=False))
    mask = np.zeros(len(split), dtype=bool)
    mask[train] = True
    return mask, int((split == TRAIN).sum())


def _pair_tokenizers(
    directory: Path, config: DataConfig, reader: PairReader, used: int, split: np.ndarray,
    given: TokenizerPair | None, sample_lines: int,
) -> tuple[TokenizerPair, dict[str, Any]]:  # fmt: skip
    """Pass 2: the tokenizers (given, read from files, or learned on a sample of the training pairs, written to a
    file of ``directory`` for the time it takes) and what the report says of the sample."""
    from dotformer.data.prepare import make_tokenizers

    if given is not None:
        return given, {"given": True, "line": "tokenizers: given (those of the checkpoint fine-tuned)"}
    if config.src_tokenizer_file and config.tgt_tokenizer_file:
        files = f"{config.src_tokenizer_file}" + (
            "" if config.src_tokenizer_file == config.tgt_tokenizer_file else f", {config.tgt_tokenizer_file}"
        )
        return make_tokenizers(config, []), {"given": True, "line": f"tokenizers: read from {files}"}
    mask, train_count = sample_mask(split, sample_lines)
    with SampleFile(
        directory, (pair for i, (pair, _) in enumerate(islice(reader.records(), used)) if mask[i])
    ) as sample:
        tokenizers = make_tokenizers(config, sample)
    kinds = [f"{side} {kind}" for side, kind in (("source", config.src_tokenizer), ("target", config.tgt_tokenizer))
             if kind is not None]  # fmt: skip
    learned = "shared " + config.src_tokenizer if config.shared_vocab else ", ".join(kinds)  # type: ignore[operator]
    return tokenizers, sample_report(learned, sample.count, train_count, sample_lines, "pairs")


def text_tokenizer(
    directory: Path, config: LMDataConfig | EncoderDataConfig, texts: Iterable[str], used: int, split: np.ndarray,
    given: Tokenizer | None, sample_lines: int,
) -> tuple[Tokenizer, dict[str, Any]]:  # fmt: skip
    """Pass 2 of a text (or of labelled texts): its one tokenizer, given, read from a file, or learned on a sample
    of the training texts (``texts``: the source's texts in order, read only to learn one); a masked language
    model's is learned with ``<mask>``, and must have a mask token.

    Raises:
        DataError: a masked language model's tokenizer without a mask token.
    """
    from dotformer.data.tokenizer_files import read_tokenizer_file, train_tokenizer

    mask = config.task == "mlm"
    if given is not None:
        tokenizer, sample = given, {"given": True, "line": "tokenizer: given"}
    elif config.tokenizer_file:
        tokenizer = read_tokenizer_file(config.tokenizer_file)
        sample = {"given": True, "line": f"tokenizer: read from {config.tokenizer_file}"}
    else:
        chosen, train_count = sample_mask(split, sample_lines)
        with SampleFile(directory, (text for i, text in enumerate(islice(texts, used)) if chosen[i])) as file:
            tokenizer = train_tokenizer(config.tokenizer, file, config.vocab_size, mask=mask)
        unit = "lines" if kind_of_task(config.task) == "text" else "texts"
        sample = sample_report(config.tokenizer + (" with <mask>" if mask else ""), file.count, train_count,
                               sample_lines, unit)  # fmt: skip
    if mask and tokenizer.mask_id is None:
        where = config.tokenizer_file if given is None else "the tokenizer given"
        raise DataError(f"{where}: the vocabulary has no mask token (<mask> or [MASK]) for a masked language model")
    return tokenizer, sample


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


def _encode_pairs(
    directory: Path, reader: PairReader, used: int, split: np.ndarray, given: dict[str, Corpus],
    tokenizers: TokenizerPair, chunk: int,
) -> dict[str, Any]:  # fmt: skip
    """Pass 3: every pair encoded into its split's arrays, the valid/test pairs written as TSV; per split the
    examples and tokens, and how many distinct sources of each given file the training pairs share."""
    dtypes = (token_dtype(tokenizers.src.vocab_size), token_dtype(tokenizers.tgt.vocab_size))
    held_out = {role: {pair.source for pair in corpus.pairs} for role, corpus in given.items()}
    shared: dict[str, set[str]] = {role: set() for role in given}
    with SplitWriters(directory, ("src", "tgt"), dtypes, "pairs") as out:
        start = 0
        for pairs in chunks((pair for pair, _ in islice(reader.records(), used)), chunk):
            codes = split[start : start + len(pairs)]
            start += len(pairs)
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


def _encode_text(
    directory: Path, source: TextReader, used: int, split: np.ndarray, given: dict[str, list[str]],
    tokenizer: Tokenizer, chunk: int,
) -> dict[str, Any]:  # fmt: skip
    """Pass 3 of a text: every line's ids and EOS into its split's array, the valid/test lines written as text; per
    split the lines, tokens and characters, and the training tokens read as <unk> (how many, and their share of
    the training tokens but the line ends)."""
    unknown = tokens = 0
    with SplitWriters(directory, ("text",), (token_dtype(tokenizer.vocab_size),), "text") as out:
        start = 0
        for lines in chunks((line for line, _ in islice(source.records(), used)), chunk):
            codes = split[start : start + len(lines)]
            start += len(lines)
            encoded = tokenizer.encode_arrays(lines)
            train = np.repeat(codes == TRAIN, encoded.lengths)
            unknown += int((encoded.ids[train] == UNK_ID).sum())
            tokens += int(train.sum())
            for code, name in enumerate(SPLIT_NAMES):
                out.write(name, codes == code, (encoded.with_eos(),), lines if name not in given else ())
        for role, held_out in given.items():
            for lines in chunks(held_out, chunk):
                out.write(role, np.ones(len(lines), dtype=bool), (tokenizer.encode_arrays(lines).with_eos(),), lines)
    summary = out.summary()
    summary["train"].update(unknown=unknown, unknown_share=unknown / tokens if tokens else 0.0)
    return summary


def chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """Lists of ``size`` items (the last one shorter)."""
    iterator = iter(items)
    while piece := list(islice(iterator, size)):
        yield piece


def text_books(source: TextReader | LabelledReader, books: Sequence[str] | None) -> list[str]:
    """OSIS ids of ``books`` held out of a Bible (none for none).

    Raises:
        ConfigError: the text is no Bible, or a name matches no book.
    """
    if not books:
        return []
    if not source.is_bible:
        raise ConfigError(f"test books hold out Bible books; {source.name} is not a Bible (use --test FILE)")
    return book_ids(books)


def book_ids(books: Sequence[str]) -> list[str]:
    from dotformer.data.bible import book_ids

    return book_ids(list(books))


# --- checks, the directory, the report ------------------------------------------------------------------------------


def _check_task(config: DataConfig) -> None:
    """Raise ConfigError when ``config.task`` contradicts a named corpus."""
    named_task = NAMED_TASKS.get(config.dataset)
    compatible = config.task == named_task or (named_task == "synthetic" and config.task == "exact")
    if config.task is not None and named_task is not None and not compatible:
        raise ConfigError(
            f"--task {config.task}: {config.dataset} is a {named_task} corpus; --task is for your own files"
        )


def check_sizes(sample_lines: int, chunk: int) -> None:
    for name, value in (("sample_lines", sample_lines), ("chunk", chunk)):
        if not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name} must be a positive number of examples, got {value!r}")


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


def tokenizer_report(src: Tokenizer, tgt: Tokenizer, sample: dict[str, Any]) -> dict[str, Any]:
    return {
        "shared": src is tgt,
        "src": {"kind": src.kind, "vocab_size": src.vocab_size},
        "tgt": {"kind": tgt.kind, "vocab_size": tgt.vocab_size},
        "sample": {key: value for key, value in sample.items() if key != "line"},
    }


def finish(
    partial: Path, report: dict[str, Any], lines: list[str], started: float, inputs: list[InputFile], directory: Path
) -> None:
    """Write ``prepared.json`` last (into ``partial``, which becomes ``directory``): the inputs, the split counts, the
    lines, the seconds taken."""
    seconds = time.monotonic() - started
    tokens = sum(n for split in report["splits"].values() for side, n in split["tokens"].items() if side != "tags")
    unit = {"text": "lines", "pairs": "pairs", "labelled": "texts"}[report["kind"]]
    counts = " / ".join(f"{report['splits'][name]['examples']:,}" for name in SPLIT_NAMES)
    lines.append(f"prepared {counts} {unit} ({tokens:,} tokens) in {seconds:.1f} s: {directory}")
    report.update(inputs=[entry.to_dict() for entry in inputs], lines=lines, seconds=round(seconds, 3))
    path = partial / REPORT_FILE
    path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
