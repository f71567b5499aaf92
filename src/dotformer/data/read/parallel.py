"""Line-aligned parallel files: line i of the source file translates line i of the target file ("train.es,train.en").

This is the format of most machine-translation corpora (Europarl, WMT, OPUS downloads). Both files are read a block
at a time, side by side, and must have the same number of lines; a pair with an empty line on either side is skipped
and counted, or is an error, by ``CorpusOptions.empty_lines``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from dotformer.data.read.textio import iter_text_lines
from dotformer.data.read.types import (
    CorpusOptions,
    Pair,
    PairReader,
    check_empty,
    file_group,
    is_empty,
    make_report,
)
from dotformer.errors import DataError


class ParallelReader(PairReader):
    """The pairs of two line-aligned files, streamed side by side, in a corpus named ``"SOURCE,TARGET"``.

    Raises:
        MissingDataError: a file does not exist.
        DataError: an empty file, invalid UTF-8 (FILE:LINE and byte offset), files with different line counts (an
            error when the shorter one ends, both counted to their ends), or an empty line with
            ``empty_lines="error"`` (FILE:LINE of the empty side).
    """

    def __init__(self, source_path: str | Path, target_path: str | Path, options: CorpusOptions) -> None:
        super().__init__()
        self.source_path, self.target_path = Path(source_path), Path(target_path)
        self.options = options
        self.name = f"{self.source_path},{self.target_path}"
        self.task = options.task or "translation"
        self.grouped = self.task == "g2p"

    def records(self) -> Iterator[tuple[Pair, str | None]]:
        source_path, target_path = self.source_path, self.target_path
        sources, targets = iter_text_lines(source_path), iter_text_lines(target_path)  # both checked before a line
        dropped: Counter[str] = Counter()
        kept = number = 0
        for source in sources:
            target = next(targets, None)
            if target is None:  # the target file ended first
                lines = (number + 1 + sum(1 for _ in sources), number)
                break
            number += 1
            where = f"{target_path if is_empty(target) and not is_empty(source) else source_path}:{number}"
            if check_empty(source, target, where, self.options, dropped):
                kept += 1
                pair = Pair(source, target)
                yield pair, file_group(self.task, pair)
        else:
            lines = (number, number + sum(1 for _ in targets))
        if lines[0] != lines[1]:
            raise DataError(
                f"{source_path}:{min(lines) + 1}: parallel files differ in length: "
                f"{source_path} has {lines[0]} lines, {target_path} has {lines[1]} lines"
            )
        self.report = make_report(number, kept, dropped, format="parallel")
