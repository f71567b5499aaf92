"""Metrics of a decoded test set: BLEU and chrF (translation), WER and PER (grapheme-to-phoneme), perplexity.

* BLEU (Papineni et al. 2002) and chrF (Popović 2015) come from ``sacrebleu`` on detokenised text, with its default
  settings (13a tokenisation, exp smoothing; chrF with character n-grams up to 6, β = 2). Each result carries
  sacrebleu's signature string, which states those settings so that scores can be compared across papers.
* G2P word error rate (WER): the share of words whose 1-best pronunciation equals none of the word's reference
  pronunciations (phone for phone).
* G2P phone error rate (PER): for each word, the Levenshtein distance (insertions, deletions, substitutions of whole
  phones) from the 1-best output to its closest reference; the reference used is the closest one, the first of them
  in the given order on ties. PER = Σ_words distance / Σ_words length of that reference (in phones). It weights each
  word by its length, like a corpus-level WER in speech recognition, rather than averaging per-word ratios.
* Both G2P rates can strip ARPAbet stress digits first ("AH0" -> "AH"), which scores the phones without the stress.
* Perplexity = exp(Σ NLL / number of tokens), natural log, the target tokens' EOS included.

Every rate here is a percentage in [0, 100] (BLEU and chrF too, as sacrebleu reports them); PER can exceed 100
when outputs are much longer than the references.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from dotformer.errors import DataError, ShapeError, require_extra

STRESS = re.compile(r"\d+$")  # the stress digit(s) that end an ARPAbet vowel: AH0, EY1, ER2


class MetricResult(NamedTuple):
    """A corpus-level score and how it was computed.

    Attributes:
        score: the metric's value (BLEU and chrF on a 0-100 scale).
        signature: sacrebleu's signature string (version, tokenisation, smoothing, ...).
    """

    score: float
    signature: str


class G2PErrorRates(NamedTuple):
    """Word and phone error rates of a G2P test set, in percent (lower is better).

    Attributes:
        wer: percentage of words whose output matches none of the references.
        per: 100 · Σ edit distance to the closest reference / Σ length of that reference (phones).
    """

    wer: float
    per: float


# metric family -> (module, what needs it) of the [eval] extra; see :func:`require_metric_packages`
METRIC_PACKAGES: dict[str, tuple[tuple[str, str], ...]] = {
    "g2p": (("rapidfuzz", "WER and PER"),),
    "translation": (("sacrebleu", "BLEU"),),
}


def require_metric_packages(family: str) -> None:
    """Check that the metrics of a task family ("g2p", "translation", "exact") can be computed, before any decoding.

    Raises:
        MissingExtraError: a package of the [eval] extra that they need is not installed.
    """
    for module, purpose in METRIC_PACKAGES.get(family, ()):
        require_extra("eval", module, purpose)


def _check_pairs(hyps: Sequence[object], refs: Sequence[object]) -> None:
    if len(hyps) != len(refs):
        raise ShapeError(f"got {len(hyps)} hypotheses but {len(refs)} references; they must pair up")
    if not hyps:
        raise DataError("no hypotheses to score")


def bleu(hyps: Sequence[str], refs: Sequence[str]) -> MetricResult:
    """Corpus BLEU of detokenised outputs against one reference each (sacrebleu defaults).

    Args:
        hyps: detokenised system outputs, one per sentence.
        refs: the reference of each sentence, same length.

    Returns:
        :class:`MetricResult` with BLEU in [0, 100] and sacrebleu's signature.

    Raises:
        ShapeError: the lists differ in length. DataError: they are empty.
    """
    return _sacrebleu_score(require_extra("eval", "sacrebleu.metrics", "BLEU").BLEU, hyps, refs)


def chrf(hyps: Sequence[str], refs: Sequence[str]) -> MetricResult:
    """Corpus chrF (character n-gram F-score, n ≤ 6, β = 2) of detokenised outputs against one reference each.

    Returns:
        :class:`MetricResult` with chrF in [0, 100] and sacrebleu's signature.

    Raises:
        ShapeError: the lists differ in length. DataError: they are empty.
    """
    return _sacrebleu_score(require_extra("eval", "sacrebleu.metrics", "chrF").CHRF, hyps, refs)


def _sacrebleu_score(metric_class: type, hyps: Sequence[str], refs: Sequence[str]) -> MetricResult:
    """The corpus score of a sacrebleu metric (``BLEU``, ``CHRF``) with its default settings, one reference each.

    Raises:
        ShapeError: the lists differ in length. DataError: they are empty.
    """
    _check_pairs(hyps, refs)
    metric = metric_class()
    result = metric.corpus_score(list(hyps), [list(refs)])
    return MetricResult(float(result.score), str(metric.get_signature()))


def phones(pronunciation: str, strip_stress: bool = False) -> list[str]:
    """Split a space-separated ARPAbet pronunciation into phones, optionally without stress digits.

    >>> phones("T R AE1 N S F AO2 R M ER0", strip_stress=True)
    ['T', 'R', 'AE', 'N', 'S', 'F', 'AO', 'R', 'M', 'ER']
    """
    items = pronunciation.split()
    return [STRESS.sub("", p) for p in items] if strip_stress else items


def closest_reference(hyp: list[str], refs: Sequence[list[str]]) -> tuple[int, list[str]]:
    """(edit distance, reference) of the reference closest to ``hyp``; the first one on ties.

    Raises:
        DataError: ``refs`` is empty.
    """
    Levenshtein = require_extra("eval", "rapidfuzz.distance", "WER and PER").Levenshtein

    if not refs:
        raise DataError("a word has no reference pronunciation")
    best_distance, best_ref = -1, refs[0]
    for ref in refs:
        distance = int(Levenshtein.distance(hyp, ref))
        if best_distance < 0 or distance < best_distance:
            best_distance, best_ref = distance, ref
    return best_distance, best_ref


def has_stress_digits(pronunciations: Iterable[str]) -> bool:
    """Whether any phone of ``pronunciations`` ends in a stress digit (:data:`STRESS`): without one, the error rates
    with stress kept and stripped are the same numbers.

    >>> has_stress_digits(["K AE1 T"]), has_stress_digits(["k a t", "d o g"])
    (True, False)
    """
    return any(STRESS.search(phone) for text in pronunciations for phone in text.split())


def g2p_error_rates(hyps: Sequence[str], refs: Sequence[Sequence[str]], strip_stress: bool = False) -> G2PErrorRates:
    """WER and PER of 1-best G2P outputs against each word's reference pronunciations (see the module docstring).

    Args:
        hyps: per word, the 1-best output as space-separated phones.
        refs: per word, all its reference pronunciations (space-separated phones).
        strip_stress: compare phones without their stress digits.

    Returns:
        :class:`G2PErrorRates` in percent. Example: hyps ["K AE1 T", "D AO1 G"], refs [["K AE1 T"], ["D AA1 G"]]
        give WER 50 and PER 100 · (0 + 1) / (3 + 3) ≈ 16.67.

    Raises:
        ShapeError: the lists differ in length. DataError: no words, a word without references, or all closest
        references empty.
    """
    _check_pairs(hyps, refs)
    wrong, distance_sum, length_sum = 0, 0, 0
    for hyp, word_refs in zip(hyps, refs, strict=True):
        hyp_phones = phones(hyp, strip_stress)
        ref_phones = [phones(r, strip_stress) for r in word_refs]
        distance, ref = closest_reference(hyp_phones, ref_phones)
        wrong += distance > 0
        distance_sum += distance
        length_sum += len(ref)
    if length_sum == 0:
        raise DataError("every closest reference pronunciation is empty; PER is undefined")
    return G2PErrorRates(100.0 * wrong / len(hyps), 100.0 * distance_sum / length_sum)


def exact_match(hyps: Sequence[str], refs: Sequence[str]) -> float:
    """Percentage of outputs equal to their reference, character for character (synthetic copy/reverse tasks).

    Raises:
        ShapeError: the lists differ in length. DataError: they are empty.
    """
    _check_pairs(hyps, refs)
    return 100.0 * sum(h == r for h, r in zip(hyps, refs, strict=True)) / len(hyps)


def perplexity(total_nll: float, num_tokens: int) -> float:
    """exp(total_nll / num_tokens): the model's perplexity on tokens it was told the history of (teacher forcing).

    Args:
        total_nll: the summed negative log-likelihood of the target tokens, natural log (nats).
        num_tokens: how many tokens were scored (each target's EOS included).

    Returns:
        The perplexity (1 = certain; the vocabulary size = uniform guessing); ``math.inf`` if it overflows a float.

    Raises:
        DataError: ``num_tokens`` < 1, or ``total_nll`` is negative or not finite.
    """
    if num_tokens < 1:
        raise DataError(f"perplexity needs at least one token, got num_tokens={num_tokens}")
    if not math.isfinite(total_nll) or total_nll < 0:
        raise DataError(f"perplexity needs a finite non-negative summed NLL, got {total_nll}")
    mean = total_nll / num_tokens
    return math.exp(mean) if mean < 709.0 else math.inf
