"""TSV and CSV files of pairs: one pair per row, the source and target in two columns.

* ``*.csv`` files are read with Python's :mod:`csv` module (fields may be quoted and then hold the delimiter, quotes
  or line breaks; a line break inside a field becomes a space, counted in ``report["whitespace_replaced"]``).
* Any other file is split on the delimiter (a tab by default) with no quoting, so quotes are ordinary characters.

Every row must have the same number of columns (``CorpusOptions.num_columns``, or the first row's count); a blank
line is a pair with both sides empty (skipped and counted as ``blank_line``, or an error, by
``CorpusOptions.empty_lines``).
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from dotformer.data.corpora import Corpus, CorpusOptions, Pair, check_empty, make_report, one_line
from dotformer.data.textio import read_text, split_lines
from dotformer.errors import DataError


def load_tsv(path: str | Path, options: CorpusOptions) -> Corpus:
    """Read a TSV/CSV file of pairs.

    Args:
        path: the file; ``.csv`` selects CSV parsing (see the module docstring).
        options: ``delimiter``, ``source_column``, ``target_column``, ``num_columns``, ``header``, ``empty_lines``,
            ``task``.

    Returns:
        A :class:`Corpus` named by the path, task ``options.task or "translation"``, no groups; the report counts
        ``read`` rows (the header excluded) = kept ``pairs`` + ``dropped`` by reason (``blank_line``,
        ``empty_source``, ``empty_target``).

    Raises:
        MissingDataError: no such file.
        DataError: empty file, invalid UTF-8, a row with the wrong number of columns, bad CSV quoting, or an empty
            side with ``empty_lines="error"``; each message starts with ``FILE:LINE``.
    """
    path = Path(path)
    is_csv = path.suffix.lower() == ".csv"
    delimiter = options.delimiter or ("," if is_csv else "\t")
    rows = _csv_rows(path, delimiter) if is_csv else _plain_rows(path, delimiter)
    dropped: Counter[str] = Counter()
    replaced: Counter[str] = Counter()
    pairs: list[Pair] = []
    expected = options.num_columns
    header_pending = options.header
    read = 0
    for line_number, fields in rows:
        where = f"{path}:{line_number}"
        if not any(field.strip() for field in fields):
            if options.empty_lines == "error":
                raise DataError(f"{where}: blank line (CorpusOptions.empty_lines='skip' skips and counts them)")
            dropped["blank_line"] += 1
            read += 1
            continue
        if expected is None:
            expected = len(fields)
            if expected <= max(options.source_column, options.target_column):
                raise DataError(
                    f"{where}: {expected} column(s) with delimiter {delimiter!r}, but the pairs are read from columns "
                    f"{options.source_column} and {options.target_column} (counting from 0)"
                )
        if len(fields) != expected:
            raise DataError(f"{where}: {len(fields)} columns, expected {expected} (delimiter {delimiter!r})")
        if header_pending:  # the first row names the columns; it is checked but is not a pair
            header_pending = False
            continue
        read += 1
        source = one_line(fields[options.source_column], replaced)
        target = one_line(fields[options.target_column], replaced)
        if check_empty(source, target, where, options, dropped):
            pairs.append(Pair(source, target))
    report = make_report(read, len(pairs), dropped, format="csv" if is_csv else "tsv", delimiter=delimiter)
    report.update(replaced)
    return Corpus(name=str(path), task=options.task or "translation", pairs=pairs, report=report)


def _plain_rows(path: Path, delimiter: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of a file split on ``delimiter`` with no quoting."""
    for number, line in enumerate(split_lines(read_text(path)), start=1):
        yield number, line.split(delimiter)


def _csv_rows(path: Path, delimiter: str) -> Iterator[tuple[int, list[str]]]:
    """(first line number, fields) of a CSV file; a quoted field may span lines.

    Raises:
        DataError: bad quoting (``FILE:LINE: ...``).
    """
    reader = csv.reader(io.StringIO(read_text(path), newline=""), delimiter=delimiter, strict=True)
    start = 1
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise DataError(f"{path}:{reader.line_num}: malformed CSV ({exc})") from None
        yield start, fields
        start = reader.line_num + 1
