"""TSV and CSV files of pairs: one pair per row, the source and target in two columns.

* ``*.csv`` files are read with Python's :mod:`csv` module (fields may be quoted and then hold the delimiter, quotes
  or line breaks; a line break inside a field becomes a space, counted in ``report["whitespace_replaced"]``).
* Any other file is split on the delimiter (a tab by default) with no quoting, so quotes are ordinary characters.

Every row must have the same number of columns (``CorpusOptions.num_columns``, or the first row's count). Which
columns hold the pair follows :func:`choose_columns`: a file of three or more columns needs them named. A blank
line is a pair with both sides empty (skipped and counted as ``blank_line``, or an error, by
``CorpusOptions.empty_lines``).
"""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from dotformer.data.read.textio import iter_text_lines
from dotformer.data.read.types import (
    SOURCE_NAMES,
    TARGET_NAMES,
    CorpusOptions,
    Pair,
    PairReader,
    check_empty,
    file_group,
    make_report,
    one_line,
)
from dotformer.errors import DataError


class TsvReader(PairReader):
    """The pairs of a TSV/CSV file, streamed (a block of the file in memory at a time); ``.csv`` selects CSV parsing
    (module docstring). The report's ``read`` rows exclude the header.

    Raises:
        MissingDataError: no such file.
        DataError: empty file, invalid UTF-8, a row with the wrong number of columns, bad CSV quoting, or an empty
            side with ``empty_lines="error"``; each message starts with ``FILE:LINE``.
    """

    def __init__(self, path: str | Path, options: CorpusOptions) -> None:
        super().__init__()
        self.path = Path(path)
        self.options = options
        self.name = str(self.path)
        self.task = options.task or "translation"
        self.grouped = self.task == "g2p"

    def records(self) -> Iterator[tuple[Pair, str | None]]:
        path, options = self.path, self.options
        is_csv = path.suffix.lower() == ".csv"
        delimiter = options.delimiter or ("," if is_csv else "\t")
        if is_csv:
            rows = _csv_rows(path, delimiter)
        else:  # a plain file: no quoting
            rows = ((number, line.split(delimiter)) for number, line in enumerate(iter_text_lines(path), start=1))
        dropped: Counter[str] = Counter()
        replaced: Counter[str] = Counter()
        kept = 0
        expected = options.num_columns
        columns: Columns | None = None
        read = 0
        for line_number, fields in rows:
            where = f"{path}:{line_number}"
            if not any(field.strip() for field in fields):
                if columns is None and options.header:
                    raise DataError(f"{where}: the header row is blank")
                if options.empty_lines == "error":
                    raise DataError(f"{where}: blank line (--empty-lines skip skips and counts them)")
                dropped["blank_line"] += 1
                read += 1
                continue
            if expected is None:
                expected = len(fields)
            if len(fields) != expected:
                raise DataError(f"{where}: {len(fields)} columns, expected {expected} (delimiter {delimiter!r})")
            if columns is None:  # the first row says which columns hold the pair; a header row is not a pair
                columns = choose_columns(fields, options, where, delimiter)
                if options.header:
                    continue
            read += 1
            source = one_line(fields[columns.source], replaced)
            target = one_line(fields[columns.target], replaced)
            if check_empty(source, target, where, options, dropped):
                kept += 1
                pair = Pair(source, target)
                yield pair, file_group(self.task, pair)
        report = make_report(read, kept, dropped, format="csv" if is_csv else "tsv", delimiter=delimiter)
        if columns is not None:
            report["columns"] = {"source": columns.source, "target": columns.target}
            if columns.names is not None:
                report["column_names"] = {"source": columns.names[0], "target": columns.names[1]}
        report.update(replaced)
        self.report = report


class Columns(NamedTuple):
    """Where a file's pairs are: the 0-based source and target column numbers, and their header names if any."""

    source: int
    target: int
    names: tuple[str, str] | None


def choose_columns(first_row: list[str], options: CorpusOptions, where: str, delimiter: str) -> Columns:
    """The source and target columns, from the options and the first row (the header when ``options.header``).

    A column is a number (counting from 0) or a header name; with neither, a header's ``source``/``target``
    (or ``src``/``tgt``) columns are used, else columns 0 and 1 of a 2-column file. A file of 3 or more columns
    whose pair columns are not named is refused: reading ``id<TAB>word<TAB>phones`` as id -> word would train
    the wrong task without a word.

    Raises:
        DataError: ``FILE:LINE: ...`` for a name the header lacks, a number past the last column, or 3+ columns
            with no columns named.
    """
    count = len(first_row)
    header = [name.strip() for name in first_row] if options.header else None
    chosen = []
    for side, value, defaults in (
        ("source", options.source_column, SOURCE_NAMES),
        ("target", options.target_column, TARGET_NAMES),
    ):
        if isinstance(value, str):
            assert header is not None  # CorpusOptions requires a header for named columns
            if value not in header:
                raise DataError(f"{where}: the header has no column {value!r} for the {side}; it has {header}")
            chosen.append(header.index(value))
        elif isinstance(value, int):
            if value >= count:
                raise DataError(
                    f"{where}: {count} column(s) with delimiter {delimiter!r}, but the {side} is read from column "
                    f"{value} (counting from 0)"
                )
            chosen.append(value)
        else:
            found = [i for i, name in enumerate(header or []) if name.lower() in defaults]
            chosen.append(found[0] if found else None)
    if None in chosen:
        if count < 2:
            raise DataError(
                f"{where}: {count} column(s) with delimiter {delimiter!r}; a pair needs a source and a target column"
            )
        if count > 2:
            listed = f" (header: {header})" if header else ""
            raise DataError(
                f"{where}: {count} columns{listed} with delimiter {delimiter!r}: say which hold the source and the "
                f"target (--source-column/--target-column, a number from 0 or a header name; in TOML [data] "
                f"source_column/target_column)"
            )
        if chosen == [None, None]:
            chosen = [0, 1]
        else:  # two columns, one side known: the other side is the other column
            known = chosen[0] if chosen[0] is not None else 1 - chosen[1]
            chosen = [known, 1 - known]
    source, target = chosen
    if source == target:
        raise DataError(f"{where}: the source and the target are both column {source}")
    names = (header[source], header[target]) if header else None
    return Columns(source, target, names)


def _csv_rows(path: Path, delimiter: str) -> Iterator[tuple[int, list[str]]]:
    """(first line number, fields) of a CSV file; a quoted field may span lines.

    Raises:
        DataError: bad quoting (``FILE:LINE: ...``).
    """
    reader = csv.reader((f"{line}\n" for line in iter_text_lines(path)), delimiter=delimiter, strict=True)
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
