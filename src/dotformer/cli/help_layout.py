"""How ``--help`` is laid out: text filled to the terminal's width, example command lines kept as written.

A description or epilog is made of blocks separated by blank lines. A block whose first line ends with
``examples:`` is printed verbatim (command lines must stay whole, to be copied). Every other block is a list of
items, each filled to the width: an item starts with a line such as ``input:  the TEXT ...`` or ``  npy    one
float32 ...``, whose lines after the first are indented under the text that follows the term (``input:``,
``npy``); a line indented as far as that text, or a line without a term indented between the item's own indent and
that text, continues the item; any other line starts a new one. Prose is an item without a term, so its lines join
into one paragraph.

The parsers of the command line are :class:`ArgumentParser`, which also reads a negative number in any notation
(``-1e308``) as a flag's value.
"""

from __future__ import annotations

import argparse
import re
import textwrap

# "input:  ", "limits: " or "npy    " at the start of an item (after its indent): the text lines up after it
_TERM = re.compile(r"(\S+: +|\S+ {2,})(?=\S)")
EXAMPLES_HEADING = "examples:"


class HelpFormatter(argparse.HelpFormatter):
    """Argument help and descriptions/epilogs filled to the terminal's width (``$COLUMNS`` when set), breaking
    lines between words only (never inside ``--max-len-a``); ``examples:`` blocks kept verbatim."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        text = " ".join(text.split())
        return textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return fill_help_text(text, width, indent)


def fill_help_text(text: str, width: int, indent: str = "") -> str:
    """``text`` filled to lines of at most ``width`` characters (``indent`` included) by the rules of this module.

    A single word longer than the width (a long path) stays whole on a line of its own.
    """
    blocks = re.split(r"\n[ \t]*\n", text.strip("\n"))
    filled = []
    for block in blocks:
        lines = block.splitlines()
        if lines[0].strip().endswith(EXAMPLES_HEADING):
            filled.append("\n".join(indent + line.rstrip() for line in lines))
        else:
            filled.append("\n".join(_fill_item(item, width, indent) for item in _items(lines)))
    return "\n\n".join(filled)


def _items(lines: list[str]) -> list[tuple[int, int, str]]:
    """A block's items as (indent, hanging indent, text joined into one line)."""
    items: list[tuple[int, int, list[str]]] = []
    for line in lines:
        stripped = line.strip()
        lead = len(line) - len(line.lstrip())
        if items:
            start, hang, words = items[-1]
            term = _TERM.match(stripped)
            if lead == hang or (term is None and start <= lead <= hang):
                words.append(stripped)
                continue
        term = _TERM.match(stripped)
        items.append((lead, lead + (term.end() if term else 0), [stripped]))
    return [(start, hang, " ".join(words)) for start, hang, words in items]


def _fill_item(item: tuple[int, int, str], width: int, indent: str) -> str:
    start, hang, text = item
    if hang - start > max(16, width // 3):  # a long term: continue a little in, not far across
        hang = start + 4
    return textwrap.fill(
        text,
        width,
        initial_indent=indent + " " * start,
        subsequent_indent=indent + " " * hang,
        break_on_hyphens=False,
        break_long_words=False,
    )


# a negative number in any notation Python's float() reads: -3, -0.5, -.5, -1e308, -1E-3, -inf, -nan
NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|infinity|nan)$", re.IGNORECASE)


class ArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` with :class:`HelpFormatter`; its subcommands' parsers are of this class too.

    A word that is a negative number (``--length-penalty -1e308``, ``--temperature -1e-3``) is a flag's value, never
    an option: argparse itself knows only ``-3`` and ``-0.5``, and would answer "expected one argument" before the
    flag's own check could name its range. (No flag of the command line looks like a number.)
    """

    def __init__(self, *args: object, formatter_class: type[argparse.HelpFormatter] = HelpFormatter, **kwargs: object):
        super().__init__(*args, formatter_class=formatter_class, **kwargs)  # type: ignore[arg-type]
        self._negative_number_matcher = NEGATIVE_NUMBER  # read by argparse when it sorts options from values
