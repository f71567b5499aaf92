"""Docstrings as the code writes them, made safe for reStructuredText before Sphinx reads them.

The docstrings are written to be read in a terminal first: a ``|Y|`` is a length, an indented block is a table of
routes or formulas, and a hand-aligned table may run one character past its column. Read as reStructuredText, these
are a substitution, a block quote with an unexpected indent, and a malformed table. :func:`tidy_docstring` (connected
to ``autodoc-process-docstring``) escapes the bars and shows such blocks verbatim, so the build can treat every other
warning as an error.
"""

from __future__ import annotations

import re

_LITERAL_SPAN = re.compile(r"(``.*?``)")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _escape_bars(line: str) -> str:
    """``|x|`` outside ``literal`` spans becomes ``\\|x\\|`` (a bar, not a substitution)."""
    parts = _LITERAL_SPAN.split(line)
    return "".join(p if p.startswith("``") else p.replace("|", "\\|") for p in parts)


def _table_is_malformed(rows: list[str], border: str) -> bool:
    """A simple table's row text must leave the border's gaps blank."""
    gaps = [i for i, c in enumerate(border) if c == " " and i > _indent(border)]
    return any(i < len(row) and row[i] != " " for row in rows for i in gaps if not set(row.strip()) <= {"=", " "})


def _literal_tables(lines: list[str]) -> list[str]:
    """Show a malformed simple table (``====  ====`` borders) verbatim."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if re.fullmatch(r"\s*=+( +=+)+\s*", line):
            end = i + 1
            borders = 1
            while end < len(lines) and lines[end].strip() and borders < 3:
                borders += bool(re.fullmatch(r"\s*=+( +=+)+\s*", lines[end]))
                end += 1
            table = lines[i:end]
            if _table_is_malformed(table, line):
                out += ["::", ""] + ["    " + row for row in table]
                i = end
                continue
        out.append(line)
        i += 1
    return out


def _literal_blocks(lines: list[str]) -> list[str]:
    """An indented block after a blank line, 4 or more columns deeper than the paragraph before it, shown verbatim."""
    out: list[str] = []
    literal_indent: int | None = None
    for i, line in enumerate(lines):
        if literal_indent is not None:
            if line.strip() and _indent(line) <= literal_indent:
                literal_indent = None
            else:
                out.append(line)
                continue
        prev = next((p for p in reversed(out) if p.strip()), None)
        starts_block = (
            line.strip()
            and i > 0
            and not lines[i - 1].strip()
            and prev is not None
            and _indent(line) >= _indent(prev) + 4
            and not prev.rstrip().endswith("::")
            and not prev.lstrip().startswith(".. ")
        )
        if starts_block:
            j = len(out) - 1 - next(k for k, p in enumerate(reversed(out)) if p.strip())
            out[j] = out[j].rstrip() + " ::"
            literal_indent = _indent(prev)
            out.append(line)
            continue
        if prev is not None and prev.rstrip().endswith("::") and not line.strip():
            pass
        out.append(line)
    return out


def _escape_outside_literals(lines: list[str]) -> list[str]:
    out: list[str] = []
    literal_indent: int | None = None
    for line in lines:
        if literal_indent is not None and line.strip() and _indent(line) <= literal_indent:
            literal_indent = None
        if literal_indent is None:
            out.append(_escape_bars(line))
            if line.rstrip().endswith("::"):
                literal_indent = _indent(line)
        else:
            out.append(line)
    return out


def tidy_docstring(app, what, name, obj, options, lines: list[str]) -> None:  # noqa: ANN001, ARG001
    """Rewrite ``lines`` in place: malformed tables and deep indented blocks verbatim, bars escaped elsewhere."""
    lines[:] = _escape_outside_literals(_literal_blocks(_literal_tables(list(lines))))
