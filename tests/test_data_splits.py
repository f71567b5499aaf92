"""Splits: deterministic, group-disjoint, held-out groups; the held-out pairs prepared as TSV and read back."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pytest

from dotformer.data.config import DataConfig
from dotformer.data.prepared.kinds import prepare
from dotformer.data.prepared.pair_kind import read_run_data
from dotformer.data.prepared.splits import TEST, TRAIN, VALID, GroupIndex, assign_splits, load_split
from dotformer.data.read.types import Corpus, Pair
from dotformer.errors import ConfigError, DataError, MissingDataError


class SplitIndices(NamedTuple):
    train: list[int]
    valid: list[int]
    test: list[int]


def split_indices(corpus: Corpus, seed: int, valid_fraction: float, test_fraction: float, test_groups=None,
                  keep_groups_together: bool | None = None) -> SplitIndices:  # fmt: skip
    """The positions of each split's pairs, ascending: :func:`assign_splits` of the corpus's pairs and groups, as a
    kind's reading deals them (groups numbered by a :class:`GroupIndex`)."""
    groups = GroupIndex()
    group_of = None if corpus.groups is None else groups.ids(corpus.groups)
    together = corpus.keep_groups_together if keep_groups_together is None else keep_groups_together
    split = assign_splits(len(corpus.pairs), seed, valid_fraction, test_fraction, group_of, groups.names, test_groups,
                          together, corpus.name)  # fmt: skip
    return SplitIndices(*(np.flatnonzero(split == code).tolist() for code in (TRAIN, VALID, TEST)))


def make_corpus(num_pairs: int = 100, groups: bool = False, together: bool = True) -> Corpus:
    pairs = [Pair(f"s{i}", f"t{i}") for i in range(num_pairs)]
    keys = [f"g{i // 4}" for i in range(num_pairs)] if groups else None
    return Corpus("toy", "translation", pairs, groups=keys, report={"pairs": num_pairs}, keep_groups_together=together)


def test_sizes_and_coverage():
    indices = split_indices(make_corpus(100), seed=1, valid_fraction=0.1, test_fraction=0.2)
    assert (len(indices.train), len(indices.valid), len(indices.test)) == (70, 10, 20)
    assert sorted(indices.train + indices.valid + indices.test) == list(range(100))
    assert indices.train == sorted(indices.train)


def test_deterministic_by_seed_and_different_across_seeds():
    corpus = make_corpus(100)
    first = split_indices(corpus, seed=7, valid_fraction=0.1, test_fraction=0.1)
    assert split_indices(corpus, seed=7, valid_fraction=0.1, test_fraction=0.1) == first
    assert split_indices(corpus, seed=8, valid_fraction=0.1, test_fraction=0.1).test != first.test


def test_matches_a_hand_computed_shuffle():
    units = np.random.default_rng(3).permutation(10)  # the pairs in the order they are dealt
    expected_test = sorted(units[:2].tolist())
    expected_valid = sorted(units[2:3].tolist())
    indices = split_indices(make_corpus(10), seed=3, valid_fraction=0.1, test_fraction=0.2)
    assert indices.test == expected_test and indices.valid == expected_valid


def test_groups_stay_in_one_split():
    corpus = make_corpus(100, groups=True)
    indices = split_indices(corpus, seed=0, valid_fraction=0.1, test_fraction=0.1)
    sides = {name: {corpus.groups[i] for i in getattr(indices, name)} for name in ("train", "valid", "test")}
    assert not sides["train"] & sides["test"] and not sides["train"] & sides["valid"]
    assert not sides["valid"] & sides["test"]
    assert len(indices.test) == 12 and len(indices.valid) == 12  # 10 wanted, dealt in groups of 4


def test_groups_apart_when_the_corpus_says_so_or_when_asked():
    corpus = make_corpus(100, groups=True, together=False)
    indices = split_indices(corpus, seed=0, valid_fraction=0.1, test_fraction=0.1)
    assert (len(indices.valid), len(indices.test)) == (10, 10)
    together = split_indices(corpus, seed=0, valid_fraction=0.1, test_fraction=0.1, keep_groups_together=True)
    assert len(together.test) == 12


def test_held_out_groups_are_the_test_set():
    corpus = make_corpus(100, groups=True, together=False)
    indices = split_indices(corpus, seed=0, valid_fraction=0.1, test_fraction=0.5, test_groups=["g0", "g3"])
    assert indices.test == [0, 1, 2, 3, 12, 13, 14, 15]
    assert len(indices.valid) == 10 and len(indices.train) == 82


def test_held_out_groups_errors():
    with pytest.raises(ConfigError, match="needs a corpus with groups"):
        split_indices(make_corpus(10), 0, 0.1, 0.1, test_groups=["Matt"])
    with pytest.raises(ConfigError, match=r"test_groups \['Matt'\] are not groups of toy; groups are: g0, g1"):
        split_indices(make_corpus(10, groups=True), 0, 0.1, 0.1, test_groups=["Matt"])


@pytest.mark.parametrize("valid, test", [(-0.1, 0.1), (1.0, 0.0), (0.5, 0.5), (0.2, 1.2)])
def test_bad_fractions(valid, test):
    with pytest.raises(ConfigError):
        split_indices(make_corpus(10), 0, valid, test)


def test_nothing_left_for_training():
    with pytest.raises(DataError, match="no pairs left for training"):
        split_indices(make_corpus(2), 0, 0.4, 0.4)


def test_prepared_held_out_pairs_read_back(tmp_path):
    pairs = [Pair("señor «x»", "sir 'y' \"z\"")] + [Pair(f"s{i}", f"t{i}") for i in range(1, 30)]
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"{pair.source}\t{pair.target}\n" for pair in pairs), encoding="utf-8")
    config = DataConfig(dataset=str(path), valid_fraction=0.1, test_fraction=0.1)
    prepare(config, seed=2, directory=tmp_path / "data")
    splits = read_run_data(config, seed=2).splits
    for name in ("valid", "test"):
        assert load_split(tmp_path / "data", name) == getattr(splits, name)
    assert sorted(splits.train + splits.valid + splits.test) == sorted(pairs)
    info = splits.info
    assert info["seed"] == 2 and info["valid_fraction"] == 0.1 and info["test_fraction"] == 0.1
    assert info["counts"] == {"train": 24, "valid": 3, "test": 3}
    assert info["corpus"]["name"] == str(path) and info["corpus"]["report"]["pairs"] == 30


def test_empty_split_file_is_an_empty_split(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"s{i}\tt{i}\n" for i in range(10)), encoding="utf-8")
    prepare(DataConfig(dataset=str(path), valid_fraction=0.0, test_fraction=0.2), seed=0, directory=tmp_path / "p")
    assert load_split(tmp_path / "p", "valid") == []


def test_load_split_errors(tmp_path):
    with pytest.raises(ConfigError, match="split name"):
        load_split(tmp_path, "dev")
    with pytest.raises(MissingDataError, match="train.tsv: no such split file"):
        load_split(tmp_path, "train")
    (tmp_path / "train.tsv").write_text("a\tb\nc\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"train\.tsv:2: 1 tab-separated fields, expected 2"):
        load_split(tmp_path, "train")


def test_bible_default_split_draws_random_verses_and_books_can_be_held_out():
    from dotformer.data.read.bible import VerseRef, pair_verses
    from dotformer.data.read.types import CorpusOptions

    source = {VerseRef(book, 1, v): f"verso {book} {v}" for book in ("Gen", "Exod", "Matt") for v in range(1, 41)}
    target = {ref: f"verse {ref.book} {ref.verse}" for ref in source}
    corpus = pair_verses(source, target, CorpusOptions())
    indices = split_indices(corpus, seed=0, valid_fraction=0.1, test_fraction=0.1)
    books_in_test = {corpus.pairs[i].source.split()[1] for i in indices.test}
    assert len(books_in_test) > 1 and len(indices.test) == 12
    held_out = split_indices(corpus, seed=0, valid_fraction=0.1, test_fraction=0.0, test_groups=["Matt"])
    assert {corpus.pairs[i].source.split()[1] for i in held_out.test} == {"Matt"} and len(held_out.test) == 40
    assert not any("Matt" in corpus.pairs[i].source for i in held_out.train + held_out.valid)
