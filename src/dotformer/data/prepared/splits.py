"""Deterministic train / valid / test splits, group-disjoint; the held-out pairs read back from their TSV files.

A split is a pure function of (corpus, seed, fractions, test_groups): the same inputs give the same split on every
machine. :func:`assign_splits` deals it with numpy arrays of one number per pair, so it serves a corpus read in
passes (:mod:`dotformer.data.prepared.skeleton`) as well as one in memory. When the corpus
has groups and keeps them together (CMUdict: the word), whole groups are assigned, so no word has one pronunciation
in train and another in test. The Bible keeps its groups (books) apart only on request:
its default split draws random verses, and ``test_groups=["Matt", "Mark"]`` holds whole books out as the test set.

On disk (``dotformer prepare`` writes them, :func:`load_split` reads them)::

    DIR/valid.tsv   source<TAB>target, one held-out pair per line, UTF-8
    DIR/test.tsv
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dotformer.data.read.textio import read_text, split_lines
from dotformer.data.read.types import Pair
from dotformer.errors import ConfigError, DataError, MissingDataError

SPLIT_NAMES = ("train", "valid", "test")
TRAIN, VALID, TEST = 0, 1, 2  # the codes of assign_splits, in the order of SPLIT_NAMES


@dataclass(frozen=True)
class Splits:
    """The three splits' pairs, in corpus order, and how they were made.

    Attributes:
        train, valid, test: the pairs.
        info: JSON-serialisable description (seed, fractions, test_groups, counts, corpus name/task/report).
    """

    train: list[Pair]
    valid: list[Pair]
    test: list[Pair]
    info: dict[str, Any] = field(default_factory=dict)


class GroupIndex:
    """Group keys numbered in order of first appearance (what :func:`assign_splits` deals), built as a corpus is
    read: ``ids(keys)`` numbers a chunk of keys, ``names[i]`` is group i's key."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self.names: list[str] = []

    def ids(self, keys: Iterable[str]) -> np.ndarray:
        """(n,) int64, the number of each key's group (new keys get the next numbers)."""
        numbers = self._ids
        out = []
        for key in keys:
            number = numbers.get(key)
            if number is None:
                number = numbers[key] = len(self.names)
                self.names.append(key)
            out.append(number)
        return np.array(out, dtype=np.int64)


def assign_splits(
    num_pairs: int,
    seed: int,
    valid_fraction: float,
    test_fraction: float,
    group_of_pair: np.ndarray | None = None,
    group_names: Sequence[str] = (),
    test_groups: Sequence[str] | None = None,
    keep_groups_together: bool = True,
    name: str = "corpus",
) -> np.ndarray:
    """The split of every pair of a corpus: (N,) uint8, :data:`TRAIN` (0), :data:`VALID` (1) or :data:`TEST` (2).

    The units are the groups (when the corpus has groups and keeps them together) or the single pairs, in corpus
    order (groups by first appearance). They are put in the order of ``numpy.random.default_rng(seed).permutation``
    and dealt in that order: to test until it holds ``round(test_fraction * N)`` pairs, then to valid until
    ``round(valid_fraction * N)``, the rest to train (N = number of pairs; with groups a split may overshoot by
    less than one group). Only arrays of N numbers are made, so a corpus of millions of pairs splits in memory.

    With ``test_groups``, the test set is exactly the pairs of those groups (``test_fraction`` is ignored) and
    valid is dealt from the other units as above.

    Args:
        num_pairs: N.
        seed: the shuffling seed.
        valid_fraction, test_fraction: in [0, 1), summing to less than 1.
        group_of_pair: (N,) int64 group numbers (:class:`GroupIndex`), or None for a corpus without groups.
        group_names: the key of each group number (for ``test_groups``).
        test_groups: group keys held out as the test set (e.g. Bible books "Matt", "Mark").
        keep_groups_together: deal whole groups (else single pairs; ``test_groups`` still holds groups out).
        name: the corpus, for messages.

    Raises:
        ConfigError: bad fractions; ``test_groups`` without groups, or unknown group keys.
        DataError: the training split would be empty.
    """
    for label, value in (("valid_fraction", valid_fraction), ("test_fraction", test_fraction)):
        if not 0.0 <= value < 1.0:
            raise ConfigError(f"{label} must be in [0, 1), got {value!r}")
    if not test_groups and valid_fraction + test_fraction >= 1.0:
        raise ConfigError(f"valid_fraction + test_fraction must be < 1, got {valid_fraction} + {test_fraction}")
    split = np.full(num_pairs, TRAIN, dtype=np.uint8)
    held_out = np.zeros(num_pairs, dtype=bool)
    if test_groups:
        if group_of_pair is None:
            raise ConfigError(f"test_groups needs a corpus with groups; {name} has none")
        numbers = {key: number for number, key in enumerate(group_names)}
        unknown = sorted(set(test_groups) - set(numbers))
        if unknown:
            known = list(group_names)
            raise ConfigError(
                f"test_groups {unknown} are not groups of {name}; groups are: {', '.join(known[:80])}"
                + (" ..." if len(known) > 80 else "")
            )
        held_out = np.isin(group_of_pair, [numbers[key] for key in test_groups])
        split[held_out] = TEST
    together = keep_groups_together and group_of_pair is not None
    if together:
        assert group_of_pair is not None
        unit_of_pair = group_of_pair
        candidates = np.unique(group_of_pair[~held_out])  # group numbers are first-appearance order
        sizes = np.bincount(group_of_pair, minlength=len(group_names))[candidates]
    else:
        unit_of_pair = np.arange(num_pairs)
        candidates = np.flatnonzero(~held_out)
        sizes = np.ones(len(candidates), dtype=np.int64)
    order = np.random.default_rng(seed).permutation(len(candidates))
    before = np.cumsum(sizes[order]) - sizes[order]  # pairs dealt before each unit
    want_test = 0 if test_groups else round(test_fraction * num_pairs)
    to_test = int(np.searchsorted(before, want_test, side="left"))  # units dealt while test holds < want_test
    rest = before[to_test:] - (before[to_test] if to_test < len(before) else 0)
    to_valid = int(np.searchsorted(rest, round(valid_fraction * num_pairs), side="left"))
    unit_split = np.full(len(candidates), TRAIN, dtype=np.uint8)
    unit_split[order[:to_test]] = TEST
    unit_split[order[to_test : to_test + to_valid]] = VALID
    if together:
        split_of_group = np.full(max(len(group_names), 1), TRAIN, dtype=np.uint8)
        split_of_group[candidates] = unit_split
        split[~held_out] = split_of_group[unit_of_pair[~held_out]]
    else:
        split[candidates] = unit_split
    if not (split == TRAIN).any():
        raise DataError(
            f"{name}: no pairs left for training ({num_pairs} pairs, valid_fraction={valid_fraction}, "
            f"test_fraction={test_fraction}, test_groups={list(test_groups) if test_groups else None})"
        )
    return split


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
        raise MissingDataError(f"{path}: no such split file (dotformer prepare writes it)")
    if path.stat().st_size == 0:
        return []
    pairs = []
    for number, line in enumerate(split_lines(read_text(path)), start=1):
        fields = line.split("\t")
        if len(fields) != 2:
            raise DataError(f"{path}:{number}: {len(fields)} tab-separated fields, expected 2 (source, target)")
        pairs.append(Pair(fields[0], fields[1]))
    return pairs
