"""Pairs read whole into memory: a run's three splits from its data settings, and the tokenizers of pairs. What
fine-tuning reads to check (or extend) a checkpoint's vocabulary, and what the pairs kind learns its tokenizers with
(:mod:`dotformer.data.prepared.pair_kind`, which prepares every run's data in passes).

Two ways to get the splits:

* **given files**: ``DataConfig.valid`` (and ``test``) name files of their own; nothing is split at random, each split
  holds exactly its file's pairs (the training file's ``limit`` aside). Without ``test`` there is no test split: a
  test file is evaluated later with ``dotformer evaluate --data TEST``. ``test`` without ``valid`` draws the
  validation split from the training file (``valid_fraction``, seeded) and takes the test split from its file.
* **one corpus**: the deterministic, group-disjoint split of :func:`dotformer.data.prepared.splits.split_corpus`.

Every file is read with the same reader options (:meth:`dotformer.data.config.DataConfig.corpus_options`), and
each gives one line for the screen (:func:`dotformer.data.read.corpora.describe_corpus`: columns used, rows read, pairs
kept, every drop counted).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dotformer.data.prepared.splits import Splits, split_corpus
from dotformer.data.read.bible import book_ids
from dotformer.data.read.corpora import load_pairs
from dotformer.data.read.types import NAMED_TASKS, Corpus, describe_corpus
from dotformer.data.tokenize.tokenizer_files import (
    TokenizerPair,
    read_tokenizer_file,
    train_tokenizer,
    train_tokenizer_pair,
)
from dotformer.data.tokenize.tokenizers import DEFAULT_BPE_VOCAB_SIZE
from dotformer.errors import ConfigError

logger = logging.getLogger(__name__)

NO_TEST_LINE = (
    "test: none (no --test file): evaluate a test file later with dotformer evaluate --checkpoint RUN --data TEST"
)
SINGLE_WORD_SHARE = 0.9  # a side whose training texts are single words this often gets a note when BPE reads it

if TYPE_CHECKING:
    from dotformer.data.config import DataConfig
    from dotformer.data.read.types import Pair
    from dotformer.data.tokenize.tokenizer_files import TokenizerPair
    from dotformer.data.tokenize.tokenizers import Tokenizer


@dataclass
class RunData:
    """The splits of a run and what reading them said.

    Attributes:
        corpus: the training corpus (its task is the run's task).
        splits: train, valid and test pairs; ``splits.info`` is saved as split.json.
        lines: one line per file read (and one for a missing test split), for standard error.
    """

    corpus: Corpus
    splits: Splits
    lines: list[str] = field(default_factory=list)


def check_named_task(data: DataConfig) -> None:
    """Raise ConfigError when ``data.task`` contradicts a named corpus (copy/reverse may be scored as exact match)."""
    named_task = NAMED_TASKS.get(data.dataset)
    compatible = data.task == named_task or (named_task == "synthetic" and data.task == "exact")
    if data.task is not None and named_task is not None and not compatible:
        raise ConfigError(f"--task {data.task}: {data.dataset} is a {named_task} corpus; --task is for your own files")


def read_run_data(data: DataConfig, seed: int) -> RunData:
    """Read the training corpus, and the valid/test files when given, into the run's splits (module docstring).

    Args:
        data: the data settings (``dataset``, ``valid``, ``test``, ``task``, reader options, fractions).
        seed: the seed of a random split.

    Raises:
        ConfigError: a ``task`` that contradicts a named corpus, ``test_books`` with a given valid file, or valid /
            test files whose task differs from the training file's.
        DataError / MissingDataError: a file cannot be read (FILE:LINE in the message).
    """
    check_named_task(data)
    corpus = load_pairs(data.dataset, data.corpus_options("train"))
    lines = [describe_corpus(corpus, "train")]
    if data.valid is None and data.test is None:
        test_groups = data.test_books
        if test_groups and data.dataset == "bible":
            test_groups = tuple(book_ids(test_groups))  # "Matthew", "mk" -> OSIS ids "Matt", "Mark"
        splits = split_corpus(corpus, seed, data.valid_fraction, data.test_fraction, test_groups)
        counts = splits.info["counts"]
        lines[0] += f"; split at random (seed {seed}): {counts['train']:,} / {counts['valid']:,} / {counts['test']:,}"
        return RunData(corpus, splits, lines)
    given, given_lines = read_given(data, corpus.task, corpus.name)
    lines += given_lines
    if "valid" in given:
        train, valid = list(corpus.pairs), list(given["valid"].pairs)
        how = {"valid_fraction": None}
    else:  # a test file, and valid drawn from the training file
        drawn = split_corpus(corpus, seed, data.valid_fraction, 0.0)
        train, valid = drawn.train, drawn.valid
        how = {"valid_fraction": data.valid_fraction}
        lines.append(f"valid: {len(valid):,} pairs drawn at random (seed {seed}) from {corpus.name}")
    test = list(given["test"].pairs) if "test" in given else []
    if "test" not in given:
        lines.append(NO_TEST_LINE)
    info = {
        "given": {
            "train": corpus.name,
            **{role: given[role].name if role in given else None for role in ("valid", "test")},
        },
        "seed": seed,
        **how,
        "test_fraction": None,
        "test_groups": None,
        "keep_groups_together": False,
        "counts": {"train": len(train), "valid": len(valid), "test": len(test)},
        "corpus": {"name": corpus.name, "task": corpus.task, "report": corpus.report},
        **{f"{role}_corpus": {"name": c.name, "report": c.report} for role, c in given.items()},
    }
    return RunData(corpus, Splits(train=train, valid=valid, test=test, info=info), lines)


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
