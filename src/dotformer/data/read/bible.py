"""Bible verse pairs, Spanish -> English, from SWORD modules read with the PyPI package ``pysword``.

The modules come as Debian packages that install under ``/usr/share/sword``:

=============  =========================  ==================  ===============  ==============
name           module id                  Debian package      versification    language
=============  =========================  ==================  ===============  ==============
``SpaRV``      ``spaRV1909eb``            sword-text-sparv    KJV              Spanish (1909)
``KJV``        ``engKJV2006eb``           sword-text-kjv      KJV              English (1611)
``WEB``        ``engWEB2015eb``           sword-text-web      NRSVA            English (modern)
=============  =========================  ==================  ===============  ==============

Verses are paired by (book, chapter, verse). Each verse's OSIS markup is stripped by
:func:`dotformer.data.read.osis.strip_osis_many`. The report counts, by reason, the verses that give no pair:

* ``missing_in_target``: the source verse does not exist in the target's versification;
* ``empty_source`` / ``empty_target``: the verse is empty on one side (omitted verses, e.g. SpaRV Num 12:16);
* ``misaligned_chapter``: the chapter's verse numbering is shifted between the modules, so its verses would be
  paired with their neighbours' translations (:func:`misaligned_chapters`; ``report["misaligned_chapters"]``
  gives each chapter and its offset). SpaRV follows the Spanish numbering in places while its module claims the
  KJV one: against KJV, Num 13 and 30, 1 Sam 24, 2 Chr 33, Job 39, Hos 12 and Jonah 2 are flagged;
  ``CorpusOptions.bible_check_alignment=False`` keeps them;
* ``length_ratio``: longer / shorter length in characters > ``CorpusOptions.bible_max_ratio``, mostly verses
  that one module merges with their neighbour (SpaRV 2 Cor 13:13 holds KJV 13:13-14);
  ``report["length_ratio_worst"]`` lists the worst ten references.

``report["target_only_verses"]`` counts target verses with no source verse (WEB's deuterocanonical books).
Group keys are OSIS book ids ("Gen", "Matt"), for held-out-book splits; :func:`book_ids` maps names a user types
("Matthew", "mat") to them.

Speed: pysword's ``ZTextModule`` inflates the compressed block holding the verse (a whole book) for every verse it
returns; :func:`_with_block_cache` keeps the last inflated block, so each book is inflated once. Reading two full
modules then takes about half a second instead of about a minute.
"""

from __future__ import annotations

import math
import os
import statistics
from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

from dotformer.data.read.osis import strip_osis_many
from dotformer.data.read.types import Corpus, CorpusOptions, Pair, make_report
from dotformer.errors import ConfigError, DataError, MissingDataError, require_extra


class KnownModule(NamedTuple):
    """A SWORD module we know how to install."""

    module_id: str  # id in the module's .conf file, e.g. "spaRV1909eb"
    package: str  # Debian package that installs it


KNOWN_MODULES: dict[str, KnownModule] = {
    "sparv": KnownModule("spaRV1909eb", "sword-text-sparv"),
    "kjv": KnownModule("engKJV2006eb", "sword-text-kjv"),
    "web": KnownModule("engWEB2015eb", "sword-text-web"),
}
DEFAULT_SWORD_PATHS = ("~/.sword", "/usr/share/sword")
_NEEDS_PYSWORD = "reading the Bible modules"  # what needs pysword (the [bible] extra)


class VerseRef(NamedTuple):
    """A verse address: OSIS book id, chapter and verse numbers (from 1)."""

    book: str  # OSIS id, e.g. "Gen", "Ps", "Rev"
    chapter: int
    verse: int

    def __str__(self) -> str:
        return f"{self.book}.{self.chapter}.{self.verse}"


class ModuleInfo(NamedTuple):
    """Where an installed module lives and how its .conf describes it."""

    module_id: str  # e.g. "engKJV2006eb"
    library: Path  # the SWORD library root holding mods.d/ and modules/
    conf: dict[str, str]  # the .conf entries as pysword parses them (lower-case keys)


def load_bible(options: CorpusOptions) -> Corpus:
    """Pair the verses of ``options.source_module`` and ``options.target_module`` (see the module docstring).

    Returns:
        A :class:`Corpus` named ``"bible:SOURCE-TARGET"``, task ``"translation"``, groups = OSIS book ids,
        ``keep_groups_together=False`` (random-verse splits by default), and the report described above.

    Raises:
        MissingDataError: pysword is not installed, or a module is missing (the message gives the
            ``apt-get install -y sword-text-...`` line).
        DataError: a module cannot be read.
    """
    libraries = sword_libraries(options.sword_path)
    found = find_modules(libraries)
    names = (options.source_module, options.target_module)
    missing = [name for name in names if resolve_module(name, found) is None]
    if missing:
        raise MissingDataError(_missing_message(missing, names, libraries))
    source_info = resolve_module(options.source_module, found)
    target_info = resolve_module(options.target_module, found)
    assert source_info is not None and target_info is not None
    corpus = pair_verses(read_verses(source_info), read_verses(target_info), options)
    corpus.report["source_module"] = source_info.module_id
    corpus.report["target_module"] = target_info.module_id
    return corpus


def pair_verses(source: dict[VerseRef, str], target: dict[VerseRef, str], options: CorpusOptions) -> Corpus:
    """Pair clean verse texts by reference and filter them (see the module docstring for the reasons counted).

    Args:
        source: reference -> clean source text, in canonical order.
        target: reference -> clean target text.
        options: ``bible_max_ratio``, ``bible_check_alignment``, and ``source_module``/``target_module`` for the
            corpus name.

    Returns:
        The corpus described in :func:`load_bible` (without the module ids in the report).
    """
    dropped: Counter[str] = Counter()
    ratio_dropped: list[tuple[float, str]] = []
    pairs: list[Pair] = []
    groups: list[str] = []
    shifted = misaligned_chapters(source, target) if options.bible_check_alignment else {}
    for ref, source_text in source.items():
        target_text = target.get(ref)
        if target_text is None:
            dropped["missing_in_target"] += 1
        elif not source_text:
            dropped["empty_source"] += 1
        elif not target_text:
            dropped["empty_target"] += 1
        elif f"{ref.book}.{ref.chapter}" in shifted:
            dropped["misaligned_chapter"] += 1
        else:
            shorter, longer = sorted((len(source_text), len(target_text)))
            if longer / shorter > options.bible_max_ratio:
                dropped["length_ratio"] += 1
                ratio_dropped.append((longer / shorter, str(ref)))
            else:
                pairs.append(Pair(source_text, target_text))
                groups.append(ref.book)
    worst = [ref for _, ref in sorted(ratio_dropped, key=lambda item: -item[0])[:10]]
    report = make_report(
        len(source),
        len(pairs),
        dropped,
        source_verses=len(source),
        target_verses=len(target),
        target_only_verses=sum(1 for ref in target if ref not in source),
        books=len(dict.fromkeys(groups)),
        max_ratio=options.bible_max_ratio,
        misaligned_chapters=shifted,
        length_ratio_worst=worst,
    )
    name = f"bible:{options.source_module}-{options.target_module}"
    return Corpus(name, "translation", pairs, groups=groups, report=report, keep_groups_together=False)


# Thresholds of misaligned_chapters, chosen on SpaRV against KJV and WEB (they flag the chapters listed in the module
# docstring and no other):
_ALIGN_MIN_VERSES = 10  # shorter chapters are too noisy to judge
_ALIGN_MAX_SHIFT = 3  # offsets tried: -3..3 verses, in book order (across chapter ends)
_ALIGN_MIN_COST = 0.2  # the chapter's cost at offset 0 must exceed this ...
_ALIGN_GAIN = 0.5  # ... and some other offset must at least halve it


def misaligned_chapters(source: dict[VerseRef, str], target: dict[VerseRef, str]) -> dict[str, int]:
    """Chapters whose verses are paired with their neighbours' translations: ``{"Num.13": -1, ...}``.

    The two modules sometimes number the same text differently (SpaRV starts Numbers 13 with what KJV calls
    12:16, so every verse of the chapter is one off). Such verse pairs have plausible lengths one by one, but the
    lengths of the chapter match better when the target is read at an offset. For a chapter, the cost of offset k
    is the median over its verses of |log(len(source_i) / len(target_{i+k})) - m|, m the corpus median of that log
    ratio, with i + k running through the book's verses in order. A chapter of at least ten verses is flagged
    when its cost at k = 0 exceeds 0.2 and an offset 0 < |k| <= 3 at least halves it.

    Returns:
        "Book.chapter" -> the best offset k: source verse i reads like target verse i + k (in book order). SpaRV's
        Numbers 13 gives -1: its 13:1 holds KJV 12:16, its 13:2 holds KJV 13:1, and so on.
    """
    sizes = [(len(text), len(target.get(ref) or "")) for ref, text in source.items() if text and target.get(ref)]
    if not sizes:
        return {}
    middle = statistics.median(math.log(s / t) for s, t in sizes)
    books: dict[str, list[VerseRef]] = {}
    for ref in source:
        books.setdefault(ref.book, []).append(ref)
    flagged: dict[str, int] = {}
    for refs in books.values():
        source_lengths = [len(source[ref]) for ref in refs]
        target_lengths = [len(target.get(ref) or "") for ref in refs]
        chapters: dict[int, list[int]] = {}
        for position, ref in enumerate(refs):
            chapters.setdefault(ref.chapter, []).append(position)

        for chapter, positions in chapters.items():
            if len(positions) < _ALIGN_MIN_VERSES:
                continue
            costs = {
                k: _offset_cost(source_lengths, target_lengths, positions, k, middle)
                for k in range(-_ALIGN_MAX_SHIFT, _ALIGN_MAX_SHIFT + 1)
            }
            here = costs.pop(0)
            best, offset = min((cost, k) for k, cost in costs.items())
            if here > _ALIGN_MIN_COST and best < _ALIGN_GAIN * here:
                flagged[f"{refs[positions[0]].book}.{chapter}"] = offset
    return flagged


def _offset_cost(
    source_lengths: list[int], target_lengths: list[int], positions: list[int], offset: int, middle: float
) -> float:
    """Median |log(source_i / target_{i+offset}) - middle| over the chapter's positions (inf when fewer than half
    of them have two non-empty verses)."""
    errors = [
        abs(math.log(source_lengths[i] / target_lengths[i + offset]) - middle)
        for i in positions
        if 0 <= i + offset < len(target_lengths) and source_lengths[i] and target_lengths[i + offset]
    ]
    return statistics.median(errors) if errors and len(errors) * 2 >= len(positions) else math.inf


def sword_libraries(sword_path: str | None = None) -> list[Path]:
    """The SWORD library roots to search: ``sword_path``, else ``$SWORD_PATH``, ``~/.sword``, ``/usr/share/sword``.

    Only directories that exist are returned (each holds ``mods.d/*.conf``).
    """
    if sword_path is not None:
        candidates = [sword_path]
    else:
        candidates = [os.environ["SWORD_PATH"]] if os.environ.get("SWORD_PATH") else []
        candidates += DEFAULT_SWORD_PATHS
    paths = [Path(candidate).expanduser() for candidate in candidates]
    return [path for path in paths if (path / "mods.d").is_dir()]


def find_modules(libraries: list[Path]) -> dict[str, ModuleInfo]:
    """Installed modules by id, earlier libraries first (a module found twice keeps its first library).

    Raises:
        MissingDataError: pysword is not installed.
    """
    SwordModules = require_extra("bible", "pysword.modules", _NEEDS_PYSWORD).SwordModules
    found: dict[str, ModuleInfo] = {}
    for library in libraries:
        for module_id, conf in SwordModules(str(library)).parse_modules().items():
            found.setdefault(module_id, ModuleInfo(module_id, library, conf))
    return found


def resolve_module(name: str, found: dict[str, ModuleInfo]) -> ModuleInfo | None:
    """The installed module that ``name`` means: a known name ("SpaRV", "KJV", "WEB"), a module id, or the
    ``Abbreviation`` of a module's .conf (case-insensitive); ``None`` when none is installed."""
    key = name.lower()
    if key in KNOWN_MODULES and KNOWN_MODULES[key].module_id in found:
        return found[KNOWN_MODULES[key].module_id]
    for module_id, info in found.items():
        if module_id.lower() == key:
            return info
    for info in found.values():
        if info.conf.get("abbreviation", "").lower() == key:
            return info
    return None


def _missing_message(missing: list[str], names: tuple[str, ...], libraries: list[Path]) -> str:
    """The MissingDataError text: which modules are missing, where we looked, and the apt-get line."""
    searched = ", ".join(str(path) for path in libraries) or ", ".join(DEFAULT_SWORD_PATHS) + " (none exist)"
    packages = [KNOWN_MODULES[name.lower()].package for name in names if name.lower() in KNOWN_MODULES]
    unknown = [name for name in missing if name.lower() not in KNOWN_MODULES]
    message = f"Bible module(s) {', '.join(missing)} not installed (searched {searched})"
    if packages:
        message += f"; install them with: apt-get install -y {' '.join(packages)}"
    if unknown:
        message += (
            f"; {', '.join(unknown)} is not a module we know: use SpaRV, KJV, WEB or the id of an installed "
            f"SWORD module (give --sword-path, in TOML [data] sword_path, or $SWORD_PATH: its library)"
        )
    return message


def read_verses(info: ModuleInfo) -> dict[VerseRef, str]:
    """Every verse of a module as clean text, keyed by reference in canonical order (empty verses included).

    Raises:
        DataError: pysword cannot open the module, or a chapter has fewer verses than its versification says.
    """
    bible = _open_bible(info)
    refs: list[VerseRef] = []
    markup: list[str] = []
    for books in bible.get_structure().get_books().values():
        for book in books:
            for chapter, length in enumerate(book.chapter_lengths, start=1):
                texts = list(bible.get_iter(books=book.name, chapters=chapter, clean=False))
                if len(texts) != length:
                    raise DataError(
                        f"{info.library / info.conf.get('datapath', '')}: {book.osis_name} {chapter} has "
                        f"{len(texts)} verses, its versification says {length}"
                    )
                refs.extend(VerseRef(book.osis_name, chapter, verse) for verse in range(1, length + 1))
                markup.extend(texts)
    return dict(zip(refs, strip_osis_many(markup), strict=True))


def _open_bible(info: ModuleInfo) -> Any:
    """A pysword Bible for the module; compressed (zText) modules get the cache of :func:`_with_block_cache`."""
    from pysword.bible import BlockType, CompressType, SwordBible, ZTextModule, ZTextModule4

    conf = info.conf
    driver = conf.get("moddrv", "zText").lower()
    arguments = dict(
        module_path=str(info.library / conf.get("datapath", "")),
        module_type=driver,
        versification=conf.get("versification", "KJV").lower(),
        encoding=conf.get("encoding", "UTF-8").lower(),
        source_type=conf.get("sourcetype", "OSIS"),
        block_type=conf.get("blocktype", BlockType.BOOK),
        compress_type=conf.get("compresstype", CompressType.ZIP),
        cipherkey=conf.get("cipherkey") or None,
    )
    classes = {"ztext": ZTextModule, "ztext4": ZTextModule4}
    try:
        if driver in classes and hasattr(classes[driver], "_decompressed_text"):
            return _with_block_cache(classes[driver])(**arguments)
        return SwordBible(**arguments)
    except (OSError, ValueError, KeyError) as exc:
        raise DataError(f"{arguments['module_path']}: pysword cannot open module {info.module_id}: {exc}") from None


def _with_block_cache(base: type) -> type:
    """A subclass of pysword's zText reader ``base`` that keeps the last inflated block (one book per block).

    pysword's ``_text_for_index`` calls ``_decompressed_text(testament, block)`` for every verse, which reads and
    inflates the block again. Verses are read in order, so a one-block cache inflates each book once.
    """

    class BlockCachedZText(base):  # type: ignore[misc, valid-type]
        _last_block: tuple[tuple[str, int], bytes] | None = None

        def _decompressed_text(self, testament: str, buf_num: int) -> bytes:
            key = (testament, buf_num)
            if self._last_block is None or self._last_block[0] != key:
                self._last_block = (key, super()._decompressed_text(testament, buf_num))
            return self._last_block[1]

    return BlockCachedZText


def book_ids(names: list[str] | tuple[str, ...], versification: str = "kjv") -> list[str]:
    """OSIS book ids for book names a user types: full names, OSIS ids or abbreviations, any case.

    ``book_ids(["Matthew", "mark", "Jn"])`` -> ``["Matt", "Mark", "John"]``.

    Raises:
        ConfigError: a name matches no book (the message lists the OSIS ids).
        MissingDataError: pysword is not installed.
    """
    BibleStructure = require_extra("bible", "pysword.books", _NEEDS_PYSWORD).BibleStructure
    structure = BibleStructure(versification)
    ids = []
    for name in names:
        try:
            ids.append(structure.find_book(name.strip())[1].osis_name)
        except ValueError:
            known = [book.osis_name for books in structure.get_books().values() for book in books]
            raise ConfigError(f"unknown Bible book {name!r}; books are {', '.join(known)}") from None
    return ids
