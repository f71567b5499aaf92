"""The table of data kinds: the kind of a data config (its ``kind``: ``pairs``, ``text`` or ``labelled``), and what
every caller does with one without knowing which it is: prepare it, fingerprint it, map a prepared directory.

=========  ===================================================  ===========================================
kind       data configs                                         handle
=========  ===================================================  ===========================================
pairs      :class:`~dotformer.data.config.DataConfig`           :class:`~.pair_kind.PreparedPairs`
text       :class:`~dotformer.data.config.LMDataConfig`,        :class:`~.text_kind.PreparedText`
           :class:`~dotformer.data.config.EncoderDataConfig`
           of task mlm
labelled   :class:`~dotformer.data.config.EncoderDataConfig`    :class:`~.labelled_kind.PreparedLabelled`
           of task classify or tag
=========  ===================================================  ===========================================

A new kind is a module beside these (a :class:`~dotformer.data.prepared.skeleton.DataKind`) and a row here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dotformer.data.prepared.labelled_kind import LabelledKind, PreparedLabelled
from dotformer.data.prepared.layout import REPORT_FILE, read_report
from dotformer.data.prepared.pair_kind import PairsKind, PreparedPairs
from dotformer.data.prepared.skeleton import DataKind
from dotformer.data.prepared.text_kind import PreparedText, TextKind
from dotformer.errors import DataError

KINDS: dict[str, type[DataKind]] = {kind.name: kind for kind in (PairsKind, TextKind, LabelledKind)}
Prepared = PreparedPairs | PreparedText | PreparedLabelled


def kind_of(config: Any) -> DataKind:
    """The data kind of a data config (``config.kind`` names it), holding the config."""
    return KINDS[config.kind](config)


def prepare(config: Any, seed: int, directory: str | Path, tokenizers: Any = None, **options: Any) -> Prepared:
    """Prepare the data of ``config`` into ``directory`` (a new or empty one) by its kind
    (:meth:`~dotformer.data.prepared.skeleton.DataKind.prepare`); ``options``: ``sample_lines``, ``chunk``,
    ``inputs``.

    Raises:
        what the kind's preparation raises.
    """
    return kind_of(config).prepare(seed, directory, tokenizers, **options)  # type: ignore[no-any-return]


def open_prepared(directory: str | Path) -> Prepared:
    """Map a prepared directory of any kind (the kind its report names).

    Raises:
        MissingDataError: no ``prepared.json`` there.
        DataError: an unknown kind, or a damaged directory: an array missing, of another length than the report
            says, or holding a token id outside its tokenizer's vocabulary (the file named).
    """
    kind = read_report(directory).get("kind")
    if kind not in KINDS:
        raise DataError(f"{Path(directory) / REPORT_FILE}: unknown kind of prepared data {kind!r}")
    return KINDS[kind].open(directory)  # type: ignore[no-any-return]
