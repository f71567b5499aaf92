"""Deterministic train / valid / test splits, group-disjoint, saved as TSV files with a JSON description.

A split is a pure function of (corpus, seed, fractions, test_groups): the same inputs give the same split on every
machine. When the corpus has groups and keeps them together (CMUdict: the word), whole groups are assigned, so no
word has one pronunciation in train and another in test. The Bible keeps its groups (books) apart only on request:
its default split draws random verses, and ``test_groups=["Matt", "Mark"]`` holds whole books out as the test set.

On disk (``save_splits``)::

    DIR/train.tsv   source<TAB>target, one pair per line, UTF-8
    DIR/valid.tsv
    DIR/test.tsv
    DIR/split.json  {"seed", "valid_fraction", "test_fraction", "test_groups", "keep_groups_together",
                     "counts": {"train", "valid", "test"}, "corpus": {"name", "task", "report"}}
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from dotformer.data.textio import read_json, read_text, split_lines
from dotformer.data.types import Corpus, Pair
from dotformer.errors import ConfigError, DataError, MissingDataError

SPLIT_NAMES = ("train", "valid", "test")


class SplitIndices(NamedTuple):
    """Positions in the corpus of each split's pairs, ascending."""

    train: list[int]
    valid: list[int]
    test: list[int]


@dataclass(frozen=True)
class Splits:
    """The three splits' pairs, in corpus order, and how they were made.

    Attributes:
        train, valid, test: the pairs.
        info: JSON-serialisable description saved as split.json (seed, fractions, test_groups, counts, corpus
            name/task/report).
    """

    train: list[Pair]
    valid: list[Pair]
    test: list[Pair]
    info: dict[str, Any] = field(default_factory=dict)


def split_corpus(
    corpus: Corpus,
    seed: int,
    valid_fraction: float,
    test_fraction: float,
    test_groups: list[str] | tuple[str, ...] | None = None,
    keep_groups_together: bool | None = None,
) -> Splits:
    """Split ``corpus`` into train, valid and test (see :func:`split_indices` for the rule).

    Raises:
        ConfigError: fractions out of range, or ``test_groups`` on a corpus without groups or naming unknown groups.
        DataError: nothing is left for training.
    """
    indices = split_indices(corpus, seed, valid_fraction, test_fraction, test_groups, keep_groups_together)
    together = corpus.keep_groups_together if keep_groups_together is None else keep_groups_together
    info = {
        "seed": seed,
        "valid_fraction": valid_fraction,
        "test_fraction": test_fraction,
        "test_groups": list(test_groups) if test_groups else None,
        "keep_groups_together": bool(together and corpus.groups is not None),
        "counts": {name: len(getattr(indices, name)) for name in SPLIT_NAMES},
        "corpus": {"name": corpus.name, "task": corpus.task, "report": corpus.report},
    }
    pairs = corpus.pairs
    return Splits(
        train=[pairs[i] for i in indices.train],
        valid=[pairs[i] for i in indices.valid],
        test=[pairs[i] for i in indices.test],
        info=info,
    )


def split_indices(
    corpus: Corpus,
    seed: int,
    valid_fraction: float,
    test_fraction: float,
    test_groups: list[str] | tuple[str, ...] | None = None,
    keep_groups_together: bool | None = None,
) -> SplitIndices:
    """Which corpus positions go to which split.

    The units are the groups (when the corpus has groups and keeps them together) or the single pairs. Units are
    shuffled with ``random.Random(seed)`` and dealt in that order: to test until it holds
    ``round(test_fraction * N)`` pairs, then to valid until ``round(valid_fraction * N)``, the rest to train
    (N = number of pairs; with groups a split may overshoot by less than one group).

    With ``test_groups``, the test set is exactly the pairs of those groups (``test_fraction`` is ignored) and
    valid is dealt from the other units as above.

    Args:
        corpus: the pairs, and their groups if any.
        seed: the shuffling seed.
        valid_fraction, test_fraction: in [0, 1), summing to less than 1.
        test_groups: group keys held out as the test set (e.g. Bible books "Matt", "Mark").
        keep_groups_together: override ``corpus.keep_groups_together``.

    Raises:
        ConfigError: bad fractions; ``test_groups`` without corpus groups, or unknown group keys.
        DataError: the training split would be empty.
    """
    for name, value in (("valid_fraction", valid_fraction), ("test_fraction", test_fraction)):
        if not 0.0 <= value < 1.0:
            raise ConfigError(f"{name} must be in [0, 1), got {value!r}")
    if not test_groups and valid_fraction + test_fraction >= 1.0:
        raise ConfigError(f"valid_fraction + test_fraction must be < 1, got {valid_fraction} + {test_fraction}")
    groups = corpus.groups
    together = corpus.keep_groups_together if keep_groups_together is None else keep_groups_together
    num_pairs = len(corpus.pairs)
    test: list[int] = []
    held_out: set[str] = set()
    if test_groups:
        if groups is None:
            raise ConfigError(f"test_groups needs a corpus with groups; {corpus.name} has none")
        held_out = set(test_groups)
        unknown = sorted(held_out - set(groups))
        if unknown:
            known = list(dict.fromkeys(groups))
            raise ConfigError(
                f"test_groups {unknown} are not groups of {corpus.name}; groups are: {', '.join(known[:80])}"
                + (" ..." if len(known) > 80 else "")
            )
        test = [i for i, group in enumerate(groups) if group in held_out]
    units = _units(groups, num_pairs, together, held_out)
    random.Random(seed).shuffle(units)
    want_test = 0 if test_groups else round(test_fraction * num_pairs)
    want_valid = round(valid_fraction * num_pairs)
    valid: list[int] = []
    train: list[int] = []
    for unit in units:
        if len(test) < want_test:
            test.extend(unit)
        elif len(valid) < want_valid:
            valid.extend(unit)
        else:
            train.extend(unit)
    if not train:
        raise DataError(
            f"{corpus.name}: no pairs left for training ({num_pairs} pairs, valid_fraction={valid_fraction}, "
            f"test_fraction={test_fraction}, test_groups={test_groups})"
        )
    return SplitIndices(sorted(train), sorted(valid), sorted(test))


def _units(groups: list[str] | None, num_pairs: int, together: bool, held_out: set[str]) -> list[list[int]]:
    """The units to deal: pair positions bundled by group (first-appearance order) when ``together``, else one
    unit per pair; pairs of held-out groups are left out either way."""
    if groups is None:
        return [[i] for i in range(num_pairs)]
    if not together:
        return [[i] for i, group in enumerate(groups) if group not in held_out]
    units: dict[str, list[int]] = {}
    for i, group in enumerate(groups):
        if group not in held_out:
            units.setdefault(group, []).append(i)
    return list(units.values())


def save_splits(splits: Splits, directory: str | Path) -> Path:
    """Write ``DIR/{train,valid,test}.tsv`` and ``DIR/split.json`` (the layout is in the module docstring).

    Returns:
        The directory.

    Raises:
        DataError: a text holds a tab or a line break, which a TSV line cannot hold (the corpus readers replace
            them, so this means hand-made pairs).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name in SPLIT_NAMES:
        lines = []
        for number, pair in enumerate(getattr(splits, name), start=1):
            for side, text in zip(("source", "target"), pair, strict=True):
                if any(char in text for char in "\t\n\r"):
                    raise DataError(f"{name} pair {number}: the {side} holds a tab or line break: {text!r:.80}")
            lines.append(f"{pair.source}\t{pair.target}\n")
        (directory / f"{name}.tsv").write_text("".join(lines), encoding="utf-8")
    info = dict(splits.info)
    info["counts"] = {name: len(getattr(splits, name)) for name in SPLIT_NAMES}
    (directory / "split.json").write_text(json.dumps(info, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return directory


def load_split(directory: str | Path, name: str) -> list[Pair]:
    """The pairs of ``DIR/NAME.tsv`` (``name`` is train, valid or test); an empty file is an empty split.

    Raises:
        ConfigError: ``name`` is not a split name.
        MissingDataError: the file does not exist.
        DataError: invalid UTF-8, or a line without exactly one tab (``FILE:LINE`` in the message).
    """
    if name not in SPLIT_NAMES:
        raise ConfigError(f"split name must be one of {', '.join(SPLIT_NAMES)}, got {name!r}")
    path = Path(directory) / f"{name}.tsv"
    if not path.is_file():
        raise MissingDataError(f"{path}: no such split file (save_splits writes it)")
    if path.stat().st_size == 0:
        return []
    pairs = []
    for number, line in enumerate(split_lines(read_text(path)), start=1):
        fields = line.split("\t")
        if len(fields) != 2:
            raise DataError(f"{path}:{number}: {len(fields)} tab-separated fields, expected 2 (source, target)")
        pairs.append(Pair(fields[0], fields[1]))
    return pairs


def load_splits(directory: str | Path) -> Splits:
    """All three splits and the split.json description of ``DIR``.

    Raises:
        MissingDataError: a file is missing.
        DataError: a malformed TSV line or split.json.
    """
    directory = Path(directory)
    info = read_json(directory / "split.json", "no such file (save_splits writes it)")
    return Splits(*(load_split(directory, name) for name in SPLIT_NAMES), info=info)
