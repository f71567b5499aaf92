"""Metrics against values computed by hand."""

from __future__ import annotations

import math

import pytest

from dotformer.errors import DataError, ShapeError
from dotformer.metrics import bleu, chrf, exact_match, g2p_error_rates, perplexity, phones


def test_bleu_of_a_sentence_by_hand() -> None:
    # hyp "the cat sat on the mat" vs ref "the cat sat on a mat": clipped n-gram precisions 5/6, 3/5, 2/4, 1/3,
    # equal lengths (brevity penalty 1): BLEU = (5/6 · 3/5 · 1/2 · 1/3)^(1/4)
    result = bleu(["the cat sat on the mat"], ["the cat sat on a mat"])
    assert result.score == pytest.approx(100 * (5 / 6 * 3 / 5 * 1 / 2 * 1 / 3) ** 0.25, abs=1e-6)
    assert "nrefs:1" in result.signature and "tok:13a" in result.signature


def test_bleu_of_identical_text_is_100_and_of_disjoint_text_0() -> None:
    assert bleu(["a b c d e", "f g h i"], ["a b c d e", "f g h i"]).score == pytest.approx(100.0)
    assert bleu(["x y z w"], ["a b c d"]).score == pytest.approx(0.0)


def test_chrf_by_hand() -> None:
    # "ab" vs "ac": character 1-grams P = R = 1/2; 2-grams P = R = 0; no longer n-grams (not counted).
    # Averages over the 2 effective orders: P = R = 1/4; F_β=2 = (1 + 4)·P·R / (4·P + R) = 1/4
    result = chrf(["ab"], ["ac"])
    assert result.score == pytest.approx(25.0)
    assert result.signature.startswith("nrefs:1") and "nc:6" in result.signature
    assert chrf(["same text"], ["same text"]).score == pytest.approx(100.0)


def test_g2p_error_rates_by_hand() -> None:
    hyps = ["K AE1 T", "D AO1 G"]
    refs = [["K AE1 T"], ["D AA1 G"]]
    rates = g2p_error_rates(hyps, refs)
    assert rates.wer == pytest.approx(50.0)  # one word of two is wrong
    assert rates.per == pytest.approx(100 * 1 / 6)  # (0 + 1 substitution) / (3 + 3 phones)


def test_g2p_uses_the_closest_of_several_references() -> None:
    # "EH0 K S" has two pronunciations; the output matches the second exactly: no word error
    hyps = ["IH0 K S", "T AH0 M EY1 T OW2"]
    refs = [["EH0 K S", "IH0 K S"], ["T AH0 M AA1 T OW2", "T AH0 M EY1 T OW0 Z"]]
    rates = g2p_error_rates(hyps, refs)
    # word 2: distance 1 to the first ref (EY1 -> AA1), 2 to the second (OW2 -> OW0, and Z missing):
    # the first ref (6 phones) is the closest; PER = (0 + 1) / (3 + 6)
    assert rates.wer == pytest.approx(50.0)
    assert rates.per == pytest.approx(100 * 1 / 9)


def test_g2p_ties_between_references_use_the_first() -> None:
    # distance 1 to both "A C" (2 phones) and "A B X" (3 phones): the first in the given order is used
    rates = g2p_error_rates(["A B"], [["A C", "A B X"]])
    assert rates.per == pytest.approx(100 * 1 / 2)
    rates = g2p_error_rates(["A B"], [["A B X", "A C"]])
    assert rates.per == pytest.approx(100 * 1 / 3)


def test_g2p_error_rates_with_stress_stripped() -> None:
    hyps = ["K AE0 T", "D AO1 G"]
    refs = [["K AE1 T"], ["D AO2 G"]]
    assert g2p_error_rates(hyps, refs, strip_stress=False) == pytest.approx((100.0, 100 * 2 / 6))
    assert g2p_error_rates(hyps, refs, strip_stress=True) == pytest.approx((0.0, 0.0))
    expected = ["T", "R", "AE", "N", "S", "F", "AO", "R", "M", "ER"]
    assert phones("T R AE1 N S F AO2 R M ER0", strip_stress=True) == expected


def test_g2p_insertions_and_deletions_count_whole_phones() -> None:
    # "K AE1 T S" vs "K AE1 T": 1 insertion; "K" vs "K AE1 T": 2 deletions; PER = 3 / 6 (can exceed 100 in general)
    assert g2p_error_rates(["K AE1 T S", "K"], [["K AE1 T"], ["K AE1 T"]]).per == pytest.approx(50.0)
    assert g2p_error_rates(["A B C D"], [["E"]]).per == pytest.approx(400.0)


def test_exact_match_and_perplexity() -> None:
    assert exact_match(["abc", "abd", "x"], ["abc", "abc", "x"]) == pytest.approx(200 / 3)
    assert perplexity(10 * math.log(5.0), 10) == pytest.approx(5.0)
    assert perplexity(0.0, 3) == 1.0
    assert perplexity(1e6, 1) == math.inf


def test_metric_inputs_are_checked() -> None:
    with pytest.raises(ShapeError, match="2 hypotheses but 1 references"):
        bleu(["a", "b"], ["a"])
    with pytest.raises(DataError):
        chrf([], [])
    with pytest.raises(DataError):
        g2p_error_rates(["A"], [[]])
    with pytest.raises(DataError):
        perplexity(1.0, 0)
    with pytest.raises(DataError):
        perplexity(float("nan"), 3)
