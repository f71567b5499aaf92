"""Hugging Face ``datasets``: pairs from a hub dataset or from local files, through ``datasets.load_dataset``.

``datasets`` is an optional extra (``pip install "dotformer[datasets]"``); it is imported when a corpus is read.
The spec is ``"hf:NAME_OR_PATH"``:

* a hub name with a config, e.g. ``hf:wmt14`` with ``CorpusOptions(hf_config="de-en", source_field="de",
  target_field="en")`` (needs the network, which these machines do not have);
* a generic builder with local files, e.g. ``hf:json`` with ``hf_data_files=("train.jsonl",)``;
* a local data file, e.g. ``hf:data/train.jsonl`` (the builder is chosen from the extension: .json/.jsonl, .csv,
  .parquet) or a local dataset directory.

Two record layouts are understood: flat columns (``{"source": ..., "target": ...}``, names set by
``source_field``/``target_field``) and the translation dict of the WMT/OPUS datasets
(``{"translation": {"es": ..., "en": ...}}`` with ``source_field="es"``, ``target_field="en"``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dotformer.data.read.types import (
    CorpusOptions,
    Pair,
    PairReader,
    check_empty,
    file_group,
    make_report,
    one_line,
)
from dotformer.errors import DataError, MissingDataError, require_extra

_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}
BATCH_ROWS = 10_000  # rows read from the Arrow files at a time


class HFReader(PairReader):
    """The pairs of a ``datasets`` dataset, read :data:`BATCH_ROWS` rows at a time from its memory-mapped Arrow
    files (``Dataset.iter``); the dataset is loaded, and its fields checked, when the reader is made. Its corpus
    is named ``"hf:NAME_OR_PATH"`` (the spec's part after ``"hf:"``: module docstring); the report counts
    ``whitespace_replaced`` too (fields whose tabs or line breaks became spaces).

    Raises:
        MissingDataError: ``datasets`` is not installed, or the dataset or its files cannot be found.
        DataError: the dataset cannot be loaded, lacks a field (the message lists the fields), holds a value
            that is not text, or has an empty side with ``empty_lines="error"`` (``row N`` in the message).
    """

    def __init__(self, name_or_path: str, options: CorpusOptions) -> None:
        super().__init__()
        self.options = options
        self.name = f"hf:{name_or_path}"
        self.task = options.task or "translation"
        self.grouped = self.task == "g2p"
        self._dataset = _load(name_or_path, options, self.name)
        self._layout = _layout(self._dataset, options, self.name)

    def records(self) -> Iterator[tuple[Pair, str | None]]:
        options, spec = self.options, self.name
        dropped: Counter[str] = Counter()
        replaced: Counter[str] = Counter()
        kept = row = 0
        fields = (options.source_field, options.target_field)
        for batch in self._dataset.iter(batch_size=BATCH_ROWS):
            if self._layout == "translation":
                items = batch["translation"]
                sources, targets = [item.get(fields[0]) for item in items], [item.get(fields[1]) for item in items]
            else:
                sources, targets = batch[fields[0]], batch[fields[1]]
            for source, target in zip(sources, targets, strict=True):
                where = f"{spec} ({options.hf_split}) row {row}"
                row += 1
                source, target = _text(source, fields[0], where), _text(target, fields[1], where)
                source, target = one_line(source, replaced), one_line(target, replaced)
                if check_empty(source, target, where, options, dropped):
                    kept += 1
                    pair = Pair(source, target)
                    yield pair, file_group(self.task, pair)
        report = make_report(row, kept, dropped, split=options.hf_split, config=options.hf_config)
        report.update(replaced)
        self.report = report


def _load(name_or_path: str, options: CorpusOptions, spec: str) -> Any:
    """``datasets.load_dataset`` of the spec with the options' config, split, files and cache directory.

    Raises:
        MissingDataError: ``datasets`` missing, or the dataset or its files not found. DataError: it cannot load.
    """
    datasets = require_extra("datasets", "datasets", "hf: corpora")
    builder, data_files = name_or_path, options.hf_data_files
    local = Path(name_or_path)
    if local.is_file() and local.suffix.lower() in _BUILDERS:
        builder, data_files = _BUILDERS[local.suffix.lower()], (str(local),)
    arguments: dict[str, Any] = {"split": options.hf_split}
    if data_files:
        arguments["data_files"] = list(data_files)
    if options.hf_cache_dir:
        arguments["cache_dir"] = options.hf_cache_dir
    try:
        return datasets.load_dataset(builder, options.hf_config, **arguments)
    except (FileNotFoundError, ConnectionError) as exc:
        raise MissingDataError(f"{spec}: cannot find the dataset or its files ({type(exc).__name__}: {exc})") from None
    except Exception as exc:  # datasets raises many types (ValueError, DatasetGenerationError, ...): report any
        raise DataError(f"{spec}: datasets could not load it ({type(exc).__name__}: {exc})") from None


def _layout(dataset: Any, options: CorpusOptions, spec: str) -> str:
    """``"flat"`` (source and target columns) or ``"translation"`` (a dict column keyed by language).

    Raises:
        DataError: a field is missing (the message lists the dataset's fields and translation keys).
    """
    columns = list(dataset.column_names)
    fields = (options.source_field, options.target_field)
    if all(name in columns for name in fields):
        return "flat"
    if "translation" in columns:
        first = dataset[0]["translation"] if len(dataset) else None
        keys = sorted(first) if isinstance(first, dict) else []
        if all(name in keys for name in fields):
            return "translation"
        raise DataError(
            f"{spec}: the translation dicts have keys {keys}, not {list(fields)}; give --source-field/--target-field "
            "(in TOML [data] source_field/target_field)"
        )
    raise DataError(
        f"{spec}: no field(s) {[name for name in fields if name not in columns]}; the dataset has {columns}; "
        f"give --source-field/--target-field (in TOML [data] source_field/target_field)"
    )


def _text(value: Any, field: str, where: str) -> str:
    """A field's value as text (``None`` counts as empty).

    Raises:
        DataError: the value is not a string.
    """
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DataError(f"{where}: field {field!r} holds {type(value).__name__} {value!r:.60}, not text")
    return value
