"""Line-aligned parallel files: line i of the source file translates line i of the target file ("train.es,train.en").

This is the format of most machine-translation corpora (Europarl, WMT, OPUS downloads). Both files must have the
same number of lines; a pair with an empty line on either side is skipped and counted, or is an error, by
``CorpusOptions.empty_lines``.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from dotformer.data.textio import read_text_lines
from dotformer.data.types import Corpus, CorpusOptions, Pair, check_empty, file_groups, is_empty, make_report
from dotformer.errors import DataError


def load_parallel(source_path: str | Path, target_path: str | Path, options: CorpusOptions) -> Corpus:
    """Read two line-aligned files into pairs.

    Args:
        source_path: one source sentence per line (UTF-8).
        target_path: the matching target sentence on the same line number.
        options: ``empty_lines``, ``task``.

    Returns:
        A :class:`Corpus` named ``"SOURCE,TARGET"``, task ``options.task or "translation"``, no groups; the report
        counts ``read`` line pairs, kept ``pairs``, ``dropped`` by reason (``empty_source``, ``empty_target``).

    Raises:
        MissingDataError: a file does not exist.
        DataError: an empty file, invalid UTF-8 (FILE:LINE and byte offset), files with different line counts (both
            counts named), or an empty line with ``empty_lines="error"`` (FILE:LINE of the empty side).
    """
    source_path, target_path = Path(source_path), Path(target_path)
    sources = read_text_lines(source_path)
    targets = read_text_lines(target_path)
    if len(sources) != len(targets):
        raise DataError(
            f"{source_path}:{min(len(sources), len(targets)) + 1}: parallel files differ in length: "
            f"{source_path} has {len(sources)} lines, {target_path} has {len(targets)} lines"
        )
    dropped: Counter[str] = Counter()
    pairs: list[Pair] = []
    for number, (source, target) in enumerate(zip(sources, targets, strict=True), start=1):
        where = f"{target_path if is_empty(target) and not is_empty(source) else source_path}:{number}"
        if check_empty(source, target, where, options, dropped):
            pairs.append(Pair(source, target))
    report = make_report(len(sources), len(pairs), dropped, format="parallel")
    task = options.task or "translation"
    name = f"{source_path},{target_path}"
    return Corpus(name=name, task=task, pairs=pairs, groups=file_groups(task, pairs), report=report)
