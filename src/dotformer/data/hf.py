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
from pathlib import Path
from typing import Any

from dotformer.data.types import Corpus, CorpusOptions, Pair, check_empty, file_groups, make_report, one_line
from dotformer.errors import DataError, MissingDataError, require_extra

_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}


def load_hf(name_or_path: str, options: CorpusOptions) -> Corpus:
    """Read pairs with ``datasets.load_dataset`` (see the module docstring for what ``name_or_path`` may be).

    Args:
        name_or_path: the part of the spec after ``"hf:"``.
        options: ``hf_config``, ``hf_split``, ``hf_data_files``, ``hf_cache_dir``, ``source_field``,
            ``target_field``, ``empty_lines``, ``task``.

    Returns:
        A :class:`Corpus` named ``"hf:NAME_OR_PATH"``, task ``options.task or "translation"``, no groups; the report
        counts ``read`` rows, kept ``pairs``, ``dropped`` by reason and ``whitespace_replaced`` (fields whose tabs or
        line breaks became spaces).

    Raises:
        MissingDataError: ``datasets`` is not installed, or the dataset or its files cannot be found.
        DataError: the dataset cannot be loaded, lacks a field (the message lists the fields), holds a value
            that is not text, or has an empty side with ``empty_lines="error"`` (``row N`` in the message).
    """
    datasets = require_extra("datasets", "datasets", "hf: corpora")
    spec = f"hf:{name_or_path}"
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
        dataset = datasets.load_dataset(builder, options.hf_config, **arguments)
    except (FileNotFoundError, ConnectionError) as exc:
        raise MissingDataError(f"{spec}: cannot find the dataset or its files ({type(exc).__name__}: {exc})") from None
    except Exception as exc:  # datasets raises many types (ValueError, DatasetGenerationError, ...): report any
        raise DataError(f"{spec}: datasets could not load it ({type(exc).__name__}: {exc})") from None
    sources, targets = _columns(dataset, options, spec)
    dropped: Counter[str] = Counter()
    replaced: Counter[str] = Counter()
    pairs: list[Pair] = []
    for row, (source, target) in enumerate(zip(sources, targets, strict=True)):
        where = f"{spec} ({options.hf_split}) row {row}"
        source, target = _text(source, options.source_field, where), _text(target, options.target_field, where)
        source, target = one_line(source, replaced), one_line(target, replaced)
        if check_empty(source, target, where, options, dropped):
            pairs.append(Pair(source, target))
    report = make_report(len(sources), len(pairs), dropped, split=options.hf_split, config=options.hf_config)
    report.update(replaced)
    task = options.task or "translation"
    return Corpus(name=spec, task=task, pairs=pairs, groups=file_groups(task, pairs), report=report)


def _columns(dataset: Any, options: CorpusOptions, spec: str) -> tuple[list[Any], list[Any]]:
    """The source and target columns, from flat fields or from the "translation" dict.

    Raises:
        DataError: a field is missing (the message lists the dataset's fields and translation keys).
    """
    columns = list(dataset.column_names)
    fields = (options.source_field, options.target_field)
    if all(name in columns for name in fields):
        return list(dataset[options.source_field]), list(dataset[options.target_field])
    if "translation" in columns:
        translations = dataset["translation"]
        keys = sorted(translations[0]) if len(translations) and isinstance(translations[0], dict) else []
        if all(name in keys for name in fields):
            return [item.get(fields[0]) for item in translations], [item.get(fields[1]) for item in translations]
        raise DataError(
            f"{spec}: the translation dicts have keys {keys}, not {list(fields)}; set source_field/target_field"
        )
    raise DataError(
        f"{spec}: no field(s) {[name for name in fields if name not in columns]}; the dataset has {columns}; "
        f"set CorpusOptions.source_field/target_field"
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
