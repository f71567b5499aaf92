"""OSIS markup -> plain verse text, for the SWORD Bible modules read by :mod:`dotformer.data.read.bible`.

The modules store each verse as OSIS XML fragments. What we found in SpaRV (Reina-Valera 1909), KJV and WEB, and
what :func:`strip_osis` does with it:

* Strong's numbers on nearly every word, ``<w lemma="strong:H7225">beginning</w>``, and other word-level tags
  (``transChange`` for words the translators added, ``divineName``, ``q`` for speech, ``seg``, ``foreign``, ``name``)
  -> the tag goes, the words stay. SpaRV writes some word boundaries only as ``</transChange><w ...>`` with no space
  (``que es</transChange><w>Ramat``): a closing tag followed directly by an opening tag is a word boundary.
* Footnotes and cross references, ``God<note ...>The Hebrew word rendered “God” ...</note><w>created</w>`` (WEB),
  and variant readings (``<rdg>``, ``<rdgGroup>``) -> removed with their content and replaced by a space, so the
  words on either side are not glued (``God created``). A space that would land before closing punctuation is
  dropped (``gerahs<note>...</note>);`` -> ``gerahs);``).
* Titles: the canonical psalm superscriptions (``<title canonical="true" type="psalm">A Psalm of David ...``) are
  verse text and are kept; other titles are editorial and go with their content (KJV's acrostic headings
  ``ב BETH.`` in Psalm 119 and the Pauline subscriptions "Written to the Romans from Corinthus ...").
* WEB's speaker labels in the Song of Songs (``<speaker>Beloved</speaker>``) are editorial: removed.
* Structure (milestones, ``<l>``/``<lg>`` poetry lines, ``<lb/>``, paragraph and chapter ``<div>``/``<chapter>``
  markers, ``<list>``/``<item>``) -> a space.
* The end of a book, ``<div eID=... type="book"/>``, ends the verse: WEB appends its whole glossary after it in
  Revelation 22:21.
* KJV's paragraph sign ``¶`` and stray USFM character markers that leaked into the text (``\\nd JEHOVAH`` in
  Exodus 6:3) are removed; XML entities (``&amp;``) are decoded; whitespace is collapsed to single spaces.

Canonical text that looks like markup stays: KJV's bracketed words (``[but]`` in 1 John 2:23), WEB's "Selah.".
"""

from __future__ import annotations

import html
import re

# Verses are stripped many at a time, joined by _VERSE_BREAK: one regex pass per module instead of one per verse
# (about 40% faster). No pattern below crosses a _VERSE_BREAK, so verses cannot leak into each other.
_VERSE_BREAK = "\x01"
_SOFT_SPACE = "\x00"  # a space we inserted; it vanishes before closing punctuation
_BOOK_END = re.compile(r'<div\b(?=[^>]*\beID=)(?=[^>]*\btype="book")[^>]*/>')  # a book's closing milestone
# Elements whose content is not verse text (none of them nests inside itself in these modules), and titles that
# are not canonical. Self-closing forms ("<note/>") are excluded by (?<!/) and handled as plain tags below.
_DROPPED = re.compile(
    r"<(note|rdg|rdgGroup|speaker|figure|index)\b[^>\x01]*(?<!/)>[^\x01]*?</\1>"
    r"|<title\b(?![^>\x01]*\bcanonical=\"true\")[^>\x01]*(?<!/)>[^\x01]*?</title>"
)
# A closing tag directly followed by an opening tag is a word boundary (SpaRV's "</transChange><w>").
_CLOSE_THEN_OPEN = re.compile(r"(</[A-Za-z][^>\x01]*>)(?=<[A-Za-z])")
# Word-level tags: removing them must not separate the letters around them ("give</w>n" in KJV Mark 4:24).
_INLINE_NAMES = "w|transChange|divineName|q|seg|foreign|name|hi|catchWord|reference|abbr|mentioned|inscription|lem|app"
_INLINE_TAG = re.compile(rf"<(?:{_INLINE_NAMES})\b[^>\x01]*>|</(?:{_INLINE_NAMES})>")
_ANY_TAG = re.compile(r"<[^>\x01]*>")  # what is left: structure (milestones, <l>, <lg>, <div>, <chapter>, titles)
_SOFT_BEFORE_PUNCT = re.compile(_SOFT_SPACE + r"+(?=[,.;:!?)\]’”»])")
_USFM_MARKER = re.compile(r"\\\+?[a-z]+[0-9]*\*?")  # "\nd", "\+nd*", "\wj*"
_STRAY_MARKS = str.maketrans({"¶": " ", _VERSE_BREAK: " ", _SOFT_SPACE: " "})


def strip_osis(markup: str) -> str:
    """Plain text of one verse's OSIS markup (the rules are in the module docstring).

    Args:
        markup: the verse as stored in the module (``clean=False`` in pysword), e.g.
            ``'<w lemma="strong:H7225">EN el principio</w> <w lemma="strong:H1254">crió</w>'``.

    Returns:
        The verse text with single spaces and no leading or trailing space, e.g. ``"EN el principio crió"``;
        ``""`` for a verse with no text (an omitted verse).
    """
    return strip_osis_many([markup])[0]


def strip_osis_many(verses: list[str]) -> list[str]:
    """:func:`strip_osis` of every verse, in one pass over all of them (the same result, faster)."""
    cut = []
    for markup in verses:
        if 'type="book"' in markup:
            book_end = _BOOK_END.search(markup)
            if book_end is not None:
                markup = markup[: book_end.start()]  # the book ends here; what follows is not verse text
        if _VERSE_BREAK in markup or _SOFT_SPACE in markup:
            markup = markup.translate(_STRAY_MARKS)  # our two marker characters must not come from the text
        cut.append(markup)
    text = _VERSE_BREAK.join(cut)
    text = _DROPPED.sub(_SOFT_SPACE, text)
    text = _CLOSE_THEN_OPEN.sub(r"\1" + _SOFT_SPACE, text)
    text = _INLINE_TAG.sub("", text)
    text = _ANY_TAG.sub(_SOFT_SPACE, text)
    text = html.unescape(text).replace("¶", " ")
    text = _USFM_MARKER.sub(" ", text)
    text = _SOFT_BEFORE_PUNCT.sub("", text).replace(_SOFT_SPACE, " ")
    return [" ".join(verse.split()) for verse in text.split(_VERSE_BREAK)]
