"""The flags that say how to read data files, shared by ``dotformer train`` and ``dotformer evaluate``.

Each entry is ``(flag, DataConfig field, argparse keywords)``; every flag defaults to None ("not given"), so that
a flag overrides the config file (train) or the checkpoint's own reader settings (evaluate) only when it is given.
The same names are the keys of a TOML config's ``[data]`` table.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from dotformer.data.read.types import FILE_TASKS, parse_column
from dotformer.data.read.types import TASKS as PAIR_TASKS
from dotformer.runs.tasks import TASKS


def column_flag(text: str) -> int | str:
    """``--source-column``/``--target-column``: digits -> a 0-based number, anything else -> a header name.

    A negative number ``-N`` becomes the int -N, which :func:`reader_values` refuses in one line naming the flag,
    rather than being read as the name of a header column.
    """
    stripped = text.strip()
    if stripped.startswith("-") and stripped[1:].isdigit():
        return int(stripped)  # refused by the data options' check, in one line naming the flag
    return parse_column(text)


def named_by_flags(message: str, flags: Mapping[str, str]) -> str:
    """``DataConfig.delimiter must be ...`` -> ``--delimiter must be ...``: a message that starts with a field (bare,
    or after a config class's name: ``TrainConfig.``, ``LMDataConfig.``) that ``flags`` maps to the flag that set
    it; any other message as it is."""
    import re

    match = re.match(r"(?:\w*Config\.)?(\w+) ", message)
    if match is None or match.group(1) not in flags:
        return message
    return f"{flags[match.group(1)]} {message[match.end() :]}"


def comma_list(text: str) -> tuple[str, ...]:
    """``"a.jsonl,b.jsonl"`` -> ``("a.jsonl", "b.jsonl")`` (empty items dropped)."""
    return tuple(item.strip() for item in text.split(",") if item.strip())


# how to read a file of pairs: train and evaluate
READER_FLAGS: list[tuple[str, str, dict[str, Any]]] = [
    ("--task", "task", dict(choices=[*FILE_TASKS, *(name for name in TASKS if name not in PAIR_TASKS)], help="the "
     "task of your own "
     "files: g2p (WER/PER; a word's pronunciations are its references; char -> symbol tokenizers), translation "
     "(BLEU/chrF; BPE; the default), exact (exact match; char -> char), lm (train: a language model on plain text or "
     "--data bible[:WEB]); an encoder's: mlm (a masked language model of plain text or --data bible), classify "
     "(TEXT<TAB>LABEL lines, or --data bible: verses by the genre of their book), classify-pairs (a label for two "
     "texts together, as in NLI or paraphrase detection: TEXT<TAB>TEXT<TAB>LABEL lines), tag (a label per word: "
     "WORDS<TAB>LABELS lines or CoNLL columns)")),
    ("--delimiter", "delimiter", dict(metavar="C", help="column separator of a TSV/CSV file: one character or tab, "
     "comma, semicolon, pipe, space (default: comma for .csv, else tab)")),
    ("--source-column", "source_column", dict(type=column_flag, metavar="COL", help="column of the source text: a "
     "number counting from 0 (not negative), or a header name (default: column 0 of a 2-column file, or the "
     "header's source/src); a file of 3+ columns needs it")),
    ("--target-column", "target_column", dict(type=column_flag, metavar="COL", help="column of the target text "
     "(default: column 1 of a 2-column file, or the header's target/tgt)")),
    ("--header", "header", dict(action=argparse.BooleanOptionalAction, help="the first row names the columns and is "
     "not a pair (default: yes when a column is given by name)")),
    ("--num-columns", "num_columns", dict(type=int, metavar="N", help="columns every row of a TSV/CSV file must "
     "have (default: as many as the first row)")),
    ("--empty-lines", "empty_lines", dict(choices=["skip", "error"], help="a pair with an empty side: skip it and "
     "count it (default) or stop with FILE:LINE")),
    ("--hf-config", "hf_config", dict(metavar="NAME", help="hf: datasets: the configuration, e.g. de-en for "
     "hf:wmt14")),
    ("--hf-split", "hf_split", dict(metavar="SPLIT", help="hf: datasets: the split read (train: train; evaluate: "
     "test), e.g. 'train[:10000]'")),
    ("--source-field", "source_field", dict(metavar="F", help="hf: datasets: the source column or translation key, "
     "e.g. de (default: source)")),
    ("--target-field", "target_field", dict(metavar="F", help="hf: datasets: the target column or translation key, "
     "e.g. en (default: target)")),
    ("--hf-data-files", "hf_data_files", dict(type=comma_list, metavar="F1,F2", help="hf: generic builders "
     "(hf:json, hf:csv, hf:parquet): the data files")),
    ("--hf-cache-dir", "hf_cache_dir", dict(metavar="DIR", help="hf: datasets' cache directory")),
]  # fmt: skip

# only train: given splits, existing tokenizers, the other corpora's options
TRAIN_DATA_FLAGS: list[tuple[str, str, dict[str, Any]]] = [
    ("--valid", "valid", dict(metavar="VALID", help="validation pairs of their own (a TSV/CSV file, SRC,TGT files "
     "or hf:NAME): nothing is split at random; without --test there is no test split")),
    ("--test", "test", dict(metavar="TEST", help="test pairs of their own, saved as the run's data/test.tsv "
     "(without --valid, the validation split is drawn from --data by --valid-fraction)")),
    ("--hf-valid-split", "hf_valid_split", dict(metavar="SPLIT", help="hf: the split of an hf: --valid "
     "(default: validation)")),
    ("--hf-test-split", "hf_test_split", dict(metavar="SPLIT", help="hf: the split of an hf: --test (default: "
     "test)")),
    ("--src-tokenizer-file", "src_tokenizer_file", dict(metavar="FILE", help="an existing source tokenizer: a "
     "Hugging Face tokenizer.json or a sentencepiece .model (saved with the checkpoints)")),
    ("--tgt-tokenizer-file", "tgt_tokenizer_file", dict(metavar="FILE", help="an existing target tokenizer (the "
     "same file as --src-tokenizer-file: one shared vocabulary)")),
    ("--sword-path", "sword_path", dict(metavar="DIR", help="bible: the SWORD library root (default: $SWORD_PATH, "
     "~/.sword, /usr/share/sword)")),
    ("--bible-max-ratio", "bible_max_ratio", dict(type=float, metavar="R", help="bible: drop verse pairs whose "
     "length ratio exceeds R (default 2)")),
    ("--bible-check-alignment", "bible_check_alignment", dict(action=argparse.BooleanOptionalAction, help="bible: "
     "drop chapters whose verse numbering differs between the modules (default on)")),
    ("--synthetic-examples", "synthetic_examples", dict(type=int, metavar="N", help="copy/reverse: number of "
     "sequences (default 10000)")),
    ("--synthetic-symbols", "synthetic_symbols", dict(type=int, metavar="V", help="copy/reverse: distinct symbols, "
     "at most 260 (default 20)")),
    ("--synthetic-min-len", "synthetic_min_len", dict(type=int, metavar="L", help="copy/reverse: shortest sequence "
     "(default 1)")),
    ("--synthetic-max-len", "synthetic_max_len", dict(type=int, metavar="L", help="copy/reverse: longest sequence "
     "(default 10)")),
    ("--synthetic-seed", "synthetic_seed", dict(type=int, metavar="N", help="copy/reverse: seed of the sequences "
     "(default 0)")),
    ("--mlm-unit", "mlm_unit", dict(choices=["lines", "blocks"], help="--task mlm: one line an example (a longer "
     "one cut into pieces of --block-size), or blocks of --block-size tokens of running text across line ends "
     "(default lines)")),
    ("--mask-probability", "mask_probability", dict(type=float, metavar="P", help="--task mlm: share of the tokens "
     "masked (default 0.15; BERT's recipe: 80%% [MASK], 10%% a random token, 10%% kept)")),
    ("--tag-format", "tag_format", dict(choices=["conll", "tsv"], help="--task tag: the file's form: CoNLL columns "
     "(WORD ... LABEL lines, a blank line between sentences) or WORDS<TAB>LABELS lines (default: from the file)")),
    ("--label-subtokens", "label_subtokens", dict(choices=["first", "all"], help="--task tag: a word's label on its "
     "first token (default, the standard way) or on all its tokens; predictions read the first")),
]  # fmt: skip


def add_reader_arguments(parser: argparse.ArgumentParser) -> None:
    """Add :data:`READER_FLAGS` with ``dest="opt_FIELD"`` and default None."""
    group = parser.add_argument_group("reading the data file")
    for flag, field, kwargs in READER_FLAGS:
        group.add_argument(flag, dest=f"opt_{field}", default=None, **kwargs)


def reader_values(args: argparse.Namespace) -> dict[str, Any]:
    """The :data:`READER_FLAGS` given on the command line, as DataConfig field -> value.

    Raises:
        ConfigError: a negative ``--source-column``/``--target-column`` (columns count from 0, not from the end).
    """
    values = {field: getattr(args, f"opt_{field}", None) for _, field, _ in READER_FLAGS}
    for flag, field in (("--source-column", "source_column"), ("--target-column", "target_column")):
        value = values.get(field)
        if isinstance(value, int) and value < 0:
            from dotformer.errors import ConfigError

            raise ConfigError(
                f"{flag} {value}: a column is a number counting from 0 (the first column is 0) or a header name; "
                f"negative numbers do not count from the end"
            )
    return {field: value for field, value in values.items() if value is not None}
