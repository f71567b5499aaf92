"""Sentence-pair classification (``classify-pairs``): a label for two texts together, as in natural language
inference (premise, hypothesis: entailment, neutral, contradiction) or paraphrase detection.

A file holds ``TEXT<TAB>TEXT<TAB>LABEL`` lines (blank lines are skipped). The encoder reads the two texts as one,
joined by a separator token, ``[BOS] first ␞ second [EOS]`` (:data:`SEPARATOR`: one character, so one token of a
character tokenizer and a piece byte-level BPE learns, as it is in every text), and its pooled vector is classified:
everything else is a classifier's (:class:`~dotformer.runs.encoder.ClassifyTask`). Each file of pairs (the training,
valid and test files, and ``dotformer evaluate --data FILE``) is written once as a classifier's ``TEXT<TAB>LABEL``
lines into the cache of prepared data, named by its content's hash, and prepared, trained and scored from there.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dotformer.data.config import EncoderDataConfig
from dotformer.data.prepared.cache import default_cache_root
from dotformer.errors import DataError, MissingDataError
from dotformer.runs.encoder import ClassifyTask
from dotformer.runs.task import EvalReport, EvalRequest

SEPARATOR = " \u241e "  # "␞" (symbol for record separator) between the two texts, spaced as a word


class SentencePairTask(ClassifyTask):
    """A classifier of text pairs (module docstring)."""

    name = "classify-pairs"
    title = "a sentence-pair classifier"
    unit = "pair"

    def data_config(self, section: dict[str, Any], source: str) -> EncoderDataConfig:
        return EncoderDataConfig.from_section({**section, "task": "classify"}, source)  # read as a classifier's

    @property
    def data_task(self) -> str:
        return "classify"  # prepared as a classifier's data

    def kind_data(self, data: EncoderDataConfig) -> EncoderDataConfig:
        files = {role: joined_file(getattr(data, role)) for role in ("dataset", "valid", "test") if getattr(data, role)}
        return dataclasses.replace(data, **files)

    def score(self, loaded: Any, request: EvalRequest) -> EvalReport:
        if request.data is not None:
            request = dataclasses.replace(request, data=joined_file(request.data))
        return super().score(loaded, request)


def join_pairs(texts: Sequence[str]) -> list[str]:
    """The texts a sentence-pair classifier reads, from ``TEXT<TAB>TEXT`` inputs (``dotformer classify``, ``classify``
    from Python, ``POST /api/classify``): the two texts joined by :data:`SEPARATOR`, as its training files were.

    Raises:
        DataError: an input that is not two non-empty texts separated by one tab (naming the input, from 1).
    """
    joined = []
    for number, text in enumerate(texts, 1):
        fields = [field.strip() for field in text.split("\t")]
        if len(fields) != 2 or not all(fields) or any(SEPARATOR.strip() in field for field in fields):
            raise DataError(f"input {number}: a sentence-pair classifier reads TEXT<TAB>TEXT, got {text[:60]!r}")
        joined.append(f"{fields[0]}{SEPARATOR}{fields[1]}")
    return joined


def joined_file(path: str) -> str:
    """The ``TEXT<TAB>LABEL`` file of a file of pairs (each line's two texts joined by :data:`SEPARATOR`), written
    once into the cache of prepared data.

    Raises:
        MissingDataError: no such file. DataError: a line that is not TEXT<TAB>TEXT<TAB>LABEL (FILE:LINE), or a text
            holding the separator.
    """

    source = Path(path)
    if not source.is_file():
        raise MissingDataError(f"{path}: no such file (a sentence-pair file has TEXT<TAB>TEXT<TAB>LABEL lines)")
    content = source.read_bytes()
    target = default_cache_root() / "sentence-pairs" / f"{source.stem}-{hashlib.sha256(content).hexdigest()[:24]}.tsv"
    if target.is_file():
        return str(target)
    lines = []
    for number, line in enumerate(content.decode("utf-8", errors="strict").splitlines(), 1):
        fields = [field.strip() for field in line.split("\t")]
        if line.strip() and (len(fields) != 3 or not all(fields) or any(SEPARATOR.strip() in f for f in fields)):
            raise DataError(f"{path}:{number}: a line of a sentence-pair file is TEXT<TAB>TEXT<TAB>LABEL")
        lines.append(f"{fields[0]}{SEPARATOR}{fields[1]}\t{fields[2]}" if line.strip() else "")
    if not any(lines):
        raise DataError(f"{path}: no TEXT<TAB>TEXT<TAB>LABEL lines")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    partial.write_text("\n".join(lines) + "\n", encoding="utf-8")
    partial.replace(target)  # whole or not there
    return str(target)
